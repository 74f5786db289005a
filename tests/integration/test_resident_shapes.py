"""Issue 30 through the resident against the mock server: every TOOL carries a definition per model family or a
``warnings`` entry, and a call means what the server's schema means whichever definition the model used
(docs/contract.md §11.2): a strict-mode null for an optional, non-nullable field reaches the server as the field
left out; a constraint only the description carries is still checked before anything is sent."""

from __future__ import annotations

import json
from pathlib import Path

from resident_harness import http_row, write_registry

from mock_server.mcp_mock import mock_tool
from tests.tool_shape_checkers import check_listing

SCHEMA_PROPS = {
    "query": {"type": "string", "maxLength": 8},
    "limit": {"type": "integer", "minimum": 1},
    "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "filter": {"type": "object", "properties": {"tag": {"type": "string"}, "since": {"type": "string"}}},
}


def registry(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "registry.db"
    write_registry(str(path), [http_row("docs", url)], {}, None)
    return path


def test_strict_nulls_reach_the_server_as_fields_left_out_and_nothing_else_is_rewritten(tmp_path, resident, http_mock):
    server = http_mock(
        {
            "tools": [
                mock_tool("search", "echo", SCHEMA_PROPS, ["query"]),
                mock_tool("odd-names", "echo", {"max-results": {"type": "integer"}}),
            ]
        }
    )
    res = resident(registry(tmp_path, server.url))
    listed = res.ok("list_tools", "u")
    assert check_listing(listed) == []
    tools = {t["tool_name"]: t for t in listed["tools"]}
    strict = tools["search"]["function_strict"]
    assert strict["strict"] is True and strict["parameters"]["required"] == list(SCHEMA_PROPS)
    assert tools["search"]["inputSchema"]["properties"] == SCHEMA_PROPS  # as received
    assert "gemini" not in tools["odd-names"]
    assert listed["warnings"] == [
        {
            "server_name": "docs",
            "tool_name": "odd-names",
            "family": "gemini",
            "reason": "parameter name max-results is not [A-Za-z_][A-Za-z0-9_]{0,63}",
        }
    ]
    # what a strict-mode model writes: every field, null for those it leaves empty
    written = {"query": "shrimp", "limit": None, "note": None, "filter": {"tag": "a", "since": None}}
    res.ok("call_tool", "u", name=strict["name"], arguments=written)
    sent = [json.loads(e["body"])["params"]["arguments"] for e in server.requests("tools/call")]
    assert sent == [{"query": "shrimp", "note": None, "filter": {"tag": "a"}}]
    # a required field's null is not dropped: the original's validation refuses it, nothing is sent
    refused = res.ask("call_tool", "u", name=strict["name"], arguments={**written, "query": None})
    assert refused["error_code"] == "invalid_mcp_arguments"
    # a constraint only the strict description carries (maxLength) is checked against the original schema
    refused = res.ask("call_tool", "u", name=strict["name"], arguments={**written, "query": "x" * 9})
    assert refused["error_code"] == "invalid_mcp_arguments"
    assert len(server.requests("tools/call")) == 1


def test_a_null_is_left_out_only_for_a_tool_with_a_strict_definition(tmp_path, resident, http_mock):
    """Issue 36 item 7 (docs/contract.md §11.2): only a strict definition turns an optional field into a required
    nullable one, so only a tool listed with ``function_strict`` has its nulls left out. A tool without one (a
    free-form object has no strict form) keeps the null: its validation refuses it and nothing is sent, so the model
    sees its own mistake instead of a call the server's schema forbids being quietly rewritten."""
    props = {"query": {"type": "string"}, "limit": {"type": "integer"}}
    loose = {**props, "options": {"type": "object"}}  # free-form keys: no strict form
    server = http_mock({"tools": [mock_tool("strict", "echo", props, ["query"]), mock_tool("loose", "echo", loose)]})
    res = resident(registry(tmp_path, server.url))
    listed = {t["tool_name"]: t for t in res.ok("list_tools", "u")["tools"]}
    assert "function_strict" in listed["strict"] and "function_strict" not in listed["loose"]
    res.ok("call_tool", "u", server_name="docs", tool_name="strict", arguments={"query": "q", "limit": None})
    refused = res.ask("call_tool", "u", server_name="docs", tool_name="loose", arguments={"query": "q", "limit": None})
    assert refused["error_code"] == "invalid_mcp_arguments"
    assert [p["path"] for p in refused["details"]["problems"]] == ["$.limit"]
    res.ok("call_tool", "u", server_name="docs", tool_name="loose", arguments={"query": "q"})
    sent = [json.loads(e["body"])["params"] for e in server.requests("tools/call")]
    assert [(p["name"], p["arguments"]) for p in sent] == [("strict", {"query": "q"}), ("loose", {"query": "q"})]
