"""Model-ready definitions per family (issue 30, docs/contract.md §11.2, docs/resident.md "Definitions for each
model family"): every definition ``build_definitions`` emits passes its family's checker
(tests/tool_shape_checkers.py, which cites each family's reference), for every tool schema of the mock scenarios,
of the real interop servers (tests/fixtures/real_tool_schemas.json, captured by
tests/fixtures/capture_real_schemas.py) and of a property-based corpus; arguments valid for the original stay
valid for each definition (after the strict-null rule, ``build_call_arguments``), and shaping never changes what
a call means."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bkmcp
from mock_server.mcp_mock import normalize_scenario
from tests.helpers import FUZZ_EXAMPLES, ROOT
from tests.tool_shape_checkers import check_anthropic, check_gemini, check_listing, gemini_as_json_schema

FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
FAMILIES = ("function", "function_strict", "anthropic", "gemini")


def listing(tools: list[dict[str, Any]], server: str = "s") -> dict[str, Any]:
    """What ``Catalogues.answer`` makes of one server's catalogue (the entries and their warnings)."""
    names = bkmcp.build_injected_names((server, str(t.get("name"))) for t in tools)
    by_pair = {pair: name for name, pair in names.items()}
    entries, warnings = [], []
    for tool in tools:
        shaped = bkmcp.build_definitions(tool)
        entries.append(bkmcp.build_tool_entry(by_pair[(server, str(tool.get("name")))], server, tool, shaped))
        warnings += [
            {"server_name": server, "tool_name": tool.get("name"), "family": f, "reason": r}
            for f, r in shaped[1].items()
        ]
    return {"tools": entries, "warnings": warnings}


def mock_catalogues() -> dict[str, list[dict[str, Any]]]:
    found = {"default": normalize_scenario(None)["_public_tools"]}
    for path in sorted((ROOT / "mock_server" / "scenarios").glob("*.json")):
        found[path.stem] = normalize_scenario(json.loads(path.read_text()))["_public_tools"]
    return found


REAL = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "real_tool_schemas.json").read_text())


@pytest.mark.parametrize("server", sorted(REAL))
def test_every_real_server_tool_has_four_definitions_or_a_warning_and_each_passes_its_checker(server):
    answer = listing(REAL[server], server)
    assert check_listing(answer) == []
    for tool in answer["tools"]:  # the function/anthropic forms are never left out for these servers
        assert {"function", "anthropic", "gemini"} <= tool.keys(), tool["tool_name"]


def test_the_real_corpus_covers_what_the_issue_names():
    schemas = json.dumps(REAL)
    assert "$defs" in schemas and "$schema" in schemas and "anyOf" in schemas
    assert sum(len(tools) for tools in REAL.values()) >= 40


@pytest.mark.parametrize("scenario", sorted(mock_catalogues()))
def test_every_mock_scenario_tool_passes_the_checkers(scenario):
    assert check_listing(listing(mock_catalogues()[scenario])) == []


def test_a_fastmcp_pydantic_tool_in_all_four_forms():
    """The worked example of docs/resident.md: FastMCP 1.x ``name_shrimp(tank: ShrimpTank, extra_names)``."""
    tool = next(t for t in REAL["fastmcp1"] if t["name"] == "name_shrimp")
    shaped, reasons = bkmcp.build_definitions(tool)
    assert reasons == {}
    assert "$defs" in tool["inputSchema"] and "$defs" not in json.dumps(shaped)
    tank = shaped["function"]["properties"]["tank"]
    assert tank["type"] == "object" and "shrimp" in tank["properties"]
    strict = shaped["function_strict"]
    assert strict["additionalProperties"] is False and sorted(strict["required"]) == sorted(strict["properties"])
    gemini = shaped["gemini"]
    assert gemini["type"] == "OBJECT" and gemini["properties"]["tank"]["type"] == "OBJECT"
    assert "at most 10 items" in json.dumps(strict) or shaped["gemini"]["properties"]["extra_names"]["maxItems"] == 10


