"""``--raw`` / ``-r`` (docs/contract.md §7): a successful call's result as plain text, ``--jq`` strings unquoted; a
failure printed exactly as without it. Real HTTP on 127.0.0.1 against the mock; each test checks what the server
received."""

from __future__ import annotations

import json

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


# -- a terminal sees escapes, a pipe the exact bytes (issue 36 item 6) ------------------------------------------

HOSTILE = (
    "clip\x1b]52;c;ZXZpbA==\x07 title\x1b]0;pwned\x07 clear\x1b[2J"
    " link\x1b]8;;https://evil.example/\x1b\\here\x1b]8;;\x1b\\ csi\x9b31m del\x7f bel\x07 bs\x08 cr\rx"
    "\ttab\nline two\r\nend"
)
# what a terminal gets: each control as its JSON escape; newline, tab and a CRLF's carriage return stay
HOSTILE_SHOWN = (
    "clip\\u001b]52;c;ZXZpbA==\\u0007 title\\u001b]0;pwned\\u0007 clear\\u001b[2J"
    " link\\u001b]8;;https://evil.example/\\u001b\\here\\u001b]8;;\\u001b\\ csi\\u009b31m del\\u007f bel\\u0007 bs\\b"
    " cr\\rx\ttab\nline two\r\nend"
)
RAW_CONTROLS = (b"\x1b", b"\x07", b"\x08", b"\xc2\x9b", b"\x7f", b"\r" + b"x")  # \x9b is C2 9B in UTF-8


def run_program(config, *args: str, terminal: bool) -> tuple[int, bytes, bytes]:
    """``python bkmcp.py --config CONFIG ARGS`` as a process whose stdout is a real pseudo-terminal (raw mode: the
    line discipline adds no carriage returns) or a pipe; its exit status, stdout and stderr bytes."""
    import os
    import subprocess
    import sys
    import tty
    from pathlib import Path

    argv = [sys.executable, str(Path(__file__).resolve().parents[2] / "bkmcp.py"), "--config", str(config), *args]
    env = {"HOME": os.environ.get("HOME", "/nonexistent"), "PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8"}
    if not terminal:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, env=env, timeout=120)
        return done.returncode, done.stdout, done.stderr
    master, slave = os.openpty()
    try:
        tty.setraw(slave)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE, env=env)
        os.close(slave)
        slave = -1
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer of the pty's other end has closed it
                break
            if not chunk:
                break
            chunks.append(chunk)
        err = proc.stderr.read()
        proc.stderr.close()
        return proc.wait(timeout=120), b"".join(chunks), err
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)


def test_on_a_terminal_controls_in_a_tools_text_show_as_escapes_piped_the_bytes_stay_exact(mock):
    """A tool's text with OSC 52 (clipboard), a title set, a screen clear, an OSC 8 hyperlink, a C1 CSI, DEL,
    BEL, a backspace and a lone carriage return: on a pseudo-terminal none of them reaches it raw (``--raw``,
    ``--jq … -r``, the envelope), newlines and tabs stay; through a pipe ``--raw`` prints the exact bytes."""
    target = mock({"tools": [result_tool("show", {"content": [{"type": "text", "text": HOSTILE}]})]})
    status, out, err = run_program(target.config, target.name, "show", "--raw", terminal=True)
    assert status == 0, err
    assert out.decode("utf-8") == HOSTILE_SHOWN + "\n"
    status, jq_out, err = run_program(
        target.config, target.name, "show", "--jq", ".data.result.content[0].text", "-r", terminal=True
    )
    assert status == 0, err
    assert jq_out.decode("utf-8") == HOSTILE_SHOWN + "\n"
    status, envelope, err = run_program(target.config, target.name, "show", terminal=True)
    assert status == 0, err
    assert json.loads(envelope)["data"]["result"]["content"][0]["text"] == HOSTILE  # the same value, escaped
    for shown in (out, jq_out, envelope):
        assert not [c for c in RAW_CONTROLS if c in shown], shown
        assert b"\ttab\nline two\r\nend" in shown or shown is envelope
    status, piped, err = run_program(target.config, target.name, "show", "--raw", terminal=False)
    assert status == 0, err
    assert piped == (HOSTILE + "\n").encode("utf-8")
    status, piped_jq, err = run_program(
        target.config, target.name, "show", "--jq", ".data.result.content[0].text", "-r", terminal=False
    )
    assert status == 0, err
    assert piped_jq == (HOSTILE + "\n").encode("utf-8")
    assert sent(target, "name") == ["show"] * 5


def test_on_a_terminal_a_failures_envelope_shows_a_c1_control_as_an_escape(mock):
    """A tool error's text (``isError: true``) reaches the terminal in the failure envelope, a C1 CSI and DEL
    escaped as the JSON escapes they are (the value unchanged); piped, JSON's own escaping only."""
    failing = {"isError": True, "content": [{"type": "text", "text": "bad\x9b2J\x7f\x1b[31m"}]}
    target = mock({"tools": [result_tool("oops", failing)]})
    status, out, err = run_program(target.config, target.name, "oops", terminal=True)
    assert status == 2, err
    assert b"\\u009b2J\\u007f\\u001b[31m" in out and not [c for c in RAW_CONTROLS if c in out]
    assert json.loads(out)["data"]["result"]["content"][0]["text"] == "bad\x9b2J\x7f\x1b[31m"
    status, piped, err = run_program(target.config, target.name, "oops", terminal=False)
    assert status == 2 and "bad\x9b2J\x7f\\u001b[31m".encode() in piped
    assert target.count("tools/call") == 2
