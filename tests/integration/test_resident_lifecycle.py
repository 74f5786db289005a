"""Resident mode: the lifecycle of sessions and the resources they hold (docs/contract.md §11.5, §13; issue 16
items 4, 6b, 7, 8, 11, 12). ``bkmcp --resident`` runs as a subprocess against the mock server over HTTP on
127.0.0.1 and real stdio pipes; every assertion is on what the servers received or on the answers' order, never on
wall-clock thresholds."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
from pathlib import Path

import pytest
from resident_harness import Resident, edit_registry, group_alive, http_row, mock_stdio, stdio_row, write_registry

from mock_server.mcp_mock import DEFAULT_TOOLS, MockServer, mock_tool
from tests.helpers import until

ENV_TOOL = mock_tool("whoami", "env", vars=["MY_TOKEN"])


def registry(tmp_path: Path, rows: list[dict], system=None, users=None) -> Path:
    path = tmp_path / "registry.db"
    system = dict(system or {})
    for row in rows:
        if row.get("isolation") == "user":
            system.setdefault(row["name"], {})
    write_registry(str(path), rows, system, users)
    return path


def texts(srv: MockServer) -> list[str]:
    return [json.loads(e["body"])["params"]["arguments"].get("text") for e in srv.requests("tools/call")]


def order(res: Resident, *task_ids: str) -> list[str]:
    return [a["task_id"] for a in res.answers if a["task_id"] in task_ids]


# -- item 4: registry edits during calls retire the outdated session ------------------------------------------


def test_a_registry_file_deleted_under_the_resident_is_told_once_per_deletion(tmp_path, resident):
    """Before: a deleted registry file was served on without a word (the open SQLite file still reads, but no
    edit reaches it any more). Now one warning per deletion; a file that comes back (here: the same inode, linked
    again) is served silently, and its next deletion is told again."""
    from resident_harness import http_row, write_registry

    reg = tmp_path / "registry.db"
    write_registry(str(reg), [http_row("pub", "http://127.0.0.1:9/mcp")], {"pub": {}}, None)
    reg.chmod(0o600)
    keep = tmp_path / "keep.db"
    os.link(reg, keep)  # the same file under a second name: it can come back
    res = resident(reg)
    warning = f"bkmcp: warning: registry {reg}: the file was deleted; still serving its last contents"

    def names() -> list[str]:
        return [s["server_name"] for s in res.ok("list_servers", "alice")["servers"]]

    assert names() == ["pub"]
    reg.unlink()
    assert names() == ["pub"] and names() == ["pub"]  # still served, from the open file
    os.link(keep, reg)
    assert names() == ["pub"]
    reg.unlink()
    assert names() == ["pub"]
    assert res.close() == []
    res.exit_status()  # its stderr read to the end
    told = [line for line in res.stderr_lines if line.startswith(warning)]
    assert len(told) == 2, res.stderr_lines


def test_registry_edit_during_an_http_call_retires_the_session_the_call_finishes(tmp_path, resident, http_mock):
    """Issue 16 item 4. Before: user B's unrelated call after an edit of the public row closed the shared session
    at once, and user A's call in flight came back as mcp_timeout / 'Bad file descriptor' instead of its result."""
    srv = http_mock({"tools": [mock_tool("slow", "slow", ms=2500), *DEFAULT_TOOLS]})
    row = http_row("pub", srv.url, headers={"X-Sys": "${user.k}"}, protocol_version="2025-03-26")  # legacy: session ids
    reg = registry(tmp_path, [row], {"pub": {"k": "one"}})
    res = resident(reg)
    res.ok("connect_server", "alice", server_name="pub")
    slow = res.send("call_tool", "alice", server_name="pub", tool_name="slow", arguments={"text": "a-slow"})
    until(lambda: "a-slow" in texts(srv), "the slow call reached the server")
    edit_registry(reg, "UPDATE mcp_credentials SET credentials = ? WHERE server_name = 'pub'", json.dumps({"k": "two"}))
    fast = res.ok("call_tool", "bob", server_name="pub", tool_name="echo", arguments={"text": "b-fast"})
    assert fast["result"]["isError"] is False
    answer = res.wait(slow)
    assert answer["success"] is True, answer
    assert "a-slow" in answer["result"]["result"]["content"][0]["text"]
    calls = {json.loads(e["body"])["params"]["arguments"]["text"]: e for e in srv.requests("tools/call")}
    assert calls["a-slow"]["headers"]["x-sys"] == "one" and calls["b-fast"]["headers"]["x-sys"] == "two"
    assert calls["a-slow"]["session_id"] != calls["b-fast"]["session_id"]  # the new call went to a new session
    assert calls["a-slow"]["fault"] is None and calls["a-slow"]["status"] == 200  # answered, not cut
    assert texts(srv).count("a-slow") == 1  # never resent
    # the retired session ends once its call is done (legacy: a DELETE of its session id)
    old = calls["a-slow"]["session_id"]
    until(lambda: any(e["session_id"] == old for e in srv.requests(http_method="DELETE")), "the old session ended")


