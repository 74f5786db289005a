"""Resident mode run in-process (``bkmcp.main`` with injected streams) against the mock server over HTTP and
stdio: the same behaviour as the subprocess tests, measured by coverage; plus the session pool driven directly
(eviction, reaping, crash back-off) where a subprocess could only be observed from outside."""

from __future__ import annotations

import json
import sys
import time

import pytest
from resident_harness import group_alive, http_row, mock_stdio, stdio_row, write_registry

import bkmcp
from mock_server.mcp_mock import DEFAULT_TOOLS, MockServer, mock_tool
from tests.helpers import resident_options, run_bkmcp, until


@pytest.fixture
def srv():
    server = MockServer({"tools": [mock_tool("ask", "task"), *DEFAULT_TOOLS]})
    server.start()
    yield server
    server.stop()


def line(task_id, action, user=None, **params):
    body = {"command": "invoke", "task_id": task_id, "params": {"action": action, **params}}
    if user:
        body["user"] = {"userId": user, "accessToken": "access-token-secret-99"}
    return json.dumps(body)


def answers(res):
    return {a["task_id"]: a for a in map(json.loads, res.stdout.splitlines())}


def test_inprocess_session_over_eof(tmp_path, srv):
    reg = tmp_path / "r.db"
    rows = [
        http_row("pub", srv.url, headers={"X-Sys": "${user.k}"}),
        stdio_row("box", mock_stdio()),
        stdio_row("off", mock_stdio(), enabled=0),
        {"name": "bad", "transport_type": "stdio", "command": "x", "args": "not json", "isolation": "public"},
    ]
    write_registry(str(reg), rows, {"pub": {"k": "sys-secret-77"}, "box": {}})
    events = tmp_path / "events.jsonl"
    stdin = (
        "\n".join(
            [
                line("a", "init"),
                line("b", "list_servers"),
                line("c", "list_servers", "u1"),
                line("d", "connect_server", "u1", server_name="box"),
                line("e", "call_tool", "u1", server_name="pub", tool_name="echo", arguments={"text": "x"}),
                line("f", "call_tool", "u2", server_name="pub", tool_name="fail"),
                line("g", "call_tool", "u1", server_name="pub", tool_name="pick", arguments={"color": "pink"}),
                line("h", "call_tool", "u1", server_name="pub", tool_name="missing"),
                line("i", "call_tool", "u1", server_name="off", tool_name="echo"),
                line("j", "call_tool", "u1", server_name="pub", tool_name="ask"),
                line("k", "list_tools", "u2", server_name="pub"),
                line("l", "refresh_tools", "u2"),
                line("m", "call_tool", "u1", name="mcp_unknown_tool"),
                line("n", "disconnect_server", "u2", server_name="box"),
                line("o", "connect_server", "u1", server_name="bad"),
                line("p", "bogus", "u1"),
                "not json",
            ]
        )
        + "\n"
    )
    res = run_bkmcp("--resident", "--registry", str(reg), "--events", str(events), stdin=stdin)
    assert res.exit_status == 0, res.stderr
    got = answers(res)
    init = {s["server_name"]: s for s in got["a"]["result"]["servers"]}
    assert init["pub"] == {"server_name": "pub", "status": "connected", "tool_count": 6}
    assert init["bad"]["status"] == "failed" and init["bad"]["error_code"] == "invalid_mcp_config"
    assert {s["server_name"] for s in got["b"]["result"]["servers"]} == {"pub", "bad"}
    assert {s["server_name"] for s in got["c"]["result"]["servers"]} == {"pub", "box", "bad"}
    assert got["d"]["result"]["status"] == "connected"
    assert got["e"]["success"] and got["f"]["result"]["result"]["isError"] is True
    assert got["g"]["error_code"] == "invalid_mcp_arguments"
    assert got["h"]["error_code"] == "mcp_tool_not_found"
    assert got["i"]["error_code"] == "mcp_server_disabled"
    assert got["j"]["error_code"] == "mcp_capability_unsupported" and "result" in got["j"]["details"]
    assert {t["server_name"] for t in got["k"]["result"]["tools"]} == {"pub"}
    assert [e["server_name"] for e in got["l"]["result"]["errors"]] == ["bad"]
    assert got["m"]["error_code"] == "mcp_tool_not_found"
    assert got["n"]["result"] == {"server_name": "box", "status": "disconnected"}
    assert got["o"]["error_code"] == "invalid_mcp_config"
    assert got["p"]["error_code"] == "unknown_action" and got[None]["error_code"] == "invalid_command"
    text = res.stdout + res.stderr + events.read_text()
    assert "sys-secret-77" not in text and "access-token-secret-99" not in text
    kinds = {json.loads(e)["event"] for e in events.read_text().splitlines()}
    assert {
        "protocol.initialized",
        "server.discover",
        "tool.started",
        "tool.finished",
        "tool.rejected",
        "process.started",
        "process.exited",
    } <= kinds
    pids = [json.loads(e)["pid"] for e in events.read_text().splitlines() if '"process.started"' in e]
    assert pids and not any(group_alive(p) for p in pids)


