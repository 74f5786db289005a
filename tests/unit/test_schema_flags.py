"""Schema flags (section 8): mapping, values, --body tokens, validation. Seed ids P01–P06."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest

import bkmcp
from bkmcp import (
    BkmcpError,
    InvalidArgumentsError,
    JsonNumber,
    ToolToken,
    build_tool_flags,
    check_tool_tokens,
    describe_cli,
    dump_json,
    find_tool,
    parse_json,
    parse_tool_arguments,
    validate_arguments,
)
from tests.helpers import object_tool


def tok(name: str, value: str | None, eq: bool = False) -> ToolToken:
    raw = f"--{name}={value}" if eq else f"--{name}"
    return ToolToken(name, value, eq, raw)


def make_tool(properties: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required is not None:
        schema["required"] = required
    schema.update(extra)
    return {"name": "search_reports", "inputSchema": schema}


ALL_TYPES = make_tool(
    {
        "keyword": {"type": "string"},
        "limit": {"type": "integer", "default": 20},
        "ratio": {"type": "number"},
        "enabled": {"type": "boolean"},
        "ids": {"type": "array", "items": {"type": "integer"}},
        "filter": {"type": "object"},
    },
    required=["keyword"],
)

# pydantic 2 (MCP Python SDK): Optional fields are anyOf [X, null] with default null and a title; nested models
# are $ref into $defs.
PYDANTIC = {
    "name": "greet",
    "inputSchema": {
        "type": "object",
        "title": "greetArguments",
        "properties": {
            "name": {"type": "string", "title": "Name"},
            "title": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Title"},
            "times": {"type": "integer", "default": 1, "title": "Times"},
            "shape": {"$ref": "#/$defs/Shape"},
            "color": {"$ref": "#/$defs/Color", "default": "red"},
            "mode": {"enum": ["a", "b"], "title": "Mode", "type": "string"},
        },
        "required": ["name", "mode"],
        "$defs": {
            "Color": {"enum": ["red", "green", "blue"], "title": "Color", "type": "string"},
            "Point": {
                "properties": {"x": {"type": "integer"}, "y": {"default": 0, "type": "integer"}},
                "required": ["x"],
                "type": "object",
            },
            "Shape": {
                "properties": {
                    "name": {"type": "string"},
                    "points": {"items": {"$ref": "#/$defs/Point"}, "type": "array"},
                },
                "required": ["name", "points"],
                "type": "object",
            },
        },
    },
}

# a property whose $ref leaves the document: no flag (issue 27: never fetched, so no type to read)
REMOTE = make_tool({"shape": {"$ref": "https://example.com/shape.json"}, "name": {"type": "string"}})

# zod-to-json-schema (TypeScript SDK): draft-07 with $schema, additionalProperties false, unions as type lists.
ZOD = {
    "name": "fetch",
    "inputSchema": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "url": {"type": "string", "format": "uri"},
            "max_length": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1000000, "default": 5000},
            "raw": {"type": "boolean", "default": False},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "either": {"type": ["string", "number"]},
        },
        "required": ["url"],
        "additionalProperties": False,
    },
}


# -- mapping ---------------------------------------------------------------------------------------------


def flag_kinds(mapped: Any) -> dict[str, str]:
    """Property name -> the kind of flag ``build_tool_flags`` made of it."""
    return {name: flag.kind for name, flag in mapped.flags.items()}


def test_p01_each_declared_type_gets_a_typed_flag() -> None:
    """P01: string, integer, number, boolean, array, object each map to a flag named exactly as the property."""
    mapped = build_tool_flags(ALL_TYPES)
    assert flag_kinds(mapped) == {
        "keyword": "string",
        "limit": "integer",
        "ratio": "number",
        "enabled": "boolean",
        "ids": "array",
        "filter": "object",
    }
    assert mapped.flags["keyword"].required and not mapped.flags["limit"].required
    assert mapped.flags["enabled"].usage == "--enabled=true|false"
    assert mapped.flags["ids"].usage == "--ids JSON-ARRAY"
    assert mapped.body_only == {}


@pytest.mark.parametrize(
    ("schema", "types"),
    [
        ({"type": "null"}, ["null"]),
        ({"type": ["string", "integer"]}, ["string", "integer"]),
        ({"type": ["string", "integer", "null"]}, ["string", "integer", "null"]),
        ({"type": ["array", "null"]}, ["array", "null"]),  # only a simple type or null is a T flag
        ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, ["string", "integer"]),
        ({"anyOf": [{"type": "string"}, {"type": "null"}, {"type": "integer"}]}, ["string", "null", "integer"]),
        ({"anyOf": [{"type": "object"}, {"type": "null"}]}, ["object", "null"]),
        ({"anyOf": [{"$ref": "#/$defs/X"}, {"type": "null"}]}, ["object", "null"]),
        ({"anyOf": [{"type": "string", "anyOf": [{"minLength": 1}]}, {"type": "null"}]}, ["string", "null"]),
        ({"anyOf": [{"type": "object"}, {"type": "array"}]}, ["object", "array"]),
        ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, ["string", "integer"]),
        ({"oneOf": [{"enum": ["a", 1]}, {"const": True}]}, ["string", "integer", "boolean"]),
        ({"allOf": [{"type": "string"}, {"minLength": 2}]}, []),
        ({"not": {"type": "string"}}, []),
        ({"if": {"type": "string"}, "then": {"minLength": 1}}, []),
        ({"description": "anything"}, []),
        ({}, []),
        (True, []),
        ({"type": "date"}, ["date"]),
        ({"type": 5}, []),
        ({"anyOf": [{"type": "string"}, True]}, []),  # one branch admits anything
        ({"$ref": "#/$defs/X", "type": "string"}, []),  # a sibling that contradicts the target: both apply
        ({"$ref": "#/$defs/Anything", "description": "free-form"}, []),
    ],
)
def test_p05_unions_and_untyped_schemas_get_a_json_value_flag(schema: Any, types: list[str]) -> None:
    """Issue 27 item 2 (contract §6): a union that is not "T or null", combinators, not/if, no type, ``{}`` and
    ``true`` get a JSON-value flag: its text is JSON, whose syntax names the type; --tools lists the members."""
    defs = {"X": {"type": "object", "title": "X"}, "Anything": {}}
    tool = make_tool({"hard": schema, "easy": {"type": "string"}}, **{"$defs": defs})
    mapped = build_tool_flags(tool)
    assert "easy" in mapped.flags and mapped.body_only == {}
    flag = mapped.flags["hard"]
    assert (flag.kind, flag.usage, flag.nullable) == ("json", "--hard JSON", False)
    cli = describe_cli(tool)["flags"][0]
    assert cli == {"name": "hard", "flag": "--hard JSON", "type": "json", "required": False, "types": types}
    examples = bkmcp.json_flag_examples(flag)
    assert examples and all(e.startswith("--hard ") for e in examples)  # at least one worked example, always
    assert "--hard JSON" in bkmcp.render_tool_help("srv", tool)


@pytest.mark.parametrize(
    ("schema", "kind"),
    [
        ({"anyOf": [{"type": "string"}, {"type": "null"}], "type": "string"}, "string"),  # type narrows anyOf
        ({"type": "integer", "oneOf": [{"minimum": 5}, {"maximum": 1}]}, "integer"),
        ({"allOf": [{"type": "string"}]}, "string"),  # a single-schema wrapper is its schema
        ({"allOf": [{"$ref": "#/$defs/Color"}], "description": "pick one"}, "string"),  # older pydantic
        ({"type": "string", "$ref": "#/$defs/Color"}, "string"),  # 2019-09+: siblings beside a $ref
        ({"$ref": "#/$defs/Tank", "description": "the tank"}, "object"),
        ({"$ref": "#/definitions/Size"}, "integer"),
        ({"$ref": "#/$defs/Alias"}, "object"),  # a chain: Alias -> Tank
        ({"$ref": "#/$defs/a~1b~0c"}, "number"),  # JSON-pointer escapes
        ({"$ref": "#/$defs/with%20space"}, "boolean"),  # percent-encoding
        ({"$ref": "#/$defs/Nested/properties/inner"}, "array"),  # a pointer into a definition
        ({"$ref": "#/$defs/Pair/prefixItems/1"}, "integer"),  # through an array
        ({"$ref": "#"}, "object"),  # the inputSchema itself
    ],
)
def test_p05_local_refs_and_wrappers_type_the_flag_as_if_inline(schema: Any, kind: str) -> None:
    """Issue 27 item 2: a local $ref (#/$defs, #/definitions, chains, ~0 ~1, %20, nested pointers) and a
    single-schema allOf are typed as if the target were written inline; sibling keywords stay beside it."""
    defs = {
        "Color": {"enum": ["red", "green"], "title": "Color", "type": "string"},
        "Tank": {"type": "object", "properties": {"name": {"type": "string"}}, "title": "Tank"},
        "Alias": {"$ref": "#/$defs/Tank"},
        "a/b~c": {"type": "number"},
        "with space": {"type": "boolean"},
        "Nested": {"type": "object", "properties": {"inner": {"type": "array"}}},
        "Pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
    }
    tool = make_tool({"p": schema}, **{"$defs": defs, "definitions": {"Size": {"type": "integer"}}})
    flag = build_tool_flags(tool).flags["p"]
    assert flag.kind == kind
    if "description" in schema:
        assert flag.schema["description"] == schema["description"]  # the property's own words win


@pytest.mark.parametrize(
    ("schema", "word"),
    [
        ({"$ref": "https://example.com/tank.json"}, "remote $ref (https://example.com/tank.json): not fetched"),
        ({"$ref": "other.json#/Tank"}, "remote $ref (other.json#/Tank): not fetched"),
        ({"$id": "https://example.com/x/", "$ref": "#/$defs/Tank"}, "remote $ref (a nested $id"),
        ({"$ref": "#/$defs/Loop"}, "recursive $ref (#/$defs/Loop leads back to itself"),
        ({"$ref": "#/$defs/A"}, "recursive $ref (#/$defs/A leads back"),
        ({"anyOf": [{"$ref": "#/$defs/A"}, {"type": "null"}]}, "recursive $ref"),
        ({"allOf": [{"$ref": "https://example.com/t.json"}]}, "remote $ref"),
        ({"$ref": "#/$defs/Missing"}, "points to nothing in the inputSchema"),
        ({"$ref": "#tank"}, "not a JSON pointer"),
        ({"$ref": 5}, "not a string"),
        ({"$dynamicRef": "#meta"}, "dynamic reference"),
        (False, "no value is valid"),
    ],
)
def test_p05_remote_and_recursive_refs_stay_body_only_and_say_why(schema: Any, word: str) -> None:
    """Issue 27 item 2: a reference that leaves the document (never fetched) or returns to itself before reaching
    a type has no flag; the reason says which; one such property never breaks the others."""
    defs = {"Loop": {"$ref": "#/$defs/Loop"}, "A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}, "Tank": {}}
    tool = make_tool({"hard": schema, "easy": {"type": "string"}}, **{"$defs": defs})
    mapped = build_tool_flags(tool)
    assert "easy" in mapped.flags
    assert "hard" in mapped.body_only and word in mapped.body_only["hard"].reason, mapped.body_only["hard"].reason


def test_p05_a_ref_chain_longer_than_the_limit_is_body_only() -> None:
    """The resolver is bounded: a chain of 40 distinct references stops at REF_DEPTH_LIMIT with a reason."""
    defs = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(40)} | {"d40": {"type": "string"}}
    mapped = build_tool_flags(make_tool({"p": {"$ref": "#/$defs/d0"}}, **{"$defs": defs}))
    assert "longer than" in mapped.body_only["p"].reason
    short = build_tool_flags(make_tool({"p": {"$ref": "#/$defs/d30"}}, **{"$defs": defs}))
    assert short.flags["p"].kind == "string"


def _fan_defs(depth: int, width: int = 30) -> dict[str, Any]:
    defs: dict[str, Any] = {"L0": {"type": "string"}}
    for i in range(1, depth + 1):
        defs[f"L{i}"] = {"anyOf": [{"$ref": f"#/$defs/L{i - 1}"}] * width}
    return defs


def test_the_resolver_shares_what_it_follows_again_and_stops_at_its_node_budget() -> None:
    """Issue 36 item 1: a reference used many times is followed once per (node, chain, depth) — the 30 branches
    of a level are the same object, not 30 copies — and each step of the operation is counted; a union that
    written out would exceed RESOLVE_NODE_LIMIT is "too large to type" after a handful of steps, whatever its
    width^depth, and the operation's SchemaWork says so (the resident's shaping reads it)."""
    from bkmcp import RESOLVE_NODE_LIMIT, SchemaWork, resolve_schema

    root = {"$defs": _fan_defs(2)}  # 30 x 30 = 900 leaves: within the budget, typed
    work = SchemaWork()
    resolved, why = resolve_schema({"$ref": "#/$defs/L2"}, root, work=work)
    assert why == "" and len(resolved["anyOf"]) == 30 and len(resolved["anyOf"][0]["anyOf"]) == 30
    assert all(branch is resolved["anyOf"][0] for branch in resolved["anyOf"])  # shared, not copied
    assert resolved["anyOf"][0]["anyOf"][0] == {"type": "string"}
    assert work.steps <= 10 and work.too_large == ""

    for depth in (3, 5, 6, 12):
        root = {"$defs": _fan_defs(depth)}
        work = SchemaWork()
        resolved, why = resolve_schema({"$ref": f"#/$defs/L{depth}"}, root, work=work)
        assert resolved is None and why.startswith("its schema is too large to type"), why
        assert str(RESOLVE_NODE_LIMIT) in why and work.too_large == why
        assert work.steps <= 3 * depth + 3, work.steps  # one step per level and reference, not width^depth


def test_the_resolver_checks_the_operations_deadline() -> None:
    """A spent deadline stops resolution with mcp_timeout at its first step (the call path's bound)."""
    from bkmcp import Deadline, McpTimeoutError, SchemaWork, resolve_schema

    spent = Deadline(1.0, clock=iter([0.0, 5.0, 5.0, 5.0]).__next__)
    with pytest.raises(McpTimeoutError):
        resolve_schema({"$ref": "#/$defs/L2"}, {"$defs": _fan_defs(2)}, work=SchemaWork(spent))


def test_a_result_is_shared_across_chains_and_a_step_budget_bounds_one_operation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Distinct chains do not defeat sharing: each level's two branches reach the next through different
    references, and each property through its own wrapper (2^10 paths per property, 40 properties), yet a node is
    followed once per depth (a result holds for every chain that holds none of the references it followed), so the
    whole tool takes a few dozen steps and every property is typed. The steps of one operation are still counted:
    past RESOLVE_STEP_LIMIT (made small here) the remaining properties are "too large to type", and a plain
    property keeps its flag."""
    from bkmcp import SchemaWork

    defs: dict[str, Any] = {"A0": {"type": "string"}, "B0": {"type": "string"}}
    for i in range(1, 10):
        pair = {"anyOf": [{"$ref": f"#/$defs/A{i - 1}"}, {"$ref": f"#/$defs/B{i - 1}"}]}
        defs[f"A{i}"], defs[f"B{i}"] = pair, dict(pair)
    defs |= {f"W{k}": {"$ref": "#/$defs/A9"} for k in range(40)}
    properties = {f"p{k}": {"$ref": f"#/$defs/W{k}"} for k in range(40)} | {"q": {"type": "integer"}}
    tool = make_tool(properties, **{"$defs": defs})
    work = SchemaWork()
    for k in range(40):
        resolved, why = bkmcp.resolve_schema({"$ref": f"#/$defs/W{k}"}, tool["inputSchema"], work=work)
        assert why == "" and len(resolved["anyOf"]) == 2
    assert work.steps < 200, work.steps
    mapped = build_tool_flags(tool)
    assert all(mapped.flags[f"p{k}"].kind == "json" for k in range(40)) and mapped.flags["q"].kind == "integer"

    monkeypatch.setattr(bkmcp, "RESOLVE_STEP_LIMIT", 60)
    mapped = build_tool_flags(tool)
    assert mapped.flags["p0"].kind == "json" and mapped.flags["q"].kind == "integer"
    assert "too large to type" in mapped.body_only["p39"].reason and "more than 60" in mapped.body_only["p39"].reason


# FastMCP / the SDK's MCPServer (mcp 2.3.0, .venv-sdk): the inputSchema of
#   @mcp.tool() def name_shrimp(tank: Tank, color: Color, extra: Optional[Tank] = None,
#                               names: list[str] | None = None)
# with ``class Tank(BaseModel): name: str; litres: int = 10`` and ``class Color(Enum): red, green``, printed by
# ``MCPServer.list_tools()`` (docs: tests/unit/test_schema_flags.py, issue 27).
SDK_SHRIMP = {
    "name": "name_shrimp",
    "inputSchema": {
        "$defs": {
            "Color": {"enum": ["red", "green"], "title": "Color", "type": "string"},
            "Tank": {
                "properties": {
                    "name": {"title": "Name", "type": "string"},
                    "litres": {"default": 10, "title": "Litres", "type": "integer"},
                },
                "required": ["name"],
                "title": "Tank",
                "type": "object",
            },
        },
        "properties": {
            "tank": {"$ref": "#/$defs/Tank"},
            "color": {"$ref": "#/$defs/Color"},
            "extra": {"anyOf": [{"$ref": "#/$defs/Tank"}, {"type": "null"}], "default": None},
            "names": {
                "anyOf": [{"items": {"type": "string"}, "type": "array"}, {"type": "null"}],
                "default": None,
                "title": "Names",
            },
        },
        "required": ["tank", "color"],
        "title": "name_shrimpArguments",
        "type": "object",
    },
}

# @modelcontextprotocol/server-sequential-thinking: nextThoughtNeeded is a union of boolean and string.
SEQUENTIAL = make_tool(
    {
        "thought": {"type": "string"},
        "nextThoughtNeeded": {"type": ["boolean", "string"], "description": "Whether another thought step is needed"},
        "thoughtNumber": {"type": "integer", "minimum": 1},
    },
    required=["thought", "nextThoughtNeeded", "thoughtNumber"],
)


def test_p05_sdk_pydantic_model_enum_and_optional_model_get_flags() -> None:
    """Issue 27 item 2 on the SDK's real schema: a model is a JSON-object flag, an Enum a string flag with its
    values, Optional[Model] and Optional[list] JSON-value flags; every required field has a flag."""
    mapped = build_tool_flags(SDK_SHRIMP)
    assert flag_kinds(mapped) == {"tank": "object", "color": "string", "extra": "json", "names": "json"}
    assert mapped.body_only == {}
    assert mapped.flags["color"].schema["enum"] == ["red", "green"]
    args = parse_tool_arguments(
        SDK_SHRIMP,
        [tok("tank", '{"name":"x"}'), tok("color", "red"), tok("extra", "null"), tok("names", '["a"]')],
    )
    assert dump_json(args) == '{"tank":{"name":"x"},"color":"red","extra":null,"names":["a"]}'
    assert validate_arguments(SDK_SHRIMP, args).scope == "full"
    with pytest.raises(InvalidArgumentsError) as info:  # the enum behind the $ref is checked before sending
        validate_arguments(SDK_SHRIMP, {"tank": {"name": "x"}, "color": "blue"}, flags=["tank", "color"])
    assert info.value.details["problems"] == [
        {"path": "$.color", "message": 'must be one of ["red","green"]', "flag": "--color"}
    ]
    assert "--color: must be one of" in info.value.message


def test_p05_json_value_flag_sends_the_json_it_reads() -> None:
    """Issue 27 item 2: ``--nextThoughtNeeded true`` sends JSON true, ``'"true"'`` the string; nothing is inferred
    from the look of a literal, and numbers stay exact."""
    base = [tok("thought", "t"), tok("thoughtNumber", "1")]
    sent = parse_tool_arguments(SEQUENTIAL, [*base, tok("nextThoughtNeeded", "true")])
    assert dump_json(sent) == '{"thought":"t","thoughtNumber":1,"nextThoughtNeeded":true}'
    sent = parse_tool_arguments(SEQUENTIAL, [*base, tok("nextThoughtNeeded", '"true"', True)])
    assert sent["nextThoughtNeeded"] == "true"
    either = make_tool({"id": {"type": ["string", "number"]}})
    assert dump_json(parse_tool_arguments(either, [tok("id", '"00123"')])) == '{"id":"00123"}'
    assert dump_json(parse_tool_arguments(either, [tok("id", "1e400")])) == '{"id":1e400}'


@pytest.mark.parametrize("text", ["yes", "00123", "text with spaces", "", "{", "True"])
def test_p05_json_value_flag_rejects_text_that_is_not_json(text: str) -> None:
    """Issue 27 item 2: text that is not JSON is invalid_mcp_arguments saying to write a JSON value, with the
    example for strings; it is never sent as a string."""
    with pytest.raises(InvalidArgumentsError) as info:
        parse_tool_arguments(SEQUENTIAL, [tok("nextThoughtNeeded", text)])
    message = info.value.message
    assert message.startswith("--nextThoughtNeeded takes a JSON value (boolean or string): write a JSON value")
    assert "--nextThoughtNeeded true or --nextThoughtNeeded '\"text\"'" in message
    assert info.value.details["problems"][0]["flag"] == "--nextThoughtNeeded"


def test_p05_json_value_is_checked_against_the_whole_property_schema_naming_the_flag() -> None:
    """Issue 27 item 2: a JSON-value flag's value goes through the full validation; a mismatch names the flag
    (also for a problem inside the value)."""
    tool = make_tool(
        {
            "nextThoughtNeeded": {"type": ["boolean", "string"]},
            "tank": {"anyOf": [{"$ref": "#/$defs/Tank"}, {"type": "null"}]},
        },
        **{"$defs": SDK_SHRIMP["inputSchema"]["$defs"]},
    )
    args = parse_tool_arguments(tool, [tok("nextThoughtNeeded", "5"), tok("tank", '{"name": 1}')])
    with pytest.raises(InvalidArgumentsError) as info:
        validate_arguments(tool, args, flags=list(args))
    problems = info.value.details["problems"]
    assert [(p["path"], p["flag"]) for p in problems] == [
        ("$.nextThoughtNeeded", "--nextThoughtNeeded"),
        ("$.tank", "--tank"),
    ]
    assert "--nextThoughtNeeded: expected boolean or string, got integer" in info.value.message
    assert '--tank: {"name":1} is not valid under any of the given schemas' in info.value.message
    with pytest.raises(InvalidArgumentsError) as info:
        validate_arguments(
            make_tool({"t": {"type": "object", "properties": {"n": {"type": "integer"}}}}),
            {"t": {"n": "x"}},
            flags=["t"],
        )
    assert "--t at $.t.n: expected integer, got string" in info.value.message
    with pytest.raises(InvalidArgumentsError) as info:  # without flags (--body) the message is as before
        validate_arguments(tool, args)
    assert "flag" not in info.value.details["problems"][0] and "$.nextThoughtNeeded: expected" in info.value.message


def test_p05_missing_required_field_without_a_flag_names_body() -> None:
    """Issue 27 item 2: a required field that has no flag is named in the error with the way to send it."""
    tool = make_tool({"doc": {"$ref": "https://example.com/doc.json"}, "n": {"type": "integer"}}, required=["doc", "n"])
    with pytest.raises(InvalidArgumentsError) as info:
        parse_tool_arguments(tool, [tok("n", "1")], server_name="srv")
    assert info.value.message == (
        "required field 'doc' has no flag (remote $ref (https://example.com/doc.json): not fetched); send the "
        "arguments with --body: bkmcp srv search_reports --body '{...}'"
    )
    assert info.value.details["problems"][0]["path"] == "$.doc"


@pytest.mark.parametrize(
    ("schema", "kind"),
    [
        ({"type": ["string", "null"]}, "string"),
        ({"type": ["null", "integer"]}, "integer"),
        ({"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Title"}, "string"),
        ({"oneOf": [{"type": "null"}, {"type": "number", "minimum": 0}]}, "number"),
        ({"anyOf": [{"type": "boolean", "description": "on?"}, {"type": "null", "title": "nothing"}]}, "boolean"),
        ({"anyOf": [{"type": ["string"], "minLength": 1}, {"type": "null"}]}, "string"),
    ],
)
def test_p05_one_simple_type_or_null_gets_a_flag_of_that_type(schema: Any, kind: str) -> None:
    """Issue 17 item 7 (contract §6): a schema that is exactly one simple type or null is not ambiguous for a
    flag: the flag gives the T value (the text "null" is the string "null"); JSON null stays --body-only."""
    tool = make_tool({"opt": schema})
    flag = build_tool_flags(tool).flags["opt"]
    assert (flag.kind, flag.nullable) == (kind, True)
    assert describe_cli(tool)["flags"][0]["nullable"] is True
    value = {"string": "null", "integer": "7", "number": "0.5", "boolean": "true"}[kind]
    args = parse_tool_arguments(tool, [tok("opt", value, True)])
    assert dump_json(args) == {"string": '{"opt":"null"}', "integer": '{"opt":7}', "number": '{"opt":0.5}'}.get(
        kind, '{"opt":true}'
    )
    assert validate_arguments(tool, args).scope == "full"  # the whole (nullable) schema accepts the flag value
    if kind != "string":
        with pytest.raises(bkmcp.InvalidArgumentsError):
            parse_tool_arguments(tool, [tok("opt", "null", True)])  # JSON null is never typed as a flag


def test_p05_nullable_flag_help_says_null_needs_body() -> None:
    tool = make_tool({"title": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}})
    text = bkmcp.render_tool_help("srv", tool)
    assert "--title STRING" in text and "null: only with --body" in text


def test_p05_single_type_list_is_that_type() -> None:
    """P05: ``type: ["integer"]`` is not a union: it is an integer flag."""
    assert build_tool_flags(make_tool({"n": {"type": ["integer"]}})).flags["n"].kind == "integer"


@pytest.mark.parametrize(
    ("name", "word"),
    [
        ("", "empty"),
        ("-x", "starting with '-'"),
        ("a=b", "'='"),
        ("a b", "whitespace"),
        ("a\tb", "whitespace"),
        ("a\x1bb", "control"),
        ("a\u200bb", "control"),
        ("line\nbreak", "whitespace"),
    ],
)
def test_p05_names_that_cannot_be_flags(name: str, word: str) -> None:
    """P05: empty, leading '-', '=', whitespace and control characters cannot be flags."""
    mapped = build_tool_flags(make_tool({name: {"type": "string"}}))
    assert name in mapped.body_only and word in mapped.body_only[name].reason


@pytest.mark.parametrize("name", sorted(bkmcp.RESERVED_OPTION_NAMES))
def test_p05_reserved_names_collide(name: str) -> None:
    """P05: every reserved option name (and short form) is body-only, never renamed."""
    mapped = build_tool_flags(make_tool({name: {"type": "string"}, "ok": {"type": "string"}}))
    assert name in mapped.body_only and "collides" in mapped.body_only[name].reason
    assert list(mapped.flags) == ["ok"]


def test_p05_exact_names_no_renaming() -> None:
    """P05: case, '_', '-', '.' and non-ASCII names are kept exactly."""
    names = ["Keyword", "page_size", "page-size", "a.b", "关键词", "x"]
    mapped = build_tool_flags(make_tool({n: {"type": "string"} for n in names}))
    assert list(mapped.flags) == names


@pytest.mark.parametrize(
    "schema",
    [
        None,
        "x",
        [],
        5,
        {"type": "object"},
        {"properties": None},
        {"properties": []},
        {"properties": "x"},
        {"properties": {"a": {"type": "string"}}, "required": "a"},
        {"properties": {}, "required": [1, None, "z"]},
    ],
)
def test_p05_odd_input_schemas_never_crash(schema: Any) -> None:
    """P05: a missing or odd inputSchema never crashes mapping, help, parsing or validation."""
    tool: dict[str, Any] = {"name": "odd"}
    if schema is not None:
        tool["inputSchema"] = schema
    mapped = build_tool_flags(tool)
    describe_cli(tool)
    bkmcp.render_tool_help("srv", tool)
    if "z" in mapped.body_only:  # required, no schema, so no flag: flags alone cannot call it
        with pytest.raises(InvalidArgumentsError, match="required field 'z' has no flag"):
            parse_tool_arguments(tool, [])
    else:
        assert parse_tool_arguments(tool, []) == {}
    try:
        validate_arguments(tool, {})
    except InvalidArgumentsError:
        assert isinstance(schema, dict) and "z" in (schema.get("required") or [])
    assert isinstance(mapped.notes, tuple)


def test_p05_required_name_without_property_is_body_only() -> None:
    """P05: a required name missing from properties is listed as body-only and still required."""
    mapped = build_tool_flags({"name": "t", "inputSchema": {"type": "object", "required": ["ghost"]}})
    assert mapped.body_only["ghost"].required and "no schema" in mapped.body_only["ghost"].reason


def test_p05_pydantic_schema() -> None:
    """P05: pydantic Optional (anyOf [X, null]) gets an X flag (issue 17 item 7); $ref models and enum $ref get
    flags of their targets' types (issue 27); the rest get flags."""
    mapped = build_tool_flags(PYDANTIC)
    assert list(mapped.flags) == ["name", "title", "times", "shape", "color", "mode"]
    assert (mapped.flags["shape"].kind, mapped.flags["color"].kind) == ("object", "string")
    assert mapped.flags["color"].schema["default"] == "red" and mapped.body_only == {}
    assert mapped.flags["title"].nullable and mapped.flags["title"].kind == "string"
    assert parse_tool_arguments(PYDANTIC, [tok("name", "Ada"), tok("mode", "a")]) == {"name": "Ada", "mode": "a"}
    assert parse_tool_arguments(PYDANTIC, [tok("name", "Ada"), tok("mode", "a"), tok("title", "Dr")])["title"] == "Dr"


def test_p05_zod_schema() -> None:
    """P05: zod draft-07 schema: typed flags, the type list a JSON-value flag, $schema does not disturb anything;
    ``raw`` (mcp-server-fetch's) is a reserved name since --raw (issue 28), so it is sent through --body."""
    mapped = build_tool_flags(ZOD)
    assert list(mapped.flags) == ["url", "max_length", "headers", "either"]
    assert mapped.flags["either"].kind == "json" and list(mapped.body_only) == ["raw"]
    args = parse_tool_arguments(ZOD, [tok("url", "https://x"), tok("max_length", "0.1")])
    assert dump_json(args) == '{"url":"https://x","max_length":0.1}'
    assert validate_arguments(ZOD, args).scope == "full"


def test_describe_cli_shape() -> None:
    """describe_cli: flags and body_only with reasons, for --tools ``data.cli``."""
    cli = describe_cli(PYDANTIC)
    assert cli["flags"][0] == {"name": "name", "flag": "--name STRING", "type": "string", "required": True}
    assert cli["body_only"] == []
    assert [b["name"] for b in describe_cli(REMOTE)["body_only"]] == ["shape"]
    assert cli["flags"][1] == {
        "name": "title",
        "flag": "--title STRING",
        "type": "string",
        "required": False,
        "nullable": True,
    }
    assert all(b["reason"] for b in cli["body_only"])
    assert "notes" not in cli
    assert describe_cli({"name": "x"})["notes"]


# -- values ------------------------------------------------------------------------------------------------


def test_p01_values_of_each_type() -> None:
    """P01: each type converts; Chinese, "", false and 0 are real values; absent flags are not sent."""
    args = parse_tool_arguments(
        ALL_TYPES,
        [
            tok("keyword", "网关错误"),
            tok("limit", "0"),
            tok("ratio", "0.5"),
            tok("enabled", "false", True),
            tok("ids", "[1,2,3]"),
            tok("filter", '{"status":"running"}'),
        ],
    )
    assert dump_json(args) == (
        '{"keyword":"网关错误","limit":0,"ratio":0.5,"enabled":false,"ids":[1,2,3],"filter":{"status":"running"}}'
    )
    assert parse_tool_arguments(ALL_TYPES, [tok("keyword", "", True)]) == {"keyword": ""}
    assert parse_tool_arguments(ALL_TYPES, [tok("keyword", "")]) == {"keyword": ""}
    assert parse_tool_arguments(ALL_TYPES, [tok("keyword", "k")]) == {"keyword": "k"}  # no default (limit: 20)
    assert parse_tool_arguments(ALL_TYPES, [tok("keyword", "k"), tok("enabled", "true", True)]) == {
        "keyword": "k",
        "enabled": True,
    }
    with pytest.raises(InvalidArgumentsError, match="^missing required flag --keyword STRING$"):  # issue 40
        parse_tool_arguments(ALL_TYPES, [tok("enabled", "true", True)])


def test_p02_number_fidelity_bytes() -> None:
    """P02: 1e400, 0.1, 12345678901234567890.5 and a 40-digit integer reach the JSON text unchanged."""
    big = "1234567890123456789012345678901234567890"
    tool = make_tool(
        {
            "a": {"type": "number"},
            "b": {"type": "number"},
            "c": {"type": "number"},
            "d": {"type": "integer"},
            "e": {"type": "array"},
            "f": {"type": "number"},
            "g": {"type": "integer"},
        }
    )
    args = parse_tool_arguments(
        tool,
        [
            tok("a", "1e400"),
            tok("b", "0.1"),
            tok("c", "12345678901234567890.5"),
            tok("d", big),
            tok("e", "[1e400, 0.1, 12345678901234567890.5, " + big + ", -0.0, 1E-7]"),
            tok("f", "-0"),
            tok("g", "-" + big),
        ],
    )
    text = dump_json(args)
    assert text == (
        '{"a":1e400,"b":0.1,"c":12345678901234567890.5,"d":'
        + big
        + ',"e":[1e400,0.1,12345678901234567890.5,'
        + big
        + ',-0.0,1E-7],"f":-0,"g":-'
        + big
        + "}"
    )
    assert isinstance(args["d"], int) and args["d"] == int(big)
    assert parse_json(text) == args
    validate_arguments(tool, args)


def test_p02_huge_integer_keeps_text() -> None:
    """P02: an integer longer than CPython's int/str limit still reaches the wire exactly."""
    digits = "9" * 5000
    args = parse_tool_arguments(make_tool({"n": {"type": "integer"}}), [tok("n", digits)])
    assert dump_json(args) == '{"n":' + digits + "}"
    validate_arguments(make_tool({"n": {"type": "integer"}}), args)


def test_p02_leading_zero_string_stays_string() -> None:
    """P02: "00123" for a string property stays the string "00123"; strings are never guessed."""
    tool = make_tool({"code": {"type": "string"}})
    for text in ("00123", "true", "null", "1e3", "[1]", "-5"):
        assert dump_json(parse_tool_arguments(tool, [tok("code", text)])) == dump_json({"code": text})


@pytest.mark.parametrize("text", ["1.0", "1e3", "0x10", "+1", "01", "1_000", " 1", "1 ", "", "abc", "-", "1.", "١"])
def test_p02_integer_rejects_non_integer_text(text: str) -> None:
    """P02: integers are JSON integer literals only (no float, exponent, hex, '+', leading zeros)."""
    with pytest.raises(InvalidArgumentsError) as info:
        parse_tool_arguments(make_tool({"n": {"type": "integer"}}), [tok("n", text)])
    assert "expects an integer" in info.value.message


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", ".5", "5.", "+1", "0x1", "1e", "01.5", "1,5", ""])
def test_p02_number_rejects_non_json_numbers(text: str) -> None:
    """P02: numbers follow JSON number syntax; NaN/Infinity are rejected, never silently changed."""
    with pytest.raises(InvalidArgumentsError) as info:
        parse_tool_arguments(make_tool({"x": {"type": "number"}}), [tok("x", text)])
    assert "expects a JSON number" in info.value.message


def test_p01_boolean_forms() -> None:
    """P01: only --x=true/--x=false; '--x true' and bare '--x' are errors showing the right form."""
    tool = make_tool({"enabled": {"type": "boolean"}})
    for token in (
        tok("enabled", "true"),
        tok("enabled", None),
        tok("enabled", "True", True),
        tok("enabled", "1", True),
        tok("enabled", "", True),
        tok("enabled", "yes", True),
    ):
        with pytest.raises(InvalidArgumentsError) as info:
            parse_tool_arguments(tool, [token])
        assert "--enabled=true or --enabled=false" in info.value.message


def test_p01_arrays_and_objects_are_json() -> None:
    """P01/P03: arrays are never comma-split; JSON values are type-checked and duplicate keys rejected."""
    tool = make_tool({"ids": {"type": "array"}, "filter": {"type": "object"}})
    bad = [
        (tok("ids", "1,2,3"), "never comma-separated"),
        (tok("ids", '{"a":1}'), "got object"),
        (tok("ids", '"a"'), "got string"),
        (tok("filter", "[1]"), "got array"),
        (tok("filter", '{"a":1,"a":2}'), "duplicate key"),
        (tok("filter", "{"), "JSON object"),
        (tok("ids", "[NaN]"), "JSON array"),
    ]
    for token, word in bad:
        with pytest.raises(InvalidArgumentsError) as info:
            parse_tool_arguments(tool, [token])
        assert word in info.value.message, info.value.message
    assert parse_tool_arguments(tool, [tok("ids", "[]"), tok("filter", "{}")]) == {"ids": [], "filter": {}}


def test_p03_repeated_flag_is_an_error() -> None:
    """P03: repeating a named flag is an error (no last-wins, no list building)."""
    with pytest.raises(InvalidArgumentsError) as info:
        parse_tool_arguments(ALL_TYPES, [tok("keyword", "a"), tok("keyword", "b")])
    assert "more than once" in info.value.message


def test_p03_unknown_flag_suggests_closest_and_help() -> None:
    """P03: an unknown flag names the closest property and the tool help command."""
    with pytest.raises(InvalidArgumentsError) as info:
        parse_tool_arguments(ALL_TYPES, [tok("keywrod", "x")], server_name="report-prod")
    err = info.value
    assert err.code == "invalid_mcp_arguments" and err.exit_status == 1
    assert "did you mean --keyword?" in err.message
    assert err.hint is not None and "bkmcp report-prod search_reports --help" in err.hint
    with pytest.raises(InvalidArgumentsError) as info:
        parse_tool_arguments(ALL_TYPES, [tok("zzzzzz", "x")], server_name="s")
    assert "did you mean" not in info.value.message and "unknown option --zzzzzz" in info.value.message


def test_p03_unknown_flag_close_to_body_only_field() -> None:
    """P03/P05: a typo of a body-only field suggests it and says to use --body."""
    with pytest.raises(InvalidArgumentsError) as info:
        parse_tool_arguments(REMOTE, [tok("shap", "Dr")])
    assert "did you mean 'shape' (no flag: set it with --body)" in info.value.message


def test_p03_every_token_problem_is_listed() -> None:
    """P03: all malformed flags are reported together, each with its flag and path."""
    with pytest.raises(InvalidArgumentsError) as info:
        parse_tool_arguments(ALL_TYPES, [tok("limit", "x"), tok("ratio", "y"), tok("nope", "1")])
    problems = info.value.details["problems"]
    assert [p["flag"] for p in problems] == ["--limit", "--ratio", "--nope", "--keyword"]  # --keyword: not given
    assert problems[0]["path"] == "$.limit"
    assert "3 more problems" in info.value.message


def test_p03_value_needed() -> None:
    """P03: ``--x`` at the end (value None) says it needs a value."""
    with pytest.raises(InvalidArgumentsError) as info:
        parse_tool_arguments(ALL_TYPES, [tok("limit", None)])
    assert "needs a value" in info.value.message


def test_p05_body_only_property_as_flag_says_use_body() -> None:
    """P05: a flag for a body-only property tells the user to use --body (with the reason)."""
    with pytest.raises(InvalidArgumentsError) as info:
        parse_tool_arguments(REMOTE, [tok("shape", "Dr")])
    assert "has no flag" in info.value.message and "--body" in info.value.message


P06_TEXTS = [
    'it\'s "quoted"',
    "line1\nline2",
    "back\\slash\\n",
    "$(rm -rf /)",
    "`id`",
    "${HOME}",
    "中文 ✓",
    "'; DROP TABLE x; --",
    "\t tabs \r\n",
    "--not-a-flag",
    "=",
    "\u0000nul",
]


@pytest.mark.parametrize("text", P06_TEXTS)
def test_p06_shell_sensitive_text_is_data(text: str) -> None:
    """P06: quotes, newlines, backslashes, $(), backticks and Chinese stay data, byte for byte."""
    tool = make_tool({"text": {"type": "string"}, "obj": {"type": "object"}})
    args = parse_tool_arguments(tool, [tok("text", text), tok("obj", dump_json({"v": text}))])
    assert args == {"text": text, "obj": {"v": text}}
    assert parse_json(dump_json(args)) == args


# -- --body path -----------------------------------------------------------------------------------------


def test_p05_body_path_tokens_checked_not_sent() -> None:
    """P05: with --body, well-formed known flags are reported as ignored; nothing is merged."""
    assert check_tool_tokens(ALL_TYPES, [tok("limit", "5"), tok("enabled", "true", True)]) == ["--limit", "--enabled"]
    assert check_tool_tokens(ALL_TYPES, []) == []


@pytest.mark.parametrize(
    ("tokens", "word"),
    [
        ([tok("limt", "5")], "unknown option --limt"),
        ([tok("limit", None)], "needs a value"),
        ([tok("limit", "1"), tok("limit", "2")], "more than once"),
        ([tok("enabled", "true")], "--enabled=true"),
        ([tok("limit", "x")], "expects an integer"),
    ],
)
def test_p05_body_path_bad_tokens_are_errors(tokens: list[ToolToken], word: str) -> None:
    """P05: with --body, unknown or malformed tool flags are still errors (never silently ignored)."""
    with pytest.raises(InvalidArgumentsError) as info:
        check_tool_tokens(ALL_TYPES, tokens, server_name="s")
    assert word in info.value.message


def test_p05_body_path_body_only_flag_is_error() -> None:
    """P05: with --body, a flag for a body-only field is an error pointing into the body."""
    with pytest.raises(InvalidArgumentsError, match="set it with --body"):
        check_tool_tokens(REMOTE, [tok("shape", "x")])


# -- validation --------------------------------------------------------------------------------------------


def test_p03_required_checked_on_final_object() -> None:
    """P03: required fields are checked on the final object; a schema default does not satisfy them."""
    tool = make_tool({"keyword": {"type": "string", "default": "x"}}, required=["keyword"])
    with pytest.raises(InvalidArgumentsError) as info:
        validate_arguments(tool, {})
    assert info.value.details["problems"] == [{"path": "$.keyword", "message": "required property is missing"}]
    assert info.value.details["validation"] == "full"


def test_p03_every_problem_listed_with_paths() -> None:
    """P03: type, enum, range, nested and missing problems all reported with JSON paths."""
    tool = make_tool(
        {
            "limit": {"type": "integer", "minimum": 1},
            "status": {"type": "string", "enum": ["open", "closed"]},
            "filter": {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}},
            "odd key": {"type": "boolean"},
        },
        required=["status", "need"],
    )
    with pytest.raises(InvalidArgumentsError) as info:
        validate_arguments(tool, {"limit": 0, "status": "x", "filter": {"tags": ["a", 2]}, "odd key": 1})
    paths = {p["path"]: p["message"] for p in info.value.details["problems"]}
    assert paths == {
        "$.limit": "must be at least 1, got 0",
        "$.status": 'must be one of ["open","closed"]',
        "$.filter.tags[1]": "expected string, got integer",
        '$["odd key"]': "expected boolean, got integer",
        "$.need": "required property is missing",
    }


