"""Resident tasks (docs/contract.md §11.2 "Tasks", docs/resident.md): ``call_tool`` with ``task: "wait"|"detach"``
(wait the default of a task-only tool), ``get_task``, ``get_task_result`` (``wait``), ``cancel_task`` and
``list_tasks`` on the CLI's own task paths, in both shapes — the 2025-11-25 core (``params.task``) and the
2026-07-28 extension ``io.modelcontextprotocol/tasks`` — against the mock's "job" tools and server-everything's
``simulate-research-query``. Two users: each sees only their own tasks, and one user's ``mcp_task_id`` does
nothing for the other (the server receives nothing). Exactly one ``tools/call`` per ``call_tool``; a live task
keeps its server from the idle reaper; ``task.*`` events carry ids, the server and the status, never a value."""

from __future__ import annotations

import io
import itertools
import json

import pytest
from resident_harness import Resident, http_row, mock_stdio, stdio_row, write_registry

import bkmcp
from mock_server.mcp_mock import TASK_CAPABILITIES, TASKS_EXTENSION
from tests.helpers import resident_options
from tests.integration.test_resident_inprocess import _Answers
from tests.integration.test_tasks import job

pytestmark = [pytest.mark.integration]

LEGACY, MODERN = "2025-11-25", "2026-07-28"
VALUE = "kept-arg-7f3"  # an argument value: never in an event
CAPS = "io.modelcontextprotocol/clientCapabilities"


TOOLS = [
    job("slowish", after_ms=300),
    job("must", "required"),
    job("never", end="never"),
    job("failing", end="failed"),
    job("asking", end="input", after_ms=50),
    job("plain_only", None),
]


def scenario(version: str) -> dict:
    return {"tools": TOOLS, "capabilities": TASK_CAPABILITIES, "versions": [version]}


class InProcess:
    """The resident run in this process (``ResidentServer`` with injected streams, so coverage measures it),
    asked as ``resident_harness.Resident`` is: ``ask``, ``ok``, ``events``, ``wait_event``."""

    _ids = itertools.count(1)
    events = Resident.events
    wait_event = Resident.wait_event
    ok = Resident.ok

    def __init__(self, registry, *options: str) -> None:
        self.log = bkmcp.Log(io.StringIO())
        opts = resident_options(str(registry), *options)
        self.registry = bkmcp.open_registry(opts.registry, env={}, log=self.log, timeout=5.0)
        self.events_path = registry.with_suffix(".events.jsonl")
        self.sink = bkmcp.EventSink(open(self.events_path, "w"), self.log.redactor, owned=True)
        self.out = _Answers()
        self.server = bkmcp.ResidentServer(
            opts, registry=self.registry, stdout=self.out, log=self.log, events=self.sink, env={"PATH": "/usr/bin:/bin"}
        )

    def ask(self, action: str, user: str | None = None, **params: object) -> dict:
        task_id = f"p{next(self._ids)}"
        body = {"command": "invoke", "task_id": task_id, "params": {"action": action, **params}}
        if user is not None:
            body["user"] = {"userId": user}
        self.server.dispatch(json.dumps(body).encode())
        return self.out.wait(task_id)  # its events are in the file already (a file takes each line at once)

    def close(self) -> None:
        self.server.pool.reap_once()  # a reaper round: the records past their time forgotten first
        self.server.finish(grace=5.0)
        self.registry.close()
        self.sink.close()


@pytest.fixture(params=[(LEGACY, "process"), (MODERN, "process"), (LEGACY, "inprocess"), (MODERN, "inprocess")])
def world(request, tmp_path, resident, http_mock):
    """A public HTTP mock of one era behind a resident (a process, or in this one), shared by two users."""
    era, how = request.param
    srv = http_mock(scenario(era))
    reg = tmp_path / "registry.db"
    write_registry(str(reg), [http_row("m", srv.url)])
    if how == "process":
        yield era, srv, resident(reg)
        return
    res = InProcess(reg)
    try:
        yield era, srv, res
    finally:
        res.close()


def received(srv, method: str) -> list[dict]:
    return [json.loads(e["body"]) for e in srv.requests(method)]