def test_inprocess_shutdown_and_duplicates(tmp_path, srv):
    reg = tmp_path / "r.db"
    write_registry(str(reg), [http_row("pub", srv.url)])
    big = '{"command":"invoke","task_id":"big","params":{"action":"init","pad":"' + "x" * (17 << 20) + '"}}'
    stdin = (
        "\n".join(
            [big, line("s1", "list_servers"), line("s1", "list_servers"), line("z", "shutdown"), line("after", "init")]
        )
        + "\n"
    )
    res = run_bkmcp("--resident", "--registry", str(reg), stdin=stdin)
    assert res.exit_status == 0
    out = [json.loads(x) for x in res.stdout.splitlines()]
    assert out[0]["task_id"] is None and out[0]["error_code"] == "invalid_command"
    assert out[-1] == {"task_id": "z", "success": True, "result": {"stopped": True}}
    after = [a for a in out if a["task_id"] == "after"]  # read with the shutdown, after it: answered, never run
    assert len(after) == 1 and after[0]["error_code"] == "invalid_command" and "shutting down" in after[0]["error"]
    assert len([a for a in out if a["task_id"] == "s1"]) == 2


def test_a_script_that_ends_with_shutdown_gets_every_answer(tmp_path):
    """Issue 28 item 9: calls in flight when ``shutdown`` is read finish within --shutdown-grace and are answered
    with their results (before: cut, mcp_connection_error with outcome unknown); a list_tools sent just before it
    comes back with its tools (and the failure of a server that is down as an ``errors`` entry); the server ran
    each call once, to its end; the shutdown answer is last."""
    slow = MockServer({"tools": [mock_tool("slow", "slow", {"text": {"type": "string"}}, ms=1000), *DEFAULT_TOOLS]})
    slow.start()
    try:
        reg = tmp_path / "r.db"
        write_registry(str(reg), [http_row("pub", slow.url), http_row("down", "http://127.0.0.1:9/mcp")])
        names = [f"c{i}" for i in range(5)]
        calls = [line(n, "call_tool", "u1", server_name="pub", tool_name="slow", arguments={"text": n}) for n in names]
        stdin = "\n".join([*calls, line("tools", "list_tools", "u1"), line("z", "shutdown")]) + "\n"
        res = run_bkmcp("--resident", "--registry", str(reg), "--shutdown-grace", "60s", stdin=stdin)
        assert res.exit_status == 0, res.stderr
        out = [json.loads(x) for x in res.stdout.splitlines()]
        got = {a["task_id"]: a for a in out}
        for name in names:
            assert got[name]["success"] is True, got[name]
            assert got[name]["result"]["result"]["structuredContent"] == {"arguments": {"text": name}}
        # a server's own failure during the grace is reported as itself, beside the tools, not as the shutdown's cut
        assert got["tools"]["success"], got["tools"]
        assert [e["server_name"] for e in got["tools"]["result"]["errors"]] == ["down"]
        assert {t["tool_name"] for t in got["tools"]["result"]["tools"]} >= {"slow", "echo"}
        assert out[-1] == {"task_id": "z", "success": True, "result": {"stopped": True}} and len(out) == 7
        done = [json.loads(e["body"])["params"]["arguments"]["text"] for e in slow.requests("tools/call")]
        assert sorted(done) == names and all(e["status"] == 200 for e in slow.requests("tools/call"))
    finally:
        slow.stop()


