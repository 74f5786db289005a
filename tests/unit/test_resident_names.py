"""Injected tool names (contract.md §11.5) and command parsing (contract.md §11.1): pure functions of block 10.2."""

from __future__ import annotations

import hashlib
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bkmcp
from tests.helpers import FUZZ_EXAMPLES

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
servers = st.text(alphabet="abcAB_.-019", min_size=1, max_size=64)
tools = st.text(min_size=1, max_size=90)
pairs = st.lists(st.tuples(servers, tools), max_size=25)


@settings(max_examples=FUZZ_EXAMPLES, deadline=None)
@given(pairs)
def test_names_are_valid_unique_and_map_back(items):
    table = bkmcp.build_injected_names(items)
    assert set(table.values()) == set(items)
    assert all(NAME.match(name) for name in table)


@pytest.mark.fuzz
@settings(max_examples=FUZZ_EXAMPLES, deadline=None)
@given(pairs, st.randoms())
def test_names_do_not_depend_on_order(items, rnd):
    shuffled = list(items)
    rnd.shuffle(shuffled)
    assert bkmcp.build_injected_names(items) == bkmcp.build_injected_names(shuffled)


@pytest.mark.fuzz
@settings(max_examples=FUZZ_EXAMPLES, deadline=None)
@given(pairs)
def test_a_plain_name_is_kept_unless_too_long_or_colliding(items):
    table = bkmcp.build_injected_names(items)
    plain = {}
    for server, tool in set(items):
        base = re.sub(r"[^A-Za-z0-9_-]", "_", f"mcp_{server}_{tool}")
        plain.setdefault(base, []).append((server, tool))
    for base, members in plain.items():
        if len(base) <= 64 and len(members) == 1 and base in table:
            assert table[base] == members[0]
        if len(members) > 1:  # every member of a colliding group carries its suffix
            for server, tool in members:
                digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
                assert table[f"{base[:55]}_{digest}"] == (server, tool)


def test_examples_of_the_rule():
    table = bkmcp.build_injected_names([("a.b", "c"), ("a_b", "c"), ("gitea", "create_issue"), ("s", "x" * 80)])
    assert table["mcp_gitea_create_issue"] == ("gitea", "create_issue")
    digest = hashlib.sha256(b"a.b\0c").hexdigest()[:8]
    assert table[f"mcp_a_b_c_{digest}"] == ("a.b", "c")
    long = next(n for n, p in table.items() if p == ("s", "x" * 80))
    assert long == ("mcp_s_" + "x" * 80)[:55] + "_" + hashlib.sha256(("s\0" + "x" * 80).encode()).hexdigest()[:8]
    assert bkmcp.build_injected_names([]) == {}


def test_a_suffixed_name_that_equals_a_plain_one_suffixes_that_one_too():
    digest = hashlib.sha256(b"a.b\0c").hexdigest()[:8]
    items = [("a.b", "c"), ("a_b", "c"), ("a", f"b_c_{digest}")]
    table = bkmcp.build_injected_names(items)
    assert set(table.values()) == set(items) and len(table) == 3


def test_tool_entry_is_model_ready():
    entry = bkmcp.build_tool_entry(
        "mcp_s_t", "s", {"name": "t", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}
    )
    assert entry["function"] == {"name": "mcp_s_t", "description": "", "parameters": {"type": "object"}}
    assert entry["annotations"] == {"readOnlyHint": True}
    bare = bkmcp.build_tool_entry("mcp_s_u", "s", {"name": "u", "inputSchema": "bad"})
    assert bare["function"]["parameters"] == {"type": "object", "properties": {}}


