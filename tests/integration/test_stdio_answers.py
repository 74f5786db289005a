"""Answers on a stdio server's stdout that bkmcp cannot read, or that were not written for it (issue 36, item 5;
docs/contract.md §9), against ``spoofing_stdio.py`` over real pipes: a JSON-RPC answer nested deeper (or longer)
than bkmcp reads fails its request at once with ``mcp_protocol_error``; lines of "fetched text" guessing a request's
id, a second answer and a null-id error are reported on stderr and never taken for the answer.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers import run_bkmcp, write_mcp_json

pytestmark = [pytest.mark.integration]

SERVER = str(Path(__file__).resolve().parent / "spoofing_stdio.py")


def _run(tmp_path: Path, mode: str, *args: str):
    log = tmp_path / "received.jsonl"
    entry = {
        "type": "stdio",
        "command": sys.executable,
        "args": [SERVER, mode, str(log)],
        "protocolVersion": "2025-06-18",
    }
    config = write_mcp_json(tmp_path, {"s": entry})
    done = run_bkmcp("--config", str(config), "--timeout", "120s", "s", *args)
    received = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return done, received


def test_lines_guessing_the_call_id_are_reported_and_never_taken_for_the_answer(tmp_path):
    """The server prints "fetched text" that answers ids 1-10 and "4" (``tools/call`` was always id 4) and a
    null-id error before the real answer: the real answer is the one printed; each spoof is a warning."""
    done, received = _run(tmp_path, "spoof", "echo", "--text", "hi")
    assert done.exit_status == 0, done.stderr
    assert done.json["data"]["result"]["content"][0]["text"] == "real: hi"
    assert "SPOOFED" not in done.stdout
    [call] = [m for m in received if m.get("method") == "tools/call"]
    ids = [m["id"] for m in received if "id" in m]
    assert all(isinstance(i, int) and i > 10 for i in ids)  # none of them guessable (a random start, per session)
    assert call["id"] not in range(1, 11)
    warnings = [line for line in done.stderr.splitlines() if "bkmcp: warning: the server" in line]
    assert sum("which bkmcp never sent" in line for line in warnings) == 11
    assert sum("null id" in line for line in warnings) == 1


def test_a_null_id_error_is_not_attributed_to_the_only_request_in_flight(tmp_path):
    done, _received = _run(tmp_path, "nullid", "echo", "--text", "hi")
    assert done.exit_status == 0, done.stderr  # on the old code: mcp_rpc_error "Parse error" (the call's answer)
    assert done.json["data"]["result"]["content"][0]["text"] == "real: hi"
    assert "sent an error with a null id, which answers no request (JSON-RPC error -32700)" in done.stderr


def test_a_second_answer_to_an_answered_id_is_reported(tmp_path):
    done, received = _run(tmp_path, "duplicate", "echo", "--text", "hi")
    assert done.exit_status == 0, done.stderr
    [listed] = [m for m in received if m.get("method") == "tools/list"]
    shown = repr(listed["id"])
    assert f"bkmcp: warning: the server answered request id {shown} a second time" in done.stderr


@pytest.mark.parametrize("mode", ["deep", "deep_last"])
def test_a_catalogue_nested_deeper_than_bkmcp_parses_fails_at_once(tmp_path, mode):
    """A valid ``tools/list`` answer ~700 ``properties`` levels deep (id first: Python SDK; id last: TypeScript
    SDK): ``--tools`` fails with mcp_protocol_error saying why, not mcp_timeout after its whole --timeout."""
    done, _received = _run(tmp_path, mode, "--tools")
    assert done.exit_status == 2, done.stderr
    error = done.json["error"]
    assert error["code"] == "mcp_protocol_error"
    assert "the server's answer to tools/list is nested deeper than bkmcp parses" in error["message"]
    assert error["reason"] == "nested_too_deep"


def test_a_call_answered_deeper_than_bkmcp_parses_fails_at_once_saying_the_server_answered(tmp_path):
    done, received = _run(tmp_path, "deep_call", "echo", "--text", "hi")
    assert done.exit_status == 2, done.stderr
    error = done.json["error"]
    assert error["code"] == "mcp_protocol_error", error
    assert "the server's answer to tools/call is nested deeper than bkmcp parses" in error["message"]
    assert sum(m.get("method") == "tools/call" for m in received) == 1


def test_a_call_answered_with_a_line_longer_than_the_limit_fails_at_once(tmp_path):
    """A 65 MiB answer with its id last (the TypeScript SDK's order): the id is read from the line's last bytes."""
    done, _received = _run(tmp_path, "long_call", "echo", "--text", "hi")
    assert done.exit_status == 2, done.stderr
    error = done.json["error"]
    assert error["code"] == "mcp_protocol_error", error
    assert f"longer than {64 * 1024 * 1024} bytes" in error["message"]
    assert error["reason"] == "line_too_long"