def test_inprocess_disconnect_of_a_public_server_says_what_it_did(tmp_path, srv):
    """Issue 28 item 9 (contract §11.2): a public server is never closed by one user; the answer gives the shared
    session's state and ``closed: false``, never ``"status": "disconnected", "disconnected": false``
    (the connected case: test_resident_isolation.py)."""
    reg = tmp_path / "r.db"
    write_registry(str(reg), [http_row("pub", srv.url)])
    stdin = (
        "\n".join(
            [
                line("before", "disconnect_server", "u1", server_name="pub"),
            ]
        )
        + "\n"
    )
    res = run_bkmcp("--resident", "--registry", str(reg), "--shutdown-grace", "0", stdin=stdin)
    got = answers(res)
    assert res.exit_status == 0, res.stderr
    assert got["before"]["result"] == {"server_name": "pub", "status": "disconnected", "shared": True, "closed": False}


def test_inprocess_registry_failure_and_events_file(tmp_path):
    res = run_bkmcp("--resident", "--registry", str(tmp_path / "no" / "r.db"))
    assert res.exit_status == 1 and res.error_code == "registry_error" and res.stdout == ""
    write_registry(str(tmp_path / "r.db"), [])
    res = run_bkmcp("--resident", "--registry", str(tmp_path / "r.db"), "--events", str(tmp_path / "no" / "e"))
    assert res.exit_status == 1 and res.error_code == "usage_error"
    res = run_bkmcp(
        "--resident", "--registry", str(tmp_path / "r.db"), "--events", "-", stdin=line("x", "list_servers") + "\n"
    )
    assert res.exit_status == 0 and json.loads(res.stdout)["result"] == {"servers": []}


# -- the session pool, driven directly ------------------------------------------------------------------------


class _Row:
    def __init__(self, name, isolation="user"):
        self.name, self.isolation, self.problem, self.enabled = name, isolation, None, True


def _pool(tmp_path, *options):
    registry = bkmcp.open_registry(str(tmp_path / "pool.db"), env={}, log=bkmcp.Log(sys.stderr), timeout=5.0)
    log = bkmcp.Log(sys.stderr)
    events = bkmcp.EventSink(None, log.redactor)
    return bkmcp.SessionPool(
        resident_options("x", *options), registry=registry, log=log, events=events, env={"PATH": "/usr/bin:/bin"}
    )


def _server(name):
    argv = mock_stdio({"tools": [mock_tool("crash", "drop"), *DEFAULT_TOOLS]})
    config = bkmcp.ServerConfig(name=name, type="stdio", config_file="registry", command=argv[0], args=tuple(argv[1:]))
    return bkmcp.resolve_server(config, {"PATH": "/usr/bin:/bin"})


def test_pool_eviction_limit_reaping_and_backoff(tmp_path):
    pool = _pool(tmp_path, "--max-processes", "2", "--max-user-processes", "1", "--idle-timeout", "50ms")
    try:
        a1 = pool.slot("a", _Row("s1"))
        first = pool.session(a1, _server("s1"), 30)
        pool.release(first)  # session() lends the session to its caller until release()
        a2 = pool.slot("a", _Row("s2"))
        pool.release(pool.session(a2, _server("s2"), 30))  # a's limit is 1: a1 (idle) is evicted
        assert a1.session is None and not group_alive(first.pid)
        b1 = pool.slot("b", _Row("s1"))
        busy = pool.session(b1, _server("s1"), 30)
        pool.release(busy)
        pool.use(b1, 1)
        pool.use(a2, 1)
        with pytest.raises(bkmcp.ResourceLimitError) as info:
            pool.session(pool.slot("c", _Row("s1")), _server("s1"), 30)
        assert info.value.details == {"limit": 2, "live": 2, "scope": "all", "kind": "stdio"}
        pool.use(a2, -1)
        time.sleep(0.1)
        pool.reap_once()  # a2 idle past the idle timeout: closed; b1 in use: kept
        assert a2.session is None and b1.session is busy
        pool.use(b1, -1)
        with pytest.raises(bkmcp.ConnectionFailedError):
            busy.call_tool("crash", {}, 30, None)
        pool.after_failure(b1, busy)
        assert b1.session is None and b1.failures == 1 and b1.retry_at <= time.monotonic()
        again = pool.session(b1, _server("s1"), 30)
        pool.release(again)
        with pytest.raises(bkmcp.ConnectionFailedError):
            again.call_tool("crash", {}, 30, None)
        pool.after_failure(b1, again)
        with pytest.raises(bkmcp.ConnectionFailedError) as damped:
            pool.session(b1, _server("s1"), 30)
        assert damped.value.details["restarts"] == 2
    finally:
        pool.close_all()
    with pytest.raises(bkmcp.ConnectionFailedError):
        pool.session(pool.slot("d", _Row("s1")), _server("s1"), 30)


