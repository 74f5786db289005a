"""Resident mode with ``--elicitation forward`` (docs/contract.md §11.2 "A server that asks", docs/resident.md): a
2026-07-28 server's input_required round answered to the platform as ``{"status": "input_required", …}`` and
retried on its resume with ``input_responses`` and the ``requestState`` echoed exactly; a resume bound to its user,
action and server instance; a per-user cap; expiry; events without values. Off by default (test_resident_core)."""

from __future__ import annotations

import json
import time

import pytest
from resident_harness import http_row, mock_stdio, stdio_row, write_registry

from mock_server.mcp_mock import mock_tool

CAPS = "io.modelcontextprotocol/clientCapabilities"
ACCEPT = {"confirm": {"action": "accept", "content": {"ok": True}}}


def registry(tmp_path, rows):
    path = tmp_path / "registry.db"
    write_registry(str(path), rows)
    return path


def calls(srv) -> list[dict]:
    return [e["json"] for e in srv.requests("tools/call")]


def resumed(send, user: str, server: str, asked: dict, answers: dict = ACCEPT, tool: str = "ask", **params) -> dict:
    """``call_tool`` of ``tool`` on ``server`` as ``user`` resuming the round ``asked`` with ``answers``; ``send`` is
    ``res.ok`` (it must succeed) or ``res.ask`` (the answer as it came)."""
    return send(
        "call_tool", user, server_name=server, tool_name=tool, resume=asked["resume"], input_responses=answers, **params
    )


def test_forwarded_round_resumed_with_exact_state_and_new_id(tmp_path, resident, http_mock):
    srv = http_mock({"tools": [mock_tool("ask", "input_required")]})
    res = resident(registry(tmp_path, [http_row("pub", srv.url)]), "--elicitation", "forward")
    asked = res.ok("call_tool", "u1", server_name="pub", tool_name="ask", arguments={"text": "kept-arg-7"})
    assert asked["status"] == "input_required" and asked["server_name"] == "pub" and asked["tool_name"] == "ask"
    assert asked["input_requests"]["confirm"]["message"] == "Please confirm"
    assert asked["input_requests"]["confirm"]["requested_schema"]["required"] == ["ok"]
    assert asked["expires_in_ms"] == 300000 and asked["resume"].startswith("in-")
    assert len(calls(srv)) == 1 and calls(srv)[0]["params"]["_meta"][CAPS] == {"elicitation": {"form": {}}}
    done = resumed(res.ok, "u1", "pub", asked, arguments={})
    assert done["result"].get("isError") is not True and "status" not in done
    first, retry = calls(srv)
    [state] = srv.core.issued_states
    assert retry["id"] != first["id"] and retry["params"]["requestState"] == state  # byte for byte
    assert retry["params"]["inputResponses"] == ACCEPT
    assert retry["params"]["arguments"] == {"text": "kept-arg-7"}  # the request that asked, not the platform's
    assert done["result"]["structuredContent"]["requestState"] == state
    # a handle is used once
    again = resumed(res.ask, "u1", "pub", asked, {})
    assert again["error_code"] == "input_resume_invalid" and len(calls(srv)) == 2
    names = [e["event"] for e in res.events() if e["event"].startswith("input.")]
    assert names == ["input.requested", "input.answered"]
    text = res.events_path.read_text()
    assert "kept-arg-7" not in text and state not in text and '"ok"' not in text  # events carry no values


def test_another_users_resume_is_refused_and_nothing_is_sent(tmp_path, resident, http_mock):
    srv = http_mock({"tools": [mock_tool("ask", "input_required")]})
    res = resident(registry(tmp_path, [http_row("pub", srv.url)]), "--elicitation", "forward")
    asked = res.ok("call_tool", "alice", server_name="pub", tool_name="ask", arguments={"text": "alice-only-31"})
    stolen = resumed(res.ask, "bob", "pub", asked, arguments={})
    assert stolen["success"] is False and stolen["error_code"] == "input_resume_invalid"
    assert "alice-only-31" not in json.dumps(stolen) and len(calls(srv)) == 1
    wrong_action = res.ask(
        "get_prompt", "alice", server_name="pub", name="ask", resume=asked["resume"], input_responses=ACCEPT
    )
    assert wrong_action["error_code"] == "input_resume_invalid"
    done = resumed(res.ok, "alice", "pub", asked)
    assert done["result"]["structuredContent"]["requestState"] in srv.core.issued_states
    assert [c["params"]["arguments"] for c in calls(srv)] == [{"text": "alice-only-31"}] * 2


