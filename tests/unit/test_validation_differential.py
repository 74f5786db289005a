"""The quick validation path (section 8, ``_quickly_valid``) against today's full jsonschema validator (P03, P05).

A one-shot call no longer loads jsonschema when the quick path can tell that the arguments pass (issue 17). The
promise is that not one validation result changes: over the schemas and instances the schema-flag fuzz tests
generate (tests/unit/test_flags_fuzz.py, test_schema_flags.py) plus a strategy aimed at the keywords the quick
path decides, ``validate_arguments`` gives the same outcome — scope, notes, error message, hint and problems —
with the quick path and with jsonschema alone, and whenever the quick path answers "valid", jsonschema reports no
problem and skips nothing. ``BKMCP_FUZZ_EXAMPLES`` sets the number of examples (default 300).
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from test_flags_fuzz import help_tool, json_values, parse_flags_alone, schema_values, tool_with_values
from test_schema_flags import ALL_TYPES, PYDANTIC, ZOD

import bkmcp
from bkmcp import InvalidArgumentsError, parse_json, validate_arguments
from tests.helpers import FUZZ_EXAMPLES

FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# the corpus of the flag tests is mostly arguments that fail (each then checks its schema against the meta-schema,
# twice here): half as many examples keep the file near the flag tests' own time
CORPUS = settings(FUZZ, max_examples=max(50, FUZZ_EXAMPLES // 2))


def outcome(tool: dict[str, Any], arguments: Any, *, quick: bool) -> tuple[Any, ...]:
    """What ``validate_arguments`` answers, with the quick path or with jsonschema alone (today's validator)."""
    patch = mock.patch.object(bkmcp, "_quickly_valid", lambda *args: False) if not quick else mock.MagicMock()
    with patch:
        try:
            check = validate_arguments(tool, arguments)
        except InvalidArgumentsError as exc:
            return ("invalid", str(exc), exc.hint, exc.details)
    return ("ok", check.scope, check.notes)


def assert_same(tool: dict[str, Any], arguments: Any, *, fuzzed: bool = True) -> None:
    schema = tool.get("inputSchema")
    remote: list[str] = []  # _schema_problems refuses a remote $ref before the quick path is asked
    bkmcp.non_local_refs(schema, remote)
    quick = isinstance(schema, dict) and not remote and bkmcp._quickly_valid(schema, arguments)
    if fuzzed:
        event("quick path: valid" if quick else "quick path: ask jsonschema")
    # jsonschema itself, with nothing around it: no problem, nothing skipped. Not for a schema bkmcp keeps from
    # jsonschema (_unbounded_schema: too large, or a "$schema" where jsonschema might switch dialects): the quick
    # path is never asked there, and both outcomes below are the basic rules'.
    if quick and bkmcp.unbounded_schema(schema, bkmcp.SCHEMA_NODE_LIMIT) is None:
        budget = bkmcp.ValidationBudget(None)
        with mock.patch.object(bkmcp, "_quickly_valid", lambda *args: False):
            assert bkmcp._schema_problems(schema, arguments, budget) == []
        assert budget.skipped == []
    assert outcome(tool, arguments, quick=True) == outcome(tool, arguments, quick=False)


def as_object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {"a": value}


# -- the existing fuzz corpus ------------------------------------------------------------------------------


@pytest.mark.fuzz
@FUZZ
@given(schema_values, json_values)
@example({"format": {"required": {"type": None, "$schema": ""}}}, None)  # CI: a "$schema" in no schema position
def test_p05_random_schemas_same_result(raw_schema: Any, arguments: Any) -> None:
    """The random schemas of test_d02_random_schemas_never_crash, as given and wrapped the same way."""
    tool = {"name": "t", "inputSchema": raw_schema}
    wrapped = {"name": "t", "inputSchema": {"type": "object", "properties": raw_schema, "$defs": raw_schema}}
    for candidate in (tool, wrapped):
        assert_same(candidate, as_object(arguments))


@pytest.mark.fuzz
@CORPUS
@given(tool_with_values())
def test_p03_generated_tools_same_result(case: tuple[dict[str, Any], dict[str, Any], list[str], str]) -> None:
    """The tools and flag values of test_p01_p02_flag_values_reach_json_exactly, parsed from their argv."""
    tool, intended, argv, _wire = case
    arguments = parse_flags_alone(tool, argv)
    assert_same(tool, arguments)
    assert_same(tool, intended)


@pytest.mark.fuzz
@CORPUS
@given(help_tool(), st.dictionaries(st.from_regex(r"\A[a-z][a-z0-9_]{0,24}\Z"), json_values, max_size=4))
def test_p03_help_tools_same_result(tool: dict[str, Any], arguments: dict[str, Any]) -> None:
    """The tools of test_d02_help_lines_fit_80_columns (enums, defaults, anyOf with null) with random values."""
    names = list(tool["inputSchema"]["properties"])
    assert_same(tool, arguments)
    assert_same(tool, {**{n: v for n, v in zip(names, arguments.values())}, **arguments})


# -- schemas made of what the quick path decides, with values near their limits -----------------------------

numbers = st.one_of(
    st.integers(-3, 3),
    st.sampled_from(["0", "1", "1.0", "0.5", "-1", "1e400", "2.50", "12345678901234567890.5"]).map(parse_json),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
)
tricky_values = st.one_of(
    st.none(),
    st.booleans(),
    numbers,
    st.sampled_from(["", "a", "ab", "abc", "中文", "0", "true"]),
    st.lists(st.one_of(st.booleans(), st.integers(0, 1), st.sampled_from(["a", 1.0])), max_size=3),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.one_of(st.booleans(), st.integers(0, 1)), max_size=3),
    json_values,
)
type_names = st.sampled_from(["string", "integer", "number", "boolean", "array", "object", "null"])
dialects = st.sampled_from(
    [
        None,
        "https://json-schema.org/draft/2020-12/schema",
        "https://json-schema.org/draft/2019-09/schema#",
        "http://json-schema.org/draft-07/schema#",
        "http://json-schema.org/draft-07/schema",
        "http://json-schema.org/draft-06/schema#",
        "http://json-schema.org/draft-04/schema#",
        "",
    ]
)


