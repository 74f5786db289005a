"""Cold-start concurrency (issue 16 item 6a): fresh resident processes that receive a burst of commands across every
server kind before any answer is read. Every lazily initialised global (httpx, jsonschema's validator classes,
``JsonNumber``, the pyz's deferred sections and its vendored-package finder) meets its first use on many threads at
once; no answer may be ``internal_error``. Shared by tests/integration/test_resident_cold_start.py (source tree) and
tests/artifact/test_pyz_resident.py (the built pyz).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from resident_harness import ROOT, group_alive, http_row, mock_stdio, stdio_row, write_registry

from mock_server.mcp_mock import DEFAULT_TOOLS, MockServer

USERS = ("u0", "u1", "u2", "u3")
WAIT = 120.0  # a hard safety net, never a performance threshold


def write_world(tmp: Path, srv: MockServer) -> Path:
    """A registry with a public and a per-user server of each transport (every server kind)."""
    rows = [
        http_row("ph", srv.url),
        http_row("uh", srv.url, isolation="user", headers={"X-Tenant": "${user.token}"}),
        stdio_row("ps", mock_stdio({"tools": DEFAULT_TOOLS}), isolation="public"),
        stdio_row("us", mock_stdio({"tools": DEFAULT_TOOLS}), isolation="user"),
    ]
    users = {(u, s): {"token": f"tok-{u}"} for u in USERS for s in ("uh", "us")}
    reg = tmp / "registry.db"
    write_registry(str(reg), rows, {}, users)
    return reg


def burst(count: int) -> bytes:
    """``count`` command lines: mostly calls (with a non-integer number, so JsonNumber is made on first use too),
    spread over the four servers and the users, plus catalogue and server-list commands."""
    lines = []
    servers = ("ph", "uh", "ps", "us")
    for i in range(count):
        user = USERS[i % len(USERS)]
        kind = i % 25
        params: dict[str, Any]
        if kind == 0:
            params = {"action": "list_tools"}
        elif kind == 1:
            params = {"action": "list_servers"}
        elif kind == 2:
            params = {"action": "connect_server", "server_name": servers[(i // 25) % 4]}
        else:
            params = {
                "action": "call_tool",
                "server_name": servers[i % 4],
                "tool_name": "echo",
                "arguments": {"text": f"c{i}"},
            }
        text = json.dumps({"command": "invoke", "task_id": f"c{i}", "params": params, "user": {"userId": user}})
        if params["action"] == "call_tool":
            text = text.replace('"arguments": {', '"arguments": {"ratio": 0.5, ', 1)
        lines.append(text)
    return ("\n".join(lines) + "\n").encode()


def run_one(argv: list[str], data: bytes, env: dict[str, str]) -> tuple[list[dict[str, Any]], list[int], str]:
    """Start one fresh resident process, write every command before reading any answer, then EOF; its answers,
    the children it started (from its events) and its stderr."""
    events = Path(argv[argv.index("--events") + 1])
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        out, err = proc.communicate(data, timeout=WAIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"a resident process did not finish: {err.decode(errors='replace')[-2000:]}") from None
    answers = [json.loads(line) for line in out.splitlines() if line.strip()]
    pids = []
    if events.is_file():
        pids = [json.loads(line)["pid"] for line in events.read_text().splitlines() if '"process.started"' in line]
    return answers, pids, err.decode("utf-8", "replace")


def run_cold_starts(
    tmp: Path,
    *,
    processes: int = 20,
    commands: int = 500,
    parallel: int = 2,
    pyz: Path | None = None,
    python: str | None = None,
    env: dict[str, str] | None = None,
) -> list[str]:
    """``processes`` fresh residents (``parallel`` at a time), ``commands`` each; the problems found (empty: none)."""
    import os

    srv = MockServer({"tools": DEFAULT_TOOLS})
    srv.start()
    problems: list[str] = []
    lock = threading.Lock()
    try:
        reg = write_world(tmp, srv)
        data = burst(commands)
        base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"), **(env or {})}
        program = str(pyz if pyz is not None else ROOT / "bkmcp.py")
        todo = list(range(processes))

        def worker() -> None:
            while True:
                with lock:
                    if not todo:
                        return
                    n = todo.pop()
                argv = [python or sys.executable, program, "--resident", "--registry", str(reg)]
                argv += ["--events", str(tmp / f"events-{n}.jsonl")]
                answers, pids, err = run_one(argv, data, base)
                found = []
                if len(answers) != commands:
                    found.append(f"process {n}: {len(answers)} answers for {commands} commands")
                bad = [a for a in answers if a.get("error_code") == "internal_error" or a.get("success") is not True]
                found += [f"process {n}: {json.dumps(a)[:400]}" for a in bad[:5]]
                left = [p for p in pids if group_alive(p)]
                if left:
                    found.append(f"process {n}: children left {left}")
                if "Traceback" in err:
                    found.append(f"process {n}: traceback on stderr: {err[-1500:]}")
                with lock:
                    problems.extend(found)

        threads = [threading.Thread(target=worker) for _ in range(parallel)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        srv.stop()
    return problems