def asked_for(srv, method: str, task_id: str) -> list[dict]:
    """The ``method`` requests the server received for task ``task_id``."""
    return [r for r in received(srv, method) if r["params"].get("taskId") == task_id]


def call(res: Resident, user: str, tool: str, **params: object) -> dict:
    return res.ask("call_tool", user, server_name="m", tool_name=tool, arguments={"text": VALUE}, **params)


def test_each_user_sees_only_their_own_tasks_and_another_users_id_sends_nothing(world):
    era, srv, res = world
    mine = call(res, "u1", "never", task="detach")
    theirs = call(res, "u2", "never", task="detach")
    assert mine["success"] and theirs["success"], (mine, theirs)
    mine_id, theirs_id = mine["result"]["task"]["mcp_task_id"], theirs["result"]["task"]["mcp_task_id"]
    assert [t["mcp_task_id"] for t in res.ok("list_tasks", "u1")["tasks"]] == [mine_id]
    assert [t["mcp_task_id"] for t in res.ok("list_tasks", "u2")["tasks"]] == [theirs_id]
    for action in ("get_task", "get_task_result", "cancel_task"):
        refused = res.ask(action, "u2", mcp_task_id=mine_id)
        assert refused["success"] is False and refused["error_code"] == "mcp_task_unknown", refused
        assert refused["details"]["outcome"] == "not_sent"
    assert res.ask("get_task", "u2", mcp_task_id=mine_id, server_name="m")["error_code"] == "mcp_task_unknown"
    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        assert asked_for(srv, method, mine_id) == []  # nothing reached the server for u2
    status = res.ok("get_task", "u1", mcp_task_id=mine_id)
    assert status["server_name"] == "m" and status["task"]["status"] == "working"
    assert len(asked_for(srv, "tasks/get", mine_id)) == 1
    assert len(received(srv, "tools/call")) == 2  # one per call_tool
    if era == MODERN:  # the extension routes by task id
        (polled,) = [e for e in srv.requests("tasks/get")]
        assert polled["headers"]["mcp-name"] == mine_id


def test_detach_then_get_task_result_reads_it_once_done(world):
    era, srv, res = world
    detached = call(res, "u1", "slowish", task="detach")
    assert detached["success"], detached
    handle = detached["result"]["task"]
    assert set(detached["result"]) == {"server_name", "tool_name", "task"}
    assert (handle["server"], handle["tool"], handle["status"]) == ("m", "slowish", "working")
    assert handle["era"] == ("modern" if era == MODERN else "legacy") and handle["ttl_ms"] == 60000
    (sent,) = received(srv, "tools/call")
    if era == MODERN:
        assert sent["params"]["_meta"][CAPS]["extensions"] == {TASKS_EXTENSION: {}} and "task" not in sent["params"]
    else:
        assert sent["params"]["task"] == {}
    done = res.ok("get_task_result", "u1", mcp_task_id=handle["mcp_task_id"], wait=True)
    assert done["result"]["content"][0]["text"] == f'job done: {{"text":"{VALUE}"}}'
    assert (done["server_name"], done["tool_name"], done["task"]["status"]) == ("m", "slowish", "completed")
    assert len(received(srv, "tools/call")) == 1 and received(srv, "tasks/cancel") == []
    assert res.ok("list_tasks", "u1")["tasks"][0]["status"] == "completed"
    created = res.wait_event("task.created", mcp_task_id=handle["mcp_task_id"])
    (completed,) = res.wait_event("task.completed", mcp_task_id=handle["mcp_task_id"])
    assert created[0]["user"] == "u1" and created[0]["server"] == "m" and completed["status"] == "completed"
    assert set(completed) == {"ts", "event", "server", "user", "task_id", "mcp_task_id", "status"}
    assert VALUE not in res.events_path.read_text()


