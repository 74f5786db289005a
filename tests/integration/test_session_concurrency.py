"""The session engine of section 7 under concurrency (issue 9): one session, many requests in flight.

Real wire only: the mock server over stdio (``stdio_concurrent_calls``: answers in any order) and over HTTP
(legacy with a session id, and modern), driven by threads on one ``McpSession``. Every assertion on "exactly
once" reads the server's own request log.
"""

from __future__ import annotations

import io
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import bkmcp
from bkmcp import Deadline, Log, McpSession, OpContext
from mock_server.mcp_mock import MockServer, mock_tool
from tests.helpers import stdio_mock_entry as stdio_entry
from tests.helpers import stdio_mock_log as stdio_log

ROOT = Path(__file__).resolve().parents[2]
CALLS = 200
TOOLS = [mock_tool("fast", "echo"), mock_tool("slow", "slow", ms=1500), mock_tool("drop", "drop")]
for _tool in TOOLS:
    _tool["inputSchema"] = {"type": "object", "properties": {"text": {"type": "string"}}}


def resolved(entry: dict[str, Any], name: str = "m") -> bkmcp.ResolvedServer:
    config = bkmcp.parse_config(json.dumps({"mcpServers": {name: entry}}), "/tmp/concurrency-mcp.json")
    return bkmcp.resolve_server(config.servers[name], {"PATH": os.environ.get("PATH", "")})


def opened(server: bkmcp.ResolvedServer, timeout: float = 60) -> tuple[McpSession, OpContext]:
    log = Log(io.StringIO())
    ctx = OpContext(Deadline(timeout), log)
    return bkmcp.open_session(server, ctx, insecure=False), ctx


def call_all(session: McpSession, names: list[str], timeout: float = 60) -> tuple[dict[int, Any], list[int]]:
    """``len(names)`` concurrent calls, call i with ``text: "call-i"``; returns (outcome per i, finishing order)."""
    outcomes: dict[int, Any] = {}
    order: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(len(names))

    def one(i: int, tool: str) -> None:
        ctx = OpContext(Deadline(timeout), session.log)
        start.wait()
        try:
            value: Any = bkmcp.call_tool(session, ctx, tool, {"text": f"call-{i}"})
        except bkmcp.BkmcpError as exc:
            value = exc
        with lock:
            outcomes[i] = value
            order.append(i)

    threads = [threading.Thread(target=one, args=(i, tool)) for i, tool in enumerate(names)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout + 30)
    assert not any(t.is_alive() for t in threads)
    return outcomes, order


def echoed(result: dict[str, Any]) -> str:
    return result["structuredContent"]["arguments"]["text"]


def mixed_names() -> list[str]:
    return ["slow" if i % 10 == 0 else "fast" for i in range(CALLS)]


def assert_not_held_up(order: list[int]) -> None:
    """Answers came back out of order: fast calls finished while slow calls started before them still ran (no
    call waits for another on the one session). Robust to a loaded machine: the slow tool takes 1.5 s."""
    first_slow = min(order.index(i) for i in range(CALLS) if i % 10 == 0)
    assert first_slow > 0 and any(i % 10 for i in order[:first_slow]), order[:20]


def assert_matched(outcomes: dict[int, Any]) -> None:
    assert sorted(outcomes) == list(range(CALLS))
    for i, value in outcomes.items():
        assert isinstance(value, dict), (i, value)
        assert echoed(value) == f"call-{i}"


def test_200_concurrent_calls_on_one_stdio_session_answered_out_of_order(tmp_path):
    entry, log_path = stdio_entry(tmp_path, {"tools": TOOLS, "stdio_concurrent_calls": True}, "2025-11-25")
    session, ctx = opened(resolved(entry))
    try:
        pid = session.transport.pid
        outcomes, order = call_all(session, mixed_names())
        assert session.transport.pid == pid and session.transport.spawns == 1  # one child for everything
        assert session.in_flight == 0
    finally:
        session.close(ctx.deadline)
    assert_matched(outcomes)
    assert_not_held_up(order)
    calls = [e for e in stdio_log(log_path) if e.get("rpc_method") == "tools/call"]
    assert len(calls) == CALLS  # none resent
    assert len({e["rpc_id"] for e in calls}) == CALLS
    assert not ChildGroup.running(pid)


