"""MCP-004 pagination and timeouts: multi-page catalogues, empty catalogue, the pagination guards (repeated
cursor, cursor cycle, 1000-page guard, failure on page N, duplicate names), the total --timeout budget, a
dropped connection after the call, session expiry (re-initialize once, except during tools/call), and SSE
resumption with Last-Event-ID (2025-11-25).

Seed rows: D03 (multi page / empty), D04 (guards never hang and never report complete), R03 (timeouts, lost
results, no resend of tools/call, outcome unknown, connections released).
"""

from __future__ import annotations

import pytest

from mock_server.mcp_mock import DEFAULT_TOOLS, mock_tool
from tests.helpers import before_the_answer_was_due

pytestmark = [pytest.mark.integration, pytest.mark.scenario]


@pytest.mark.parametrize("version", ["2025-03-26", "2026-07-28"])
def test_MCP_004_many_pages_in_order_D03(mock, version):
    target = mock({"generate_tools": 45, "page_size": 4}, protocol_version=version)
    result = target.run(target.name, "--tools")
    assert result.exit_status == 0
    names = [t["name"] for t in result.json["data"]["tools"]]
    assert len(names) == 50 and len(set(names)) == 50
    assert target.count("tools/list") == 13
    cursors = [(e["json"].get("params") or {}).get("cursor") for e in target.srv.requests("tools/list")]
    assert cursors[0] is None and len(set(cursors[1:])) == 12


def incomplete(result, *, pages: int | None = None):
    assert result.exit_status == 2, result.stdout
    assert result.error_code == "mcp_discovery_incomplete"
    data = result.json["data"]
    assert data["complete"] is False
    if pages is not None:
        assert result.json["error"]["pages"] == pages
    return data


@pytest.mark.parametrize("mode", ["--check", "--tools"])
def test_MCP_004_duplicate_cursor_is_incomplete_D04(mock, mode):
    target = mock({"page_size": 2, "faults": {"duplicate_cursor": 2}}, protocol_version="2025-11-25")
    result = target.run(target.name, mode)
    data = incomplete(result, pages=2)
    assert data["tool_count"] == 4
    assert "repeated cursor" in result.json["error"]["message"]
    if mode == "--check":
        assert data["checks"] == {"config": "passed", "connection": "passed", "protocol": "passed", "tools": "failed"}
    else:
        assert len(data["tools"]) == 4
    assert target.count("tools/list") == 2


def test_MCP_004_cursor_cycle_is_incomplete_D04(mock):
    target = mock({"page_size": 2, "faults": {"cursor_cycle": True}}, protocol_version="2026-07-28")
    result = target.run(target.name, "--check")
    incomplete(result, pages=3)
    assert "cycle" in result.json["error"]["message"]


def test_MCP_004_thousand_page_guard_D04(mock):
    """D04: a server that never stops paginating is cut at 1000 pages, reported incomplete, never hangs."""
    target = mock({"page_size": 1, "faults": {"infinite_pages": True}}, protocol_version="2026-07-28")
    result = target.run("--timeout", "120s", target.name, "--tools")
    data = incomplete(result, pages=1000)  # the page guard ended it, not the 120 s budget (that is mcp_timeout)
    assert data["tool_count"] == 1000
    assert target.count("tools/list") == 1000


def test_MCP_004_tool_count_guard_D04(mock, monkeypatch):
    import bkmcp

    monkeypatch.setattr(bkmcp, "MAX_TOOLS", 10)
    target = mock({"generate_tools": 20, "page_size": 4}, protocol_version="2025-06-18")
    result = target.run(target.name, "--tools")
    incomplete(result)
    assert "more than 10 tools" in result.json["error"]["message"]


@pytest.mark.parametrize("version", ["2025-11-25", "2026-07-28"])
def test_MCP_004_failure_on_page_n_is_incomplete_with_pages_seen_D04(mock, version):
    target = mock({"page_size": 2, "faults": {"fail_on_page": 3}}, protocol_version=version)
    result = target.run(target.name, "--check")
    data = incomplete(result, pages=2)
    assert data["tool_count"] == 4
    assert result.json["error"]["cause"]["code"] == "mcp_protocol_error"


