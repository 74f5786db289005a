"""A bare value after the tool (issue 28 item 4, docs/contract.md §2): the usage error names the tool's flags, and
the flag to write when exactly one required flag takes a string; the tool is discovered, never called. Real HTTP on
127.0.0.1 against the mock."""

from __future__ import annotations

import pytest

from mock_server.mcp_mock import mock_tool
from tests.helpers import run_bkmcp

pytestmark = [pytest.mark.integration]

LIST_DIRECTORY = mock_tool(
    "list_directory", properties={"path": {"type": "string"}, "depth": {"type": "integer"}}, required=["path"]
)


def test_a_positional_value_names_the_one_required_string_flag(mock):
    target = mock({"tools": [LIST_DIRECTORY]})
    result = target.run(target.name, "list_directory", "./my notes")
    assert result.exit_status == 1 and result.error_code == "usage_error" and result.stdout == ""
    error = result.json["error"]
    assert error["message"] == (
        "unexpected argument './my notes': tool arguments are flags (--name VALUE); this tool's: "
        "--path STRING (required), --depth INTEGER"
    )
    assert (
        error["hint"]
        == f"write --path './my notes'; every flag: bkmcp --config {target.config} m list_directory --help"
    )
    assert target.count("tools/list") == 1 and target.count("tools/call") == 0


def test_the_rest_of_an_unquoted_value_says_quote_it(mock):
    target = mock()
    result = target.run(target.name, "echo", "--text", "hello", "world")
    assert result.exit_status == 1 and result.error_code == "usage_error"
    assert "this tool's: --text STRING (required), --count INTEGER" in result.json["error"]["message"]
    assert result.json["error"]["hint"].startswith("quote a value that contains spaces (--text 'two words')")
    assert target.count("tools/call") == 0


def test_without_one_required_string_flag_the_hint_points_at_tool_help(mock):
    many = {f"p{i}": {"type": "string"} for i in range(10)}
    tools = [
        mock_tool("two", properties={"a": {"type": "string"}, "b": {"type": "string"}}, required=["a", "b"]),
        mock_tool("many", properties=many),
        mock_tool("none"),
    ]
    target = mock({"tools": tools})
    two = target.run(target.name, "two", "x").json["error"]
    assert two["hint"] == f"every flag with its meaning: bkmcp --config {target.config} m two --help"
    many_error = target.run(target.name, "many", "x").json["error"]
    assert many_error["message"].endswith("--p7 STRING, … (2 more)")
    none = target.run(target.name, "none", "x").json["error"]
    assert none["message"] == "unexpected argument 'x': tool 'none' has no flags"
    assert (
        none["hint"] == f"pass its arguments as one JSON object: bkmcp --config {target.config} m none --body '{{...}}'"
    )
    assert target.count("tools/call") == 0


@pytest.mark.parametrize(
    "extra", [("--body", "{}"), ("--help",), ("--body", "{}", "--dry-run")], ids=["body", "help", "dry-run"]
)
def test_with_body_help_or_dry_run_a_positional_value_fails_before_any_request(mock, extra):
    target = mock()
    result = target.run(target.name, "echo", "stray", *extra)
    assert result.exit_status == 1 and result.error_code == "usage_error"
    assert result.json["error"]["message"] == "unexpected argument 'stray'"
    assert target.srv.log == []


def test_an_unknown_tool_is_still_not_found_first(mock):
    target = mock()
    result = target.run(target.name, "nosuch", "x")
    assert result.error_code == "mcp_tool_not_found"


def test_the_swallowed_flag_case_keeps_its_immediate_hint():
    result = run_bkmcp("srv", "tool", "--loud", "--text", "x")
    assert result.error_code == "usage_error" and "--loud took '--text'" in result.json["error"]["hint"]