def test_p03_bool_is_not_integer_and_decimal_is_number() -> None:
    """P03: booleans never pass as integers/numbers; JsonNumber validates as number (integral ones as integer)."""
    tool = make_tool({"n": {"type": "integer"}, "x": {"type": "number", "maximum": 1}})
    for bad in ({"n": True}, {"x": False}, {"n": JsonNumber("1.5")}, {"n": "1"}):
        with pytest.raises(InvalidArgumentsError):
            validate_arguments(tool, bad)
    assert validate_arguments(tool, {"n": JsonNumber("1.0"), "x": JsonNumber("0.1")}).scope == "full"
    assert validate_arguments(tool, {"n": JsonNumber("1e400"), "x": JsonNumber("-1e400")}).scope == "full"
    with pytest.raises(InvalidArgumentsError, match="at most 1"):
        validate_arguments(tool, {"x": JsonNumber("1.0000000000000000000000000001")})


def test_p03_multiple_of_exact() -> None:
    """P03: multipleOf is exact for decimals (0.3 is a multiple of 0.1) and never crashes on 1e400."""
    tool = make_tool({"x": {"type": "number", "multipleOf": JsonNumber("0.1")}})
    validate_arguments(tool, {"x": JsonNumber("0.3")})
    with pytest.raises(InvalidArgumentsError, match="multiple of 0.1"):
        validate_arguments(tool, {"x": JsonNumber("0.35")})
    assert validate_arguments(tool, {"x": JsonNumber("1e400")}).scope == "full"
    check = validate_arguments(tool, {"x": JsonNumber("1e9999")})
    assert check.scope == "basic" and "multipleOf" in check.notes[0]


