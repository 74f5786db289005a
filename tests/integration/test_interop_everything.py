"""bkmcp against ``@modelcontextprotocol/server-everything@2026.8.31`` (TypeScript SDK 1.x, legacy-only, SSE with
priming events, stateful sessions): --check, --tools, and a call of every tool that needs no client capability.

Seed rows: R01 (legacy fallback from the modern probe, SSE priming events), R02, R04 (a task-required tool runs
as a task and is waited for: docs/contract.md §5 "Tasks"), I01. Skipped with the fixture's reason only when the
server is not installed.
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


def _sent(stderr: str, method: str) -> int:
    """How many ``method`` requests bkmcp's -v log shows it sent (the server keeps no request log)."""
    return sum(1 for line in stderr.splitlines() if f" [{method} id=" in line and "-> " in line)


@pytest.mark.parametrize("args", [("--body", '{"topic": "mcp"}'), ("--topic", "mcp"), ("--topic", "mcp", "--task")])
def test_interop_everything_task_required_tool_completes_as_a_task_R04(everything, args):
    """Its ``execution.taskSupport`` is "required" and the server declares ``tasks.requests.tools.call``: with or
    without ``--task`` it runs as a task (2025-11-25 core), polled with tasks/get at its 1 s interval, its result
    read once with tasks/result and printed as a plain call's; tools/call is sent once."""
    result = everything()("-v", "ev", "simulate-research-query", *args)
    assert result.exit_status == 0, result.stdout + result.stderr
    data = result.json["data"]
    assert set(data) == {"server", "tool", "result"}
    assert "Research Report: mcp" in data["result"]["content"][0]["text"]
    assert _sent(result.stderr, "tools/call") == 1 and _sent(result.stderr, "tasks/result") == 1
    assert 1 <= _sent(result.stderr, "tasks/get") <= 8  # about 4 s of work at a 1 s interval
    assert _sent(result.stderr, "tasks/cancel") == 0
    assert ("can only run as a task" in result.stderr) == ("--task" not in args)


def test_interop_everything_research_detaches_resumes_and_cancels(everything_server, tmp_path):
    """One-shot HTTP: ``--detach`` prints the handle at once; later commands (new processes, new sessions) ask its
    status and wait for its result by id; another is cancelled (tasks/cancel) and then ends as mcp_task_cancelled;
    ``--tasks`` lists both handles from the local store (0600) beside the server's tasks/list."""
    env = {"HOME": str(tmp_path)}
    config = write_mcp_json(tmp_path / "mcp-ev.json", {"ev": {"type": "http", "url": everything_server.url}})

    def run(*args: str):
        return run_bkmcp("--config", str(config), *args, env=env)

    detached = run("ev", "simulate-research-query", "--topic", "later", "--detach")
    assert detached.exit_status == 0, detached.stdout + detached.stderr
    handle = detached.json["data"]["task"]
    assert (handle["era"], handle["status"], handle["ttl_ms"]) == ("legacy", "working", 300000)
    task_id = handle["mcp_task_id"]
    assert detached.json["data"]["commands"]["result"].endswith(f"--task-result {task_id} --wait")
    status = run("ev", "--task-status", task_id)
    assert status.exit_status == 0 and status.json["data"]["task"]["status"] in ("working", "completed")
    done = run("ev", "--task-result", task_id, "--wait")
    assert done.exit_status == 0, done.stdout + done.stderr
    assert "Research Report: later" in done.json["data"]["result"]["content"][0]["text"]
    other = run("ev", "simulate-research-query", "--topic", "x", "--detach").json["data"]["task"]["mcp_task_id"]
    cancelled = run("ev", "--task-cancel", other)
    assert cancelled.exit_status == 0 and cancelled.json["data"]["task"]["status"] == "cancelled"
    ended = run("ev", "--task-result", other)
    assert (ended.exit_status, ended.error_code) == (2, "mcp_task_cancelled")
    listed = run("ev", "--tasks")
    assert listed.exit_status == 0, listed.stdout + listed.stderr
    assert {t["mcp_task_id"] for t in listed.json["data"]["tasks"]} == {task_id, other}
    assert isinstance(listed.json["data"]["server_tasks"], list)  # its tasks/list (of a new session)
    store = tmp_path / ".local" / "state" / "bkmcp" / "tasks.json"
    assert oct(store.stat().st_mode & 0o777) == "0o600" and "later" not in store.read_text()


def test_interop_everything_task_required_tool_help_and_tools_say_so(everything):
    run = everything()
    helped = run("ev", "simulate-research-query", "--help")
    assert helped.exit_status == 0 and "Task-only: it needs task support" in helped.stdout
    listed = run("ev", "--tools")
    cli = listed.json["data"]["cli"]
    assert cli["simulate-research-query"]["task_support"] == "required"
    assert [name for name, entry in cli.items() if "task_support" in entry] == ["simulate-research-query"]