def test_inprocess_credentials_timeouts_and_the_tools_cache(tmp_path):
    srv = MockServer({"tools": [mock_tool("slow", "slow", ms=3000), *DEFAULT_TOOLS], "versions": ["2025-11-25"]})
    srv.start()
    try:
        reg = tmp_path / "r.db"
        write_registry(str(reg), [http_row("pub", srv.url), stdio_row("priv", mock_stdio())])
        stdin = (
            "\n".join(
                [
                    line("a", "list_tools", "u1"),
                    line("b", "list_servers", "u1"),
                    line("c", "call_tool", "u1", server_name="pub", tool_name="slow", arguments={}, timeout_ms=300),
                ]
            )
            + "\n"
        )
        got = answers(run_bkmcp("--resident", "--registry", str(reg), stdin=stdin))
        assert [e["error_code"] for e in got["a"]["result"]["errors"]] == ["mcp_credentials_missing"]
        assert {s["server_name"]: s["status"] for s in got["b"]["result"]["servers"]}["priv"] == "no_credentials"
        assert got["c"]["error_code"] == "mcp_timeout" and got["c"]["details"]["outcome"] == "unknown"
        assert "300 ms" in got["c"]["error"] and "--timeout" not in got["c"]["error"]
        lists = len(srv.requests("tools/list"))
        again = answers(run_bkmcp("--resident", "--registry", str(reg), stdin=line("d", "list_tools", "u1") + "\n"))
        assert len(again["d"]["result"]["tools"]) == 6
        assert len(srv.requests("tools/list")) == lists  # from the registry's mcp_tools_cache: nothing sent
    finally:
        srv.stop()


class _BrokenOut:
    def write(self, data):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        pass


def test_a_broken_stdout_stops_serving_cleanly(tmp_path):
    import io

    write_registry(str(tmp_path / "r.db"), [])
    log = bkmcp.Log(io.StringIO())
    stdin = io.BytesIO(b"".join((line(f"t{i}", "list_servers") + "\n").encode() for i in range(50)))
    opts = resident_options(str(tmp_path / "r.db"))
    status = bkmcp.run_resident(opts, stdin=stdin, stdout=_BrokenOut(), log=log, env={}, stderr=io.StringIO())
    assert status == 0


def test_pool_reopens_a_dead_idle_child_and_reports_a_failed_start(tmp_path):
    import os
    import signal

    pool = _pool(tmp_path)
    try:
        slot = pool.slot("a", _Row("s1"))
        first = pool.session(slot, _server("s1"), 30)
        os.kill(first.pid, signal.SIGKILL)
        end = time.monotonic() + 30
        while first.alive and time.monotonic() < end:
            time.sleep(0.02)
        second = pool.session(slot, _server("s1"), 30)  # the dead one is reaped, counted, replaced
        assert second is not first and second.alive and slot.failures == 1
        bad = pool.slot("a", _Row("nope"))
        config = bkmcp.ServerConfig(name="nope", type="stdio", config_file="registry", command="/nonexistent/cmd")
        with pytest.raises(bkmcp.ConnectionFailedError):
            pool.session(bad, bkmcp.resolve_server(config, {}), 30)
        assert bad.last_error is not None and bad.session is None and not bad.opening
    finally:
        pool.close_all()


# -- command threads, driven directly ---------------------------------------------------------------------------