def test_p05_local_refs_resolved() -> None:
    """P05: a self-contained schema with $defs/$ref (pydantic) is validated in full, nested problems found."""
    assert validate_arguments(PYDANTIC, {"name": "a", "mode": "a"}).scope == "full"
    with pytest.raises(InvalidArgumentsError) as info:
        validate_arguments(
            PYDANTIC, {"name": "a", "mode": "c", "color": "pink", "shape": {"name": "s", "points": [{"x": "1"}, {}]}}
        )
    paths = [p["path"] for p in info.value.details["problems"]]
    assert paths == ["$.color", "$.mode", "$.shape.points[0].x", "$.shape.points[1].x"]


def test_p05_zod_additional_properties_false() -> None:
    """P05: draft-07 additionalProperties:false is enforced by the full check."""
    with pytest.raises(InvalidArgumentsError, match="unexpected"):
        validate_arguments(ZOD, {"url": "u", "extra": 1})


def test_p05_remote_ref_never_fetched(monkeypatch: pytest.MonkeyPatch) -> None:
    """P05: a remote $ref is never fetched: basic checks only, reported honestly."""
    import urllib.request

    def refuse(*a: Any, **k: Any) -> Any:
        raise AssertionError("network fetch attempted")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    tool = make_tool({"a": {"$ref": "https://example.com/schema.json"}, "n": {"type": "integer"}}, required=["n"])
    check = validate_arguments(tool, {"n": 1, "a": "anything"})
    assert check.scope == "basic" and "never fetched" in check.notes[0]
    assert "required fields, types and enum only" in check.describe()
    with pytest.raises(InvalidArgumentsError) as info:
        validate_arguments(tool, {"n": "x"})
    assert info.value.details["validation"] == "basic"
    assert "required fields, types and enum only" in (info.value.hint or "")


