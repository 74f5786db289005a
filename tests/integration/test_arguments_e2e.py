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
from tests.helpers import object_tool, run_bkmcp, stdio_mock_entry, stdio_mock_log, write_mcp_json

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

PYDANTIC_TOOL = object_tool(
    "greet",
    {
        "name": {"type": "string", "title": "Name"},
        "title": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Title"},
        "point": {"$ref": "#/$defs/Point"},
    },
    ["name"],
    defs={"Point": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
    schema_title="greetArguments",
    description="pydantic-style schema (Optional -> anyOf null, $defs, titles, defaults)",
    **{"x-mock": "echo"},
)

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
    assert f"bkmcp --config {target.config} {target.name} search_reports --help" in error["hint"]


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
        (["--doc", "{}"], "has no flag"),
    ],
)
def test_p05_body_with_bad_flags_sends_no_call(mock, argv: list[str], word: str) -> None:
    """P05: with --body, unknown or malformed flags are still errors; nothing is called."""
    target = mock(SCENARIO)
    tool = "remote" if "--doc" in argv else "search_reports"
    result = target.run(target.name, tool, "--body", '{"keyword": "k", "n": 1}', *argv)
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
    item 7) while its null goes through --body, a $ref model has a JSON-object flag (issue 27), $defs validated."""
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
    assert error["problems"] == [{"path": "$.point.x", "message": "required property is missing", "flag": "--point"}]
    assert "--point at $.point.x: required property is missing" in error["message"]
    result = target.run(target.name, "greet", "--name", "Ada", "--point", '{"x": 1}')
    assert result.exit_status == 0, result.stderr
    assert sent_arguments(target) == '{"name":"Ada","point":{"x":1}}'


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


DEEP_TOOL = {
    "name": "deep",
    "x-mock": "echo",
    "inputSchema": {
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {"b": {"type": "integer"}, "tree": {"$ref": "#/$defs/node"}}}
        },
        "$defs": {"node": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
    },
}


def test_p03_a_wrong_type_beside_a_value_500_levels_deep_is_refused_locally(mock) -> None:
    """P03 (issue 36 item 7): validation reaches as deep as bkmcp parses. A wrong type at depth 2 beside a value
    nested 500 levels deep is refused locally by the full schema, and the server receives no tools/call; the valid
    call is sent once, validated in full (-v). Before, past ~100 levels the validator hit Python's recursion limit,
    fell back to the top-level rules and sent the wrong type."""
    target = mock({"tools": [DEEP_TOOL]})
    tree = "[" * 500 + "]" * 500
    bad = target.run(target.name, "deep", "--body", f'{{"a": {{"b": "2", "tree": {tree}}}}}')
    error = assert_no_call(target, bad)
    assert error["validation"] == "full"
    assert error["problems"] == [{"path": "$.a.b", "message": "expected integer, got string"}]
    good = target.run(target.name, "deep", "--body", f'{{"a": {{"b": 2, "tree": {tree}}}}}', "-v")
    assert good.exit_status == 0, good.stderr
    assert sent_arguments(target) == f'{{"a":{{"b":2,"tree":{tree}}}}}'
    assert "arguments validated locally against the full inputSchema" in good.stderr


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


# -- issue 27 item 2: every argument has a flag -------------------------------------------------------------------
# The shapes real servers send: @modelcontextprotocol/server-sequential-thinking's boolean-or-string field, and
# FastMCP / the SDK's MCPServer pydantic parameters ($ref to a model, $ref to an Enum, Optional[Model]).

THINK_TOOL = mock_tool(
    "sequentialthinking",
    "echo",
    properties={
        "thought": {"type": "string"},
        "nextThoughtNeeded": {"type": ["boolean", "string"], "description": "Whether another thought is needed"},
        "thoughtNumber": {"type": "integer", "minimum": 1},
    },
    required=["thought", "nextThoughtNeeded", "thoughtNumber"],
)
SHRIMP_TOOL = object_tool(
    "name_shrimp",
    {
        "tank": {"$ref": "#/$defs/Tank"},
        "color": {"$ref": "#/$defs/Color"},
        "extra": {"anyOf": [{"$ref": "#/$defs/Tank"}, {"type": "null"}], "default": None},
    },
    ["tank"],
    defs={
        "Color": {"enum": ["red", "green"], "title": "Color", "type": "string"},
        "Tank": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
    },
    **{"x-mock": "echo"},
)
UNFOLLOWABLE_TOOL = object_tool(
    "unfollowable",
    {
        "doc": {"$ref": "https://example.invalid/doc.json"},
        "node": {"$ref": "#/$defs/Node"},
        "n": {"type": "integer"},
    },
    ["doc"],
    defs={"Node": {"$ref": "#/$defs/Node"}},
    **{"x-mock": "echo"},
)
SCENARIO_27 = {"tools": [THINK_TOOL, SHRIMP_TOOL, UNFOLLOWABLE_TOOL]}


@pytest.mark.parametrize("version", ERAS)
def test_union_flag_sends_the_json_value_typed(mock, version) -> None:
    """Issue 27 item 2: ``--nextThoughtNeeded true`` sends JSON true, ``'"true"'`` the string; text that is not
    JSON is refused before any tools/call, saying how to write a string."""
    target = mock(SCENARIO_27, protocol_version=version)
    base = ["sequentialthinking", "--thought", "t", "--thoughtNumber", "1"]
    result = target.run(target.name, *base, "--nextThoughtNeeded", "true")
    assert result.exit_status == 0, result.stderr
    assert sent_arguments(target) == '{"thought":"t","thoughtNumber":1,"nextThoughtNeeded":true}'
    target.srv.reset_log()
    result = target.run(target.name, *base, '--nextThoughtNeeded="true"')
    assert result.exit_status == 0, result.stderr
    assert sent_arguments(target) == '{"thought":"t","thoughtNumber":1,"nextThoughtNeeded":"true"}'
    target.srv.reset_log()
    error = assert_no_call(target, target.run(target.name, *base, "--nextThoughtNeeded", "yes"))
    assert "write a JSON value" in error["message"] and "--nextThoughtNeeded '\"text\"'" in error["message"]
    error = assert_no_call(target, target.run(target.name, *base, "--nextThoughtNeeded", "5"))
    assert error["problems"] == [
        {
            "path": "$.nextThoughtNeeded",
            "message": "expected boolean or string, got integer",
            "flag": "--nextThoughtNeeded",
        }
    ]


def test_ref_flags_reach_the_server_and_the_enum_is_checked_first(mock) -> None:
    """Issue 27 item 2: ``--tank '{"name":"x"}'`` for a $ref to a model, an Enum $ref and Optional[Model] by
    flags; a value outside the enum behind the $ref sends no tools/call."""
    target = mock(SCENARIO_27)
    result = target.run(
        target.name, "name_shrimp", "--tank", '{"name":"x"}', "--color", "green", "--extra", '{"name": "y"}'
    )
    assert result.exit_status == 0, result.stderr
    assert sent_arguments(target) == '{"tank":{"name":"x"},"color":"green","extra":{"name":"y"}}'
    target.srv.reset_log()
    error = assert_no_call(target, target.run(target.name, "name_shrimp", "--tank", '{"name":"x"}', "--color", "blue"))
    assert "--color: must be one of" in error["message"]
    error = assert_no_call(target, target.run(target.name, "name_shrimp", "--tank", '{"name":"x"}', "--extra", "[]"))
    assert error["problems"][0]["flag"] == "--extra"


def test_unfollowable_refs_have_no_flag_help_says_why_and_the_missing_field_names_body(mock) -> None:
    """Issue 27 item 2: a remote and a recursive $ref stay --body-only; help says why; calling with flags alone
    names the required one and --body, and sends nothing; --body still works."""
    target = mock(SCENARIO_27)
    result = target.run(target.name, "unfollowable", "--help")
    assert result.exit_status == 0, result.stderr
    help_text = " ".join(result.stdout.split())
    assert "no flag: remote $ref (https://example.invalid/doc.json): not fetched" in help_text
    assert "no flag: recursive $ref (#/$defs/Node leads back to itself before reaching a type)" in help_text
    error = assert_no_call(target, target.run(target.name, "unfollowable", "--n", "1"))
    assert error["message"].startswith("required field 'doc' has no flag (remote $ref")
    assert f"send the arguments with --body: bkmcp --config {target.config} m unfollowable --body" in error["message"]
    result = target.run(target.name, "unfollowable", "--body", '{"doc": {"a": 1}}')
    assert result.exit_status == 0, result.stderr
    assert sent_arguments(target) == '{"doc":{"a":1}}'


def test_union_flags_beside_body_are_named_in_one_warning_and_not_sent(mock) -> None:
    """Issue 27 item 2: tool flags given with --body are neither merged nor sent; one warning names them."""
    target = mock(SCENARIO_27)
    body = '{"thought": "b", "nextThoughtNeeded": false, "thoughtNumber": 2}'
    result = target.run(
        target.name, "sequentialthinking", "--body", body, "--nextThoughtNeeded", "true", "--thought", "flag"
    )
    assert result.exit_status == 0, result.stderr
    assert sent_arguments(target) == '{"thought":"b","nextThoughtNeeded":false,"thoughtNumber":2}'
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert warnings == [
        "bkmcp: warning: --body is the complete arguments object; not sent: --nextThoughtNeeded, --thought"
    ]


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
    """D02 (SDK): help for a pydantic tool lists flags: the $ref model a JSON-object flag, Optional[dict] a
    JSON-value flag (issue 27), nothing left for --body; a valid example."""
    result = sdk("summarize", "--help")
    assert result.exit_status == 0, result.stderr
    text = result.stdout
    assert "--values JSON-ARRAY" in text and "--shape JSON-OBJECT" in text and "--weights JSON" in text
    assert "a JSON value: object or null" in text and "Fields without a flag" not in text
    assert all(len(line) <= 80 for line in text.splitlines())


@pytest.mark.interop
def test_sdk_model_enum_and_optional_dict_by_flags(sdk) -> None:
    """Issue 27 item 2 (SDK): a pydantic model ($ref), an Enum ($ref) and Optional[dict] are called with flags
    alone; what the server computed shows it received them; a value outside the $ref'd enum is refused locally."""
    shape = '{"name": "tri", "points": [{"x": 1}, {"x": 2, "y": 3}], "closed": true}'
    result = sdk("summarize", "--values", "[1, 2, 3]", "--shape", shape, "--weights", '{"a": 0.5}')
    content = result.json["data"]["result"]["structuredContent"] if result.exit_status == 0 else result.stderr
    assert content == {"count": 3, "sum": 6, "shape": "tri", "n_points": 2, "closed": True, "weights": {"a": 0.5}}
    chosen = sdk("choose", "--mode", "a", "--color", "green")
    assert chosen.exit_status == 0, chosen.stderr
    assert chosen.json["data"]["result"]["structuredContent"] == {"mode": "a", "color": "green"}
    bad = sdk("choose", "--mode", "a", "--color", "purple")
    assert bad.exit_status == 1 and bad.error_code == "invalid_mcp_arguments"
    assert bad.json["error"]["problems"][0]["flag"] == "--color"


