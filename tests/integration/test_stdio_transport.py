"""stdio transport (contract.md §9, §5 stdio era rules, §8 verbose) over real pipes against ``mock_server/mcp_mock.py
--stdio``. Assertions are on what the SERVER received (its JSON-lines ``--log``), on the processes left behind
(``/proc``), and on the envelope.

Seed rows: R01 (versions pinned and probed on stdio), R03 (crash mid-call: outcome unknown, never resent),
C04 (``${VAR}`` expansion reaching the child), O01 (secrets never printed).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

import bkmcp
from mock_server.mcp_mock import mock_tool
from tests.helpers import (
    LEGACY,
    VERSIONS,
    before_the_answer_was_due,
    kill_groups,
    proc_stats,
    process_running,
    run_bkmcp,
    until,
    write_mcp_json,
)

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
MOCK = str(ROOT / "mock_server" / "mcp_mock.py")
MODERN = "2026-07-28"
SECRET = "s3cr3t-T0ken-value-9f8e7d"


class StdioTarget:
    """A config whose server ``name`` runs the mock on stdio; ``log()`` is what the mock(s) received."""

    def __init__(
        self,
        tmp_path: Path,
        scenario: dict | None,
        *,
        protocol_version: str | None = None,
        wrapper: str | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        extra_args: list[str] | None = None,
        command: str | None = None,
        args: list[str] | None = None,
        name: str = "s",
    ) -> None:
        self.tmp = tmp_path
        self.name = name
        self.log_path = tmp_path / "mock-log.jsonl"
        self.pid_path = tmp_path / "pids.txt"
        scenario_path = tmp_path / "scenario.json"
        scenario_path.write_text(json.dumps(scenario or {}), encoding="utf-8")
        mock_argv = [
            MOCK,
            "--stdio",
            "--scenario",
            str(scenario_path),
            "--log",
            str(self.log_path),
            *(extra_args or []),
        ]
        entry: dict[str, Any] = {"type": "stdio"}
        if command is not None:
            entry["command"] = command
            entry["args"] = args or []
        elif wrapper is not None:
            # A python prologue that runs in the server process itself, then the mock (same pid).
            code = (
                f"import os, runpy, sys\nPIDS = {str(self.pid_path)!r}\nMOCK_ARGV = {mock_argv!r}\n{wrapper}\n"
                "sys.argv = MOCK_ARGV\nrunpy.run_path(MOCK_ARGV[0], run_name='__main__')\n"
            )
            entry["command"] = sys.executable
            entry["args"] = ["-c", code]
        else:
            entry["command"] = sys.executable
            entry["args"] = mock_argv
        if env is not None:
            entry["env"] = env
        if cwd is not None:
            entry["cwd"] = cwd
        if protocol_version is not None:
            entry["protocolVersion"] = protocol_version
        self.config = write_mcp_json(tmp_path, {name: entry})

    def run(self, *args: str, env: dict[str, str] | None = None):
        """bkmcp in-process; every run is bounded (--timeout 20s unless the test sets one)."""
        bound = () if "--timeout" in args else ("--timeout", "20s")
        return run_bkmcp("--config", str(self.config), *bound, *args, env=env)

    def log(self) -> list[dict]:
        if not self.log_path.exists():
            return []
        return [json.loads(line) for line in self.log_path.read_text(encoding="utf-8").splitlines() if line]

    def methods(self) -> list[Any]:
        """JSON-RPC methods received in order (None for the client's responses to server requests)."""
        return [e["rpc_method"] for e in self.log()]

    def count(self, method: str) -> int:
        return self.methods().count(method)

    def pids(self) -> list[int]:
        return [int(p) for p in self.pid_path.read_text().split()] if self.pid_path.exists() else []


def _run_as_another_user(argv: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    """bkmcp run by a user who is denied what the test locks: uid 65534 when the tests run as root (root passes
    every permission check), else the test's own user. Its files live in ``home`` (0755)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "XDG_RUNTIME_DIR": str(home)}
    if os.geteuid() == 0:
        assert os.access("/usr/bin/python3", os.X_OK), "the root run needs /usr/bin/python3 for uid 65534"
        return subprocess.run(
            ["/usr/bin/python3", *argv], capture_output=True, text=True, timeout=60, env=env, cwd=home,
            user=65534, group=65534, extra_groups=[],
        )  # fmt: skip
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=60, env=env, cwd=home)


@pytest.mark.parametrize("what", ["command", "cwd"])
def test_a_command_or_cwd_behind_a_folder_the_user_cannot_search_is_permission_denied(what):
    """``command`` (or ``cwd``) in a folder whose parent the user may not search is not "does not exist": the error
    says permission denied. The server never starts (its start would leave a mark file)."""
    home = Path(tempfile.mkdtemp(prefix="bkmcp-perm-"))
    try:
        home.chmod(0o755)
        shutil.copy(ROOT / "bkmcp.py", home / "bkmcp.py")
        locked = home / "locked"
        (locked / "bin").mkdir(parents=True)
        mark = home / "started"
        server = locked / "bin" / "server"
        server.write_text(f"#!/bin/sh\ntouch {mark}\n")
        server.chmod(0o755)
        locked.chmod(0o700)  # owner only: the other user cannot search it (nor, as root, uid 65534)
        entry = {"type": "stdio", "command": str(server)}
        if what == "cwd":
            entry = {"type": "stdio", "command": "/bin/sh", "args": ["-c", f"touch {mark}"], "cwd": str(locked / "bin")}
        (home / "mcp.json").write_text(json.dumps({"mcpServers": {"s": entry}}))
        (home / "mcp.json").chmod(0o644)
        if os.geteuid() != 0:
            locked.chmod(0o600)  # not even searchable by its owner
        res = _run_as_another_user([str(home / "bkmcp.py"), "--config", str(home / "mcp.json"), "s", "--check"], home)
        error = json.loads(res.stdout)["error"]
        assert res.returncode == 2 and error["code"] == "mcp_connection_error", res.stdout + res.stderr
        assert "permission denied" in error["message"] and "does not exist" not in error["message"], error
        assert not mark.exists()
    finally:
        locked.chmod(0o700)
        shutil.rmtree(home)


@pytest.fixture
def stdio_mock(tmp_path: Path):
    made: list[StdioTarget] = []

    def make(scenario: dict | None = None, **kwargs: Any) -> StdioTarget:
        sub = tmp_path / f"t{len(made)}"
        sub.mkdir()
        target = StdioTarget(sub, scenario, **kwargs)
        made.append(target)
        return target

    return make


STDIN_TEE = """
import threading
_r, _w = os.pipe()
def _tee(src=os.dup(0), dst=_w, path=os.path.join(os.path.dirname(PIDS), 'stdin.jsonl')):
    with open(src, 'rb', buffering=0) as inp, open(path, 'ab', buffering=0) as rec:
        for line in iter(inp.readline, b''):
            rec.write(line)
            os.write(dst, line)
    os.close(dst)
os.dup2(_r, 0)
threading.Thread(target=_tee, daemon=True).start()
"""


def alive(pid: int) -> bool:
    """True while ``pid`` is a running (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def spawns(stderr: str) -> int:
    return stderr.count("stdio server started (pid")


def assert_modern_stdio(target: StdioTarget) -> None:
    for entry in target.log():
        assert "headers" not in entry or not entry["headers"]
        meta = entry["json"]["params"]["_meta"]
        assert meta["io.modelcontextprotocol/protocolVersion"] == MODERN
        assert meta["io.modelcontextprotocol/clientCapabilities"] == {}
        assert meta["io.modelcontextprotocol/clientInfo"]["name"] == "bkmcp"
    assert target.count("initialize") == 0


def assert_legacy_stdio(target: StdioTarget, offered: str) -> None:
    received = [e for e in target.log() if e["rpc_method"] != "server/discover"]
    assert received[0]["rpc_method"] == "initialize"
    assert received[0]["json"]["params"]["protocolVersion"] == offered
    assert received[1]["rpc_method"] == "notifications/initialized"
    for entry in received:
        params = dict(entry["json"].get("params") or {})
        if entry["rpc_method"] == "tools/call" and "_meta" in params:  # -v asks for progress (contract §5), no more
            assert list(params.pop("_meta")) == ["progressToken"]
        assert "_meta" not in json.dumps(params)


# -- the version matrix ------------------------------------------------------------------------------------

OPS = {
    "check": ("--check",),
    "tools": ("--tools",),
    "call": ("echo", "--text", "hi", "--count", "12345678901234567890"),
    "help": ("echo", "--help"),
}


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "probed"])
@pytest.mark.parametrize("version", VERSIONS)
def test_stdio_version_matrix_R01(stdio_mock, version, pinned, op):
    """R01 on stdio: every operation for each version, pinned (no probe) and unpinned against a server that only
    speaks that version (modern: discover answers; legacy: discover gets -32601 -> initialize offering
    2025-11-25, the server's choice accepted). One process per operation."""
    target = stdio_mock({"versions": [version], "page_size": 2}, protocol_version=version if pinned else None)
    result = target.run(target.name, *OPS[op], "-v")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert spawns(result.stderr) == 1
    methods = target.methods()
    pages = ["tools/list"] * 3
    tail = {"check": pages, "tools": pages, "help": pages, "call": [*pages, "tools/call"]}[op]
    if version in LEGACY:
        probe = [] if pinned else ["server/discover"]
        assert methods == [*probe, "initialize", "notifications/initialized", *tail]
        assert_legacy_stdio(target, version if pinned else "2025-11-25")
    else:
        discover = ["server/discover"] if (not pinned or op == "check") else []
        assert methods == [*discover, *tail]
        assert_modern_stdio(target)
    if op == "help":
        assert "bkmcp s echo" in result.stdout and target.count("tools/call") == 0
        return
    data = result.json["data"]
    if op == "check":
        assert data["transport"] == "stdio" and data["protocol_version"] == version
        assert data["era"] == ("legacy" if version in LEGACY else "modern")
        assert data["checks"] == {"config": "passed", "connection": "passed", "protocol": "passed", "tools": "passed"}
        assert data["server_info"]["name"] == "mcp-mock" and data["tool_count"] == 5
    elif op == "tools":
        assert data["tool_count"] == 5 and data["complete"] is True and data["protocol_version"] == version
    else:
        assert data["result"]["structuredContent"]["arguments"] == {"text": "hi", "count": 12345678901234567890}
        call = target.log()[-1]
        assert call["json"]["params"]["arguments"] == {"text": "hi", "count": 12345678901234567890}
        assert '"count":12345678901234567890' in call["body"]


def test_stdio_dual_era_server_probes_modern(stdio_mock):
    """Unpinned against a dual-era server: server/discover decides modern, no initialize (R01)."""
    target = stdio_mock()
    result = target.run(target.name, "--tools")
    assert result.exit_status == 0, result.stdout
    assert target.methods() == ["server/discover", "tools/list"]
    assert_modern_stdio(target)


def test_stdio_legacy_server_that_never_answers_discover_probe_window(stdio_mock):
    """A legacy-only server that ignores unknown methods: no answer within the probe window (2 s) -> initialize
    on the same process (no restart), the late nothing never confuses the flow."""
    target = stdio_mock({"versions": ["2025-06-18"], "stdio_unknown_method": "silent"})
    started = time.monotonic()
    result = target.run(target.name, "echo", "--text", "x", "-v")
    elapsed = time.monotonic() - started
    assert result.exit_status == 0, result.stdout + result.stderr
    assert target.methods() == [
        "server/discover",
        "initialize",
        "notifications/initialized",
        "tools/list",
        "tools/call",
    ]
    assert spawns(result.stderr) == 1
    assert "no answer within the probe window" in result.stderr
    assert elapsed >= 2.0
    assert result.json["data"]["result"]["structuredContent"]["arguments"] == {"text": "x"}


def test_stdio_probe_window_is_inside_the_budget(stdio_mock):
    """With --timeout shorter than the probe window, a silent server is an mcp_timeout of the whole operation
    (the probe never outlives --timeout)."""
    target = stdio_mock({"versions": ["2025-11-25"], "stdio_unknown_method": "silent"})
    result = target.run("--timeout", "700ms", target.name, "--tools")
    assert result.exit_status == 2 and result.error_code == "mcp_timeout", result.stdout
    assert "700ms" in result.json["error"]["message"]
    assert target.methods() == ["server/discover"]


def test_stdio_server_that_exits_on_unknown_method_is_restarted(stdio_mock):
    """A legacy server that exits on the pre-initialize discover (like the Rust SDK): the child is restarted and
    the fresh one gets initialize first; the era verdict is legacy."""
    target = stdio_mock({"versions": ["2025-11-25"], "stdio_unknown_method": "exit"})
    result = target.run(target.name, "--check", "-v")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert spawns(result.stderr) == 2
    assert "the server exited" in result.stderr
    assert target.methods() == ["server/discover", "initialize", "notifications/initialized", "tools/list"]
    assert result.json["data"]["era"] == "legacy"


def test_stdio_slow_server_that_exits_on_unknown_method_is_restarted_for_initialize(stdio_mock):
    """Slower to start than the probe window AND stopping on any pre-initialize request: the window waits for it to
    read the probe, it exits on it, and a fresh child gets initialize first (once)."""
    target = stdio_mock(
        {"versions": ["2025-11-25"], "stdio_unknown_method": "exit"}, wrapper="import time; time.sleep(2.3)"
    )
    result = target.run(target.name, "--tools", "-v")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert spawns(result.stderr) == 2
    assert target.methods() == ["server/discover", "initialize", "notifications/initialized", "tools/list"]
    assert target.count("initialize") == 1  # the first child exited on discover, before reading initialize


SLOW_START_S = 3.0  # longer than the 2 s probe window: start-up spent before the server reads its stdin


@pytest.mark.parametrize("start_s", [SLOW_START_S])
def test_stdio_slow_starting_dual_era_server_gets_the_modern_era(stdio_mock, start_s):
    """Issue 27 item 3 (contract §5): the probe window starts when the server has READ the probe, so a dual-era server
    that sleeps ``start_s`` before reading its stdin (npx, module loading under load) is modern at once: it never
    receives initialize. Before, the window ran from the write: initialize was sent behind the unread probe."""
    target = stdio_mock(None, wrapper=f"import time; time.sleep({start_s})")
    result = target.run("--timeout", "60s", target.name, "--check", "-v")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert (result.json["data"]["era"], result.json["data"]["protocol_version"]) == ("modern", MODERN)
    assert target.methods() == ["server/discover", "tools/list"]
    assert_modern_stdio(target)
    assert spawns(result.stderr) == 1
    assert "era probe: the server read" in result.stderr


def test_stdio_slow_starting_legacy_server_that_ignores_the_probe_gets_legacy_within_the_budget(stdio_mock):
    """Issue 27 item 3: a legacy server that starts late and then ignores the probe is judged by the window once it
    has read the probe, not by the whole budget: the command succeeds (it would be mcp_timeout had it waited out
    the 60 s) and the server's own log shows initialize after the probe, on the same process."""
    target = stdio_mock(
        {"versions": ["2025-11-25"], "stdio_unknown_method": "silent"},
        wrapper=f"import time; time.sleep({SLOW_START_S})",
    )
    result = target.run("--timeout", "60s", target.name, "--check", "-v")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert (result.json["data"]["era"], result.json["data"]["protocol_version"]) == ("legacy", "2025-11-25")
    assert target.methods() == ["server/discover", "initialize", "notifications/initialized", "tools/list"]
    assert spawns(result.stderr) == 1
    assert "era probe: the server read the probe after" in result.stderr
    assert "no answer within the probe window" in result.stderr


def test_stdio_probe_window_runs_from_the_write_where_the_pipe_cannot_be_asked(stdio_mock, monkeypatch):
    """Where FIONREAD on a pipe's write end does not count (Windows, some systems: bkmcp checks once), the window
    runs from the write as before, and -v says so: a server slower to start than the window gets initialize behind
    the unread probe (then -32022 from this dual-era mock, so modern after all)."""
    monkeypatch.setattr(bkmcp, "_WRITE_END_COUNTS", [False])
    target = stdio_mock(None, wrapper="import time; time.sleep(2.6)")
    result = target.run(target.name, "--tools", "-v")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert target.methods() == ["server/discover", "initialize", "server/discover", "tools/list"]
    assert "when the server reads its stdin cannot be told here" in result.stderr


def test_stdio_server_that_read_the_probe_but_answers_after_the_window_is_switched_to_modern(stdio_mock):
    """The window's remaining limit: a dual-era server that has read the probe but takes longer than the window to
    answer it. Its late answer locked the modern era, so the fallback initialize gets -32022; bkmcp then uses the
    modern era (no restart, no error)."""
    target = stdio_mock({"faults": {"slow_on": {"server/discover": 2600}}})
    result = target.run(target.name, "--tools", "-v")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert spawns(result.stderr) == 1
    assert target.methods() == ["server/discover", "initialize", "server/discover", "tools/list"]
    assert "no answer within the probe window" in result.stderr
    assert "initialize refused with -32022" in result.stderr
    assert result.json["data"]["protocol_version"] == MODERN


# -- failures ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["2025-11-25", MODERN])
def test_stdio_crash_mid_call_outcome_unknown_never_resent_R03(stdio_mock, version):
    """R03: the server exits after receiving tools/call: mcp_connection_error with the exit status and the stderr
    tail, outcome unknown, exactly one tools/call received."""
    scenario = {"tools": [mock_tool("dropper", "drop")], "stderr_lines": ["starting", "about to crash"]}
    target = stdio_mock(scenario, protocol_version=version)
    result = target.run(target.name, "dropper", "--body", "{}")
    assert result.exit_status == 2
    error = result.json["error"]
    assert error["code"] == "mcp_connection_error"
    assert error["outcome"] == "unknown"
    assert error["exit_status"] == 3 and "exited with status 3" in error["message"]
    assert error["server_stderr"][-2:] == ["starting", "about to crash"]
    assert target.count("tools/call") == 1
    assert result.json["data"]["tool"] == "dropper"


PROBE_NOISE = r"""
import json, sys
mode, log = sys.argv[1:]
def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()
def say(line):
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
for line in sys.stdin:
    message = json.loads(line)
    method, rid = message.get("method"), message.get("id")
    with open(log, "a") as received:
        received.write(json.dumps(method) + "\n")
    if method == "server/discover":  # like every mcp 1.x server: log the validation errors, then answer
        if mode == "answer":
            for i in range(96):
                say(f"probe noise {i}: 1 validation error for ClientRequest")
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "Invalid request parameters"}})
        else:  # a legacy server that logs and never answers
            say("ignoring unknown method server/discover")
    elif method == "initialize":
        version = message["params"]["protocolVersion"]
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": version, "capabilities": {"tools": {}},
                                                       "serverInfo": {"name": "noisy", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [{"name": "boom", "inputSchema": {"type": "object"}}]}})
    elif method == "tools/call":
        say("REAL COMPLAINT")
        sys.exit(5)
"""


def _probe_noise(stdio_mock, tmp_path: Path, mode: str) -> tuple[StdioTarget, Path]:
    script, log = tmp_path / "noisy.py", tmp_path / "received.jsonl"
    script.write_text(PROBE_NOISE, encoding="utf-8")
    return stdio_mock(command=sys.executable, args=[str(script), mode, str(log)]), log


def _received(log: Path) -> list[Any]:
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("verbose", [False, True])
def test_stdio_stderr_written_in_answer_to_the_probe_is_not_a_later_failures_stderr(stdio_mock, tmp_path, verbose):
    """Issue 27 item 4: an mcp 1.x server logs ~96 lines for server/discover before answering it; a later failure's
    server_stderr starts after the probe was answered (its real complaint, none of the probe's noise); -v shows the
    probe's lines marked as the probe's."""
    target, log = _probe_noise(stdio_mock, tmp_path, "answer")
    result = target.run(target.name, "boom", "--body", "{}", *(["-v"] if verbose else []))
    assert result.exit_status == 2, result.stdout + result.stderr
    error = result.json["error"]
    assert error["code"] == "mcp_connection_error" and error["exit_status"] == 5
    assert error["server_stderr"] == ["REAL COMPLAINT"]
    assert _received(log) == ["server/discover", "initialize", "notifications/initialized", "tools/list", "tools/call"]
    if verbose:
        assert result.stderr.count("[server stderr, era probe] probe noise") == 96
        assert "[server stderr] REAL COMPLAINT" in result.stderr
    else:
        assert "probe noise" not in result.stderr


def test_stdio_stderr_of_a_probe_never_answered_stays_in_the_tail(stdio_mock, tmp_path):
    """Issue 27 item 4, the probe got no answer (silence -> legacy): nothing shows that what the server wrote in the
    window was about the probe, so a later failure keeps it (marked as written during the probe with -v)."""
    target, log = _probe_noise(stdio_mock, tmp_path, "silent")
    result = target.run(target.name, "boom", "--body", "{}", "-v")
    assert result.exit_status == 2, result.stdout + result.stderr
    assert result.json["error"]["server_stderr"] == ["ignoring unknown method server/discover", "REAL COMPLAINT"]
    assert "[server stderr, era probe] ignoring unknown method server/discover" in result.stderr
    assert _received(log)[:2] == ["server/discover", "initialize"]


def test_stdio_server_failing_at_startup_reports_exit_and_stderr(stdio_mock):
    """A server that dies on start: the probe sees the exit, the one restart dies too -> mcp_connection_error
    with the exit status and its stderr; --check stages say the connection failed."""
    code = "import sys; sys.stderr.write('Traceback: ImportError: no module named foo\\n'); sys.exit(7)"
    target = stdio_mock(command=sys.executable, args=["-c", code])
    result = target.run(target.name, "--check", "-v")
    assert result.exit_status == 2
    error = result.json["error"]
    assert error["code"] == "mcp_connection_error" and error["exit_status"] == 7
    assert error["server_stderr"] == ["Traceback: ImportError: no module named foo"]
    assert result.json["data"]["checks"]["connection"] == "failed"
    assert spawns(result.stderr) == 2


# -- stdout lines that are not JSON-RPC (contract.md §9: skipped and counted, never fatal) -------------------------

BANNER = "sys.stdout.write('Server listening on stdio, token=%s\\n' % os.environ['API_TOKEN']); sys.stdout.flush()"
SKIPPED = "bkmcp: [server stdout, not JSON-RPC] "


@pytest.mark.parametrize("pinned", [MODERN, "2025-06-18", None])
def test_stdio_banner_before_json_rpc_is_skipped_and_shown_scrubbed_with_v(stdio_mock, pinned):
    """A start-up banner on stdout (time-mcp, mcp-server-code-runner) is skipped: --check, --tools and a call work,
    also during the era probe; -v shows the line, prefixed and scrubbed of the secret it carries."""
    target = stdio_mock(None, wrapper=BANNER, protocol_version=pinned, env={"API_TOKEN": "${TOK}"})
    env = {"TOK": SECRET}
    check = target.run(target.name, "--check", env=env)
    assert check.exit_status == 0 and check.json["ok"] is True, check.stdout
    tools = target.run(target.name, "--tools", env=env)
    assert tools.exit_status == 0 and "echo" in [t["name"] for t in tools.json["data"]["tools"]], tools.stdout
    call = target.run(target.name, "echo", "--text", "hi", "-v", env=env)
    assert call.exit_status == 0 and call.json["data"]["result"]["structuredContent"] == {"arguments": {"text": "hi"}}
    calls = [e["json"]["params"] for e in target.log() if e["rpc_method"] == "tools/call"]
    assert [(p["name"], p["arguments"]) for p in calls] == [("echo", {"text": "hi"})]  # what the server received
    assert f"{SKIPPED}Server listening on stdio, token=***" in call.stderr.splitlines()
    assert SECRET not in check.stdout + check.stderr + tools.stdout + tools.stderr + call.stdout + call.stderr


def test_stdio_an_editor_config_file_runs_as_it_is(tmp_path):
    """Issue 28 item 5: the file Claude Desktop / Cursor / Cline write (no "type", "env", approval lists,
    "disabled": false) is pointed at with --config and its server is started and called as written."""
    log = tmp_path / "log.jsonl"
    code = "import os, runpy, sys\nassert os.environ['MODE'] == 'ro'\nsys.argv = sys.argv[1:]\n"
    code += "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    entry = {
        "command": sys.executable,
        "args": ["-c", code, MOCK, "--stdio", "--log", str(log)],
        "env": {"MODE": "ro"},
        "autoApprove": ["echo"],
        "alwaysAllow": ["echo"],
        "disabled": False,
    }
    config = write_mcp_json(tmp_path, {"notes": entry}, name="claude_desktop_config.json")
    result = run_bkmcp("--config", str(config), "--timeout", "20s", "notes", "echo", "--text", "hi")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert result.stderr.splitlines() == [  # issue 40 item 1: the approval lists are named as ignored
        f"bkmcp: warning: {config}: server 'notes': field \"{field}\" is ignored ({bkmcp.EDITOR_IGNORED_FIELDS[field]})"
        for field in ("alwaysAllow", "autoApprove")
    ]
    calls = [json.loads(line)["json"]["params"] for line in log.read_text().splitlines() if '"tools/call"' in line]
    assert [(p["name"], p["arguments"]) for p in calls] == [("echo", {"text": "hi"})]


