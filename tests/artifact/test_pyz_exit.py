"""A short command's exit without the interpreter's last collection (bkmcp.py 11.5,
``_end_without_a_last_collection``; docs/building.md "Fast start"), at the real entry point on every Python 3.9-3.14.

The heap is frozen once httpx has loaded, and the exit collects once and freezes the rest, so the interpreter's
collections while it tears the modules down look at nothing. That is exact only if nothing then has a finalizer
that would act when those collections reach it. Each command here runs the pyz's ``__main__`` as ``python
bkmcp.pyz`` does (runpy, zipimport's loader) in a fresh interpreter whose own exit handler was registered before
bkmcp's, so it runs after it: it finds the objects frozen, unfreezes them and lists every open socket or file,
child process, suspended generator, SQLite connection, other object with ``__del__`` and pending
``weakref.finalize`` that bkmcp made, garbage or not (what the interpreter made before it started, the standard
streams and a site ``.pth``'s objects, is left out).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from artifact_helpers import ROOT, TIMEOUT

from mock_server.mcp_mock import SKILLS_EXTENSION, TASK_CAPABILITIES, MockServer, mock_tool

MOCK = str(ROOT / "mock_server" / "mcp_mock.py")

PROBE = r"""
import atexit, gc, io, runpy, signal, socket, subprocess, sys, weakref

def acts(obj):
    kind = type(obj)
    if isinstance(obj, socket.socket):
        return "socket %r" % (obj,) if obj.fileno() != -1 else None
    if isinstance(obj, io.IOBase):
        return None if obj.closed else "file %r" % (obj,)
    if isinstance(obj, subprocess.Popen):  # a reaped child's finalizer does nothing (its pipes are files, above)
        return None if obj.returncode is not None else "child pid %s, not reaped" % (obj.pid,)
    if kind.__name__ in ("generator", "coroutine", "async_generator"):
        frame = getattr(obj, "gi_frame", None) or getattr(obj, "cr_frame", None) or getattr(obj, "ag_frame", None)
        if frame is not None and frame.f_lasti >= 0:
            return "suspended %r at %s:%s" % (obj, frame.f_code.co_filename, frame.f_lineno)
        return None
    if kind.__module__ == "sqlite3" and kind.__name__ == "Connection":
        return "sqlite3 %r" % (obj,)
    if any("__del__" in vars(k) for k in kind.__mro__ if k.__module__ != "builtins"):
        return "__del__ %s.%s" % (kind.__module__, kind.__qualname__)
    return None

def inventory():
    import json, os

    frozen = gc.get_freeze_count() - frozen_before
    gc.unfreeze()
    found = [acts(obj) for obj in gc.get_objects() if id(obj) not in before]
    pending = [repr(f) for f in list(weakref.finalize._registry) if f.alive and not f.atexit]
    with open(os.environ["EXIT_INVENTORY"], "w") as out:
        json.dump({"frozen": frozen, "found": [f for f in found if f], "finalize": pending}, out)

# what the interpreter made before bkmcp started (the standard streams, a site .pth's objects) is not bkmcp's
frozen_before = gc.get_freeze_count()
kept = [obj for obj in gc.get_objects() if acts(obj)]
before = {id(obj) for obj in kept}
atexit.register(inventory)
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # a background shell's; a terminal's Ctrl-C reaches Python's
    signal.signal(signal.SIGINT, signal.default_int_handler)