@pytest.mark.parametrize(
    ("schema", "instance"),
    [
        ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, None),
        ({"anyOf": [{"anyOf": [{"const": i}, {"const": -i}]} for i in range(1, 20)]}, 0),
        ({"oneOf": [{"type": "integer"}, {"minimum": 0}, {"type": "number"}]}, 3),
        ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, None),
        ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, 1),
    ],
)
def test_union_keywords_answer_as_jsonschema_with_a_short_context(schema: dict[str, Any], instance: Any) -> None:
    """Issue 36 item 1: bkmcp's anyOf/oneOf give jsonschema's errors (message, path, keyword) but keep at most
    _CONTEXT_KEPT branch errors each (jsonschema keeps all: width^depth for a union of unions)."""
    import jsonschema

    cls, _resolver = bkmcp.validator_class(schema)
    ours = list(cls(schema).iter_errors(instance))
    theirs = list(jsonschema.Draft202012Validator(schema).iter_errors(instance))
    assert [(e.message, e.validator, list(e.path)) for e in ours] == [
        (e.message, e.validator, list(e.path)) for e in theirs
    ]
    assert all(len(e.context) <= bkmcp._CONTEXT_KEPT for e in ours)
    assert len(ours) != 1 or not theirs[0].context or ours[0].context[0].message == theirs[0].context[0].message