def test_stdio_lines_printed_during_a_call_are_never_its_answer(stdio_mock):
    """Lines on stdout while a call runs (mcp-hello-world's console.log): a log line, a JSON object carrying the
    call's id without "jsonrpc", a JSON-RPC object that is no response, are skipped; a valid response for an unknown
    id is a stray (logged); the call gets its own answer, intact."""
    noise = [
        "",  # blank lines are ignored, not counted
        "   ",
        "log: adding 2 and 3",
        '{"id": $ID, "result": {"content": [{"type": "text", "text": "FAKE"}]}}',
        '{"jsonrpc": "2.0", "id": $ID}',
        '{"jsonrpc": "2.0", "id": 987654, "result": {"content": [{"type": "text", "text": "STRAY"}]}}',
    ]
    tool = mock_tool("echo", "echo", {"text": {"type": "string"}}, stdout=noise)
    target = stdio_mock({"tools": [tool]}, protocol_version="2025-11-25")
    result = target.run(target.name, "echo", "--text", "real", "-v")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert result.json["data"]["result"]["content"] == [{"type": "text", "text": '{"text":"real"}'}]
    skipped = [line for line in result.stderr.splitlines() if line.startswith(SKIPPED)]
    call_id = next(e["rpc_id"] for e in target.log() if e["rpc_method"] == "tools/call")
    assert skipped == [
        f"{SKIPPED}log: adding 2 and 3",
        f'{SKIPPED}{{"id": {call_id}, "result": {{"content": [{{"type": "text", "text": "FAKE"}}]}}}}',
        f'{SKIPPED}{{"jsonrpc": "2.0", "id": {call_id}}}',
    ]
    assert "bkmcp: warning: the server sent an answer to request id 987654, which bkmcp never sent" in result.stderr
    assert target.count("tools/call") == 1


