"""A server that asks, through a warm session (docs/contract.md §5, §14): the command's answers travel with it to
the background process; a legacy session that declared elicitation is kept apart from one that did not (each
declared at initialize what its first command could answer); a ``--resume`` gets a session of its own. The warm
server runs in this interpreter (``tests/integration/test_warm_inprocess.py``'s ``Place``).

Seed row R04.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mock_server.mcp_mock import DEFAULT_TOOLS, MockServer, mock_tool
from tests.helpers import write_mcp_json
from tests.integration.test_warm_inprocess import Place

pytestmark = [pytest.mark.integration]


@pytest.fixture
def warm(tmp_path: Path):
    made = Place(tmp_path)
    made.env["XDG_STATE_HOME"] = str(tmp_path / "state")

    def serve(scenario: dict) -> Place:
        made.srv.stop()
        made.srv = MockServer({"tools": [*DEFAULT_TOOLS, mock_tool("ask", "input_required")], **scenario})
        made.srv.start()
        made.config = write_mcp_json(tmp_path / "mcp.json", {"m": {"type": "http", "url": made.srv.url}})
        return made

    yield serve
    made.close()


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