def test_a_task_only_tool_waits_by_default_with_one_tools_call(world):
    era, srv, res = world
    waited = call(res, "u1", "must")
    assert waited["success"], waited
    assert waited["result"]["result"]["content"][0]["text"] == f'job done: {{"text":"{VALUE}"}}'
    assert waited["result"]["task"]["status"] == "completed"
    assert len(received(srv, "tools/call")) == 1 and len(received(srv, "tasks/get")) >= 1
    assert [e["event"] for e in res.events() if e["event"].startswith(("task.", "tool."))] == [
        "tool.started",
        "task.created",
        "task.completed",
        "tool.finished",
    ]


def test_a_wait_that_runs_out_answers_the_handle_then_cancel_sends_one_tasks_cancel(world):
    era, srv, res = world
    ran_out = call(res, "u1", "never", task="wait", timeout_ms=600)
    assert ran_out["success"] is False and ran_out["error_code"] == "mcp_task_running", ran_out
    task_id = ran_out["details"]["task"]["mcp_task_id"]
    assert ran_out["details"]["outcome"] == "task_running" and asked_for(srv, "tasks/cancel", task_id) == []
    cancelled = res.ok("cancel_task", "u1", mcp_task_id=task_id)
    assert cancelled["task"]["status"] == ("cancel_requested" if era == MODERN else "cancelled")
    assert len(asked_for(srv, "tasks/cancel", task_id)) == 1
    (event,) = res.wait_event("task.cancelled", mcp_task_id=task_id)
    assert event["status"] == cancelled["task"]["status"]
    ended = res.ask("get_task_result", "u1", mcp_task_id=task_id)
    assert ended["error_code"] == "mcp_task_cancelled" and ended["details"]["task"]["status"] == "cancelled"
    assert len(asked_for(srv, "tasks/cancel", task_id)) == 1 and len(received(srv, "tools/call")) == 1


def test_a_failed_task_and_a_tool_that_cannot_run_one(world):
    era, srv, res = world
    failed = call(res, "u1", "failing", task="wait")
    assert failed["error_code"] == "mcp_task_failed" and failed["details"]["task"]["status"] == "failed", failed
    res.wait_event("task.failed", mcp_task_id=failed["details"]["task"]["mcp_task_id"])
    if era == LEGACY:  # the 2025-11-25 core: a tool without taskSupport cannot run as one, nothing is sent
        refused = call(res, "u1", "plain_only", task="detach")
        assert refused["error_code"] == "mcp_capability_unsupported" and refused["details"]["outcome"] == "not_sent"
        assert refused["error"].startswith("tool 'plain_only' of server 'm' cannot run as a task")
        res.wait_event("tool.rejected", tool="plain_only")
    bad = call(res, "u1", "slowish", task="later")
    assert bad["error_code"] == "invalid_command"
    assert res.ask("get_task", "u1")["error_code"] == "invalid_command"  # mcp_task_id is required
    assert res.ask("get_task_result", "u1", mcp_task_id="x", wait="yes")["error_code"] == "invalid_command"
    assert len(received(srv, "tools/call")) == 1


ACCEPT = {"action": "accept", "content": {"ok": True}}