@pytest.mark.parametrize("rate", ["once", "forever"])
def test_stdio_server_that_prints_only_junk_explains_its_timeout(stdio_mock, rate):
    """A server that never speaks JSON-RPC is bounded by the operation's budget (the handshake's own timeout), and
    its error shows what it printed: the last lines in details.server_stdout, how many in server_stdout_skipped."""
    code = (
        "import sys, time\n"
        "n = 0\n"
        "while True:\n"
        "    n += 1\n"
        "    print(f'hello {n}', flush=True)\n"
        f"    time.sleep({'3600' if rate == 'once' else '0.01'})\n"
    )
    target = stdio_mock(command=sys.executable, args=["-c", code])
    result = target.run(target.name, "--check", "--timeout", "4s")
    assert result.exit_status == 2, result.stdout
    error = result.json["error"]
    assert error["code"] == "mcp_timeout", error
    shown, count = error["server_stdout"], error["server_stdout_skipped"]
    if rate == "once":
        assert shown == ["hello 1"] and count == 1
    else:
        last = int(shown[-1].split()[1])
        assert count == last >= 5 and shown == [f"hello {n}" for n in range(last - 4, last + 1)]


def test_stdio_malformed_json_answer_is_skipped_and_the_timeout_shows_it(stdio_mock):
    """An answer that is not JSON is no answer: the request runs into its budget, and the error shows the line."""
    target = stdio_mock({"faults": {"malformed_json": "tools/list"}}, protocol_version="2025-11-25")
    result = target.run(target.name, "--tools", "--timeout", "3s")
    assert result.exit_status == 2 and result.error_code == "mcp_timeout"
    assert result.json["error"]["server_stdout"] == ['{"jsonrpc": "2.0", "id": oops this is not JSON']
    assert target.count("tools/list") == 1