def test_several_questions_state_only_and_forever_each_round_resumed(tmp_path, resident, http_mock):
    tools = [
        mock_tool("two", "input_required", variant="several"),
        mock_tool("st", "input_required", variant="state_only"),
        mock_tool("ever", "input_required", variant="forever"),
        mock_tool("rej", "input_required", variant="reject_state"),
    ]
    srv = http_mock({"tools": tools})
    res = resident(registry(tmp_path, [http_row("pub", srv.url)]), "--elicitation", "forward")
    asked = res.ok("call_tool", "u", server_name="pub", tool_name="two", arguments={})
    assert set(asked["input_requests"]) == {"confirm", "profile"}
    partial = resumed(res.ok, "u", "pub", asked, tool="two")  # one of two answered: asked again, nothing made up
    assert partial["status"] == "input_required" and list(partial["input_requests"]) == ["profile"]
    assert len(calls(srv)) == 1
    profile = {"profile": {"action": "accept", "content": {"name": "Ada"}}}
    both = resumed(res.ok, "u", "pub", partial, profile, tool="two")  # the first answer was kept with the round
    assert "result" in both and calls(srv)[-1]["params"]["inputResponses"] == {**ACCEPT, **profile}
    st = res.ok("call_tool", "u", server_name="pub", tool_name="st", arguments={})  # a state only: no question
    assert "result" in st
    first, retry = calls(srv)[-2:]
    assert "inputResponses" not in retry["params"] and retry["params"]["requestState"] in srv.core.issued_states
    assert first["id"] != retry["id"]
    ever = res.ok("call_tool", "u", server_name="pub", tool_name="ever", arguments={})
    for _ in range(3):  # each round is the platform's: the resident never answers a later round by itself
        before = len(calls(srv))
        ever = resumed(res.ok, "u", "pub", ever, tool="ever")
        assert ever["status"] == "input_required" and len(calls(srv)) == before + 1
    rej = res.ok("call_tool", "u", server_name="pub", tool_name="rej", arguments={})
    refused = resumed(res.ask, "u", "pub", rej, tool="rej")
    assert refused["success"] is False and "requestState" in refused["error"]  # the server's error, not retried
    assert [c["params"]["name"] for c in calls(srv)].count("rej") == 2


def test_prompt_and_resource_ask_and_resume(tmp_path, resident, http_mock):
    srv = http_mock(
        {
            "prompts": [{"name": "p", "description": "asks", "x-mock": "input_required"}],
            "resources": [{"uri": "mock://r", "name": "r", "x-mock": "input_required", "x-mock-text": "the text"}],
        }
    )
    res = resident(registry(tmp_path, [http_row("pub", srv.url)]), "--elicitation", "forward")
    asked = res.ok("get_prompt", "u", server_name="pub", name="p")
    assert asked["status"] == "input_required" and asked["name"] == "p"
    done = res.ok("get_prompt", "u", server_name="pub", name="p", resume=asked["resume"], input_responses=ACCEPT)
    assert done["result"]["messages"]
    gets = [e["json"] for e in srv.requests("prompts/get")]
    assert len(gets) == 2 and gets[1]["params"]["requestState"] in srv.core.issued_states
    read = res.ok("read_resource", "u", server_name="pub", uri="mock://r")
    assert read["status"] == "input_required" and read["uri"] == "mock://r"
    text = res.ok(
        "read_resource", "u", server_name="pub", uri="mock://r", resume=read["resume"], input_responses=ACCEPT
    )
    assert text["result"]["contents"][0]["text"] == "the text"
    reads = [e["json"] for e in srv.requests("resources/read")]
    assert len(reads) == 2 and reads[1]["params"]["inputResponses"] == ACCEPT


def test_cap_per_user_and_expiry_with_event(tmp_path, resident, http_mock):
    srv = http_mock({"tools": [mock_tool("ask", "input_required")]})
    res = resident(registry(tmp_path, [http_row("pub", srv.url)]), "--elicitation", "forward", "--input-timeout", "2s")
    kept = [res.ok("call_tool", "u", server_name="pub", tool_name="ask", arguments={}) for _ in range(8)]
    assert all(k["status"] == "input_required" and k["expires_in_ms"] == 2000 for k in kept)
    over = res.ask("call_tool", "u", server_name="pub", tool_name="ask", arguments={})
    assert over["error_code"] == "input_pending_limit"
    assert res.ok("call_tool", "other", server_name="pub", tool_name="ask", arguments={})["status"] == "input_required"
    res.wait_event("input.expired", count=9)
    late = resumed(res.ask, "u", "pub", kept[0])
    assert late["error_code"] == "input_resume_invalid" and len(calls(srv)) == 10
    assert all(set(e) <= {"ts", "event", "server", "user", "task_id", "method"} for e in res.events("input.expired"))