def keyword_values(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[str, Any]]:
    """(keyword, value) pairs: mostly well formed, sometimes not (the quick path must then ask jsonschema)."""
    size = st.one_of(st.integers(0, 3), st.sampled_from([-1, True, 1.5, "2"]))
    bound = st.one_of(numbers, st.sampled_from([True, "1", None]))
    names = st.sampled_from(["a", "b", "c", "d"])
    return st.one_of(
        st.tuples(st.just("type"), st.one_of(type_names, st.lists(type_names, max_size=3), st.just("any"))),
        st.tuples(st.just("properties"), st.dictionaries(names, inner, max_size=3)),
        st.tuples(st.just("required"), st.one_of(st.lists(names, max_size=3), st.just([1]), st.just("a"))),
        st.tuples(st.just("additionalProperties"), st.one_of(st.booleans(), inner)),
        st.tuples(st.just("items"), st.one_of(inner, st.booleans(), st.lists(inner, max_size=2))),
        st.tuples(st.just("enum"), st.one_of(st.lists(tricky_values, max_size=4), st.just("abc"))),
        st.tuples(st.just("const"), tricky_values),
        st.tuples(st.sampled_from(["allOf", "anyOf", "oneOf"]), st.lists(inner, max_size=3)),
        st.tuples(st.just("not"), inner),
        st.tuples(st.sampled_from(list(bkmcp._QUICK_SIZES)), size),
        st.tuples(st.sampled_from(list(bkmcp._QUICK_BOUNDS)), bound),
        st.tuples(st.just("format"), st.sampled_from(["uri", "date-time", "regex", 5])),
        st.tuples(st.sampled_from(["title", "description", "default", "x-extra", "$comment"]), tricky_values),
        st.tuples(
            st.sampled_from(["pattern", "uniqueItems", "multipleOf", "$ref", "$id", "$defs", "dependencies", "if"]),
            st.sampled_from(["^a", True, 2, "#", "#/$defs/x", {"type": "string"}]),
        ),
    )


