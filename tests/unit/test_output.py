"""Section 9 envelopes and the call flow of section 11 (contract.md §7): right stream, right exit status, data kept."""

from __future__ import annotations

import pytest

import bkmcp
from tests.helpers import fake_engine, run_bkmcp

TOOL = {"name": "search", "description": "d", "inputSchema": {"type": "object"}}


@pytest.fixture
def config(write_config):
    return write_config(
        {
            "mcpServers": {
                "a": {
                    "type": "http",
                    "url": "https://mcp.example.com/mcp",
                    "headers": {"Authorization": "Bearer ${TOK}"},
                }
            }
        }
    )


ENV = {"TOK": "tok-secret-98765"}


class FakeClient:
    """Stands in for the engine (section 7): records what the CLI asks of it."""

    calls: list = []
    result: dict = {"content": [{"type": "text", "text": "ok"}], "isError": False}
    fail_on: str | None = None
    excluded: list = []  # modern-era tools dropped for an invalid x-mcp-header (none here)

    def __init__(self, server, *, deadline, insecure, log):
        self.server = server
        FakeClient.calls.append(("init", server.name, insecure, deadline.seconds))

    def __enter__(self):
        return self

    def close(self, deadline=None):
        FakeClient.calls.append(("close",))

    def connect(self):
        FakeClient.calls.append(("connect",))

    def list_tools(self):
        FakeClient.calls.append(("list_tools",))
        if FakeClient.fail_on == "list_tools":
            raise bkmcp.DiscoveryIncompleteError("page 2 failed", data={"pages": 1})
        return [TOOL]

    def call_tool(self, name, arguments):
        FakeClient.calls.append(("call_tool", name, arguments))
        if FakeClient.fail_on == "call_tool":
            raise bkmcp.McpTimeoutError("no answer", details={"outcome": "unknown"}, data={"server": "a", "tool": name})
        return FakeClient.result


@pytest.fixture
def fake(monkeypatch):
    FakeClient.calls = []
    FakeClient.fail_on = None
    FakeClient.result = {
        "content": [{"type": "text", "text": "ok"}],
        "isError": False,
        "structuredContent": {"n": bkmcp.JsonNumber("1e400")},
    }
    for name, stand_in in fake_engine(FakeClient).items():
        monkeypatch.setattr(bkmcp, name, stand_in)
    return FakeClient


def test_build_success_and_failure():
    assert bkmcp.build_success({"x": 1}) == {"ok": True, "data": {"x": 1}}
    redactor = bkmcp.Redactor()
    redactor.add("sekret")
    err = bkmcp.ToolError("tool said sekret", hint="h sekret", data={"result": {"text": "sekret"}})
    env = bkmcp.build_failure(err, redactor)
    assert env == {
        "ok": False,
        "error": {"code": "mcp_tool_error", "message": "tool said ***", "hint": "h ***"},
        "data": {"result": {"text": "sekret"}},
    }  # raw results are data, kept as received
    assert "data" not in bkmcp.build_failure(bkmcp.UsageError("u"))


def test_call_success_is_one_envelope_on_stdout(config, fake, no_network):
    res = run_bkmcp(
        "--config", str(config), "a", "search", "--body", '{"q": 1E+2}', "--timeout", "2m", "--insecure", env=ENV
    )
    assert res.exit_status == 0 and res.stderr == ""
    assert res.stdout == (
        '{"ok":true,"data":{"server":"a","tool":"search","result":{"content":[{"type":"text",'
        '"text":"ok"}],"isError":false,"structuredContent":{"n":1e400}}}}\n'
    )
    assert fake.calls == [
        ("init", "a", True, 120.0),
        ("connect",),
        ("list_tools",),
        ("call_tool", "search", {"q": bkmcp.JsonNumber("1E+2")}),
        ("close",),
    ]


def test_is_error_is_mcp_tool_error_exit_2_with_the_raw_result(config, fake, no_network):
    fake.result = {"content": [{"type": "text", "text": "tok-secret-98765 bad"}], "isError": True}
    res = run_bkmcp("--config", str(config), "a", "search", "--body", "{}", env=ENV)
    assert res.exit_status == 2 and res.stderr == ""
    env = bkmcp.parse_json(res.stdout)
    assert env["ok"] is False and env["error"]["code"] == "mcp_tool_error"
    assert env["data"] == {"server": "a", "tool": "search", "result": fake.result}
    assert [c[0] for c in fake.calls].count("call_tool") == 1


def test_remote_failure_keeps_data_on_stdout(config, fake, no_network):
    fake.fail_on = "call_tool"
    res = run_bkmcp("--config", str(config), "a", "search", "--body", "{}", env=ENV)
    env = bkmcp.parse_json(res.stdout)
    assert res.exit_status == 2 and res.stderr == ""
    assert env["error"]["code"] == "mcp_timeout" and env["error"]["outcome"] == "unknown"
    assert env["data"] == {"server": "a", "tool": "search"}
    assert [c[0] for c in fake.calls].count("call_tool") == 1  # never resent