@pytest.mark.parametrize("versions", [["2025-11-25"], ["2026-07-28"]], ids=["legacy-session", "modern"])
def test_200_concurrent_calls_on_one_http_session(versions):
    with MockServer({"versions": versions, "tools": TOOLS}) as srv:
        session, ctx = opened(resolved({"type": "http", "url": srv.url}))
        try:
            outcomes, order = call_all(session, mixed_names())
        finally:
            session.close(ctx.deadline)
        calls = srv.requests(rpc_method="tools/call")
    assert_matched(outcomes)
    assert len(calls) == CALLS
    assert len({c["rpc_id"] for c in calls}) == CALLS
    if versions == ["2025-11-25"]:
        sessions = {c["session_id"] for c in calls}
        assert len(sessions) == 1 and None not in sessions  # every call on the one legacy session
        assert len(srv.requests(rpc_method="initialize")) == 1
    else:
        assert all(c["headers"].get("mcp-method") == "tools/call" for c in calls)
    assert_not_held_up(order)


def test_a_child_that_dies_fails_only_the_calls_in_flight_on_it_with_outcome_unknown(tmp_path):
    entry, log_path = stdio_entry(tmp_path, {"tools": TOOLS, "stdio_concurrent_calls": True}, "2025-11-25")
    (tmp_path / "other").mkdir()
    other_entry, _other_log = stdio_entry(tmp_path / "other", {"tools": TOOLS}, "2025-11-25")
    session, ctx = opened(resolved(entry))
    other, other_ctx = opened(resolved(other_entry, "n"))
    try:
        outcomes: dict[int, Any] = {}

        def one(i: int, tool: str) -> None:
            try:
                outcomes[i] = bkmcp.call_tool(session, OpContext(Deadline(30), session.log), tool, {"text": f"{i}"})
            except bkmcp.BkmcpError as exc:
                outcomes[i] = exc

        threads = [threading.Thread(target=one, args=(i, "slow")) for i in range(6)]
        for thread in threads:
            thread.start()
        end = time.monotonic() + 20
        while (
            len([e for e in stdio_log(log_path) if e.get("rpc_method") == "tools/call"]) < 6 and time.monotonic() < end
        ):
            time.sleep(0.02)
        one(6, "drop")  # the child exits (status 3) while six slow calls are in flight
        for thread in threads:
            thread.join(30)
        # the other session (its own child) is untouched
        assert bkmcp.call_tool(other, other_ctx, "fast", {"text": "still here"})["content"]
    finally:
        session.close(ctx.deadline)
        other.close(other_ctx.deadline)
    assert len(outcomes) == 7
    for i, value in outcomes.items():
        assert isinstance(value, bkmcp.ConnectionFailedError), (i, value)
        assert value.details["outcome"] == "unknown" and value.details.get("exit_status") == 3
    calls = [e for e in stdio_log(log_path) if e.get("rpc_method") == "tools/call"]
    assert len(calls) == 7  # nothing resent after the crash


def test_a_request_after_close_fails_without_sending(tmp_path):
    entry, log_path = stdio_entry(tmp_path, {"tools": TOOLS}, "2025-11-25")
    session, ctx = opened(resolved(entry))
    pid = session.transport.pid
    session.close(ctx.deadline)
    session.close(ctx.deadline)  # idempotent
    with pytest.raises(bkmcp.ConnectionFailedError) as info:
        bkmcp.call_tool(session, OpContext(Deadline(5), session.log), "fast", {"text": "x"})
    assert not bkmcp.request_was_sent(info.value)
    assert not ChildGroup.running(pid)
    assert [e for e in stdio_log(log_path) if e.get("rpc_method") == "tools/call"] == []


class ChildGroup:
    @staticmethod
    def running(pid: int | None) -> bool:
        return pid is not None and bkmcp.ChildProcess.group_running(pid)


