"""bkmcp against ``@modelcontextprotocol/server-everything@2026.8.31`` (TypeScript SDK 1.x, legacy-only, SSE with
priming events, stateful sessions): --check, --tools, and a call of every tool that needs no client capability.

Seed rows: R01 (legacy fallback from the modern probe, SSE priming events), R02, R04 (a task-required tool is
never reported as success), I01. Skipped with the fixture's reason only when the server is not installed.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import pytest
from resident_harness import Resident, stdio_row, write_registry

from tests.helpers import ROOT, pids_running, run_bkmcp, until, write_mcp_json
from tests.integration.conftest_interop import EVERYTHING_TOOLS

pytestmark = [pytest.mark.integration, pytest.mark.interop]

# Every tool that needs no client capability, with arguments that keep it offline and quick.
CALLS = {
    "echo": {"message": "hello 网关"},
    "get-annotated-message": {"messageType": "success", "includeImage": True},
    "get-env": {},
    "get-resource-links": {"count": 2},
    "get-resource-reference": {"resourceType": "Text", "resourceId": 1},
    "get-structured-content": {"location": "Chicago"},
    "get-sum": {"a": 19, "b": 23},
    "get-tiny-image": {},
    "gzip-file-as-resource": {"name": "x.gz", "data": "data:text/plain;base64," + base64.b64encode(b"hi").decode()},
    "toggle-simulated-logging": {},
    "toggle-subscriber-updates": {},
    "trigger-long-running-operation": {"duration": 1, "steps": 2},
}


@pytest.fixture
def everything(everything_server, tmp_path):
    def make(version: str | None = None):
        entry = {"type": "http", "url": everything_server.url}
        if version:
            entry["protocolVersion"] = version
        config = write_mcp_json(tmp_path / f"mcp-{version or 'auto'}.json", {"ev": entry})
        return lambda *args: run_bkmcp("--config", str(config), *args)

    return make


@pytest.mark.parametrize("version", [None, "2025-11-25", "2025-06-18", "2025-03-26"])
def test_interop_everything_check_R01(everything, version):
    result = everything(version)("ev", "--check")
    assert result.exit_status == 0, result.stdout + result.stderr
    data = result.json["data"]
    assert data["era"] == "legacy"
    assert data["protocol_version"] == (version or "2025-11-25")
    assert data["server_info"]["name"] == "mcp-servers/everything"
    assert data["tool_count"] == len(EVERYTHING_TOOLS) and data["complete"] is True


def test_interop_everything_tools_keep_every_field(everything):
    result = everything()("ev", "--tools")
    assert result.exit_status == 0, result.stdout
    tools = {t["name"]: t for t in result.json["data"]["tools"]}
    assert set(tools) == EVERYTHING_TOOLS
    assert tools["simulate-research-query"]["execution"] == {"taskSupport": "required"}
    assert tools["get-structured-content"]["outputSchema"]["type"] == "object"
    assert all("title" in t and "annotations" in t for t in tools.values())


@pytest.mark.parametrize("tool", sorted(CALLS))
def test_interop_everything_call_every_capability_free_tool_R02(everything, tool):
    result = everything()("ev", tool, "--body", json.dumps(CALLS[tool], ensure_ascii=False))
    assert result.exit_status == 0, result.stdout + result.stderr
    content = result.json["data"]["result"]["content"]
    assert isinstance(content, list) and content
    if tool == "get-sum":
        assert "42" in content[0]["text"]
    if tool == "echo":
        assert "hello 网关" in content[0]["text"]
    if tool == "get-tiny-image":
        assert any(block["type"] == "image" and block["data"] for block in content)


def test_interop_everything_call_with_flags_and_pinned_version(everything):
    result = everything("2025-06-18")("ev", "get-sum", "--a", "1.5", "--b", "2")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert "3.5" in result.json["data"]["result"]["content"][0]["text"]


@pytest.mark.parametrize("args", [("--body", '{"topic": "mcp"}'), ("--topic", "mcp")])
def test_interop_everything_task_required_tool_is_never_success_R04(everything, args):
    """Its ``execution.taskSupport`` is "required": refused before sending (issue 27 item 5). What bkmcp sent is
    read from its own -v log of every HTTP request (the server keeps no request log)."""
    result = everything()("-v", "ev", "simulate-research-query", *args)
    assert result.exit_status == 2, result.stdout + result.stderr
    assert result.error_code == "mcp_capability_unsupported"
    error = result.json["error"]
    assert "needs task support" in error["message"] and "nothing was sent" in error["message"]
    assert error["outcome"] == "not_sent"
    assert "tools/list" in result.stderr and "tools/call" not in result.stderr


def test_interop_everything_task_required_tool_help_and_tools_say_so(everything):
    run = everything()
    helped = run("ev", "simulate-research-query", "--help")
    assert helped.exit_status == 0 and "Task-only: it needs task support" in helped.stdout
    listed = run("ev", "--tools")
    cli = listed.json["data"]["cli"]
    assert cli["simulate-research-query"]["task_support"] == "required"
    assert [name for name, entry in cli.items() if "task_support" in entry] == ["simulate-research-query"]


def test_interop_everything_task_required_tool_refused_warm(everything_server, tmp_path):
    """The same refusal from a warm session (--keep-alive): byte for byte the one-shot answer, after discovery
    (test_task_only_tools.py checks on a mock's request log that a warm session sends no tools/call)."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    config = write_mcp_json(tmp_path / "mcp.json", {"ev": {"type": "http", "url": everything_server.url}})
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(runtime)}

    def run(*args: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, str(ROOT / "bkmcp.py"), "--config", str(config), *args]
        return subprocess.run(argv, capture_output=True, env=env, cwd=tmp_path, timeout=120)

    daemon = f"--keep-alive-daemon {runtime / 'bkmcp'}"

    def daemon_running() -> bool:
        return bool(pids_running(daemon))

    try:
        one = run("ev", "simulate-research-query", "--topic", "mcp")
        warm = run("-v", "ev", "simulate-research-query", "--topic", "mcp", "--keep-alive")
        assert daemon_running()
        assert (warm.returncode, warm.stdout) == (one.returncode, one.stdout) and warm.returncode == 2
        assert json.loads(warm.stdout)["error"]["code"] == "mcp_capability_unsupported"
        assert b"discovered 13 tool(s)" in warm.stderr
    finally:
        run("--sessions", "--stop")
        until(lambda: not daemon_running(), "the background process ended", 20)