def test_stdio_line_longer_than_the_limit_is_dropped_unread(stdio_mock, monkeypatch):
    """A line past the limit (64 MiB; 64 KiB here) is dropped as it streams in, counted as skipped; the session
    goes on."""
    monkeypatch.setattr(bkmcp, "STDIO_LINE_LIMIT", 64 * 1024)
    flood = "for _ in range(64): sys.stdout.write('x' * 16384)\nsys.stdout.write('\\n'); sys.stdout.flush()"
    tool = mock_tool("echo", "echo", {"text": {"type": "string"}}, stdout="y" * 70000)
    target = stdio_mock({"tools": [tool]}, wrapper=flood, protocol_version=MODERN)
    result = target.run(target.name, "echo", "--text", "after the flood", "-v")
    assert result.exit_status == 0, result.stdout + result.stderr[-2000:]
    assert result.json["data"]["result"]["structuredContent"] == {"arguments": {"text": "after the flood"}}
    skipped = [line for line in result.stderr.splitlines() if line.startswith(SKIPPED)]
    note = " [dropped: a line longer than 65536 bytes]"
    assert skipped == [f"{SKIPPED}{'x' * 499}…{note}", f"{SKIPPED}{'y' * 499}…{note}"]


def test_stdio_timeout_bounded_and_process_reaped(stdio_mock):
    """A call that never answers: mcp_timeout after --timeout, outcome unknown, one tools/call, the child gone."""
    wrapper = "open(PIDS, 'w').write(str(os.getpid()))"
    scenario = {"tools": [mock_tool("sleepy", "slow", ms=60000)]}
    target = stdio_mock(scenario, wrapper=wrapper, protocol_version="2025-11-25")
    result = target.run("--timeout", "1500ms", target.name, "sleepy", "--body", "{}")
    assert result.exit_status == 2
    error = result.json["error"]
    assert error["code"] == "mcp_timeout" and error["outcome"] == "unknown"
    assert target.count("tools/call") == 1
    [call] = [e for e in target.log() if e["rpc_method"] == "tools/call"]
    assert before_the_answer_was_due(call["time"], 60.0)  # the 60 s tool was not waited for
    (pid,) = target.pids()
    assert not alive(pid)


