"""Tools with an invalid ``x-mcp-header`` declaration are excluded in the modern era (contract.md §5, issue 11 item 4;
2026-07-28 transports: clients MUST exclude them and SHOULD warn), against the real mock over HTTP and stdio:
``--tools`` lists them under ``data.excluded`` only, ``--check`` counts them, stderr warns once per command, a
call or ``<tool> --help`` is ``mcp_tool_not_found`` naming the declaration, and the server never receives a
``tools/call`` for them. Legacy eras keep the catalogue as received (the annotation is 2026-07-28 only)."""

from __future__ import annotations

import http.client
import json
import sys
from pathlib import Path

import pytest

from mock_server.mcp_mock import mock_tool
from tests.helpers import run_bkmcp, write_mcp_json

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MODERN = "2026-07-28"
WARNING = "excluded because their inputSchema declares an invalid x-mcp-header"

VALID = mock_tool(
    "valid_tool", properties={"region": {"type": "string", "x-mcp-header": "Region"}}, required=["region"]
)
NESTED = mock_tool(
    "nested_tool",
    properties={
        "geo": {"type": "object", "properties": {"zone": {"type": "string", "x-mcp-header": "Zone"}}},
        "note": {"type": "string"},
    },
)
INVALID = [
    mock_tool("invalid_empty_header", properties={"value": {"type": "string", "x-mcp-header": ""}}),
    mock_tool("invalid_number_header", properties={"score": {"type": "number", "x-mcp-header": "Score"}}),
    mock_tool(
        "invalid_duplicate_diff_case",
        properties={
            "field1": {"type": "string", "x-mcp-header": "MyField"},
            "field2": {"type": "string", "x-mcp-header": "myfield"},
        },
    ),
    mock_tool("invalid_space_in_name", properties={"value": {"type": "string", "x-mcp-header": "My Region"}}),
    mock_tool(
        "invalid_under_items",
        properties={"list": {"type": "array", "items": {"type": "string", "x-mcp-header": "Each"}}},
    ),
]
CATALOGUE = [VALID, *INVALID, NESTED]
INVALID_NAMES = [t["name"] for t in INVALID]


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if WARNING in line]


@pytest.mark.parametrize("pinned", [None, MODERN])
def test_tools_lists_invalid_tools_under_excluded_only(mock, pinned):
    target = mock({"tools": CATALOGUE}, protocol_version=pinned)
    result = target.run(target.name, "--tools")
    assert result.exit_status == 0, result.stdout + result.stderr
    data = result.json["data"]
    assert [t["name"] for t in data["tools"]] == ["valid_tool", "nested_tool"]
    assert data["tool_count"] == 2 and data["complete"] is True
    assert [e["name"] for e in data["excluded"]] == INVALID_NAMES
    reasons = {e["name"]: e["reason"] for e in data["excluded"]}
    assert reasons["invalid_empty_header"] == "x-mcp-header at /properties/value is empty"
    assert 'the property has type "number"' in reasons["invalid_number_header"]
    assert "repeats the header of /properties/field1" in reasons["invalid_duplicate_diff_case"]
    assert "is not an RFC 9110 token" in reasons["invalid_space_in_name"]
    assert "/properties/list/items is not on a property" in reasons["invalid_under_items"]
    assert set(data["cli"]) == {"valid_tool", "nested_tool"}
    (line,) = warnings(result.stderr)  # once per command
    assert line.startswith("bkmcp: warning: 5 tool(s) excluded") and all(repr(n) in line for n in INVALID_NAMES)
    assert target.count("tools/call") == 0


def test_check_counts_usable_and_excluded_tools(mock):
    target = mock({"tools": CATALOGUE})
    result = target.run(target.name, "--check")
    assert result.exit_status == 0, result.stdout + result.stderr
    data = result.json["data"]
    assert data["era"] == "modern" and data["checks"]["tools"] == "passed"
    assert data["tool_count"] == 2 and data["excluded_count"] == 5
    assert len(warnings(result.stderr)) == 1


@pytest.mark.parametrize("extra", [["--body", '{"value": "x"}'], ["--value", "x"], ["--help"]])
def test_an_excluded_tool_is_never_called(mock, extra):
    target = mock({"tools": CATALOGUE})
    result = target.run(target.name, "invalid_empty_header", *extra)
    assert result.exit_status == 1 and result.stdout == ""
    error = result.json["error"]
    assert error["code"] == "mcp_tool_not_found"
    assert "excluded because its inputSchema declares an invalid x-mcp-header" in error["message"]
    assert error["hint"].startswith("x-mcp-header at /properties/value is empty; ")  # names the declaration
    assert error["excluded"] == {"name": "invalid_empty_header", "reason": "x-mcp-header at /properties/value is empty"}
    assert len(warnings(result.stderr)) == 1
    assert target.count("tools/list") == 1
    assert target.count("tools/call") == 0  # what the server received: no call at all