# -- the table's rules, one each ------------------------------------------------------------------------------


def shaped_of(schema: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    return bkmcp.build_definitions({"name": "t", "inputSchema": schema})


def test_schema_dialect_and_js_safe_integer_bounds_are_dropped_constraints_moved_into_descriptions():
    shaped, reasons = shaped_of(
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": -9007199254740991, "maximum": 9007199254740991},
                "url": {"type": "string", "format": "uri", "maxLength": 64},
                "mode": {"enum": [1, "two", None]},
            },
            "required": ["n"],
            "additionalProperties": False,
        }
    )
    assert reasons == {}
    assert shaped["function"]["properties"]["n"] == {"type": "integer"} and "$schema" not in shaped["function"]
    url = shaped["function_strict"]["properties"]["url"]
    assert url["type"] == ["string", "null"] and "at most 64 characters" in url["description"]
    assert "format: uri" in url["description"] and "format" not in url
    assert shaped["gemini"]["properties"]["url"]["maxLength"] == 64
    assert "one of: 1, two, null" in json.dumps(shaped["gemini"]["properties"]["mode"])


def test_top_level_combinators_become_one_object_keeping_the_fields_every_branch_requires():
    shaped, reasons = shaped_of(
        {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {"id": {"type": "string"}, "a": {"type": "string"}},
                    "required": ["id", "a"],
                },
                {
                    "type": "object",
                    "properties": {"id": {"type": "string"}, "b": {"type": "string"}},
                    "required": ["id", "b"],
                },
            ]
        }
    )
    for family in ("function", "anthropic"):
        assert shaped[family]["type"] == "object" and "anyOf" not in shaped[family]
        assert shaped[family]["required"] == ["id"] and "one of 2 forms" in shaped[family]["description"]
    assert shaped["gemini"]["required"] == ["id"]


def test_a_schema_that_admits_no_object_is_left_out_of_every_family_with_the_reason():
    shaped, reasons = shaped_of({"type": "string"})
    assert shaped == {} and set(reasons) == set(FAMILIES) and "admits no object" in reasons["gemini"]


def test_recursive_refs_are_written_to_a_bounded_depth_then_an_open_object_that_says_so():
    node = {
        "type": "object",
        "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/N"}}},
    }
    shaped, reasons = shaped_of({"$defs": {"N": node}, "type": "object", "properties": {"root": {"$ref": "#/$defs/N"}}})
    text = json.dumps(shaped["function"])
    assert "$ref" not in text and "recursive: deeper levels are not described" in text
    assert "function_strict" not in shaped and "recursive" in reasons["function_strict"]
    assert "gemini" in shaped


def test_gemini_is_left_out_alone_for_a_parameter_name_it_rejects():
    shaped, reasons = shaped_of({"type": "object", "properties": {"max-results": {"type": "integer"}}})
    assert set(reasons) == {"gemini"} and "max-results" in reasons["gemini"]
    assert {"function", "function_strict", "anthropic"} <= shaped.keys()


