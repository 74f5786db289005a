"""The end of a resident process answers everything (docs/contract.md §11.1, §11.5; issue 16 item 5).

``shutdown``, EOF and every terminating signal (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1) during (a) calls in
flight on a stdio and an HTTP server, (b) a child still starting (it answers nothing yet) and a ``list_tools``
waiting for it, (c) a command waiting for a slow HTTP registry source: every command read before the end is answered
exactly once — cut ones with a clear failure, never a partial success — and no process of any child's group is left,
descendants included. At EOF a call whose ``timeout_ms`` is longer than ``--timeout`` + 5 s still gets its result.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from resident_harness import (
    Resident,
    group_alive,
    http_row,
    mock_stdio,
    stdio_row,
    write_registry,
)

from mock_server.mcp_mock import DEFAULT_TOOLS, MockServer, mock_tool
from mock_server.registry_source import RegistrySource
from tests.helpers import group_watchdogs_of, process_running, sigkill_each

STUBBORN = str(Path(__file__).with_name("stubborn_stdio.py"))
LONG = mock_tool("long", "slow", ms=60_000)
WAIT = 60.0  # a hard safety net, never a performance threshold


def wait_for(check, what: str) -> None:
    end = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < end, f"never happened: {what}"
        time.sleep(0.05)


def pids_in(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.is_file() else []


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "shutdown"])
def test_every_command_is_answered_and_no_child_group_is_left(tmp_path, how):
    srv = MockServer({"tools": [LONG, *DEFAULT_TOOLS]})
    srv.start()
    pidfile, stdio_log = tmp_path / "pids.txt", tmp_path / "stdio.jsonl"
    python = mock_stdio()[0]
    scenario = json.dumps({"tools": [LONG, *DEFAULT_TOOLS]})
    rows = [
        stdio_row(
            "p",
            [python, STUBBORN, "--pidfile", str(pidfile), "--scenario-json", scenario, "--log", str(stdio_log)],
            isolation="public",
        ),
        stdio_row("late", [python, STUBBORN, "--pidfile", str(pidfile), "--delay", "300"], isolation="user"),
        http_row("h", srv.url),
    ]
    users = ("alice", "bob", "carol")
    document = {
        "servers": rows,
        "system_credentials": {"late": {}},
        "tokens": {u: f"tok-{u}" for u in users},
    }
    source = RegistrySource(document)
    source.start()
    events = tmp_path / "events.jsonl"
    res = Resident(source.url, "--timeout", "60s", events=events)  # type: ignore[arg-type]  # a URL, not a path
    try:
        assert res.wait(res.send("connect_server", "alice", server_name="p", token="tok-alice"))["success"] is True
        stdio_call = res.send(
            "call_tool", "alice", server_name="p", tool_name="long", arguments={"text": "s"}, token="tok-alice"
        )
        http_call = res.send(
            "call_tool", "alice", server_name="h", tool_name="long", arguments={"text": "h"}, token="tok-alice"
        )
        starting = res.send("connect_server", "bob", server_name="late", token="tok-bob")
        listing = res.send("list_tools", "bob", token="tok-bob")
        wait_for(lambda: len(srv.requests("tools/call")) == 1, "the HTTP call reached the server")
        wait_for(lambda: stdio_log.is_file() and "tools/call" in stdio_log.read_text(), "the stdio call arrived")
        wait_for(lambda: len(pids_in(pidfile)) == 2, "the late child started")
        source.update(fault={"delay_ms": 30_000})
        slow_registry = res.send("list_servers", "carol", token="tok-carol")
        wait_for(lambda: len(source.requests("carol")) == 1, "the registry request of carol")
        follower = res.send("list_tools", "carol", token="tok-carol")  # waits for the same fetch, not a second one
        cut = [stdio_call, http_call, starting, listing, slow_registry, follower]
        groups = pids_in(pidfile)
        assert all(group_alive(g) for g in groups)
        if how == "shutdown":
            stop = res.send("shutdown")
        else:
            res.proc.send_signal(getattr(signal, how))
        assert res.exit_status() == (130 if how == "SIGINT" else 0)
        by_task: dict[str, list[dict]] = {}
        for answer in res.answers:
            by_task.setdefault(answer["task_id"], []).append(answer)
        for task in cut:
            assert len(by_task.get(task, [])) == 1, (task, by_task.get(task), "".join(res.stderr_lines)[-2000:])
            answer = by_task[task][0]
            assert answer["success"] is False and answer["error_code"] != "internal_error", answer
        assert "bkmcp closed the stdio server" in by_task[stdio_call][0]["error"]
        assert by_task[stdio_call][0]["details"]["outcome"] == "unknown"
        assert by_task[http_call][0]["error_code"] == "mcp_connection_error"
        assert by_task[follower][0]["error_code"] == "registry_error", by_task[follower]
        assert len(source.requests("carol")) == 1
        if how == "shutdown":
            assert by_task[stop] == [{"task_id": stop, "success": True, "result": {"stopped": True}}]
            assert res.answers[-1]["task_id"] == stop
        assert [g for g in groups if group_alive(g)] == []  # the starting child's descendant included
        assert [p for p in res.child_pids() if group_alive(p)] == []
        assert "Traceback" not in "".join(res.stderr_lines)
    finally:
        sigkill_each(pids_in(pidfile), os.killpg)
        res.close()
        source.stop()
        srv.stop()


def test_at_eof_a_call_longer_than_timeout_plus_5s_still_gets_its_result(tmp_path):
    """EOF waits for each command's own deadline (``timeout_ms``), not for ``--timeout`` + 5 s."""
    srv = MockServer({"tools": [mock_tool("seven", "slow", ms=7000), *DEFAULT_TOOLS]})
    srv.start()
    reg = tmp_path / "registry.db"
    write_registry(str(reg), [http_row("h", srv.url)])
    res = Resident(reg, "--timeout", "1s")
    try:
        assert res.ok("list_tools", "u")["tools"]
        call = res.send(
            "call_tool", "u", server_name="h", tool_name="seven", arguments={"text": "x"}, timeout_ms=30_000
        )
        wait_for(lambda: len(srv.requests("tools/call")) == 1, "the call reached the server")
        res.proc.stdin.close()
        assert res.exit_status() == 0
        answer = res.wait(call)
        assert answer["success"] is True, answer
        assert answer["result"]["result"]["isError"] is False
    finally:
        res.close()
        srv.stop()