def test_MCP_004_failure_on_first_page_is_the_original_error_D04(mock):
    target = mock({"faults": {"fail_on_page": 1}}, protocol_version="2025-11-25")
    result = target.run(target.name, "--check")
    assert result.exit_status == 2 and result.error_code == "mcp_protocol_error"
    assert result.json["data"]["checks"]["tools"] == "failed"


def test_MCP_004_duplicate_tool_names_across_pages_is_protocol_error_D04(mock):
    target = mock({"page_size": 2, "faults": {"duplicate_tool_names": True}}, protocol_version="2025-11-25")
    result = target.run(target.name, "--tools")
    assert result.exit_status == 2 and result.error_code == "mcp_protocol_error"
    assert result.json["error"]["duplicate"]
    assert result.json["data"]["complete"] is False


@pytest.mark.parametrize("version", ["2025-11-25", "2026-07-28"])
@pytest.mark.parametrize("mode", ["json", "sse"])
def test_MCP_004_slow_call_times_out_and_is_sent_once_R03(mock, version, mode):
    """R03: --timeout bounds the whole operation; the call is sent exactly once; outcome unknown."""
    target = mock({"response_mode": mode, "tools": [mock_tool("slow", "slow", ms=5000)]}, protocol_version=version)
    result = target.run("--timeout", "1s", target.name, "slow", "--body", "{}")
    assert result.exit_status == 2 and result.error_code == "mcp_timeout"
    assert result.json["error"]["outcome"] == "unknown"
    assert before_the_answer_was_due(target.srv.requests("tools/call")[0]["time"], 5.0)
    assert target.count("tools/call") == 1
    cancels = target.srv.requests("notifications/cancelled")
    if version == "2026-07-28":
        assert cancels == []  # modern HTTP: closing the stream is the cancellation
    else:  # legacy: the timed-out request is cancelled (lifecycle spec: the sender SHOULD)
        [cancel] = cancels
        assert cancel["json"]["params"]["requestId"] == target.srv.requests("tools/call")[0]["json"]["id"]
        assert "timed out" in cancel["json"]["params"]["reason"]


def test_MCP_004_timeout_budget_covers_discovery_not_each_step_R03(mock):
    """Every request takes 300 ms; 6 requests cannot fit a 1 s budget even though each fits on its own."""
    target = mock({"page_size": 1, "faults": {"slow_ms": 300}}, protocol_version="2026-07-28")
    result = target.run("--timeout", "1s", target.name, "--tools")
    assert result.exit_status == 2
    assert result.error_code in ("mcp_timeout", "mcp_discovery_incomplete")
    if result.error_code == "mcp_discovery_incomplete":
        assert result.json["error"]["cause"]["code"] == "mcp_timeout"
    assert target.count("tools/list") < len(DEFAULT_TOOLS)  # one tool a page: the budget ended it before the last


@pytest.mark.parametrize("how", ["behaviour", "fault"])
@pytest.mark.parametrize("mode", ["json", "sse"])
def test_MCP_004_drop_after_call_is_outcome_unknown_and_not_resent_R03(mock, how, mode):
    scenario = {"response_mode": mode}
    tool = "echo"
    if how == "behaviour":
        scenario["tools"] = [mock_tool("dropper", "drop")]
        tool = "dropper"
    else:
        scenario["faults"] = {"drop_on_call": True}
    target = mock(scenario, protocol_version="2025-11-25")
    result = target.run(target.name, tool, "--body", '{"text": "x"}')
    assert result.exit_status == 2
    assert result.error_code == "mcp_connection_error"
    assert result.json["error"]["outcome"] == "unknown"
    assert target.count("tools/call") == 1


@pytest.mark.parametrize("status", [404, 400])
def test_MCP_004_session_expiry_during_discovery_reinitializes_once_R03(mock, status):
    """A 404 (or server-everything's 400 "No valid session ID") on a request carrying the session id ->
    one new initialize (without the old session id), then discovery continues."""
    target = mock(
        {"page_size": 2, "lost_session_status": status, "faults": {"expire_session_after": 3}},
        protocol_version="2025-11-25",
    )
    result = target.run(target.name, "--tools")
    assert result.exit_status == 0, result.stdout
    assert result.json["data"]["tool_count"] == 5
    inits = target.srv.requests("initialize")
    assert len(inits) == 2
    assert "mcp-session-id" not in inits[1]["headers"]