def test_children_spawned_to_die_with_bkmcp_do_not_outlive_a_sigkill(tmp_path):
    """contract §11.5: PR_SET_PDEATHSIG, and the child is forked by the long-lived spawner thread, so the worker thread
    that opened the session may end without taking the child with it; SIGKILL of bkmcp takes it."""
    import signal
    import subprocess

    entry, _log = stdio_entry(tmp_path, {"tools": TOOLS}, "2025-11-25")
    # a server that outlives the end of its stdin (it sleeps on), so only the signal can end it
    command = " ".join(json.dumps(part) for part in [entry["command"], *entry["args"]])
    entry = {
        "type": "stdio",
        "command": "/bin/sh",
        "args": ["-c", f"{command}; sleep 30"],
        "protocolVersion": "2025-11-25",
    }
    script = tmp_path / "holder.py"
    script.write_text(
        f"""
import io, json, sys, threading, time
sys.path.insert(0, {str(ROOT)!r})
import bkmcp
config = bkmcp.parse_config(json.dumps({{"mcpServers": {{"m": {json.dumps(entry)}}}}}), "/tmp/x.json")
server = bkmcp.resolve_server(config.servers["m"], {{"PATH": "/usr/bin:/bin"}})
box = []
def worker():
    log = bkmcp.Log(io.StringIO())
    ctx = bkmcp.OpContext(bkmcp.Deadline(30), log)
    box.append(bkmcp.open_session(server, ctx, insecure=False, die_with_parent=True))
thread = threading.Thread(target=worker)
thread.start(); thread.join()
print(box[0].transport.pid, flush=True)
time.sleep(60)
""",
        encoding="utf-8",
    )
    holder = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    pid = None
    try:
        pid = int(holder.stdout.readline())
        time.sleep(0.3)
        assert ChildGroup.running(pid)  # the worker thread ended; the child lives on
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        end = time.monotonic() + 10
        while ChildGroup.running(pid) and time.monotonic() < end:
            time.sleep(0.05)
        assert not ChildGroup.running(pid)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)
        if ChildGroup.running(pid):  # a failing run must not leak the group either
            os.killpg(pid, signal.SIGKILL)