@pytest.mark.parametrize("how", ["process", "inprocess"])
def test_a_task_that_asks_is_answered_by_its_user_through_get_task_result(tmp_path, resident, http_mock, how):
    """2026-07-28 with --elicitation forward: the task's question ends the wait as a success ``input_required``
    with the questions and the task's handle; its user answers with ``get_task_result`` (``input_responses`` by key,
    ``wait``): one ``tasks/update``, then the result; no second tools/call. Another user's answers send nothing."""
    srv = http_mock(scenario(MODERN))
    reg = tmp_path / "registry.db"
    write_registry(str(reg), [http_row("m", srv.url)])
    res = resident(reg, "--elicitation", "forward") if how == "process" else InProcess(reg, "--elicitation", "forward")
    try:
        asked = call(res, "u1", "asking", task="wait")
        assert asked["success"] and asked["result"]["status"] == "input_required", asked
        assert asked["result"]["input_requests"]["confirm"]["message"] == "Question confirm?"
        task_id = asked["result"]["task"]["mcp_task_id"]
        assert asked["result"]["task"]["status"] == "input_required" and received(srv, "tasks/update") == []
        again = res.ok("get_task_result", "u1", mcp_task_id=task_id, wait=True, input_responses={})  # no answer
        assert again["status"] == "input_required" and list(again["input_requests"]) == ["confirm"]
        assert again["mcp_task_id"] == task_id and received(srv, "tasks/update") == []
        stolen = res.ask("get_task_result", "u2", mcp_task_id=task_id, wait=True, input_responses={"confirm": ACCEPT})
        assert stolen["error_code"] == "mcp_task_unknown" and received(srv, "tasks/update") == []
        done = res.ok("get_task_result", "u1", mcp_task_id=task_id, wait=True, input_responses={"confirm": ACCEPT})
        assert done["result"]["content"][0]["text"].endswith(
            'answers: {"confirm":{"action":"accept","content":{"ok":true}}}'
        )
        (update,) = received(srv, "tasks/update")
        assert update["params"]["inputResponses"] == {"confirm": ACCEPT} and update["params"]["taskId"] == task_id
        assert len(received(srv, "tools/call")) == 1 and received(srv, "tasks/cancel") == []
        asked_events = [(e["method"], e["questions"]) for e in res.events("input.requested")]
        assert asked_events == [("tasks/get", 1), ("tasks/get", 1)]  # the first wait's and the unanswered one's
        answered = [(e["user"], e["method"], e["answers"]) for e in res.events("input.answered")]
        assert answered == [("u1", "tasks/update", 0), ("u1", "tasks/update", 1)]  # u2's id was refused first
        assert "ok" not in json.dumps(res.events("input.requested") + res.events("input.answered"))  # no values
        # the wait runs on the forwarding thread: it still ends before the command does, with the handle
        ran_out = call(res, "u1", "never", task="wait", timeout_ms=500)
        assert ran_out["error_code"] == "mcp_task_running" and ran_out["details"]["task"]["status"] == "working"
    finally:
        if how == "inprocess":
            res.close()


def test_a_legacy_task_question_is_held_and_answered_by_the_resume(tmp_path, resident, http_mock):
    """2025-11-25 with --elicitation forward: the question comes on the tasks/result stream (related-task _meta),
    is held open and answered ``input_required`` (``elicitation-1``); the same call_tool with ``resume`` sends the
    answer on that very request, and the result follows; one tools/call, one tasks/result."""
    srv = http_mock(scenario(LEGACY))
    reg = tmp_path / "registry.db"
    write_registry(str(reg), [http_row("m", srv.url)])
    res = resident(reg, "--elicitation", "forward")
    asked = call(res, "u1", "asking", task="wait")
    assert asked["success"] and asked["result"]["status"] == "input_required", asked
    assert list(asked["result"]["input_requests"]) == ["elicitation-1"]
    done = call(res, "u1", "asking", resume=asked["result"]["resume"], input_responses={"elicitation-1": ACCEPT})
    assert done["success"], done
    assert done["result"]["result"]["content"][0]["text"].endswith('"content":{"ok":true}}}')
    assert len(received(srv, "tools/call")) == 1 and len(received(srv, "tasks/result")) == 1


def test_without_forwarding_a_task_question_is_input_required_with_its_handle(world):
    """--elicitation off: a 2026-07-28 task's question ends the wait as ``input_required`` (the questions' keys and
    the handle in ``details``), nothing answered; a 2025-11-25 one, asked on the tasks/result stream, gets the
    JSON-RPC error of a capability never declared (-32601), never an answer made up."""
    era, srv, res = world
    asked = call(res, "u1", "asking", task="wait")
    if era == LEGACY:
        assert asked["success"], asked
        text = asked["result"]["result"]["content"][0]["text"]
        assert '"error":{"code":-32601' in text and '"action"' not in text
        return
    assert asked["success"] is False and asked["error_code"] == "input_required", asked
    assert asked["details"]["input_requests"] == ["confirm"] and asked["details"]["task"]["status"] == "input_required"
    assert received(srv, "tasks/update") == [] and received(srv, "tasks/cancel") == []


