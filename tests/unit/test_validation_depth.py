"""Validation as deep as bkmcp parses (section 8, issue 36 item 7): a deep schema is checked in full (the
meta-schema pass in pieces), deep arguments on a thread with room for the validator's recursion
(``call_with_headroom``), and past what bkmcp parses the basic rules check the call, ``-v`` saying why. P03."""

from __future__ import annotations

import sys
from typing import Any

import pytest

import bkmcp
from bkmcp import InvalidArgumentsError, validate_arguments
from tests.helpers import object_tool


def _deep_tool(levels: int, leaf: Any = None) -> dict[str, Any]:
    """``$.a.b`` an integer beside ``$.a.deep``, a chain of ``levels`` nested object properties ending in ``leaf``."""
    node: Any = {"type": "string"} if leaf is None else leaf
    for i in range(levels):
        node = {"type": "object", "properties": {f"n{i}": node}}
    return object_tool("t", {"a": {"type": "object", "properties": {"b": {"type": "integer"}, "deep": node}}})


@pytest.mark.parametrize("levels", [150, 450])
def test_a_wrong_type_near_the_top_of_a_deep_schema_is_refused_locally(levels: int) -> None:
    """Issue 36 item 7: a schema nested as deep as bkmcp parses (450 property levels: ~900 JSON levels) is checked
    in full; before, past ~100 levels the meta-schema pass hit Python's recursion limit (and past 200 the remote
    $ref scan gave up), so the wrong type at depth 2 fell to the basic rules and was sent."""
    tool = _deep_tool(levels)
    with pytest.raises(InvalidArgumentsError) as info:
        validate_arguments(tool, {"a": {"b": "text"}})
    assert info.value.details["validation"] == "full"
    assert info.value.details["problems"] == [{"path": "$.a.b", "message": "expected integer, got string"}]
    assert validate_arguments(tool, {"a": {"b": 1}}) == bkmcp.ArgumentCheck("full")


def test_a_deep_schema_is_still_checked_against_its_meta_schema_and_its_deep_remote_ref_named() -> None:
    """The meta-schema check reaches the bottom of a deep schema (an invalid ``type`` 300 levels down: the problem
    is not reported, the basic rules say why), and a remote $ref that deep is named as such — never a sentence about
    depth in its place."""
    broken = validate_arguments(_deep_tool(300, {"type": 5}), {"a": {"b": "text"}, "x": 1})
    assert broken.scope == "basic" and "not a valid JSON Schema" in broken.notes[0], broken.notes
    remote = validate_arguments(_deep_tool(300, {"$ref": "https://example.com/leaf.json"}), {"a": {"b": 1}})
    assert remote.notes == ("the schema references https://example.com/leaf.json, which is never fetched",)


def _nested_list(levels: int) -> Any:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


_LIST_TOOL = object_tool(
    "t",
    {"b": {"type": "object", "properties": {"c": {"type": "integer"}}}, "t": {"$ref": "#/$defs/n"}},
    defs={"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
)


def test_arguments_as_deep_as_bkmcp_parses_are_validated_in_full() -> None:
    """Issue 36 item 7: arguments as deep as bkmcp's parser takes (its recursion limit, less a few levels) are
    checked in full — a wrong type at depth 2 beside them is refused, a leaf of the wrong type at the bottom too —
    and the recursion limit is Python's own again afterwards. Before, past ~100 levels jsonschema hit the recursion
    limit and the basic rules let the wrong type through."""
    limit = sys.getrecursionlimit()
    deep = _nested_list(bkmcp.recursion_ceiling() - 5)
    with pytest.raises(InvalidArgumentsError) as info:
        validate_arguments(_LIST_TOOL, {"b": {"c": "text"}, "t": deep})
    assert info.value.details["validation"] == "full"
    assert info.value.details["problems"] == [{"path": "$.b.c", "message": "expected integer, got string"}]
    assert validate_arguments(_LIST_TOOL, {"b": {"c": 1}, "t": deep}) == bkmcp.ArgumentCheck("full")
    assert sys.getrecursionlimit() == limit
    bottom: Any = deep
    while bottom:
        bottom = bottom[0]
    bottom.append(5)  # not an array, ~1000 levels down
    with pytest.raises(InvalidArgumentsError) as info:
        validate_arguments(_LIST_TOOL, {"t": deep})
    assert info.value.details["validation"] == "full"
    assert sys.getrecursionlimit() == limit


def test_arguments_deeper_than_bkmcp_parses_are_said_in_the_right_words() -> None:
    """Beyond what bkmcp parses, the basic rules check the call and the -v sentence says why in the parser's words;
    a reference that loops without going deeper into the arguments says it is nested too deeply. Neither speaks of
    a remote reference."""
    check = validate_arguments(_LIST_TOOL, {"t": _nested_list(bkmcp.recursion_ceiling() + 1)})
    words = f"the arguments are nested deeper than bkmcp parses (about {sys.getrecursionlimit()} levels)"
    assert check == bkmcp.ArgumentCheck("basic", (words,))
    assert "references" not in check.describe()
    loop = object_tool("t", {"t": {"$ref": "#/$defs/n"}}, defs={"n": {"$ref": "#/$defs/n"}})
    check = validate_arguments(loop, {"t": 1})
    assert check.scope == "basic" and "nested too deeply to check locally" in check.notes[0], check.notes
    assert "references" not in check.describe()


def test_call_with_headroom_hands_back_what_the_work_raised_and_restores_the_limit() -> None:
    """The deep worker's outcome reaches the caller as it is (a value, or the very exception), and the recursion
    limit (raised for it) is Python's own again; recursion_ceiling never counts the raise."""
    limit = sys.getrecursionlimit()
    seen: list[int] = []

    def fails() -> None:
        seen.append(bkmcp.recursion_ceiling())
        seen.append(sys.getrecursionlimit())
        raise KeyError("inside")

    with pytest.raises(KeyError, match="inside"):
        bkmcp.call_with_headroom(fails, 5000)
    assert seen == [limit, limit + 5000]
    assert bkmcp.call_with_headroom(lambda: 7, 10) == 7
    assert sys.getrecursionlimit() == limit and bkmcp.recursion_ceiling() == limit


def test_deep_arguments_fall_back_to_the_basic_rules_when_no_deep_thread_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No memory for the deep thread's stack: the basic rules check the call (the wrong top-level type is still
    refused), saying the arguments are nested too deeply to check locally; the recursion limit is put back."""
    import threading

    limit = sys.getrecursionlimit()

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    with pytest.raises(InvalidArgumentsError) as info:
        validate_arguments(_LIST_TOOL, {"b": 1, "t": _nested_list(200)})
    assert info.value.details["validation"] == "basic"
    assert "nested too deeply to check locally" in info.value.hint
    assert sys.getrecursionlimit() == limit