def test_off_by_default_resume_refused(tmp_path, resident, http_mock):
    srv = http_mock({"tools": [mock_tool("ask", "input_required")]})
    res = resident(registry(tmp_path, [http_row("pub", srv.url)]))
    answer = res.ask(
        "call_tool", "u", server_name="pub", tool_name="ask", arguments={}, resume="in-x", input_responses=ACCEPT
    )
    assert answer["error_code"] == "input_resume_invalid" and calls(srv) == []
    bad = res.ask("call_tool", "u", server_name="pub", tool_name="ask", resume="in-x", input_responses={"k": 1})
    assert bad["error_code"] == "invalid_command"


# -- legacy: an elicitation/create held open while the platform answers ----------------------------------------------

LEGACY = {"versions": ["2025-11-25"], "response_mode": "sse", "tools": [mock_tool("ask", "input_required")]}
ANSWERED = {"elicitation-1": {"action": "accept", "content": {"ok": True}}}  # the legacy elicitation/create accepted


def test_legacy_question_held_open_answered_by_the_resume_one_call(tmp_path, resident, http_mock):
    old = http_mock(LEGACY)
    res = resident(registry(tmp_path, [http_row("old", old.url)]), "--elicitation", "forward")
    asked = res.ok("call_tool", "alice", server_name="old", tool_name="ask", arguments={"text": "legacy-arg-5"})
    assert asked["status"] == "input_required" and asked["input_requests"]["elicitation-1"]["message"] == (
        "Please confirm"
    )
    assert old.client_responses == []  # held open: nothing answered yet, never a decline
    assert old.requests("initialize")[0]["json"]["params"]["capabilities"] == {"elicitation": {"form": {}}}
    stolen = resumed(res.ask, "bob", "old", asked, {"elicitation-1": {"action": "accept", "content": {"ok": False}}})
    assert stolen["error_code"] == "input_resume_invalid" and old.client_responses == []
    done = resumed(res.ok, "alice", "old", asked, ANSWERED)
    assert [r["result"] for r in old.client_responses] == [{"action": "accept", "content": {"ok": True}}]
    assert "result" in done and "status" not in done
    assert len(old.requests("tools/call")) == 1  # the same call, never sent again
    assert [e["event"] for e in res.events() if e["event"].startswith("input.")] == [
        "input.requested",
        "input.answered",
    ]
    assert "legacy-arg-5" not in res.events_path.read_text()


def test_legacy_question_expired_is_answered_cancel(tmp_path, resident, http_mock):
    old = http_mock(LEGACY)
    res = resident(registry(tmp_path, [http_row("old", old.url)]), "--elicitation", "forward", "--input-timeout", "1s")
    asked = res.ok("call_tool", "u", server_name="old", tool_name="ask", arguments={})
    assert asked["status"] == "input_required" and asked["expires_in_ms"] == 1000
    res.wait_event("input.expired")  # the answer was sent before the event was written
    assert [r["result"] for r in old.client_responses] == [{"action": "cancel"}]
    late = resumed(res.ask, "u", "old", asked, ANSWERED)
    assert late["error_code"] == "input_resume_invalid" and len(old.requests("tools/call")) == 1


def test_idle_reaping_keeps_a_user_server_holding_a_question_stdio(tmp_path, resident):
    """A per-user stdio server holding a kept round outlives --idle-timeout; the resume reaches that very instance."""
    argv = mock_stdio({"tools": [mock_tool("ask", "input_required")]})
    reg = tmp_path / "registry.db"
    write_registry(str(reg), [stdio_row("mine", argv)], {"mine": {}})
    res = resident(reg, "--elicitation", "forward", "--idle-timeout", "1s")
    asked = res.ok("call_tool", "u", server_name="mine", tool_name="ask", arguments={})
    assert asked["status"] == "input_required"
    time.sleep(3)  # three idle timeouts: an idle instance without a question would be reaped by now
    assert res.events("process.exited") == []
    done = resumed(res.ok, "u", "mine", asked)
    assert done["result"]["structuredContent"]["requestState"].startswith("mock-state-")
    assert len(res.events("process.started")) == 1