def test_p05_remote_ref_via_id_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """P05: a ref that only turns remote through a nested $id is refused by the resolver, not fetched."""
    import urllib.request

    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: (_ for _ in ()).throw(AssertionError("fetch")))
    tool = make_tool({"a": {"$id": "https://example.com/x/", "$ref": "#/definitions/y"}}, definitions={})
    check = validate_arguments(tool, {"a": 1})
    assert check.scope == "basic"


@pytest.mark.parametrize(
    ("extra", "word"),
    [
        ({"$schema": "https://example.com/my-dialect"}, "unknown $schema"),
        ({"properties": {"p": {"type": "string", "pattern": "\\p{L}+"}}}, "cannot check"),
        ({"properties": {"p": {"type": "string", "minLength": "x"}}}, "not a valid JSON Schema"),
    ],
)
def test_p05_unvalidatable_schemas_fall_back_honestly(extra: dict[str, Any], word: str) -> None:
    """P05: unknown dialects, invalid schemas and exotic patterns fall back to basic checks and say so."""
    tool = {"name": "t", "inputSchema": {"type": "object", **extra}}
    for deadline in (None, bkmcp.Deadline(600)):  # the meta-schema check under a budget gives the same answer
        check = validate_arguments(tool, {"p": "abc"}, deadline=deadline)
        assert check.scope == "basic" and word in check.notes[0], check.notes