@pytest.mark.parametrize("extra", [True, {}, {"type": "string"}])
@pytest.mark.parametrize("nested", [False, True])
def test_an_explicitly_open_object_has_no_strict_form(extra: Any, nested: bool):
    # openai/openai-agents-python src/agents/strict_schema.py refuses additionalProperties other than false, the
    # empty schema {} included ("allow anything", falsy in Python): closing it would change what the server takes
    obj = {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": extra}
    schema = {"type": "object", "properties": {"o": obj}} if nested else obj
    shaped, reasons = shaped_of(schema)
    assert "function_strict" not in shaped and "named and free-form keys" in reasons["function_strict"]
    assert {"function", "anthropic", "gemini"} <= shaped.keys()
    open_top = bkmcp.build_definitions({"name": "t", "inputSchema": {"type": "object", "additionalProperties": extra}})
    assert "free-form keys" in open_top[1]["function_strict"]


def test_object_keywords_without_a_type_are_an_object_in_strict_form():
    # openai/openai-agents-python src/agents/strict_schema.py and openai/openai-node src/lib/transform.ts read
    # {"properties": …} (openai-node: any object keyword) without a type as an object
    schema = {"type": "object", "properties": {"p": {"properties": {"x": {"type": "string"}}, "description": "d"}}}
    shaped, reasons = shaped_of(schema)
    assert "function_strict" not in reasons
    p = shaped["function_strict"]["properties"]["p"]
    assert p["type"] == ["object", "null"] and p["additionalProperties"] is False and p["required"] == ["x"]
    assert check_listing(listing([{"name": "t", "inputSchema": schema}])) == []
    for sent in ({"p": {"x": None}}, {"p": None}, {"p": {"x": "a"}}):  # what a strict-mode model may send
        jsonschema.validate(sent, shaped["function_strict"])
        jsonschema.validate(bkmcp.build_call_arguments(schema, sent), schema)
    for typeless in ({"properties": {}}, {"additionalProperties": {"type": "string"}}):  # no key named: free-form
        reasons = shaped_of({"type": "object", "properties": {"p": typeless}})[1]
        assert "free-form keys" in reasons["function_strict"]
    closed = shaped_of({"type": "object", "properties": {"p": {"additionalProperties": False}}})[0]
    assert closed["function_strict"]["properties"]["p"]["type"] == ["object", "null"]


def test_a_tool_without_parameters_has_no_gemini_parameters_and_an_empty_strict_object():
    tool = {"name": "ping", "inputSchema": {"type": "object", "properties": {}}}
    entry = bkmcp.build_tool_entry("mcp_s_ping", "s", tool)
    assert entry["gemini"] == {"name": "mcp_s_ping", "description": "mcp_s_ping"}  # REQUIRED, never empty
    assert entry["function_strict"]["parameters"] == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


def test_strict_null_rule_drops_only_optional_non_nullable_nulls():
    schema = {
        "$defs": {
            "P": {
                "type": "object",
                "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                "required": ["x"],
            }
        },
        "type": "object",
        "properties": {
            "req": {"type": ["string", "null"]},
            "opt": {"type": "string"},
            "nullable": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "any": {},
            "points": {"type": "array", "items": {"$ref": "#/$defs/P"}},
        },
        "required": ["req"],
    }
    arguments = {"req": None, "opt": None, "nullable": None, "any": None, "points": [{"x": 1, "y": None}]}
    before = copy.deepcopy(arguments)
    assert bkmcp.build_call_arguments(schema, arguments) == {
        "req": None,
        "nullable": None,
        "any": None,
        "points": [{"x": 1}],
    }
    assert arguments == before  # never modified in place
    kept = {"req": "a"}
    assert bkmcp.build_call_arguments(schema, kept) is kept


# -- the property-based corpus ---------------------------------------------------------------------------------
# Each generated schema comes with a strategy for values valid under it, so the test can check that those values
# stay valid for every emitted definition.

MAX = 9007199254740991
NAMES = st.sampled_from(["a", "b", "name", "count", "tags", "x_1", "_z", "Mode"])
FORMATS = st.sampled_from([None, "uri", "email", "date-time", "uuid"])


def leaf() -> st.SearchStrategy[tuple[dict[str, Any], st.SearchStrategy[Any]]]:
    strings = st.tuples(st.integers(0, 3), st.integers(3, 70), FORMATS).map(
        lambda t: (
            {"type": "string", "minLength": t[0], "maxLength": t[1], **({"format": t[2]} if t[2] else {})},
            st.text("abcxyz", min_size=t[0], max_size=min(t[1], 8)),
        )
    )
    integers = st.tuples(st.sampled_from([-MAX, -5, 0]), st.sampled_from([MAX, 10, 100])).map(
        lambda t: ({"type": "integer", "minimum": t[0], "maximum": t[1]}, st.integers(max(t[0], -50), min(t[1], 50)))
    )
    numbers = st.just(({"type": "number", "exclusiveMinimum": 0}, st.integers(1, 9)))
    booleans = st.just(({"type": "boolean", "default": False}, st.booleans()))
    enums = st.lists(
        st.one_of(st.integers(-3, 3), st.text("ab", max_size=3), st.booleans(), st.none()),
        min_size=1,
        max_size=4,
        unique_by=lambda v: json.dumps(v),
    ).map(lambda values: ({"enum": values}, st.sampled_from(values)))
    anything = st.just(({}, st.one_of(st.none(), st.integers(), st.text(max_size=3))))
    pair = st.just(({"type": ["boolean", "string"]}, st.one_of(st.booleans(), st.text(max_size=3))))
    return st.one_of(strings, integers, numbers, booleans, enums, anything, pair)


def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    def obj(props: list[tuple[str, tuple[dict[str, Any], Any]]], required: list[bool], closed: bool) -> Any:
        props = dict(props)
        names = list(props)
        req = [n for n, r in zip(names, required) if r]
        schema = {"type": "object", "properties": {n: s for n, (s, _) in props.items()}}
        if req:
            schema["required"] = req
        if closed:
            schema["additionalProperties"] = False
        values = st.fixed_dictionaries(
            {n: props[n][1] for n in req}, optional={n: props[n][1] for n in names if n not in req}
        )
        return schema, values

    objects = st.builds(
        obj,
        st.lists(st.tuples(NAMES, children), max_size=4, unique_by=lambda p: p[0]),
        st.lists(st.booleans(), min_size=4, max_size=4),
        st.booleans(),
    )
    arrays = children.map(lambda c: ({"type": "array", "items": c[0], "maxItems": 3}, st.lists(c[1], max_size=3)))
    nullable = children.map(lambda c: ({"anyOf": [c[0], {"type": "null"}]}, st.one_of(st.none(), c[1])))
    union = st.tuples(children, children).map(
        lambda p: ({"oneOf": [p[0][0], p[1][0]]}, st.nothing())  # values come from a branch only when exclusive
    )
    maps = children.map(
        lambda c: ({"type": "object", "additionalProperties": c[0]}, st.dictionaries(NAMES, c[1], max_size=2))
    )
    return st.one_of(objects, arrays, nullable, union, maps)


def top(body: tuple[dict[str, Any], Any], defs: bool, dialect: bool, recursive: bool, wrap: str) -> Any:
    schema, values = body
    if schema.get("type") != "object" or "properties" not in schema:
        schema, values = (
            {"type": "object", "properties": {"v": schema}, "required": ["v"]},
            st.fixed_dictionaries({"v": values}),
        )
    schema = copy.deepcopy(schema)
    if defs:  # move the first property's schema into $defs behind a $ref (pydantic's shape)
        first = next(iter(schema["properties"]), None)
        if first is not None:
            schema["$defs"] = {"First": schema["properties"][first]}
            schema["properties"][first] = {"$ref": "#/$defs/First", "description": "from $defs"}
    if recursive:
        node = {
            "type": "object",
            "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
        }
        schema.setdefault("$defs", {})["Node"] = node
        schema["properties"]["tree"] = {"$ref": "#/$defs/Node"}
    if dialect:
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    if wrap == "allOf":
        schema = {"allOf": [schema, {"required": list(schema["properties"])[:1]}]}
        values = st.nothing()
    return schema, values


CORPUS = st.builds(
    top,
    st.recursive(leaf(), extend, max_leaves=12),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["", "", "allOf"]),
)