class _Answers:
    """A binary stdout that collects answer lines; ``wait(task_id)`` blocks (bounded) for one."""

    def __init__(self):
        import threading

        self.lines = []
        self._cond = threading.Condition()

    def write(self, data):
        with self._cond:
            self.lines.append(json.loads(data))
            self._cond.notify_all()

    def flush(self):
        pass

    def wait(self, task_id):
        end = time.monotonic() + 60
        with self._cond:
            while not any(a["task_id"] == task_id for a in self.lines):
                assert time.monotonic() < end, f"no answer for {task_id}"
                self._cond.wait(0.5)
            return next(a for a in self.lines if a["task_id"] == task_id)

    def all(self, task_id):
        with self._cond:
            return [a for a in self.lines if a["task_id"] == task_id]


def _until(condition):
    until(condition, "condition met", interval=0.01)


def _resident_server(tmp_path, rows):
    import io

    write_registry(str(tmp_path / "r.db"), rows)
    log = bkmcp.Log(io.StringIO())
    opts = resident_options(str(tmp_path / "r.db"))
    registry = bkmcp.open_registry(opts.registry, env={}, log=log, timeout=5.0)
    out = _Answers()
    server = bkmcp.ResidentServer(
        opts,
        registry=registry,
        stdout=out,
        log=log,
        events=bkmcp.EventSink(None, log.redactor),
        env={"PATH": "/usr/bin:/bin"},
    )
    return server, out, registry


def test_command_threads_are_reused_capped_and_ended_by_the_finish(tmp_path, monkeypatch):
    monkeypatch.setattr(bkmcp, "_WORKER_IDLE_SECONDS", 600.0)
    monkeypatch.setattr(bkmcp, "_IDLE_WORKERS", 2)
    srv = MockServer({"tools": [mock_tool("slow", "slow", ms=500), *DEFAULT_TOOLS]})
    srv.start()
    server, out, registry = _resident_server(tmp_path, [http_row("pub", srv.url)])
    try:
        server.dispatch(line("a", "list_tools", "u").encode())
        assert out.wait("a")["success"] is True
        _until(lambda: server.workers.idle == 1)
        first = set(server.workers.threads)
        for task in ("b", "c", "d"):  # one after the other: the same thread serves each
            server.dispatch(
                line(task, "call_tool", "u", server_name="pub", tool_name="echo", arguments={"text": task}).encode()
            )
            assert out.wait(task)["success"] is True
            _until(lambda: server.workers.idle == 1)
            assert set(server.workers.threads) == first
        # six at once: new threads start (none waits for a free one); afterwards at most 2 stay, idle
        tasks = [f"s{i}" for i in range(6)]
        for task in tasks:
            server.dispatch(line(task, "call_tool", "u", server_name="pub", tool_name="slow", arguments={}).encode())
        _until(lambda: len(server.workers.threads) == 6)
        assert all(out.wait(task)["success"] is True for task in tasks)
        _until(lambda: len(server.workers.threads) <= 2 and server.workers.idle == len(server.workers.threads))
        old = set(server.workers.threads)
        # the idle threads would wait 600 s more: the finish ends them now
        server.stopping.set()
        server.finish(grace=5.0)
        assert server.workers.threads == set() and server.workers.idle == 0
        assert not any(thread.is_alive() for thread in old | first)
    finally:
        server.pool.close_all()
        registry.close()
        srv.stop()


def test_an_idle_command_thread_ends_after_its_idle_time(tmp_path, srv, monkeypatch):
    monkeypatch.setattr(bkmcp, "_WORKER_IDLE_SECONDS", 0.05)
    server, out, registry = _resident_server(tmp_path, [http_row("pub", srv.url)])
    try:
        server.dispatch(line("a", "list_servers").encode())
        assert out.wait("a")["success"] is True
        _until(lambda: not server.workers.threads)
        assert server.workers.idle == 0
        server.dispatch(line("b", "list_servers").encode())  # a new thread
        assert out.wait("b")["success"] is True
    finally:
        server.stopping.set()
        server.finish(grace=5.0)
        registry.close()
    assert server.workers.threads == set()


def test_eof_ends_every_command_thread_before_run_resident_returns(tmp_path, srv):
    import threading

    reg = tmp_path / "r.db"
    write_registry(str(reg), [http_row("pub", srv.url)])
    before = set(threading.enumerate())
    stdin = (
        "\n".join(
            [line("w", "list_tools", "u")]
            + [
                line(f"c{i}", "call_tool", "u", server_name="pub", tool_name="echo", arguments={"text": "x"})
                for i in range(20)
            ]
            + [line(f"l{i}", "list_servers") for i in range(20)]
        )
        + "\n"
    )
    res = run_bkmcp("--resident", "--registry", str(reg), stdin=stdin)
    assert res.exit_status == 0
    got = answers(res)
    assert len(got) == 41 and all(a["success"] for a in got.values())
    assert [t for t in threading.enumerate() if t not in before and t.name == "bkmcp-command"] == []


