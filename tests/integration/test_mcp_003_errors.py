"""MCP-003 arguments and errors: JSON-RPC errors, isError results, malformed results, input_required, tasks,
URL elicitation and server -> client requests — each classified, with the raw result kept, and tools/call
received exactly once by the server.

Seed rows: R02 (success, HTTP error, JSON-RPC error, isError, malformed), R04 (unsupported interactive/async
answers are never reported as complete, never polled or answered interactively; identifiers kept).
"""

from __future__ import annotations

import pytest

from mock_server.mcp_mock import mock_tool
from tests.helpers import VERSIONS, Result

pytestmark = [pytest.mark.integration, pytest.mark.scenario]

ALL = [*VERSIONS]


def call(target, tool: str, body: str = "{}"):
    result = target.run(target.name, tool, "--body", body)
    assert target.count("tools/call") == 1, target.methods()
    assert target.count("tasks/get") == 0 and target.count("tasks/result") == 0
    return result


@pytest.mark.parametrize("mode", ["json", "sse"])
@pytest.mark.parametrize("version", ALL)
def test_MCP_003_is_error_result_is_tool_error_with_raw_result_R02(mock, version, mode):
    target = mock({"response_mode": mode}, protocol_version=version)
    result = call(target, "fail", '{"reason":"because"}')
    assert result.exit_status == 2
    assert result.json["error"]["code"] == "mcp_tool_error"
    assert result.json["data"]["result"]["isError"] is True
    assert result.json["data"]["result"]["content"][0]["text"] == "mock tool failure"


@pytest.mark.parametrize("version", ALL)
def test_MCP_003_json_rpc_error_keeps_code_message_data_R02(mock, version):
    tool = mock_tool("boom", "rpc_error", code=-32602, message="bad argument x", data={"field": "x"})
    target = mock({"tools": [tool]}, protocol_version=version)
    result = call(target, "boom")
    assert result.exit_status == 2
    error = result.json["error"]
    assert error["code"] == "mcp_protocol_error"
    assert error["rpc_error"] == {"code": -32602, "message": "bad argument x", "data": {"field": "x"}}
    assert "outcome" not in error  # the server answered: the outcome is known
    assert result.json["data"]["tool"] == "boom"


@pytest.mark.parametrize("variant", ["no_content", "not_object", "null"])
@pytest.mark.parametrize("version", ["2025-06-18", "2026-07-28"])
def test_MCP_003_malformed_result_is_protocol_error_outcome_unknown_R02(mock, version, variant):
    target = mock({"tools": [mock_tool("bad", "malformed", variant=variant)]}, protocol_version=version)
    result = call(target, "bad")
    assert result.exit_status == 2 and result.error_code == "mcp_protocol_error"
    assert result.json["error"]["outcome"] == "unknown"


@pytest.mark.parametrize("mode", ["json", "sse"])
def test_MCP_003_malformed_json_on_call_is_protocol_error_outcome_unknown_R02(mock, mode):
    target = mock({"response_mode": mode, "faults": {"malformed_json": ["tools/call"]}}, protocol_version="2025-11-25")
    result = call(target, "echo", '{"text":"x"}')
    assert result.exit_status == 2 and result.error_code == "mcp_protocol_error"
    assert result.json["error"]["outcome"] == "unknown"


def test_MCP_003_unknown_result_type_is_protocol_error_R02(mock):
    target = mock({"tools": [mock_tool("odd", "unknown_result_type")]}, protocol_version="2026-07-28")
    result = call(target, "odd")
    assert result.exit_status == 2 and result.error_code == "mcp_protocol_error"
    assert "mystery" in result.json["error"]["message"]


@pytest.mark.parametrize("status", [500, 400])
def test_MCP_003_http_error_status_on_call_R02(mock, status):
    target = mock({"faults": {"status_on": {"tools/call": status}}}, protocol_version="2025-11-25")
    result = call(target, "echo", '{"text":"x"}')
    assert result.exit_status == 2 and result.error_code == "mcp_protocol_error"
    assert result.json["error"]["http_status"] == status
    if status >= 500:
        assert result.json["error"]["outcome"] == "unknown"


def call_headless(target, tool: str, tmp_path) -> Result:
    result = target.run(target.name, tool, "--body", "{}", env={"XDG_STATE_HOME": str(tmp_path)})
    assert target.count("tools/call") == 1, target.methods()
    return result


def test_MCP_003_input_required_headless_is_input_required_with_the_question_R04(mock, tmp_path):
    target = mock({"tools": [mock_tool("ask", "input_required")]}, protocol_version="2026-07-28")
    result = call_headless(target, "ask", tmp_path)
    assert result.exit_status == 2 and result.error_code == "input_required"
    assert result.json["error"]["input_requests"] == ["confirm"]
    assert result.json["data"]["input_requests"]["confirm"]["method"] == "elicitation/create"
    assert result.json["data"]["resume"]  # kept for a later --resume (tests/integration/test_input_required.py)