def strictify(value: Any, schema: Any) -> Any:
    """``value`` as a strict-mode model writes it: every property of every object present, null when absent."""
    if isinstance(schema, dict) and "anyOf" in schema:
        for branch in schema["anyOf"]:
            if branch.get("type") not in ("null", ["null"]) and _fits(value, branch):
                return strictify(value, branch)
        return value
    if isinstance(value, dict) and isinstance(schema, dict) and "properties" in schema:
        return {n: strictify(value[n], s) if n in value else None for n, s in schema["properties"].items()}
    if isinstance(value, list) and isinstance(schema, dict) and isinstance(schema.get("items"), dict):
        return [strictify(v, schema["items"]) for v in value]
    return value


def _fits(value: Any, schema: dict[str, Any]) -> bool:
    if isinstance(schema.get("anyOf"), list):  # a union inside a union: one of its branches
        return any(_fits(value, branch) for branch in schema["anyOf"] if isinstance(branch, dict))
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    kind = bkmcp.json_type(value, integers=True)
    return kind in kinds or (kind == "integer" and "number" in kinds)


def valid(value: Any, schema: Any) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(value)


@pytest.mark.fuzz
@FUZZ
@given(CORPUS, st.data())
def test_every_emitted_definition_passes_its_checker_and_valid_arguments_stay_valid(case, data):
    schema, values = case
    tool = {"name": "t", "description": "d", "inputSchema": schema}
    answer = listing([tool])
    assert check_listing(answer) == []
    entry = answer["tools"][0]
    assert entry["inputSchema"] is schema  # kept as received
    assert {"function", "anthropic"} <= entry.keys()
    try:
        arguments = data.draw(values)
    except Exception:  # st.nothing(): no value is generated for this shape
        return
    assert valid(arguments, schema)
    assert valid(arguments, entry["function"]["parameters"])
    assert valid(arguments, entry["anthropic"]["input_schema"])
    if "gemini" in entry:
        assert valid(arguments, gemini_as_json_schema(entry["gemini"].get("parameters", {"type": "OBJECT"})))
    if "function_strict" in entry:
        strict = entry["function_strict"]["parameters"]
        written = strictify(arguments, strict)
        assert valid(written, strict), (written, strict)
        sent = bkmcp.build_call_arguments(schema, written)
        assert valid(sent, schema), (sent, written)