def test_a_command_that_gets_no_thread_is_answered_and_the_process_keeps_serving(tmp_path, srv, monkeypatch):
    """``ulimit -u`` reached: Thread.start raises. The command is answered with resource_limit (never lost), its
    task_id is free again, and the next command runs."""
    import threading

    server, out, registry = _resident_server(tmp_path, [http_row("pub", srv.url)])
    real_start = threading.Thread.start

    def refuse(thread):
        if thread.name == "bkmcp-command":
            raise RuntimeError("can't start new thread")
        return real_start(thread)

    try:
        monkeypatch.setattr(threading.Thread, "start", refuse)
        server.dispatch(
            line("a", "call_tool", "u", server_name="pub", tool_name="echo", arguments={"text": "x"}).encode()
        )
        refused = out.wait("a")
        assert refused["success"] is False and refused["error_code"] == "resource_limit"
        assert "was not run" in refused["error"]
        assert server.workers.threads == set() and "a" not in server.in_flight
        monkeypatch.setattr(threading.Thread, "start", real_start)
        server.dispatch(
            line("a", "call_tool", "u", server_name="pub", tool_name="echo", arguments={"text": "again"}).encode()
        )
        _until(lambda: len(out.all("a")) == 2)
        assert out.all("a")[1]["success"] is True
        calls = [json.loads(entry["body"]) for entry in srv.requests("tools/call")]
        assert [c["params"]["arguments"]["text"] for c in calls] == ["again"]  # the refused one was never sent
    finally:
        server.stopping.set()
        server.finish(grace=5.0)
        registry.close()


