"""A server that asks (docs/contract.md §5): legacy ``elicitation/create`` mid-call and 2026-07-28 input_required rounds
(SEP-2322), answered from ``--input`` / ``--inputs`` / ``--input-action``, or reported as ``input_required`` with a
``--resume`` handle that a second process answers. Every test asserts what the mock server received: how many
``tools/call`` requests, their ids, the ``inputResponses`` and the ``requestState`` echoed byte for byte.

Seed row R04 (interactive answers never made up; identifiers kept).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from mock_server.mcp_mock import mock_tool

pytestmark = [pytest.mark.integration]

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
CAPS = "io.modelcontextprotocol/clientCapabilities"


def calls(target) -> list[dict]:
    return [e["json"] for e in target.srv.requests("tools/call")]


def issued(target) -> set[str]:
    return set(target.srv.core.issued_states)


def run(target, tmp_path: Path, *args: str, stdin: str = ""):
    return target.run(*args, env={"XDG_STATE_HOME": str(tmp_path / "state")}, stdin=stdin)


def test_R04_modern_input_round_answered_from_input_retries_with_new_id_and_exact_state(mock, tmp_path):
    target = mock({"tools": [mock_tool("ask", "input_required")]}, protocol_version=MODERN)
    result = run(target, tmp_path, target.name, "ask", "--input", "ok=true")
    assert result.exit_status == 0, result.stdout + result.stderr
    first, retry = calls(target)  # the call, then the retry the server asked for: never a blind resend
    assert first["id"] != retry["id"]
    assert "inputResponses" not in first["params"] and "requestState" not in first["params"]
    assert retry["params"]["inputResponses"] == {"confirm": {"action": "accept", "content": {"ok": True}}}
    [state] = issued(target)
    assert retry["params"]["requestState"] == state  # the exact string, JSON text and non-ASCII inside
    assert retry["params"]["name"] == "ask" and retry["params"]["arguments"] == first["params"]["arguments"]
    assert first["params"]["_meta"][CAPS] == {"elicitation": {"form": {}}}
    assert result.json["data"]["result"]["structuredContent"]["requestState"] == state


def test_R04_modern_headless_without_answers_exits_2_with_resume_that_a_second_process_completes(mock, tmp_path):
    secret = "Bearer s3cr3t-token-value"
    target = mock({"tools": [mock_tool("ask", "input_required")]}, protocol_version=MODERN)
    config = json.loads(target.config.read_text())
    config["mcpServers"][target.name]["headers"] = {"Authorization": secret}
    target.config.write_text(json.dumps(config))
    first = run(target, tmp_path, target.name, "ask", "--body", '{"text": "kept"}')
    assert first.exit_status == 2 and first.error_code == "input_required"
    data = first.json["data"]
    assert data["input_requests"]["confirm"]["message"] == "Please confirm"
    assert data["input_requests"]["confirm"]["requested_schema"]["required"] == ["ok"]
    handle = data["resume"]
    assert len(calls(target)) == 1
    assert calls(target)[0]["params"]["_meta"][CAPS] == {}  # nothing declared: this run could not answer
    folder = tmp_path / "state" / "bkmcp" / "resume"
    [kept] = list(folder.iterdir())
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(kept.stat().st_mode) == 0o600
    text = kept.read_text()
    assert "s3cr3t" not in text and "Authorization" not in text and '"kept"' in text
    second = run(target, tmp_path, target.name, "--resume", handle, "--input", "ok=false")
    assert second.exit_status == 0, second.stdout + second.stderr
    assert second.json["data"]["tool"] == "ask"
    one, two = calls(target)
    [state] = issued(target)
    assert two["id"] != one["id"] and two["params"]["requestState"] == state
    assert two["params"]["arguments"] == {"text": "kept"}
    assert two["params"]["inputResponses"] == {"confirm": {"action": "accept", "content": {"ok": False}}}
    assert not list(folder.iterdir())  # used once
    again = run(target, tmp_path, target.name, "--resume", handle, "--input", "ok=false")
    assert again.exit_status == 1 and again.error_code == "usage_error"
    assert len(calls(target)) == 2


@pytest.mark.parametrize("how", ["answered", "resumed"])
def test_R04_an_answered_call_that_fails_is_the_same_tool_error_answered_now_or_resumed(mock, tmp_path, how):
    """isError: true with no text says "reported an error (isError: true)" (docs/contract.md §7), whether the
    answers came with the call or with --resume in a second process."""
    target = mock({"tools": [mock_tool("ask", "input_required", variant="is_error")]}, protocol_version=MODERN)
    if how == "answered":
        result = run(target, tmp_path, target.name, "ask", "--input", "ok=true")
    else:
        handle = run(target, tmp_path, target.name, "ask").json["data"]["resume"]
        result = run(target, tmp_path, target.name, "--resume", handle, "--input", "ok=true")
    assert result.exit_status == 2 and result.error_code == "mcp_tool_error", result.stdout + result.stderr
    assert result.json["error"]["message"] == "tool 'ask' reported an error (isError: true)"
    assert result.json["data"]["result"]["isError"] is True
    first, retry = calls(target)
    assert retry["params"]["inputResponses"] == {"confirm": {"action": "accept", "content": {"ok": True}}}


def test_R04_resume_handle_for_another_server_is_refused_and_nothing_is_sent(mock, tmp_path):
    target = mock({"tools": [mock_tool("ask", "input_required")]}, protocol_version=MODERN)
    handle = run(target, tmp_path, target.name, "ask").json["data"]["resume"]
    other = mock({"tools": [mock_tool("ask", "input_required")]}, protocol_version=MODERN, name="other")
    result = run(other, tmp_path, "other", "--resume", handle, "--input", "ok=true")
    assert result.exit_status == 1 and "was made for server" in result.json["error"]["message"]
    assert other.count("tools/call") == 0


def test_R04_inputs_empty_object_accepts_with_schema_defaults_SEP1034(mock, tmp_path):
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "score": {"type": "number", "default": 95.5},
            "status": {"type": "string", "enum": ["active", "inactive"], "default": "active"},
            "verified": {"type": "boolean", "default": True},
        },
    }
    target = mock({"tools": [mock_tool("ask", "input_required", schema=schema)]}, protocol_version=MODERN)
    result = run(target, tmp_path, target.name, "ask", "--inputs", "{}")
    assert result.exit_status == 0, result.stdout
    content = calls(target)[1]["params"]["inputResponses"]["confirm"]["content"]
    assert content == {"name": "John Doe", "age": 30, "score": 95.5, "status": "active", "verified": True}


def test_R04_several_questions_answered_by_key_and_by_field_with_defaults(mock, tmp_path):
    target = mock({"tools": [mock_tool("ask", "input_required", variant="several")]}, protocol_version=MODERN)
    result = run(target, tmp_path, target.name, "ask", "--inputs", '{"confirm": {"ok": true}}', "--input", "age=41")
    assert result.exit_status == 0, result.stdout
    responses = calls(target)[1]["params"]["inputResponses"]
    assert responses == {
        "confirm": {"action": "accept", "content": {"ok": True}},
        "profile": {"action": "accept", "content": {"age": 41, "name": "Ada"}},
    }


def test_R04_input_typed_by_the_schema_a_wrong_type_is_reported_with_a_resume_and_no_retry(mock, tmp_path):
    target = mock({"tools": [mock_tool("ask", "input_required")]}, protocol_version=MODERN)
    result = run(target, tmp_path, target.name, "ask", "--input", "ok=maybe")
    assert result.exit_status == 2 and result.error_code == "input_required"
    problems = result.json["data"]["input_requests"]["confirm"]["problems"]
    assert "ok" in problems[0]["message"] and result.json["data"]["resume"]
    assert len(calls(target)) == 1


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_R04_input_action_is_sent_as_said(mock, tmp_path, action):
    target = mock({"tools": [mock_tool("ask", "input_required")]}, protocol_version=MODERN)
    result = run(target, tmp_path, target.name, "ask", "--input-action", action)
    assert result.exit_status == 0, result.stdout
    assert calls(target)[1]["params"]["inputResponses"] == {"confirm": {"action": action}}


def test_R04_server_that_asks_forever_is_stopped_after_the_stated_rounds(mock, tmp_path):
    import bkmcp

    target = mock({"tools": [mock_tool("ask", "input_required", variant="forever")]}, protocol_version=MODERN)
    result = run(target, tmp_path, target.name, "ask", "--input", "ok=true")
    assert result.exit_status == 2 and result.error_code == "mcp_protocol_error"
    assert result.json["error"]["rounds"] == bkmcp.MAX_INPUT_ROUNDS
    sent = calls(target)
    assert len(sent) == bkmcp.MAX_INPUT_ROUNDS + 1 and len({c["id"] for c in sent}) == len(sent)


def test_R04_state_rejected_by_the_server_is_its_error_and_not_retried(mock, tmp_path):
    target = mock({"tools": [mock_tool("ask", "input_required", variant="reject_state")]}, protocol_version=MODERN)
    result = run(target, tmp_path, target.name, "ask", "--input", "ok=true")
    assert result.exit_status == 2 and result.error_code == "mcp_protocol_error"
    assert result.json["error"]["rpc_error"]["message"].startswith("Invalid requestState")
    assert len(calls(target)) == 2


def test_R04_state_only_round_is_retried_with_the_state_and_no_input_responses(mock, tmp_path):
    target = mock({"tools": [mock_tool("ask", "input_required", variant="state_only")]}, protocol_version=MODERN)
    result = run(target, tmp_path, target.name, "ask")
    assert result.exit_status == 0, result.stdout
    first, retry = calls(target)
    assert "inputResponses" not in retry["params"] and retry["params"]["requestState"] in issued(target)


def test_R04_sampling_request_is_never_answered_and_named(mock, tmp_path):
    target = mock({"tools": [mock_tool("ask", "input_required", variant="sampling")]}, protocol_version=MODERN)
    result = run(target, tmp_path, target.name, "ask", "--inputs", "{}")
    assert result.exit_status == 2 and result.error_code == "mcp_capability_unsupported"
    assert result.json["error"]["capability"] == "sampling/createMessage"
    assert len(calls(target)) == 1


def test_R04_prompt_and_resource_rounds_use_the_same_mechanism(mock, tmp_path):
    scenario = {
        "prompts": [{"name": "p", "description": "asks", "x-mock": "input_required"}],
        "resources": [{"uri": "mock://r", "name": "r", "x-mock": "input_required", "x-mock-text": "the text"}],
        "versions": [MODERN],  # negotiated (server/discover), so bkmcp knows it offers prompts and resources
    }
    target = mock(scenario)
    prompt = run(target, tmp_path, target.name, "--prompt", "p", "--input", "ok=true")
    assert prompt.exit_status == 0, prompt.stdout
    asked = run(target, tmp_path, target.name, "--prompt", "p")
    assert asked.exit_status == 2 and asked.json["data"]["prompt"] == "p"
    resumed = run(target, tmp_path, target.name, "--resume", asked.json["data"]["resume"], "--inputs", '{"ok": true}')
    assert resumed.exit_status == 0 and resumed.json["data"]["prompt"] == "p"
    read = run(target, tmp_path, target.name, "--read", "mock://r")
    assert read.exit_status == 2 and read.error_code == "input_required" and read.json["data"]["uri"] == "mock://r"
    done = run(target, tmp_path, target.name, "--resume", read.json["data"]["resume"], "--input", "ok=true")
    assert done.exit_status == 0 and done.json["data"]["result"]["contents"][0]["text"] == "the text"
    gets, reads = target.srv.requests("prompts/get"), target.srv.requests("resources/read")
    assert len(gets) == 4 and gets[1]["json"]["params"]["inputResponses"]["confirm"]["content"] == {"ok": True}
    assert len(reads) == 2 and reads[1]["json"]["params"]["requestState"] in issued(target)


def test_R04_legacy_elicitation_answered_from_input_and_declared_at_initialize(mock, tmp_path):
    target = mock({"response_mode": "sse", "tools": [mock_tool("ask", "input_required")]}, protocol_version=LEGACY)
    result = run(target, tmp_path, target.name, "ask", "--input", "ok=true")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert target.srv.client_responses[0]["result"] == {"action": "accept", "content": {"ok": True}}
    [init] = target.srv.requests("initialize")
    assert init["json"]["params"]["capabilities"] == {"elicitation": {"form": {}}}
    assert target.count("tools/call") == 1


def test_R04_legacy_headless_question_is_answered_cancel_never_decline_and_reported(mock, tmp_path):
    target = mock({"response_mode": "sse", "tools": [mock_tool("ask", "input_required")]}, protocol_version=LEGACY)
    result = run(target, tmp_path, target.name, "ask")
    assert result.exit_status == 2 and result.error_code == "input_required"
    assert target.srv.client_responses[0]["result"] == {"action": "cancel"}
    question = result.json["data"]["input_requests"]["elicitation-1"]
    assert question["message"] == "Please confirm" and "resume" not in result.json["data"]
    assert "result" in result.json["data"]  # what the server answered after the cancel
    [init] = target.srv.requests("initialize")
    assert init["json"]["params"]["capabilities"] == {}
    assert target.count("tools/call") == 1
    again = run(target, tmp_path, target.name, "ask", "--input", "ok=true")  # the same command, answered
    assert again.exit_status == 0
    assert target.srv.client_responses[1]["result"] == {"action": "accept", "content": {"ok": True}}


def test_R04_legacy_answer_that_does_not_fit_is_said_and_answered_cancel(mock, tmp_path):
    target = mock({"response_mode": "sse", "tools": [mock_tool("ask", "input_required")]}, protocol_version=LEGACY)
    result = run(target, tmp_path, target.name, "ask", "--input", "ok=maybe")
    assert result.exit_status == 2 and result.error_code == "input_required"
    assert target.srv.client_responses[0]["result"] == {"action": "cancel"}
    assert "ok=true" in result.json["data"]["input_requests"]["elicitation-1"]["problems"][0]["message"]
    other = run(target, tmp_path, target.name, "ask", "--input", "nope=1")  # fits no field: no answer at hand
    assert other.exit_status == 2 and "problems" not in other.json["data"]["input_requests"]["elicitation-1"]
    assert target.srv.client_responses[1]["result"] == {"action": "cancel"}


def test_R04_answers_without_a_target_are_a_usage_error(mock, tmp_path):
    target = mock({}, protocol_version=MODERN)
    result = run(target, tmp_path, target.name, "--tools", "--input", "a=1")
    assert result.exit_status == 1 and result.error_code == "usage_error"
    bad = run(target, tmp_path, target.name, "echo", "--input-action", "accept")
    assert bad.exit_status == 1 and "decline or cancel" in bad.json["error"]["message"]
    assert target.count("tools/call") == 0


def test_R04_no_request_is_ever_answered_decline_unless_said(mock, tmp_path):
    tools = [mock_tool("ask", "input_required"), mock_tool("two", "input_required", variant="several")]
    modern = mock({"tools": tools}, protocol_version=MODERN)
    legacy = mock({"response_mode": "sse", "tools": tools}, protocol_version=LEGACY, name="old")
    for target in (modern, legacy):
        for args in ([], ["--input", "ok=maybe"], ["--inputs", "{}"], ["--input", "ok=true"]):
            for tool in ("ask", "two"):
                run(target, tmp_path, target.name, tool, *args)
    sent = [r.get("result", {}).get("action") for r in legacy.srv.client_responses]
    sent += [a.get("action") for c in calls(modern) for a in (c["params"].get("inputResponses") or {}).values()]
    assert sent and "decline" not in sent
    assert os.path.isdir(tmp_path / "state")


def test_R04_legacy_question_on_the_standalone_get_stream_is_answered_and_the_stream_closed(mock, tmp_path):
    scenario = {"standalone_get": True, "tools": [mock_tool("ask", "input_required")]}
    target = mock(scenario, protocol_version=LEGACY)
    result = run(target, tmp_path, target.name, "ask", "--input", "ok=true")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert target.srv.client_responses[0]["result"] == {"action": "accept", "content": {"ok": True}}
    [get] = target.srv.requests(http_method="GET")  # opened once, after initialize, because it declared elicitation
    assert get["headers"]["accept"] == "text/event-stream" and "last-event-id" not in get["headers"]
    assert target.count("tools/call") == 1
    plain = mock(scenario, protocol_version=LEGACY, name="plain")
    run(plain, tmp_path, "plain", "echo", "--body", "{}")
    assert plain.srv.requests(http_method="GET") == []  # nothing declared: no stream opened


def test_R04_resume_handles_expire_are_single_files_and_never_leave_the_folder(mock, tmp_path):
    target = mock({"tools": [mock_tool("ask", "input_required")]}, protocol_version=MODERN)
    handle = run(target, tmp_path, target.name, "ask").json["data"]["resume"]
    kept = tmp_path / "state" / "bkmcp" / "resume" / f"{handle}.json"
    record = json.loads(kept.read_text())
    record["expires_at"] = 1
    kept.write_text(json.dumps(record))
    expired = run(target, tmp_path, target.name, "--resume", handle, "--input", "ok=true")
    assert expired.exit_status == 1 and "expired" in expired.json["error"]["message"] and not kept.exists()
    for text in ("{not json", "{}"):
        damaged = run(target, tmp_path, target.name, "ask").json["data"]["resume"]
        (kept.parent / f"{damaged}.json").write_text(text)
        assert run(target, tmp_path, target.name, "--resume", damaged, "--input", "ok=true").exit_status == 1
    outside = run(target, tmp_path, target.name, "--resume", "../../../etc/passwd", "--input", "ok=true")
    assert outside.exit_status == 1 and outside.error_code == "usage_error"
    assert len(calls(target)) == 3  # the first calls only: no retry was ever sent


def test_R04_a_round_that_cannot_be_kept_is_still_reported_with_a_warning(mock, tmp_path):
    target = mock({"tools": [mock_tool("ask", "input_required")]}, protocol_version=MODERN)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    result = target.run(target.name, "ask", env={"XDG_STATE_HOME": str(blocker)})
    assert result.exit_status == 2 and result.error_code == "input_required"
    assert "resume" not in result.json["data"] and "could not be kept" in result.stderr


def test_R04_inputs_from_a_file_and_from_stdin(mock, tmp_path):
    target = mock({"tools": [mock_tool("ask", "input_required")]}, protocol_version=MODERN)
    answers = tmp_path / "answers.json"
    answers.write_text('{"ok": true}')
    from_file = run(target, tmp_path, target.name, "ask", "--inputs", f"@{answers}")
    from_stdin = run(target, tmp_path, target.name, "ask", "--inputs", "-", stdin='{"ok": false}')
    assert from_file.exit_status == 0 and from_stdin.exit_status == 0
    sent = [
        c["params"]["inputResponses"]["confirm"]["content"] for c in calls(target) if "inputResponses" in c["params"]
    ]
    assert sent == [{"ok": True}, {"ok": False}]
    bad = run(target, tmp_path, target.name, "ask", "--inputs", "[1]")
    assert bad.exit_status == 1 and "--inputs must be a JSON object" in bad.json["error"]["message"]


def test_R04_resume_on_a_server_now_legacy_sends_nothing(mock, tmp_path):
    target = mock({"tools": [mock_tool("ask", "input_required")]}, protocol_version=MODERN)
    handle = run(target, tmp_path, target.name, "ask").json["data"]["resume"]
    config = json.loads(target.config.read_text())
    config["mcpServers"][target.name]["protocolVersion"] = LEGACY
    target.config.write_text(json.dumps(config))
    result = run(target, tmp_path, target.name, "--resume", handle, "--input", "ok=true")
    assert result.exit_status == 2 and result.error_code == "mcp_protocol_error"
    assert result.json["error"]["outcome"] == "not_sent" and len(calls(target)) == 1


def test_R04_a_state_folder_open_to_others_is_not_used(mock, tmp_path):
    target = mock({"tools": [mock_tool("ask", "input_required")]}, protocol_version=MODERN)
    folder = tmp_path / "state" / "bkmcp" / "resume"
    folder.mkdir(parents=True)
    folder.chmod(0o755)
    result = run(target, tmp_path, target.name, "ask")
    assert result.exit_status == 2 and "resume" not in result.json["data"]
    assert "not a private directory" in result.stderr and not list(folder.iterdir())
