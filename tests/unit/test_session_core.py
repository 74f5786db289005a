"""The sans-IO session core and negotiation of section 5, driven message by message (no sockets, no threads),
plus the transport seam of section 6 through ``httpx.MockTransport`` and the section rule of the module.

Seed rows: R01 (negotiation table), R02 (classification of answers).
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

import bkmcp
from bkmcp import (
    Answered,
    ClientSession,
    Declined,
    Evidence,
    Message,
    Negotiation,
    Notified,
    Reply,
    Step,
    Stray,
    era_rules,
)
from tests.helpers import LEGACY, http_server

MODERN = "2026-07-28"


def result(rid: Any, value: Any = None) -> Message:
    return Message("result", id=rid, result=value if value is not None else {})


def error(rid: Any, code: int = -32603) -> Message:
    return Message("error", id=rid, error={"code": code, "message": "m"})


# -- ids, the pending table and the one matching rule -------------------------------------------------------


@pytest.mark.parametrize("version", [*LEGACY, MODERN])
def test_requests_get_fresh_ids_and_era_shaped_messages(version):
    core = ClientSession()
    rules = era_rules(version)
    first = core.start_request("tools/list", None, rules)
    second = core.start_request("tools/call", {"name": "t"}, rules)
    assert (first["id"], second["id"]) == (1, 2)
    assert core.in_flight() == [1, 2]
    has_meta = "_meta" in (second["params"] or {})
    assert has_meta is (version == MODERN)  # modern requests carry the per-request _meta (docs/contract.md §5)


def test_a_response_answers_its_request_once_and_a_second_answer_is_a_duplicate_stray():
    core = ClientSession()
    rules = era_rules("2025-11-25")
    a = core.start_request("tools/list", None, rules)["id"]
    b = core.start_request("tools/list", None, rules)["id"]
    assert core.receive(result(b)) == [Answered(b, result(b))]  # out of order is fine
    assert core.receive(result(a)) == [Answered(a, result(a))]
    [stray] = core.receive(result(a, {"again": True}))
    assert isinstance(stray, Stray) and stray.duplicate
    [unknown] = core.receive(result(99))
    assert isinstance(unknown, Stray) and not unknown.duplicate and unknown.why == "unknown"
    assert core.in_flight() == []


def test_ids_match_only_with_the_same_type():
    core = ClientSession()
    rid = core.start_request("ping", None, era_rules("2025-06-18"))["id"]
    [stray] = core.receive(result(str(rid)))  # "1" is not 1
    assert isinstance(stray, Stray)
    assert core.in_flight() == [rid]


def test_a_null_id_error_answers_the_stream_owner_else_nothing():
    """Issue 36 item 5: a null-id error answers the request whose response stream carried it (HTTP) and nothing
    else: not even the only request in flight (on stdio any line of the server's stdout could otherwise fail it)."""
    core = ClientSession()
    rules = era_rules("2025-11-25")
    only = core.start_request("tools/list", None, rules)["id"]
    [stray] = core.receive(error(None))
    assert isinstance(stray, Stray) and stray.why == "null_id"
    assert core.in_flight() == [only]
    b = core.start_request("tools/list", None, rules)["id"]
    assert core.receive(error(None), related=b) == [Answered(b, error(None))]
    c = core.start_request("tools/list", None, rules)["id"]
    [stray] = core.receive(error(None))  # two in flight (only, c) and no stream owner: never guessed
    assert isinstance(stray, Stray)
    assert sorted(core.in_flight()) == sorted([only, c])


def test_forgotten_requests_turn_late_answers_into_strays():
    core = ClientSession()
    rid = core.start_request("server/discover", None, era_rules(MODERN))["id"]
    core.forget(rid)  # the probe window passed
    [late] = core.receive(result(rid))
    assert isinstance(late, Stray) and late.why == "late" and not late.duplicate


def test_a_random_first_id_counts_up_and_differs_between_sessions():
    """Issue 36 item 5: stdio sessions start their ids at a random integer that fits an i32 with room to count."""
    firsts = {bkmcp.random_first_id() for _ in range(50)}
    assert len(firsts) == 50 and all(1 <= first <= 2**31 - 2**24 for first in firsts)
    first = firsts.pop()
    core = ClientSession(first)
    rules = era_rules("2025-06-18")
    ids = [core.start_request("ping", None, rules)["id"] for _ in range(3)]
    assert ids == [first, first + 1, first + 2]


def test_server_requests_ping_answered_others_declined():
    core = ClientSession()
    assert core.receive(Message("request", id="s1", method="ping")) == [
        Reply({"jsonrpc": "2.0", "id": "s1", "result": {}})
    ]
    reply, declined = core.receive(Message("request", id=7, method="sampling/createMessage"), related=3)
    assert reply == Reply({"jsonrpc": "2.0", "id": 7, "error": {"code": -32601, "message": "Method not found"}})
    assert declined == Declined("sampling/createMessage", 3)


def test_notifications_pass_through_and_list_changed_marks_the_catalogue_stale():
    core = ClientSession()
    note = Message("notification", method="notifications/progress", params={"progress": 1})
    assert core.receive(note, related=4) == [Notified(note, 4)]
    assert not core.tools_stale
    core.receive(Message("notification", method="notifications/tools/list_changed"))
    assert core.tools_stale
    core.catalogue_read()  # a fresh tools/list answers what list_changed announced
    assert not core.tools_stale


def test_each_list_changed_marks_its_own_kept_catalogues_stale():
    """docs/contract.md §14: resources/list_changed covers the resources and the templates, prompts/list_changed
    the prompts; reading one listing answers only its own."""
    core = ClientSession()
    core.receive(Message("notification", method="notifications/resources/list_changed"))
    assert core.stale == {"resources/list", "resources/templates/list"} and not core.tools_stale
    core.receive(Message("notification", method="notifications/prompts/list_changed"))
    core.receive(Message("notification", method="notifications/message", params={"level": "info"}))
    core.catalogue_read("resources/list")
    assert core.stale == {"resources/templates/list", "prompts/list"}


def test_the_core_owns_the_session_id_and_the_era():
    """Transports report what came back (an answer's headers); the core's verbs decide what it means."""
    core = ClientSession()
    core.session_issued("tools/list", {"mcp-session-id": "not-issued-here"})
    assert core.session_id is None  # only the answer to initialize issues a session id
    core.session_issued("initialize", {})
    assert core.session_id is None
    core.session_issued("initialize", {"mcp-session-id": "s-1"})
    assert core.session_id == "s-1"
    core.session_ended()
    assert core.session_id is None
    core.use(era_rules("2025-11-25"))
    core.handshake_started()
    assert core.rules is None and core.era is None


class _FakeTransport:
    """The Transport seam with no I/O: answers each request from another thread after ``delay`` seconds."""

    kind, has_sessions, shared_stream, responses = "fake", False, True, 0
    alive, stdio = True, None

    def __init__(self, delay: float | None) -> None:
        self.delay, self.sent = delay, []

    def attach(self, deliver, lost, answer_headers) -> None:
        self.deliver = deliver

    def send(self, outgoing) -> None:
        import threading

        message = outgoing.message
        self.sent.append((message, outgoing.session_id))
        if self.delay is not None and "id" in message:
            answer = Message("result", id=message["id"], result={"tools": []})
            threading.Timer(self.delay, self.deliver, args=(answer, None)).start()

    def failure(self, method, *, sent):
        return bkmcp.ConnectionFailedError("gone", request_sent=sent)

    def timeout_error(self, method, deadline):
        return bkmcp.budget_error(f"no answer to {method}", deadline.seconds, request_sent=True)

    def stop_requests(self) -> None:
        pass

    def end_session(self, deadline, rules=None, session_id=None) -> None:
        pass

    def close(self, deadline=None) -> None:
        pass


def _fake_session(delay: float | None) -> tuple[bkmcp.McpSession, bkmcp.OpContext]:
    server = bkmcp.ResolvedServer(
        name="f", type="stdio", config_file="/c", url=None, headers={}, command="x", args=[], env={}, cwd=None,
        protocol_version="2025-11-25", auth_source="none",
    )  # fmt: skip
    log = bkmcp.Log(io.StringIO())
    session = bkmcp.McpSession(server, insecure=False, log=log, transport=_FakeTransport(delay))
    session.core.use(era_rules("2025-11-25"))
    return session, bkmcp.OpContext(bkmcp.Deadline(0.5), log)


def test_a_request_waits_for_its_answer_on_an_event_and_times_out_with_the_transports_error():
    session, ctx = _fake_session(0.05)
    assert session.request("tools/list", None, ctx).result == {"tools": []}  # woken by the other thread
    assert session.alive
    silent, ctx = _fake_session(None)
    with pytest.raises(bkmcp.McpTimeoutError) as info:
        silent.request("tools/list", None, ctx)
    assert info.value.request_sent is True and silent.in_flight == 0


# -- the handshake, parsed in one place ---------------------------------------------------------------------


@pytest.mark.parametrize("version", LEGACY)
def test_initialize_answer_sets_the_era_and_server_state(version):
    core = ClientSession()
    core.start_request("initialize", bkmcp.build_initialize_params("2025-11-25"), era_rules("2025-11-25"))
    answer = result(
        1,
        {"protocolVersion": version, "serverInfo": {"name": "s"}, "capabilities": {"tools": {}}, "instructions": "hi"},
    )
    rules = core.apply_initialize(answer, "2025-11-25")
    assert (rules.version, core.era, core.protocol_version) == (version, "legacy", version)
    assert core.server_info == {"name": "s"} and core.capabilities == {"tools": {}} and core.instructions == "hi"


@pytest.mark.parametrize("answer", [result(1, {"protocolVersion": "1999-01-01"}), result(1, []), error(1)])
def test_unusable_initialize_answers_are_errors(answer):
    with pytest.raises(bkmcp.ProtocolError):
        ClientSession().apply_initialize(answer, "2025-11-25")


def test_discover_answer_sets_modern_state():
    core = ClientSession()
    answer = result(
        1,
        {
            "supportedVersions": [MODERN],
            "capabilities": {"tools": {}},
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "m"}},
        },
    )
    core.apply_discover(answer, MODERN)
    assert core.era == "modern" and core.server_info == {"name": "m"}
    pinned = ClientSession()
    pinned.apply_discover(None, MODERN)  # pinned modern without asking: no server state
    assert pinned.era == "modern" and pinned.server_info == {}