quick_schemas = st.recursive(
    st.one_of(st.booleans(), st.builds(lambda t: {"type": t}, type_names), st.just({})),
    lambda inner: st.lists(keyword_values(inner), max_size=4).map(dict),
    max_leaves=10,
)


@st.composite
def quick_case(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """An object schema of decided keywords (under a random dialect) and arguments for it, often fitting."""
    properties = draw(st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), quick_schemas, max_size=4))
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    schema.update(draw(st.lists(keyword_values(quick_schemas), max_size=2).map(dict)))
    dialect = draw(dialects)
    if dialect is not None:
        schema["$schema"] = dialect
    arguments = {name: draw(tricky_values) for name in properties if draw(st.booleans())}
    return {"name": "t", "inputSchema": schema}, arguments


@pytest.mark.fuzz
@FUZZ
@given(quick_case())
@example(({"name": "t", "inputSchema": {"properties": {"a": {"enum": [1]}}}}, {"a": True}))
@example(({"name": "t", "inputSchema": {"properties": {"a": {"enum": [[1]]}}}}, {"a": [True]}))
@example(({"name": "t", "inputSchema": {"properties": {"a": {"const": [1]}}}}, {"a": [True]}))
@example(({"name": "t", "inputSchema": {"properties": {"a": {"const": 1}}}}, {"a": parse_json("1.0")}))
@example(({"name": "t", "inputSchema": {"$schema": "", "properties": {"a": {"type": "string"}}}}, {"a": "x"}))
@example(({"name": "t", "inputSchema": {"properties": {"a": {"oneOf": [{}, {"type": "string"}]}}}}, {"a": "x"}))
@example(({"name": "t", "inputSchema": {"properties": {"a": {"items": False}}}}, {"a": []}))
@example(({"name": "t", "inputSchema": {"properties": {"a": {"minLength": True}}}}, {"a": ""}))
def test_p05_decided_keywords_same_result(case: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """Near the edges of what the quick path decides: bool/number equality in enum and const, empty arrays
    under ``items: false``, malformed keyword values, dialects it does not know."""
    tool, arguments = case
    assert_same(tool, arguments)


# -- the common schemas really take the quick path ----------------------------------------------------------


def test_p05_typical_schemas_take_the_quick_path() -> None:
    """The shapes of the MCP SDKs (plain typed properties, zod's draft-07 with exclusive bounds and
    additionalProperties: false, pydantic's anyOf-with-null) are decided without jsonschema; $ref is not."""
    assert bkmcp._quickly_valid(ALL_TYPES["inputSchema"], {"keyword": "k", "limit": 3, "ids": [1, 2]})
    assert bkmcp._quickly_valid(ZOD["inputSchema"], {"url": "u", "max_length": parse_json("2.5"), "either": 1})
    optional = {"type": "object", "properties": {"t": PYDANTIC["inputSchema"]["properties"]["title"]}}
    assert bkmcp._quickly_valid(optional, {"t": None}) and bkmcp._quickly_valid(optional, {"t": "x"})
    assert not bkmcp._quickly_valid(ZOD["inputSchema"], {"url": "u", "extra": 1})  # a problem: jsonschema says it
    assert not bkmcp._quickly_valid(PYDANTIC["inputSchema"], {"name": "n", "mode": "a"})  # $ref: jsonschema
    for tool, arguments in (
        (ALL_TYPES, {"keyword": "k"}),
        (ZOD, {"url": "u", "max_length": 0}),
        (PYDANTIC, {"name": "n", "mode": "a"}),
        (PYDANTIC, {"name": "n", "mode": "c"}),
    ):
        assert_same(tool, arguments, fuzzed=False)


def test_dialect_table_is_jsonschemas() -> None:
    """Each $schema the quick path knows is the dialect jsonschema picks, with exactly its keywords, and every
    keyword the quick path decides or ignores is one jsonschema decides the same way in every such dialect."""
    from jsonschema import validators

    for uri, dialect in bkmcp._QUICK_DIALECTS.items():
        cls = validators.validator_for({"$schema": uri}, default=None)
        assert cls is not None and set(cls.VALIDATORS) == bkmcp._DIALECT_KEYWORDS[dialect], uri
    assert set(validators.validator_for({}).VALIDATORS) == bkmcp._DIALECT_KEYWORDS["draft2020-12"]
    for dialect, keywords in bkmcp._DIALECT_KEYWORDS.items():
        assert bkmcp._QUICK_KEYWORDS <= keywords, dialect
    legacy = {"items"}  # draft 6/7/2019-09 use _legacy_validators.items_*, equal for a schema-valued items
    functions = {
        k: {validators.validator_for({"$schema": u}).VALIDATORS[k] for u in bkmcp._QUICK_DIALECTS}
        for k in bkmcp._QUICK_KEYWORDS - legacy
    }
    assert all(len(f) == 1 for f in functions.values()), {k: f for k, f in functions.items() if len(f) > 1}


def test_a_valid_call_loads_no_jsonschema_in_a_fresh_interpreter() -> None:
    """From the source in a fresh interpreter: arguments that pass leave jsonschema unloaded, a problem loads it
    and is reported as before."""
    code = (
        "import sys, bkmcp\n"
        "tool = {'name': 't', 'inputSchema': {'type': 'object', 'properties': {'n': {'type': 'integer'}},"
        " 'required': ['n']}}\n"
        "print(bkmcp.validate_arguments(tool, {'n': 1}).scope, 'jsonschema' in sys.modules)\n"
        "try:\n"
        "    bkmcp.validate_arguments(tool, {'n': 'x'})\n"
        "except bkmcp.InvalidArgumentsError as exc:\n"
        "    print(exc.details['validation'], exc.details['problems'], 'jsonschema' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.splitlines() == [
        "full False",
        "full [{'path': '$.n', 'message': 'expected integer, got string'}] True",
    ]


def test_a_call_of_text_and_integers_is_validated_without_loading_decimal() -> None:
    """``_is_json_number`` (section 8) in a fresh interpreter: the quick path over text, integers, floats, null and
    containers answers as before without loading decimal (no Decimal exists before its module is loaded); once
    it is loaded, Decimals, bkmcp's JsonNumber among them, answer as before (finite ones only)."""
    code = (
        "import sys; import bkmcp\n"
        "schema = {'type': 'object', 'properties': {'q': {'type': 'string'}, 'n': {'type': 'integer', 'minimum': 1}}}\n"
        "assert bkmcp._quickly_valid(schema, {'q': 'hello', 'n': 7})\n"
        "values = ['x', 7, 2.5, float('nan'), True, None, [], {}]\n"
        "assert [bkmcp.is_json_number(v) for v in values] == [False, True, True, True, False, False, False, False]\n"
        "assert '_decimal' not in sys.modules and '_pydecimal' not in sys.modules and 'decimal' not in sys.modules\n"
        "from decimal import Decimal\n"
        "numbers = [Decimal('1.5'), Decimal('NaN'), Decimal('-Infinity'), bkmcp.parse_json('1.25'), 'x', 3]\n"
        "assert [bkmcp.is_json_number(v) for v in numbers] == [True, False, False, True, False, True]\n"
        "print('ok')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=bkmcp.__file__.rsplit("/", 1)[0]
    )
    assert proc.returncode == 0 and proc.stdout.split() == ["ok"], proc.stdout + proc.stderr
