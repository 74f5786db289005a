"""The 2026-07-28 ``x-mcp-header`` rule (section 5, ``scan_header_declarations``): which declarations exclude a
tool from the modern catalogue (contract §5, issue 11 item 4), and the same rule choosing the ``Mcp-Param-*`` headers
of a kept tool (``build_param_headers``). Pure functions, no I/O; Hypothesis checks the rule never raises."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bkmcp
from bkmcp import (
    ToolNotFoundError,
    build_param_headers,
    reject_excluded_tool,
    render_excluded_warning,
    scan_header_declarations,
    split_excluded_tools,
    tool_header_problems,
)
from tests.helpers import FUZZ_EXAMPLES


def tool(properties: dict | None = None, name: str = "t", **schema: object) -> dict:
    input_schema: dict = {"type": "object", **schema}
    if properties is not None:
        input_schema["properties"] = properties
    return {"name": name, "inputSchema": input_schema}


def prop(header: object, kind: object = "string", **extra: object) -> dict:
    out: dict = {"x-mcp-header": header, **extra}
    if kind is not None:
        out["type"] = kind
    return out


# -- invalid declarations: every form the spec names ----------------------------------------------------------

INVALID = {
    "empty": ({"v": prop("")}, "x-mcp-header at /properties/v is empty"),
    "not_a_string": ({"v": prop(5)}, "x-mcp-header at /properties/v is not a string (int)"),
    "null": ({"v": prop(None)}, "is not a string (NoneType)"),
    "space": ({"v": prop("My Region")}, 'x-mcp-header "My Region" at /properties/v is not an RFC 9110 token'),
    "colon": ({"v": prop("Region:Primary")}, "is not an RFC 9110 token"),
    "non_ascii": ({"v": prop("Région")}, "is not an RFC 9110 token"),
    "tab": ({"v": prop("Region\t1")}, 'x-mcp-header "Region\\t1" at /properties/v is not an RFC 9110 token'),
    "trailing_newline": ({"v": prop("Region\n")}, "is not an RFC 9110 token"),
    "crlf": ({"v": prop("A\r\nX-Injected: 1")}, "is not an RFC 9110 token"),
    "parenthesis": ({"v": prop("Region(1)")}, "is not an RFC 9110 token"),
    "number": ({"v": prop("Score", "number")}, 'the property has type "number"'),
    "object": ({"v": prop("Data", "object")}, 'the property has type "object"'),
    "array": ({"v": prop("Items", "array", items={"type": "string"})}, 'the property has type "array"'),
    "null_type": ({"v": prop("Nil", "null")}, 'the property has type "null"'),
    "no_type": ({"v": prop("X", None)}, "the property has no type"),
    "type_union": ({"v": prop("X", ["string", "null"])}, 'the property has type ["string","null"]'),
    "duplicate_same_case": (
        {"a": prop("Region"), "b": prop("Region")},
        'x-mcp-header "Region" at /properties/b repeats the header of /properties/a',
    ),
    "duplicate_other_case": ({"a": prop("MyField"), "b": prop("myfield")}, "repeats the header of /properties/a"),
    "duplicate_nested": (
        {"a": prop("Id"), "o": {"type": "object", "properties": {"i": prop("ID")}}},
        "/properties/o/properties/i repeats the header of /properties/a",
    ),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_declaration_excludes_the_tool(case):
    properties, expected = INVALID[case]
    reason = tool_header_problems(tool(properties))
    assert reason is not None and expected in reason, reason
    kept, excluded = split_excluded_tools([tool(properties, name="bad"), tool({"r": prop("Region")}, name="ok")])
    assert [t["name"] for t in kept] == ["ok"]
    assert excluded == [{"name": "bad", "reason": reason}]


OFF_CHAIN = {
    "root": {"type": "object", "x-mcp-header": "Root"},
    "items": {"type": "object", "properties": {"l": {"type": "array", "items": prop("Each")}}},
    "items_list_draft7": {"type": "object", "properties": {"l": {"type": "array", "items": [prop("First")]}}},
    "prefixItems": {"type": "object", "properties": {"l": {"type": "array", "prefixItems": [prop("First")]}}},
    "properties_under_items": {
        "type": "object",
        "properties": {"l": {"type": "array", "items": {"type": "object", "properties": {"x": prop("Deep")}}}},
    },
    "anyOf": {"type": "object", "properties": {"u": {"anyOf": [prop("A"), {"type": "integer"}]}}},
    "oneOf": {"type": "object", "oneOf": [{"properties": {"x": prop("X")}}]},
    "allOf": {"type": "object", "allOf": [{"properties": {"x": prop("X")}}]},
    "not": {"type": "object", "properties": {"n": {"not": prop("N")}}},
    "if_then_else": {"type": "object", "if": {"properties": {"a": prop("A")}}, "then": {}, "else": {}},
    "then": {"type": "object", "if": {}, "then": {"properties": {"a": prop("A")}}},
    "else": {"type": "object", "if": {}, "else": {"properties": {"a": prop("A")}}},
    "additionalProperties": {"type": "object", "additionalProperties": prop("Extra")},
    "patternProperties": {"type": "object", "patternProperties": {"^x": prop("Pattern")}},
    "dependentSchemas": {"type": "object", "dependentSchemas": {"a": {"properties": {"b": prop("B")}}}},
    "defs_via_ref": {"type": "object", "$defs": {"r": prop("Region")}, "properties": {"r": {"$ref": "#/$defs/r"}}},
    "definitions": {"type": "object", "definitions": {"r": prop("Region")}},
    "propertyNames": {"type": "object", "propertyNames": prop("Name")},
    "contains": {"type": "object", "properties": {"l": {"type": "array", "contains": prop("C")}}},
}


@pytest.mark.parametrize("case", sorted(OFF_CHAIN))
def test_a_declaration_off_the_pure_properties_chain_is_invalid(case):
    reason = tool_header_problems({"name": "t", "inputSchema": OFF_CHAIN[case]})
    assert reason is not None
    if case == "root":
        assert reason == "x-mcp-header at / is on the inputSchema itself"
    else:
        assert 'is not on a property reached through "properties" only' in reason


def test_the_reason_names_the_position_as_a_json_pointer():
    schema = {"type": "object", "properties": {"a/b": {"type": "array", "items": prop("X")}, "c~d": prop("")}}
    reason = tool_header_problems({"name": "t", "inputSchema": schema})
    assert reason == (
        'x-mcp-header at /properties/a~1b/items is not on a property reached through "properties" '
        "only; x-mcp-header at /properties/c~0d is empty"
    )


def test_many_problems_are_summarised():
    reason = tool_header_problems(tool({f"p{i}": prop("") for i in range(8)}))
    assert reason is not None
    assert reason.count("is empty") == 5 and reason.endswith("; and 3 more")


# -- valid declarations ---------------------------------------------------------------------------------------


def test_valid_declarations_keep_the_tool():
    every_token_char = "!#$%&'*+-.^_`|~09azAZ"
    properties = {
        "region": prop("Region"),
        "limit": prop("Limit", "integer"),
        "dry": prop("Dry-Run", "boolean"),
        "odd": prop(every_token_char),
        "plain": {"type": "number"},
        "nested": {"type": "object", "properties": {"inner": {"type": "object", "properties": {"deep": prop("Deep")}}}},
        "properties": prop("Properties"),  # a property *named* properties is still a property
        "data_only": {
            "type": "string",
            "default": {"x-mcp-header": ""},
            "examples": [{"x-mcp-header": 1}],
            "const": {"x-mcp-header": "a b"},
            "enum": [{"x-mcp-header": ""}],
        },
    }
    assert tool_header_problems(tool(properties)) is None
    valid, problems = scan_header_declarations(tool(properties)["inputSchema"])
    assert problems == []
    assert valid == [
        (("region",), "Region"),
        (("limit",), "Limit"),
        (("dry",), "Dry-Run"),
        (("odd",), every_token_char),
        (("nested", "inner", "deep"), "Deep"),
        (("properties",), "Properties"),
    ]


@pytest.mark.parametrize("schema", [None, "x", [], {"type": "object"}, {"properties": "nope"}, {"properties": []}])
def test_no_declarations_no_problem(schema):
    assert tool_header_problems({"name": "t", "inputSchema": schema}) is None
    assert tool_header_problems({"name": "t"}) is None
    assert tool_header_problems("not a tool") is None


def test_a_very_deep_schema_does_not_exhaust_the_stack():
    node: dict = prop("Deep")
    for _ in range(5000):
        node = {"type": "object", "properties": {"p": node}}
    assert tool_header_problems({"name": "t", "inputSchema": node}) is None
    wrapped: dict = {"type": "object", "x-mcp-header": "Root"}
    for _ in range(5000):
        wrapped = {"anyOf": [wrapped]}
    assert "is not on a property" in (tool_header_problems({"name": "t", "inputSchema": wrapped}) or "")


# -- the same rule chooses the Mcp-Param headers --------------------------------------------------------------


def test_param_headers_use_only_valid_declarations_including_nested_ones():
    t = tool(
        {
            "region": prop("Region"),
            "n": prop("N", "integer"),
            "flag": prop("Flag", "boolean"),
            "score": prop("Score", "number"),
            "dup": prop("region"),
            "bad": prop("Bad Name"),
            "nl": prop("Nl\n"),
            "geo": {"type": "object", "properties": {"zone": prop("Zone")}},
        }
    )
    args = {
        "region": "eu",
        "n": 3,
        "flag": False,
        "score": 0.5,
        "dup": "x",
        "bad": "y",
        "nl": "z",
        "geo": {"zone": "b 2"},
    }
    assert build_param_headers(t, args) == [
        ("Mcp-Param-Region", "eu"),
        ("Mcp-Param-N", "3"),
        ("Mcp-Param-Flag", "false"),
        ("Mcp-Param-Zone", "b 2"),
    ]


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"geo": None},
        {"geo": "flat"},
        {"geo": {"zone": None}},
        {"geo": {}},
        {"geo": {"zone": {"obj": 1}}},
        {"geo": {"zone": [1]}},
    ],
)
def test_an_absent_or_unrepresentable_value_sends_no_header(args):
    t = tool({"geo": {"type": "object", "properties": {"zone": prop("Zone")}}})
    assert build_param_headers(t, args) == []


# -- reporting ------------------------------------------------------------------------------------------------


def test_the_warning_names_every_excluded_tool_once():
    text = render_excluded_warning([{"name": "a", "reason": "r"}, {"name": "b", "reason": "r"}])
    assert text.startswith("2 tool(s) excluded because their inputSchema declares an invalid x-mcp-header")
    assert "'a', 'b'" in text and "data.excluded" in text
    many = render_excluded_warning([{"name": f"t{i}", "reason": "r"} for i in range(12)])
    assert "'t9'" in many and "'t10'" not in many and "and 2 more" in many


def test_calling_an_excluded_tool_is_tool_not_found_naming_the_declaration():
    excluded = [{"name": "bad", "reason": "x-mcp-header at /properties/v is empty"}]
    reject_excluded_tool(excluded, "good", "srv")  # not excluded: nothing happens
    with pytest.raises(ToolNotFoundError) as info:
        reject_excluded_tool(excluded, "bad", "srv")
    err = info.value
    assert err.code == "mcp_tool_not_found" and err.exit_status == 1
    assert "'bad'" in err.message and "'srv'" in err.message and "invalid x-mcp-header" in err.message
    assert (
        err.hint == "x-mcp-header at /properties/v is empty; the server's tool definition must be fixed "
        "(nothing was sent)"
    )
    assert err.details["excluded"] == excluded[0]


# -- fuzz: the rule is total ----------------------------------------------------------------------------------

_keys = st.sampled_from(
    [
        "type",
        "properties",
        "items",
        "anyOf",
        "x-mcp-header",
        "$defs",
        "not",
        "a",
        "b",
        "additionalProperties",
        "prefixItems",
        "default",
    ]
)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from(["", "A", "a b", "string", "integer", "number"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=25,
)


@pytest.mark.fuzz
@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=_json, arguments=st.dictionaries(st.sampled_from(["a", "b", "x"]), _json, max_size=3))
def test_fuzz_the_rule_never_raises_and_agrees_with_the_headers(schema, arguments):
    valid, problems = scan_header_declarations(schema)
    reason = tool_header_problems({"name": "t", "inputSchema": schema})
    assert (reason is None) == (not problems)
    names = [name for _, name in valid]
    assert len({n.lower() for n in names}) == len(names)  # the valid ones never collide
    for header, value in build_param_headers({"inputSchema": schema}, arguments):
        assert header[len("Mcp-Param-") :] in names and bkmcp.is_token(header) and "\n" not in value