# -- negotiation: probe -> evidence -> next step, for every era ---------------------------------------------


def drive(plan: Negotiation, answers: list[Any]) -> list[Step]:
    """Feed the plan one answer per step (Evidence for discover, True/False for restart, an exception or None
    for initialize) and return the steps it asked for."""
    steps = [plan.start()]
    for answer in answers:
        step = steps[-1]
        if step.action == "discover":
            steps.append(plan.after_discover(step, answer))
        elif step.action == "restart":
            steps.append(plan.after_restart(step, answer))
        elif step.action == "initialize":
            if answer is None:
                steps.append(Step("done", step.version))
                break
            steps.append(plan.after_initialize_failed(step, answer))
    return steps


def modern_answer(versions: list[str]) -> Evidence:
    return Evidence(200, result(1, {"supportedVersions": versions}))


def test_r01_unpinned_modern_server_is_modern_after_one_probe():
    steps = drive(Negotiation(None, server_info=False, restartable=False), [modern_answer([MODERN])])
    assert steps == [Step("discover", MODERN, probing=True), Step("done", MODERN)]


@pytest.mark.parametrize(
    "evidence",
    [
        Evidence(400, error(1, -32000)),
        Evidence(404, None),
        Evidence(405, None),
        Evidence(200, error(1, -32601)),
        Evidence(200, None),
        modern_answer(["2025-11-25"]),
    ],
)
def test_r01_anything_else_means_legacy_initialize(evidence):
    steps = drive(Negotiation(None, server_info=False, restartable=False), [evidence, None])
    assert steps[1] == Step("initialize", "2025-11-25")