@pytest.mark.parametrize("version", ["2025-11-25", "2026-07-28"])
def test_MCP_003_task_result_is_capability_unsupported_keeping_task_id_R04(mock, version):
    target = mock({"tools": [mock_tool("slowjob", "task")]}, protocol_version=version)
    result = call(target, "slowjob")
    assert result.exit_status == 2 and result.error_code == "mcp_capability_unsupported"
    task_id = result.json["error"]["task_id"]
    assert task_id.startswith("task-")
    assert task_id in result.stdout.split('"data"')[1]  # raw result kept in data


@pytest.mark.parametrize("version", ["2025-11-25", "2026-07-28"])
def test_MCP_003_url_elicitation_headless_is_reported_with_url_R04(mock, version, tmp_path):
    target = mock(
        {"tools": [mock_tool("login", "url_elicitation", url="https://auth.example.com/a?x=1")]},
        protocol_version=version,
    )
    result = call_headless(target, "login", tmp_path)
    if version == "2025-11-25":  # -32042: the server ended the call; nothing to answer
        assert result.exit_status == 2 and result.error_code == "mcp_capability_unsupported"
    else:  # a URL-mode question nobody on a terminal could consent to: never answered, never opened
        assert result.exit_status == 2 and result.error_code == "input_required"
        assert result.json["data"]["input_requests"]["login"]["url"] == "https://auth.example.com/a?x=1"
    assert "https://auth.example.com/a?x=1" in result.stdout


def test_MCP_003_legacy_ping_from_server_is_answered_and_call_succeeds_R04(mock):
    target = mock({"response_mode": "sse", "faults": {"server_request_on_call": "ping"}}, protocol_version="2025-11-25")
    result = call(target, "echo", '{"text":"x"}')
    assert result.exit_status == 0, result.stdout
    [answer] = target.srv.client_responses
    assert answer["result"] == {} and answer["id"] == "mock-srv-1"


@pytest.mark.parametrize("method", ["sampling/createMessage", "roots/list"])
def test_MCP_003_legacy_sampling_or_roots_request_is_declined_and_reported_R04(mock, method):
    target = mock({"response_mode": "sse", "faults": {"server_request_on_call": method}}, protocol_version="2025-06-18")
    result = call(target, "echo", '{"text":"x"}')
    assert result.exit_status == 2 and result.error_code == "mcp_capability_unsupported"
    assert result.json["error"]["server_requests"] == [method]
    assert "result" in result.json["data"]  # the raw result is kept
    [answer] = target.srv.client_responses
    assert answer["error"]["code"] == -32601
    assert method in result.stderr  # reported on stderr


def test_MCP_003_legacy_elicitation_request_headless_is_answered_cancel_and_reported_R04(mock, tmp_path):
    target = mock(
        {"response_mode": "sse", "faults": {"server_request_on_call": "elicitation/create"}},
        protocol_version="2025-06-18",
    )
    result = target.run(target.name, "echo", "--body", '{"text":"x"}', env={"XDG_STATE_HOME": str(tmp_path)})
    assert target.count("tools/call") == 1
    assert result.exit_status == 2 and result.error_code == "input_required"
    assert result.json["data"]["input_requests"]["elicitation-1"]["message"] == "Please confirm"
    [answer] = target.srv.client_responses
    assert answer["result"] == {"action": "cancel"}  # never decline: nobody said no


def test_MCP_003_legacy_input_required_tool_elicits_and_is_answered_cancel_R04(mock, tmp_path):
    target = mock(
        {"response_mode": "sse", "tools": [mock_tool("ask", "input_required")]}, protocol_version="2025-11-25"
    )
    result = call_headless(target, "ask", tmp_path)
    assert result.exit_status == 2 and result.error_code == "input_required"
    assert target.srv.client_responses[0]["result"] == {"action": "cancel"}


def test_MCP_003_unknown_tool_is_local_error_after_complete_discovery(mock):
    target = mock({}, protocol_version="2026-07-28")
    result = target.run(target.name, "ecko", "--body", "{}")
    assert result.exit_status == 1 and result.error_code == "mcp_tool_not_found"
    assert target.count("tools/call") == 0


def test_MCP_003_image_content_stays_base64(mock):
    target = mock({"tools": [mock_tool("pic", "image")]}, protocol_version="2025-11-25")
    result = call(target, "pic")
    assert result.exit_status == 0
    assert result.json["data"]["result"]["content"][0]["data"].startswith("iVBOR")