def test_discovery_failure_never_calls(config, fake, no_network):
    fake.fail_on = "list_tools"
    res = run_bkmcp("--config", str(config), "a", "search", "--body", "{}", env=ENV)
    assert res.exit_status == 2 and bkmcp.parse_json(res.stdout)["data"] == {"pages": 1}
    assert "call_tool" not in [c[0] for c in fake.calls]


def test_tool_not_found_is_local_exit_1(config, fake, no_network):
    res = run_bkmcp("--config", str(config), "a", "serch", "--body", "{}", env=ENV)
    assert res.exit_status == 1 and res.stdout == "" and res.error_code == "mcp_tool_not_found"
    assert res.json["error"]["suggestions"] == ["search"]
    assert "call_tool" not in [c[0] for c in fake.calls]


def test_tool_help_discovers_but_never_calls(config, fake, no_network):
    res = run_bkmcp("--config", str(config), "a", "search", "--help", "--body", "-", env=ENV)
    assert res.exit_status == 0 and res.stdout.startswith("bkmcp a search")
    assert "call_tool" not in [c[0] for c in fake.calls] and ("list_tools",) in fake.calls


def test_body_errors_happen_before_any_connection(config, fake, no_network):
    res = run_bkmcp("--config", str(config), "a", "search", "--body", "[1]", env=ENV)
    assert res.error_code == "invalid_mcp_arguments" and fake.calls == []


@pytest.mark.parametrize("mode", ["--check", "--tools"])
def test_check_and_tools_success_and_failure_streams(mode, config, monkeypatch, no_network):
    name = "run_check" if mode == "--check" else "run_tools"
    seen = {}

    def ok(server, ctx, *, insecure):
        seen.update(server=server.name, timeout=ctx.deadline.seconds, headers=server.headers)
        data = {"server": server.name, "tool_count": 0, "complete": True}
        return dict(data, tools=[]) if mode == "--tools" else data

    monkeypatch.setattr(bkmcp, name, ok)
    res = run_bkmcp("--config", str(config), "a", mode, env=ENV)
    assert res.exit_status == 0 and res.stderr == ""
    extra = {"tools": [], "cli": {}} if mode == "--tools" else {}  # --tools adds the per-tool flag summary
    assert res.json == {"ok": True, "data": {"server": "a", "tool_count": 0, "complete": True, **extra}}
    assert seen == {"server": "a", "timeout": 60.0, "headers": {"Authorization": "Bearer tok-secret-98765"}}

    def refused(*a, **k):
        raise bkmcp.AuthRequiredError(
            "401 from server; token tok-secret-98765 rejected",
            data={"checks": {"config": "passed", "connection": "failed"}},
        )

    monkeypatch.setattr(bkmcp, name, refused)
    res = run_bkmcp("--config", str(config), "a", mode, env=ENV)
    assert res.exit_status == 2 and res.stderr == ""
    env = bkmcp.parse_json(res.stdout)
    assert env["error"]["code"] == "mcp_auth_required" and env["data"]["checks"]["connection"] == "failed"
    assert "tok-secret-98765" not in res.stdout


def test_local_failure_prints_nothing_on_stdout(config, no_network):
    res = run_bkmcp("--config", str(config), "a", "search", "--body", "{}", "--dry-run")
    assert res.exit_status == 1 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and res.error_code == "missing_environment_variable"


def test_render_raw_text_escapes_what_a_terminal_acts_on_and_only_for_a_terminal():
    """docs/contract.md §7 (issue 36 item 6): every C0 control but newline, tab and a CRLF's carriage return, DEL
    and every C1 control become their JSON escapes for a terminal; printable text (a backslash, quotes, U+00A0
    and beyond) stays; piped, only a lone surrogate changes. JSON text stays the same JSON value."""
    controls = "".join(chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)])
    shown = bkmcp.render_raw_text(controls + '\r\n\\ "q" \xa0é\ud800', terminal=True)
    assert shown.isprintable() is False and set(shown) & set(controls) == {"\t", "\n", "\r"}
    assert shown.endswith('\r\n\\ "q" \xa0é\ufffd') and "\\u001b" in shown and "\\u009b" in shown
    assert "\\u007f" in shown and "\\r\\u000e" in shown and "\\t" not in shown
    assert bkmcp.render_raw_text(controls + "\ud800") == controls + "\ufffd"
    value = {"t": "a\x1b]52;c;x\x07\x9b\x7f\r\n\u0085"}
    text = bkmcp.dump_json(value, indent=2)
    assert bkmcp.parse_json(bkmcp.render_raw_text(text, terminal=True)) == value