def test_r01_404_with_method_not_found_means_legacy_unless_initialize_is_refused_alike_issue36():
    """HTTP 404 + -32601 to server/discover is no proof of a modern server (n8n-mcp answers so): initialize; a
    modern server without server/discover refuses initialize the same way, and is modern after all."""
    plan = Negotiation(None, server_info=False, restartable=False)
    init = plan.after_discover(plan.start(), Evidence(404, error(1, -32601)))
    assert init == Step("initialize", "2025-11-25")
    unknown = bkmcp.ProtocolError("404", http_status=404, http_message=error(2, -32601))
    assert plan.after_initialize_failed(init, unknown) == Step("done", MODERN)
    with_info = Negotiation(None, server_info=True, restartable=False)
    init = with_info.after_discover(with_info.start(), Evidence(404, error(1, -32601)))
    assert with_info.after_initialize_failed(init, unknown) == Step("discover", MODERN)
    other = Negotiation(None, server_info=False, restartable=False)  # only when discover was refused alike
    init = other.after_discover(other.start(), Evidence(400, error(1, -32000)))
    with pytest.raises(bkmcp.ProtocolError):
        other.after_initialize_failed(init, unknown)


def test_r01_incompatible_versions_are_a_protocol_error():
    data = Message("error", id=1, error={"code": -32022, "message": "m", "data": {"supported": ["1999-01-01"]}})
    with pytest.raises(bkmcp.ProtocolError):
        drive(Negotiation(None, server_info=False, restartable=False), [Evidence(400, data)])