def test_MCP_004_session_expiry_twice_is_not_retried_forever_R03(mock):
    target = mock({"page_size": 1, "faults": {"expire_session_after": 1}}, protocol_version="2025-11-25")
    result = target.run(target.name, "--tools")
    assert result.exit_status == 2
    assert result.error_code == "mcp_protocol_error"  # page 1 failed twice: the original error, no third init
    assert result.json["error"]["http_status"] == 404
    assert target.count("initialize") == 2


@pytest.mark.parametrize("status", [404, 400])
def test_MCP_004_session_expiry_during_call_is_never_resent_R03(mock, status):
    """R03: the session is lost exactly when tools/call arrives -> error, outcome unknown, no re-initialize,
    one tools/call."""
    target = mock({"lost_session_status": status, "faults": {"expire_session_after": 2}}, protocol_version="2025-06-18")
    result = target.run(target.name, "echo", "--body", '{"text":"x"}')
    assert result.exit_status == 2
    assert result.json["error"]["outcome"] == "unknown"
    assert target.count("tools/call") == 1
    assert target.count("initialize") == 1


def test_MCP_004_sse_resumption_with_last_event_id_2025_11_25_R01(mock):
    """2025-11-25: the POST stream closes after a priming event with retry; bkmcp waits retry ms, GETs with
    Last-Event-ID and the session id, and gets the response there. tools/call is POSTed once."""
    target = mock(
        {"response_mode": "sse", "faults": {"sse_retry_resume": {"retry_ms": 300}}}, protocol_version="2025-11-25"
    )
    result = target.run(target.name, "echo", "--body", '{"text":"resumed"}')
    assert result.exit_status == 0, result.stdout + result.stderr
    assert "resumed" in result.stdout
    assert target.count("tools/call") == 1
    [post] = target.srv.requests("tools/call")
    gets = target.srv.requests(http_method="GET")
    assert len(gets) == 1
    assert gets[0]["headers"]["last-event-id"]
    assert gets[0]["headers"]["mcp-session-id"] == post["headers"]["mcp-session-id"]
    assert gets[0]["headers"]["mcp-protocol-version"] == "2025-11-25"
    assert gets[0]["time"] - post["time"] >= 0.29


def test_MCP_004_sse_resumption_bounded_by_timeout_R03(mock):
    target = mock(
        {"response_mode": "sse", "faults": {"sse_retry_resume": {"retry_ms": 5000}}}, protocol_version="2025-11-25"
    )
    result = target.run("--timeout", "1s", target.name, "echo", "--body", '{"text": "x"}')
    assert result.exit_status == 2 and result.error_code == "mcp_timeout"
    assert result.json["error"]["outcome"] == "unknown"
    assert before_the_answer_was_due(target.srv.requests("tools/call")[0]["time"], 5.0)  # retry: 5000 ms
    assert target.count("tools/call") == 1


def test_MCP_004_big_result_over_sse(mock):
    target = mock(
        {"response_mode": "sse", "tools": [mock_tool("big", "big", bytes=8 * 1024 * 1024)]},
        protocol_version="2025-11-25",
    )
    result = target.run(target.name, "big", "--body", "{}")
    assert result.exit_status == 0
    assert len(result.json["data"]["result"]["content"][0]["text"]) == 8 * 1024 * 1024


def _interrupt_after(seconds: float):
    """Ctrl-C in this process after ``seconds`` (with the handler a terminal session has, even when the test run
    inherited SIGINT ignored from a background shell)."""
    import os
    import signal
    import threading

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def run_interrupted(target, *args: str):
    """``target.run(*args)`` with a Ctrl-C in this process half a second after it starts."""
    timer = _interrupt_after(0.5)
    try:
        return target.run(*args)
    finally:
        timer.cancel()


def cancelled(result, *, outcome: str, stage: str) -> dict:
    """Issue 17 item 2 (contract §7): Ctrl-C after the first request was sent is one ok:false envelope on stdout,
    code mcp_cancelled, exit 130, saying whether the call may have run and where it stopped."""
    assert result.exit_status == 130 and "Traceback" not in result.stderr
    env = result.json
    assert result.stdout.strip(), result.stderr
    assert env["ok"] is False and env["error"]["code"] == "mcp_cancelled"
    assert (env["error"]["outcome"], env["error"]["stage"]) == (outcome, stage)
    return env


