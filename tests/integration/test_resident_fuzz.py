"""Resident mode under hostile input and many users (docs/contract.md §11.1, §11.5): one long-lived process per module.

- Malformed input: random bytes, truncated JSON, wrong types in every field, unknown actions; each line gets
  exactly one error answer, the process never dies and never prints a traceback (BKMCP_FUZZ_EXAMPLES lines).
- Isolation: three users with sentinel secrets run random interleaved commands; no answer, log line or event of
  one user carries another user's secret or process id, and no secret appears anywhere but in the user's own
  tool result that echoes it (a tool's result is data, returned as received).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from resident_harness import http_row, mock_stdio, resident_serving, stdio_row, write_registry

import bkmcp
from mock_server.mcp_mock import DEFAULT_TOOLS, MockServer, mock_tool
from tests.helpers import FUZZ_EXAMPLES

ENV_TOOL = mock_tool("whoami", "env", vars=["MY_TOKEN"])
USERS = {"u-ann": "sentinel-ann-7f3a9c", "u-ben": "sentinel-ben-2b8e41", "u-cat": "sentinel-cat-95d0e7"}
SYSTEM = "sentinel-system-c4a1f2"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("resident-fuzz")
    srv = MockServer({"tools": [ENV_TOOL, *DEFAULT_TOOLS]})
    srv.start()
    rows = [
        http_row("pub", srv.url, headers={"X-System": "${user.sys}"}),
        http_row("crm", srv.url, isolation="user", headers={"X-Tenant-Token": "${user.token}"}),
        stdio_row("box", mock_stdio({"tools": [ENV_TOOL, *DEFAULT_TOOLS]}), env={"MY_TOKEN": "${user.token}"}),
    ]
    users = {}
    for user, secret in USERS.items():
        users[(user, "crm")] = {"token": secret + "-crm"}
        users[(user, "box")] = {"token": secret}
    reg = tmp / "registry.db"
    write_registry(str(reg), rows, {"pub": {"sys": SYSTEM}}, users)
    # each user's cached catalogue of the per-user server holds a tool only that user has (until rediscovered)
    import sqlite3

    db = sqlite3.connect(str(reg))
    whoami = {k: v for k, v in ENV_TOOL.items() if not k.startswith("x-mock")}
    for user in USERS:
        only = {"name": f"only_{user}", "inputSchema": {"type": "object"}}
        row = (user, json.dumps([whoami, only]))
        db.execute("INSERT INTO mcp_tools_cache (server_name, user_id, tools, fetched_at) VALUES ('box', ?, ?, 0)", row)
    db.commit()
    db.close()
    yield from resident_serving(reg, srv, "--max-user-processes", "2")


def test_cached_catalogues_are_per_user(world):
    """Each user sees the catalogue cached for their own instance (mcp_tools_cache), never another user's."""
    res, _ = world
    for user in USERS:
        names = {t["name"] for t in res.ok("list_tools", user)["tools"]}
        assert f"mcp_box_only_{user}" in names
        assert not any(f"only_{other}" in n for n in names for other in USERS if other != user)


