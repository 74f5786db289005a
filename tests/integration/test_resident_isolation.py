"""Resident mode as a multi-tenant component (issue 16, docs/contract.md §11.5): what one user can learn about
another through answers, errors, details, events and logs; the secrets the process keeps and prints.

- A failing call on a *public* stdio server never carries the shared child's stderr (it may hold another user's
  arguments); a per-user server's failure may.
- No redaction oracle: a user's answers are scrubbed with that command's own secrets plus the system ones, so
  another user's token or credential value never turns this user's own text into ``***``.
- The process-wide redactor stays bounded however many tokens and users it has seen.
"""

from __future__ import annotations

import io
import json

from resident_harness import http_row, mock_stdio, stdio_row, write_registry

import bkmcp
from mock_server.mcp_mock import DEFAULT_TOOLS, mock_tool
from tests.helpers import resident_options

CRASH = mock_tool("crash", "drop")


def logging_stdio(tools=None) -> list[str]:
    """A stdio mock that logs every line it receives (the call's arguments included) to its stderr."""
    argv = mock_stdio({"tools": tools or [*DEFAULT_TOOLS, CRASH]})
    argv.remove("--quiet")
    return argv


# -- item 1: the shared child's stderr ---------------------------------------------------------------------------


def test_public_stdio_failure_never_carries_the_shared_childs_stderr(tmp_path, resident):
    """User A's arguments, logged by the shared child, must not reach user B in B's error details."""
    reg = tmp_path / "r.db"
    write_registry(
        str(reg),
        [stdio_row("shared", logging_stdio(), isolation="public"), stdio_row("own", logging_stdio())],
        {"own": {}},
    )
    res = resident(reg)
    res.ok("call_tool", "u-ann", server_name="shared", tool_name="echo", arguments={"text": "ann-private-arg-41"})
    failed = res.ask("call_tool", "u-ben", server_name="shared", tool_name="crash", arguments={})
    assert failed["success"] is False and failed["error_code"] == "mcp_connection_error", failed
    assert "ann-private-arg-41" not in json.dumps(failed)
    assert "server_stderr" not in failed.get("details", {})
    # a per-user server's stderr is that user's own: it may explain the failure
    res.ok("call_tool", "u-ann", server_name="own", tool_name="echo", arguments={"text": "ann-own-arg-42"})
    own = res.ask("call_tool", "u-ann", server_name="own", tool_name="crash", arguments={})
    assert own["error_code"] == "mcp_connection_error"
    assert "ann-own-arg-42" in json.dumps(own["details"]["server_stderr"])


# -- item 2: no redaction oracle ------------------------------------------------------------------------------------


def test_another_users_token_and_credential_never_blank_this_users_text(tmp_path, http_mock, resident):
    srv = http_mock({"tools": DEFAULT_TOOLS})
    reg = tmp_path / "r.db"
    write_registry(
        str(reg),
        [
            http_row("pub", srv.url),
            http_row("crm", srv.url, isolation="user", headers={"X-Region": "${user.region}"}),
            http_row("unused", srv.url, headers={"X-K": "${user.k}"}),
        ],
        {"crm": {"region": "default-region-q"}, "unused": {"k": "never-used-system-9"}},
        {("u-ann", "crm"): {"token": "ann-crm-token-5e1", "region": "ann-region-north"}},
    )
    res = resident(reg)
    ann = res.wait(
        res.send(
            "call_tool",
            "u-ann",
            token="ann-access-token-77",
            server_name="crm",
            tool_name="echo",
            arguments={"text": "hi"},
        )
    )
    assert ann["success"] is True, ann
    for guess in ("ann-access-token-77", "ann-crm-token-5e1", "ann-region-north"):
        answer = res.ask("call_tool", "u-ben", server_name="pub", tool_name=guess)
        assert answer["error_code"] == "mcp_tool_not_found"
        assert guess in answer["error"], answer  # B's own text, never *** because A's secret equals it
    # a system credential is scrubbed for everyone, also one of a server nobody used yet
    for system in ("default-region-q", "never-used-system-9"):
        answer = res.ask("call_tool", "u-ben", server_name="pub", tool_name=system)
        assert system not in answer["error"] and "***" in answer["error"], answer


# -- item 10: bounded redactor ------------------------------------------------------------------------------------


