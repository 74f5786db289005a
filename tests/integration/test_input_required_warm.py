"""A server that asks, through a warm session (docs/contract.md §5, §14): the command's answers travel with it to
the background process; a legacy session that declared elicitation is kept apart from one that did not (each
declared at initialize what its first command could answer); a ``--resume`` gets a session of its own; a client on a
terminal is asked the server's questions there (relayed by the process), and one that presses Ctrl-C while asked
makes the server hear ``cancel``. The warm server runs in this interpreter
(``tests/integration/test_warm_inprocess.py``'s ``Place``); tests/integration/test_terminal_questions.py drives the
same through real pseudo-terminals.

Seed row R04.
"""

from __future__ import annotations

import io
import json
import sys
import time

import pytest

import bkmcp
from mock_server.mcp_mock import DEFAULT_TOOLS, mock_tool
from tests.helpers import ROOT, until, write_mcp_json
from tests.integration.test_warm_inprocess import Place, serving  # noqa: F401 - the fixture

pytestmark = [pytest.mark.integration]


@pytest.fixture
def warm(serving):  # noqa: F811
    return lambda scenario: serving({"tools": [*DEFAULT_TOOLS, mock_tool("ask", "input_required")], **scenario})


def test_R04_warm_legacy_session_that_declared_elicitation_is_kept_apart(warm):
    place = warm({"versions": ["2025-11-25"], "response_mode": "sse"})
    status, out, err = place.main("m", "echo", "--text", "hi", "--keep-alive")
    assert status == 0, out + err
    status, out, err = place.main("m", "ask", "--input", "ok=true", "--keep-alive")
    assert status == 0, out + err
    assert place.srv.client_responses[0]["result"] == {"action": "accept", "content": {"ok": True}}
    inits = [e["json"]["params"]["capabilities"] for e in place.srv.requests("initialize")]
    assert inits == [{}, {"elicitation": {"form": {}}}]
    status, out, err = place.main("m", "ask", "--input", "ok=false", "--keep-alive")  # the declaring one, kept
    assert status == 0 and len(place.srv.requests("initialize")) == 2
    assert len(place.srv.requests("tools/call")) == 3


def test_R04_warm_modern_round_kept_and_resumed_on_a_session_of_its_own(warm):
    place = warm({"versions": ["2026-07-28"]})
    status, out, _err = place.main("m", "ask", "--keep-alive")
    assert status == 2 and json.loads(out)["error"]["code"] == "input_required"
    handle = json.loads(out)["data"]["resume"]
    status, out, err = place.main("m", "--resume", handle, "--input", "ok=true", "--keep-alive")
    assert status == 0, out + err
    first, retry = (e["json"] for e in place.srv.requests("tools/call"))
    assert retry["id"] != first["id"] and retry["params"]["inputResponses"]["confirm"]["content"] == {"ok": True}
    [state] = place.srv.core.issued_states
    assert retry["params"]["requestState"] == state


class Tty(io.StringIO):
    """A terminal's side of the client: what the person types (``readline``), what is shown (``getvalue``)."""

    def isatty(self) -> bool:
        return True


class LeavingTty(Tty):
    """A person who presses Ctrl-C instead of answering."""

    def readline(self, *args) -> str:
        raise KeyboardInterrupt


def on_the_client_terminal(place: Place, typed: Tty, *args: str) -> tuple[int, str, str]:
    out, shown = io.StringIO(), Tty()
    status = bkmcp.main(
        ["--config", str(place.config), *args, "--keep-alive"],
        stdin=typed,
        stdout=out,
        stderr=shown,
        env=place.env,
        cwd=str(place.runtime),
    )
    return status, out.getvalue(), shown.getvalue()


def test_R04_warm_legacy_question_relayed_to_the_client_terminal(warm):
    place = warm({"versions": ["2025-11-25"], "response_mode": "sse"})
    status, out, _err = place.main("m", "ask", "--keep-alive")  # not on a terminal: nobody to ask, cancel
    assert status == 2 and json.loads(out)["error"]["code"] == "input_required"
    status, out, shown = on_the_client_terminal(place, Tty("true\ny\n"), "m", "ask")
    assert status == 0, out + shown
    assert "The server asks: Please confirm" in shown and "Send them?" in shown  # asked here, on the client's side
    answers = [r["result"] for r in place.srv.client_responses]
    assert answers == [{"action": "cancel"}, {"action": "accept", "content": {"ok": True}}]
    inits = [e["json"]["params"]["capabilities"] for e in place.srv.requests("initialize")]
    assert inits == [{}, {"elicitation": {"form": {}, "url": {}}}]  # each declares what its client can answer
    assert len(place.srv.requests("tools/call")) == 2


