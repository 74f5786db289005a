"""bkmcp's stdio transport against servers nobody here wrote: the official Python SDK server (``mcp==2.3.0``,
dual-era; its stdio loop locks the era on the first request) and ``@modelcontextprotocol/server-everything``
(legacy only; answers ``server/discover`` with -32601).

What the server RECEIVED is recorded by a tiny stdin tee that sits in front of the real server (it is the process
bkmcp spawns; the server is its child, in the same process group). Fixtures: ``conftest_interop.py``.
Seed rows: R01 (era detection and versions on stdio), I01 (config -> check / tools / call).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run_bkmcp, write_mcp_json

pytestmark = [pytest.mark.integration, pytest.mark.interop]

MODERN = "2026-07-28"
TEE = r"""
import subprocess, sys, threading, time
record, delay, hold, ready, *argv = sys.argv[1:]
time.sleep(float(delay))  # a slow start-up: bkmcp's messages wait in the pipe
child = subprocess.Popen(argv, stdin=subprocess.PIPE, stderr=subprocess.PIPE if ready else None)  # stdout: to bkmcp
if ready:  # read nothing before the server itself would: its own start-up (imports) is start-up too
    for err in iter(child.stderr.readline, b""):
        sys.stderr.buffer.write(err)
        sys.stderr.flush()
        if ready.encode() in err:
            break
    def forward(src=child.stderr, dst=sys.stderr.buffer):
        for err in iter(src.readline, b""):
            dst.write(err)
            dst.flush()
    threading.Thread(target=forward, daemon=True).start()
with open(record, "ab", buffering=0) as rec:
    for line in iter(sys.stdin.buffer.readline, b""):
        rec.write(line)
        time.sleep(float(hold))  # a server that read the message and answers late
        hold = 0
        try:
            child.stdin.write(line)
            child.stdin.flush()
        except BrokenPipeError:
            break
try:
    child.stdin.close()
except BrokenPipeError:
    pass
sys.exit(child.wait())
"""
INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "SYSTEMROOT")


class Server:
    def __init__(
        self,
        tmp_path: Path,
        argv: list[str],
        env: dict[str, str],
        protocol_version: str | None,
        delay: float = 0.0,
        hold: float = 0.0,
        ready: str = "",
    ) -> None:
        self.record = tmp_path / "received.jsonl"
        tee = tmp_path / "tee.py"
        tee.write_text(TEE, encoding="utf-8")
        entry: dict[str, Any] = {
            "type": "stdio",
            "command": sys.executable,
            "args": [str(tee), str(self.record), str(delay), str(hold), ready, *argv],
            # the interop environment minus what bkmcp passes on by itself
            "env": {k: v for k, v in env.items() if k not in INHERITED},
        }
        if protocol_version is not None:
            entry["protocolVersion"] = protocol_version
        self.config = write_mcp_json(tmp_path, {"x": entry})
        self.env = {k: v for k, v in env.items() if k in INHERITED}

    def run(self, *args: str):
        return run_bkmcp("--config", str(self.config), "--timeout", "60s", "x", *args, env=self.env)

    def received(self) -> list[dict]:
        lines = self.record.read_text(encoding="utf-8").splitlines() if self.record.exists() else []
        return [json.loads(line) for line in lines]

    def methods(self) -> list[str | None]:
        return [m.get("method") for m in self.received()]

    def reset(self) -> None:
        if self.record.exists():
            self.record.unlink()


@pytest.fixture
def sdk(tmp_path: Path, sdk_stdio_argv, interop_subprocess_env):
    def make(
        variant: str = "stateful-sse", protocol_version: str | None = None, delay: float = 0.0, hold: float = 0.0
    ) -> Server:
        # the tee reads stdin only once the SDK server says it starts serving (sdk_server.py, after its imports)
        ready = "sdk_server: starting"
        return Server(tmp_path, sdk_stdio_argv(variant), interop_subprocess_env, protocol_version, delay, hold, ready)

    return make


@pytest.fixture
def everything(tmp_path: Path, everything_stdio_argv, interop_subprocess_env):
    def make(protocol_version: str | None = None) -> Server:
        return Server(tmp_path, everything_stdio_argv, interop_subprocess_env, protocol_version)

    return make


def assert_modern(received: list[dict]) -> None:
    for message in received:
        meta = message["params"]["_meta"]
        assert meta["io.modelcontextprotocol/protocolVersion"] == MODERN
        assert meta["io.modelcontextprotocol/clientCapabilities"] == {}
    assert "initialize" not in [m.get("method") for m in received]


# -- official Python SDK (dual-era) ------------------------------------------------------------------------


def test_stdio_sdk_unpinned_is_modern_R01_I01(sdk):
    """The SDK's stdio server answers the discover probe: modern, no initialize (it would be refused: the era is
    locked by the first request). --check, --tools and a call, each on its own process."""
    server = sdk()
    check = server.run("--check")
    assert check.exit_status == 0, check.stdout + check.stderr
    data = check.json["data"]
    assert data["era"] == "modern" and data["protocol_version"] == MODERN and data["transport"] == "stdio"
    assert data["checks"]["tools"] == "passed" and data["tool_count"] >= 10
    assert data["server_info"]["name"].startswith("bkmcp-interop-sdk")
    assert server.methods() == ["server/discover", "tools/list"]
    assert_modern(server.received())

    server.reset()
    tools = server.run("--tools")
    assert tools.exit_status == 0
    names = {t["name"] for t in tools.json["data"]["tools"]}
    assert {"add", "echo", "ns.tool-name_v2"} <= names
    assert server.methods() == ["server/discover", "tools/list"]

    server.reset()
    call = server.run("add", "--a", "2", "--b", "40")
    assert call.exit_status == 0, call.stdout
    assert call.json["data"]["result"]["structuredContent"] == {"result": 42}
    assert server.methods() == ["server/discover", "tools/list", "tools/call"]
    assert server.received()[-1]["params"]["arguments"] == {"a": 2, "b": 40}
    assert_modern(server.received())


SLOW_START_S = 3.0  # longer than the 2 s probe window, spent before the server reads its stdin


@pytest.mark.parametrize("start_s", [SLOW_START_S])
def test_stdio_sdk_slow_start_gets_the_modern_era_R01(sdk, start_s):
    """Issue 27 item 3: the SDK server starts ``start_s`` late (before it reads its stdin, like npx under load). The
    probe window starts when the server has read the probe, so it is modern at once and never receives initialize
    (before: the window ran from the write, and initialize was sent behind the unread probe)."""
    server = sdk(delay=start_s)
    result = server.run("--check", "-v")
    assert result.exit_status == 0, result.stdout + result.stderr
    data = result.json["data"]
    assert (data["era"], data["protocol_version"]) == ("modern", MODERN)
    assert server.methods() == ["server/discover", "tools/list"]
    assert_modern(server.received())
    assert result.stderr.count("stdio server started") == 1


def test_stdio_sdk_answering_the_probe_after_the_window_locks_modern(sdk):
    """The window's limit: the server has read the probe but answers it only after the 2 s window. bkmcp has sent
    initialize behind it; the SDK answers discover (locking the modern era) and refuses initialize with -32022;
    bkmcp then asks discover again and stays modern on the same process."""
    server = sdk(hold=2.5)
    result = server.run("--tools", "-v")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert result.json["data"]["protocol_version"] == MODERN
    assert server.methods() == ["server/discover", "initialize", "server/discover", "tools/list"]
    assert "initialize refused with -32022" in result.stderr
    assert result.stderr.count("stdio server started") == 1


def test_stdio_sdk_pinned_legacy_R01(sdk):
    """Pinned 2025-11-25: initialize first (no probe), the handshake era for the whole process."""
    server = sdk(protocol_version="2025-11-25")
    check = server.run("--check")
    assert check.exit_status == 0, check.stdout
    assert check.json["data"]["era"] == "legacy" and check.json["data"]["protocol_version"] == "2025-11-25"
    assert server.methods() == ["initialize", "notifications/initialized", "tools/list"]
    assert server.received()[0]["params"]["protocolVersion"] == "2025-11-25"

    server.reset()
    call = server.run("echo", "--text", "hé", "--times", "2")
    assert call.exit_status == 0, call.stdout
    assert call.json["data"]["result"]["content"][0]["text"] == "hé hé"
    assert server.methods() == ["initialize", "notifications/initialized", "tools/list", "tools/call"]
    assert "_meta" not in json.dumps(server.received()[-1]["params"])


def test_stdio_sdk_pinned_modern_tool_help(sdk):
    server = sdk(protocol_version=MODERN)
    result = server.run("echo", "--help")
    assert result.exit_status == 0
    assert "--text" in result.stdout
    assert server.methods() == ["tools/list"]


def test_stdio_sdk_legacy_only_loop_falls_back(sdk):
    """The SDK's handshake-only stdio loop answers discover with -32601: legacy initialize on the same process."""
    server = sdk("legacy-pinned")
    result = server.run("--tools", "-v")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert result.json["data"]["protocol_version"] == "2025-11-25"
    assert server.methods() == ["server/discover", "initialize", "notifications/initialized", "tools/list"]
    assert result.stderr.count("stdio server started") == 1