def test_process_redactor_does_not_grow_with_tokens_and_users(tmp_path, http_mock):
    """2 000 commands, each with a new user, access token and credential: the process-wide redactor keeps none of
    them (answers are scrubbed per command), so its size and the cost of a log line stay flat."""
    srv = http_mock({"tools": DEFAULT_TOOLS})
    reg = tmp_path / "r.db"
    users = {(f"u{i}", "crm"): {"token": f"crm-token-{i:05d}", "region": f"region-{i:05d}"} for i in range(2000)}
    write_registry(
        str(reg),
        [http_row("pub", srv.url, headers={"X-Sys": "${user.k}"}), http_row("crm", srv.url, isolation="user")],
        {"pub": {"k": "system-secret-k1"}},
        users,
    )
    log = bkmcp.Log(io.StringIO())
    registry = bkmcp.SqliteRegistry(str(reg), log=log)
    events = bkmcp.EventSink(None, log.redactor)
    opts = resident_options(str(reg))
    out = io.BytesIO()
    server = bkmcp.ResidentServer(opts, registry=registry, stdout=out, log=log, events=events, env={})
    try:
        for i in range(2000):
            line = {
                "command": "invoke",
                "task_id": f"t{i}",
                "params": {"action": "list_servers"},
                "user": {"userId": f"u{i}", "accessToken": f"access-{i:05d}"},
            }
            server.dispatch(json.dumps(line).encode())
            if i % 200 == 199:
                server.drain(60)
        server.drain(60)
    finally:
        server.stopping.set()
        server.finish(grace=5.0)
        registry.close()
    answers = [json.loads(x) for x in out.getvalue().splitlines()]
    assert len(answers) == 2000 and all(a["success"] for a in answers)
    secrets = log.redactor.secrets()
    assert len(secrets) <= 4, secrets  # the system credential only (never a user's token or credential)
    assert "system-secret-k1" in secrets


# -- item 14: an event for every failed connect -------------------------------------------------------------------


def test_init_failures_each_write_an_event_with_their_code(tmp_path, http_mock, resident):
    """401, 403, a refused connection, a missing variable and an auth conflict: each a ``server.failed`` event."""
    import socket

    locked = http_mock({"tools": DEFAULT_TOOLS, "require_headers": {"X-Key": "right"}})
    forbidden = http_mock({"tools": DEFAULT_TOOLS, "forbid_headers_403": {"X-Key": "banned"}})
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    reg = tmp_path / "r.db"
    write_registry(
        str(reg),
        [
            http_row("s401", locked.url),
            http_row("s403", forbidden.url, headers={"X-Key": "banned"}),
            http_row("srefused", closed),
            http_row("snovar", locked.url, headers={"X-Key": "${NO_SUCH_VARIABLE_X}"}),
            http_row("sconflict", locked.url),
        ],
        {"sconflict": {"api_key": "k-one-1234", "token": "k-two-1234"}},
    )
    res = resident(reg)
    init = {s["server_name"]: s for s in res.ok("init")["servers"]}
    expected = {
        "s401": "mcp_auth_required",
        "s403": "mcp_permission_denied",
        "srefused": "mcp_connection_error",
        "snovar": "missing_environment_variable",
        "sconflict": "mcp_auth_conflict",
    }
    assert {name: entry.get("error_code") for name, entry in init.items()} == expected
    for name, code in expected.items():
        found = res.wait_event("server.failed", server=name, timeout=10)
        assert found[0]["error_code"] == code and found[0]["user"] is None, found
        assert found[0]["stage"] in ("resolve", "connect")
    # a user's failed connect has its event too, with the user
    answer = res.ask("connect_server", "u-ann", server_name="s401")
    assert answer["error_code"] == "mcp_auth_required"
    assert res.wait_event("server.failed", server="s401", task_id=answer["task_id"], timeout=10)
    # a call refused before any server is reached: an unknown injected name, an unknown server
    for params, code in (
        ({"name": "mcp_nowhere_tool"}, "mcp_tool_not_found"),
        ({"server_name": "nowhere", "tool_name": "t"}, "mcp_server_not_found"),
    ):
        answer = res.ask("call_tool", "u-ann", **params)
        assert answer["error_code"] == code
        event = res.wait_event("tool.rejected", task_id=answer["task_id"], timeout=10)[0]
        assert event["error_code"] == code and event["user"] == "u-ann", event


# -- item 17: odd user ids, a call cut by shutdown ----------------------------------------------------------------


def test_lone_surrogate_and_huge_user_ids_are_invalid_commands(tmp_path, http_mock, resident):
    srv = http_mock({"tools": DEFAULT_TOOLS})
    reg = tmp_path / "r.db"
    write_registry(str(reg), [http_row("pub", srv.url)])
    res = resident(reg)
    res.send_raw(
        b'{"command":"invoke","task_id":"sur","params":{"action":"list_servers"},"user":{"userId":"\\ud800"}}\n'
    )
    answer = res.wait("sur")
    assert answer["error_code"] == "invalid_command" and "userId" in answer["error"], answer
    huge = res.ask("list_servers", "u" * 100_000)
    assert huge["error_code"] == "invalid_command" and "userId" in huge["error"], {**huge, "error": huge["error"][:200]}
    assert res.ok("list_servers", "u-fine")["servers"]