def test_interop_everything_task_required_tool_resident(tmp_path, everything_stdio_argv, interop_subprocess_env):
    """The resident lists it marked (never hidden) and answers its call_tool unsent; the -v log shows every
    tools/call written to the child's stdin: only the echo's."""
    reg = tmp_path / "registry.db"
    write_registry(str(reg), [stdio_row("every", everything_stdio_argv, isolation="public")])
    res = Resident(reg, "-v", env=interop_subprocess_env)
    try:
        tools = {t["tool_name"]: t for t in res.ok("list_tools", "u")["tools"]}
        assert set(tools) >= EVERYTHING_TOOLS - {"get-roots-list"}
        assert tools["simulate-research-query"]["task_support"] == "required"
        assert [name for name, t in tools.items() if "task_support" in t] == ["simulate-research-query"]
        refused = res.ask("call_tool", "u", server_name="every", tool_name="simulate-research-query",
                          arguments={"topic": "mcp"})  # fmt: skip
        assert refused["error_code"] == "mcp_capability_unsupported" and refused["details"]["outcome"] == "not_sent"
        assert res.ok("call_tool", "u", server_name="every", tool_name="echo", arguments={"message": "x"})
        (rejected,) = res.wait_event("tool.rejected", tool="simulate-research-query")
        assert rejected["error_code"] == "mcp_capability_unsupported"
    finally:
        assert res.close() == []
    sent = [line for line in res.stderr_lines if "-> stdio [tools/call" in line]
    assert len(sent) == 1  # the echo's


def test_interop_everything_tool_help(everything):
    result = everything()("ev", "get-structured-content", "--help")
    assert result.exit_status == 0
    assert "--location" in result.stdout
