"""Task-only tools (issue 27 item 5, docs/contract.md §5): a tool declaring ``execution.taskSupport: "required"`` of
a server that declares no tasks is refused as ``mcp_capability_unsupported`` before any ``tools/call`` reaches the
server — one-shot (HTTP in both eras, stdio), warm (``--keep-alive``) and resident (its task rules are the CLI's) —
while ``"optional"``, absent and malformed declarations are called as before. Help, ``--tools`` and the
resident's ``list_tools`` say so; the tool object stays as sent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from resident_harness import mock_stdio, stdio_row, write_registry

from mock_server.mcp_mock import DEFAULT_TOOLS, MockServer, mock_tool
from tests.helpers import KeepAliveCommands, pids_running, run_bkmcp, write_mcp_json

pytestmark = [pytest.mark.integration]

TEXT = {"text": {"type": "string"}}


def _tool(name: str, execution: object = None) -> dict:
    tool = mock_tool(name, "echo", TEXT, ["text"])
    if execution is not None:
        tool["execution"] = execution
    return tool


RESEARCH = _tool("research", {"taskSupport": "required"})
TOOLS = [
    RESEARCH,
    _tool("maybe", {"taskSupport": "optional"}),
    _tool("plain"),
    _tool("odd", "not an object"),
    _tool("odd2", {"taskSupport": True}),
    *DEFAULT_TOOLS,
]
CALLABLE = ["maybe", "plain", "odd", "odd2"]
MODERN, LEGACY = "2026-07-28", "2025-11-25"


@pytest.fixture
def http_server():
    srv = MockServer({"tools": TOOLS})
    srv.start()
    yield srv
    srv.stop()


def _config(tmp_path: Path, servers: dict) -> Path:
    return write_mcp_json(tmp_path / "mcp.json", servers)


def _tool_calls(srv: MockServer) -> list[str]:
    return [json.loads(e["body"])["params"]["name"] for e in srv.requests("tools/call")]


def _logged(log: Path, method: str) -> list[dict]:
    """The requests of ``method`` a stdio mock received (its log is written as each line arrives)."""
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    return [e["json"] for e in entries if e.get("rpc_method") == method]


def _running(marker: str) -> bool:
    """A process of this machine has ``marker`` in its command line."""
    return bool(pids_running(marker))


def _assert_refused(result, tool: str = "research") -> dict:
    assert result.exit_status == 2, result.stdout + result.stderr
    envelope = json.loads(result.stdout)
    error = envelope["error"]
    assert error["code"] == "mcp_capability_unsupported"
    assert "needs task support" in error["message"] and "nothing was sent" in error["message"]
    assert error["outcome"] == "not_sent" and error["capability"] == "tasks"
    assert envelope["data"] == {"server": "m", "tool": tool}
    return error


@pytest.mark.parametrize("version", [MODERN, LEGACY])
def test_a_task_only_tool_is_refused_and_never_sent_over_http(tmp_path, http_server, version):
    """The server declares no tasks (legacy: no ``capabilities.tasks``; modern: its ``server/discover`` offers no
    tasks extension), so a task-only tool cannot run (a server that runs tasks: test_tasks.py)."""
    entry = {"type": "http", "url": http_server.url, **({"protocolVersion": version} if version == LEGACY else {})}
    config = _config(tmp_path, {"m": entry})
    refused = run_bkmcp("--config", str(config), "m", "research", "--text", "x")
    _assert_refused(refused)
    body = run_bkmcp("--config", str(config), "m", "research", "--body", '{"text": "x"}')
    _assert_refused(body)
    assert http_server.requests("tools/list") and _tool_calls(http_server) == []
    for name in CALLABLE:  # "optional", absent and malformed declarations are called as before
        called = run_bkmcp("--config", str(config), "m", name, "--text", name)
        assert called.exit_status == 0, called.stdout + called.stderr
    assert _tool_calls(http_server) == CALLABLE


def test_a_task_only_tool_is_refused_over_stdio(tmp_path):
    log = tmp_path / "stdio.jsonl"
    argv = mock_stdio({"tools": TOOLS}, log)
    config = _config(tmp_path, {"m": {"type": "stdio", "command": argv[0], "args": argv[1:]}})
    _assert_refused(run_bkmcp("--config", str(config), "m", "research", "--text", "x"))
    assert run_bkmcp("--config", str(config), "m", "maybe", "--text", "y").exit_status == 0
    assert _logged(log, "tools/list") and [c["params"]["name"] for c in _logged(log, "tools/call")] == ["maybe"]


def test_tools_and_help_say_it_needs_task_support_and_keep_the_tool_as_sent(tmp_path, http_server):
    config = _config(tmp_path, {"m": {"type": "http", "url": http_server.url}})
    listed = run_bkmcp("--config", str(config), "m", "--tools")
    assert listed.exit_status == 0, listed.stderr
    data = listed.json["data"]
    sent = {k: v for k, v in RESEARCH.items() if not k.startswith("x-mock")}
    assert next(t for t in data["tools"] if t["name"] == "research") == sent  # the tool object as sent
    assert data["cli"]["research"]["task_support"] == "required"
    assert any("needs task support" in note for note in data["cli"]["research"]["notes"])
    for name in CALLABLE:
        assert "task_support" not in data["cli"][name]
    helped = run_bkmcp("--config", str(config), "m", "research", "--help")
    assert helped.exit_status == 0
    assert "Task-only: it needs task support" in helped.stdout and "--text" in helped.stdout
    assert "Task-only" not in run_bkmcp("--config", str(config), "m", "maybe", "--help").stdout
    # a dry run never contacts the server: it cannot know the declaration, and says what it did not verify
    dry = run_bkmcp("--config", str(config), "m", "research", "--body", "{}", "--dry-run")
    assert dry.exit_status == 0 and "tool_exists" in dry.json["data"]["unverified"]
    assert _tool_calls(http_server) == []


def test_a_warm_session_refuses_it_the_same_way(tmp_path, http_server):
    commands = KeepAliveCommands(tmp_path, _config(tmp_path, {"m": {"type": "http", "url": http_server.url}}))
    run = commands.run
    try:
        one = run("m", "research", "--text", "x")
        warm = run("m", "research", "--text", "x", "--keep-alive")
        assert _running(commands.marker), "the warm command ran in the background process"
        assert (warm.returncode, warm.stdout, warm.stderr) == (one.returncode, one.stdout, one.stderr)
        assert json.loads(warm.stdout)["error"]["code"] == "mcp_capability_unsupported"
        assert run("m", "maybe", "--text", "y", "--keep-alive").returncode == 0
        assert _tool_calls(http_server) == ["maybe"]
    finally:
        commands.stop()


def test_the_resident_lists_it_marked_and_refuses_its_call_unsent(tmp_path, resident):
    log = tmp_path / "stdio.jsonl"
    reg = tmp_path / "registry.db"
    write_registry(str(reg), [stdio_row("s", mock_stdio({"tools": TOOLS}, log), isolation="public")])
    res = resident(reg)
    listed = res.ok("list_tools", "u")
    entries = {t["tool_name"]: t for t in listed["tools"]}
    assert set(entries) >= {"research", *CALLABLE}  # still listed, never hidden
    assert entries["research"]["task_support"] == "required"
    assert all("task_support" not in entries[name] for name in CALLABLE)
    refused = res.ask("call_tool", "u", server_name="s", tool_name="research", arguments={"text": "x"})
    assert refused["success"] is False and refused["error_code"] == "mcp_capability_unsupported"
    assert "nothing was sent" in refused["error"] and refused["details"]["outcome"] == "not_sent"
    by_name = res.ask("call_tool", "u", name=entries["research"]["name"], arguments={"text": "x"})
    assert by_name["error_code"] == "mcp_capability_unsupported"
    assert res.ok("call_tool", "u", server_name="s", tool_name="maybe", arguments={"text": "y"})
    rejected = res.wait_event("tool.rejected", count=2, tool="research")
    assert {e["error_code"] for e in rejected} == {"mcp_capability_unsupported"}
    assert all(e["tool"] != "research" for e in res.events("tool.started"))
    assert [c["params"]["name"] for c in _logged(log, "tools/call")] == ["maybe"]