def test_legacy_stdio_question_held_open_on_the_shared_stream(tmp_path, resident):
    log = tmp_path / "mock.log"
    argv = mock_stdio({"versions": ["2025-11-25"], "tools": [mock_tool("ask", "input_required")]}, log=log)
    reg = tmp_path / "registry.db"
    write_registry(str(reg), [stdio_row("mine", argv)], {"mine": {}})
    res = resident(reg, "--elicitation", "forward")
    asked = res.ok("call_tool", "u", server_name="mine", tool_name="ask", arguments={})
    assert asked["status"] == "input_required" and "elicitation-1" in asked["input_requests"]
    done = resumed(res.ok, "u", "mine", asked, ANSWERED)
    assert "result" in done and json.dumps({"action": "accept", "content": {"ok": True}}) in json.dumps(done)


@pytest.mark.interop
def test_interop_sdk_input_required_tools_through_the_resident(tmp_path, resident, sdk_stdio_argv):
    """The Python SDK everything-server's SEP-2322 fixtures (tests/integration/test_input_required_interop.py)."""
    reg = tmp_path / "registry.db"
    row = stdio_row("sdk", sdk_stdio_argv("stateful-sse") + ["--input-fixtures"], isolation="public")
    write_registry(str(reg), [row])
    res = resident(reg, "--elicitation", "forward")
    values = {"name": "Ada", "color": "teal", "ok": True, "context": "release notes"}

    def answered(action: str, **target) -> dict:
        """Run ``action`` and answer each round from ``values`` by the requested schema's fields (at most 4)."""
        answer = res.ok(action, "u", server_name="sdk", **target)
        for _ in range(4):
            if answer.get("status") != "input_required":
                return answer
            responses = {
                key: {
                    "action": "accept",
                    "content": {f: values[f] for f in question["requested_schema"]["properties"]},
                }
                for key, question in answer["input_requests"].items()
            }
            answer = res.ok(
                action, "u", server_name="sdk", resume=answer["resume"], input_responses=responses, **target
            )
        raise AssertionError(answer)

    multi = answered("call_tool", tool_name="test_input_required_result_multi_round")
    assert multi["result"]["content"][0]["text"] == "Ada likes teal."
    tampered = answered("call_tool", tool_name="test_input_required_result_tampered_state")
    assert tampered["result"]["content"][0]["text"] == "state-ok: round-1"  # the state echoed exactly
    single = answered("call_tool", tool_name="test_input_required_result_elicitation")
    assert single["result"]["content"][0]["text"] == "Hello, Ada!"
    text = answered("get_prompt", name="test_input_required_result_prompt")
    assert text["result"]["messages"][0]["content"]["text"] == "Use the following context: release notes"


def test_resume_after_the_server_instance_was_restarted_is_refused(tmp_path, resident):
    argv = mock_stdio({"tools": [mock_tool("ask", "input_required")]})
    reg = tmp_path / "registry.db"
    write_registry(str(reg), [stdio_row("mine", argv)], {"mine": {}})
    res = resident(reg, "--elicitation", "forward")
    asked = res.ok("call_tool", "u", server_name="mine", tool_name="ask", arguments={})
    res.ok("disconnect_server", "u", server_name="mine")
    again = resumed(res.ask, "u", "mine", asked)
    assert again["error_code"] == "input_resume_invalid" and "restarted" in again["error"]


def test_elicitation_option_is_checked(tmp_path):
    from tests.helpers import run_bkmcp

    result = run_bkmcp("--resident", "--registry", str(tmp_path / "r.db"), "--elicitation", "always")
    assert result.exit_status == 1 and result.error_code == "usage_error" and "off or forward" in result.stderr


def test_legacy_questions_over_the_per_user_cap_are_answered_cancel(tmp_path, resident, http_mock):
    old = http_mock(LEGACY)
    res = resident(registry(tmp_path, [http_row("old", old.url)]), "--elicitation", "forward")
    kept = [res.ok("call_tool", "u", server_name="old", tool_name="ask", arguments={}) for _ in range(8)]
    assert all(k["status"] == "input_required" for k in kept) and old.client_responses == []
    over = res.ask("call_tool", "u", server_name="old", tool_name="ask", arguments={})
    assert over["error_code"] == "input_pending_limit"
    assert [r["result"] for r in old.client_responses] == [{"action": "cancel"}]  # the ninth: cancel, never decline
    done = resumed(res.ok, "u", "old", kept[3], {})  # no answer given for its question: cancel
    assert "result" in done and [r["result"] for r in old.client_responses][-1] == {"action": "cancel"}
    assert len(old.requests("tools/call")) == 9