@pytest.mark.parametrize("version", [*LEGACY, MODERN])
def test_r01_pinned_versions_never_probe(version):
    plan = Negotiation(version, server_info=False, restartable=True)
    first = plan.start()
    assert first == (Step("initialize", version) if version in LEGACY else Step("done", version))
    with_info = Negotiation(version, server_info=True, restartable=False).start()
    assert with_info == (Step("initialize", version) if version in LEGACY else Step("discover", version))
    with pytest.raises(bkmcp.ConnectionFailedError):  # a pinned legacy initialize that fails is final
        if version in LEGACY:
            plan.after_initialize_failed(first, bkmcp.ConnectionFailedError("gone"))
        else:
            raise bkmcp.ConnectionFailedError("modern pinned: nothing to fall back to")


def test_r01_stdio_silent_probe_restarts_an_exited_child_once_then_initializes():
    plan = Negotiation(None, server_info=False, restartable=True)
    restart = plan.after_discover(plan.start(), Evidence(silent=True))
    assert restart == Step("restart", "2025-11-25")
    initialize = plan.after_restart(restart, True)  # the child had exited on the probe: a fresh one
    assert initialize == Step("initialize", "2025-11-25")
    with pytest.raises(bkmcp.ConnectionFailedError):  # already restarted once: a second exit stands
        plan.after_initialize_failed(initialize, bkmcp.ConnectionFailedError("exited again"))


def test_r01_stdio_child_that_exits_on_initialize_gets_one_fresh_start():
    plan = Negotiation(None, server_info=False, restartable=True)
    probe = plan.start()
    restart = plan.after_discover(probe, Evidence(silent=True))
    initialize = plan.after_restart(restart, False)  # the probe's child still runs
    again = plan.after_initialize_failed(initialize, bkmcp.ConnectionFailedError("exited on initialize"))
    assert again.action == "restart"
    assert plan.after_restart(again, True) == Step("initialize", "2025-11-25")
    with pytest.raises(bkmcp.ConnectionFailedError):
        plan.after_initialize_failed(initialize, bkmcp.ConnectionFailedError("and again"))


def test_r01_restart_that_finds_the_child_alive_keeps_the_initialize_failure():
    plan = Negotiation(None, server_info=False, restartable=True)
    restart = plan.after_discover(plan.start(), Evidence(silent=True))
    initialize = plan.after_restart(restart, False)
    failure = bkmcp.ConnectionFailedError("broken pipe")
    again = plan.after_initialize_failed(initialize, failure)
    with pytest.raises(bkmcp.ConnectionFailedError) as info:
        plan.after_restart(again, False)
    assert info.value is not failure and info.value.message == failure.message  # the stored failure, as a copy


def test_r01_initialize_refused_with_32022_naming_modern_switches_to_modern():
    plan = Negotiation(None, server_info=False, restartable=False)
    initialize = plan.after_discover(plan.start(), Evidence(200, None))
    refusal = bkmcp.ProtocolError("refused", details={"rpc_error": {"code": -32022, "data": {"supported": [MODERN]}}})
    step = plan.after_initialize_failed(initialize, refusal)
    assert step == Step("discover", MODERN)
    assert plan.after_discover(step, modern_answer([MODERN])) == Step("done", MODERN)