def test_stdio_process_tree_reaped_after_clean_exit(stdio_mock):
    """The server spawns a grandchild that would outlive it; after the operation neither is running."""
    wrapper = (
        "import subprocess\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "open(PIDS, 'w').write('%d %d' % (os.getpid(), child.pid))"
    )
    target = stdio_mock(None, wrapper=wrapper, protocol_version=MODERN)
    result = target.run(target.name, "--tools")
    assert result.exit_status == 0, result.stdout
    leader, grandchild = target.pids()
    assert not alive(leader)
    assert not alive(grandchild)


def test_stdio_sigterm_ignored_gets_sigkill(stdio_mock):
    """A server that ignores SIGTERM (and its grandchild) is SIGKILLed after the grace period; nothing left."""
    wrapper = (
        "import signal, subprocess\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "open(PIDS, 'w').write('%d %d' % (os.getpid(), child.pid))"
    )
    scenario = {"tools": [mock_tool("sleepy", "slow", ms=60000)]}
    target = stdio_mock(scenario, wrapper=wrapper, protocol_version=MODERN)
    result = target.run("--timeout", "1s", target.name, "sleepy", "--body", "{}", "-v")
    assert result.error_code == "mcp_timeout"
    assert "ignored SIGTERM; sending SIGKILL" in result.stderr
    leader, grandchild = target.pids()
    assert not alive(leader) and not alive(grandchild)


# -- environment, cwd, secrets -----------------------------------------------------------------------------