def test_interop_everything_task_required_tool_completes_warm(everything_server, tmp_path):
    """The same task from a warm session (--keep-alive): the same report as one-shot, polled in the background
    process (test_interop_real_servers.py detaches, resumes and cancels over warm stdio)."""
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

    def report(done: subprocess.CompletedProcess) -> str:
        return json.loads(done.stdout)["data"]["result"]["content"][0]["text"]

    try:
        one = run("ev", "simulate-research-query", "--topic", "mcp")
        warm = run("-v", "ev", "simulate-research-query", "--topic", "mcp", "--keep-alive")
        assert daemon_running()
        assert (warm.returncode, one.returncode) == (0, 0), warm.stdout + warm.stderr
        assert report(warm) == report(one) and "Research Report: mcp" in report(warm)
        assert b"discovered 13 tool(s)" in warm.stderr and b"can only run as a task" in warm.stderr
    finally:
        run("--sessions", "--stop")
        until(lambda: not daemon_running(), "the background process ended", 20)


def test_interop_everything_task_required_tool_resident(tmp_path, everything_stdio_argv, interop_subprocess_env):
    """The resident lists it marked (never hidden) and runs its call_tool as a task, waited for (issue 39: before,
    it was refused unsent; test_resident_tasks.py detaches, resumes and keeps it per user); the -v log shows
    every tools/call written to the child's stdin: the task's and the echo's."""
    reg = tmp_path / "registry.db"
    write_registry(str(reg), [stdio_row("every", everything_stdio_argv, isolation="public")])
    res = Resident(reg, "-v", env=interop_subprocess_env)
    try:
        tools = {t["tool_name"]: t for t in res.ok("list_tools", "u")["tools"]}
        assert set(tools) >= EVERYTHING_TOOLS - {"get-roots-list"}
        assert tools["simulate-research-query"]["task_support"] == "required"
        assert [name for name, t in tools.items() if "task_support" in t] == ["simulate-research-query"]
        done = res.ok("call_tool", "u", server_name="every", tool_name="simulate-research-query",
                      arguments={"topic": "mcp"})  # fmt: skip
        assert "Research Report: mcp" in done["result"]["content"][0]["text"]
        assert res.ok("call_tool", "u", server_name="every", tool_name="echo", arguments={"message": "x"})
        assert res.events("tool.rejected") == []
        res.wait_event("task.completed", mcp_task_id=done["task"]["mcp_task_id"])
    finally:
        assert res.close() == []
    sent = [line for line in res.stderr_lines if "-> stdio [tools/call" in line]
    assert len(sent) == 2  # the task's and the echo's


def test_interop_everything_tool_help(everything):
    result = everything()("ev", "get-structured-content", "--help")
    assert result.exit_status == 0
    assert "--location" in result.stdout


def test_interop_everything_ambiguous_research_asks_on_tasks_result_and_is_answered(everything):
    """``ambiguous`` and an answer at hand (elicitation declared at initialize): the task moves to input_required
    and its question (``elicitation/create`` with the related-task ``_meta``) comes on the ``tasks/result`` stream
    (2025-11-25 tasks utility); ``--input`` answers it there, and the report names the chosen interpretation.
    tools/call is sent once, tasks/result once."""
    body = '{"topic": "python", "ambiguous": true}'
    result = everything()("-v", "ev", "simulate-research-query", "--body", body, "--input", "interpretation=snake")
    assert result.exit_status == 0, result.stdout + result.stderr
    report = result.json["data"]["result"]["content"][0]["text"]
    assert "Research Report: python (snake)" in report and "Clarification**: snake" in report
    assert _sent(result.stderr, "tools/call") == 1 and _sent(result.stderr, "tasks/result") == 1
    assert _sent(result.stderr, "tasks/cancel") == 0


def test_interop_everything_ambiguous_research_detached_is_answered_by_a_later_command(everything_server, tmp_path):
    """Detached (one-shot HTTP, the legacy session kept for the task): a later command continues that session with
    ``--task-result ID --wait --input …``; the question queued for the task comes on its ``tasks/result`` stream
    and that command's answer reaches it."""
    env = {"HOME": str(tmp_path)}
    config = write_mcp_json(tmp_path / "mcp-ev.json", {"ev": {"type": "http", "url": everything_server.url}})

    def run(*args: str):
        return run_bkmcp("--config", str(config), "ev", *args, env=env)

    body = '{"topic": "python", "ambiguous": true}'
    detached = run("simulate-research-query", "--body", body, "--detach", "--input", "interpretation=comedy")
    assert detached.exit_status == 0, detached.stdout + detached.stderr
    task_id = detached.json["data"]["task"]["mcp_task_id"]
    done = run("-v", "--task-result", task_id, "--wait", "--input", "interpretation=comedy")
    assert done.exit_status == 0, done.stdout + done.stderr
    assert "Research Report: python (comedy)" in done.json["data"]["result"]["content"][0]["text"]
    assert _sent(done.stderr, "tasks/result") == 1 and _sent(done.stderr, "tools/call") == 0