def test_idle_reaping_keeps_a_server_that_holds_a_live_task(tmp_path, resident):
    """Per-user stdio servers (a legacy task lives in its process): u2's idle instance is reaped, u1's holding a
    live task is not — the task is still there on the same process — until the task is cancelled."""
    log = tmp_path / "stdio.jsonl"
    reg = tmp_path / "registry.db"
    write_registry(str(reg), [stdio_row("m", mock_stdio(scenario(LEGACY), log))], {"m": {}})
    res = resident(reg, "--idle-timeout", "1s")
    held = call(res, "u1", "never", task="detach")
    assert held["success"], held
    assert call(res, "u2", "slowish")["success"]  # no task: a plain call
    task_id = held["result"]["task"]["mcp_task_id"]
    started = {e["user"]: e["pid"] for e in res.wait_event("process.started", count=2)}
    (gone,) = res.wait_event("process.exited", user="u2")  # idle since after u1's last use
    assert gone["pid"] == started["u2"]
    assert [e["user"] for e in res.events("process.exited")] == ["u2"]  # u1's, idle longer, is kept
    assert res.ok("get_task", "u1", mcp_task_id=task_id)["task"]["status"] == "working"  # the same process
    assert [e["pid"] for e in res.events("process.started") if e["user"] == "u1"] == [started["u1"]]
    res.ok("cancel_task", "u1", mcp_task_id=task_id)
    (reaped,) = res.wait_event("process.exited", user="u1")
    assert reaped["pid"] == started["u1"]
    sent = [json.loads(line)["json"] for line in log.read_text().splitlines() if '"tasks/cancel"' in line]
    assert len([r for r in sent if r.get("method") == "tasks/cancel"]) == 1


@pytest.mark.interop
def test_simulate_research_query_waits_detaches_and_stays_with_its_user(
    tmp_path, everything_stdio_argv, interop_subprocess_env
):
    """server-everything's task-only ``simulate-research-query`` (2025-11-25 core) behind a resident: u1's call
    waits for the report by default, u2's detaches and is read with get_task_result; neither sees the other's
    task; the -v log shows exactly one tools/call written per call_tool."""
    reg = tmp_path / "registry.db"
    write_registry(str(reg), [stdio_row("every", everything_stdio_argv, isolation="public")])
    res = Resident(reg, "-v", env=interop_subprocess_env)
    try:

        def research(user: str, topic: str, **params: object) -> dict:
            return res.ask(
                "call_tool", user, server_name="every", tool_name="simulate-research-query",
                arguments={"topic": topic}, **params,
            )  # fmt: skip

        waited = research("u1", "mcp")
        assert waited["success"], waited
        assert "Research Report: mcp" in waited["result"]["result"]["content"][0]["text"]
        assert waited["result"]["task"]["status"] == "completed"
        detached = research("u2", "later", task="detach")["result"]["task"]
        assert detached["status"] == "working" and detached["era"] == "legacy"
        assert res.ask("get_task", "u1", mcp_task_id=detached["mcp_task_id"])["error_code"] == "mcp_task_unknown"
        done = res.ok("get_task_result", "u2", mcp_task_id=detached["mcp_task_id"], wait=True)
        assert "Research Report: later" in done["result"]["content"][0]["text"]
        assert [t["mcp_task_id"] for t in res.ok("list_tasks", "u2")["tasks"]] == [detached["mcp_task_id"]]
        assert [t["status"] for t in res.ok("list_tasks", "u1")["tasks"]] == ["completed"]
    finally:
        assert res.close() == []
    sent = [line for line in res.stderr_lines if "-> stdio [tools/call" in line]
    assert len(sent) == 2
    assert "can only run as a task" not in "".join(res.stderr_lines)  # the operator log gets no CLI note