def test_r01_retry_once_with_a_shared_modern_version():
    future = "2027-01-01"
    data = Message("error", id=1, error={"code": -32022, "message": "m", "data": {"supported": [MODERN, future]}})
    plan = Negotiation(None, server_info=False, restartable=False)
    first = Step("discover", future, probing=True)  # as if bkmcp had asked for a newer version first
    plan._probes = 1
    assert plan.after_discover(first, Evidence(400, data)) == Step("discover", MODERN, probing=True)


# -- the transport seam with an injected httpx client ---------------------------------------------------


def test_http_transport_takes_an_injected_client_and_keeps_no_cookies():
    httpx = bkmcp.import_httpx()
    seen: list[Any] = []

    def handler(request: Any) -> Any:
        body = json.loads(request.content) if request.content else None
        seen.append((request.method, dict(request.headers), body))
        if request.method == "DELETE":
            return httpx.Response(405)
        if body and "id" in body and body["method"] == "initialize":
            return httpx.Response(
                200,
                json={
                    "jsonrpc": "2.0",
                    "id": body["id"],
                    "result": {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "x"}},
                },
                headers={"Mcp-Session-Id": "sess-1", "Set-Cookie": "sid=SECRETCOOKIE; Path=/"},
            )
        if body and "id" in body:
            return httpx.Response(
                200,
                json={"jsonrpc": "2.0", "id": body["id"], "result": {"tools": []}},
                headers={"Set-Cookie": "other=2"},
            )
        return httpx.Response(202)

    client = httpx.Client(transport=httpx.MockTransport(handler), cookies=bkmcp._no_cookies())
    server = http_server("http://127.0.0.1:9/mcp")
    log = bkmcp.Log(io.StringIO())
    transport = bkmcp.HttpTransport(server, insecure=False, log=log, client=client)
    session = bkmcp.McpSession(server, insecure=False, log=log, transport=transport)
    ctx = bkmcp.OpContext(bkmcp.Deadline(5), log)
    bkmcp.initialize(session, ctx, "2025-11-25")
    tools, pages = bkmcp.discover_tools(session, ctx)
    session.close(ctx.deadline)
    assert (tools, pages) == ([], 1)
    assert [m for m, _h, _b in seen] == ["POST", "POST", "POST", "DELETE"]
    for _method, headers, _body in seen:
        assert "cookie" not in headers  # Set-Cookie is never replayed: the configured headers are the identity
    assert seen[1][1]["mcp-session-id"] == "sess-1" and seen[3][1]["mcp-session-id"] == "sess-1"
    assert not client.is_closed  # an injected client belongs to its owner


def test_http_statuses_leave_the_transport_as_section_1_errors():
    failure = bkmcp.status_failure(404, None, "gone", "tools/list", with_session=True)
    assert isinstance(failure, bkmcp.ProtocolError) and failure.session_lost and failure.http_status == 404
    rpc = Message(
        "error", id=1, error={"code": -32042, "message": "need url", "data": {"elicitations": [{"url": "https://x"}]}}
    )
    capability = bkmcp.status_failure(400, rpc, "", "tools/call", with_session=False)
    assert isinstance(capability, bkmcp.CapabilityUnsupportedError) and not capability.session_lost


def test_library_errors_are_neutral_and_the_cli_words_them():
    error = bkmcp.budget_error("no answer from http://h/mcp", 5.0)
    assert "--timeout" not in error.message + (error.hint or "")
    noted = error.copy(notes=("the call was sent and its outcome is unknown: check before calling again",))
    worded = bkmcp.word_for_cli(noted, "s")
    assert worded.message == "no answer from http://h/mcp within --timeout 5s"
    hint = worded.error_object()["hint"]
    assert hint.startswith("raise --timeout if the server is slow")
    assert hint.endswith("check before calling again")
    assert (noted.message, noted.remedy) == ("no answer from http://h/mcp within 5s", "timeout")  # never changed


