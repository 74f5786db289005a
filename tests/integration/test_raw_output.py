"""``--raw`` / ``-r`` (docs/contract.md §7): a successful call's result as plain text, ``--jq`` strings unquoted; a
failure printed exactly as without it. Real HTTP on 127.0.0.1 against the mock; each test checks what the server
received."""

from __future__ import annotations

import pytest

from mock_server.mcp_mock import TINY_PNG, RawNumber, mock_tool

pytestmark = [pytest.mark.integration]


def result_tool(name: str, result: dict, **schema) -> dict:
    return mock_tool(name, "result", result=result, **schema)


def sent(target, key: str) -> list:
    """``params[key]`` of every tools/call the server received, in order."""
    return [entry["json"]["params"][key] for entry in target.srv.requests("tools/call")]


def test_text_blocks_print_as_they_are_each_ending_in_one_newline(mock):
    blocks = ["Commit history:\nCommit: abc", "ends with its own newline\n", "", 'tab\there "quoted" \\ ünï']
    target = mock({"tools": [result_tool("log", {"content": [{"type": "text", "text": t} for t in blocks]})]})
    for option in ("--raw", "-r"):
        result = target.run(target.name, "log", option)
        assert result.exit_status == 0, result.stderr
        assert result.stdout == 'Commit history:\nCommit: abc\nends with its own newline\n\ntab\there "quoted" \\ ünï\n'
        assert result.stderr == ""
    assert sent(target, "name") == ["log", "log"]