class HeldHandOver:
    """Holds httpcore 1.0's pool at the moment of the "Bad file descriptor" (issue 16, encode/httpcore#1110): the
    pool has handed its idle keep-alive connection to the thread of one waiting call (the victim), whose connection
    stays IDLE until that thread starts on it. ``release()`` lets the victim go on.

    While ``close_on_send`` is set, a pass of the pool that decides to close the victim's connection while the
    victim's request holds it is held between its decision and the close until the server has received the victim's
    call, so the close lands on a request in flight, as it can on a loaded machine (the close runs outside the pool
    lock)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, srv: MockServer) -> None:
        from httpcore._sync import connection_pool

        self.srv = srv
        self.thread: threading.Thread | None = None
        self.connection: Any = None
        self.closed_under_it = False
        self.assigned, self.go = threading.Event(), threading.Event()
        self.close_on_send = False
        wait_for_connection = connection_pool.PoolRequest.wait_for_connection
        close_connections = connection_pool.ConnectionPool._close_connections

        def wait_held(pool_request: Any, timeout: float | None = None) -> Any:
            connection = wait_for_connection(pool_request, timeout)
            if threading.current_thread() is self.thread and not self.assigned.is_set():
                self.connection = connection
                self.assigned.set()
                self.go.wait(30)
            return connection

        def close_held(pool: Any, closing: list[Any]) -> None:
            holds = any(r.connection is self.connection for r in pool._requests)  # the victim's call is not over
            if self.close_on_send and holds and any(c is self.connection for c in closing):
                self.closed_under_it = True
                self.release()
                self.srv_received("victim")
            close_connections(pool, closing)

        monkeypatch.setattr(connection_pool.PoolRequest, "wait_for_connection", wait_held)
        monkeypatch.setattr(connection_pool.ConnectionPool, "_close_connections", close_held)

    def srv_received(self, text: str, timeout: float = 20) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.calls_with(text):
                return True
            time.sleep(0.01)
        return False

    def calls_with(self, text: str) -> list[dict[str, Any]]:
        calls = self.srv.requests(rpc_method="tools/call")
        return [c for c in calls if (c["json"] or {}).get("params", {}).get("arguments", {}).get("text") == text]

    def start(self, target: Any) -> None:
        self.thread = threading.Thread(target=target)
        self.thread.start()
        assert self.assigned.wait(20), "the victim's request was never given a connection"

    def release(self) -> None:
        self.go.set()


def http_pool(session: McpSession) -> Any:
    return session.transport._client._transport._pool  # type: ignore[attr-defined]


def one_call(session: McpSession, tool: str, text: str, box: dict[str, Any], timeout: float = 20) -> None:
    try:
        box[text] = bkmcp.call_tool(session, OpContext(Deadline(timeout), session.log), tool, {"text": text})
    except bkmcp.BkmcpError as exc:
        box[text] = exc


def test_the_pool_never_closes_the_connection_it_handed_to_a_waiting_call(monkeypatch):
    """The cause of the intermittent "[Errno 9] Bad file descriptor" of 200 concurrent calls on one HTTP session:
    a pass of httpcore's pool (another call starting or ending) found the connection it had just handed to a waiting
    call still IDLE, and closed it as a surplus keep-alive connection (more connections than
    max_keepalive_connections) after that call had started on it: the call was sent, the server ran it, and its
    answer was lost (EBADF, or a hang to the timeout). Here every step of that interleaving is held; the pool must
    leave a connection a request holds alone, and both calls are answered, each sent once."""
    with MockServer({"versions": ["2026-07-28"], "tools": TOOLS}) as srv:
        session, ctx = opened(resolved({"type": "http", "url": srv.url}))
        held = HeldHandOver(monkeypatch, srv)
        box: dict[str, Any] = {}
        try:
            one_call(session, "fast", "warm-up", box)  # the pool keeps one idle keep-alive connection
            held.start(lambda: one_call(session, "slow", "victim", box))
            assert held.connection in http_pool(session).connections and held.connection.is_idle()
            held.close_on_send = True
            # what 200 calls reach: more connections than the keep-alive limit (20), so any idle one is surplus
            http_pool(session)._max_keepalive_connections = 0
            bystander = threading.Thread(target=one_call, args=(session, "fast", "bystander", box))
            bystander.start()
            bystander.join(30)
            held.release()
            held.thread.join(30)  # type: ignore[union-attr]
            assert not bystander.is_alive() and not held.thread.is_alive()  # type: ignore[union-attr]
        finally:
            held.release()
            session.close(ctx.deadline)
    for text in ("warm-up", "victim", "bystander"):
        assert isinstance(box[text], dict), (text, box[text])
        assert echoed(box[text]) == text
        assert len(held.calls_with(text)) == 1  # each sent exactly once
    assert not held.closed_under_it


def test_trimming_idle_connections_leaves_the_one_handed_to_a_waiting_call(monkeypatch):
    """``close_idle_connections`` (the resident mode's memory trim) closes only connections nobody holds: the one
    the pool handed to a waiting call, still IDLE, is that call's (closed under it, the call could be sent and its
    answer lost, as above)."""
    with MockServer({"versions": ["2026-07-28"], "tools": TOOLS}) as srv:
        session, ctx = opened(resolved({"type": "http", "url": srv.url}))
        held = HeldHandOver(monkeypatch, srv)
        box: dict[str, Any] = {}
        try:
            one_call(session, "fast", "warm-up", box)
            held.start(lambda: one_call(session, "fast", "victim", box))
            assert held.connection.is_idle()
            assert session.transport.close_idle_connections() == 0  # type: ignore[attr-defined]
            assert not held.connection.is_closed()
            held.release()
            held.thread.join(30)  # type: ignore[union-attr]
            assert session.transport.close_idle_connections() == 1  # type: ignore[attr-defined]  # now nobody's
        finally:
            held.release()
            session.close(ctx.deadline)
    assert isinstance(box["victim"], dict) and echoed(box["victim"]) == "victim"
    assert len(held.calls_with("victim")) == 1


# -- closing an HTTP session fails its waiters at once (issue 16 item 4) ------------------------------------------


def start_calls(session: McpSession, texts: list[str], tool: str = "slow", timeout: float = 60) -> tuple[dict, list]:
    box: dict[str, Any] = {}
    threads = [threading.Thread(target=one_call, args=(session, tool, text, box, timeout)) for text in texts]
    for thread in threads:
        thread.start()
    return box, threads


def test_closing_a_legacy_http_session_fails_its_calls_before_it_ends_the_session(monkeypatch):
    """The calls in flight fail when ``close`` begins, not once the DELETE that ends the legacy session is answered
    (up to 2 s; a server busy with those very calls may take all of it). The DELETE waits here, inside
    ``end_session``, for the calls to be over: they must be over before the session is ended."""
    texts = [f"w{i}" for i in range(4)]
    slow = [mock_tool("slow", "slow", ms=60000)]
    with MockServer({"versions": ["2025-11-25"], "tools": slow}) as srv:
        session, ctx = opened(resolved({"type": "http", "url": srv.url}))
        box, threads = start_calls(session, texts)
        end = time.monotonic() + 30
        while len(srv.requests(rpc_method="tools/call")) < len(texts) and time.monotonic() < end:
            time.sleep(0.02)
        seen: dict[str, bool] = {}
        end_session = session.transport.end_session

        def ended_after_the_calls(*args: Any, **kwargs: Any) -> None:
            until = time.monotonic() + 20  # a safety net: before the fix the calls wait for this very DELETE
            while any(t.is_alive() for t in threads) and time.monotonic() < until:
                time.sleep(0.01)
            seen["calls over before the DELETE"] = not any(t.is_alive() for t in threads)
            end_session(*args, **kwargs)

        monkeypatch.setattr(session.transport, "end_session", ended_after_the_calls)
        session.close(ctx.deadline)
        for thread in threads:
            thread.join(30)
        calls = srv.requests(rpc_method="tools/call")
        deletes = srv.requests(http_method="DELETE")
    assert seen == {"calls over before the DELETE": True}
    for text in texts:
        error = box[text]
        assert isinstance(error, bkmcp.ConnectionFailedError), (text, error)
        assert "bkmcp closed the session while tools/call" in error.message, error.message
        assert bkmcp.request_was_sent(error) and error.details["outcome"] == "unknown"
    assert sorted(c["json"]["params"]["arguments"]["text"] for c in calls) == texts  # each sent once
    assert len(deletes) == 1


def test_a_call_waiting_out_a_resumption_delay_fails_when_its_session_closes(monkeypatch):
    """2025-11-25: the POST's event stream ended with ``retry: 30000``; the call waits that long before its GET. A
    close meanwhile fails it then (outcome unknown: tools/call was sent), and no GET is sent after the close. Before:
    it slept the whole delay, then was refused."""
    faults = {"sse_retry_resume": {"retry_ms": 30000}}
    with MockServer({"versions": ["2025-11-25"], "response_mode": "sse", "faults": faults, "tools": TOOLS}) as srv:
        session, ctx = opened(resolved({"type": "http", "url": srv.url}))
        waiting = threading.Event()
        resume = session.transport._resume  # type: ignore[attr-defined]

        def entered(*args: Any, **kwargs: Any) -> None:
            waiting.set()
            resume(*args, **kwargs)

        monkeypatch.setattr(session.transport, "_resume", entered)
        box, [thread] = start_calls(session, ["resumed"], tool="fast")
        assert waiting.wait(30), "the call never began its resumption"
        session.close(ctx.deadline)
        thread.join(15)  # the delay is 30 s: a call still waiting it out is alive here
        finished = not thread.is_alive()
        thread.join(40)
        gets = srv.requests(http_method="GET")
        calls = srv.requests(rpc_method="tools/call")
    assert finished, "the call waited out its resumption delay after the session closed"
    error = box["resumed"]
    assert isinstance(error, bkmcp.ConnectionFailedError), error
    assert "bkmcp closed the session while tools/call" in error.message, error.message
    assert bkmcp.request_was_sent(error) and error.details["outcome"] == "unknown"
    assert len(calls) == 1 and gets == []


def test_a_call_still_connecting_when_its_http_session_closes_is_never_sent(monkeypatch):
    """A call whose connection was still being opened (or that waited for one) when the session closed: it fails at
    once, never sent. Before: it went on, sent tools/call on the closed session after the close, and
    nothing woke it (its socket did not exist when ``close`` shut the others down): it waited for the answer."""
    from httpcore._sync import connection as httpcore_connection

    with MockServer({"versions": ["2026-07-28"], "tools": TOOLS}) as srv:
        session, ctx = opened(resolved({"type": "http", "url": srv.url}))
        session.transport.close_idle_connections()  # type: ignore[attr-defined]  # the next call connects
        victim: dict[str, Any] = {}
        connecting, go = threading.Event(), threading.Event()
        connect = httpcore_connection.HTTPConnection._connect

        def held_connect(connection: Any, request: Any) -> Any:
            if threading.current_thread() is victim.get("thread"):
                connecting.set()
                go.wait(30)
            return connect(connection, request)

        monkeypatch.setattr(httpcore_connection.HTTPConnection, "_connect", held_connect)
        box: dict[str, Any] = {}
        victim["thread"] = threading.Thread(target=one_call, args=(session, "slow", "late", box, 10))
        victim["thread"].start()
        try:
            assert connecting.wait(20)
            session.close(ctx.deadline)
        finally:
            go.set()
        victim["thread"].join(30)
        calls = srv.requests(rpc_method="tools/call")
    error = box["late"]
    assert isinstance(error, bkmcp.ConnectionFailedError), error
    assert "bkmcp closed the session before tools/call was sent" in error.message, error.message
    assert not bkmcp.request_was_sent(error) and error.details.get("outcome") != "unknown"
    assert calls == []  # never sent after the close