def test_pool_retires_outdated_sessions_forgets_idle_users_and_trims_http(tmp_path, srv):
    """Issue 16 items 4, 8, 11, 12 driven in-process: a retired session closes when its last lease is released;
    a public row disabled in a view is retired and its slot forgotten; an idle user slot is forgotten with its
    in-memory catalogue; an idle HTTP session closes its keep-alive connections and keeps serving."""
    pool = _pool(tmp_path, "--idle-timeout", "50ms")
    gone: list[set] = []
    pool.on_users_gone = lambda users, decided: gone.append(users)
    try:
        slot = pool.slot("a", _Row("s1"))
        first = pool.session(slot, _server("s1"), 30)
        pool.retire(slot, first)  # outdated while a command holds it: still alive
        assert slot.session is None and first.retired and group_alive(first.pid)
        pool.release(first)  # the last lease: closed on a closer thread
        deadline = time.monotonic() + 30
        while group_alive(first.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not group_alive(first.pid)
        idle = pool.session(slot, _server("s1"), 30)
        pool.release(idle)
        pool.retire(slot, idle)  # no lease: closed at once (on its closer thread)
        pub = pool.slot(None, _Row("p", "public"))
        shared = pool.session(pub, _server("p"), 30)
        pool.release(shared)
        row = bkmcp.RegistryServer(name="p", transport_type="stdio", isolation="public", enabled=False)
        pool.retire_gone(bkmcp.RegistryView({"p": row}))
        assert pool.peek(None, _Row("p", "public")) is None and shared.retired
        http = bkmcp.resolve_server(
            bkmcp.ServerConfig(name="h", type="http", config_file="registry", url=srv.url), {"PATH": "/usr/bin"}
        )
        hslot = pool.slot("b", _Row("h"))
        hsession = pool.session(hslot, http, 30)
        hsession.call_tool("echo", {"text": "x"}, 30, None)
        pool.release(hsession)
        pool.registry.store_tools("h", "b", [{"name": "echo"}], None)
        for user in ("a", "b", "c"):  # each user's credentials are kept in memory after a view
            pool.registry.view(user)
        assert {"a", "b", "c"} <= set(pool.registry._users)
        time.sleep(0.1)
        pool.reap_once()  # idle past the idle timeout: the user's sessions are closed and their slots forgotten
        pool.reap_once()
        assert pool.peek("b", _Row("h")) is None and pool.peek("a", _Row("s1")) is None
        assert {"a", "b"} <= set().union(*gone)
        # the registry's memory of a forgotten user goes too (soak: memory follows the users active lately); a user
        # with no slot at all ("c") is not the reaper's to forget: bounded by the cache's own limit
        assert "a" not in pool.registry._users and "b" not in pool.registry._users
        kept = pool.slot(None, _Row("q", "public"))
        q = pool.session(kept, http, 30)
        q.call_tool("echo", {"text": "y"}, 30, None)
        pool.release(q)
        kept.last_used -= 10
        pool.reap_once()  # a public HTTP session is never reaped: only its idle connections are closed
        assert kept.session is q and kept.trimmed > 0
        assert q.call_tool("echo", {"text": "z"}, 30, None)["isError"] is False
    finally:
        pool.close_all()
    assert bkmcp.build_http_session_limit(64, None) == 256 and bkmcp.build_http_session_limit(4, 100) == 12
    assert bkmcp.build_http_session_limit(64, 200) == 8
    assert bkmcp.is_exhaustion(OSError(24, "Too many open files"))
    assert not bkmcp.is_exhaustion(OSError(2, "No such file"))
    assert bkmcp.is_exhaustion(RuntimeError("can't start new thread"))


def test_a_user_who_came_back_keeps_the_name_table_the_reaper_decided_to_forget_before():
    """The reaper decides which users are gone, then forgets their name tables after writing to disk: a user whose
    list_tools set a new table in between kept it (CI saw its call_tool answered mcp_tool_not_found); a table
    made before the decision goes."""
    slot = bkmcp.Slot("u", "s", "user")
    slot.tools = [{"name": "echo", "inputSchema": {"type": "object"}}]

    class Pool:
        def peek(self, user, row):
            return slot

    catalogues = bkmcp.Catalogues(Pool(), None, None, None, 1.0)  # type: ignore[arg-type]
    view = bkmcp.RegistryView({"s": bkmcp.RegistryServer(name="s", transport_type="stdio", isolation="user")})
    command = bkmcp.ResidentCommand("t", "list_tools", {}, "u", None, bkmcp.Deadline(60.0))

    def listed() -> None:
        catalogues.answer(command, view, list(view.servers.values()), {"s": slot.tools}, [])

    decided = time.monotonic()
    listed()  # the user came back after the reaper's decision
    catalogues.forget({"u"}, decided)
    assert catalogues.names["u"] == {"mcp_s_echo": ("s", "echo")}
    catalogues.forget({"u"}, time.monotonic())  # decided after the table was made: forgotten
    assert "u" not in catalogues.names and "u" not in catalogues.named_at


@pytest.mark.parametrize(("age", "ttl_ms", "lists"), [(3600.0, 1000, 1), (1.0, 600000, 0), (3600.0, None, 0)])
def test_a_cached_catalogue_read_at_start_keeps_its_ttl(tmp_path, srv, age, ttl_ms, lists):
    """docs/contract.md §11.5: a catalogue from mcp_tools_cache is fresh until its stored ttlMs passes, counted
    from fetched_at (here an hour ago: discovered again), else until a change (no ttlMs: used as it is)."""
    import sqlite3

    reg = tmp_path / "r.db"
    write_registry(str(reg), [http_row("pub", srv.url)], {"pub": {}})
    with sqlite3.connect(reg) as db:
        db.execute(
            "INSERT INTO mcp_tools_cache (server_name, user_id, tools, protocol_version, fetched_at, ttl_ms) "
            "VALUES ('pub', '', ?, '2025-11-25', ?, ?)",
            (json.dumps([mock_tool("cached_only")]), time.time() - age, ttl_ms),
        )
    srv.reset_log()
    res = run_bkmcp("--resident", "--registry", str(reg), stdin=line("a", "list_tools", "u1") + "\n")
    names = {t["name"] for t in answers(res)["a"]["result"]["tools"]}
    assert len(srv.requests("tools/list")) == lists
    assert ("mcp_pub_cached_only" in names) == (lists == 0), names


def test_sqlite_registry_waits_at_most_the_time_left(tmp_path):
    """Issue 16 item 7 in-process: a locked file, or a registry lock held by another command, makes a view wait
    only the caller's time left; the tools cache gives up after its short wait."""
    import sqlite3
    import threading

    path = tmp_path / "r.db"
    write_registry(str(path), [http_row("pub", "http://127.0.0.1:9/mcp")])
    registry = bkmcp.open_registry(str(path), env={}, log=bkmcp.Log(sys.stderr), timeout=30.0)
    try:
        assert "pub" in registry.view(None, timeout=5.0).servers
        admin = sqlite3.connect(str(path), isolation_level=None)
        admin.execute("BEGIN EXCLUSIVE")
        admin.execute("UPDATE mcp_servers SET url = url")
        try:
            with pytest.raises(bkmcp.RegistryError, match="locked"):
                registry.view("u1", timeout=0.3)
            assert registry.load_tools("pub", None) is None
            registry.store_tools("pub", None, [{"name": "t"}], None)  # refused: kept in memory
            assert registry.load_tools("pub", None).tools == [{"name": "t"}]
        finally:
            admin.execute("ROLLBACK")
            admin.close()
        held = threading.Event()
        release = threading.Event()

        def hold() -> None:
            with registry._lock:
                held.set()
                release.wait(10)

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait(10)
        try:
            with pytest.raises(bkmcp.RegistryError, match="stayed locked"):
                registry.view("u2", timeout=0.2)
        finally:
            release.set()
            holder.join()
        assert "pub" in registry.view("u2", timeout=5.0).servers
    finally:
        registry.close()


def _frames(error):
    depth, tb = 0, error.__traceback__
    while tb is not None:
        depth, tb = depth + 1, tb.tb_next
    return depth


def test_a_broken_row_is_reported_again_and_again_without_growing(tmp_path):
    """Issue 16 item 9: the stored problem of a broken registry row is never raised itself (each raise of the same
    object grew its traceback and kept the frames of every failed command alive); each command gets a fresh copy."""
    bad = {"name": "bad", "transport_type": "stdio", "command": "x", "args": "not json", "isolation": "public"}
    server, out, registry = _resident_server(tmp_path, [bad])
    try:
        row = registry.view(None).servers["bad"]
        assert row.problem is not None
        before = _frames(row.problem)
        for i in range(40):
            task = f"t{i}"
            server.dispatch(line(task, "connect_server", "u", server_name="bad").encode())
            server.dispatch(line(task + "l", "list_servers", "u").encode())
            answer = out.wait(task)
            assert answer["success"] is False and answer["error_code"] == "invalid_mcp_config"
            listed = out.wait(task + "l")["result"]["servers"]
            assert [s["error_code"] for s in listed if s["server_name"] == "bad"] == ["invalid_mcp_config"]
        again = registry.view(None).servers["bad"]
        assert (before, _frames(row.problem), _frames(again.problem)) == (0, 0, 0)  # stored unraised: no frames kept
    finally:
        server.stopping.set()
        server.finish(grace=5.0)
        server.pool.close_all()
        registry.close()


def test_a_users_credential_is_chosen_once_per_command(tmp_path, srv, monkeypatch):
    """Issue 31 item 2: a command that reaches a per-user server chooses the user's credential once (a call reads
    the catalogue, then calls: one choice for both), and the server receives it."""
    chosen: list[str] = []
    real = bkmcp.select_credential
    monkeypatch.setattr(bkmcp, "select_credential", lambda row, **kw: chosen.append(row.name) or real(row, **kw))
    reg = tmp_path / "r.db"
    row = http_row("mine", srv.url, isolation="user", headers={"X-Key": "${user.k}"})
    write_registry(str(reg), [row], users={("u1", "mine"): {"k": "user-k-1"}})
    call = {"server_name": "mine", "tool_name": "echo", "arguments": {"text": "x"}}
    stdin = "".join(line(task, "call_tool", "u1", **call) + "\n" for task in ("first", "second"))
    got = answers(run_bkmcp("--resident", "--registry", str(reg), stdin=stdin))
    assert got["first"]["success"] and got["second"]["success"], got
    calls = srv.requests("tools/call")
    assert [c["headers"].get("x-key") for c in calls] == ["user-k-1", "user-k-1"]
    assert chosen == ["mine", "mine"]  # one choice per command