def test_sigkill_of_the_resident_leaves_no_process_of_a_server_tree(tmp_path):
    """Issue 29, item 3 (docs/contract.md §11.5): a stdio server that forks a descendant, both ignoring SIGHUP,
    SIGTERM and EOF on stdin; SIGKILL of the resident ends the whole tree, not only the direct child."""
    tree = tmp_path / "tree.txt"
    python = mock_stdio()[0]
    reg = tmp_path / "registry.db"
    write_registry(str(reg), [stdio_row("p", [python, STUBBORN, "--tree", str(tree)], isolation="public")])
    res = Resident(reg)
    try:
        assert res.ok("list_tools", "u", server_name="p")["tools"]
        wait_for(lambda: len(pids_in(tree)) == 2, "the server and its descendant recorded their pids")
        pids = pids_in(tree)
        assert all(process_running(p) for p in pids)
        res.proc.kill()
        assert res.exit_status() == -signal.SIGKILL
        wait_for(lambda: not any(process_running(p) for p in pids), "every process of the server's tree ended")
    finally:
        sigkill_each(pids_in(tree))
        res.close()


def test_a_killed_group_watchdog_is_replaced_and_told_the_groups_still_running(tmp_path):
    """Issue 29, item 3: someone kills the resident's group watchdog. The next child starts all the same (its
    record to the dead watchdog costs it nothing), a new watchdog records both servers' groups, and SIGKILL of
    the resident still ends both trees."""
    trees = [tmp_path / "p.txt", tmp_path / "q.txt"]
    python = mock_stdio()[0]
    reg = tmp_path / "registry.db"
    rows = [stdio_row(n, [python, STUBBORN, "--tree", str(t)], isolation="public") for n, t in zip("pq", trees)]
    write_registry(str(reg), rows)
    res = Resident(reg)
    try:
        assert res.ok("list_tools", "u", server_name="p")["tools"]
        wait_for(lambda: len(group_watchdogs_of(res.proc.pid)) == 1, "the group watchdog started")
        first = group_watchdogs_of(res.proc.pid)[0]
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: not process_running(first), "the watchdog died")
        assert res.ok("list_tools", "u", server_name="q")["tools"]
        wait_for(lambda: [len(pids_in(t)) for t in trees] == [2, 2], "both servers and descendants recorded their pids")
        assert [w for w in group_watchdogs_of(res.proc.pid) if w != first]
        pids = [p for t in trees for p in pids_in(t)]
        assert all(process_running(p) for p in pids)
        res.proc.kill()
        assert res.exit_status() == -signal.SIGKILL
        wait_for(lambda: not any(process_running(p) for p in pids), "every process of both trees ended")
    finally:
        sigkill_each([p for t in trees for p in pids_in(t)])
        res.close()
