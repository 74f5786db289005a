"""MCP-001 basic flow: --check, --tools, tool --help and a call, for each of the four protocol versions (pinned)
and unpinned, with JSON and SSE responses, against the in-process mock. Assertions are on what the SERVER
received: requests per method, headers, ``_meta``, session ids, DELETE at exit.

Seed rows: R01 (version matrix, JSON/SSE, legacy session lifecycle), D02 (tool help discovers, never calls),
D03 (single page, multi page, empty catalogue; check calls no tool), I01 (file -> check/tools/help/call).
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests.helpers import LEGACY, VERSIONS

pytestmark = [pytest.mark.integration, pytest.mark.scenario]

MODES = ("json", "sse")
SSE_EXTRAS = {"sse_comments": True, "sse_priming": True, "sse_crlf": True}


def scenario(mode: str, **extra):
    base = {"response_mode": mode, "page_size": 2}
    if mode == "sse":
        base.update(SSE_EXTRAS)
    base.update(extra)
    return base


def assert_legacy_wire(target, version: str) -> None:
    """Every request after initialize carries the session id (and, from 2025-06-18, the version header)."""
    log = target.srv.log
    init = [e for e in log if e["rpc_method"] == "initialize"]
    assert init, "no initialize received"
    assert init[0]["json"]["params"]["protocolVersion"] == version
    assert init[0]["json"]["params"]["clientInfo"]["name"] == "bkmcp"
    assert init[0]["json"]["params"]["capabilities"] == {}
    sessions = set()
    for entry in log:
        headers = entry["headers"]
        assert "application/json" in headers.get("accept", "") or entry["http_method"] == "GET"
        if entry["rpc_method"] == "initialize":
            assert "mcp-session-id" not in headers
            continue
        sessions.add(headers.get("mcp-session-id"))
        if version in ("2024-11-05", "2025-03-26"):  # the header came in 2025-06-18
            assert "mcp-protocol-version" not in headers
        else:
            assert headers.get("mcp-protocol-version") == version
        assert "mcp-method" not in headers and "_meta" not in str((entry["json"] or {}).get("params", {}))
    assert len(sessions) == 1 and None not in sessions, sessions
    assert log[-1]["http_method"] == "DELETE", "the legacy session was not ended with DELETE"


def assert_modern_wire(target) -> None:
    for entry in target.srv.log:
        headers = entry["headers"]
        assert entry["http_method"] == "POST"
        assert headers["mcp-protocol-version"] == "2026-07-28"
        assert headers["mcp-method"] == entry["rpc_method"]
        assert "mcp-session-id" not in headers
        meta = entry["json"]["params"]["_meta"]
        assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
        assert meta["io.modelcontextprotocol/clientCapabilities"] == {}
        assert meta["io.modelcontextprotocol/clientInfo"]["name"] == "bkmcp"
    assert target.count("initialize") == 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("version", VERSIONS)
def test_MCP_001_check_pinned_version_R01_D03(mock, version, mode):
    """MCP-001: --check with a pinned version: no probe, staged checks passed, exact round trips."""
    target = mock(scenario(mode), protocol_version=version)
    result = target.run(target.name, "--check")
    assert result.exit_status == 0, result.stdout + result.stderr
    data = result.json["data"]
    assert data["checks"] == {"config": "passed", "connection": "passed", "protocol": "passed", "tools": "passed"}
    assert data["protocol_version"] == version
    assert data["era"] == ("modern" if version == "2026-07-28" else "legacy")
    assert data["tool_count"] == 5 and data["complete"] is True
    assert data["server_info"]["name"] == "mcp-mock"
    assert data["instructions"] == "Mock MCP server for bkmcp tests."
    assert data["authentication"] == {"source": "none", "discovery_accepted": True}
    assert data["transport"] == "http" and data["config_file"] == str(target.config)
    assert isinstance(data["elapsed_ms"], int)
    methods = target.methods()
    pages = [("POST", "tools/list")] * 3
    if version in LEGACY:
        assert methods == [("POST", "initialize"), ("POST", "notifications/initialized"), *pages, ("DELETE", None)]
        assert_legacy_wire(target, version)
    else:
        assert methods == [("POST", "server/discover"), *pages]
        assert_modern_wire(target)
    assert target.count("tools/call") == 0


@pytest.mark.parametrize("mode", MODES)
def test_MCP_001_unpinned_probe_picks_modern_on_dual_era_server_R01(mock, mode):
    """MCP-001: unpinned against a dual-era server: server/discover decides modern; no initialize at all."""
    target = mock(scenario(mode))
    result = target.run(target.name, "--check")
    assert result.exit_status == 0, result.stdout
    assert result.json["data"]["era"] == "modern"
    assert target.methods() == [("POST", "server/discover")] + [("POST", "tools/list")] * 3
    assert_modern_wire(target)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("version", LEGACY)
def test_MCP_001_unpinned_probe_falls_back_to_legacy_R01(mock, version, mode):
    """MCP-001: a legacy-only server answers the modern probe with an error -> initialize offering 2025-11-25,
    the server's chosen version is accepted; one probe, one initialize."""
    target = mock(scenario(mode, versions=[version]))
    result = target.run(target.name, "--check")
    assert result.exit_status == 0, result.stdout
    assert result.json["data"]["protocol_version"] == version
    methods = target.methods()
    assert methods[0] == ("POST", "server/discover")
    assert methods[1:3] == [("POST", "initialize"), ("POST", "notifications/initialized")]
    assert target.count("initialize") == 1 and target.count("server/discover") == 1
    init = target.srv.requests("initialize")[0]
    assert init["json"]["params"]["protocolVersion"] == "2025-11-25"
    probe = target.srv.requests("server/discover")[0]
    assert probe["headers"]["mcp-protocol-version"] == "2026-07-28"
    assert probe["json"]["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("version", VERSIONS)
def test_MCP_001_tools_lists_every_field_as_received_D03(mock, version, mode):
    """MCP-001: --tools returns the complete catalogue with every tool field untouched."""
    tools = [
        {
            "name": "a.b-c_d",
            "title": "T",
            "description": "d",
            "inputSchema": {"type": "object"},
            "outputSchema": {"type": "object", "properties": {"n": {"type": "number"}}},
            "annotations": {"readOnlyHint": True},
            "icons": [{"src": "https://x.example/i.png"}],
            "execution": {"taskSupport": "optional"},
            "_meta": {"k": Decimal("12345678901234567890.5")},
        },
        {"name": "second", "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}},
        {"name": "third", "inputSchema": {"type": "object"}},
    ]
    target = mock(scenario(mode, tools=tools), protocol_version=version)
    result = target.run(target.name, "--tools")
    assert result.exit_status == 0, result.stdout
    data = result.json["data"]
    assert data["tool_count"] == 3 and data["complete"] is True and data["protocol_version"] == version
    assert data["server"] == target.name
    assert data["tools"][0]["_meta"]["k"].text == "12345678901234567890.5"
    assert '"k":12345678901234567890.5' in result.stdout
    assert [t["name"] for t in data["tools"]] == ["a.b-c_d", "second", "third"]
    assert data["tools"][0]["execution"] == {"taskSupport": "optional"}
    assert target.count("tools/list") == 2 and target.count("tools/call") == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_MCP_001_tool_help_discovers_but_never_calls_D02(mock, version):
    """MCP-001 / D02: <tool> --help discovers the schema and never sends tools/call."""
    target = mock(scenario("json"), protocol_version=version)
    result = target.run(target.name, "echo", "--help")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert "echo" in result.stdout
    assert target.count("tools/list") == 3 and target.count("tools/call") == 0


def test_MCP_001_tool_help_for_a_missing_tool_is_tool_not_found_D02(mock):
    target = mock(scenario("json"), protocol_version="2025-11-25")
    result = target.run(target.name, "ech", "--help")
    assert result.exit_status == 1 and result.error_code == "mcp_tool_not_found"
    assert target.count("tools/call") == 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("version", [*VERSIONS, None])
def test_MCP_001_call_once_with_exact_numbers_R01_I01(mock, version, mode):
    """MCP-001 / I01: discover -> find -> call exactly once; numbers reach the server byte for byte and come
    back unchanged; the call carries the era's headers."""
    target = mock(scenario(mode), protocol_version=version)
    body = '{"text":"00123","ratio":1e400,"count":123456789012345678901234567890,"tags":["网关"],"loud":false}'
    result = target.run(target.name, "echo", "--body", body)
    assert result.exit_status == 0, result.stdout + result.stderr
    data = result.json["data"]
    assert data["server"] == target.name and data["tool"] == "echo"
    assert data["result"]["isError"] is False
    assert '"ratio":1e400' in result.stdout and "123456789012345678901234567890" in result.stdout
    calls = target.srv.requests("tools/call")
    assert len(calls) == 1
    sent = calls[0]["body"]
    assert '"ratio":1e400' in sent and '"count":123456789012345678901234567890' in sent and '"00123"' in sent
    if version == "2026-07-28" or version is None:
        assert calls[0]["headers"]["mcp-name"] == "echo"
        assert calls[0]["headers"]["mcp-method"] == "tools/call"
        assert_modern_wire(target)
    else:
        assert_legacy_wire(target, version)


def test_MCP_001_empty_catalogue_is_success_D03(mock):
    target = mock({"tools": []}, protocol_version="2025-06-18")
    result = target.run(target.name, "--check")
    assert result.exit_status == 0
    assert result.json["data"]["tool_count"] == 0 and result.json["data"]["complete"] is True
    tools = target.run(target.name, "--tools")
    assert tools.json["data"] == {
        "server": "m",
        "protocol_version": "2025-06-18",
        "tool_count": 0,
        "complete": True,
        "tools": [],
        "excluded": [],
        "cli": {},
    }


def test_MCP_001_single_page_D03(mock):
    target = mock({}, protocol_version="2026-07-28")
    result = target.run(target.name, "--tools")
    assert result.json["data"]["tool_count"] == 5
    assert target.count("tools/list") == 1


def test_MCP_001_delete_405_is_fine_and_stateless_server_gets_no_delete_R01(mock):
    target = mock({"delete_status": 405}, protocol_version="2025-11-25")
    assert target.run(target.name, "--check").exit_status == 0
    assert target.srv.requests(http_method="DELETE")
    stateless = mock({"stateful": False}, protocol_version="2025-11-25")
    assert stateless.run(stateless.name, "--check").exit_status == 0
    assert not stateless.srv.requests(http_method="DELETE")
    assert all("mcp-session-id" not in e["headers"] for e in stateless.srv.log)


def test_MCP_001_notifications_before_result_and_progress_R01(mock):
    """SSE notifications before the response are consumed (kept for -v), the call still succeeds once."""
    notes = [
        {"method": "notifications/message", "params": {"level": "info", "data": "hello"}},
        {"method": "notifications/progress", "params": {"progress": 1, "total": 2, "message": "half"}},
    ]
    target = mock({"notifications_before_result": notes, "response_mode": "sse"}, protocol_version="2025-11-25")
    result = target.run("-v", target.name, "echo", "--body", '{"text":"x"}')
    assert result.exit_status == 0, result.stdout
    assert "progress 1/2: half" in result.stderr and "hello" in result.stderr
    assert target.count("tools/call") == 1


def test_MCP_001_verbose_logs_requests_without_secrets_R01(mock):
    target = mock({}, protocol_version="2025-11-25", headers={"Authorization": "Bearer ${TOK}"})
    result = target.run("-v", target.name, "--check", env={"TOK": "s3cr3t-token-value"})
    assert result.exit_status == 0
    assert "s3cr3t-token-value" not in result.stderr + result.stdout
    assert "-> POST" in result.stderr and "[initialize id=" in result.stderr and "<- HTTP 200" in result.stderr
    assert "Authorization: ***" in result.stderr


def test_MCP_001_built_cli_runs_check_tools_help_call_I01(mock, tmp_path):
    """I01: the built CLI (dist/bkmcp.pyz when built, else ``python bkmcp.py``) as a separate process, from a
    config file to check / tools / tool help / call against the mock; the server saw exactly one tools/call."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    pyz = root / "dist" / "bkmcp.pyz"
    program = [sys.executable, str(pyz if pyz.exists() else root / "bkmcp.py")]
    target = mock({"page_size": 2, "response_mode": "sse"}, headers={"Authorization": "Bearer ${TOK}"})
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TOK": "i01-secret-token"}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*program, "--config", str(target.config), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )

    check = cli("m", "--check")
    assert check.returncode == 0, check.stdout + check.stderr
    assert '"tools":"passed"' in check.stdout
    tools = cli("m", "--tools", "--jq", ".data.tool_count")
    assert tools.returncode == 0 and tools.stdout.strip() == "5"
    helptext = cli("m", "echo", "--help")
    assert helptext.returncode == 0 and "--text" in helptext.stdout
    call = cli("m", "echo", "--text", "hello", "--count", "12345678901234567890")
    assert call.returncode == 0, call.stdout + call.stderr
    assert target.count("tools/call") == 1
    assert '"count":12345678901234567890' in target.srv.requests("tools/call")[0]["body"]
    for proc in (check, tools, helptext, call):
        assert "i01-secret-token" not in proc.stdout + proc.stderr
    assert all(e["headers"].get("authorization") == "Bearer i01-secret-token" for e in target.srv.log)


def test_MCP_001_lone_surrogate_in_body_is_sent_escaped(mock):
    """``"\\ud800"`` is valid JSON in --body; it reaches the server as the same escape, never a crash."""
    target = mock({}, protocol_version="2025-11-25")
    result = target.run(target.name, "echo", "--body", '{"text": "a\\ud800b"}')
    assert result.exit_status == 0, result.stdout + result.stderr
    assert '"a\\ud800b"' in target.srv.requests("tools/call")[0]["body"]