# -- over stdio (mock_server/mcp_mock.py --stdio, JSON-lines request log) ---------------------------------------


@pytest.fixture
def stdio_target(tmp_path):
    """A config whose server ``s`` runs the mock on stdio; returns (run, received tools/call bodies)."""

    def make(version: str | None = None) -> tuple[Any, Any]:
        entry, log = stdio_mock_entry(tmp_path, SCENARIO, version)
        config = write_mcp_json(tmp_path, {"s": entry})

        def run(*args: str) -> Any:
            return run_bkmcp("--config", str(config), "--timeout", "20s", "s", *args)

        def calls() -> list[str]:
            return [e["body"] for e in stdio_mock_log(log) if e.get("rpc_method") == "tools/call"]

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


def test_a_required_flag_not_given_is_named_like_the_other_flag_errors(mock) -> None:
    """Issue 40 item 2: ``search_reports --limit 1`` without ``--keyword`` is "missing required flag --keyword
    STRING" with the tool-help hint (which carries the given --config), and nothing is called; a required field
    without a flag still says to use --body."""
    target = mock(SCENARIO)
    error = assert_no_call(target, target.run(target.name, "search_reports", "--limit", "1"))
    assert error["message"] == "missing required flag --keyword STRING"
    assert error["hint"] == f"see the tool's flags with: bkmcp --config {target.config} m search_reports --help"
    assert error["problems"] == [
        {"flag": "--keyword", "path": "$.keyword", "message": "missing required flag --keyword STRING"}
    ]
    error = assert_no_call(target, target.run(target.name, "search_reports", "--limit", "x"))
    assert [p["flag"] for p in error["problems"]] == ["--limit", "--keyword"]  # every problem at once
    error = assert_no_call(target, target.run(target.name, "search_reports", "--keyword", "k", "--limit", "x"))
    assert [p["flag"] for p in error["problems"]] == ["--limit"]


def test_tool_help_commands_carry_the_given_config_within_80_columns(mock) -> None:
    """Issue 40 item 3: the tool help's Usage, --body example and Examples lines carry the --config it was run
    with (continued with ' \\' where the path is long); pasted, each reads the same file."""
    import shlex

    target = mock(SCENARIO)
    result = target.run(target.name, "search_reports", "--help")
    assert result.exit_status == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "bkmcp m search_reports"
    # within 80 columns, but for a line that is one word too long to break (the config's path, on its own line)
    wide = [line for line in lines if len(line) > 80 and len(line.strip().removesuffix(" \\").split()) > 1]
    assert wide == []
    examples = "\n".join(lines[lines.index("Examples:") + 1 :]).split("\n\n")[0]
    commands = examples.replace(" \\\n", " ").splitlines()
    assert len(commands) == 3
    for command in commands:
        assert shlex.split(command)[:5] == ["bkmcp", "--config", str(target.config), "m", "search_reports"]
    assert target.count("tools/call") == 0