@pytest.mark.parametrize(
    "line,task_id,code",
    [
        (b"{", None, "invalid_command"),
        (
            b'{"task_id":"a","command":"invoke","params":{"action":"call_tool","name":"x","server_name":"s",'
            b'"tool_name":"t"},"user":{"userId":"u"}}',
            "a",
            "invalid_command",
        ),
        (
            b'{"task_id":"b","command":"invoke","params":{"action":"call_tool","name":"x","timeout_ms":true},'
            b'"user":{"userId":"u"}}',
            "b",
            "invalid_command",
        ),
        (
            b'{"task_id":"c","command":"invoke","params":{"action":"connect_server"},"user":{"userId":"u"}}',
            "c",
            "invalid_command",
        ),
        (
            b'{"task_id":"d","command":"invoke","params":{"action":"list_tools","server_name":""},"user":{"userId":"u"}}',
            "d",
            "invalid_command",
        ),
        (
            b'{"task_id":"e","command":"invoke","params":{"action":"list_tools"},"user":{"userId":"u","accessToken":1}}',
            "e",
            "invalid_command",
        ),
        (b'{"task_id":"f","command":"invoke","params":{"action":"list_tools"},"user":[]}', "f", "invalid_command"),
        (b'{"task_id":"g","command":"invoke","params":{"action":5}}', "g", "invalid_command"),
        (b'{"task_id":"h","command":"invoke","params":{"action":"x"}}', "h", "unknown_action"),
    ],
)
def test_parse_command_errors(line, task_id, code):
    with pytest.raises(bkmcp.BkmcpError) as info:
        bkmcp.parse_command(line)
    assert info.value.code == code and info.value.details["task_id"] == task_id


def test_parse_command_ok():
    command = bkmcp.parse_command(b'{"task_id":"t","command":"invoke","params":{"action":"shutdown"}}')
    assert (command.task_id, command.action, command.user_id) == ("t", "shutdown", None)
    random.seed(1)


@pytest.mark.parametrize(
    "args,code",
    [
        (["--resident"], "usage_error"),
        (["--resident", "--registry", "r.db", "--max-processes", "0"], "usage_error"),
        (["--resident", "--registry", "r.db", "--max-user-processes", "x"], "usage_error"),
        (["--resident", "--registry", "r.db", "--idle-timeout", "soon"], "usage_error"),
        (["--resident", "--registry", "r.db", "--shutdown-grace", "-1s"], "usage_error"),
        (
            [
                "--resident",
                "--registry",
                "",
            ],
            "usage_error",
        ),
        (["--resident", "--registry", "r.db", "--events="], "usage_error"),
        (["srv", "tool", "--events", "x"], None),
    ],
)
def test_resident_options(args, code):
    if code is None:  # without --resident the resident options stay free for tool flags
        inv = bkmcp.parse_argv(args)
        assert inv.events is None and inv.tool_tokens[0].name == "events"
        return
    with pytest.raises(bkmcp.BkmcpError) as info:
        inv = bkmcp.parse_argv(args)
        bkmcp.check_invocation(inv)
        bkmcp.build_resident_options(inv)
    assert info.value.code == code


def test_resident_options_before_or_after():
    inv = bkmcp.parse_argv(
        [
            "--timeout",
            "5s",
            "--resident",
            "--registry",
            "r.db",
            "--idle-timeout",
            "2m",
            "--max-processes",
            "10",
            "--max-user-processes",
            "3",
            "--events",
            "-",
        ]
    )
    bkmcp.check_invocation(inv)
    opts = bkmcp.build_resident_options(inv)
    assert (opts.timeout, opts.idle_timeout, opts.max_processes, opts.max_user_processes, opts.events) == (
        5.0,
        120.0,
        10,
        3,
        "-",
    )


def test_shutdown_grace_option():
    """Issue 28 item 9: --shutdown-grace takes a duration or 0 (none); 5 s when not given."""

    def grace(*extra: str) -> float:
        inv = bkmcp.parse_argv(["--resident", "--registry", "r.db", *extra])
        bkmcp.check_invocation(inv)
        return bkmcp.build_resident_options(inv).shutdown_grace

    assert (grace(), grace("--shutdown-grace", "30s"), grace("--shutdown-grace", "0")) == (5.0, 30.0, 0.0)
