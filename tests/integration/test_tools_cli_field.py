"""P05 D03: ``--tools`` keeps every tool exactly as received and explains, per tool, which properties became
flags and which need ``--body`` (reserved names, names that cannot be flags, remote $ref); a local $ref is typed
as its target and a union is a JSON-value flag with its member types (issue 27)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests.helpers import object_tool

pytestmark = [pytest.mark.integration]

HARD_TOOL = object_tool(
    "hard",
    {
        "query": {"type": "string"},
        "timeout": {"type": "integer"},
        "maybe": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "ref": {"$ref": "#/$defs/Thing"},
        "has space": {"type": "string"},
        "either": {"type": ["boolean", "string"]},
        "far": {"$ref": "https://example.invalid/far.json"},
    },
    ["query"],
    defs={"Thing": {"type": "object"}},
    description="properties that cannot all be flags",
    annotations={"readOnlyHint": True},
    **{"x-vendor": {"kept": [1, Decimal("2.50"), 12345678901234567890123]}},
)


def test_P05_tools_output_keeps_tools_verbatim_and_explains_body_only_fields(mock) -> None:
    target = mock({"tools": [HARD_TOOL]})
    result = target.run(target.name, "--tools")
    assert result.exit_status == 0, result.stderr
    data = result.json["data"]
    assert data["tools"] == [HARD_TOOL]  # as received, unknown keys and number text included
    assert '"kept":[1,2.50,12345678901234567890123]' in result.stdout.replace(" ", "")
    cli = data["cli"]["hard"]
    assert [f["name"] for f in cli["flags"]] == ["query", "maybe", "ref", "either"]
    assert cli["flags"][1]["nullable"] is True  # "string or null" has a flag (issue 17 item 7)
    assert cli["flags"][2] == {"name": "ref", "flag": "--ref JSON-OBJECT", "type": "object", "required": False}
    assert cli["flags"][3] == {
        "name": "either",
        "flag": "--either JSON",
        "type": "json",
        "required": False,
        "types": ["boolean", "string"],
    }
    body_only = {entry["name"]: entry["reason"] for entry in cli["body_only"]}
    assert set(body_only) == {"timeout", "has space", "far"}
    assert "reserved" in body_only["timeout"]
    assert body_only["far"] == "remote $ref (https://example.invalid/far.json): not fetched"
    assert target.count("tools/call") == 0