def test_a_call_cut_by_shutdown_has_no_null_exit_status(tmp_path, resident):
    reg = tmp_path / "r.db"
    slow = mock_tool("slow", "slow", ms=20000)
    write_registry(str(reg), [stdio_row("box", mock_stdio({"tools": [slow]}), isolation="public")])
    res = resident(reg, "--shutdown-grace", "0")  # the cut itself
    task = res.send("call_tool", "u-ann", server_name="box", tool_name="slow", arguments={})
    res.wait_event("tool.started", task_id=task)
    res.send("shutdown")
    answer = res.wait(task)
    assert answer["success"] is False, answer
    assert "exit_status" not in answer.get("details", {}) or answer["details"]["exit_status"] is not None, answer


# -- item 19: disconnect_server on a public server ----------------------------------------------------------------


def test_disconnect_of_a_public_server_never_restarts_the_shared_child(tmp_path, resident):
    reg = tmp_path / "r.db"
    write_registry(str(reg), [stdio_row("shared", mock_stdio(), isolation="public")])
    res = resident(reg)
    res.ok("call_tool", "u-ann", server_name="shared", tool_name="echo", arguments={"text": "a"})
    answer = res.ok("disconnect_server", "u-ben", server_name="shared")
    assert answer == {"server_name": "shared", "status": "connected", "shared": True, "closed": False}
    res.ok("call_tool", "u-ann", server_name="shared", tool_name="echo", arguments={"text": "b"})
    assert len(res.events("process.started")) == 1 and res.events("process.exited") == []


def test_a_shared_childs_stdout_noise_is_skipped_and_never_quoted_to_users(tmp_path, resident):
    """Lines a stdio child writes to stdout that are not JSON-RPC (a banner, a log line during a call) are skipped,
    as in the CLI (docs/contract.md §9): calls work. A failure quotes them (details.server_stdout) for a per-user
    child, never for a public one, whose lines may hold any user's data (§11.5); the operator's -v log has them."""
    reg = tmp_path / "r.db"
    tools = [mock_tool("echo", "echo", {"text": {"type": "string"}}, stdout="log: echo called"), CRASH]
    noisy = mock_stdio({"tools": tools, "stdout_lines": ["log: stray-line-of-someone-9f"]})
    write_registry(str(reg), [stdio_row("shared", noisy, isolation="public"), stdio_row("own", noisy)], {"own": {}})
    res = resident(reg, "-v")
    for server in ("shared", "own"):
        answer = res.ok("call_tool", "u-ann", server_name=server, tool_name="echo", arguments={"text": "a"})
        assert answer["result"]["structuredContent"] == {"arguments": {"text": "a"}}, answer
    shared = res.ask("call_tool", "u-ann", server_name="shared", tool_name="crash", arguments={})
    assert shared["success"] is False and shared["error_code"] == "mcp_connection_error", shared
    assert "stray-line-of-someone-9f" not in json.dumps(shared) and "server_stdout" not in shared.get("details", {})
    own = res.ask("call_tool", "u-ann", server_name="own", tool_name="crash", arguments={})
    assert own["error_code"] == "mcp_connection_error", own
    details = own["details"]
    assert details["server_stdout"] == ["log: stray-line-of-someone-9f", "log: echo called"], details
    assert details["server_stdout_skipped"] == 2
    res.close()
    logged = [line for line in res.stderr_lines if "[server stdout, not JSON-RPC]" in line]
    assert sum("stray-line-of-someone-9f" in line for line in logged) == 2, res.stderr_lines[-20:]  # both children


def test_the_operators_verbose_log_keeps_a_public_childs_stderr(tmp_path, resident):
    """The operator (``-v``) still sees what a shared child wrote to stderr: only users' answers lose it."""
    reg = tmp_path / "r.db"
    write_registry(str(reg), [stdio_row("shared", logging_stdio(), isolation="public")])
    res = resident(reg, "-v")
    res.ok("call_tool", "u-ann", server_name="shared", tool_name="echo", arguments={"text": "ann-arg-for-operator"})
    failed = res.ask("call_tool", "u-ben", server_name="shared", tool_name="crash", arguments={})
    assert "ann-arg-for-operator" not in json.dumps(failed)
    res.close()
    logged = [line for line in res.stderr_lines if "[server stderr]" in line]
    assert any("ann-arg-for-operator" in line for line in logged), res.stderr_lines[-20:]
