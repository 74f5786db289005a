"""Tasks (docs/contract.md §5 "Tasks"), against the mock's "job" tools in both shapes: the 2025-11-25 core
(``params.task``, ``tasks/get|result|list|cancel``) and the 2026-07-28 extension ``io.modelcontextprotocol/tasks``
(declared per request, ``tasks/get|cancel`` with ``Mcp-Name: <taskId>``). What the server received is asserted:
one ``tools/call`` per command, polls bounded, the routing header, no ``tasks/cancel`` unless asked."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from mock_server.mcp_mock import TASK_CAPABILITIES, TASKS_EXTENSION, MockServer, mock_tool
from tests.helpers import ROOT, interrupted_run, run_bkmcp, write_mcp_json

pytestmark = [pytest.mark.integration]

LEGACY, MODERN = "2025-11-25", "2026-07-28"
ERAS = [LEGACY, MODERN]
SECRET = "tok-3d1c0ffee-secret"
TEXT = {"text": {"type": "string"}}


def job(name: str, support: str | None = "optional", **options: object) -> dict:
    tool = mock_tool(name, "job", TEXT, poll_ms=40, **options)
    if support is not None:
        tool["execution"] = {"taskSupport": support}
    return tool


TOOLS = [
    job("quick"),
    job("slowish", after_ms=300),
    job("must", "required"),
    job("never", end="never"),
    job("failing", end="failed"),
    job("erring", end="is_error"),
    job("cancelled", end="cancelled"),
    job("expiring", end="expires", after_ms=100),
    job("plain_only", None),
    mock_tool("echoer", "echo", TEXT),
]


@pytest.fixture
def server(http_mock):
    return http_mock({"tools": TOOLS, "capabilities": TASK_CAPABILITIES})


class Cli:
    """bkmcp in-process against one mock, with a private state directory (the task store)."""

    def __init__(self, tmp_path: Path, srv: MockServer, version: str | None) -> None:
        entry: dict = {"type": "http", "url": srv.url, "headers": {"Authorization": f"Bearer {SECRET}"}}
        if version:
            entry["protocolVersion"] = version
        self.srv = srv
        self.config = write_mcp_json(tmp_path / "mcp.json", {"m": entry})
        self.state = tmp_path / "state"
        self.env = {"HOME": str(tmp_path), "XDG_STATE_HOME": str(self.state)}

    def __call__(self, *args: str):
        return run_bkmcp("--config", str(self.config), "m", *args, env=self.env)

    @property
    def store(self) -> Path:
        return self.state / "bkmcp" / "tasks.json"

    def sent(self, method: str) -> list[dict]:
        return [e for e in self.srv.requests(method)]

    def params(self, method: str) -> list[dict]:
        return [json.loads(e["body"])["params"] for e in self.srv.requests(method)]


@pytest.fixture(params=ERAS)
def cli(request, tmp_path, server):
    return Cli(tmp_path, server, request.param)


def _assert_asked_as_task(cli: Cli, modern: bool) -> None:
    (call,) = cli.params("tools/call")
    if modern:
        caps = call["_meta"]["io.modelcontextprotocol/clientCapabilities"]
        assert caps["extensions"] == {TASKS_EXTENSION: {}} and "task" not in call
    else:
        assert call["task"] == {}


def test_task_waits_and_prints_the_result_as_a_plain_call_would(cli):
    modern = "2026" in cli.config.read_text()
    waited = cli("slowish", "--text", "hi", "--task")
    assert waited.exit_status == 0, waited.stdout + waited.stderr
    data = waited.json["data"]
    assert set(data) == {"server", "tool", "result"} and data["tool"] == "slowish"
    assert data["result"]["content"][0]["text"] == 'job done: {"text":"hi"}'
    _assert_asked_as_task(cli, modern)
    polls = cli.sent("tasks/get")
    assert 1 <= len(polls) <= 300 // 30 + 2  # at the server's 40 ms interval, jittered down to no less than 32 ms
    assert not cli.sent("tasks/cancel")
    if modern:  # the extension routes by task id: Mcp-Name on every tasks/* request
        task_id = polls[0]["json"]["params"]["taskId"]
        assert {e["headers"]["mcp-name"] for e in polls} == {task_id}
        assert {e["headers"]["mcp-method"] for e in polls} == {"tasks/get"}
        assert not cli.sent("tasks/result")
    else:
        assert len(cli.sent("tasks/result")) == 1


def test_a_task_required_tool_runs_as_a_task_without_the_flag(cli):
    modern = "2026" in cli.config.read_text()
    result = cli("must", "--text", "x")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert result.json["data"]["result"]["content"][0]["text"] == 'job done: {"text":"x"}'
    notes = [line for line in result.stderr.splitlines() if "task" in line]
    assert len(notes) == 1 and "can only run as a task" in notes[0]
    _assert_asked_as_task(cli, modern)


def test_a_plain_call_stays_plain(cli):
    result = cli("quick", "--text", "x")
    assert result.exit_status == 0, result.stderr
    (call,) = cli.params("tools/call")
    assert "task" not in call and not cli.sent("tasks/get")


@pytest.mark.parametrize(
    ("tool", "code"),
    [
        ("failing", "mcp_task_failed"),
        ("cancelled", "mcp_task_cancelled"),
        ("expiring", "mcp_task_expired"),
        ("erring", "mcp_tool_error"),
    ],
)
def test_a_task_that_does_not_complete_ends_with_a_stable_code(cli, tool, code):
    result = cli(tool, "--text", "x", "--task")
    assert result.exit_status == 2, result.stdout + result.stderr
    assert result.error_code == code
    envelope = result.json
    if code == "mcp_tool_error":  # the call's own isError result, as a plain call reports it
        assert envelope["data"]["result"]["isError"] is True
    elif code != "mcp_task_expired":
        assert envelope["data"]["task"]["status"] == tool.replace("failing", "failed")
    assert len(cli.sent("tools/call")) == 1 and not cli.sent("tasks/cancel")


def test_a_wait_that_outlasts_timeout_detaches_with_the_handle(cli):
    result = cli("never", "--text", "x", "--task", "--timeout", "1s")
    assert result.exit_status == 2, result.stdout + result.stderr
    envelope = result.json
    assert envelope["error"]["code"] == "mcp_task_running" and envelope["error"]["outcome"] == "task_running"
    assert "goes on" in envelope["error"]["message"]
    task = envelope["data"]["task"]
    assert task["status"] == "working" and task["mcp_task_id"].startswith("job-")
    assert envelope["data"]["commands"]["cancel"].endswith(f"--task-cancel {task['mcp_task_id']}")
    assert 1 <= len(cli.sent("tasks/get")) <= 1000 // 32 + 1  # bounded by --timeout and the interval
    assert not cli.sent("tasks/cancel") and len(cli.sent("tools/call")) == 1
    kept = json.loads(cli.store.read_text())["tasks"]
    assert [t["mcp_task_id"] for t in kept] == [task["mcp_task_id"]]


def test_task_on_a_tool_that_cannot_run_as_one_is_refused_unsent(tmp_path, server):
    legacy = Cli(tmp_path, server, LEGACY)
    refused = legacy("plain_only", "--text", "x", "--task")
    assert refused.exit_status == 2 and refused.error_code == "mcp_capability_unsupported"
    assert refused.json["error"]["outcome"] == "not_sent" and "cannot run as a task" in refused.json["error"]["message"]
    assert not server.requests("tools/call")


def test_a_modern_server_that_answers_at_once_is_printed_as_is(tmp_path, server):
    modern = Cli(tmp_path, server, MODERN)
    server.core.update({"capabilities": {"tools": {}}})  # no extension offered: bkmcp still declares it for --task
    result = modern("echoer", "--text", "x", "--task")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert "no task was made" in result.stderr
    _assert_asked_as_task(modern, True)


def test_detach_prints_the_handle_and_later_commands_resume_it(cli):
    modern = "2026" in cli.config.read_text()
    detached = cli("slowish", "--text", "hi-value", "--detach")
    assert detached.exit_status == 0, detached.stdout + detached.stderr
    data = detached.json["data"]
    task = data["task"]
    assert set(task) >= {"mcp_task_id", "server", "era", "status", "ttl_ms", "poll_interval_ms", "tool"}
    assert (task["era"], task["status"], task["ttl_ms"]) == ("modern" if modern else "legacy", "working", 60000)
    task_id = task["mcp_task_id"]
    assert set(data["commands"]) == {"status", "result", "cancel"} and task_id in data["commands"]["status"]
    assert len(cli.sent("tools/call")) == 1 and not cli.sent("tasks/get")
    status = cli("--task-status", task_id)
    assert status.exit_status == 0, status.stdout + status.stderr
    assert status.json["data"]["task"]["mcp_task_id"] == task_id
    assert status.json["data"]["task"]["tool"] == "slowish"  # from the local store
    done = cli("--task-result", task_id, "--wait")
    assert done.exit_status == 0, done.stdout + done.stderr
    assert done.json["data"]["result"]["content"][0]["text"] == 'job done: {"text":"hi-value"}'
    assert done.json["data"]["task"]["status"] == "completed"
    assert len(cli.sent("tools/call")) == 1  # resuming never calls again
    if modern:
        assert {e["headers"]["mcp-name"] for e in cli.sent("tasks/get")} == {task_id}
    else:  # the task lives in its legacy session: the later commands continue it, without a new initialize
        (call,) = cli.sent("tools/call")
        session = call["headers"]["mcp-session-id"]
        assert {e["headers"]["mcp-session-id"] for e in cli.sent("tasks/get")} == {session}
        assert len(cli.sent("initialize")) == 1
    listed = cli("--tasks")
    assert listed.exit_status == 0, listed.stdout + listed.stderr
    assert [t["mcp_task_id"] for t in listed.json["data"]["tasks"]] == [task_id]
    assert "session_id" not in listed.json["data"]["tasks"][0]
    if modern:
        assert listed.json["data"]["server_tasks"] is None and not cli.sent("tasks/list")
    else:
        assert task_id in [t["taskId"] for t in listed.json["data"]["server_tasks"]]
    store = cli.store
    assert stat.S_IMODE(store.stat().st_mode) == 0o600 and stat.S_IMODE(store.parent.stat().st_mode) == 0o700
    text = store.read_text()
    assert SECRET not in text and "hi-value" not in text  # no credential, no argument value


def test_a_detached_task_is_cancelled_by_id(cli):
    modern = "2026" in cli.config.read_text()
    task_id = cli("never", "--text", "x", "--detach").json["data"]["task"]["mcp_task_id"]
    cancelled = cli("--task-cancel", task_id)
    assert cancelled.exit_status == 0, cancelled.stdout + cancelled.stderr
    # the extension acknowledges with {} (cancellation is cooperative); the core answers the cancelled task
    assert cancelled.json["data"]["task"]["status"] == ("cancel_requested" if modern else "cancelled")
    (sent,) = cli.sent("tasks/cancel")
    if modern:
        assert sent["headers"]["mcp-name"] == task_id
    ended = cli("--task-result", task_id)
    assert (ended.exit_status, ended.error_code) == (2, "mcp_task_cancelled")
    assert len(cli.sent("tools/call")) == 1


def test_a_result_asked_before_the_task_ends_says_it_still_runs(cli):
    task_id = cli("never", "--text", "x", "--detach").json["data"]["task"]["mcp_task_id"]
    early = cli("--task-result", task_id)
    assert (early.exit_status, early.error_code) == (2, "mcp_task_running")
    assert early.json["data"]["commands"]["result"].endswith("--wait")
    assert not cli.sent("tasks/cancel")


def test_an_unknown_task_id_is_expired(cli):
    result = cli("--task-status", "job-nope")
    assert (result.exit_status, result.error_code) == (2, "mcp_task_expired")
    assert "no longer knows task 'job-nope'" in result.json["error"]["message"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--task-status", "x", "--wait"), "--wait is only valid with --task-result"),
        (("--task",), "--task needs a tool call"),
        (("quick", "--body", "{}", "--dry-run", "--detach"), "--dry-run cannot be combined with --detach"),
        (("--tasks", "--task-status", "x"), "cannot be combined"),
        (("--task-cancel",), "--task-cancel needs a task id"),
        (("quick", "--detach", "--raw"), "--raw prints a tool call's result as text; --detach has none"),
    ],
)
def test_task_option_mistakes_are_usage_errors(tmp_path, args, message):
    config = write_mcp_json(tmp_path / "mcp.json", {"m": {"type": "http", "url": "http://127.0.0.1:9/mcp"}})
    result = run_bkmcp("--config", str(config), "m", *args, env={"HOME": str(tmp_path)})
    assert (result.exit_status, result.error_code) == (1, "usage_error"), result.stderr
    assert message in result.json["error"]["message"]


def test_a_tool_property_named_task_is_reached_only_through_body(tmp_path):
    """``task`` and ``detach`` are reserved (docs/contract.md §6): such a property has no flag; ``wait``, ``tasks``
    and ``task-status`` are bkmcp's only before a tool name, so they stay a tool's own flags."""
    properties = {"task": {"type": "string"}, "detach": {"type": "boolean"}, "wait": {"type": "integer"}}
    tool = mock_tool("t", "echo", {**properties, "tasks": {"type": "string"}, "task-status": {"type": "string"}})
    with MockServer({"tools": [tool]}) as srv:
        config = write_mcp_json(tmp_path / "mcp.json", {"m": {"type": "http", "url": srv.url}})
        listed = run_bkmcp("--config", str(config), "m", "--tools", env={"HOME": str(tmp_path)})
        body_only = listed.json["data"]["cli"]["t"]["body_only"]
        assert {entry["name"] for entry in body_only} >= {"task", "detach"}
        sent = run_bkmcp("--config", str(config), "m", "t", "--body", '{"task": "write"}', env={"HOME": str(tmp_path)})
        assert sent.exit_status == 0, sent.stdout + sent.stderr
        assert json.loads(srv.requests("tools/call")[0]["body"])["params"]["arguments"] == {"task": "write"}
        # the names that are modes before a tool name stay the tool's own flags after it
        flags = ("--wait", "3", "--tasks", "all", "--task-status", "open")
        own = run_bkmcp("--config", str(config), "m", "t", *flags, env={"HOME": str(tmp_path)})
        assert own.exit_status == 0, own.stdout + own.stderr
        sent = json.loads(srv.requests("tools/call")[1]["body"])["params"]["arguments"]
        assert sent == {"wait": 3, "tasks": "all", "task-status": "open"}


def test_ctrl_c_while_waiting_detaches_without_cancelling(tmp_path, server):
    """SIGINT during the wait: exit 130, the task's handle and the commands that resume or cancel it; the server
    receives neither tasks/cancel nor notifications/cancelled, and the task is still there."""
    cli = Cli(tmp_path, server, LEGACY)
    env = {**cli.env, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    argv = [sys.executable, str(ROOT / "bkmcp.py"), "--config", str(cli.config), "m", "never", "--text", "x", "--task"]
    status, out, err = interrupted_run(argv, env, lambda: server.wait_for("tasks/get", timeout=30))
    assert status == 130, out + err
    envelope = json.loads(out)
    assert envelope["error"]["code"] == "mcp_cancelled" and envelope["error"]["outcome"] == "task_running"
    task_id = envelope["data"]["task"]["mcp_task_id"]
    assert envelope["data"]["commands"]["cancel"].endswith(f"--task-cancel {task_id}")
    assert "not cancelled" in envelope["error"]["message"]
    time.sleep(0.2)  # anything bkmcp would still send on its way out has arrived
    assert not server.requests("tasks/cancel") and not server.requests("notifications/cancelled")
    assert cli("--task-status", task_id).json["data"]["task"]["status"] == "working"


def test_over_stdio_one_shot_a_task_is_waited_for_and_detach_is_refused(tmp_path):
    from tests.helpers import stdio_mock_entry, stdio_mock_log

    entry, log = stdio_mock_entry(tmp_path, {"tools": TOOLS, "capabilities": TASK_CAPABILITIES}, LEGACY)
    config = write_mcp_json(tmp_path / "mcp.json", {"s": entry})
    env = {"HOME": str(tmp_path)}
    waited = run_bkmcp("--config", str(config), "s", "must", "--text", "x", env=env)
    assert waited.exit_status == 0, waited.stdout + waited.stderr
    refused = run_bkmcp("--config", str(config), "s", "slowish", "--text", "x", "--detach", env=env)
    assert (refused.exit_status, refused.error_code) == (1, "usage_error")
    assert "--keep-alive" in refused.json["error"]["hint"] and "live in its process" in refused.json["error"]["message"]
    status = run_bkmcp("--config", str(config), "s", "--task-status", "job-x", env=env)
    assert (status.exit_status, status.error_code) == (1, "usage_error")
    listed = run_bkmcp("--config", str(config), "s", "--tasks", env=env)  # the local store only: no process
    assert listed.exit_status == 0 and listed.json["data"]["server_tasks"] is None
    assert [t["tool"] for t in listed.json["data"]["tasks"]] == ["must"]  # kept, though it lived one command
    calls = [e for e in stdio_mock_log(log) if e.get("rpc_method") == "tools/call"]
    assert len(calls) == 1 and calls[0]["json"]["params"]["task"] == {}
    assert len([e for e in stdio_mock_log(log) if e.get("rpc_method") == "initialize"]) == 1


def test_without_a_state_directory_the_handle_is_printed_and_one_warning_says_it_is_not_kept(tmp_path, server):
    cli = Cli(tmp_path, server, MODERN)
    result = run_bkmcp("--config", str(cli.config), "m", "slowish", "--text", "x", "--detach", env={"HOME": ""})
    assert result.exit_status == 0, result.stdout + result.stderr
    assert result.json["data"]["task"]["status"] == "working"
    assert result.stderr.count("task handles are not kept") == 1


def test_with_verbose_each_status_is_a_line_and_stdout_is_unchanged(cli):
    result = cli("-v", "slowish", "--text", "x", "--task")
    assert result.exit_status == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("bkmcp: task ")]
    assert lines and lines[-1].startswith("bkmcp: task completed: mock job completed (")
    assert set(result.json["data"]) == {"server", "tool", "result"}


def test_a_modern_server_offering_tasks_gets_the_extension_on_every_call_and_decides(tmp_path, server):
    """Unpinned, the server/discover capabilities offer the extension: a plain call declares it too (the server
    alone decides), and a task the server makes is waited for, one stderr line saying so."""
    entry = {"type": "http", "url": server.url}
    config = write_mcp_json(tmp_path / "mcp.json", {"m": entry})
    result = run_bkmcp("--config", str(config), "m", "quick", "--text", "x", env={"HOME": str(tmp_path)})
    assert result.exit_status == 0, result.stdout + result.stderr
    assert "the server runs tool 'quick' as a task" in result.stderr
    assert result.json["data"]["result"]["content"][0]["text"] == 'job done: {"text":"x"}'
    echoed = run_bkmcp("--config", str(config), "m", "echoer", "--text", "x", env={"HOME": str(tmp_path)})
    assert echoed.exit_status == 0 and "task" not in echoed.stderr
    for params in [json.loads(e["body"])["params"] for e in server.requests("tools/call")]:
        assert params["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"] == {TASKS_EXTENSION: {}}


@pytest.mark.parametrize("version", ERAS)
def test_a_stdio_task_detaches_resumes_and_is_cancelled_within_keep_alive(tmp_path, version):
    """Warm stdio (the mock in both eras): the background process keeps the server and its tasks, so a detached
    task is resumed by id and another cancelled; one server process served every command, one tools/call each."""
    from tests.helpers import KeepAliveCommands, stdio_mock_entry, stdio_mock_log

    entry, log = stdio_mock_entry(tmp_path, {"tools": TOOLS, "capabilities": TASK_CAPABILITIES}, version)
    commands = KeepAliveCommands(tmp_path, write_mcp_json(tmp_path / "mcp.json", {"s": entry}))

    def run(*args: str) -> dict:
        done = commands.run(*args)
        return {"status": done.returncode, "envelope": json.loads(done.stdout or b"null"), "stderr": done.stderr}

    try:
        detached = run("s", "slowish", "--text", "later", "--detach", "--keep-alive")
        assert detached["status"] == 0, detached
        handle = detached["envelope"]["data"]["task"]
        assert handle["transport"] == "stdio" and detached["envelope"]["data"]["commands"]["result"].endswith(
            "--wait --keep-alive"
        )
        done = run("s", "--task-result", handle["mcp_task_id"], "--wait", "--keep-alive")
        assert done["status"] == 0, done
        assert done["envelope"]["data"]["result"]["content"][0]["text"] == 'job done: {"text":"later"}'
        other = run("s", "never", "--text", "x", "--detach", "--keep-alive")["envelope"]["data"]["task"]
        cancelled = run("s", "--task-cancel", other["mcp_task_id"], "--keep-alive")
        assert cancelled["status"] == 0, cancelled
        ended = run("s", "--task-result", other["mcp_task_id"], "--keep-alive")
        assert (ended["status"], ended["envelope"]["error"]["code"]) == (2, "mcp_task_cancelled")
    finally:
        commands.stop()
    received = stdio_mock_log(log)
    assert len([e for e in received if e.get("rpc_method") == "tools/call"]) == 2
    assert len([e for e in received if e.get("rpc_method") == "tasks/cancel"]) == 1
    if version == LEGACY:
        assert len([e for e in received if e.get("rpc_method") == "initialize"]) == 1  # one server process
