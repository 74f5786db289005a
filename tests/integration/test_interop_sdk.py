"""bkmcp against the official MCP Python SDK server (``mcp==2.3.0``, dual-era), code nobody here wrote:
--check, --tools, tool help and calls in both eras — auto-negotiated and pinned — on the stateful-SSE,
stateless-JSON and legacy-pinned variants (tests/interop_servers/sdk_server.py, docs/interop.md).

Seed rows: R01 (version matrix against a real server), D02, D03, R02, I01.
Skipped with the fixture's reason only when the SDK is not installed (``.ci/install_interop.sh``).
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_bkmcp, write_mcp_json
from tests.integration.conftest_interop import SDK_TOOLS

pytestmark = [pytest.mark.integration, pytest.mark.interop]

FIXTURES = {"stateful": "sdk_server_stateful", "stateless": "sdk_server_stateless", "legacy": "sdk_server_legacy"}
# (variant, pinned version) -> expected negotiated version
CASES = [
    ("stateful", None, "2026-07-28"),
    ("stateful", "2026-07-28", "2026-07-28"),
    ("stateful", "2025-11-25", "2025-11-25"),
    ("stateful", "2025-06-18", "2025-06-18"),
    ("stateful", "2025-03-26", "2025-03-26"),
    ("stateless", None, "2026-07-28"),
    ("stateless", "2026-07-28", "2026-07-28"),
    ("stateless", "2025-11-25", "2025-11-25"),
    ("legacy", None, "2025-11-25"),
    ("legacy", "2025-06-18", "2025-06-18"),
]


@pytest.fixture
def sdk(request, tmp_path):
    def make(variant: str, version: str | None):
        server = request.getfixturevalue(FIXTURES[variant])
        entry = {"type": "http", "url": server.url}
        if version:
            entry["protocolVersion"] = version
        config = write_mcp_json(tmp_path, {"sdk": entry})

        def run(*args: str):
            return run_bkmcp("--config", str(config), *args)

        return run

    return make


def case_id(case):
    variant, version, _ = case
    return f"{variant}-{version or 'auto'}"


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_interop_sdk_check_R01(sdk, case):
    variant, version, expected = case
    run = sdk(variant, version)
    result = run("sdk", "--check")
    assert result.exit_status == 0, result.stdout + result.stderr
    data = result.json["data"]
    assert data["protocol_version"] == expected
    assert data["era"] == ("modern" if expected == "2026-07-28" else "legacy")
    assert data["checks"] == {"config": "passed", "connection": "passed", "protocol": "passed", "tools": "passed"}
    assert data["tool_count"] == len(SDK_TOOLS) and data["complete"] is True
    assert data["server_info"]["name"].startswith("bkmcp-interop-sdk-")
    assert "capabilities" in data


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_interop_sdk_tools_D03(sdk, case):
    variant, version, expected = case
    result = sdk(variant, version)("sdk", "--tools")
    assert result.exit_status == 0, result.stdout + result.stderr
    data = result.json["data"]
    assert data["protocol_version"] == expected
    assert {t["name"] for t in data["tools"]} == SDK_TOOLS
    weather = next(t for t in data["tools"] if t["name"] == "weather")
    assert weather["outputSchema"]["properties"]["conditions"]["enum"] == ["sunny", "cloudy", "rain"]
    summarize = next(t for t in data["tools"] if t["name"] == "summarize")
    assert "$defs" in summarize["inputSchema"]


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_interop_sdk_calls_R02(sdk, case):
    variant, version, _ = case
    run = sdk(variant, version)
    add = run("sdk", "add", "--a", "20", "--b", "22")
    assert add.exit_status == 0, add.stdout + add.stderr
    assert add.json["data"]["result"]["structuredContent"] == {"result": 42}
    echo = run("sdk", "echo", "--body", '{"text": "网关 \\"quoted\\" $(x)", "times": 2}')
    assert echo.exit_status == 0, echo.stdout
    assert echo.json["data"]["result"]["content"][0]["text"] == '网关 "quoted" $(x) 网关 "quoted" $(x)'
    dotted = run("sdk", "ns.tool-name_v2", "--body", '{"value": "v"}')
    assert dotted.exit_status == 0, dotted.stdout
    big = run("sdk", "echo_json", "--body", '{"payload": {"n": 12345678901234567890}}')
    assert big.exit_status == 0 and "12345678901234567890" in big.stdout
    fail = run("sdk", "fail_tool_error")
    assert fail.exit_status == 2 and fail.error_code == "mcp_tool_error"
    assert "deliberate failure" in json.dumps(fail.json["data"]["result"])
    unknown = run("sdk", "nope", "--body", "{}")
    assert unknown.exit_status == 1 and unknown.error_code == "mcp_tool_not_found"


@pytest.mark.parametrize("case", CASES[:1] + CASES[2:3] + CASES[8:9], ids=case_id)
def test_interop_sdk_tool_help_D02(sdk, case):
    variant, version, _ = case
    result = sdk(variant, version)("sdk", "choose", "--help")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert "--mode" in result.stdout


@pytest.mark.parametrize("case", [CASES[0], CASES[2]], ids=case_id)
def test_interop_sdk_slow_tool_with_progress_and_timeout_R03(sdk, case):
    variant, version, _ = case
    run = sdk(variant, version)
    ok = run("sdk", "slow", "--body", '{"seconds": 0.3, "steps": 2}')
    assert ok.exit_status == 0, ok.stdout + ok.stderr
    late = run("--timeout", "1s", "sdk", "slow", "--body", '{"seconds": 5, "steps": 1}')
    assert late.exit_status == 2 and late.error_code == "mcp_timeout"
    assert late.json["error"]["outcome"] == "unknown"


def test_interop_sdk_legacy_only_server_rejects_a_modern_pin(sdk):
    """A pinned modern version against a legacy-only server is an error, never a silent fallback."""
    result = sdk("legacy", "2026-07-28")("sdk", "--check")
    assert result.exit_status == 2
    assert result.error_code == "mcp_protocol_error"
    assert result.json["data"]["checks"]["protocol"] == "failed"