def test_p05_malformed_schema_never_blocks_with_false_problems() -> None:
    """P05: ``required: "name"`` (a string) would make jsonschema report one bogus problem per character; the
    meta-schema check catches it and only basic checks decide (the call is not blocked)."""
    tool = {"name": "t", "inputSchema": {"type": "object", "required": "name", "properties": {"name": {}}}}
    for deadline in (None, bkmcp.Deadline(600)):
        check = validate_arguments(tool, {"name": "x"}, deadline=deadline)
        assert check.scope == "basic" and "not a valid JSON Schema" in check.notes[0]


def test_p05_validator_crash_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """P05: an unexpected exception inside the validator becomes basic checks plus an honest note."""

    class Crashing:
        ID_OF = staticmethod(lambda schema: "")

        def __init__(self, schema: Any, resolver: Any = None) -> None:
            pass

        def iter_errors(self, instance: Any) -> Any:
            raise ValueError("boom")

        @classmethod
        def check_schema(cls, schema: Any) -> None:
            pass

    real = bkmcp.validator_class
    monkeypatch.setattr(bkmcp, "validator_class", lambda schema: (Crashing, real(schema)[1]))
    monkeypatch.setattr(bkmcp, "_quickly_valid", lambda *args: False)  # jsonschema decides, not the quick path
    check = validate_arguments(ALL_TYPES, {"keyword": "x"})
    assert check.scope == "basic" and check.notes == ("local validation failed (ValueError)",)


def test_p05_jsonschema_missing_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """P05: without jsonschema, only basic checks run and the result says so."""
    monkeypatch.setitem(sys.modules, "jsonschema", None)
    check = validate_arguments(ALL_TYPES, {"keyword": "x"})
    assert check.scope == "basic" and "jsonschema" in check.notes[0]
    with pytest.raises(InvalidArgumentsError) as info:
        validate_arguments(ALL_TYPES, {"keyword": 1, "limit": True})
    assert [p["path"] for p in info.value.details["problems"]] == ["$.keyword", "$.limit"]


def test_basic_checks_enum_const_types() -> None:
    """P03: the library-free checks cover required, declared types (incl. unions) and enum/const."""
    schema = {
        "type": "object",
        "required": ["a"],
        "properties": {
            "a": {"type": ["string", "null"]},
            "b": {"enum": [1, "x"]},
            "c": {"const": True},
            "d": {"type": "number"},
        },
    }
    assert bkmcp.basic_problems(schema, {"a": None, "b": JsonNumber("1.0"), "c": True, "d": 1}) == []
    problems = bkmcp.basic_problems(schema, {"b": True, "c": 1, "d": "1"})
    assert [p["path"] for p in problems] == ["$.a", "$.b", "$.c", "$.d"]