fields = st.one_of(
    st.none(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
actions = st.sampled_from(
    [
        "init",
        "list_servers",
        "connect_server",
        "disconnect_server",
        "list_tools",
        "refresh_tools",
        "call_tool",
        "shutdown",
        "bogus",
        "",
    ]
)


@st.composite
def bad_lines(draw):
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(st.binary(max_size=200)).replace(b"\n", b" ")
    good = {
        "command": "invoke",
        "task_id": "fz",
        "params": {"action": draw(actions), "server_name": "pub", "tool_name": "echo", "arguments": {"text": "x"}},
        "user": {"userId": "u-fuzz"},
    }
    if kind == 1:
        text = json.dumps(good)
        return text[: draw(st.integers(0, len(text) - 1))].encode()
    # a wrong type in one field (or an unknown action)
    path = draw(
        st.sampled_from(
            [
                ("command",),
                ("task_id",),
                ("params",),
                ("user",),
                ("params", "action"),
                ("params", "server_name"),
                ("params", "tool_name"),
                ("params", "name"),
                ("params", "arguments"),
                ("params", "timeout_ms"),
                ("user", "userId"),
                ("user", "accessToken"),
            ]
        )
    )
    value = draw(fields)
    target = good
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    if good["params"].get("action") == "shutdown" if isinstance(good.get("params"), dict) else False:
        good["params"]["action"] = "bogus"
    return json.dumps(good).encode()


_COUNTER = [0]


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(line=bad_lines())
def test_malformed_input_gets_one_answer_each_and_never_kills_the_process(world, line):
    res, _ = world
    _COUNTER[0] += 1
    task = f"fz-{_COUNTER[0]}"
    line = line.replace(b'"fz"', json.dumps(task).encode())
    try:
        document = bkmcp.parse_json(line)  # the resident's own parser decides what is JSON
    except ValueError:
        document = None
    readable = isinstance(document, dict) and isinstance(document.get("task_id"), str) and document["task_id"]
    expected = document["task_id"] if readable else None
    res.send_raw(line + b"\n")
    answer = res.wait(expected, timeout=20)  # exactly one answer per line (an accidental valid command is answered too)
    if answer["success"] is False:
        assert answer["error_code"] in (
            "invalid_command",
            "unknown_action",
            "mcp_server_not_found",
            "mcp_tool_not_found",
            "invalid_mcp_arguments",
            "mcp_credentials_missing",
            "mcp_server_disabled",
            "mcp_timeout",
        ), answer  # timeout_ms may be 1
    assert res.proc.poll() is None


def test_every_fuzzed_line_was_answered_once(world):
    res, _ = world
    assert res.ok("list_servers")["servers"]
    assert len(res.answers) == len(res.raw_stdout)


user_commands = st.tuples(
    st.sampled_from(sorted(USERS)),
    st.sampled_from(
        ["list_servers", "list_tools", "call_box", "call_crm", "call_pub", "connect", "disconnect", "refresh"]
    ),
)


@settings(max_examples=max(20, FUZZ_EXAMPLES // 20), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(user_commands, min_size=3, max_size=12))
def test_isolation_between_users(world, script):
    res, srv = world
    sent: dict[str, str] = {}
    for user, what in script:
        params = {
            "list_servers": ("list_servers", {}),
            "list_tools": ("list_tools", {}),
            "refresh": ("refresh_tools", {"server_name": "box"}),
            "call_box": ("call_tool", {"name": "mcp_box_whoami", "arguments": {}}),
            "call_crm": ("call_tool", {"server_name": "crm", "tool_name": "echo", "arguments": {"text": user}}),
            "call_pub": ("call_tool", {"server_name": "pub", "tool_name": "echo", "arguments": {"text": user}}),
            "connect": ("connect_server", {"server_name": "box"}),
            "disconnect": ("disconnect_server", {"server_name": "box"}),
        }[what]
        sent[res.send(params[0], user, **params[1])] = user
    answers = {task: res.wait(task) for task in sent}
    pids = {}
    for event in res.events("process.started"):
        if event.get("user"):
            pids.setdefault(event["user"], set()).add(event["pid"])
    for task, answer in answers.items():
        user = sent[task]
        text = json.dumps(answer)
        for other, secret in USERS.items():
            if other != user:
                assert secret not in text, (user, other, answer)
                assert f"only_{other}" not in text, (user, other, answer)
                for pid in pids.get(other, ()):
                    assert f'"pid": {pid}' not in text
        own = USERS[user]
        if own in text:  # only the whoami tool's own result may carry it (data, as received)
            assert answer["result"]["tool_name"] == "whoami"
            assert answer["result"]["result"]["structuredContent"]["env"]["MY_TOKEN"] == own
        assert SYSTEM not in text
    for line in res.events():
        blob = json.dumps(line)
        assert all(secret not in blob for secret in (*USERS.values(), SYSTEM))
    logs = "".join(res.stderr_lines)
    assert all(secret not in logs for secret in (*USERS.values(), SYSTEM))
    # what the servers received: each user's crm call carried that user's own token only
    for entry in srv.requests("tools/call"):
        body = json.loads(entry["body"])
        caller = body["params"]["arguments"].get("text")
        token = entry["headers"].get("x-tenant-token")
        if caller in USERS and token is not None:
            assert token == USERS[caller] + "-crm"
        if token is None:
            assert entry["headers"].get("x-system") == SYSTEM


def test_box_results_reach_their_own_user(world):
    res, _ = world
    for user, secret in USERS.items():
        result = res.ok("call_tool", user, name="mcp_box_whoami", arguments={})
        assert result["result"]["structuredContent"]["env"]["MY_TOKEN"] == secret
    assert Path(res.events_path).exists()