def test_each_users_records_are_bounded_forgotten_after_their_ttl_and_never_ambiguous():
    """``ResidentTasks`` in-process: beyond the per-user cap the oldest ended record goes (else the oldest, its
    slot freed); a record past its ttl is forgotten with its hold; an id two of the user's servers gave needs
    ``server_name``; another user's id is ``mcp_task_unknown``."""
    import bkmcp

    events: list[tuple[str, dict]] = []
    sink = bkmcp.EventSink(None, bkmcp.Redactor())
    sink.emit = lambda event, **fields: events.append((event, fields))  # type: ignore[method-assign]
    tasks = bkmcp.ResidentTasks(sink, per_user=2)
    one, other = bkmcp.Slot("u1", "a", "user"), bkmcp.Slot("u1", "b", "user")
    command = bkmcp.ResidentCommand("t1", "call_tool", {}, "u1", None, bkmcp.Deadline(5))
    stranger = bkmcp.ResidentCommand("t2", "get_task", {}, "u2", None, bkmcp.Deadline(5))

    def handle(server: str, task: str, status: str = "working", ttl: int | None = 60000) -> dict:
        return {"mcp_task_id": task, "server": server, "status": status, "ttl_ms": ttl}

    tasks.seen(command, one, handle("a", "x1"))
    tasks.seen(command, other, handle("b", "x1"))
    assert (one.tasks, other.tasks) == (1, 1)
    with pytest.raises(bkmcp.InvalidCommandError, match="server_name"):
        tasks.find(command, "x1", None)
    assert tasks.find(command, "x1", "b").handle["server"] == "b"
    with pytest.raises(bkmcp.TaskUnknownError):
        tasks.find(stranger, "x1", "a")
    tasks.seen(command, other, handle("b", "x1", "completed"))
    tasks.seen(command, other, handle("b", "x1", "completed"))  # an end is said once
    assert [e for e, _ in events] == ["task.created", "task.created", "task.completed"]
    assert other.tasks == 0
    tasks.seen(command, one, handle("a", "x2"))  # a third: the ended one goes first
    assert [t["mcp_task_id"] for t in tasks.listing(command, None)] == ["x1", "x2"]
    assert [t["server"] for t in tasks.listing(command, None)] == ["a", "a"] and one.tasks == 2
    tasks.seen(command, one, handle("a", "x3", ttl=0))  # a fourth: the oldest live one goes, its hold freed
    assert [t["mcp_task_id"] for t in tasks.listing(command, "a")] == ["x2"]  # x3's ttl passed: forgotten
    assert one.tasks == 1 and tasks.listing(stranger, None) == []
    tasks.seen(stranger, one, handle("a", "y1", ttl=0))  # u2's one task, forgotten at once: u2 with it
    assert tasks.listing(stranger, None) == [] and one.tasks == 1 and "u2" not in tasks._users
    assert all(set(fields) == {"server", "user", "task_id", "mcp_task_id", "status"} for _, fields in events)


def test_a_detached_legacy_task_that_asks_is_answered_through_get_task_result(tmp_path, resident, http_mock):
    """2025-11-25, --elicitation forward: a detached task's question, asked on the tasks/result stream of a later
    ``get_task_result`` wait, is held open and answered ``input_required`` (``elicitation-1``, a ``resume``); the
    ``get_task_result`` with that ``resume`` answers that very request and gets the result (one tasks/result)."""
    srv = http_mock(scenario(LEGACY))
    reg = tmp_path / "registry.db"
    write_registry(str(reg), [http_row("m", srv.url)])
    res = resident(reg, "--elicitation", "forward")
    task_id = call(res, "u1", "asking", task="detach")["result"]["task"]["mcp_task_id"]
    asked = res.ok("get_task_result", "u1", mcp_task_id=task_id, wait=True)
    assert asked["status"] == "input_required" and list(asked["input_requests"]) == ["elicitation-1"], asked
    stolen = res.ask("get_task_result", "u2", mcp_task_id=task_id, resume=asked["resume"], input_responses={})
    assert stolen["error_code"] == "mcp_task_unknown"
    done = res.ok(
        "get_task_result", "u1", mcp_task_id=task_id, resume=asked["resume"], input_responses={"elicitation-1": ACCEPT}
    )
    assert done["result"]["content"][0]["text"].endswith('"content":{"ok":true}}}') and done["tool_name"] == "asking"
    assert len(received(srv, "tasks/result")) == 1 and len(received(srv, "tools/call")) == 1
    assert [e["event"] for e in res.events() if e["event"].startswith("input.")] == [
        "input.requested",
        "input.answered",
    ]