def test_other_blocks_are_one_bracketed_line_each_never_their_bytes(mock):
    content = [
        {"type": "image", "data": TINY_PNG, "mimeType": "image/png"},
        {"type": "text", "text": "caption"},
        {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
        {"type": "resource", "resource": {"uri": "file:///notes/a.txt", "mimeType": "text/plain", "text": "héllo"}},
        {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AAECAw=="}},
        {"type": "resource_link", "uri": "file:///c.md", "name": "c", "mimeType": "text/markdown"},
        {"type": "future\nkind"},
    ]
    target = mock({"tools": [result_tool("mixed", {"content": content})]})
    result = target.run(target.name, "mixed", "--raw")
    assert result.exit_status == 0, result.stderr
    assert result.stdout.splitlines() == [
        "[image image/png, 70 bytes]",
        "caption",
        "[audio audio/wav, 3 bytes]",
        "héllo",  # an embedded text resource prints as its text (issue 38 item 1)
        "[resource file:///b.bin, 4 bytes]",
        "[resource_link file:///c.md, text/markdown]",
        "[future\\nkind]",
    ]
    assert TINY_PNG[:20] not in result.stdout
    assert target.count("tools/call") == 1


def test_a_result_with_only_structured_content_prints_it_as_json(mock):
    number = RawNumber("12345678901234567890.5")
    result_obj = {"content": [], "structuredContent": {"sum": number, "items": ["a", 1]}}
    target = mock({"tools": [result_tool("calc", result_obj)]}, protocol_version="2025-06-18")
    result = target.run(target.name, "calc", "--raw")
    assert result.exit_status == 0, result.stderr
    assert result.stdout == '{"sum":12345678901234567890.5,"items":["a",1]}\n'
    assert target.count("tools/call") == 1


def test_text_wins_over_structured_content_and_a_lone_surrogate_becomes_a_replacement_character(mock):
    target = mock(
        {"tools": [result_tool("t", {"content": [{"type": "text", "text": "a\ud800b"}], "structuredContent": {}})]}
    )
    result = target.run(target.name, "t", "--raw")
    assert result.exit_status == 0, result.stderr
    assert result.stdout == "a\ufffdb\n"


@pytest.mark.parametrize(
    "tool",
    [
        mock_tool("fail", "is_error", text="Invalid timezone: Mars/Olympus"),
        mock_tool("boom", "rpc_error", message="bad argument x"),
        mock_tool("bad", "malformed"),
    ],
    ids=["is_error", "rpc_error", "malformed"],
)
def test_a_failure_is_never_turned_into_text(mock, tool):
    target = mock({"tools": [tool]})
    plain = target.run(target.name, tool["name"])
    for option in ("--raw", "-r"):
        raw = target.run(target.name, tool["name"], option, "--jq", ".data")
        assert (raw.exit_status, raw.stdout, raw.stderr) == (plain.exit_status, plain.stdout, plain.stderr)
        assert raw.exit_status == 2 and raw.json["ok"] is False
    assert target.count("tools/call") == 3


def test_with_jq_strings_print_unquoted_and_other_values_as_json(mock):
    target = mock()
    result = target.run(target.name, "echo", "--text", "two\nlines", "--jq", ".data.result.content[0].text", "-r")
    assert result.exit_status == 0, result.stderr
    assert result.stdout == '{"text":"two\\nlines"}\n'
    several = ".data.result.structuredContent.arguments.text, .data.tool, 1"
    result = target.run(target.name, "-r", "echo", "--text", "hi", "--jq", several)
    assert result.stdout == "hi\necho\n1\n"
    listing = target.run(target.name, "--tools", "--jq", ".data.tools[].name", "--raw")
    assert listing.stdout.splitlines() == ["echo", "pick", "noop", "add", "fail"]
    assert sent(target, "arguments") == [
        {"text": "two\nlines"},
        {"text": "hi"},
    ]


@pytest.mark.parametrize("mode", [("--tools",), ("--check",), ("echo", "--body", "{}", "--dry-run")])
def test_raw_without_jq_outside_a_call_is_a_usage_error_before_any_request(mock, mode):
    target = mock()
    result = target.run(target.name, *mode, "--raw")
    assert result.exit_status == 1 and result.error_code == "usage_error"
    assert "--jq" in result.json["error"]["hint"]
    assert target.srv.log == []


def test_a_property_named_raw_or_r_is_reserved_and_sent_only_through_body(mock):
    props = {"raw": {"type": "string"}, "r": {"type": "string"}, "text": {"type": "string"}}
    target = mock({"tools": [mock_tool("t", "echo", properties=props)]})
    result = target.run(target.name, "t", "--text", "x", "--raw")
    assert result.exit_status == 0, result.stderr
    assert result.stdout == '{"text":"x"}\n'
    result = target.run(target.name, "t", "--body", '{"raw": "y", "r": "z"}', "-r")
    assert result.stdout == '{"raw":"y","r":"z"}\n'
    assert sent(target, "arguments") == [
        {"text": "x"},
        {"raw": "y", "r": "z"},
    ]
    described = target.run(target.name, "--tools", "--jq", ".data.cli.t").json
    assert "raw" not in described["flags"] and "r" not in described["flags"], described


def test_help_ignores_raw_and_modes_that_take_nothing_else_refuse_it(tmp_path):
    from tests.helpers import run_bkmcp

    for argv in (
        ("--sessions", "--raw"),
        ("--completion", "bash", "-r"),
        ("--resident", "--registry", str(tmp_path / "r.db"), "--raw"),
        ("--registry", str(tmp_path / "r.db"), "--list", "--raw"),
    ):
        result = run_bkmcp(*argv)
        assert result.exit_status == 1 and result.error_code == "usage_error", argv
        assert "--raw" in result.json["error"]["message"] or "nothing else" in result.json["error"]["message"]
    assert not (tmp_path / "r.db").exists()
    result = run_bkmcp("--help", "--raw")
    assert result.exit_status == 0 and "-r, --raw" in result.stdout


def test_render_raw_result_pretty_json_and_blocks_of_no_known_shape():
    import bkmcp

    assert bkmcp.render_raw_result({"content": [], "structuredContent": {"a": [1]}}, pretty=True) == (
        '{\n  "a": [\n    1\n  ]\n}\n'
    )
    assert bkmcp.render_raw_result({"content": "not a list"}) == ""
    lines = bkmcp.render_raw_result({"content": [7, {"type": 3}, {"type": "resource_link", "uri": "x" * 400}]})
    first, second, third = lines.splitlines()
    assert (first, second) == ("[unknown block]", "[unknown block]")
    assert len(third) == 302 and third.endswith("…]")


# -- mcp_tool_error says why (issue 28 item 2) ----------------------------------------------------------------


def test_a_tool_error_message_ends_with_the_tools_own_first_line(mock):
    text = "\n  Invalid timezone: 'No time zone found with key Mars/Olympus'\nTraceback (most recent call last): ..."
    target = mock({"tools": [mock_tool("get_current_time", "is_error", text=text)]})
    result = target.run(target.name, "get_current_time", "--body", '{"timezone": "Mars/Olympus"}')
    assert result.exit_status == 2 and result.error_code == "mcp_tool_error"
    assert result.json["error"]["message"] == (
        "tool 'get_current_time' failed: Invalid timezone: 'No time zone found with key Mars/Olympus'"
    )
    assert result.json["data"]["result"]["content"] == [{"type": "text", "text": text}]
    assert sent(target, "arguments") == [{"timezone": "Mars/Olympus"}]


def test_a_tool_reason_is_scrubbed_before_it_is_cut_and_made_printable(mock):
    secret = "s3cr3t-token-value-abcdef"
    tools = [
        mock_tool("leaks", "is_error", text="x" * 185 + secret + " tail"),  # cut first, 14 of its characters would stay
        mock_tool("long", "is_error", text="\ty" * 150),
    ]
    target = mock({"tools": tools}, headers={"Authorization": f"Bearer {secret}"})
    message = target.run(target.name, "leaks").json["error"]["message"]
    assert message == "tool 'leaks' failed: " + "x" * 185 + "*** tail"
    message = target.run(target.name, "long").json["error"]["message"]
    assert message == "tool 'long' failed: " + "y" + "\\ty" * 66 + "…"  # stripped, escaped, then 200 characters


@pytest.mark.parametrize(
    "content", [[], [{"type": "image", "data": "AAAA", "mimeType": "image/png"}], [{"type": "text", "text": " \n"}]]
)
def test_a_tool_error_without_text_keeps_the_plain_message(mock, content):
    target = mock({"tools": [result_tool("t", {"content": content, "isError": True})]})
    result = target.run(target.name, "t")
    assert result.exit_status == 2 and result.json["error"]["message"] == "tool 't' reported an error (isError: true)"
    assert target.count("tools/call") == 1
