"""Property-based tests for schema flags (P01, P02, P03, P05, P06, D02).

Generated schemas and values: every flag value that passes local validation maps to exactly the intended JSON
value (equal after a JSON round trip and byte-equal as text); random tokens and random schemas never raise
anything but ``BkmcpError``. ``BKMCP_FUZZ_EXAMPLES`` sets the number of examples (default 300).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

import bkmcp
from bkmcp import BkmcpError, dump_json, parse_json, parse_tool_arguments, render_tool_help, validate_arguments
from tests.helpers import FUZZ_EXAMPLES, body_example, fake_engine, object_tool, write_mcp_json

FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- value strategies: (intended JSON value, command-line text) ------------------------------------------

json_int_text = st.one_of(
    st.integers().map(str),
    st.integers(min_value=10**18, max_value=10**60).map(str),
    st.integers(min_value=-(10**60), max_value=-(10**18)).map(str),
)
json_number_text = st.one_of(
    json_int_text,
    st.from_regex(r"\A-?(0|[1-9][0-9]{0,30})(\.[0-9]{1,30})?([eE][+-]?[0-9]{1,4})?\Z"),
    st.sampled_from(["1e400", "0.1", "12345678901234567890.5", "-0.0", "1E-7", "5e-324", "1.7976931348623157e309"]),
)


def json_scalar() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.text(max_size=20),
        json_int_text.map(lambda t: parse_json(t)),
        json_number_text.map(lambda t: parse_json(t)),
    )


json_values = st.recursive(
    json_scalar(),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)

property_names = st.one_of(
    st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_.\-]{0,15}\Z"),
    st.text(min_size=0, max_size=12),
    st.sampled_from(sorted(bkmcp.RESERVED_OPTION_NAMES)),
)


JSON_VALUE_SCHEMAS: list[dict[str, Any]] = [
    {},
    {"description": "anything"},
    {"type": ["boolean", "string", "integer", "number", "array", "object", "null"]},
    {"anyOf": [{"type": t} for t in ("object", "array", "string", "number", "boolean", "null")]},
]


@st.composite
def flag_case(draw: st.DrawFn, kind: str) -> tuple[dict[str, Any], Any, str, bool]:
    """(property schema, intended value, token text, use '=') for one flag of ``kind``; "json" is a JSON-value flag
    (a union or untyped property, issue 27): its text is the value's JSON."""
    schema: dict[str, Any] = {"type": kind}
    if kind == "json":
        schema = draw(st.sampled_from(JSON_VALUE_SCHEMAS))
        value = draw(json_values)
        return schema, value, dump_json(value), draw(st.booleans())
    if kind == "string":
        value = draw(st.text(max_size=40))
        text = value
    elif kind == "integer":
        text = draw(json_int_text)
        value = parse_json(text)
    elif kind == "number":
        text = draw(json_number_text)
        value = parse_json(text)
    elif kind == "boolean":
        value = draw(st.booleans())
        text = "true" if value else "false"
    elif kind == "array":
        value = draw(st.lists(json_values, max_size=4))
        text = dump_json(value)
    else:
        value = draw(st.dictionaries(st.text(max_size=8), json_values, max_size=4))
        text = dump_json(value)
    if kind in ("string", "integer") and draw(st.booleans()):
        pool = [value] + [draw(st.text(max_size=5) if kind == "string" else st.integers()) for _ in range(2)]
        schema["enum"] = pool if draw(st.booleans()) else pool[1:]
    if draw(st.booleans()):
        schema["description"] = draw(st.text(max_size=60))
    use_eq = kind == "boolean" or draw(st.booleans())
    return schema, value, text, use_eq