# -- server-everything (legacy) ----------------------------------------------------------------------------


def test_stdio_everything_unpinned_is_legacy_R01_I01(everything):
    """server-everything answers discover with -32601 and keeps running: initialize on the same process.
    --check, --tools, calls (text and exact decimal arguments), and its get-env tool shows the minimal
    environment bkmcp passed."""
    server = everything()
    check = server.run("--check")
    assert check.exit_status == 0, check.stdout
    data = check.json["data"]
    assert data["era"] == "legacy" and data["protocol_version"] == "2025-11-25"
    assert data["server_info"]["name"] == "mcp-servers/everything"
    assert server.methods() == ["server/discover", "initialize", "notifications/initialized", "tools/list"]
    discover = server.received()[0]
    assert discover["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == MODERN

    server.reset()
    tools = server.run("--tools")
    assert tools.exit_status == 0
    assert {"echo", "get-sum", "get-env"} <= {t["name"] for t in tools.json["data"]["tools"]}

    server.reset()
    call = server.run("echo", "--message", "hi there")
    assert call.exit_status == 0, call.stdout
    assert call.json["data"]["result"]["content"][0]["text"] == "Echo: hi there"
    assert server.methods()[-1] == "tools/call"
    assert server.methods().count("tools/call") == 1

    total = server.run("get-sum", "--a", "1.5", "--b", "2")
    assert total.json["data"]["result"]["content"][0]["text"] == "The sum of 1.5 and 2 is 3.5."

    env_result = server.run("get-env")
    child_env = json.loads(env_result.json["data"]["result"]["content"][0]["text"])
    allowed = set(INHERITED) | {"PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "NO_COLOR", "TZ"}
    assert set(child_env) <= allowed, sorted(set(child_env) - allowed)


def test_stdio_everything_pinned_legacy_version(everything):
    server = everything(protocol_version="2025-06-18")
    result = server.run("--check")
    assert result.exit_status == 0, result.stdout
    assert result.json["data"]["protocol_version"] == "2025-06-18"
    assert server.methods() == ["initialize", "notifications/initialized", "tools/list"]