def test_credential_rotation_during_a_stdio_call_keeps_the_child_until_the_call_ends(tmp_path, resident):
    """Issue 16 item 4 (stdio). Before: the rotation killed the child and the call in flight failed with
    mcp_connection_error, outcome unknown."""
    tools = [mock_tool("slow", "slow", ms=2500), ENV_TOOL, *DEFAULT_TOOLS]
    row = stdio_row("box", mock_stdio({"tools": tools, "stdio_concurrent_calls": True}), env={"MY_TOKEN": "${user.t}"})
    reg = registry(tmp_path, [row], users={("alice", "box"): {"t": "tok-one"}})
    res = resident(reg)
    res.ok("connect_server", "alice", server_name="box")
    first = res.child_pids()[0]
    slow = res.send("call_tool", "alice", server_name="box", tool_name="slow", arguments={"text": "s1"})
    res.wait_event("tool.started", task_id=slow)
    edit_registry(
        reg, "UPDATE mcp_user_credentials SET credentials = ? WHERE user_id = 'alice'", json.dumps({"t": "tok-two"})
    )
    who = res.ok("call_tool", "alice", server_name="box", tool_name="whoami", arguments={})
    assert who["result"]["structuredContent"]["env"]["MY_TOKEN"] == "tok-two"
    assert len(res.child_pids()) == 2 and group_alive(first)  # a new child; the old one still serves its call
    answer = res.wait(slow)
    assert answer["success"] is True and "s1" in answer["result"]["result"]["content"][0]["text"], answer
    res.wait_event("process.exited", pid=first)  # then the retired child is closed
    assert not group_alive(first)


def test_closing_an_http_session_fails_its_waiters_at_once(tmp_path, resident, http_mock):
    """Issue 16 item 4: a session closed under a call (here disconnect_server after its --timeout wait) fails the
    call at once with a clear error. Before: the call hung until its own timeout (or 'Bad file descriptor').
    (A per-user server: disconnect_server closes nothing of a public one, issue 16 item 19.)"""
    srv = http_mock({"tools": [mock_tool("slow", "slow", ms=30000), *DEFAULT_TOOLS]})
    other = http_mock({"tools": [mock_tool("slow", "slow", ms=6000), *DEFAULT_TOOLS]})
    reg = registry(tmp_path, [http_row("pub", srv.url, isolation="user"), http_row("pub2", other.url)])
    res = resident(reg, "--timeout", "1s")
    res.ok("connect_server", "alice", server_name="pub")
    res.ok("connect_server", "alice", server_name="pub2")
    cut = res.send("call_tool", "alice", server_name="pub", tool_name="slow", arguments={"text": "x"}, timeout_ms=60000)
    until(lambda: "x" in texts(srv), "the call reached the server")
    marker = res.send(
        "call_tool", "alice", server_name="pub2", tool_name="slow", arguments={"text": "m"}, timeout_ms=60000
    )
    res.ok("disconnect_server", "alice", server_name="pub")
    answer = res.wait(cut)
    assert answer["error_code"] == "mcp_connection_error", answer
    assert "closed" in answer["error"] and "Bad file descriptor" not in answer["error"]
    assert answer["details"]["outcome"] == "unknown"
    assert res.wait(marker)["success"] is True
    assert order(res, cut, marker) == [cut, marker]  # failed at once, not after its 60 s
    assert texts(srv) == ["x"]