def test_the_usable_tools_of_the_same_catalogue_are_called_with_their_headers(mock):
    target = mock({"tools": CATALOGUE})
    ok = target.run(target.name, "valid_tool", "--region", "eu-west")
    assert ok.exit_status == 0, ok.stdout + ok.stderr
    nested = target.run(target.name, "nested_tool", "--body", '{"geo": {"zone": "b 2"}, "note": "n"}')
    assert nested.exit_status == 0, nested.stdout + nested.stderr  # the mock checks Mcp-Param-Zone (-32020 else)
    calls = target.srv.requests("tools/call")
    assert [c["json"]["params"]["name"] for c in calls] == ["valid_tool", "nested_tool"]
    assert calls[0]["headers"]["mcp-param-region"] == "eu-west"
    assert calls[1]["headers"]["mcp-param-zone"] == "b 2"


def test_the_mock_rejects_a_nested_header_that_is_missing(mock):
    """The nested check above can fail: the mock answers -32020 when Mcp-Param-Zone does not match."""
    target = mock({"tools": [NESTED]})
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "nested_tool",
            "arguments": {"geo": {"zone": "z"}},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    conn = http.client.HTTPConnection("127.0.0.1", target.srv.port, timeout=10)
    try:
        conn.request(
            "POST",
            "/mcp",
            json.dumps(body),
            {
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": MODERN,
                "Mcp-Method": "tools/call",
                "Mcp-Name": "nested_tool",
            },
        )
        answer = conn.getresponse()
        payload = json.loads(answer.read())
    finally:
        conn.close()
    assert answer.status == 400 and payload["error"]["code"] == -32020
    assert "mcp-param-zone" in payload["error"]["message"]


@pytest.mark.parametrize("version", ["2025-03-26", "2025-06-18", "2025-11-25"])
def test_legacy_eras_keep_the_catalogue_as_received(mock, version):
    target = mock({"tools": CATALOGUE}, protocol_version=version)
    tools = target.run(target.name, "--tools")
    assert tools.exit_status == 0, tools.stdout + tools.stderr
    data = tools.json["data"]
    assert [t["name"] for t in data["tools"]] == [t["name"] for t in CATALOGUE]
    assert data["excluded"] == [] and data["tool_count"] == len(CATALOGUE)
    assert warnings(tools.stderr) == []
    check = target.run(target.name, "--check")
    assert check.json["data"]["excluded_count"] == 0
    call = target.run(target.name, "invalid_empty_header", "--value", "x")
    assert call.exit_status == 0, call.stdout
    (sent,) = target.srv.requests("tools/call")
    assert not any(h.startswith("mcp-param-") for h in sent["headers"])  # no Mcp-Param-* before 2026-07-28


def test_discovery_incomplete_keeps_excluded_tools_out_of_data_tools(mock):
    target = mock({"tools": CATALOGUE, "page_size": 3, "faults": {"fail_on_page": 2}})
    result = target.run(target.name, "--tools")
    assert result.exit_status == 2 and result.error_code == "mcp_discovery_incomplete"
    data = result.json["data"]
    assert [t["name"] for t in data["tools"]] == ["valid_tool"]
    assert [e["name"] for e in data["excluded"]] == INVALID_NAMES[:2]
    assert data["tool_count"] == 1 and data["complete"] is False


def test_stdio_modern_excludes_too(tmp_path):
    """The rule is the era's, not the transport's: the same server over stdio shows the same catalogue."""
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"tools": CATALOGUE}), encoding="utf-8")
    log = tmp_path / "log.jsonl"
    mock = str(ROOT / "mock_server" / "mcp_mock.py")
    args = [mock, "--stdio", "--scenario", str(scenario), "--log", str(log)]
    config = write_mcp_json(
        tmp_path, {"s": {"type": "stdio", "command": sys.executable, "protocolVersion": MODERN, "args": args}}
    )
    tools = run_bkmcp("--config", str(config), "--timeout", "20s", "s", "--tools")
    assert tools.exit_status == 0, tools.stdout + tools.stderr
    assert [e["name"] for e in tools.json["data"]["excluded"]] == INVALID_NAMES
    call = run_bkmcp("--config", str(config), "--timeout", "20s", "s", "invalid_number_header", "--score", "1")
    assert call.exit_status == 1 and call.error_code == "mcp_tool_not_found"
    methods = [json.loads(line)["rpc_method"] for line in log.read_text(encoding="utf-8").splitlines()]
    assert "tools/list" in methods and "tools/call" not in methods