@pytest.mark.parametrize("version", ["2025-11-25", "2026-07-28"])
def test_MCP_004_ctrl_c_during_discovery_says_not_sent_R03(mock, version):
    """R03: Ctrl-C while tools/list pages are read: the call was never sent (outcome not_sent, stage discover)."""
    target = mock({"faults": {"slow_on": {"tools/list": 3000}}}, protocol_version=version)
    result = run_interrupted(target, target.name, "echo", "--text", "x")
    env = cancelled(result, outcome="not_sent", stage="discover")
    assert env["data"] == {"server": target.name, "tool": "echo"}
    assert target.count("tools/call") == 0


@pytest.mark.parametrize("mode", ["json", "sse"])
def test_MCP_004_ctrl_c_during_legacy_call_sends_cancelled_R03(mock, mode):
    """R03: Ctrl-C while tools/call runs -> legacy notifications/cancelled for that request id, exit 130,
    the call is not resent."""
    target = mock({"response_mode": mode, "tools": [mock_tool("slow", "slow", ms=3000)]}, protocol_version="2025-11-25")
    result = run_interrupted(target, target.name, "slow", "--body", "{}")
    assert result.exit_status == 130
    cancelled(result, outcome="unknown", stage="call")
    [call] = target.srv.requests("tools/call")
    cancels = target.srv.wait_for("notifications/cancelled", timeout=3)
    assert len(cancels) == 1
    assert cancels[0]["json"]["params"]["requestId"] == call["json"]["id"]
    assert cancels[0]["headers"]["mcp-session-id"] == call["headers"]["mcp-session-id"]
    assert target.count("tools/call") == 1


def test_MCP_004_ctrl_c_during_modern_call_closes_the_stream_R03(mock):
    target = mock({"tools": [mock_tool("slow", "slow", ms=3000)]}, protocol_version="2026-07-28")
    result = run_interrupted(target, target.name, "slow", "--body", "{}")
    assert result.exit_status == 130
    cancelled(result, outcome="unknown", stage="call")
    assert before_the_answer_was_due(target.srv.requests("tools/call")[0]["time"], 3.0)  # did not wait for it
    assert target.count("notifications/cancelled") == 0
    assert target.count("tools/call") == 1


def test_MCP_004_output_failure_after_call_never_resends_R03(mock):
    """R03: stdout breaks after the call completed -> exit 2 (remote work happened), tools/call sent once."""
    import io

    import bkmcp

    class BrokenStdout(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    target = mock({}, protocol_version="2025-11-25")
    status = bkmcp.main(
        ["--config", str(target.config), "m", "echo", "--body", '{"text":"x"}'],
        stdin=io.StringIO(""),
        stdout=BrokenStdout(),
        stderr=io.StringIO(),
        env={},
        cwd="/",
    )
    assert status == 2
    assert target.count("tools/call") == 1


def test_MCP_004_jq_runtime_error_after_call_never_resends_R03(mock):
    target = mock({}, protocol_version="2026-07-28")
    result = target.run(target.name, "echo", "--body", '{"text":"x"}', "--jq", ".data.tool + 1")
    assert result.exit_status == 2 and result.error_code == "jq_error"
    assert target.count("tools/call") == 1


def test_MCP_004_probe_timeout_is_never_era_evidence_R01_R03(mock):
    """A server that does not answer the modern probe within the budget: mcp_timeout, no legacy fallback."""
    target = mock({"faults": {"slow_on": {"server/discover": 5000}}})
    result = target.run("--timeout", "800ms", target.name, "--check")
    assert result.exit_status == 2 and result.error_code == "mcp_timeout"
    assert before_the_answer_was_due(target.srv.requests("server/discover")[0]["time"], 5.0)
    assert target.count("initialize") == 0 and target.count("server/discover") == 1
    assert result.json["data"]["checks"]["connection"] == "failed"


def test_MCP_004_html_login_page_on_probe_falls_back_then_fails_clearly(mock):
    """A proxy login page (200 text/html) is not MCP: not modern evidence; the legacy attempt reports it."""
    target = mock({"faults": {"html_on": ["server/discover", "initialize"]}})
    result = target.run(target.name, "--check")
    assert result.exit_status == 2 and result.error_code == "mcp_protocol_error"
    assert "content type" in result.json["error"]["message"]