pyz = sys.argv[1]
sys.argv = [pyz] + sys.argv[2:]
runpy.run_path(pyz, run_name="__main__")
"""


def _start(python: str, pyz: Path, args: list[str], env: dict, inventory: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [python, "-c", PROBE, str(pyz), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env, EXIT_INVENTORY=str(inventory)),
    )


def _finish(proc: subprocess.Popen, inventory: Path) -> tuple[int, dict, str]:
    out, err = proc.communicate(timeout=TIMEOUT)
    assert inventory.exists(), f"no inventory (exit {proc.returncode}): {err[-2000:]}"
    found = json.loads(inventory.read_text())
    inventory.unlink()
    return proc.returncode, found, out + err


def test_a_short_commands_exit_leaves_nothing_a_finalizer_would_act_on(
    python: str, pyz_path: Path, pyz_env: dict, tmp_path: Path
) -> None:
    slow = mock_tool("nap", "slow", ms=20_000)
    job = mock_tool("job", "job", after_ms=100, poll_ms=30)  # issue 39: a call run as a task
    job["execution"] = {"taskSupport": "optional"}
    tools = [mock_tool("echo", properties={"text": {"type": "string"}}), slow, job]
    extensions = {**TASK_CAPABILITIES["extensions"], SKILLS_EXTENSION: {}}
    capabilities = {**TASK_CAPABILITIES, "extensions": extensions}
    server = MockServer({"tools": tools, "page_size": 1, "skills": True, "capabilities": capabilities})
    url = server.start()
    stdio = [sys.executable, MOCK, "--stdio", "--quiet"]
    servers = {
        "mock": {"type": "http", "url": url},
        "dead": {"type": "http", "url": "http://127.0.0.1:9/mcp"},
        "st": {"type": "stdio", "command": stdio[0], "args": stdio[1:]},
        "crash": {"type": "stdio", "command": "sh", "args": ["-c", "echo boom >&2; exit 3"]},
        "silent": {"type": "stdio", "command": "sleep", "args": ["30"]},
    }
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": servers}))
    registry, inventory = tmp_path / "registry.db", tmp_path / "inventory.json"
    env = {k: v for k, v in pyz_env.items() if k != "XDG_RUNTIME_DIR"}  # the background process's folder: TMPDIR's
    env["XDG_STATE_HOME"] = str(tmp_path / "state")  # the task handles (issue 39)
    base = ["--config", str(config)]
    cases = [
        (base + ["mock", "--tools"], 0),
        (base + ["mock", "echo", "--text", "hi"], 0),
        (base + ["mock", "echo", "--text", "hi", "--count", "x"], 1),  # refused before anything is sent
        (base + ["--jq", ".data.tools[].name", "mock", "--tools"], 0),
        (base + ["mock", "echo", "--help"], 0),
        (base + ["mock", "echo", "--body", '{"text": "x"}', "--dry-run"], 0),
        (base + ["dead", "--tools"], 2),
        (base + ["st", "--tools"], 0),
        (base + ["st", "echo", "--text", "hi"], 0),
        (base + ["mock", "--resources"], 0),  # issue 38: resources and prompts, through the same session engine
        (base + ["st", "--read", "mock://notes/{id}", "--id", "1", "-r"], 0),
        (base + ["mock", "--prompt", "greet", "--who", "x"], 0),
        (base + ["mock", "--read", "mock://images/dot.png", "--out", str(tmp_path / "out")], 0),  # the directory fd
        (base + ["mock", "--skills"], 0),  # SEP-2640 (issue 38 item 5): a skill session, one-shot
        (base + ["mock", "--skill", "pdf-processing", "--out", str(tmp_path / "out")], 0),
        (base + ["mock", "--skill", "tampered"], 2),  # refused: nothing printed but the error
        (base + ["mock", "job", "--task"], 0),  # polled until it ends, the result printed
        (base + ["mock", "job", "--detach"], 0),  # the handle kept in the store, the session left open
        (base + ["mock", "--tasks"], 0),
        (base + ["crash", "--tools"], 2),
        (base + ["--timeout", "1s", "silent", "--tools"], 2),
        (base + ["--keep-alive", "mock", "--tools"], 0),  # starts the background process
        (base + ["--keep-alive", "mock", "echo", "--text", "hi"], 0),  # answered by it
        (["--sessions", "--stop"], 0),
        (["--registry", str(registry), "--import", str(config)], 0),
        (["--registry", str(registry), "--list"], 0),
        (["--help"], 0),
    ]
    try:
        for args, status in cases:
            code, found, err = _finish(_start(python, pyz_path, args, env, inventory), inventory)
            assert code == status, (args, code, err[-2000:])
            assert found["frozen"] > 0, (args, "bkmcp's exit handler did not run before the inventory")
            assert found["found"] == [] and found["finalize"] == [], (args, found)

        # --keep-alive where the background process's folder is refused (not a directory): one warning, one-shot
        refused = tmp_path / "refused"
        refused.mkdir()
        (refused / f"bkmcp-{os.getuid()}").write_text("not a directory")
        args = base + ["--keep-alive", "mock", "--tools"]
        code, found, err = _finish(_start(python, pyz_path, args, dict(env, TMPDIR=str(refused)), inventory), inventory)
        assert code == 0 and "one-shot" in err, (code, err[-2000:])
        assert found["frozen"] > 0 and found["found"] == [] and found["finalize"] == [], found

        # Ctrl-C once the server runs the call: mcp_cancelled, exit 130, and the same clean exit
        calls = len(server.requests("tools/call"))
        proc = _start(python, pyz_path, base + ["mock", "nap"], env, inventory)
        deadline = time.monotonic() + TIMEOUT
        while len(server.requests("tools/call")) == calls and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        code, found, err = _finish(proc, inventory)
        assert code == 130 and '"mcp_cancelled"' in err, (code, err[-2000:])
        assert found["frozen"] > 0 and found["found"] == [] and found["finalize"] == [], found

        # the resident keeps the interpreter's own exit (stdin at its end: it stops): nothing frozen
        resident = ["--resident", "--registry", str(registry)]
        code, found, err = _finish(_start(python, pyz_path, resident, env, inventory), inventory)
        assert code == 0 and found["frozen"] == 0, (code, found, err[-2000:])
    finally:
        server.stop()
        subprocess.run([python, str(pyz_path), "--sessions", "--stop"], env=env, capture_output=True, timeout=TIMEOUT)