@st.composite
def tool_with_values(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], list[str], str]:
    """A tool, the intended arguments, the argv typed for them and the exact JSON text that must be sent."""
    names = draw(st.lists(st.from_regex(r"\A[a-z][a-z0-9_\-]{0,10}\Z"), min_size=1, max_size=8, unique=True))
    properties: dict[str, Any] = {}
    intended: dict[str, Any] = {}
    wire: list[str] = []
    argv = ["srv", "tool"]
    for name in names:
        kind = draw(st.sampled_from([*bkmcp.FLAG_TYPES, "json"]))
        schema, value, text, use_eq = draw(flag_case(kind))
        properties[name] = schema
        if name in bkmcp.RESERVED_OPTION_NAMES or not draw(st.integers(0, 3)):
            continue  # reserved names get no flag; some flags are simply not given
        intended[name] = value
        wire.append(dump_json(name) + ":" + (text if kind in ("integer", "number") else dump_json(value)))
        if use_eq or bkmcp._is_bkmcp_option(text):
            argv.append(f"--{name}={text}")
        else:
            argv += [f"--{name}", text]
    required = [n for n in names if draw(st.booleans())]
    tool = {"name": "tool", "inputSchema": {"type": "object", "properties": properties, "required": required}}
    return tool, intended, argv, "{" + ",".join(wire) + "}"


def parse_flags_alone(tool: dict[str, Any], argv: list[str]) -> dict[str, Any]:
    """The arguments ``argv``'s flags give. A required property with a reserved name has no flag, so flags alone
    are refused naming each such field and --body (issue 27); the values are then those the same flags give
    once those fields are not required (what a --body call would carry beside them is not the flags' business)."""
    tokens = bkmcp.parse_argv(argv).tool_tokens
    required = tool["inputSchema"]["required"]
    no_flag = [n for n in required if n in bkmcp.RESERVED_OPTION_NAMES]
    if no_flag:
        try:
            parse_tool_arguments(tool, tokens, server_name="srv")
        except bkmcp.InvalidArgumentsError as exc:
            named = {p["path"] for p in exc.details["problems"] if "has no flag" in p["message"]}
            assert named == {bkmcp.json_path([n]) for n in no_flag}
            assert all("--body" in p["message"] for p in exc.details["problems"] if p["path"] in named)
        else:
            raise AssertionError(f"required fields without a flag were not named: {no_flag}")
        schema = {**tool["inputSchema"], "required": [n for n in required if n not in no_flag]}
        tool = {**tool, "inputSchema": schema}
    try:
        return parse_tool_arguments(tool, tokens, server_name="srv")
    except bkmcp.InvalidArgumentsError as exc:  # a required flag not given is named as such (issue 40 item 2)
        problems = exc.details["problems"]
        if not problems or not all(p["message"].startswith("missing required flag --") for p in problems):
            raise
        left_out = [n for n in tool["inputSchema"]["required"] if bkmcp.json_path([n]) in {p["path"] for p in problems}]
        assert len(left_out) == len(problems)
        schema = {**tool["inputSchema"], "required": [n for n in tool["inputSchema"]["required"] if n not in left_out]}
        arguments = parse_tool_arguments({**tool, "inputSchema": schema}, tokens, server_name="srv")
        assert not any(name in arguments for name in left_out)  # exactly the required fields no flag gave
        return arguments


@pytest.mark.fuzz
@FUZZ
@given(tool_with_values())
def test_p01_p02_flag_values_reach_json_exactly(case: tuple[dict[str, Any], dict[str, Any], list[str], str]) -> None:
    """P01/P02/P06: a flag value that passes local validation becomes exactly the intended JSON value."""
    tool, intended, argv, wire = case
    arguments = parse_flags_alone(tool, argv)
    assert list(arguments) == list(intended)  # only what was given, in order; nothing injected
    assert dump_json(arguments) == wire  # byte-level: numbers exactly as typed
    assert parse_json(dump_json(arguments)) == intended
    for name, value in intended.items():
        sent = arguments[name]
        if isinstance(value, bkmcp.JsonNumber):
            assert sent.text == value.text
        elif not bkmcp.is_json_number(value):  # numbers: the byte-level text check above is the contract
            assert type(sent) is type(value)
    try:
        validate_arguments(tool, arguments)
    except bkmcp.InvalidArgumentsError as exc:
        paths = {p["path"] for p in exc.details["problems"]}
        missing = {bkmcp.json_path([n]) for n in tool["inputSchema"]["required"] if n not in arguments}
        enum_misses = {
            bkmcp.json_path([n])
            for n, v in arguments.items()
            if "enum" in tool["inputSchema"]["properties"][n]
            and not any(bkmcp._json_equal(v, e) for e in tool["inputSchema"]["properties"][n]["enum"])
        }
        assert paths == missing | enum_misses