@pytest.mark.parametrize("version", ["2025-03-26", None], ids=["legacy-session", "modern"])
def test_shutdown_fails_every_http_call_in_flight_by_closing_its_session(tmp_path, resident, http_mock, version):
    """Issue 16 item 4 at the end: ``shutdown`` with several slow HTTP calls in flight. Each is failed by the close
    of its session (that wording, outcome unknown), not by the end's safety net for commands still running after
    the grace (``bkmcp shut down before the call finished``), each before the ``stopped`` answer; the server had
    each call once and none ran to its end. The session-engine tests (test_session_concurrency.py) hold the races
    this can only meet by chance: a call still connecting, and a slow DELETE ending a legacy session."""
    srv = http_mock({"tools": [mock_tool("slow", "slow", ms=60000), *DEFAULT_TOOLS]})
    extra = {"protocol_version": version} if version else {}
    # --shutdown-grace 0: the cut itself (with a grace, calls that end within it are answered with their results)
    res = resident(
        registry(tmp_path, [http_row("pub", srv.url, **extra)]), "--timeout", "120s", "--shutdown-grace", "0"
    )
    res.ok("connect_server", "alice", server_name="pub")
    names = [f"c{i}" for i in range(5)]
    calls = [
        res.send("call_tool", "alice", server_name="pub", tool_name="slow", arguments={"text": name}) for name in names
    ]
    until(lambda: sorted(texts(srv)) == names, "every call reached the server")
    stop = res.send("shutdown")
    assert res.exit_status() == 0
    for call in calls:
        answer = res.wait(call)
        assert answer["error_code"] == "mcp_connection_error", answer
        assert answer["error"].startswith("bkmcp closed the session while tools/call"), answer
        assert answer["details"]["outcome"] == "unknown"
    assert order(res, *calls, stop)[-1] == stop
    assert sorted(texts(srv)) == names  # each sent once
    assert [e["status"] for e in srv.requests("tools/call") if e["status"] == 200] == []  # none ran to its end


# -- item 8: disabled or deleted public servers free their slot ------------------------------------------------


@pytest.mark.parametrize("how", ["disable", "delete"])
def test_disabled_or_deleted_public_server_is_retired_and_frees_its_process_slot(tmp_path, resident, how):
    """Issue 16 item 8. Before: the public child stayed forever, counted against --max-processes, and every per-user
    server then got resource_limit."""
    rows = [stdio_row("pub", mock_stdio(), isolation="public"), stdio_row("mine", mock_stdio())]
    reg = registry(tmp_path, rows)
    res = resident(reg, "--max-processes", "1")
    res.ok("connect_server", "alice", server_name="pub")
    pub_pid = res.child_pids()[0]
    if how == "disable":
        edit_registry(reg, "UPDATE mcp_servers SET enabled = 0 WHERE name = 'pub'")
    else:
        edit_registry(reg, "DELETE FROM mcp_servers WHERE name = 'pub'")
    mine = res.ask("call_tool", "bob", server_name="mine", tool_name="echo", arguments={"text": "hi"})
    assert mine["success"] is True, mine
    res.wait_event("process.exited", pid=pub_pid)
    assert not group_alive(pub_pid)


# -- item 6b: list_tools while another user refreshes the shared catalogue ------------------------------------


