"""Resident mode (contract.md §11) end to end: ``bkmcp --resident`` as a subprocess against the mock server over HTTP
and stdio, two or more users, public and per-user servers; assertions on what the servers received."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from resident_harness import edit_registry, group_alive, http_row, mock_stdio, stdio_row, write_registry

from mock_server.mcp_mock import DEFAULT_TOOLS, mock_tool

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ENV_TOOL = mock_tool("whoami", "env", vars=["MY_TOKEN", "PATH_HINT"])
SLOW = mock_tool("slow", "slow", ms=1500)
CRASH = mock_tool("crash", "drop")
STUBBORN = str(Path(__file__).with_name("stubborn_stdio.py"))


def registry(tmp_path: Path, rows: list[dict], system=None, users=None) -> Path:
    path = tmp_path / "registry.db"
    system = dict(system or {})
    for row in rows:  # a user server needs a credential: an empty system default unless the test gives one
        if row.get("isolation") == "user" and not row.get("_no_default"):
            system.setdefault(row["name"], {})
    write_registry(str(path), [{k: v for k, v in r.items() if k != "_no_default"} for r in rows], system, users)
    return path


# -- credentials, isolation, what the servers received ---------------------------------------------------


def test_two_users_public_http_and_user_stdio_credentials_reach_the_right_child(tmp_path, resident, http_mock):
    """Public HTTP server with system credentials only; a per-user stdio server whose env comes from each user's
    own credentials (alice), the system default (bob), or none (carol: no_credentials)."""
    pub = http_mock({"require_headers": {"Authorization": "Bearer sys-pub-token-1"}})
    rows = [
        http_row("pub", pub.url, headers={"Authorization": "Bearer ${user.token}"}),
        stdio_row(
            "mine",
            mock_stdio({"tools": [ENV_TOOL, *DEFAULT_TOOLS]}),
            env={"MY_TOKEN": "${user.token}", "PATH_HINT": "fixed"},
        ),
        stdio_row("priv", mock_stdio(), env={"MY_TOKEN": "${user.token}"}, _no_default=True),
    ]
    system = {"pub": {"token": "sys-pub-token-1"}, "mine": {"token": "sys-mine-token-2"}}
    users = {
        ("alice", "mine"): {"token": "alice-secret-3"},
        ("alice", "pub"): {"token": "alice-pub-leak-4"},
        ("carol", "pub"): {"token": "carol-pub-leak-5"},
    }
    reg = registry(tmp_path, rows, system, users)
    res = resident(reg)
    init = res.ok("init")
    assert init == {"servers": [{"server_name": "pub", "status": "connected", "tool_count": 5}]}
    a = res.ok("call_tool", "alice", server_name="mine", tool_name="whoami", arguments={})
    b = res.ok("call_tool", "bob", server_name="mine", tool_name="whoami", arguments={})
    assert a["result"]["structuredContent"]["env"] == {"MY_TOKEN": "alice-secret-3", "PATH_HINT": "fixed"}
    assert b["result"]["structuredContent"]["env"] == {"MY_TOKEN": "sys-mine-token-2", "PATH_HINT": "fixed"}
    starts = res.events("process.started")
    assert {e["user"] for e in starts} == {"alice", "bob"} and len({e["pid"] for e in starts}) == 2
    carol = res.ask("call_tool", "carol", server_name="priv", tool_name="echo", arguments={"text": "x"})
    assert carol["success"] is False and carol["error_code"] == "mcp_credentials_missing"
    servers = {s["server_name"]: s for s in res.ok("list_servers", "carol")["servers"]}
    assert servers["priv"]["status"] == "no_credentials" and servers["pub"]["status"] == "connected"
    assert servers["mine"]["status"] == "disconnected"  # bob's and alice's instances are not carol's
    # the shared public session carries the system credential only, for every user
    for user in ("alice", "carol"):
        res.ok("call_tool", user, server_name="pub", tool_name="echo", arguments={"text": user})
    auth = {e["headers"].get("authorization") for e in pub.log if e["rpc_method"]}
    assert auth == {"Bearer sys-pub-token-1"}
    everything = "".join(x.decode() for x in res.raw_stdout)
    for leak in ("alice-pub-leak-4", "carol-pub-leak-5", "sys-pub-token-1"):
        assert leak not in everything and leak not in "".join(res.stderr_lines)
    assert "alice-secret-3" not in res.events_path.read_text()
    assert res.close() == []
    assert res.exit_status() == 0


def test_per_user_http_server_headers_per_user(tmp_path, resident, http_mock):
    srv = http_mock()
    rows = [http_row("crm", srv.url, isolation="user", headers={"X-Tenant": "${user.tenant}"})]
    users = {
        ("u1", "crm"): {"tenant": "t-one", "api_key": "key-one-111"},
        ("u2", "crm"): {"tenant": "t-two", "API_KEY": "key-two-222"},
    }
    res = resident(registry(tmp_path, rows, None, users))
    for user in ("u1", "u2"):
        res.ok("call_tool", user, server_name="crm", tool_name="echo", arguments={"text": user})
    calls = srv.requests("tools/call")
    seen = {
        (
            json.loads(e["body"])["params"]["arguments"]["text"],
            e["headers"].get("x-tenant"),
            e["headers"].get("authorization"),
            e["headers"].get("x-api-key"),
        )
        for e in calls
    }
    assert seen == {("u1", "t-one", "Bearer key-one-111", None), ("u2", "t-two", None, "key-two-222")}


def test_registry_edits_between_two_calls_are_seen_by_the_next_call(tmp_path, resident, http_mock):
    """Each command reads the registry as it is now: an edit committed by another connection between two calls
    (credentials, a row, enabling, deleting) changes the very next call, though the resident keeps what it
    resolved while nothing changed."""

    srv = http_mock()
    rows = [
        http_row("crm", srv.url, isolation="user", headers={"X-Tenant": "${user.tenant}"}, _no_default=True),
        http_row("pub", srv.url, headers={"X-Sys": "${user.k}"}),
        http_row("other", srv.url),
    ]
    reg = registry(tmp_path, rows, {"pub": {"k": "sys-one"}}, {("u1", "crm"): {"tenant": "t-one"}})
    res = resident(reg)

    def call(server: str, text: str) -> dict:
        res.ok("call_tool", "u1", server_name=server, tool_name="echo", arguments={"text": text})
        entry = next(
            e for e in srv.requests("tools/call") if json.loads(e["body"])["params"]["arguments"]["text"] == text
        )
        return entry["headers"]

    def edit(sql: str, *args) -> None:
        edit_registry(reg, sql, *args)

    assert call("crm", "a1")["x-tenant"] == "t-one" and call("crm", "a2")["x-tenant"] == "t-one"
    assert call("pub", "b1")["x-sys"] == "sys-one"
    edit("UPDATE mcp_user_credentials SET credentials = ? WHERE user_id = 'u1'", json.dumps({"tenant": "t-two"}))
    assert call("crm", "a3")["x-tenant"] == "t-two"
    edit("UPDATE mcp_credentials SET credentials = ? WHERE server_name = 'pub'", json.dumps({"k": "sys-two"}))
    assert call("pub", "b2")["x-sys"] == "sys-two"
    edit("UPDATE mcp_servers SET url = 'http://127.0.0.1:9/nowhere' WHERE name = 'other'")  # another row only
    assert call("crm", "a4")["x-tenant"] == "t-two"
    edit("UPDATE mcp_servers SET headers = ? WHERE name = 'crm'", json.dumps({"X-Tenant": "v-${user.tenant}"}))
    assert call("crm", "a5")["x-tenant"] == "v-t-two"
    edit("UPDATE mcp_servers SET enabled = 0 WHERE name = 'crm'")
    off = res.ask("call_tool", "u1", server_name="crm", tool_name="echo", arguments={"text": "a6"})
    assert off["error_code"] == "mcp_server_disabled"
    edit("UPDATE mcp_servers SET enabled = 1 WHERE name = 'crm'")
    assert call("crm", "a7")["x-tenant"] == "v-t-two"
    edit("DELETE FROM mcp_user_credentials WHERE user_id = 'u1'")
    gone = res.ask("call_tool", "u1", server_name="crm", tool_name="echo", arguments={"text": "a8"})
    assert gone["error_code"] == "mcp_credentials_missing"
    edit("INSERT INTO mcp_user_credentials VALUES ('u1', 'crm', ?)", json.dumps({"tenant": "t-one"}))
    assert call("crm", "a9")["x-tenant"] == "v-t-one"
    assert [json.loads(e["body"])["params"]["arguments"]["text"] for e in srv.requests("tools/call")] == [
        "a1",
        "a2",
        "b1",
        "a3",
        "b2",
        "a4",
        "a5",
        "a7",
        "a9",
    ]


def test_number_fidelity_and_is_error_is_success(tmp_path, resident, http_mock):
    srv = http_mock()
    res = resident(registry(tmp_path, [http_row("pub", srv.url)]))
    line = (
        '{"command":"invoke","task_id":"n1","params":{"action":"call_tool","server_name":"pub",'
        '"tool_name":"echo","arguments":{"text":"x","ratio":12345678901234567890.5}},"user":{"userId":"u"}}\n'
    )
    res.send_raw(line.encode())
    answer = res.wait("n1")
    assert answer["success"] is True
    assert "12345678901234567890.5" in srv.requests("tools/call")[0]["body"]
    assert b"12345678901234567890.5" in next(x for x in res.raw_stdout if b'"n1"' in x)
    failed = res.ok("call_tool", "u", server_name="pub", tool_name="fail", arguments={})
    assert failed["result"]["isError"] is True


def test_argument_problems_are_rejected_locally(tmp_path, resident, http_mock):
    srv = http_mock()
    res = resident(registry(tmp_path, [http_row("pub", srv.url)]))
    answer = res.ask("call_tool", "u", server_name="pub", tool_name="pick", arguments={"color": "pink"})
    assert answer["error_code"] == "invalid_mcp_arguments"
    assert answer["details"]["problems"][0]["path"] == "$.color"
    assert srv.requests("tools/call") == []
    assert res.wait_event("tool.rejected", server="pub", tool="pick")
    missing = res.ask("call_tool", "u", server_name="pub", tool_name="nope", arguments={})
    assert missing["error_code"] == "mcp_tool_not_found"
    unknown = res.ask("call_tool", "u", server_name="nosuch", tool_name="x")
    assert unknown["error_code"] == "mcp_server_not_found"


def test_disabled_server_and_capability_results(tmp_path, resident, http_mock):
    srv = http_mock({"tools": [mock_tool("ask", "input_required"), *DEFAULT_TOOLS]})
    rows = [http_row("pub", srv.url), http_row("off", srv.url, enabled=0)]
    res = resident(registry(tmp_path, rows))
    assert [s["server_name"] for s in res.ok("list_servers", "u")["servers"]] == ["pub"]
    assert res.ask("connect_server", "u", server_name="off")["error_code"] == "mcp_server_disabled"
    answer = res.ask("call_tool", "u", server_name="pub", tool_name="ask", arguments={})
    assert answer["error_code"] == "mcp_capability_unsupported"
    assert answer["details"]["result"]["resultType"] == "input_required"
    # --elicitation off (the default): the resident has no one to ask; a legacy elicitation/create is declined
    # with -32601, a request for a capability it never declared; never answered cancel or accept
    old = http_mock({"versions": ["2025-11-25"], "response_mode": "sse", "tools": [mock_tool("ask", "input_required")]})
    (tmp_path / "legacy").mkdir()
    res = resident(registry(tmp_path / "legacy", [http_row("old", old.url)]))
    answer = res.ask("call_tool", "u", server_name="old", tool_name="ask", arguments={})
    assert answer["error_code"] == "mcp_capability_unsupported"
    assert [r["error"]["code"] for r in old.client_responses] == [-32601]
    assert old.requests("initialize")[0]["json"]["params"]["capabilities"] == {}


# -- injected names ----------------------------------------------------------------------------------------


def test_injected_names_sanitised_hashed_and_reverse_mapped(tmp_path, resident, http_mock):
    long_name = "a_very_long_tool_name_" + "x" * 60
    one = http_mock({"tools": [mock_tool("c"), mock_tool(long_name), mock_tool("dots.and spaces")]})
    two = http_mock({"tools": [mock_tool("c")]})
    res = resident(registry(tmp_path, [http_row("a.b", one.url), http_row("a_b", two.url)]))
    listed = res.ok("list_tools", "u")
    assert listed["errors"] == []
    names = {t["name"]: (t["server_name"], t["tool_name"]) for t in listed["tools"]}
    assert len(names) == 4 and all(NAME_RE.match(n) for n in names)
    colliding = [n for n, pair in names.items() if pair[1] == "c"]
    assert len(colliding) == 2 and all(re.fullmatch(r"mcp_a_b_c_[0-9a-f]{8}", n) for n in colliding)
    hashed_long = [n for n, pair in names.items() if pair[1] == long_name]
    assert len(hashed_long[0]) == 64 and hashed_long[0].startswith("mcp_a_b_a_very_long_tool_name_xxx")
    assert "mcp_a_b_dots_and_spaces" in names
    for tool in listed["tools"]:
        assert tool["function"] == {
            "name": tool["name"],
            "description": tool["description"],
            "parameters": tool["inputSchema"],
        }
    for name, (server, tool) in names.items():
        result = res.ok("call_tool", "u", name=name, arguments={"text": name})
        assert (result["server_name"], result["tool_name"]) == (server, tool)
    assert {json.loads(e["body"])["params"]["name"] for e in one.requests("tools/call")} == {
        "c",
        long_name,
        "dots.and spaces",
    }
    assert [json.loads(e["body"])["params"]["name"] for e in two.requests("tools/call")] == ["c"]
    assert res.ask("call_tool", "u", name="mcp_nothing_here")["error_code"] == "mcp_tool_not_found"


# -- concurrency ---------------------------------------------------------------------------------------------


def test_slow_call_does_not_delay_a_fast_one_out_of_order_answers(tmp_path, resident, http_mock):
    slow = http_mock({"tools": [SLOW, *DEFAULT_TOOLS]})
    fast = http_mock()
    res = resident(registry(tmp_path, [http_row("slowsrv", slow.url), http_row("fastsrv", fast.url)]))
    res.ok("list_tools", "u")
    first = res.send("call_tool", "u", server_name="slowsrv", tool_name="slow", arguments={"text": "s"})
    second = res.send("call_tool", "u", server_name="fastsrv", tool_name="echo", arguments={"text": "f"})
    assert res.wait(second)["success"] is True
    assert res.wait(first)["success"] is True
    order = [a["task_id"] for a in res.answers if a["task_id"] in (first, second)]
    assert order == [second, first]


def test_slow_call_does_not_delay_a_fast_one_on_the_same_session(tmp_path, resident, http_mock):
    srv = http_mock({"tools": [mock_tool("slow", "slow", ms=3000), *DEFAULT_TOOLS]})
    res = resident(registry(tmp_path, [http_row("pub", srv.url)]))
    res.ok("list_tools", "u")
    first = res.send("call_tool", "u", server_name="pub", tool_name="slow", arguments={"text": "s"})
    time.sleep(0.3)  # let the first call reach the server (the order of the answers is what is checked)
    second = res.send("call_tool", "u", server_name="pub", tool_name="echo", arguments={"text": "f"})
    res.wait(second)
    res.wait(first)
    order = [a["task_id"] for a in res.answers if a["task_id"] in (first, second)]
    assert order == [second, first]


def test_waves_of_commands_beyond_the_idle_threads_all_run_at_once(tmp_path, resident, http_mock):
    """Command threads are reused between commands (at most 16 wait idle): a wave of 70 slow calls still has every
    call in flight on the server at the same time, a fast call sent after them is answered first, a duplicate
    task_id is answered at once; a second wave (served partly by reused threads) behaves the same."""
    srv = http_mock({"tools": [mock_tool("slow", "slow", ms=3000), *DEFAULT_TOOLS]})
    res = resident(registry(tmp_path, [http_row("pub", srv.url)]))
    res.ok("list_tools", "u")
    for i in range(5):  # sequential commands: one thread serves them one after the other
        res.ok("call_tool", "u", server_name="pub", tool_name="echo", arguments={"text": f"warm{i}"})
    for wave in ("w1", "w2"):
        slow = [
            res.send(
                "call_tool",
                "u",
                task_id=f"{wave}-{i}",
                server_name="pub",
                tool_name="slow",
                arguments={"text": f"{wave}-{i}"},
            )
            for i in range(70)
        ]
        end = time.monotonic() + 60
        while True:  # all 70 received and none finished: they run concurrently, not 16 (or 1) at a time
            calls = [
                e
                for e in srv.requests("tools/call")
                if json.loads(e["body"])["params"]["name"] == "slow"
                and json.loads(e["body"])["params"]["arguments"]["text"].startswith(wave)
            ]
            if len(calls) == 70 and not any(e["done"] for e in calls):
                break
            assert time.monotonic() < end and not any(e["done"] for e in calls), "the slow calls did not overlap"
            time.sleep(0.02)
        res.send_raw(
            (
                json.dumps(
                    res.command(
                        "call_tool",
                        "u",
                        task_id=slow[0],
                        server_name="pub",
                        tool_name="echo",
                        arguments={"text": "dup"},
                    )
                )
                + "\n"
            ).encode()
        )
        fast = res.send("call_tool", "u", server_name="pub", tool_name="echo", arguments={"text": f"{wave}-fast"})
        assert res.wait(slow[0])["error_code"] == "duplicate_task_id"
        assert res.wait(fast)["success"] is True
        assert all(res.wait(t)["success"] is True for t in slow)
        order = [a["task_id"] for a in res.answers if a["task_id"] in (fast, *slow)]
        assert order[:2] == [slow[0], fast] and len(order) == 72  # the duplicate, the fast call, then the wave
    assert len(srv.requests("tools/call")) == 5 + 2 * 71
    assert res.close() == []
    assert res.exit_status() == 0


def test_duplicate_task_id_is_answered_at_once_and_the_original_still_runs(tmp_path, resident, http_mock):
    srv = http_mock({"tools": [SLOW, *DEFAULT_TOOLS]})
    res = resident(registry(tmp_path, [http_row("pub", srv.url)]))
    res.ok("list_tools", "u")
    body = res.command("call_tool", "u", task_id="dup", server_name="pub", tool_name="slow", arguments={"text": "1"})
    res.send_raw((json.dumps(body) + "\n").encode())
    time.sleep(0.3)  # let the first call reach the server (the order of the answers is what is checked)
    res.send_raw((json.dumps(body) + "\n").encode())
    duplicate = res.wait("dup")
    assert duplicate["error_code"] == "duplicate_task_id"
    original = res.wait("dup")
    assert original["success"] is True
    assert len(srv.requests("tools/call")) == 1
    assert res.ok("call_tool", "u", task_id="dup", server_name="pub", tool_name="echo", arguments={"text": "2"})


def test_a_timeout_names_the_configured_budget_not_what_was_left(tmp_path, resident, http_mock):
    """Issue 36 item 7: a server that never answers its handshake fails every action with the budget the command
    had (--timeout 1500ms, a call's timeout_ms 1200), never the time that was left when the session was opened
    (``within 1.49842s``); the back-off that follows repeats the same figure."""
    hang = {"faults": {"slow_on": {"initialize": 5000, "server/discover": 5000}}}
    rows = [http_row("pub", http_mock(hang).url), stdio_row("st", mock_stdio(hang), isolation="public")]
    res = resident(registry(tmp_path, rows), "--timeout", "1500ms")
    figures = re.compile(r"within ([0-9.]+ ?m?s)")
    answers = [
        res.ask("call_tool", "u", server_name="pub", tool_name="echo", arguments={"text": "x"})["error"],
        *(e["error"] for e in res.ok("list_tools", "u")["errors"]),
        *(s["error"] for s in res.ok("init")["servers"]),
        res.ask("connect_server", "u", server_name="st")["error"],
    ]
    assert len(answers) == 6
    for text in answers:
        assert figures.findall(text) in (["1.5s"], ["1500 ms"]), text
    call = res.ask("call_tool", "v", server_name="st", tool_name="echo", arguments={"text": "x"}, timeout_ms=1200)
    assert call["error_code"] == "mcp_timeout" and figures.findall(call["error"]) in (["1.2s"], ["1200 ms"], ["1.5s"])


def test_timeout_ms_bounds_one_call_cancelled_on_the_wire_outcome_unknown(tmp_path, resident):
    log = tmp_path / "stdio.log"
    rows = [
        stdio_row(
            "s", mock_stdio({"tools": [mock_tool("slow", "slow", ms=5000), *DEFAULT_TOOLS]}, log), isolation="public"
        )
    ]
    res = resident(registry(tmp_path, rows))
    res.ok("connect_server", "u", server_name="s")
    answer = res.ask("call_tool", "u", server_name="s", tool_name="slow", arguments={"text": "x"}, timeout_ms=300)
    assert answer["error_code"] == "mcp_timeout" and answer["details"]["outcome"] == "unknown"
    assert "--timeout" not in answer["error"]
    end = time.monotonic() + 60
    while True:  # the mock logs a line once it has handled it
        methods = [json.loads(line).get("rpc_method") for line in log.read_text().splitlines()]
        if "notifications/cancelled" in methods or time.monotonic() > end:
            break
        time.sleep(0.05)
    assert methods.count("tools/call") == 1 and "notifications/cancelled" in methods
    assert res.ok("call_tool", "u", server_name="s", tool_name="echo", arguments={"text": "after"})


# -- lifecycle -----------------------------------------------------------------------------------------------


def test_crash_fails_the_call_then_restarts_on_next_use(tmp_path, resident):
    rows = [stdio_row("s", mock_stdio({"tools": [CRASH, *DEFAULT_TOOLS], "stdio_drop": "exit"}))]
    res = resident(registry(tmp_path, rows))
    res.ok("connect_server", "u", server_name="s")
    crashed = res.ask("call_tool", "u", server_name="s", tool_name="crash", arguments={})
    assert crashed["error_code"] == "mcp_connection_error" and crashed["details"]["outcome"] == "unknown"
    first_pid = res.child_pids()[0]
    (exited,) = res.wait_event("process.exited", pid=first_pid)
    assert exited["stopped"] is False  # it exited by itself (issue 27 item 6: bkmcp did not stop it)
    assert not group_alive(first_pid)
    again = res.ok("call_tool", "u", server_name="s", tool_name="echo", arguments={"text": "back"})
    assert again["result"]["isError"] is False
    assert len(res.child_pids()) == 2 and res.child_pids()[1] != first_pid
    # crashes in a row (no successful use between them) are damped: the next use within the back-off is refused
    res.ask("call_tool", "u", server_name="s", tool_name="crash", arguments={})
    res.ask("call_tool", "u", server_name="s", tool_name="crash", arguments={})
    damped = res.ask("call_tool", "u", server_name="s", tool_name="echo", arguments={"text": "x"})
    assert damped["error_code"] == "mcp_connection_error" and damped["details"]["restarts"] == 2
    assert damped["details"]["retry_after_ms"] > 0
    assert "is backing off after mcp_connection_error: the server's process exited (status" in damped["error"]
    warned = [line for line in res.stderr_lines if "server 's' failed" in line]
    assert warned and all("process exited (status" in w and "bkmcp stopped" not in w for w in warned)


def test_idle_user_sessions_are_reaped(tmp_path, resident):
    rows = [stdio_row("s", mock_stdio())]
    res = resident(registry(tmp_path, rows), "--idle-timeout", "300ms")
    res.ok("connect_server", "alice", server_name="s")
    pid = res.child_pids()[0]
    res.wait_event("process.exited", pid=pid)
    assert not group_alive(pid)
    servers = res.ok("list_servers", "alice")["servers"]
    assert servers[0]["status"] == "disconnected"
    res.ok("call_tool", "alice", server_name="s", tool_name="echo", arguments={"text": "reopened"})
    assert len(res.child_pids()) == 2


def test_process_limits_evict_the_lru_idle_user_session_else_resource_limit(tmp_path, resident):
    rows = [stdio_row("s1", mock_stdio({"tools": [SLOW, *DEFAULT_TOOLS]})), stdio_row("s2", mock_stdio())]
    res = resident(registry(tmp_path, rows), "--max-user-processes", "1", "--max-processes", "2")
    res.ok("connect_server", "alice", server_name="s1")
    res.ok("connect_server", "alice", server_name="s2")  # evicts alice's idle s1
    s1_pid = res.child_pids()[0]
    res.wait_event("process.exited", pid=s1_pid)
    res.ok("connect_server", "bob", server_name="s1")
    busy = res.send("call_tool", "bob", server_name="s1", tool_name="slow", arguments={"text": "busy"})
    res.wait_event("tool.started", task_id=busy)  # its session is in use now (a sleep raced on a loaded machine)
    # 2 live (alice s2 idle, bob s1 busy): carol evicts alice's idle s2, never bob's busy s1
    res.ok("connect_server", "carol", server_name="s2")
    pid_of = {(e["user"], e["server"]): e["pid"] for e in res.events("process.started")}
    res.wait_event("process.exited", pid=pid_of[("alice", "s2")])
    assert group_alive(pid_of[("bob", "s1")])
    res.ok("connect_server", "dave", server_name="s2")  # carol's is idle: evicted (least recently used)
    res.wait_event("process.exited", pid=pid_of[("carol", "s2")])
    assert res.wait(busy)["success"] is True
    assert len([p for p in res.child_pids() if group_alive(p)]) == 2


def test_resource_limit_when_nothing_is_idle(tmp_path, resident):
    rows = [
        stdio_row("s1", mock_stdio({"tools": [mock_tool("slow", "slow", ms=3000), *DEFAULT_TOOLS]})),
        stdio_row("pubs", mock_stdio(), isolation="public"),
    ]
    res = resident(registry(tmp_path, rows), "--max-processes", "2")
    res.ok("connect_server", "u", server_name="pubs")
    res.ok("connect_server", "alice", server_name="s1")
    busy = res.send("call_tool", "alice", server_name="s1", tool_name="slow", arguments={"text": "x"})
    res.wait_event("tool.started", task_id=busy)  # its session is in use now (a sleep raced on a loaded machine)
    refused = res.ask("connect_server", "bob", server_name="s1")
    assert refused["error_code"] == "resource_limit"
    assert refused["details"]["limit"] == 2 and refused["details"]["live"] == 2
    assert res.wait(busy)["success"] is True
    assert res.ok("connect_server", "bob", server_name="s1")["status"] == "connected"  # alice's is idle now


def test_disconnect_server_closes_this_users_instance_only(tmp_path, resident):
    rows = [stdio_row("s", mock_stdio())]
    res = resident(registry(tmp_path, rows))
    res.ok("connect_server", "alice", server_name="s")
    res.ok("connect_server", "bob", server_name="s")
    alice_pid = next(e["pid"] for e in res.events("process.started") if e["user"] == "alice")
    bob_pid = next(e["pid"] for e in res.events("process.started") if e["user"] == "bob")
    assert res.ok("disconnect_server", "alice", server_name="s") == {"server_name": "s", "status": "disconnected"}
    assert not group_alive(alice_pid) and group_alive(bob_pid)
    assert res.ok("list_servers", "bob")["servers"][0]["status"] == "connected"


def test_tools_list_changed_marks_the_catalogue_stale(tmp_path, resident, http_mock):
    srv = http_mock(
        {"notifications_before_result": [{"method": "notifications/tools/list_changed"}], "versions": ["2025-11-25"]}
    )
    res = resident(registry(tmp_path, [http_row("pub", srv.url)]))
    assert len(res.ok("list_tools", "u")["tools"]) == 5
    srv.update(tools=[*DEFAULT_TOOLS, mock_tool("brand_new")])
    assert len(res.ok("list_tools", "u")["tools"]) == 5  # cached
    res.ok("call_tool", "u", server_name="pub", tool_name="echo", arguments={"text": "x"})
    tools = res.ok("list_tools", "u")["tools"]
    assert "mcp_pub_brand_new" in {t["name"] for t in tools}
    assert len(srv.requests("tools/list")) == 2


@pytest.mark.parametrize(
    ("ttl", "discoveries"),
    [
        (60000, 1),  # fresh for a minute
        (0, 1),  # no hint: kept until a change is notified or asked for, as before ttlMs existed
        (None, 1),
        ([60000, 0], 1),  # one page without a hint: none for the catalogue, kept until a change
        ([60000, 30000], 1),
    ],
)
def test_a_resident_catalogue_without_a_change_is_kept(tmp_path, resident, http_mock, ttl, discoveries):
    srv = http_mock({"ttl_ms": ttl, "page_size": 3})  # the 5 default tools on 2 pages
    res = resident(registry(tmp_path, [http_row("pub", srv.url)]))
    for _ in range(3):
        assert len(res.ok("list_tools", "u")["tools"]) == 5
    assert len(srv.requests("tools/list")) == 2 * discoveries


def test_a_resident_catalogue_past_its_ttl_is_discovered_again(tmp_path, resident, http_mock):
    """The one freshness rule (catalogue_kept_until, the warm process's too): a positive ttlMs ends freshness,
    and the server's new tools reach list_tools without refresh_tools; a stdio server that declared
    tools.listChanged too (its ttlMs passes whatever it promises)."""
    short = http_mock({"ttl_ms": [1, 5], "page_size": 3})  # the smallest of its pages rules: 1 ms
    notifying = {"ttl_ms": 1, "capabilities": {"tools": {"listChanged": True}}}
    rows = [http_row("pub", short.url), stdio_row("st", mock_stdio(notifying, log=tmp_path / "st.log"))]
    res = resident(registry(tmp_path, rows))
    assert len(res.ok("list_tools", "u")["tools"]) == 10
    short.update(tools=[*DEFAULT_TOOLS, mock_tool("brand_new")])
    time.sleep(0.05)  # well past 1 ms
    names = {t["name"] for t in res.ok("list_tools", "u")["tools"]}
    assert "mcp_pub_brand_new" in names and len(names) == 11
    assert len(short.requests("tools/list")) == 4  # two pages each time
    logged = [json.loads(line) for line in (tmp_path / "st.log").read_text().splitlines()]
    assert [entry["rpc_method"] for entry in logged].count("tools/list") == 2


def test_refresh_tools_failure_keeps_the_previous_catalogue(tmp_path, resident, http_mock):
    srv = http_mock()
    res = resident(registry(tmp_path, [http_row("pub", srv.url)]))
    assert len(res.ok("list_tools", "u")["tools"]) == 5
    srv.update(faults={"fail_on_page": 1})
    refreshed = res.ok("refresh_tools", "u")
    assert [e["server_name"] for e in refreshed["errors"]] == ["pub"]
    assert len(refreshed["tools"]) == 5
    assert len(res.ok("list_tools", "u")["tools"]) == 5


@pytest.mark.parametrize("how", ["shutdown", "eof", "sigterm", "sigint"])
def test_clean_exit_leaves_no_child(tmp_path, resident, http_mock, how):
    stubborn = [mock_stdio()[0], STUBBORN]  # ignores SIGTERM and EOF, and has a descendant that ignores SIGTERM
    rows = [
        stdio_row("s", stubborn),
        stdio_row(
            "p", [*stubborn, "--scenario-json", json.dumps({"tools": [SLOW, *DEFAULT_TOOLS]})], isolation="public"
        ),
    ]
    res = resident(registry(tmp_path, rows))
    res.ok("connect_server", "alice", server_name="s")
    res.ok("connect_server", "bob", server_name="s")
    res.ok("connect_server", "bob", server_name="p")
    in_flight = res.send("call_tool", "bob", server_name="p", tool_name="slow", arguments={"text": "x"})
    pids = res.child_pids()
    assert len(pids) == 3 and all(group_alive(p) for p in pids)
    if how == "shutdown":
        assert res.ask("shutdown") == {
            "task_id": res.answers[-1]["task_id"],
            "success": True,
            "result": {"stopped": True},
        }
    elif how == "eof":
        res.proc.stdin.close()
    else:
        res.proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGINT)
    assert res.exit_status() == (130 if how == "sigint" else 0)
    assert [p for p in pids if group_alive(p)] == []
    answered = [a for a in res.answers if a["task_id"] == in_flight]
    assert len(answered) == 1  # the call in flight is answered (it failed or finished), never lost
    assert "Traceback" not in "".join(res.stderr_lines)


def test_sigkill_of_the_resident_process_leaves_no_child(tmp_path, resident):
    res = resident(registry(tmp_path, [stdio_row("s", [mock_stdio()[0], STUBBORN, "--alone"])]))
    res.ok("connect_server", "alice", server_name="s")
    pid = res.child_pids()[0]
    res.proc.kill()
    res.exit_status()
    end = time.monotonic() + 30
    while group_alive(pid) and time.monotonic() < end:
        time.sleep(0.05)
    assert not group_alive(pid)


# -- input handling --------------------------------------------------------------------------------------


def test_bad_lines_are_answered_and_survived(tmp_path, resident, http_mock):
    srv = http_mock()
    res = resident(registry(tmp_path, [http_row("pub", srv.url)]))
    cases = [
        (b"not json", None, "invalid_command"),
        (b"[1,2]", None, "invalid_command"),
        (b'{"command":"invoke","params":{"action":"init"}}', None, "invalid_command"),
        (b'{"command":"invoke","task_id":7,"params":{"action":"init"}}', None, "invalid_command"),
        (b'{"command":"run","task_id":"c1","params":{"action":"init"}}', "c1", "invalid_command"),
        (b'{"command":"invoke","task_id":"c2"}', "c2", "invalid_command"),
        (b'{"command":"invoke","task_id":"c3","params":{"action":"fly"}}', "c3", "unknown_action"),
        (b'{"command":"invoke","task_id":"c4","params":{"action":"list_tools"}}', "c4", "invalid_command"),
        (
            b'{"command":"invoke","task_id":"c5","params":{"action":"call_tool","server_name":"pub"},'
            b'"user":{"userId":"u"}}',
            "c5",
            "invalid_command",
        ),
        (
            b'{"command":"invoke","task_id":"c6","params":{"action":"call_tool","name":"x","arguments":[]},'
            b'"user":{"userId":"u"}}',
            "c6",
            "invalid_command",
        ),
        (
            b'{"command":"invoke","task_id":"c7","params":{"action":"call_tool","name":"x","timeout_ms":-1},'
            b'"user":{"userId":"u"}}',
            "c7",
            "invalid_command",
        ),
        (
            b'{"command":"invoke","task_id":"c8","params":{"action":"list_tools"},"user":{"userId":5}}',
            "c8",
            "invalid_command",
        ),
        (b'{"command":"invoke","task_id":"c9","params":{"action":"init"}', None, "invalid_command"),
        (b"\xff\xfe\x00", None, "invalid_command"),
        (b"", None, "invalid_command"),
    ]
    for line, task_id, code in cases:
        res.send_raw(line + b"\n")
        answer = res.wait(task_id)
        assert answer["success"] is False and answer["error_code"] == code, (line, answer)
    assert res.ok("list_servers")["servers"][0]["server_name"] == "pub"
    assert "Traceback" not in "".join(res.stderr_lines)


def test_a_line_over_16_mib_is_answered_and_skipped(tmp_path, resident, http_mock):
    srv = http_mock()
    res = resident(registry(tmp_path, [http_row("pub", srv.url)]))
    big = b'{"command":"invoke","task_id":"big","params":{"action":"list_servers","pad":"' + b"x" * (17 << 20) + b'"}}'
    res.send_raw(big + b"\n")
    answer = res.wait(None)
    assert answer["error_code"] == "invalid_command" and "16777216" in answer["error"]
    assert res.ok("list_servers")["servers"][0]["server_name"] == "pub"


def test_events_on_a_full_disk_never_stop_serving(tmp_path, resident, http_mock):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    srv = http_mock()
    res = resident(registry(tmp_path, [http_row("pub", srv.url)]), events=Path("/dev/full"))
    for _ in range(3):
        res.ok("call_tool", "u", server_name="pub", tool_name="echo", arguments={"text": "x"})
    assert len(srv.requests("tools/call")) == 3


def test_registry_that_cannot_be_opened_exits_1_with_an_envelope(tmp_path, resident):
    res = resident(tmp_path / "no" / "such" / "dir" / "r.db", events=tmp_path / "e.jsonl")
    assert res.exit_status() == 1
    envelope = json.loads(res.stderr_lines[-1])
    assert envelope["ok"] is False and envelope["error"]["code"] == "registry_error"
    assert res.raw_stdout == []


COUNTED = str(Path(__file__).with_name("counted_stdio.py"))


def _peaks(path: Path) -> list[int]:
    """How many servers ran (by their own count) as each one started."""
    return [int(line.split()[1]) for line in path.read_text().splitlines()] if path.is_file() else []


def test_process_limits_hold_while_many_commands_open_at_once(tmp_path, resident):
    """Issue 29, item 6 (docs/contract.md §11.5): connects and disconnects sent all at once, by one user and by many
    users. Each server counts, as it starts, how many servers run (one lingers 1 s after its stdin ends, as a
    server saving its state does): never more than ``--max-user-processes`` for one user, nor ``--max-processes``
    in all. A disconnected or reaped session's child counts until it is stopped."""
    python = mock_stdio()[0]
    one, many = tmp_path / "one-user.txt", tmp_path / "many-users.txt"
    rows = [stdio_row(f"a{i}", [python, COUNTED, str(one), "--linger", "1"]) for i in range(3)]
    rows += [stdio_row(f"m{i}", [python, COUNTED, str(many), "--linger", "1"]) for i in range(2)]
    res = resident(registry(tmp_path, rows), "--max-user-processes", "2", "--max-processes", "3")

    def burst(commands: list[tuple[str, str, str]]) -> None:
        tasks = [res.send(action, user, server_name=name) for action, user, name in commands]
        for task in tasks:
            answer = res.wait(task)
            assert answer["success"] or answer["error_code"] == "resource_limit", answer

    for _ in range(3):  # one user: each disconnect's child still runs while the next connects open
        burst([(a, "alice", f"a{i}") for i in range(3) for a in ("connect_server", "disconnect_server")])
    assert _peaks(one) and max(_peaks(one)) <= 2, _peaks(one)
    users = [f"u{n}" for n in range(4)]
    for _ in range(2):  # many users: 3 in all, alice's two idle sessions among them
        burst([(a, u, f"m{i}") for u in users for i in range(2) for a in ("connect_server", "disconnect_server")])
    assert _peaks(many) and max(_peaks(many)) <= 3, _peaks(many)