def _deep(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"n": schema}, "required": ["n"]}
    return schema


def _fan_out(levels: int, width: int) -> dict[str, Any]:
    defs = {
        f"D{i}": {"type": "object", "properties": {f"p{j}": {"$ref": f"#/$defs/D{i + 1}"} for j in range(width)}}
        for i in range(levels)
    }
    defs[f"D{levels}"] = {"type": "string"}
    return {"$defs": defs, "type": "object", "properties": {"root": {"$ref": "#/$defs/D0"}}}


EDGE_SCHEMAS = {
    "empty": {},
    "bare object": {"type": "object"},
    "not an object": "bad",
    "object or null": {"type": ["object", "null"], "properties": {"a": {"const": 5}}},
    "not / if-then": {
        "type": "object",
        "properties": {"a": {"not": {"type": "string"}}, "b": {"if": {"type": "string"}, "then": {"minLength": 1}}},
    },
    "draft-04 tuple": {
        "type": "object",
        "properties": {"t": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}},
    },
    "prefixItems": {"type": "object", "properties": {"t": {"type": "array", "prefixItems": [{"type": "string"}]}}},
    "allOf that clashes": {"type": "object", "properties": {"a": {"allOf": [{"type": "string"}, {"type": "integer"}]}}},
    "top allOf that clashes": {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}},
            {"properties": {"a": {"type": "integer"}}},
        ]
    },
    "top oneOf of non-objects": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    "top enum": {"type": "object", "enum": [{"a": 1}]},
    "named and free-form keys": {
        "type": "object",
        "properties": {
            "m": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}}
        },
    },
    "requires a key it forbids": {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "required": ["a", "ghost"],
        "additionalProperties": False,
    },
    "null only": {"type": "object", "properties": {"a": {"type": "null"}, "b": {"anyOf": [{"type": "null"}]}}},
    "empty anyOf": {"type": "object", "properties": {"a": {"anyOf": []}}},
    "consts and unique items": {
        "type": "object",
        "properties": {
            "a": {"const": "x"},
            "b": {"const": 3},
            "u": {"type": "array", "uniqueItems": True, "items": {"type": "integer"}},
        },
    },
    "remote $ref": {"type": "object", "properties": {"r": {"$ref": "http://example.com/x.json"}}},
    "dangling $ref": {"type": "object", "properties": {"r": {"$ref": "#/$defs/missing"}}},
    "array of anything": {"type": "object", "properties": {"a": {"type": "array"}}},
    "optional enums": {
        "type": "object",
        "properties": {
            "e": {"type": "string", "enum": ["a", "b"]},
            "i": {"type": "integer", "enum": [1, 2], "format": "int32"},
        },
    },
    "required outside properties": {
        "type": "object",
        "properties": {"a": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x", "y"]}},
    },
    "annotations": {
        "type": "object",
        "properties": {
            "s": {
                "type": "string",
                "pattern": "^a",
                "format": "date-time",
                "default": "x",
                "examples": ["a"],
                "deprecated": True,
                "title": "S",
            }
        },
    },
    "non-string description": {
        "type": "object",
        "description": 5,
        "properties": {"a": {"type": "string", "description": ["x"]}},
    },
    "huge": {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(6000)}},
    "deep": _deep(30),
    "fan-out": _fan_out(6, 6),
}


