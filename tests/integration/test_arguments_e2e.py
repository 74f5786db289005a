"""Schema-driven arguments end to end (seed §6): bkmcp ``main`` -> engine -> real HTTP -> the MCP mock.

Each test asserts the exact JSON the server received in ``tools/call`` (byte-level for the number-fidelity
cases) and, when local validation fails, that NO ``tools/call`` was received. Seed rows P01–P06, D02.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import bkmcp
from mock_server.mcp_mock import mock_tool
from tests.helpers import run_bkmcp, write_mcp_json

pytestmark = [pytest.mark.integration]

ERAS = ["2025-11-25", "2026-07-28"]  # one legacy, one modern: the arguments path is era-independent
BIG_INT = "1234567890123456789012345678901234567890"

TYPED = mock_tool(
    "search_reports",
    "echo",
    properties={
        "keyword": {"type": "string", "description": "keyword"},
        "limit": {"type": "integer", "minimum": 0, "default": 20},
        "ratio": {"type": "number"},
        "enabled": {"type": "boolean"},
        "ids": {"type": "array", "items": {"type": "integer"}},
        "filter": {"type": "object"},
        "status": {"type": "string", "enum": ["open", "closed"]},
        "code": {"type": "string"},
        "body": {"type": "string"},
        "timeout": {"type": "integer"},
    },
    required=["keyword"],
)

PYDANTIC_TOOL = {
    "name": "greet",
    "description": "pydantic-style schema (Optional -> anyOf null, $defs, titles, defaults)",
    "x-mock": "echo",
    "inputSchema": {
        "type": "object",
        "title": "greetArguments",
        "properties": {
            "name": {"type": "string", "title": "Name"},
            "title": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Title"},
            "point": {"$ref": "#/$defs/Point"},
        },
        "required": ["name"],
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
    },
}

REMOTE_REF_TOOL = {
    "name": "remote",
    "x-mock": "echo",
    "inputSchema": {
        "type": "object",
        "required": ["n"],
        "properties": {"n": {"type": "integer"}, "doc": {"$ref": "https://example.invalid/doc.json"}},
    },
}

ZOD_TOOL = {
    "name": "fetch",
    "x-mock": "echo",
    "inputSchema": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "additionalProperties": False,
        "properties": {"url": {"type": "string"}, "max_length": {"type": "number", "exclusiveMinimum": 0}},
        "required": ["url"],
    },
}

SCENARIO = {"tools": [TYPED, PYDANTIC_TOOL, REMOTE_REF_TOOL, ZOD_TOOL]}


def sent_arguments(target: Any) -> str:
    """The raw text of ``params.arguments`` in the single tools/call the server received."""
    calls = target.srv.requests("tools/call")
    assert len(calls) == 1, target.methods()
    body = calls[0]["body"]
    message = bkmcp.parse_json(body)
    text = bkmcp.dump_json(message["params"]["arguments"])
    assert '"arguments":' + text in body.replace('"arguments": ', '"arguments":')
    return text


def assert_no_call(target: Any, result: Any, code: str = "invalid_mcp_arguments") -> dict[str, Any]:
    assert result.exit_status == 1, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.error_code == code, result.stderr
    assert target.count("tools/call") == 0, target.methods()
    return result.json["error"]


@pytest.mark.parametrize("version", ERAS)
def test_p01_every_type_reaches_the_server(mock, version) -> None:
    """P01: string/int/number/bool/array/object flags; Chinese, "", false and 0 are real values."""
    target = mock(SCENARIO, protocol_version=version)
    result = target.run(
        target.name,
        "search_reports",
        "--keyword",
        "网关错误",
        "--limit=0",
        "--ratio",
        "0.5",
        "--enabled=false",
        "--ids",
        "[1,2,3]",
        "--filter",
        '{"status":"running"}',
        "--code=",
    )
    assert result.exit_status == 0, result.stderr
    assert sent_arguments(target) == (
        '{"keyword":"网关错误","limit":0,"ratio":0.5,"enabled":false,"ids":[1,2,3],'
        '"filter":{"status":"running"},"code":""}'
    )
    assert result.json["data"]["result"]["structuredContent"]["arguments"]["limit"] == 0


@pytest.mark.parametrize("version", ERAS)
def test_p01_absent_flags_are_not_sent(mock, version) -> None:
    """P01: only given flags are sent; the schema default (limit 20) is never injected."""
    target = mock(SCENARIO, protocol_version=version)
    result = target.run(target.name, "search_reports", "--keyword", "x")
    assert result.exit_status == 0, result.stderr
    assert sent_arguments(target) == '{"keyword":"x"}'


@pytest.mark.parametrize("version", ERAS)
def test_p02_number_fidelity_on_the_wire_and_back(mock, version) -> None:
    """P02: 1e400, 0.1, 12345678901234567890.5, a 40-digit integer and "00123" reach the wire unchanged and come
    back unchanged in the output and through --jq."""
    target = mock(SCENARIO, protocol_version=version)
    args = (
        "search_reports",
        "--keyword",
        "k",
        "--ratio",
        "1e400",
        "--ids",
        f"[{BIG_INT}]",
        "--limit",
        BIG_INT,
        "--filter",
        '{"a":0.1,"b":12345678901234567890.5}',
        "--code",
        "00123",
    )
    result = target.run(target.name, *args)
    assert result.exit_status == 0, result.stderr
    wire = sent_arguments(target)
    assert wire == (
        '{"keyword":"k","ratio":1e400,"ids":['
        + BIG_INT
        + '],"limit":'
        + BIG_INT
        + ',"filter":{"a":0.1,"b":12345678901234567890.5},"code":"00123"}'
    )
    out = result.stdout
    for text in ("1e400", "0.1", "12345678901234567890.5", BIG_INT, '"00123"'):
        assert text in out
    target.srv.reset_log()
    projected = target.run(
        target.name, *args, "--jq", ".data.result.structuredContent.arguments | .ratio, .filter.b, .limit, .code"
    )
    assert projected.exit_status == 0, projected.stderr
    assert projected.stdout.splitlines() == ["1e400", "12345678901234567890.5", BIG_INT, '"00123"']


@pytest.mark.parametrize(
    ("argv", "word"),
    [
        (["--limit", "5"], "$.keyword"),  # required missing
        (["--keyword", "k", "--status", "pending"], "must be one of"),  # enum
        (["--keyword", "k", "--limit", "-1"], "at least 0"),  # full-schema constraint
        (["--keyword", "k", "--limit", "1.5"], "expects an integer"),  # type
        (["--keyword", "k", "--enabled", "true"], "--enabled=true"),  # boolean form
        (["--keyword", "a", "--keyword", "b"], "more than once"),  # repeated
        (["--keywrod", "k"], "did you mean --keyword?"),  # unknown, suggestion
        (["--keyword", "k", "--ids", "1,2"], "never comma-separated"),
        (["--keyword", "k", "--filter", '{"a":1,"a":2}'], "duplicate key"),
        (["--keyword", "k", "--ids", '["x"]'], "$.ids[0]"),  # nested type via the full schema
        (["--keyword"], "needs a value"),
    ],
)
def test_p03_local_failures_send_no_call(mock, argv: list[str], word: str) -> None:
    """P03: required, enum, types, repeated and unknown flags fail before any tools/call."""
    target = mock(SCENARIO, protocol_version="2025-11-25")
    result = target.run(target.name, "search_reports", *argv)
    error = assert_no_call(target, result)
    assert word in json.dumps(error, ensure_ascii=False), error
    assert target.count("tools/list") == 1  # discovery happened, the call did not


def test_p03_unknown_flag_hint_names_tool_help(mock) -> None:
    """P03: the unknown-flag error names the closest property and the tool help command."""
    target = mock(SCENARIO)
    error = assert_no_call(target, target.run(target.name, "search_reports", "--keywrod", "k"))
    assert "did you mean --keyword?" in error["message"]
    assert f"bkmcp {target.name} search_reports --help" in error["hint"]


def test_p03_validation_problems_listed_with_paths(mock) -> None:
    """P03: every problem is listed with its JSON path."""
    target = mock(SCENARIO)
    result = target.run(target.name, "search_reports", "--body", '{"limit": -1, "status": "x", "ids": [1, "2"]}')
    error = assert_no_call(target, result)
    assert [p["path"] for p in error["problems"]] == ["$.ids[1]", "$.keyword", "$.limit", "$.status"]
    assert error["validation"] == "full"


@pytest.mark.parametrize("source", ["inline", "file", "stdin"])
def test_p04_body_sources_same_contract(mock, tmp_path, source: str) -> None:
    """P04: inline, @file and stdin bodies reach the server byte-identical (numbers kept)."""
    target = mock(SCENARIO)
    text = '{"keyword": "k", "ratio": 1e400, "limit": ' + BIG_INT + ', "timeout": 5}'
    stdin = b""
    if source == "inline":
        spec = text
    elif source == "file":
        (tmp_path / "args.json").write_text(text, encoding="utf-8")
        spec = "@" + str(tmp_path / "args.json")
    else:
        spec, stdin = "-", text.encode()
    result = target.run(target.name, "search_reports", "--body", spec, stdin=stdin)
    assert result.exit_status == 0, result.stderr
    assert sent_arguments(target) == '{"keyword":"k","ratio":1e400,"limit":' + BIG_INT + ',"timeout":5}'


@pytest.mark.parametrize("body", ["", "[]", "1", "{", '{"a":1,"a":2}'])
def test_p04_bad_body_sends_no_call(mock, body: str) -> None:
    """P04: empty, array, scalar, invalid JSON and duplicate keys fail before any tools/call."""
    target = mock(SCENARIO)
    assert_no_call(target, target.run(target.name, "search_reports", "--body", body))


@pytest.mark.parametrize("version", ERAS)
def test_p05_body_overrides_flags_not_merged(mock, version) -> None:
    """P05: with --body, named flags are not merged and not sent (and stderr says so)."""
    target = mock(SCENARIO, protocol_version=version)
    result = target.run(
        target.name, "search_reports", "--body", '{"keyword": "from-body"}', "--limit", "7", "--enabled=true"
    )
    assert result.exit_status == 0, result.stderr
    assert sent_arguments(target) == '{"keyword":"from-body"}'
    assert "not sent: --limit, --enabled" in result.stderr


@pytest.mark.parametrize(
    ("argv", "word"),
    [
        (["--limt", "7"], "unknown option --limt"),
        (["--limit"], "needs a value"),
        (["--enabled", "true"], "--enabled=true"),
        (["--point", "{}"], "has no flag"),
    ],
)
def test_p05_body_with_bad_flags_sends_no_call(mock, argv: list[str], word: str) -> None:
    """P05: with --body, unknown or malformed flags are still errors; nothing is called."""
    target = mock(SCENARIO)
    tool = "greet" if "--point" in argv else "search_reports"
    result = target.run(target.name, tool, "--body", '{"keyword": "k", "name": "n"}', *argv)
    error = assert_no_call(target, result)
    assert word in error["message"]


def test_p05_body_does_not_satisfy_required_from_flags(mock) -> None:
    """P05: flags are not used for the required check when --body is given."""
    target = mock(SCENARIO)
    result = target.run(target.name, "search_reports", "--body", "{}", "--keyword", "k")
    error = assert_no_call(target, result)
    assert error["problems"] == [{"path": "$.keyword", "message": "required property is missing"}]


def test_p05_reserved_name_fields_via_body(mock) -> None:
    """P05: fields named like reserved options (body, timeout) are sent under their exact names via --body."""
    target = mock(SCENARIO)
    result = target.run(target.name, "search_reports", "--body", '{"keyword":"k","body":"b","timeout":3}')
    assert result.exit_status == 0, result.stderr
    assert sent_arguments(target) == '{"keyword":"k","body":"b","timeout":3}'


def test_p05_pydantic_schema_flags_and_body(mock) -> None:
    """P05: a pydantic schema: plain flags work, Optional[str] (anyOf string|null) has a string flag (issue 17
    item 7) while its null and the $ref fields go through --body, $defs validated."""
    target = mock(SCENARIO)
    result = target.run(target.name, "greet", "--name", "Ada")
    assert result.exit_status == 0, result.stderr
    assert sent_arguments(target) == '{"name":"Ada"}'
    target.srv.reset_log()
    result = target.run(target.name, "greet", "--body", '{"name":"Ada","title":null,"point":{"x":1}}')
    assert result.exit_status == 0, result.stderr
    assert sent_arguments(target) == '{"name":"Ada","title":null,"point":{"x":1}}'
    target.srv.reset_log()
    error = assert_no_call(target, target.run(target.name, "greet", "--body", '{"name":"Ada","point":{"x":"1"}}'))
    assert error["problems"] == [{"path": "$.point.x", "message": "expected integer, got string"}]
    target.srv.reset_log()
    result = target.run(target.name, "greet", "--name", "Ada", "--title", "null")
    assert result.exit_status == 0, result.stderr
    assert sent_arguments(target) == '{"name":"Ada","title":"null"}'  # the flag's text is a string, never JSON null
    target.srv.reset_log()
    error = assert_no_call(target, target.run(target.name, "greet", "--name", "Ada", "--point", "{}"))
    assert "has no flag" in error["message"] and "--body" in error["message"]


def test_p05_zod_schema(mock) -> None:
    """P05: a zod draft-07 schema (additionalProperties false, exclusiveMinimum) is enforced locally."""
    target = mock(SCENARIO)
    result = target.run(target.name, "fetch", "--url", "https://x", "--max_length", "0.1")
    assert result.exit_status == 0, result.stderr
    assert sent_arguments(target) == '{"url":"https://x","max_length":0.1}'
    target.srv.reset_log()
    error = assert_no_call(target, target.run(target.name, "fetch", "--body", '{"url":"u","extra":1}'))
    assert "unexpected" in error["problems"][0]["message"]


def test_p05_remote_ref_is_not_fetched_and_said_so(mock) -> None:
    """P05: a schema with a remote $ref: basic checks only (said with -v), the call goes to the server."""
    target = mock(SCENARIO)
    result = target.run(target.name, "remote", "--body", '{"n": 1, "doc": {"anything": true}}', "-v")
    assert result.exit_status == 0, result.stderr
    assert sent_arguments(target) == '{"n":1,"doc":{"anything":true}}'
    assert "required fields, types and enum only" in result.stderr and "never fetched" in result.stderr
    target.srv.reset_log()
    error = assert_no_call(target, target.run(target.name, "remote", "--body", '{"n": "1"}'))
    assert error["validation"] == "basic"


def test_p05_complex_tool_is_listed(mock) -> None:
    """P05: tools whose schema cannot produce flags are still listed by --tools."""
    target = mock(SCENARIO)
    result = target.run(target.name, "--tools")
    assert result.exit_status == 0, result.stderr
    assert {t["name"] for t in result.json["data"]["tools"]} == {"search_reports", "greet", "remote", "fetch"}


P06_TEXT = "it's \"q\"\nline2 \\ $(touch /tmp/pwned) `id` ${HOME} 中文 'x'"


@pytest.mark.parametrize("version", ERAS)
def test_p06_shell_sensitive_text_is_data(mock, tmp_path, version) -> None:
    """P06: quotes, newlines, backslashes, $(), backticks and Chinese reach the server as data."""
    target = mock(SCENARIO, protocol_version=version)
    result = target.run(target.name, "search_reports", "--keyword", P06_TEXT, "--filter", json.dumps({"t": P06_TEXT}))
    assert result.exit_status == 0, result.stderr
    assert bkmcp.parse_json(sent_arguments(target)) == {"keyword": P06_TEXT, "filter": {"t": P06_TEXT}}
    target.srv.reset_log()
    (tmp_path / "a.json").write_text(json.dumps({"keyword": P06_TEXT}, ensure_ascii=False), encoding="utf-8")
    result = target.run(target.name, "search_reports", "--body", "@" + str(tmp_path / "a.json"))
    assert result.exit_status == 0, result.stderr
    assert bkmcp.parse_json(sent_arguments(target)) == {"keyword": P06_TEXT}


@pytest.mark.parametrize("version", ERAS)
def test_d02_tool_help_discovers_and_never_calls(mock, version) -> None:
    """D02: tool --help discovers the schema, prints the help and never calls the tool or reads stdin."""
    target = mock(SCENARIO, protocol_version=version)
    result = target.run(target.name, "search_reports", "--help", stdin=b"{not read}")
    assert result.exit_status == 0, result.stderr
    assert target.count("tools/call") == 0 and target.count("tools/list") >= 1
    text = result.stdout
    assert text.startswith(f"bkmcp {target.name} search_reports")
    assert "--keyword STRING" in text and "required" in text and "one of: open, closed" in text
    assert "default: 20 (information only, not sent)" in text
    assert "collides with bkmcp's own option --body" in text and "--timeout" in text
    assert "--body example" in text


def test_d02_unknown_tool_suggests(mock) -> None:
    """D02: an unknown tool after complete discovery is mcp_tool_not_found with close names; no call."""
    target = mock(SCENARIO)
    result = target.run(target.name, "search_report", "--help")
    assert result.exit_status == 1 and result.error_code == "mcp_tool_not_found"
    assert "search_reports" in result.json["error"]["suggestions"]
    assert target.count("tools/call") == 0


# -- against the official MCP Python SDK server (pydantic-generated schemas) ----------------------------------
# The SDK server does not log raw request bodies, so these assert what its tools computed from the arguments
# (Python ints are exact, strings verbatim) and that local validation stops bad input before the call.


@pytest.fixture
def sdk(sdk_server_stateless, tmp_path):
    """Run bkmcp against the SDK server (stateless JSON variant) through a temp config."""
    config = write_mcp_json(tmp_path, {"sdk": {"type": "http", "url": sdk_server_stateless.url}})

    def run(*args: str, stdin: bytes = b"") -> Any:
        return run_bkmcp("--config", str(config), "sdk", *args, stdin=stdin)

    return run


def structured(result: Any) -> Any:
    assert result.exit_status == 0, (result.stdout, result.stderr)
    return result.json["data"]["result"]["structuredContent"]["result"]


@pytest.mark.interop
def test_p02_sdk_big_integers_exact(sdk) -> None:
    """P02 (SDK): a 40-digit integer flag reaches the pydantic server exactly (its sum is exact)."""
    assert structured(sdk("add", "--a", BIG_INT, "--b", "1")) == int(BIG_INT) + 1


@pytest.mark.interop
def test_p01_sdk_string_int_bool_flags(sdk) -> None:
    """P01/P02 (SDK): "00123" stays a string, integer and boolean flags typed; defaults not sent."""
    assert structured(sdk("echo", "--text", "00123", "--times", "2", "--upper=true")) == "00123 00123"
    assert structured(sdk("echo", "--text", "网关 $(x)")) == "网关 $(x)"


@pytest.mark.interop
def test_p05_sdk_optional_any_of_via_body(sdk) -> None:
    """P05 (SDK): pydantic Optional (anyOf + null) has a flag of its simple type (issue 17 item 7); JSON null
    goes through --body."""
    result = sdk("greet", "--name", "Ada")
    assert result.exit_status == 0, result.stderr
    assert result.json["data"]["result"]["content"][0]["text"] == "Hello, Ada!"
    result = sdk("greet", "--body", '{"name": "Ada", "title": "Dr"}')
    assert result.json["data"]["result"]["content"][0]["text"] == "Hello, Dr Ada!"
    result = sdk("greet", "--name", "Ada", "--title", "Dr")
    assert result.exit_status == 0, result.stderr
    assert result.json["data"]["result"]["content"][0]["text"] == "Hello, Dr Ada!"
    result = sdk("greet", "--body", '{"name": "Ada", "title": null}')
    assert result.json["data"]["result"]["content"][0]["text"] == "Hello, Ada!"


@pytest.mark.interop
def test_p05_sdk_nested_model_validated_locally(sdk) -> None:
    """P05 (SDK): $defs/$ref models are validated locally with JSON paths before the call."""
    body = '{"values": [1, 2, 3], "shape": {"name": "tri", "points": [{"x": 1}, {"x": 2, "y": 3}]}}'
    result = sdk("summarize", "--body", body)
    assert result.exit_status == 0, result.stderr
    assert result.json["data"]["result"]["structuredContent"]["count"] == 3
    bad = sdk("summarize", "--body", '{"values": [1, "2"], "shape": {"name": "t", "points": [{"y": 1}]}}')
    assert bad.exit_status == 1 and bad.error_code == "invalid_mcp_arguments"
    assert [p["path"] for p in bad.json["error"]["problems"]] == ["$.shape.points[0].x", "$.values[1]"]


@pytest.mark.interop
@pytest.mark.parametrize(
    ("args", "path"),
    [
        (["choose", "--mode", "c"], "$.mode"),
        (["ns.tool-name_v2", "--value="], "$.value"),
        (["ns.tool-name_v2", "--value", "x", "--count", "6"], "$.count"),
        (["add", "--a", "1"], "$.b"),
    ],
)
def test_p03_sdk_constraints_checked_before_call(sdk, args: list[str], path: str) -> None:
    """P03 (SDK): Literal/enum, min_length, le and required from pydantic are enforced locally."""
    result = sdk(*args)
    assert result.exit_status == 1 and result.error_code == "invalid_mcp_arguments", result.stderr
    assert [p["path"] for p in result.json["error"]["problems"]] == [path]


@pytest.mark.interop
def test_d02_sdk_tool_help(sdk) -> None:
    """D02 (SDK): help for a pydantic tool lists flags, the $ref/anyOf fields under --body, a valid example."""
    result = sdk("summarize", "--help")
    assert result.exit_status == 0, result.stderr
    text = result.stdout
    assert "--values JSON-ARRAY" in text and "required" in text
    section = text.split("Fields without a flag")[1]
    assert "shape" in section and "weights" in section
    assert all(len(line) <= 80 for line in text.splitlines())


# -- over stdio (mock_server/mcp_mock.py --stdio, JSON-lines request log) ---------------------------------------


@pytest.fixture
def stdio_target(tmp_path):
    """A config whose server ``s`` runs the mock on stdio; returns (run, received tools/call bodies)."""
    import sys
    from pathlib import Path

    mock_script = str(Path(__file__).resolve().parents[2] / "mock_server" / "mcp_mock.py")

    def make(version: str | None = None) -> tuple[Any, Any]:
        scenario, log = tmp_path / "scenario.json", tmp_path / "log.jsonl"
        scenario.write_text(json.dumps(SCENARIO), encoding="utf-8")
        entry: dict[str, Any] = {
            "type": "stdio",
            "command": sys.executable,
            "args": [mock_script, "--stdio", "--scenario", str(scenario), "--log", str(log)],
        }
        if version:
            entry["protocolVersion"] = version
        config = write_mcp_json(tmp_path, {"s": entry})

        def run(*args: str) -> Any:
            return run_bkmcp("--config", str(config), "--timeout", "20s", "s", *args)

        def calls() -> list[str]:
            if not log.exists():
                return []
            entries = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line]
            return [e["body"] for e in entries if e.get("rpc_method") == "tools/call"]

        return run, calls

    return make


@pytest.mark.parametrize("version", ["2025-06-18", "2026-07-28"])
def test_p02_stdio_number_fidelity(stdio_target, version: str) -> None:
    """P02 over stdio: the exact number text reaches the server's stdin."""
    run, calls = stdio_target(version)
    result = run(
        "search_reports",
        "--keyword",
        "00123",
        "--ratio",
        "1e400",
        "--limit",
        BIG_INT,
        "--filter",
        '{"a":0.1,"b":12345678901234567890.5}',
    )
    assert result.exit_status == 0, result.stderr
    [body] = calls()
    expected = '{"keyword":"00123","ratio":1e400,"limit":' + BIG_INT + ',"filter":{"a":0.1,"b":12345678901234567890.5}}'
    assert bkmcp.dump_json(bkmcp.parse_json(body)["params"]["arguments"]) == expected
    assert '"arguments":' + expected in body.replace('"arguments": ', '"arguments":')


def test_p03_stdio_invalid_arguments_send_no_call(stdio_target) -> None:
    """P03 over stdio: a validation failure sends no tools/call down the pipe."""
    run, calls = stdio_target()
    result = run("search_reports", "--keyword", "k", "--status", "pending")
    assert result.exit_status == 1 and result.error_code == "invalid_mcp_arguments", result.stderr
    assert calls() == []