def test_list_tools_while_another_user_refreshes_a_shared_catalogue(tmp_path, resident, http_mock):
    """Issue 16 item 6b. Before: list_tools answered internal_error KeyError: ('pub', 'gen_N') when another user's
    refresh_tools replaced the shared catalogue between building the answer and its name table."""
    srv = http_mock({"tools": DEFAULT_TOOLS})
    reg = registry(tmp_path, [http_row("pub", srv.url), http_row("other", http_mock().url)])
    res = resident(reg)
    res.ok("list_tools", "alice")
    stop = threading.Event()

    def new_generations() -> None:  # the server's catalogue keeps changing under the refreshes
        n = 0
        while not stop.wait(0.005):
            n += 1
            srv.update(tools=[mock_tool(f"gen_{n}_{k}", "echo") for k in range(30)])

    changer = threading.Thread(target=new_generations, daemon=True)
    changer.start()
    sent = []
    try:
        for _ in range(60):
            sent.append(res.send("refresh_tools", "alice", server_name="pub"))
            sent.append(res.send("list_tools", "bob"))
            sent.append(res.send("refresh_tools", "carol"))
            sent.append(res.send("list_tools", "dave", server_name="pub"))
        answers = [res.wait(task) for task in sent]
    finally:
        stop.set()
        changer.join()
    for answer in answers:
        assert answer["success"] is True, answer
        names = [t["name"] for t in answer["result"]["tools"]]
        assert len(names) == len(set(names))


# -- item 7: a SQLite write lock held by an admin -----------------------------------------------------------------


def test_registry_write_lock_each_command_waits_at_most_its_own_timeout(tmp_path, resident, http_mock):
    """Issue 16 item 7. Before: N queued commands were answered at 1x, 2x, ... Nx --timeout, each waiting for
    SQLite's busy handler while holding the registry lock. Now all of them fail within their one timeout, so the
    commands sent after the lock is released are answered after the first batch, not behind N timeouts."""
    srv = http_mock()
    reg = registry(tmp_path, [http_row("pub", srv.url)])
    res = resident(reg)  # --timeout 60s: the long command waits up to 60 s for the lock
    res.ok("call_tool", "alice", server_name="pub", tool_name="echo", arguments={"text": "warm"})
    admin = sqlite3.connect(str(reg), isolation_level=None)
    admin.execute("BEGIN EXCLUSIVE")
    admin.execute("UPDATE mcp_servers SET url = url WHERE name = 'pub'")
    try:
        patient = res.send("call_tool", "alice", server_name="pub", tool_name="echo", arguments={"text": "patient"})
        hurried = [
            res.send(
                "call_tool", f"u{i}", server_name="pub", tool_name="echo", arguments={"text": f"h{i}"}, timeout_ms=800
            )
            for i in range(5)
        ]
        # before: these waited behind the patient command's 60 s busy wait (the lock is released only after them)
        quick = [res.wait(t, timeout=30.0) for t in hurried]
    finally:
        admin.execute("ROLLBACK")
        admin.close()
    assert all(a["error_code"] == "registry_error" for a in quick), quick
    assert all("800 ms" in a["error"] or "locked" in a["error"] for a in quick), quick
    assert res.wait(patient)["success"] is True  # it waited for the lock within its own 60 s and then ran
    assert texts(srv) == ["warm", "patient"]


# -- item 11: reaping a user's session frees its memory ----------------------------------------------------------


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def test_reaped_users_leave_no_memory_behind(tmp_path, resident, http_mock):
    """Issue 16 item 11. Before: every user ever seen stayed in memory (slots, catalogues, name tables) even after
    idle reaping: with a 2 000-tool per-user server, RSS grew by megabytes per user. Now users that were reaped
    leave RSS within 15 % of its value after the first (warm-up) round."""
    srv = http_mock({"generate_tools": 2000, "versions": ["2025-03-26"]})  # legacy: each closed session is a DELETE
    reg = registry(tmp_path, [http_row("big", srv.url, isolation="user", protocol_version="2025-03-26")])
    res = resident(reg, "--idle-timeout", "200ms")

    def round_of(users: list[str]) -> None:
        ended = len(srv.requests(http_method="DELETE"))
        for user in users:
            assert len(res.ok("list_tools", user)["tools"]) == 2005
            res.ok("call_tool", user, name="mcp_big_gen_00001", arguments={"value": user})
        until(lambda: len(srv.requests(http_method="DELETE")) >= ended + len(users), "the sessions were reaped")

    round_of([f"warm-{i}" for i in range(4)])
    round_of([f"warm2-{i}" for i in range(4)])
    warm = rss_kb(res.proc.pid)
    for wave in range(5):
        round_of([f"user-{wave}-{i}" for i in range(4)])
    assert rss_kb(res.proc.pid) <= warm * 1.15, (warm, rss_kb(res.proc.pid))
    # a reaped user who comes back finds their tools again, by injected name too
    again = res.ok("call_tool", "warm-0", name="mcp_big_gen_00002", arguments={"value": "back"})
    assert again["result"]["isError"] is False