class _Clock:
    """A clock the waits below move forward: no real time passes."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Event:
    """A ``threading.Event`` stand-in: ``wait`` moves the clock by its timeout; set at ``answered_at`` (or never)."""

    def __init__(self, clock: _Clock, answered_at: float | None = None) -> None:
        self.clock, self.answered_at, self.waits = clock, answered_at, []

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        if self.answered_at is not None and self.clock.now + timeout >= self.answered_at:
            self.clock.now = max(self.clock.now, self.answered_at)
            return True
        self.clock.now += timeout
        return False


def _window(clock: _Clock, unread: list[int | None], budget: float = 60.0) -> bkmcp.ProbeWindow:
    """A 2 s probe window inside a ``budget``; ``unread`` is what each look at the pipe finds (the last repeats)."""
    looks = iter(unread)

    def ask() -> int | None:
        return next(looks, unread[-1])

    return bkmcp.ProbeWindow(2.0, bkmcp.Deadline(budget, clock), ask, poll=0.25, clock=clock)  # exact in binary


def test_the_probe_window_starts_when_the_server_has_read_the_probe():
    """Issue 27 item 3 (contract §5): start-up time before the server reads the probe never counts; the 2 s start
    at the first look that finds the pipe empty."""
    clock = _Clock()
    window = _window(clock, [120] * 20 + [0])  # 20 looks (5 s) with the probe still in the pipe, then read
    assert window.end == 160.0  # not started: only the budget bounds it
    assert window.wait(_Event(clock)) is False  # nobody answers
    assert (window.read_after_ms, window.counted) == (5000, True)
    assert window.end == clock.now == 107.0  # read at 105.0, the window's 2 s from there


def test_a_probe_answered_while_still_in_the_pipe_wakes_the_wait_at_once():
    clock = _Clock()
    window = _window(clock, [120])
    assert window.wait(_Event(clock, answered_at=104.0)) is True  # 4 s: beyond 2 s from the write, yet modern
    assert window.read_after_ms is None and clock.now == 104.0


def test_a_probe_window_that_cannot_see_the_pipe_runs_from_the_write():
    """No FIONREAD (or HTTP): the old rule, 2 s from the first look; ``counted`` False (logged with -v)."""
    clock = _Clock()
    window = _window(clock, [None])
    assert window.wait(_Event(clock)) is False
    assert (window.read_after_ms, window.counted, clock.now) == (0, False, 102.0)


def test_a_probe_window_never_outlives_the_budget():
    clock = _Clock()
    unread = _window(clock, [120], budget=1.0)  # never read: the budget ends it
    assert unread.wait(_Event(clock)) is False and clock.now == 101.0 and unread.read_after_ms is None
    clock = _Clock()
    late = _window(clock, [120, 120, 0], budget=1.0)  # read after 0.5 s: the window is cut to the budget
    assert late.wait(_Event(clock)) is False and late.end == clock.now == 101.0


def test_the_pipe_is_asked_with_fionread_and_a_closed_one_cannot_be():
    import os

    read_end, write_end = os.pipe()
    os.write(write_end, b"probe\n")
    assert bkmcp._pipe_unread(write_end) == bkmcp._pipe_unread(read_end) == 6  # the write end counts too (Linux)
    assert bkmcp._write_end_counts() is True
    os.close(read_end)
    os.close(write_end)
    assert bkmcp._pipe_unread(write_end) is None
    server = bkmcp.ResolvedServer(
        name="f", type="stdio", config_file="/c", url=None, headers={}, command="x", args=[], env={}, cwd=None,
        protocol_version=None, auth_source="none",
    )  # fmt: skip
    child = bkmcp.ChildProcess(server, bkmcp.Log(io.StringIO()))
    assert child.unread_input() is None  # no child yet
    child.close_probe(rejected=True)  # no probe open: nothing changes
    child.keep_stderr("kept")
    assert child.stderr_tail() == ["kept"]


def test_the_stderr_reader_counts_bytes_and_keeps_a_probes_lines_out_of_the_tail():
    """Issue 27 item 4, the reader alone (a pipe, no child): lines still in the pipe when the probe was answered are
    the probe's (shown marked with -v, not kept); what follows is the tail's; long and unfinished lines as before."""
    import os
    import types

    server = bkmcp.ResolvedServer(
        name="f", type="stdio", config_file="/c", url=None, headers={}, command="x", args=[], env={}, cwd=None,
        protocol_version=None, auth_source="none",
    )  # fmt: skip
    shown = io.StringIO()
    child = bkmcp.ChildProcess(server, bkmcp.Log(shown, verbose=True))
    err_read, err_write = os.pipe()
    in_read, in_write = os.pipe()
    child.proc = types.SimpleNamespace(stderr=open(err_read, "rb"), stdin=open(in_write, "wb"))
    os.write(err_write, b"noise 1\nnoise 2\n")
    child.open_probe()
    child.close_probe(rejected=True)  # both lines still wait in the pipe: they were written before the answer
    os.write(err_write, b"REAL\n" + b"x" * 9000 + b"\nunfinished")
    os.close(err_write)
    child._read_stderr(child.proc.stderr)
    assert child.stderr_tail() == ["REAL", "x" * 499 + "…", "x" * 499 + "…", "unfinished"]
    assert child.stderr_position() == 4 and child._stderr_taken == 16 + 5 + 9001 + 10
    assert "[server stderr, era probe] noise 1\n" in shown.getvalue() and "[server stderr] REAL\n" in shown.getvalue()
    assert child.unread_input() == 0  # nothing written to its stdin
    child.proc.stdin.close()
    assert child.unread_input() is None  # closed: cannot be asked
    child.proc.stderr.close()
    os.close(in_read)
    child._read_stderr(child.proc.stderr)  # a closed stream ends the reader quietly
    assert child.stderr_position() == 4


def test_lines_read_while_an_accepted_probe_was_open_stay_in_the_tail():
    """A modern server accepts the probe: its lines are no complaint about it, so the tail keeps them, also one
    that bkmcp's reader took only after the server had read the probe (a slow reader on a loaded machine took a
    mock server's start-up lines then, and a failure's server_stderr lost them). Rejected: they leave the tail."""
    import os
    import types

    server = bkmcp.ResolvedServer(
        name="f", type="stdio", config_file="/c", url=None, headers={}, command="x", args=[], env={}, cwd=None,
        protocol_version=None, auth_source="none",
    )  # fmt: skip
    for rejected, tail in ((False, ["starting up", "ready", "later"]), (True, ["later"])):
        child = bkmcp.ChildProcess(server, bkmcp.Log(io.StringIO()))
        err_read, err_write = os.pipe()
        in_read, in_write = os.pipe()
        child.proc = types.SimpleNamespace(stderr=open(err_read, "rb"), stdin=open(in_write, "wb"))
        child.open_probe()
        assert child.unread_input() == 0  # the server has read the probe: what the reader takes now is in doubt
        child._take_stderr("starting up", 12)
        child._take_stderr("ready", 18)
        child.close_probe(rejected=rejected)
        child._take_stderr("later", 24)
        assert child.stderr_tail() == tail, rejected
        for end in (child.proc.stdin, child.proc.stderr):
            end.close()
        os.close(in_read)
        os.close(err_write)


def test_a_kept_childs_stderr_tail_for_one_operation_is_its_start_up_and_its_own_lines():
    """docs/contract.md §14: a warm command is told what a child started for it alone would have written."""
    server = bkmcp.ResolvedServer(
        name="f", type="stdio", config_file="/c", url=None, headers={}, command="x", args=[], env={}, cwd=None,
        protocol_version=None, auth_source="none",
    )  # fmt: skip
    child = bkmcp.ChildProcess(server, bkmcp.Log(io.StringIO()))
    keep = bkmcp.STDIO_STDERR_TAIL
    for i in range(3):
        child.keep_stderr(f"start {i}")
    assert child.stderr_tail(0) == child.stderr_tail() == ["start 0", "start 1", "start 2"]  # not marked yet: all
    child.mark_started()
    child.keep_stderr("opening command")
    since = child.stderr_position()
    assert since == 4 and child.stderr_tail(since) == ["start 0", "start 1", "start 2"]
    child.keep_stderr("mine")
    assert child.stderr_tail(since) == ["start 0", "start 1", "start 2", "mine"]
    assert child.stderr_tail(2) == child.stderr_tail()  # began during the start-up: every line is its own
    assert child.stderr_tail() == ["start 0", "start 1", "start 2", "opening command", "mine"]  # one-shot: unchanged
    assert keep == 20
    for i in range(keep):
        child.keep_stderr(f"later {i}")
    started_late = child.stderr_position() - 5  # its own lines are the last five
    assert child.stderr_tail(started_late) == ["start 0", "start 1", "start 2", *[f"later {i}" for i in range(15, 20)]]
    assert child.stderr_tail(since) == [f"later {i}" for i in range(keep)]  # bounded: its own last lines only


def test_a_line_tail_for_one_operation_is_its_start_up_and_its_own_lines_and_counts_them():
    """A stdio child's skipped stdout lines (docs/contract.md §9, §14): the last few, and how many there were, for an
    operation on a kept child: its start-up lines and its own, as a child started for it alone would have shown."""
    tail = bkmcp.LineTail(3)
    for i in range(4):
        tail.add(f"start {i}")
    assert tail.tail(0) == tail.tail() == (["start 1", "start 2", "start 3"], 4)  # not marked yet: every line
    tail.mark_started()
    tail.add("opening command")
    since = tail.position()
    assert since == 5 and tail.tail(since) == (["start 1", "start 2", "start 3"], 4)
    tail.add("mine")
    assert tail.tail(since) == (["start 2", "start 3", "mine"], 5)
    assert tail.tail(3) == tail.tail() == (["start 3", "opening command", "mine"], 6)  # began during the start-up
    tail.mark_started()  # once per child: a second mark changes nothing
    assert tail.tail(since) == (["start 2", "start 3", "mine"], 5)


@pytest.mark.parametrize(
    ("result", "ttl"),
    [({"ttlMs": 60000}, 60000), ({"ttlMs": 0}, 0), ({}, 0), ({"ttlMs": -1}, 0), ({"ttlMs": 1.5}, 0),
     ({"ttlMs": True}, 0), ({"ttlMs": "60000"}, 0)],
)  # fmt: skip
def test_a_list_results_ttl_ms_is_a_non_negative_integer_or_stale(result, ttl):
    assert bkmcp.parse_ttl_ms(result) == ttl
    assert era_rules("2026-07-28").list_ttl and not any(era_rules(v).list_ttl for v in LEGACY)


def test_a_servers_log_notification_reaches_verbose_stderr_without_a_control_character():
    """Issue 36 item 6: ``-v`` shows a ``notifications/message`` with its level and data; a level or data that
    carries an escape sequence or a C1 control (OSC 52, CSI) reaches stderr with those characters as spaces."""
    import httpx

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        if body and body.get("method") == "initialize":
            init = {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "x"}}
            return httpx.Response(200, json={"jsonrpc": "2.0", "id": body["id"], "result": init})
        if body and "id" in body:
            note = {"level": "info\x1b]52;c;ZXZpbA==\x07", "data": "page \x9b2J text \x1b]0;title\x07"}
            events = [
                {"jsonrpc": "2.0", "method": "notifications/message", "params": note},
                {"jsonrpc": "2.0", "id": body["id"], "result": {"tools": []}},
            ]
            text = "".join(f"event: message\ndata: {json.dumps(e)}\n\n" for e in events)
            return httpx.Response(200, text=text, headers={"Content-Type": "text/event-stream"})
        return httpx.Response(202)

    client = httpx.Client(transport=httpx.MockTransport(handler), cookies=bkmcp._no_cookies())
    server = http_server("http://127.0.0.1:9/mcp")
    stream = io.StringIO()
    log = bkmcp.Log(stream, verbose=True)
    session = bkmcp.McpSession(
        server, insecure=False, log=log, transport=bkmcp.HttpTransport(server, insecure=False, log=log, client=client)
    )
    ctx = bkmcp.OpContext(bkmcp.Deadline(5), log)
    bkmcp.initialize(session, ctx, "2025-11-25")
    assert bkmcp.discover_tools(session, ctx) == ([], 1)
    session.close(ctx.deadline)
    client.close()
    shown = [line for line in stream.getvalue().splitlines() if "server log" in line]
    assert len(shown) == 1 and "ZXZpbA==" in shown[0] and "2J text" in shown[0], shown
    assert not [ch for ch in shown[0] if ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F], shown