def test_validation_never_imports_jsonschema_for_mapping() -> None:
    """Mapping and help stay light: jsonschema is only imported by validate_arguments."""
    import subprocess

    code = (
        "import sys, bkmcp; t={'name':'t','inputSchema':{'type':'object','properties':{'a':{'type':'string'}}}};"
        "bkmcp.build_tool_flags(t); bkmcp.render_tool_help('s', t);"
        "bkmcp.parse_tool_arguments(t, [bkmcp.ToolToken('a','x',False,'--a')]);"
        "assert 'jsonschema' not in sys.modules, 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(bkmcp.__file__).rsplit("/", 1)[0])


# -- find_tool -------------------------------------------------------------------------------------------


def test_find_tool_exact_and_suggestions() -> None:
    """Tool names match exactly; an unknown tool suggests close names (mcp_tool_not_found)."""
    tools = [{"name": "search_reports"}, {"name": "Search-Reports"}, {"name": "get"}]
    assert find_tool(tools, "Search-Reports", "s") is tools[1]
    with pytest.raises(bkmcp.ToolNotFoundError) as info:
        find_tool(tools, "search_report", "s")
    assert "search_reports" in info.value.details["suggestions"]
    with pytest.raises(BkmcpError):
        find_tool([], "x", "s")


def test_p03_problem_messages_show_json_not_python() -> None:
    """P03: problem messages show values as JSON (no JsonNumber(...) or Python quotes)."""
    tool = make_tool(
        {
            "s": {"type": "string", "maxLength": 2},
            "n": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "l": {"type": "array", "minItems": 2},
        }
    )
    with pytest.raises(InvalidArgumentsError) as info:
        validate_arguments(tool, {"s": "bcd", "n": JsonNumber("0.5"), "l": [1]})
    messages = {p["path"]: p["message"] for p in info.value.details["problems"]}
    assert messages == {
        "$.s": '"bcd" is too long',
        "$.n": "0.5 is not valid under any of the given schemas",
        "$.l": "[1] is too short",
    }
    assert "JsonNumber" not in info.value.message


def test_p05_nested_id_makes_ref_remote_and_it_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """P05: ``#/...`` under a nested relative ``$id`` resolves to another document: refused, never fetched."""
    import urllib.request

    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: (_ for _ in ()).throw(AssertionError("fetch")))
    tool = {
        "name": "t",
        "inputSchema": {
            "$id": "https://example.com/root.json",
            "type": "object",
            "properties": {
                "a": {"$ref": "#/$defs/y"},
                "b": {"$id": "sub/", "properties": {"c": {"$ref": "#/$defs/z"}}},
            },
            "$defs": {"y": {"type": "integer"}},
        },
    }
    check = validate_arguments(tool, {"a": 1, "b": {"c": 1}})
    assert check.scope == "basic"
    assert check.notes == ("the schema references https://example.com/sub/, which is never fetched",)
    same_doc = {"name": "t", "inputSchema": {**tool["inputSchema"], "properties": {"a": {"$ref": "#/$defs/y"}}}}
    assert validate_arguments(same_doc, {"a": 1}).scope == "full"


def test_p03_enum_and_types_with_json_semantics() -> None:
    """P03: enum/const compare as JSON (1 == 1.0, true != 1, arrays/objects by value); null is named null."""
    schema = {
        "type": "object",
        "properties": {"e": {"enum": [[1, {"a": None}], 2]}, "s": {"type": "string"}, "c": {"const": {"k": [True]}}},
    }
    ok = {"e": [JsonNumber("1.0"), {"a": None}], "c": {"k": [True]}}
    assert bkmcp.basic_problems(schema, ok) == []
    bad = bkmcp.basic_problems(schema, {"e": [True, {"a": None}], "s": None, "c": {"k": [1]}})
    assert [p["path"] for p in bad] == ["$.e", "$.s", "$.c"]
    assert bad[1]["message"] == "expected string, got null"
    tool = {"name": "t", "inputSchema": schema}
    assert validate_arguments(tool, ok).scope == "full"
    with pytest.raises(InvalidArgumentsError):
        validate_arguments(tool, {"c": {"k": [1]}})


def test_json_path_forms() -> None:
    """Problem paths: identifiers with dots, indexes in brackets, anything else JSON-quoted."""
    assert bkmcp.json_path([]) == "$"
    assert bkmcp.json_path(["a", 0, "b_c"]) == "$.a[0].b_c"
    assert bkmcp.json_path(["a b", "中", "x.y", "1"]) == '$["a b"]["中"]["x.y"]["1"]'


# -- issue 11 item 7: validation bounded by limits and the budget -----------------------------------------


@pytest.mark.parametrize(
    ("pattern", "risky"),
    [
        ("^(a+)+$", True),
        ("(a|ab)*c", True),
        ("(x+x+)+y", True),
        ("(a)\\1", True),
        ("^(a*)*$", True),
        ("^[a-z]+$", False),
        ("^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}$", False),
        ("a{3}", False),
        ("x(ab){2,3}y", False),
        ("[", False),
        ("(?:a+)?b", False),
        ("^(foo[0-9]+|bar)$", False),
        ("(?=a+)b", False),
        ("(?=(a+)+)b", True),
        ("^(?:x|(a+)+)$", True),
    ],
)
def test_regex_shapes(pattern: str, risky: bool) -> None:
    assert (bkmcp.regex_risk(pattern, 10) is not None) is risky


def test_regex_length_limit_shrinks_with_open_quantifiers() -> None:
    assert bkmcp.regex_risk("^a+$", 5_000_000) is not None  # longer than REGEX_TEXT_LIMIT
    assert bkmcp.regex_risk("a+b", 10_000) is None and bkmcp.regex_risk("a+b", 10_001) is not None
    assert bkmcp.regex_risk("^a*a*a*b", 464) is None and bkmcp.regex_risk("^a*a*a*b", 465) is not None
    assert bkmcp.regex_risk("abc", 1_000_000) is None


def test_risky_patterns_are_left_to_the_server_and_said() -> None:
    tool = object_tool(
        "t",
        {
            "s": {"type": "string", "pattern": "^(a+)+$"},
            "ok": {"type": "string", "pattern": "^[a-z]+$"},
            "m": {
                "type": "object",
                "patternProperties": {"^(x+)+$": {"type": "integer"}},
                "additionalProperties": False,
            },
        },
    )
    check = validate_arguments(tool, {"s": "a" * 30 + "!", "ok": "abc", "m": {"x" * 30 + "!": "z"}})
    assert check.scope == "full" and len(check.notes) == 3
    assert "except: pattern ^(a+)+$ not run locally (it nests quantifiers" in check.describe()
    with pytest.raises(InvalidArgumentsError) as info:  # the safe pattern next to it still runs
        validate_arguments(tool, {"s": "a" * 30 + "!", "ok": "ABC"})
    assert [p["path"] for p in info.value.details["problems"]] == ["$.ok"]


def test_safe_key_patterns_still_run_locally() -> None:
    tool = {
        "name": "t",
        "inputSchema": {
            "type": "object",
            "properties": {
                "m": {
                    "type": "object",
                    "patternProperties": {"^x[0-9]+$": {"type": "integer"}},
                    "additionalProperties": False,
                }
            },
        },
    }
    assert validate_arguments(tool, {"m": {"x1": 1}}).notes == ()
    with pytest.raises(InvalidArgumentsError) as info:
        validate_arguments(tool, {"m": {"x1": "one", "y": 2}})
    assert [p["path"] for p in info.value.details["problems"]] == ["$.m", "$.m.x1"]


def test_unique_items_over_many_containers_is_left_to_the_server() -> None:
    tool = {
        "name": "t",
        "inputSchema": {"type": "object", "properties": {"xs": {"type": "array", "uniqueItems": True}}},
    }
    check = validate_arguments(tool, {"xs": [{"a": i % 3} for i in range(bkmcp.UNIQUE_ITEMS_LIMIT + 1)]})
    assert check.notes and "uniqueItems not run locally" in check.notes[0]
    with pytest.raises(InvalidArgumentsError):
        validate_arguments(tool, {"xs": [{"a": 1}, {"a": 1}]})


def test_validation_checks_the_deadline_between_keywords() -> None:
    ticks = iter([0.0] + [0.5] * 3 + [2.0] * 1000)
    deadline = bkmcp.Deadline(1.0, clock=lambda: next(ticks))
    tool = {
        "name": "t",
        "inputSchema": {
            "type": "object",
            "properties": {"xs": {"type": "array", "items": {"type": "string", "minLength": 1}}},
        },
    }
    with pytest.raises(bkmcp.McpTimeoutError):
        validate_arguments(tool, {"xs": ["a"] * 100}, deadline=deadline)
    assert validate_arguments(tool, {"xs": ["a"] * 100}, deadline=bkmcp.Deadline(60)).scope == "full"