tokens_strategy = st.lists(
    st.builds(
        lambda name, value, eq: bkmcp.ToolToken(name, value, eq, f"--{name}"),
        st.one_of(property_names, st.sampled_from(["keyword", "limit", "ratio", "enabled", "ids", "filter"])),
        st.one_of(st.none(), st.text(max_size=30), json_number_text, json_values.map(dump_json)),
        st.booleans(),
    ),
    max_size=6,
)

schema_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.text(max_size=10),
        st.sampled_from(
            [
                "string",
                "integer",
                "number",
                "boolean",
                "array",
                "object",
                "null",
                "#/$defs/x",
                "#",
                "https://example.com/s.json",
                "anyOf",
                "$ref",
            ]
        ),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(
                [
                    "type",
                    "properties",
                    "required",
                    "enum",
                    "items",
                    "anyOf",
                    "oneOf",
                    "allOf",
                    "$ref",
                    "$defs",
                    "default",
                    "minimum",
                    "maximum",
                    "multipleOf",
                    "const",
                    "pattern",
                    "additionalProperties",
                    "description",
                    "title",
                    "$schema",
                    "format",
                    "a",
                    "b",
                    "limit",
                ]
            ),
            inner,
            max_size=5,
        ),
    ),
    max_leaves=25,
)


@FUZZ
@given(tokens_strategy, st.sampled_from(["all", "random"]), schema_values)
def test_p03_random_tokens_only_raise_bkmcp_errors(tokens: list[bkmcp.ToolToken], which: str, raw_schema: Any) -> None:
    """P03/P05: arbitrary tokens against a real or a random schema raise nothing but BkmcpError subclasses."""
    from test_schema_flags import ALL_TYPES

    tool = ALL_TYPES if which == "all" else {"name": "t", "inputSchema": raw_schema}
    for call in (
        lambda: parse_tool_arguments(tool, tokens, server_name="s"),
        lambda: bkmcp.check_tool_tokens(tool, tokens, server_name="s"),
    ):
        try:
            result = call()
        except BkmcpError:
            continue
        if isinstance(result, dict):
            try:
                validate_arguments(tool, result)
            except BkmcpError:
                pass


@FUZZ
@given(schema_values, json_values)
def test_d02_random_schemas_never_crash(raw_schema: Any, arguments: Any) -> None:
    """D02/P05: mapping, describe, help and validation survive any JSON-shaped inputSchema."""
    tool = {"name": "t", "inputSchema": raw_schema, "annotations": raw_schema, "description": "d"}
    bkmcp.build_tool_flags(tool)
    bkmcp.describe_cli(tool)
    text = render_tool_help("srv", tool)
    assert text.endswith("\n")
    wrapped = {"name": "t", "inputSchema": {"type": "object", "properties": raw_schema, "$defs": raw_schema}}
    bkmcp.build_tool_flags(wrapped)
    render_tool_help("srv", wrapped)
    for candidate in (tool, wrapped):
        try:
            check = validate_arguments(candidate, arguments if isinstance(arguments, dict) else {"a": arguments})
            assert check.scope in ("full", "basic")
        except BkmcpError:
            pass


class _FakeClient:
    """Stands in for the engine's session: a fixed catalogue, and records the one tools/call."""

    calls: list[tuple[str, Any]] = []
    excluded: list[dict[str, Any]] = []  # modern-era tools dropped for an invalid x-mcp-header (none here)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def connect(self) -> None:
        pass

    def close(self, deadline: Any = None) -> None:
        pass

    def list_tools(self) -> list[dict[str, Any]]:
        from test_schema_flags import ALL_TYPES, PYDANTIC, ZOD

        return [ALL_TYPES, PYDANTIC, ZOD]

    def call_tool(self, name: str, arguments: Any) -> dict[str, Any]:
        type(self).calls.append((name, arguments))
        return {"content": [], "isError": False}