def test_R04_warm_modern_round_relayed_to_the_client_terminal(warm):
    place = warm({"versions": ["2026-07-28"]})
    status, out, shown = on_the_client_terminal(place, Tty("true\ny\n"), "m", "ask")
    assert status == 0, out + shown
    first, retry = (e["json"] for e in place.srv.requests("tools/call"))
    assert first["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] == {
        "elicitation": {"form": {}, "url": {}}
    }
    assert retry["params"]["inputResponses"] == {"confirm": {"action": "accept", "content": {"ok": True}}}


@pytest.mark.parametrize("version", ["2025-11-25", "2026-07-28"])
def test_R04_warm_client_ctrl_c_while_asked_is_cancel_to_the_server(warm, version):
    place = warm({"versions": [version], "response_mode": "sse"})
    status, out, shown = on_the_client_terminal(place, LeavingTty(), "m", "ask")
    assert status == 130 and json.loads(out)["error"]["code"] == "mcp_cancelled", out + shown
    assert len(place.srv.requests("tools/call")) == 1  # a 2026-07-28 round is not retried
    if version == "2025-11-25":
        until(lambda: place.srv.client_responses, "the server heard an answer")
        assert place.srv.client_responses[0]["result"] == {"action": "cancel"}  # never decline


class SlowTty(Tty):
    """A person who takes 2 s for the first answer: longer than the whole --timeout of 1 s below."""

    def readline(self, *args) -> str:
        if self.tell() == 0:
            time.sleep(2)
        return super().readline(*args)


@pytest.mark.parametrize("transport", ["http", "stdio"])
@pytest.mark.parametrize("kept", [True, False], ids=["warm", "one-shot"])
def test_R04_the_time_a_person_takes_is_not_spent_from_the_timeout(warm, kept, transport):
    """A legacy question on the call's own HTTP stream (answered in the call's thread) and on a stdio server's
    shared reader (answered off it when relayed): the budget stands still while the person answers."""
    place = warm({"versions": ["2025-11-25"], "response_mode": "sse", "server_request_wait_ms": 60000})
    if transport == "stdio":
        scenario = {
            "versions": ["2025-11-25"],
            "tools": [mock_tool("ask", "input_required")],
            "server_request_wait_ms": 60000,
        }
        stdio = ["--stdio", "--quiet", "--scenario-json", json.dumps(scenario), "--log", str(place.runtime / "log")]
        entry = {
            "type": "stdio",
            "command": sys.executable,
            "args": [str(ROOT / "mock_server" / "mcp_mock.py"), *stdio],
        }
        place.config = write_mcp_json(place.runtime / "stdio.json", {"m": entry})
    args = ("m", "ask", "--timeout", "1s", *(["--keep-alive"] if kept else []))
    out, shown = io.StringIO(), Tty()
    status = bkmcp.main(
        ["--config", str(place.config), *args],
        stdin=SlowTty("true\ny\n"),
        stdout=out,
        stderr=shown,
        env=place.env,
        cwd=str(place.runtime),
    )
    assert status == 0, out.getvalue() + shown.getvalue()
    answer = json.loads(out.getvalue())["data"]["result"]["structuredContent"]["result"]
    assert answer == {"action": "accept", "content": {"ok": True}}  # what the server received, as it echoes it


def test_R04_warm_task_question_relayed_to_the_client_terminal(tmp_path):
    """A 2026-07-28 task that asks (its ``inputRequests`` while polled) inside a warm call: asked on the client's
    terminal, answered through ``tasks/update``, the call sent once."""
    from tests.integration.test_task_input import TASK_CAPABILITIES
    from tests.integration.test_task_input import TOOLS as TASK_TOOLS

    place = Place(tmp_path)
    try:
        scenario = {"tools": [*DEFAULT_TOOLS, *TASK_TOOLS], "capabilities": TASK_CAPABILITIES}
        place.serve(scenario, protocolVersion="2026-07-28")
        status, out, shown = on_the_client_terminal(place, Tty("true\ny\n"), "m", "asking", "--text", "x", "--task")
        assert status == 0, out + shown
        assert "Send them?" in shown
        [update] = [json.loads(e["body"])["params"] for e in place.srv.requests("tasks/update")]
        assert update["inputResponses"] == {"confirm": {"action": "accept", "content": {"ok": True}}}
        assert len(place.srv.requests("tools/call")) == 1
    finally:
        place.close()