def test_stdio_environment_is_minimal_plus_expanded_env_C04(stdio_mock, tmp_path):
    """contract.md §9 / C04: the child gets PATH, HOME, LANG, LC_* … from bkmcp's environment, nothing else, plus the
    entry's env with ${VAR} expanded; cwd from the config."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    scenario = {"tools": [mock_tool("environ", "environ")]}
    target = stdio_mock(
        scenario,
        protocol_version="2025-11-25",
        cwd=str(workdir),
        env={"GREETING": "hello ${WHO}", "API_TOKEN": "${TOK}", "LITERAL": "$${NOT_EXPANDED}"},
    )
    outer = {
        "WHO": "world",
        "TOK": SECRET,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "AWS_SECRET_ACCESS_KEY": "nope",
        "HTTP_PROXY": "http://proxy.invalid:3128",
        "PYTHONPATH": "/nowhere",
        "USER": "tester",
    }
    result = target.run(target.name, "environ", "--body", "{}", env=outer)
    assert result.exit_status == 0, result.stdout + result.stderr
    info = result.json["data"]["result"]["structuredContent"]
    child = info["environ"]
    expected = {"PATH", "HOME", "LANG", "LC_ALL", "USER", "GREETING", "API_TOKEN", "LITERAL"}
    assert set(child) - {"LC_CTYPE"} == expected  # LC_CTYPE: CPython's own C-locale coercion (PEP 538)
    assert child["GREETING"] == "hello world" and child["API_TOKEN"] == SECRET
    assert child["LITERAL"] == "${NOT_EXPANDED}"
    assert child["PATH"] == os.environ.get("PATH", "") and child["LANG"] == "C.UTF-8"
    assert info["cwd"] == str(workdir)


def test_stdio_secrets_never_printed_verbose_O01(stdio_mock):
    """-v logs the spawned command with redacted args and only the NAMES of env variables; the server's stderr
    is streamed with a prefix and scrubbed too."""
    scenario = {"stderr_lines": [f"debug: using token {SECRET}", "ready"]}
    target = stdio_mock(
        scenario, protocol_version=MODERN, env={"API_TOKEN": "${TOK}"}, extra_args=["--require-header", "X-Key=${TOK}"]
    )
    result = target.run(target.name, "--check", "-v", env={"TOK": SECRET})
    assert result.exit_status == 0, result.stdout + result.stderr
    assert SECRET not in result.stdout and SECRET not in result.stderr
    spawn = next(line for line in result.stderr.splitlines() if "spawning stdio server" in line)
    assert "X-Key=***" in spawn and "API_TOKEN" in spawn
    assert "bkmcp: [server stderr] debug: using token ***" in result.stderr
    assert "bkmcp: [server stderr] ready" in result.stderr
    [probe_id] = re.findall(r"-> stdio \[server/discover id=(\d+)\]", result.stderr)  # a random id (issue 36)
    assert f"<- stdio [result id={probe_id}]" in result.stderr


def test_stdio_stderr_not_streamed_without_verbose(stdio_mock):
    target = stdio_mock({"stderr_lines": ["noisy line"] * 50}, protocol_version=MODERN)
    result = target.run(target.name, "--tools")
    assert result.exit_status == 0
    assert "noisy line" not in result.stderr


def test_stdio_stderr_tail_is_bounded(stdio_mock):
    lines = [f"line {i}" for i in range(100)]
    scenario = {"stderr_lines": lines, "tools": [mock_tool("dropper", "drop")]}
    target = stdio_mock(scenario, protocol_version=MODERN)
    result = target.run(target.name, "dropper", "--body", "{}")
    assert result.json["error"]["server_stderr"] == lines[-20:]


# -- start-up problems -------------------------------------------------------------------------------------


def test_stdio_command_not_found(stdio_mock):
    target = stdio_mock(command="definitely-not-a-real-mcp-server-xyz")
    result = target.run(target.name, "--tools")
    assert result.exit_status == 2
    error = result.json["error"]
    assert error["code"] == "mcp_connection_error"
    assert "'definitely-not-a-real-mcp-server-xyz' was not found on PATH" in error["message"]
    assert "absolute path" in error["hint"]


def test_stdio_command_not_executable(stdio_mock, tmp_path):
    script = tmp_path / "server.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    target = stdio_mock(command=str(script))
    result = target.run(target.name, "--check")
    assert result.error_code == "mcp_connection_error"
    assert "is not an executable file" in result.json["error"]["message"]
    assert result.json["data"]["checks"]["connection"] == "failed"


def test_stdio_missing_cwd(stdio_mock, tmp_path):
    target = stdio_mock(None, cwd=str(tmp_path / "missing"))
    result = target.run(target.name, "--tools")
    assert result.error_code == "mcp_connection_error"
    assert "working directory" in result.json["error"]["message"]


# -- messages before the response ------------------------------------------------------------------------


def test_stdio_server_requests_answered_ping_and_declined_sampling(stdio_mock):
    """Legacy stdio: a server->client ping is answered {} on stdin; sampling is declined with -32601 and reported
    as mcp_capability_unsupported."""
    target = stdio_mock({"faults": {"server_request_on_call": "ping"}}, protocol_version="2025-11-25")
    result = target.run(target.name, "echo", "--text", "a")
    assert result.exit_status == 0, result.stdout
    answers = [e["json"] for e in target.log() if e["rpc_method"] is None]
    assert answers == [{"jsonrpc": "2.0", "id": "mock-srv-1", "result": {}}]
    target = stdio_mock({"faults": {"server_request_on_call": "sampling/createMessage"}}, protocol_version="2025-11-25")
    result = target.run(target.name, "echo", "--text", "a")
    assert result.error_code == "mcp_capability_unsupported"
    answers = [e["json"] for e in target.log() if e["rpc_method"] is None]
    assert answers[0]["error"]["code"] == -32601


def test_stdio_notifications_before_result_and_big_messages(stdio_mock):
    """Progress notifications before the response are logged with -v; a 2 MB argument and result cross the pipes
    (bigger than any pipe buffer) intact."""
    note = {"method": "notifications/progress", "params": {"progress": 1, "total": 2, "message": "half way"}}
    target = stdio_mock({"notifications_before_result": [note]}, protocol_version="2025-11-25")
    text = "x" * (2 * 1024 * 1024) + "é\nsecond line\r\u2028\u0085 end"  # raw line breaks never reach the wire
    result = target.run(target.name, "echo", "--text", text, "-v")
    assert result.exit_status == 0
    assert result.json["data"]["result"]["structuredContent"]["arguments"]["text"] == text
    assert "progress 1/2: half way" in result.stderr
    call = target.log()[-1]
    assert call["rpc_method"] == "tools/call" and "\n" not in call["body"] and "\u2028" not in call["body"]


def test_stdio_number_fidelity(stdio_mock):
    target = stdio_mock(None, protocol_version=MODERN)
    result = target.run(target.name, "echo", "--text", "n", "--ratio", "1e400")
    assert result.exit_status == 0
    assert '"ratio":1e400' in result.stdout
    assert '"ratio":1e400' in target.log()[-1]["body"]


# -- cancellation ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["2025-11-25", MODERN])
def test_stdio_ctrl_c_sends_cancelled_then_shuts_down(stdio_mock, version):
    """Ctrl-C during a call: notifications/cancelled with the call's id (both eras on stdio), exit 130, the server
    process tree gone, the call never resent."""
    # The mock handles (and logs) one message at a time and is asleep in the tool: record what reaches its stdin
    # with a tee in front of it, in the server process itself.
    wrapper = STDIN_TEE + "open(PIDS, 'w').write(str(os.getpid()))"
    target = stdio_mock({"tools": [mock_tool("sleepy", "slow", ms=60000)]}, wrapper=wrapper, protocol_version=version)
    env = {"HOME": os.environ.get("HOME", "/nonexistent"), "PATH": os.environ.get("PATH", "")}
    from tests.helpers import sigint_as_in_a_terminal

    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bkmcp.py"), "--config", str(target.config), target.name, "sleepy", "--body", "{}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=sigint_as_in_a_terminal,
    )
    try:
        end = time.monotonic() + 20
        while target.count("tools/call") == 0 and time.monotonic() < end:
            time.sleep(0.05)
        assert target.count("tools/call") == 1
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    envelope = json.loads(out)  # issue 17 item 2: Ctrl-C after tools/call was sent says the outcome is unknown
    assert envelope["ok"] is False and envelope["error"]["code"] == "mcp_cancelled"
    assert (envelope["error"]["outcome"], envelope["error"]["stage"]) == ("unknown", "call")
    received = [json.loads(line) for line in (target.pid_path.parent / "stdin.jsonl").read_text().splitlines()]
    call = next(m for m in received if m.get("method") == "tools/call")
    cancels = [m for m in received if m.get("method") == "notifications/cancelled"]
    assert len(cancels) == 1
    assert cancels[0]["params"]["requestId"] == call["id"]
    if version == MODERN:
        assert cancels[0]["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == MODERN
    assert [m.get("method") for m in received].count("tools/call") == 1
    (pid,) = target.pids()
    assert not alive(pid)


# -- the pure part: which variables are inherited -----------------------------------------------------------


def test_stdio_inherited_environment_selection():
    import bkmcp

    inherited = {
        "PATH": "/bin",
        "HOME": "/h",
        "LC_ALL": "C",
        "LC_MESSAGES": "C",
        "LANG": "C.UTF-8",
        "SYSTEMROOT": "C:\\W",
    }
    others = {"AWS_SECRET_ACCESS_KEY": "x", "HTTPS_PROXY": "p", "PYTHONPATH": "/p", "BK_CLI_CONFIG_DIR": "/c"}
    env = {**inherited, **others, "LD_PRELOAD": "evil.so"}
    assert bkmcp.select_inherited_env(env) == inherited
    stdio = bkmcp.ServerConfig(name="s", type="stdio", config_file="/f", command="srv")
    http = bkmcp.ServerConfig(name="h", type="http", config_file="/f", url="https://example.com/mcp")
    assert bkmcp.resolve_server(stdio, env).inherited_env["PATH"] == "/bin"
    assert bkmcp.resolve_server(http, env).inherited_env == {}


# -- harder exits and stuck pipes --------------------------------------------------------------------------


def test_stdio_server_killed_by_signal(stdio_mock):
    target = stdio_mock(command="/bin/sh", args=["-c", "echo 'dying' >&2; kill -9 $$"])
    result = target.run(target.name, "--tools")
    error = result.json["error"]
    assert error["code"] == "mcp_connection_error"
    assert "was killed by SIGKILL" in error["message"] and error["exit_status"] == -9
    assert error["server_stderr"] == ["dying"]


def test_stdio_command_that_cannot_be_executed(stdio_mock, tmp_path):
    """An executable file that is no program (no #! line, not a binary): the exec failure is reported."""
    bogus = tmp_path / "bogus-server"
    bogus.write_bytes(b"\x00\x01\x02 not a program\n")
    bogus.chmod(0o755)
    target = stdio_mock(command=str(bogus))
    result = target.run(target.name, "--tools")
    assert result.error_code == "mcp_connection_error"
    assert "cannot start the stdio server" in result.json["error"]["message"]


def test_stdio_exit_detected_while_a_grandchild_holds_stdout(stdio_mock):
    """npx-style wrappers: the server dies mid-call but a grandchild keeps its stdout open (no EOF). The exit is
    still noticed (no wait for --timeout), the outcome is unknown, and the grandchild is stopped."""
    wrapper = (
        "import subprocess\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "open(PIDS, 'w').write('%d %d' % (os.getpid(), child.pid))"
    )
    target = stdio_mock({"tools": [mock_tool("dropper", "drop")]}, wrapper=wrapper, protocol_version=MODERN)
    result = target.run("--timeout", "30s", target.name, "dropper", "--body", "{}")
    error = result.json["error"]
    assert error["code"] == "mcp_connection_error" and error["outcome"] == "unknown"  # not the 30 s mcp_timeout
    assert error["exit_status"] == 3
    leader, grandchild = target.pids()
    assert not alive(leader) and not alive(grandchild)


STOPS_READING = r"""
import json, sys, time
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("method") == "tools/list":
        tool = {"name": "t", "inputSchema": {"type": "object"}}
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {"tools": [tool]}}), flush=True)
        time.sleep(60)  # never reads stdin again
"""


def test_stdio_write_to_a_server_that_stopped_reading_is_bounded(stdio_mock):
    """A 4 MB call to a server that no longer reads stdin fills the pipe: the write is bounded by --timeout (not
    stuck), reported as mcp_timeout with outcome unknown (part of the call may have been read)."""
    target = stdio_mock(command=sys.executable, args=["-c", STOPS_READING], protocol_version=MODERN)
    body = json.dumps({"blob": "x" * (4 * 1024 * 1024)})
    result = target.run("--timeout", "2s", target.name, "t", "--body", body)
    error = result.json["error"]
    assert error["code"] == "mcp_timeout" and error["outcome"] == "unknown"


def test_group_watchdog_kills_the_groups_still_recorded_when_its_pipe_ends():
    """Issue 29, item 3: the watchdog's protocol. Of two process groups recorded, the one struck off again
    survives the end of the pipe (its number may belong to another group by then); the other is SIGKILLed, every
    member of it, although they ignore SIGHUP and SIGTERM."""

    ignoring = "import signal, time\nfor s in (signal.SIGTERM, signal.SIGHUP): signal.signal(s, signal.SIG_IGN)\n"
    leader = ignoring + "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', sys.argv[1]])\ntime.sleep(60)"
    member = ignoring + "time.sleep(60)"
    kept = subprocess.Popen([sys.executable, "-c", ignoring + "time.sleep(60)"], start_new_session=True)
    doomed = subprocess.Popen([sys.executable, "-c", leader, member], start_new_session=True)
    try:
        until(lambda: len(_group_members(doomed.pid)) == 2, "the leader started its descendant")
        members = _group_members(doomed.pid)
        started = bkmcp._GroupWatchdog._start()
        assert started is not None
        watchdog, write_end = started
        os.write(write_end, b"+%d\n+%d\n-%d\n" % (kept.pid, doomed.pid, kept.pid))
        os.close(write_end)  # what bkmcp's death does
        assert watchdog.wait(30) == 0  # it ended by itself, after its work
        until(lambda: not any(process_running(p) for p in members), "the recorded group died")  # SIGKILL is async
        assert doomed.wait(30) == -signal.SIGKILL
        assert kept.poll() is None
    finally:
        kill_groups(kept, doomed)


def _group_members(pgid: int) -> list[int]:
    return [pid for pid, stat in proc_stats() if stat[2] == str(pgid).encode() and stat[0] not in (b"Z", b"X")]


def test_group_watchdog_killed_is_replaced_and_told_the_recorded_groups(monkeypatch):
    """Issue 29, item 3: the watchdog bkmcp started was killed; the next child's ``write_end`` starts another and
    tells it the groups recorded so far (not those struck off), which it kills when bkmcp's end of the pipe ends."""
    watchdog = bkmcp._GroupWatchdog
    for name, value in {"_started": False, "_proc": None, "_write_end": None, "_groups": set()}.items():
        monkeypatch.setattr(watchdog, name, value)  # a fresh one for this test: the process's own stays as it is
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    kept, doomed = (subprocess.Popen(sleeper, start_new_session=True) for _ in range(2))
    first_end = None
    try:
        first_end = watchdog.write_end()
        first_proc = watchdog._proc
        assert first_end is not None and first_proc is not None
        first = first_proc.pid
        watchdog.recorded(kept.pid)
        watchdog.recorded(doomed.pid)
        watchdog.forget(kept.pid)
        os.kill(first, signal.SIGKILL)
        until(lambda: not process_running(first), "the first watchdog died")
        watchdog.forget(kept.pid)  # to a dead watchdog: no error
        second_end = watchdog.write_end()
        second = watchdog._proc
        assert second_end is not None and second is not None and second.pid != first
        os.close(second_end)
        assert second.wait(30) == 0
        assert doomed.wait(30) == -signal.SIGKILL
        assert kept.poll() is None
        assert first_proc.poll() == -signal.SIGKILL  # reaped already, through its Popen
    finally:
        kill_groups(kept, doomed)
        if first_end is not None:
            os.close(first_end)


def test_stdio_line_nested_deeper_than_bkmcp_parses_says_whose_limit_it_is(stdio_mock):
    """A valid JSON-RPC line nested deeper than bkmcp's parser goes is skipped, and -v says why: the depth limit is
    bkmcp's (Python's recursion limit), not a sign that the server spoke something other than JSON-RPC."""
    deep = '{"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": ' + "[" * 5000 + "]" * 5000 + "}}"
    tool = mock_tool("echo", "echo", {"text": {"type": "string"}}, stdout=["plain log line", deep])
    target = stdio_mock({"tools": [tool]}, protocol_version="2025-11-25")
    result = target.run(target.name, "echo", "--text", "real", "-v")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert result.json["data"]["result"]["structuredContent"] == {"arguments": {"text": "real"}}
    skipped = [line for line in result.stderr.splitlines() if line.startswith(SKIPPED)]
    limit = f" [nested deeper than bkmcp parses (about {sys.getrecursionlimit()} levels)]"
    assert skipped[0] == f"{SKIPPED}plain log line"  # an ordinary line gets no such note
    assert len(skipped) == 2 and skipped[1].startswith(f'{SKIPPED}{{"jsonrpc": "2.0"') and skipped[1].endswith(limit)
    assert target.count("tools/call") == 1


def test_group_watchdog_starts_with_only_its_pipe_and_the_standard_descriptors():
    """Issue 36, item 4: the watchdog inherits none of bkmcp's own descriptors (an inheritable one included, such
    as a caller's lock or pipe handed to the resident or the background process): 0 (its pipe), 1, 2, nothing else.
    The inherited pipe is never among its descriptors; the interpreter's own start-up files (a module it is still
    reading: CI saw a 3) are gone once it waits on its pipe."""
    inherited, other_end = os.pipe()
    os.set_inheritable(inherited, True)
    held = os.readlink(f"/proc/self/fd/{inherited}")
    started = None
    try:
        started = bkmcp._GroupWatchdog._start()
        assert started is not None
        watchdog, _end = started
        where = f"/proc/{watchdog.pid}/fd"

        def target(fd: str) -> str:
            try:
                return os.readlink(f"{where}/{fd}")
            except FileNotFoundError:  # a start-up file closed between the listing and the look
                return ""

        def settled() -> bool:
            fds = {int(fd): target(fd) for fd in os.listdir(where)}
            assert held not in fds.values(), fds
            return sorted(fd for fd, what in fds.items() if what) == [0, 1, 2]

        until(settled, "the watchdog's descriptors settled to 0, 1, 2")
    finally:
        os.close(inherited)
        os.close(other_end)
        if started is not None:
            os.close(started[1])
            assert started[0].wait(30) == 0


@pytest.mark.parametrize("editor", ["cursor", "cline", "vscode"])
def test_stdio_an_editor_file_with_entries_bkmcp_cannot_take_still_runs_its_server(editor, tmp_path):
    """Issue 40 item 1: Cursor's file mixes stdio entries with url-only ones (Streamable HTTP) and an SSE entry
    bkmcp cannot take; Cline's carries "timeout"; VS Code's is a "servers" object with "inputs". The selected server
    is started and called as written; the SSE entry costs one warning line, Cline's timeout one."""
    log = tmp_path / "log.jsonl"
    notes = {"command": sys.executable, "args": [MOCK, "--stdio", "--log", str(log)]}
    others = {
        "remote": {"url": "http://127.0.0.1:9/mcp"},
        "legacy": {"type": "sse", "url": "http://127.0.0.1:9/sse"},
    }
    if editor == "cline":
        notes |= {"disabled": False, "autoApprove": [], "timeout": 60}
        others = {"remote": {"type": "streamableHttp", "url": "http://127.0.0.1:9/mcp", "disabled": True}}
    document = {"mcpServers": {"notes": notes, **others}}
    if editor == "vscode":
        document = {"inputs": [], "servers": {"notes": {"type": "stdio", **notes}, **others}}
    config = write_mcp_json(tmp_path, json.dumps(document), name=f"{editor}.json")
    result = run_bkmcp("--config", str(config), "--timeout", "20s", "notes", "echo", "--text", "hi")
    assert result.exit_status == 0, result.stdout + result.stderr
    calls = [json.loads(line)["json"]["params"] for line in log.read_text().splitlines() if '"tools/call"' in line]
    assert [(p["name"], p["arguments"]) for p in calls] == [("echo", {"text": "hi"})]
    expected = {
        "cline": [
            f"bkmcp: warning: {config}: server 'notes': field \"{field}\" is ignored "
            f"({bkmcp.EDITOR_IGNORED_FIELDS[field]})"
            for field in ("autoApprove", "timeout")
        ]
    }.get(editor, [f"bkmcp: warning: {config}: server 'legacy': unsupported type 'sse'; this server is left out"])
    assert result.stderr.splitlines() == expected