@pytest.mark.parametrize("name", sorted(EDGE_SCHEMAS))
def test_odd_schemas_give_definitions_that_pass_the_checkers_or_say_why_not(name):
    tool = {"name": "t", "inputSchema": EDGE_SCHEMAS[name]}
    answer = listing([tool])
    assert check_listing(answer) == []
    reasons = {w["family"]: w["reason"] for w in answer["warnings"]}
    if name == "huge":
        assert "strict mode's limit" in reasons["function_strict"] and set(reasons) == {"function_strict"}
    if name == "deep":
        assert "nested deeper than 24 levels" in json.dumps(answer["tools"][0]["function"])
    if name == "fan-out":
        assert set(reasons) == set(FAMILIES) and "larger than" in reasons["function"]
    if name in ("top oneOf of non-objects",):
        assert set(reasons) == set(FAMILIES)


def test_shaping_happens_once_per_catalogue_not_per_list_tools(monkeypatch):
    """Deliver 5: the definitions are kept with the catalogue on its slot; a new catalogue (a refresh) is shaped
    anew, and a snapshot that is no longer the slot's is shaped without replacing the slot's."""
    calls = []
    real = bkmcp.build_definitions
    monkeypatch.setattr(bkmcp, "build_definitions", lambda tool: calls.append(tool["name"]) or real(tool))
    slot = bkmcp.Slot("", "s", "public")
    slot.tools = [{"name": "a", "inputSchema": {"type": "object"}}, {"name": "b", "inputSchema": {}}]

    class Pool:
        def peek(self, user, row):
            return slot

    catalogues = bkmcp.Catalogues(Pool(), None, None, None, 1.0)  # type: ignore[arg-type]
    row = type("Row", (), {"name": "s", "isolation": "public"})()
    for user in ("u1", "u2", "u1"):
        command = bkmcp.ResidentCommand("t", "list_tools", {}, user, None, bkmcp.Deadline(60.0))
        shaped = catalogues.shaped(command, row, slot.tools)
        assert set(shaped) == {0, 1}
    assert calls == ["a", "b"]
    old, slot.tools = slot.tools, [{"name": "c", "inputSchema": {}}]  # refreshed
    catalogues.shaped(command, row, slot.tools)
    assert calls == ["a", "b", "c"]
    catalogues.shaped(command, row, old)  # an answer built from the previous snapshot
    assert calls == ["a", "b", "c", "a", "b"] and slot.shaped is not None and slot.shaped[0] is slot.tools


def test_strict_null_rule_across_a_top_level_union_keeps_fields_some_branch_requires():
    schema = {
        "anyOf": [
            {"type": "object", "properties": {"id": {"type": "string"}, "a": {"type": "string"}}, "required": ["id"]},
            {"type": "object", "properties": {"b": {"type": "string"}, "n": {"type": ["integer", "null"]}}},
        ]
    }
    shaped, reasons = bkmcp.build_definitions({"name": "t", "inputSchema": schema})
    assert "function_strict" in shaped
    written = {"id": None, "a": None, "b": "x", "n": None}  # a strict-mode model choosing the second form
    sent = bkmcp.build_call_arguments(schema, written)
    assert sent == {"id": None, "b": "x", "n": None}  # "a" left out; "id" (required by a branch) and "n" kept
    assert jsonschema.Draft202012Validator(schema).is_valid(sent)


