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


# -- issue 38 item 7: resources and prompts in the resident mode -----------------------------------------------------


def test_a_resource_reader_is_named_like_a_tool_and_collides_like_one():
    """(server, None) is the server's resource-reading tool: mcp_{server}_read_resource, and with a server tool of
    that name both are suffixed, each with its own hash (the reader's over "resources/read" NUL server)."""
    alone = bkmcp.build_injected_names([("s", "echo"), ("s", None)])
    assert alone == {"mcp_s_echo": ("s", "echo"), "mcp_s_read_resource": ("s", None)}
    both = bkmcp.build_injected_names([("s", "read_resource"), ("s", None), ("t", None)])
    tool_hash = hashlib.sha256(b"s\0read_resource").hexdigest()[:8]
    reader_hash = hashlib.sha256(b"resources/read\0s").hexdigest()[:8]
    assert both == {
        f"mcp_s_read_resource_{tool_hash}": ("s", "read_resource"),
        f"mcp_s_read_resource_{reader_hash}": ("s", None),
        "mcp_t_read_resource": ("t", None),
    }
    assert bkmcp.build_injected_names([("t", None), ("s", "read_resource"), ("s", None)]) == both  # order-free


def test_a_resource_reader_entry_has_the_four_shapes():
    entry = bkmcp.build_resource_reader_entry("mcp_s_read_resource", "s")
    assert (entry["tool_name"], entry["resource_reader"], entry["server_name"]) == (None, True, "s")
    assert entry["inputSchema"]["required"] == ["uri"]
    for family, schema_key in (
        ("function", "parameters"),
        ("function_strict", "parameters"),
        ("anthropic", "input_schema"),
    ):
        assert entry[family]["name"] == "mcp_s_read_resource" and entry[family][schema_key]["required"] == ["uri"]
    assert entry["gemini"]["parameters"]["properties"]["uri"]["type"] == "STRING"


@pytest.mark.parametrize(
    "uri,shown",
    [
        ("mock://search?q=secret&lang=zh", "mock://search"),
        ("https://user:pw@example.com/a/b?token=x#frag", "https://example.com/a/b"),
        ("demo://resource/static/document/a.md#part", "demo://resource/static/document/a.md"),
        ("file:///tmp/x?y", "file:///tmp/x"),
        ("urn:isbn:123?x=1", "urn:isbn:123"),
    ],
)
def test_an_event_names_a_uri_without_its_query_fragment_or_user(uri, shown):
    assert bkmcp.build_event_uri(uri) == shown


def test_resource_contents_give_blobs_as_size_and_hash_unless_asked_and_each_within_the_cap():
    import base64

    data = bytes(range(256)) * 3
    blob = {"uri": "x://b", "mimeType": "application/octet-stream", "blob": base64.b64encode(data).decode()}
    text = {"uri": "x://t", "mimeType": "text/plain", "text": "as given"}
    result = {"contents": [text, blob], "_meta": {"k": 1}}
    summary = bkmcp.build_resource_contents(result, include_blobs=False, cap=1)
    assert summary == {
        "contents": [
            text,
            {
                "uri": "x://b",
                "mimeType": "application/octet-stream",
                "bytes": 768,
                "sha256": hashlib.sha256(data).hexdigest(),
            },
        ],
        "_meta": {"k": 1},
    }
    assert bkmcp.build_resource_contents(result, include_blobs=True, cap=768) == result
    with pytest.raises(bkmcp.BlobTooLargeError) as info:  # the CLI's --out rule: one decoded blob
        bkmcp.build_resource_contents(result, include_blobs=True, cap=767)
    assert info.value.details == {"limit": 767, "bytes": 768}
    two = {"contents": [blob, {**blob, "uri": "x://c"}]}  # 1536 bytes in all, each 768: within a cap of 768
    assert bkmcp.build_resource_contents(two, include_blobs=True, cap=768) == two
    wrapped = {"contents": [{**blob, "blob": "\n".join([blob["blob"][:76], blob["blob"][76:]])}]}
    assert bkmcp.build_resource_contents(wrapped, include_blobs=False, cap=1)["contents"][0]["bytes"] == 768
    with pytest.raises(bkmcp.ProtocolError, match="not base64"):
        bkmcp.build_resource_contents({"contents": [{"uri": "x://b", "blob": "!!"}]}, include_blobs=False, cap=1)


def _command(params: dict) -> bytes:
    import json

    return json.dumps({"task_id": "r", "command": "invoke", "params": params, "user": {"userId": "u"}}).encode()


@pytest.mark.parametrize(
    "params",
    [
        {"action": "read_resource", "server_name": "s"},
        {"action": "read_resource", "uri": "x://a"},
        {"action": "read_resource", "server_name": "s", "uri": 5},
        {"action": "read_resource", "server_name": "s", "uri": "x://a", "include_blobs": 1},
        {"action": "get_prompt", "server_name": "s"},
        {"action": "get_prompt", "name": "p"},
        {"action": "get_prompt", "server_name": "s", "name": "p", "arguments": {"a": 1}},
        {"action": "get_prompt", "server_name": "s", "name": "p", "arguments": "a=1"},
        {"action": "list_resources", "timeout_ms": -1},
        {"action": "list_prompts", "timeout_ms": "5"},
    ],
)
def test_parse_command_checks_the_new_actions_params(params):
    with pytest.raises(bkmcp.InvalidCommandError):
        bkmcp.parse_command(_command(params))


def test_parse_command_takes_the_new_actions():
    read = bkmcp.parse_command(
        _command({"action": "read_resource", "server_name": "s", "uri": "x://a", "timeout_ms": 500})
    )
    assert (read.action, read.deadline.seconds) == ("read_resource", 0.5)
    got = bkmcp.parse_command(
        _command({"action": "get_prompt", "server_name": "s", "name": "p", "arguments": {"a": "1"}})
    )
    assert got.params["arguments"] == {"a": "1"}
    for action in ("list_resources", "list_prompts", "list_skills"):
        assert bkmcp.parse_command(_command({"action": action})).action == action
    skill = bkmcp.parse_command(
        _command({"action": "read_skill", "server_name": "s", "name": "pdf", "timeout_ms": 500})
    )
    assert (skill.action, skill.params["name"], skill.deadline.seconds) == ("read_skill", "pdf", 0.5)
    with pytest.raises(bkmcp.InvalidCommandError):
        bkmcp.parse_command(_command({"action": "read_skill", "server_name": "s"}))


def test_the_resource_options():
    def options(*extra: str) -> bkmcp.ResidentOptions:
        inv = bkmcp.parse_argv(["--resident", "--registry", "r.db", *extra])
        bkmcp.check_invocation(inv)
        return bkmcp.build_resident_options(inv)

    default = options()
    assert (default.inject_resource_tools, default.max_blob_bytes) == (False, 64 * 1024 * 1024)  # the CLI's default
    given = options("--inject-resource-tools", "--max-blob-bytes", "1024")
    assert (given.inject_resource_tools, given.max_blob_bytes) == (True, 1024)
    for bad in ("0", "1k", "-5"):
        with pytest.raises(bkmcp.UsageError):
            options(f"--max-blob-bytes={bad}")
    inv = bkmcp.parse_argv(["srv", "tool", "--inject-resource-tools"])  # without --resident: a tool's flag
    assert inv.tool_tokens[0].name == "inject-resource-tools" and not inv.inject_resource_tools
    assert f"(default {bkmcp.MAX_BLOB_BYTES})" in bkmcp.render_resident_help()