# -- item 12: file descriptors --------------------------------------------------------------------------------


def test_many_users_http_sessions_under_a_small_fd_limit_never_internal_error(tmp_path, resident, http_mock):
    """Issue 16 item 12. Before: per-user HTTP sessions were unlimited and each kept its socket, so with a small
    ``ulimit -n`` the users exhausted the descriptors and a stdio start then failed with internal_error
    (OSError: [Errno 24]). Now HTTP sessions count in a limit derived from --max-processes and the fd limit
    (the least recently used idle one is closed), and exhaustion is resource_limit, never internal_error."""
    srv = http_mock({"versions": ["2025-03-26"]})
    rows = [
        http_row("crm", srv.url, isolation="user", protocol_version="2025-03-26"),
        stdio_row("box", mock_stdio()),
    ]
    reg = registry(tmp_path, rows)
    wrapper = tmp_path / "python-ulimit"
    wrapper.write_text(f'#!/bin/sh\nulimit -n 100\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    res = resident(reg, "--max-processes", "4", python=str(wrapper))
    users = [f"u{i:03d}" for i in range(120)]
    for wave in range(0, len(users), 6):  # users come and go: the least recently used idle session makes room
        sent = [
            res.send("call_tool", user, server_name="crm", tool_name="echo", arguments={"text": user})
            for user in users[wave : wave + 6]
        ]
        answers = [res.wait(task) for task in sent]
        assert [a["error_code"] for a in answers if not a["success"]] == []
    assert sorted(texts(srv)) == users  # each call reached the server once
    burst = [f"b{i:03d}" for i in range(60)]  # more users at once than the limit: refused cleanly, never lost
    sent = [
        res.send("call_tool", user, server_name="crm", tool_name="echo", arguments={"text": user}) for user in burst
    ]
    answers = [res.wait(task) for task in sent]
    assert {a["error_code"] for a in answers if not a["success"]} <= {"resource_limit"}
    assert sorted(t for t in texts(srv) if t.startswith("b")) == sorted(
        a["result"]["result"]["content"][0]["text"].split('"')[3] for a in answers if a["success"]
    )
    boxes = [
        res.ask("call_tool", user, server_name="box", tool_name="echo", arguments={"text": "b"}) for user in users[:6]
    ]
    assert all(b["success"] or b["error_code"] == "resource_limit" for b in boxes), boxes
    assert len(os.listdir(f"/proc/{res.proc.pid}/fd")) < 100


def sockets(pid: int) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return count


def test_an_idle_http_session_keeps_no_socket_open(tmp_path, resident, http_mock):
    """Issue 16 item 12: the reaper closes the keep-alive connections of an HTTP session nobody uses (a public one is
    never reaped); the session itself stays and the next call opens a new connection. Before: each session held
    its sockets for as long as it lived."""
    srv = http_mock({"versions": ["2025-03-26"]})
    res = resident(
        registry(tmp_path, [http_row("pub", srv.url, protocol_version="2025-03-26")]), "--idle-timeout", "1s"
    )
    base = sockets(res.proc.pid)
    sent = [
        res.send("call_tool", f"u{i}", server_name="pub", tool_name="echo", arguments={"text": f"{i}"})
        for i in range(8)
    ]
    assert all(res.wait(t)["success"] for t in sent)
    until(lambda: sockets(res.proc.pid) <= base, "the idle keep-alive connections were closed")
    again = res.ok("call_tool", "u0", server_name="pub", tool_name="echo", arguments={"text": "again"})
    assert again["result"]["isError"] is False
    sessions = {e["session_id"] for e in srv.requests("tools/call")}
    assert len(sessions) == 1  # the same MCP session throughout


def test_stdio_start_out_of_descriptors_is_resource_limit(tmp_path, resident):
    """Issue 16 item 12: a stdio start that finds no file descriptor (EMFILE) is resource_limit, never internal_error
    nor a misleading 'check command and args'."""
    reg = registry(tmp_path, [stdio_row("box", mock_stdio())])
    wrapper = tmp_path / "python-ulimit"
    wrapper.write_text(f'#!/bin/sh\nulimit -n 40\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    res = resident(reg, python=str(wrapper))
    answers = [res.ask("connect_server", f"u{i}", server_name="box") for i in range(16)]
    codes = [a.get("error_code") for a in answers if not a["success"]]
    assert codes and set(codes) == {"resource_limit"}, answers
    assert sum(a["success"] for a in answers) >= 1


# -- issue 27 item 6: a server bkmcp closes after a failed start is no crash; the back-off keeps the cause ---------

BAD_START = """
import json, os, sys
print("stderr line of the server " + os.environ["API_TOKEN"], file=sys.stderr, flush=True)
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg or "method" not in msg:
        continue
    if msg["method"] != "initialize":
        answer = {"error": {"code": -32601, "message": "Method not found"}}  # the era probe: legacy
    elif sys.argv[1] == "invalid":
        answer = {"result": {"protocolVersion": 42}}
    else:
        answer = {"error": {"code": -32603, "message": "token " + os.environ["API_TOKEN"] + " refused"}}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], **answer}), flush=True)
"""
TOKEN = "sekret-tok-7f3a9c"


@pytest.mark.parametrize(
    "mode, cause",
    [
        ("invalid", "initialize result has no protocolVersion string"),
        ("error", "the server answered initialize with JSON-RPC error -32603: token *** refused"),
    ],
)
def test_a_failed_start_is_no_crash_and_the_backoff_keeps_its_cause(tmp_path, resident, mode, cause):
    """Issue 27 item 6. Before: the third use answered mcp_connection_error "server 'bad' exited 2 times in a row;
    the next restart is allowed in 999 ms" and the warnings said it "exited (status 0)", though bkmcp stopped it
    after a protocol failure. Now the back-off answer and the warning carry the failure's code and message,
    scrubbed (the token the server quotes is a system credential), and never the shared child's stderr."""
    script = tmp_path / "bad_start.py"
    script.write_text(BAD_START)
    row = stdio_row("bad", [sys.executable, str(script), mode], isolation="public", env={"API_TOKEN": "${user.tok}"})
    res = resident(registry(tmp_path, [row], {"bad": {"tok": TOKEN}}))
    answers = []
    for _attempt in range(6):  # a loaded machine may let a back-off run out between two commands: ask again
        answers.append(res.ask("call_tool", "u", server_name="bad", tool_name="x", arguments={}))
        if "retry_after_ms" in answers[-1].get("details", {}):
            break
    *starts, damped = answers
    assert len(starts) >= 2
    for answer in starts:  # the start's own failure, as before
        assert answer["error_code"] == "mcp_protocol_error" and answer["error"] == cause, answer
    failures = len(starts)
    assert damped["error_code"] == "mcp_protocol_error", damped
    assert damped["error"].startswith(
        f"server 'bad' is backing off after mcp_protocol_error: {cause} ({failures} failures in a row); "
        "the next attempt is allowed in "
    )
    assert damped["details"]["restarts"] == failures and damped["details"]["retry_after_ms"] > 0
    listed = res.ok("list_tools", "u")
    assert listed["errors"][0]["error_code"] == "mcp_protocol_error" and cause in listed["errors"][0]["error"]
    pids = res.child_pids()
    assert len(pids) == failures  # the answers inside the back-off started nothing
    for pid in pids:
        (exited,) = res.wait_event("process.exited", pid=pid)
        assert exited["stopped"] is True  # bkmcp stopped it: it did not exit by itself
    rejected = res.wait_event("server.failed", count=failures + 2)
    assert {e["error_code"] for e in rejected} == {"mcp_protocol_error"}
    res.close()
    log = "".join(res.stderr_lines)
    warnings = [line for line in log.splitlines() if "server 'bad'" in line]
    assert len(warnings) == failures, log
    assert all(f"failed (mcp_protocol_error: {cause}); bkmcp stopped its process" in w for w in warnings)
    assert warnings[0].endswith("next attempt on next use") and "backing off: next attempt allowed in" in warnings[1]
    assert "exited" not in log
    blob = json.dumps(res.answers) + log + json.dumps(res.events())
    assert TOKEN not in blob and "stderr line of the server" not in blob


CLOSES_STDOUT = """
import json, os, sys
TOOL = {"name": "quit", "description": "closes stdout", "inputSchema": {"type": "object", "properties": {}}}
INIT = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "c", "version": "1"}}
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg or "method" not in msg:
        continue
    if msg["method"] == "tools/call":
        os.close(1)  # stdout ends; the process keeps reading stdin until bkmcp stops it
        continue
    answer = {"initialize": {"result": INIT}, "tools/list": {"result": {"tools": [TOOL]}}}.get(
        msg["method"], {"error": {"code": -32601, "message": "Method not found"}}
    )
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], **answer}), flush=True)
"""


def test_a_child_whose_output_ends_while_it_runs_is_stopped_not_exited(tmp_path, resident):
    """Issue 27 item 6: "exited" only of a process that exited by itself. Before: the warning said the child
    "exited (status 0)" (its status after bkmcp stopped it) and process.exited did not say who ended it."""
    script = tmp_path / "closes_stdout.py"
    script.write_text(CLOSES_STDOUT)
    res = resident(registry(tmp_path, [stdio_row("c", [sys.executable, str(script)])]))
    failed = res.ask("call_tool", "u", server_name="c", tool_name="quit", arguments={})
    assert failed["error_code"] == "mcp_connection_error" and failed["details"]["outcome"] == "unknown", failed
    assert "closed its stdout" in failed["error"]
    (pid,) = res.child_pids()
    (ended,) = res.wait_event("process.exited", pid=pid)
    assert ended["stopped"] is True
    res.close()
    (warning,) = [line for line in res.stderr_lines if "server 'c'" in line]
    assert "failed (mcp_connection_error: the server's output ended while its process ran); bkmcp stopped" in warning
    assert "exited" not in warning


# -- issue 28 item 9: make demo-resident as an operator sees it ----------------------------------------------------


def test_demo_resident_keeps_its_registry_private_and_announces_its_crash(tmp_path):
    """The demo's registry holds credentials: created 0600, so bkmcp has no permission warning for it; the crash
    it causes on purpose is announced (stdout) before bkmcp's warning about it (stderr), on one merged stream."""
    import subprocess

    demo = Path(__file__).resolve().parents[2] / "mock_server" / "demo_resident.py"
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(demo)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "readable by group/others" not in done.stdout
    announced = done.stdout.index("--- next, on purpose: the tool 'crash'")
    warned = done.stdout.index("bkmcp: warning: server 'notes' failed")
    assert announced < warned < done.stdout.index('"stopped":true')
    assert list(tmp_path.iterdir()) == []  # its temporary folder is gone


# -- issue 36 item 7: every line read before the answer to shutdown is answered -------------------------------------


def _unread(pipe) -> int:
    """Bytes written to ``pipe`` (our end of the resident's stdin) that it has not read yet."""
    import fcntl
    import struct
    import termios

    return struct.unpack("i", fcntl.ioctl(pipe.fileno(), termios.FIONREAD, b"\0" * 4))[0]


@pytest.mark.parametrize("run", range(3))
def test_a_command_written_after_shutdown_was_read_is_answered(tmp_path, resident, http_mock, run):
    """Issue 36 item 7: ``shutdown`` is read on its own (the pipe is empty again) while a call still runs within
    the shutdown grace, then another command is written. Before: the reader had stopped after the read that brought
    ``shutdown``, so that command got no answer at all (a platform matching by task_id waited forever). Now every
    line that arrives before the answer to ``shutdown`` is answered (``invalid_command``), before ``stopped``."""
    srv = http_mock({"tools": [mock_tool("slow", "slow", ms=3000), *DEFAULT_TOOLS]})
    res = resident(registry(tmp_path, [http_row("pub", srv.url)]), "--timeout", "120s", "--shutdown-grace", "60s")
    res.ok("connect_server", "alice", server_name="pub")
    call = res.send("call_tool", "alice", server_name="pub", tool_name="slow", arguments={"text": "s"})
    until(lambda: texts(srv) == ["s"], "the call reached the server")
    stop = res.send("shutdown")
    until(lambda: _unread(res.proc.stdin) == 0, "the resident read the shutdown line")
    late = res.send("list_servers")
    answer = res.wait(late)
    assert answer["success"] is False and answer["error_code"] == "invalid_command", answer
    assert "shutting down" in answer["error"]
    assert res.wait(call)["success"] is True  # the grace let it finish
    assert res.wait(stop)["result"] == {"stopped": True}
    assert order(res, late, stop) == [late, stop]
    assert res.exit_status() == 0


def test_a_command_read_with_shutdown_is_answered_before_it(tmp_path, resident):
    """Issue 36 item 7: ``shutdown`` and another command in one write (the reader sees them in one read): the
    command is answered ``invalid_command`` ("shutting down"), before ``stopped``, every run."""
    reg = registry(tmp_path, [])
    for run in range(2):
        res = resident(reg)
        res.ok("list_servers")  # up and serving
        stop = res.command("shutdown", task_id=f"stop{run}")
        late = res.command("list_servers", task_id=f"late{run}")
        res.send_raw(b"".join((json.dumps(body) + "\n").encode() for body in (stop, late)))
        answer = res.wait(f"late{run}")
        assert answer["success"] is False and answer["error_code"] == "invalid_command", answer
        assert "shutting down" in answer["error"]
        assert res.wait(f"stop{run}")["result"] == {"stopped": True}
        assert order(res, f"late{run}", f"stop{run}") == [f"late{run}", f"stop{run}"]
        assert res.exit_status() == 0


# -- issue 36 item 5: answers that answer nothing are events, never attributed ------------------------------------

SPOOFING = str(Path(__file__).resolve().parent / "spoofing_stdio.py")


@pytest.mark.parametrize(("mode", "reason"), [("duplicate", "duplicate"), ("spoof", "unknown"), ("nullid", "null_id")])
def test_a_response_that_answers_nothing_is_an_event_and_a_warning(tmp_path, resident, mode, reason):
    """Issue 36 item 5: a second answer to one id, "fetched text" guessing ids, a null-id error: each is a
    ``response.stray`` event (and a warning in the operator log); the call gets its real answer."""
    row = stdio_row("sp", [sys.executable, SPOOFING, mode], isolation="public")
    res = resident(registry(tmp_path, [row]))
    res.ok("connect_server", "alice", server_name="sp")
    result = res.ok("call_tool", "alice", server_name="sp", tool_name="echo", arguments={"text": "hi"})
    assert result["result"]["content"][0]["text"] == "real: hi"
    [stray, *_] = res.wait_event("response.stray", server="sp", reason=reason)
    assert stray["user"] is None
    until(lambda: any("bkmcp: warning: the server" in line for line in res.stderr_lines), "the operator's warning")


def test_a_catalogue_nested_deeper_than_bkmcp_parses_fails_list_tools_at_once(tmp_path, resident):
    """Issue 36 item 5: the resident's ``list_tools`` of a server whose catalogue is ~700 ``properties`` levels deep
    reports the server failed with mcp_protocol_error, not after its whole timeout (before: 20-60 s, then a timeout)."""
    row = stdio_row("deep", [sys.executable, SPOOFING, "deep"], isolation="public")
    res = resident(registry(tmp_path, [row]), "--timeout", "120s")
    answer = res.ask("connect_server", "alice", server_name="deep")
    text = json.dumps(answer)
    assert "mcp_protocol_error" in text and "nested deeper than bkmcp parses" in text, answer
    assert "mcp_timeout" not in text