_CONFIG_DIR: list[str] = []


def _config_path() -> str:
    if not _CONFIG_DIR:
        import tempfile

        directory = tempfile.mkdtemp(prefix="bkmcp-fuzz-")
        _CONFIG_DIR.append(str(write_mcp_json(directory, {"srv": {"type": "http", "url": "http://127.0.0.1:9/mcp"}})))
    return _CONFIG_DIR[0]


argv_words = st.one_of(
    st.sampled_from(
        [
            "--keyword",
            "--limit",
            "--ratio",
            "--enabled=true",
            "--enabled",
            "--ids",
            "--filter",
            "--name",
            "--title",
            "--url",
            "--max_length",
            "--body",
            "{}",
            '{"keyword":"k"}',
            "--",
            "-",
            "-x",
            "--x=",
            "=",
            "true",
            "1e400",
            "[1,2]",
            "--help",
            "--dry-run",
            "-v",
        ]
    ),
    st.text(max_size=12),
    json_number_text,
)


_GOOD_PAIRS = {
    "search_reports": [
        ("--keyword", st.text(max_size=10)),
        ("--limit", json_int_text),
        ("--ratio", json_number_text),
        ("--enabled", st.sampled_from(["=true", "=false"])),
        ("--ids", st.just("[1, 2]")),
        ("--filter", json_values.map(lambda v: dump_json({"v": v}))),
    ],
    "greet": [
        ("--name", st.text(max_size=10)),
        ("--mode", st.sampled_from(["a", "b", "c"])),
        ("--times", json_int_text),
    ],
    "fetch": [
        ("--url", st.text(max_size=10)),
        ("--max_length", json_number_text),
        ("--raw", st.sampled_from(["=true", "=false"])),
    ],
}


@st.composite
def cli_words(draw: st.DrawFn) -> tuple[str, list[str]]:
    """Mostly well-formed flag words for one tool, with some garbage mixed in."""
    tool = draw(st.sampled_from(["search_reports", "greet", "fetch", "nope"]))
    words: list[str] = []
    for option, values in _GOOD_PAIRS.get(tool, []):
        if draw(st.integers(0, 3)):
            value = draw(values)
            if value.startswith("="):
                words.append(option + value)
            elif draw(st.booleans()) or bkmcp._is_bkmcp_option(value):
                words.append(f"{option}={value}")
            else:
                words += [option, value]
    for _ in range(draw(st.integers(0, 2))):
        words.insert(draw(st.integers(0, len(words))), draw(argv_words))
    return tool, words


@FUZZ
@given(cli_words())
def test_p03_cli_never_tracebacks(case: tuple[str, list[str]]) -> None:
    """P03/P05/D02: any words after the tool name end in success, help or a BkmcpError envelope — never an
    internal error — and a call happens only after local validation passed."""
    import io
    from unittest import mock

    tool, words = case
    _FakeClient.calls = []
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.multiple(bkmcp, **fake_engine(_FakeClient)):
        status = bkmcp.main(
            ["--config", _config_path(), "srv", tool, *words],
            stdin=io.StringIO(""),
            stdout=out,
            stderr=err,
            env={"HOME": "/nonexistent"},
            cwd="/",
        )
    assert status in (0, 1), (status, out.getvalue(), err.getvalue())
    event(f"exit {status}, tools/call sent: {bool(_FakeClient.calls)}")
    if status == 1:
        envelope = parse_json(err.getvalue().strip().splitlines()[-1])
        assert envelope["error"]["code"] != "internal_error", envelope
        assert _FakeClient.calls == []
    for name, arguments in _FakeClient.calls:
        catalogue = {t["name"]: t for t in _FakeClient().list_tools()}
        validate_arguments(catalogue[name], arguments)  # what was sent passes local validation