# -- each rule checked against its family's official definition (tests/tool_shape_checkers.py names the sources) --


def test_gemini_enum_is_written_only_on_a_string_the_other_types_hear_it_in_the_description():
    """content.proto ``Schema.enum``: "Possible values of the element of Type.STRING"; a union's number branch
    keeps no enum of strings (before, it carried one the API does not define)."""
    schema = {"type": "object", "properties": {"level": {"type": ["string", "number"], "enum": ["1", "2"]}}}
    shaped, reasons = shaped_of(schema)
    assert "gemini" not in reasons
    branches = {b["type"]: b for b in shaped["gemini"]["properties"]["level"]["anyOf"]}
    assert branches["STRING"]["enum"] == ["1", "2"]
    assert "enum" not in branches["NUMBER"] and "one of: 1, 2" in branches["NUMBER"]["description"]
    const = shaped_of({"type": "object", "properties": {"n": {"type": "integer", "const": "x"}}})[0]["gemini"]
    assert "enum" not in const["properties"]["n"]
    tool = {"name": "t", "inputSchema": schema}
    assert check_listing(listing([tool])) == []


def test_the_gemini_checker_follows_function_declaration_and_schema_as_content_proto_defines_them():
    base = {"name": "mcp_s_t", "description": "d", "parameters": {"type": "OBJECT"}}
    assert check_gemini(base) == []
    for name in ("mcp:s.t", "1tool", "a" * 64):  # colons, dots, a leading digit; at most 64
        assert check_gemini({**base, "name": name}) == [], name
    assert check_gemini({**base, "name": "a" * 65}) == ["name"]
    assert check_gemini({**base, "name": "mcp s"}) == ["name"]
    assert any("description" in p for p in check_gemini({"name": "t", "parameters": {"type": "OBJECT"}}))
    both = {**base, "parametersJsonSchema": {"type": "object"}}
    assert check_gemini(both) == ["parameters beside parametersJsonSchema"]
    assert check_gemini({"name": "t", "description": "d", "parametersJsonSchema": {"type": "object"}}) == []
    assert check_gemini({**base, "description": ""}) == ["description (REQUIRED) is not a non-empty string"]
    assert check_gemini({**base, "behavior": "BLOCKING"}) == []
    assert check_gemini({**base, "strict": True}) == ["unknown FunctionDeclaration fields ['strict']"]

    def param(schema: dict[str, Any]) -> list[str]:
        return check_gemini({**base, "parameters": {"type": "OBJECT", "properties": {"p": schema}}})

    assert param({"type": "STRING", "format": "uri"}) == []  # "Any value is allowed"
    assert param({"type": "STRING", "format": 3}) != []
    assert param({"type": "STRING", "enum": ["a"]}) == []
    assert param({"type": "NUMBER", "enum": ["1"]}) == ["parameters/p: enum on NUMBER, not STRING"]
    assert param({"type": "NULL"}) == []
    assert param({"type": "STRING", "minLength": 1, "maxLength": 2, "pattern": "x", "example": "xx"}) == []
    assert param({"type": "STRING", "const": "x"}) != []


def test_the_anthropic_checker_follows_tool_param_as_the_sdk_defines_it():
    base = {"name": "mcp_s_t", "input_schema": {"type": "object", "properties": {}, "required": []}}
    assert check_anthropic(base) == []
    assert check_anthropic({**base, "cache_control": {"type": "ephemeral"}, "strict": True, "type": "custom"}) == []
    assert check_anthropic({**base, "parameters": {}}) == ["unknown fields ['parameters']"]
    assert check_anthropic({**base, "description": None}) == ["description is not a string"]
    assert check_anthropic({**base, "input_schema": {"type": "object", "properties": []}}) == [
        "input_schema.properties is not a map"
    ]
    assert check_anthropic({**base, "input_schema": {"type": "object", "required": [1]}}) == [
        "input_schema.required is not a list of strings"
    ]
    assert check_anthropic({**base, "input_schema": {"type": "string"}}) == [
        "input_schema.type is 'string', not 'object'"
    ]