def test_the_validator_class_is_built_once_and_budgets_stay_per_thread() -> None:
    """One jsonschema class per dialect serves every call and thread (no per-call class building, ~1 ms); the
    deadline it checks is the running validation's own: a spent budget on one thread stops only that one."""
    import threading

    schema = {"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "string"}}}}
    assert bkmcp.validator_class(schema) is bkmcp.validator_class(dict(schema))
    tool = {"name": "t", "inputSchema": schema}
    outcomes: dict[int, object] = {}

    def one(i: int) -> None:
        deadline = bkmcp.Deadline(60)
        if i == 3:
            deadline.end = 0.0  # this call's budget is spent
        try:
            outcomes[i] = validate_arguments(tool, {"xs": ["a"] * 200}, deadline=deadline).scope
        except bkmcp.McpTimeoutError as exc:
            outcomes[i] = exc.code

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert outcomes == {i: ("mcp_timeout" if i == 3 else "full") for i in range(8)}


def test_a_resolver_is_reused_per_schema_object_and_thread_with_the_same_answers() -> None:
    """The resolver of a schema (its $id scope and local $refs) is kept per thread for the same schema object:
    repeated validations, also after one stopped midway by its deadline, give exactly a fresh schema's answers;
    another thread, or an equal copy of the schema, gets its own."""
    import copy
    import threading

    schema = copy.deepcopy(PYDANTIC["inputSchema"])
    schema["$id"] = "https://example.com/greet/"
    schema["properties"]["nested"] = {"type": "object", "properties": {"color": {"$ref": "#/$defs/Color"}}}
    tool = {"name": "greet", "inputSchema": schema}
    bad = {"name": "a", "mode": "c", "nested": {"color": "pink"}, "shape": {"name": "s", "points": [{"x": "1"}]}}

    def problems(t: dict[str, Any], args: dict[str, Any], deadline: Any = None) -> Any:
        try:
            return validate_arguments(t, args, deadline=deadline).scope
        except InvalidArgumentsError as exc:
            return exc.details["problems"]

    expected = problems({"name": "greet", "inputSchema": copy.deepcopy(schema)}, bad)
    assert [p["path"] for p in expected] == ["$.mode", "$.nested.color", "$.shape.points[0].x"]
    assert problems(tool, bad) == expected
    state = bkmcp.validation_state()
    kept = state.resolvers[id(schema)][3]
    for _ in range(3):
        assert problems(tool, {"name": "a", "mode": "a", "nested": {"color": "red"}}) == "full"
        assert problems(tool, bad) == expected
    assert state.resolvers[id(schema)][3] is kept  # the same resolver served every one of them
    ticks = iter([0.0] + [0.5] * 3 + [2.0] * 1000)
    with pytest.raises(bkmcp.McpTimeoutError):
        validate_arguments(tool, bad, deadline=bkmcp.Deadline(1.0, clock=lambda: next(ticks)))
    assert id(schema) not in state.resolvers  # stopped midway: that resolver is dropped, not kept
    assert problems(tool, bad) == expected and state.resolvers[id(schema)][3] is not kept
    other: dict[str, Any] = {}
    worker = threading.Thread(
        target=lambda: other.update(
            answer=problems(tool, bad), resolver=bkmcp.validation_state().resolvers[id(schema)][3]
        )
    )
    worker.start()
    worker.join()
    assert other["answer"] == expected and other["resolver"] is not state.resolvers[id(schema)][3]


def test_p05_optional_enum_behind_a_ref_is_the_one_simple_type_or_null_rule() -> None:
    """Issue 27 item 2: ``Optional[Color]`` (anyOf of a $ref to a string Enum and null) is read as if inline, so
    the unchanged "T or null" rule gives a nullable string flag with the enum's values."""
    tool = make_tool(
        {"color": {"anyOf": [{"$ref": "#/$defs/Color"}, {"type": "null"}], "default": None}},
        **{"$defs": {"Color": {"enum": ["red", "green"], "title": "Color", "type": "string"}}},
    )
    flag = build_tool_flags(tool).flags["color"]
    assert (flag.kind, flag.nullable, flag.schema["enum"]) == ("string", True, ["red", "green"])
    assert parse_tool_arguments(tool, [tok("color", "green")]) == {"color": "green"}
    with pytest.raises(InvalidArgumentsError, match="--color: "):
        validate_arguments(tool, {"color": "blue"}, flags=["color"])


# -- bounded validation (issue 29, item 2) ---------------------------------------------------------------------


def ticking(step: float) -> Callable[[], float]:
    """A clock that moves ``step`` seconds each time it is read: a deadline spent after a known number of checks."""
    now = [0.0]

    def clock() -> float:
        now[0] += step
        return now[0]

    return clock


def leaves_schema(count: int, tag: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"q": {"anyOf": [{"const": f"{tag}{i}"} for i in range(count)]}}}


def test_meta_schema_pass_stops_at_the_deadline() -> None:
    """The meta-schema pass descends into subschemas through ``$ref``/``$dynamicRef`` and through vocabulary
    meta-schemas carrying ``$schema`` (jsonschema then switches to its own, untimed class): the deadline is
    checked at each reference too, so a 100 ms budget ends after about 100 clock reads, not after the schema."""
    schema = leaves_schema(300, "meta-deadline-")
    cls, _resolver = bkmcp.validator_class(schema)
    with pytest.raises(bkmcp.McpTimeoutError):
        bkmcp.check_schema(cls, schema, bkmcp.Deadline(0.1, clock=ticking(0.001)))
    bkmcp.check_schema(cls, schema, bkmcp.Deadline(600))  # the same schema passes with time enough


def test_meta_schema_pass_runs_once_per_schema_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong argument costs the meta-schema pass (~100x the validation) once per schema, not per call: equal
    schemas (a catalogue read again) share the outcome, an invalid schema's SchemaError included."""
    runs: list[Any] = []
    original = bkmcp._meta_schema_error

    def counted(cls: Any, schema: Any, deadline: Any) -> Any:
        runs.append(schema)
        return original(cls, schema, deadline)

    monkeypatch.setattr(bkmcp, "_meta_schema_error", counted)
    for _ in range(3):
        tool = {"name": "t", "inputSchema": leaves_schema(20, "meta-once-")}  # a new, equal object each time
        with pytest.raises(InvalidArgumentsError):
            validate_arguments(tool, {"q": 5}, deadline=bkmcp.Deadline(600))
    assert len(runs) == 1
    bad = {"type": "object", "required": "name", "properties": {"name": {"title": "meta-once-bad"}}}
    for _ in range(2):
        check = validate_arguments({"name": "t", "inputSchema": dict(bad)}, {"name": "x"}, deadline=bkmcp.Deadline(600))
        assert check.scope == "basic" and "not a valid JSON Schema" in check.notes[0]
    assert len(runs) == 2


def test_schema_over_the_node_limit_is_checked_by_the_basic_rules_and_says_so() -> None:
    """The issue's property (27 000 ``anyOf`` leaves): never handed to jsonschema; the basic rules decide, and
    the answer (details.validation, hint, or the check's note) says why."""
    schema = leaves_schema(27_000, "v")
    schema["properties"]["q"]["type"] = "string"
    tool = {"name": "big", "inputSchema": schema}
    with pytest.raises(InvalidArgumentsError) as raised:
        validate_arguments(tool, {"q": 5}, deadline=bkmcp.Deadline(600))
    assert raised.value.details["validation"] == "basic"
    assert "too large to check locally" in (raised.value.hint or "")
    check = validate_arguments(tool, {"q": "not one of them"})
    assert check.scope == "basic" and "too large" in check.describe()


def test_schema_size_is_counted_only_up_to_the_limit() -> None:
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(9)}}  # 11 containers
    assert bkmcp.unbounded_schema(schema, 11) is None
    assert "over 10 objects and arrays" in (bkmcp.unbounded_schema(schema, 10) or "")
    assert bkmcp.unbounded_schema({"enum": list(range(100_000))}, 2) is None  # values are not containers


def test_a_subschema_with_its_own_dialect_is_left_to_the_server() -> None:
    """jsonschema validates a subschema carrying ``$schema`` with its registered class, which has neither the
    deadline nor the pattern limits: ``^(a+)+$`` on a long string would hold the call for hours. Basic rules."""
    nested = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "string", "pattern": "^(a+)+$"}
    tool = {"name": "t", "inputSchema": {"type": "object", "properties": {"t": nested}}}
    check = validate_arguments(tool, {"t": "a" * 20 + "b"}, deadline=bkmcp.Deadline(600))
    assert check.scope == "basic" and "its own $schema" in check.notes[0]
    root = {"name": "t", "inputSchema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}}
    assert validate_arguments(root, {}).scope == "full"  # the root's own dialect is fine


@pytest.mark.parametrize(
    "schema",
    [
        {"$defs": {"$schema": ""}},  # a definition named "$schema" (CI's hypothesis example)
        {"properties": {"$schema": {"type": "string"}}},  # a property named "$schema"
        {"properties": {"a": {"default": {"$schema": "x"}, "enum": [{"$schema": "y"}]}}},  # data, not schemas
    ],
)
def test_a_key_named_schema_outside_a_schema_position_is_not_a_dialect(schema) -> None:
    assert bkmcp.unbounded_schema(schema, 100) is None
    assert bkmcp.unbounded_schema({"items": [{"allOf": [{"$schema": "x"}]}]}, 100) is not None


def test_meta_schema_outcomes_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """At most ``_META_CHECKED_KEPT`` outcomes are kept: one more empties the table first."""
    monkeypatch.setattr(bkmcp, "_META_CHECKED", {})
    monkeypatch.setattr(bkmcp, "_META_CHECKED_KEPT", 2)
    for tag in ("kept-a-", "kept-b-", "kept-c-"):
        schema = leaves_schema(3, tag)
        cls, _resolver = bkmcp.validator_class(schema)
        bkmcp.check_schema(cls, schema, bkmcp.Deadline(600))
    assert len(bkmcp._META_CHECKED) == 1