_TEXT_PIECES = ["网关错误", "参数说明", "服务器", "x" * 90, "https://example.com/" + "p" * 70, "\n", "\n\n", "  "]
description_text = st.lists(
    st.one_of(st.text(alphabet="abcdefghij ,.", min_size=1, max_size=12), st.sampled_from(_TEXT_PIECES)), max_size=30
).map("".join)


@st.composite
def help_tool(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.from_regex(r"\A[a-z][a-z0-9_]{0,24}\Z"), max_size=10, unique=True))
    properties: dict[str, Any] = {}
    for name in names:
        prop: dict[str, Any] = {"type": draw(st.sampled_from([*bkmcp.FLAG_TYPES, "null"]))}
        if draw(st.booleans()):
            prop["description"] = draw(description_text)
        if draw(st.booleans()):
            prop["enum"] = draw(st.lists(st.text(alphabet="abc 中", max_size=8), min_size=1, max_size=12))
        if draw(st.booleans()):
            prop["default"] = draw(json_values)
        properties[name] = draw(st.sampled_from([prop, {"anyOf": [prop, {"type": "null"}]}]))
    return {
        "name": draw(st.from_regex(r"\A[a-z][a-z0-9_.\-]{0,30}\Z")),
        "title": draw(description_text),
        "description": draw(description_text),
        "inputSchema": {
            "type": "object",
            "properties": properties,
            "required": [n for n in names if draw(st.booleans())],
        },
    }


def _one_shell_word(line: str) -> bool:
    import shlex

    try:
        return len(shlex.split(line)) == 1
    except ValueError:  # a line inside a multi-line quoted --body example
        return False


def _is_json_pair_line(line: str) -> bool:
    """A line of the pretty --body example holding one ``"key": scalar`` (or one scalar, or an empty array or
    object, or one key opening an array or object): it cannot be broken."""
    base = line.strip().removesuffix(",").replace("'\"'\"'", "'")
    texts = {base, base.removesuffix("}'"), base.removesuffix("]")}  # the last line may close the example
    if base.endswith(("[", "{")):  # `"key": [`: the key is one JSON string, its value starts on the next line
        texts.add(base + ("]" if base.endswith("[") else "}"))
    for candidate in [wrap[0] + text + wrap[1] for text in texts for wrap in ("{}", "[]")]:
        try:
            value = parse_json(candidate)
        except ValueError:
            continue
        items = list(value.values()) if isinstance(value, dict) else value
        if len(items) == 1 and not (isinstance(items[0], (dict, list)) and items[0]):
            return True
    return False


def one_string_with_default(default: Any) -> dict[str, Any]:
    """A tool with one optional string property ``a`` whose default is ``default`` (empty title and description)."""
    return object_tool("a", {"a": {"type": "string", "default": default}}, [], title="", description="")


@pytest.mark.fuzz
@FUZZ
@given(help_tool())
@example(
    one_string_with_default([{"0000'\U00010324\U00018d09\U0002ebe1": [None, None, None, None]}])
)  # found by CI: a key with ' is shell-quoted (+4 columns) and its value must break
@example(
    one_string_with_default([[{"\x1f\x1f\x1f\U00012544\U00018cd6\U00018d09\U0001b2fc": [None]}]])
)  # found by CI: a 66-column escaped key opening an array is one unbreakable 81-column line
def test_d02_help_lines_fit_80_columns(tool: dict[str, Any]) -> None:
    """D02: with any descriptions (CJK, long words, blank lines), a help line wider than 80 columns is a single
    unbreakable token; the --body example is valid JSON."""
    text = render_tool_help("server", tool)
    assert all(ch.isprintable() or ch == "\n" for ch in text)  # nothing from the server can drive the terminal
    for line in text.splitlines():
        if bkmcp._cell_width(line) > 80:  # only unbreakable: one token, or one "key": value pair of the example
            assert _one_shell_word(line.removesuffix(" \\")) or _is_json_pair_line(line), line
    example = body_example(text)
    assert list(example)[: len(tool["inputSchema"]["required"])] == tool["inputSchema"]["required"]