def test_a_gemini_declaration_always_has_a_description_the_tools_own_else_its_title_else_its_name():
    """content.proto ``FunctionDeclaration.description`` is REQUIRED; a proto3 string left empty is unset."""
    entry = bkmcp.build_tool_entry("mcp_s_t", "s", {"name": "t", "title": "Tee", "inputSchema": {"type": "object"}})
    assert entry["gemini"]["description"] == "Tee" and entry["function"]["description"] == ""
    said = bkmcp.build_tool_entry("mcp_s_t", "s", {"name": "t", "description": "Does t.", "title": "Tee"})
    assert said["gemini"]["description"] == "Does t."
    assert check_listing(listing([{"name": "t", "inputSchema": {"type": "object"}}])) == []


def test_gemini_keeps_a_schema_field_only_with_the_value_type_content_proto_gives_it():
    """content.proto ``Schema``: ``pattern`` a string, ``minLength`` … ``maxProperties`` int64, ``minimum`` /
    ``maximum`` doubles, each for its own type; a value of another type is said in the description instead."""
    odd = {"a": {"type": "string", "pattern": 5, "maxLength": "8"}, "n": {"type": "integer", "minimum": "x"}}
    shaped, reasons = shaped_of({"type": "object", "properties": odd})
    assert "gemini" not in reasons
    a, n = shaped["gemini"]["properties"]["a"], shaped["gemini"]["properties"]["n"]
    assert "pattern" not in a and "maxLength" not in a and "minimum" not in n
    assert "matching the pattern 5" in a["description"] and "at least x" in n["description"]
    assert check_listing(listing([{"name": "t", "description": "d", "inputSchema": {"properties": odd}}])) == []

    def param(schema: dict[str, Any]) -> list[str]:
        return check_gemini(
            {"name": "t", "description": "d", "parameters": {"type": "OBJECT", "properties": {"p": schema}}}
        )

    assert param({"type": "STRING", "maxLength": 3, "pattern": "^a"}) == []
    assert param({"type": "STRING", "maxLength": True}) == ["parameters/p: maxLength True is not an int64"]
    assert param({"type": "NUMBER", "minimum": 0.5}) == []
    assert param({"type": "NUMBER", "minimum": "0"}) == ["parameters/p: minimum '0' is not a double"]
    assert param({"type": "STRING", "pattern": 5}) == ["parameters/p: pattern 5 is not a string"]
    assert param({"type": "STRING", "items": {"type": "STRING"}}) == ["parameters/p: items on STRING"]
    assert param({"type": "ARRAY", "minimum": 1}) == ["parameters/p: minimum on ARRAY"]


def test_a_strict_mode_model_fills_an_optional_field_inside_a_union_inside_a_union():
    """CI-sized fuzzing's example: items that are (an object or null) or null; an item {} written by a strict-mode
    model is {"a": null}, valid under the strict definition, and sent as {} (the null dropped)."""
    inner = {"type": "object", "properties": {"a": {"type": "number", "exclusiveMinimum": 0}}}
    schema = {
        "type": "object",
        "properties": {
            "v": {"type": "array", "items": {"anyOf": [{"anyOf": [inner, {"type": "null"}]}, {"type": "null"}]}}
        },
        "required": ["v"],
    }
    entry = listing([{"name": "t", "description": "d", "inputSchema": schema}])["tools"][0]
    strict = entry["function_strict"]["parameters"]
    written = strictify({"v": [{}]}, strict)
    assert written == {"v": [{"a": None}]} and valid(written, strict)
    assert bkmcp.build_call_arguments(schema, written) == {"v": [{}]}
