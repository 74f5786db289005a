"""MCP-005 offline behaviour: connection refused, TLS failure (https:// to a local plain-HTTP port), DNS failure
for an ``.invalid`` host (resolution is intercepted: the real network is never touched), and a stdio server in a
build without the stdio transport. Each is a clear mcp_connection_error with staged --check data, never a
traceback; nothing is retried.

Seed rows: A04 (TLS failure), R03 (connection released, nothing resent), I01 (config file -> error path).
"""

from __future__ import annotations

import socket

import pytest

from tests.helpers import run_bkmcp, write_mcp_json
from tests.integration.conftest_interop import free_port

pytestmark = [pytest.mark.integration, pytest.mark.scenario]


def config_for(tmp_path, entry) -> str:
    return str(write_mcp_json(tmp_path, {"off": entry}))


@pytest.mark.parametrize("mode", ["--check", "--tools", "call"])
def test_MCP_005_connection_refused_I01(tmp_path, mode):
    config = config_for(tmp_path, {"type": "http", "url": f"http://127.0.0.1:{free_port()}/mcp"})
    args = ["off", "echo", "--body", "{}"] if mode == "call" else ["off", mode]
    result = run_bkmcp("--config", config, *args)
    assert result.exit_status == 2, result.stdout + result.stderr
    error = result.json["error"]
    assert error["code"] == "mcp_connection_error"
    assert "cannot connect" in error["message"]
    assert "outcome" not in error  # nothing was sent
    if mode == "--check":
        checks = result.json["data"]["checks"]
        assert checks == {"config": "passed", "connection": "failed", "protocol": "not_run", "tools": "not_run"}


@pytest.mark.parametrize("version", [None, "2025-11-25"])
def test_MCP_005_tls_failure_against_plain_http_port_A04(mock, tmp_path, version):
    plain = mock({})
    url = plain.srv.url.replace("http://", "https://")
    entry = {"type": "http", "url": url}
    if version:
        entry["protocolVersion"] = version
    result = run_bkmcp("--config", config_for(tmp_path, entry), "off", "--check")
    assert result.exit_status == 2
    error = result.json["error"]
    assert error["code"] == "mcp_connection_error"
    assert "TLS" in error["message"] and "--insecure" in error["hint"]
    assert result.json["data"]["checks"]["connection"] == "failed"
    assert not plain.srv.requests("initialize") and not plain.srv.requests("server/discover")


def test_MCP_005_dns_failure_for_invalid_host(tmp_path, monkeypatch):
    """An ``.invalid`` host: name resolution is intercepted so the test never reaches a real resolver."""
    real = socket.getaddrinfo
    looked_up: list[str] = []

    def fake_getaddrinfo(host, *args, **kwargs):
        if isinstance(host, str) and host.endswith(".invalid"):
            looked_up.append(host)
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake_getaddrinfo)
    config = config_for(tmp_path, {"type": "http", "url": "https://mcp.example.invalid/mcp"})
    result = run_bkmcp("--config", config, "off", "--tools")
    assert result.exit_status == 2
    error = result.json["error"]
    assert error["code"] == "mcp_connection_error"
    assert "resolve" in error["message"]
    assert looked_up and all(h == "mcp.example.invalid" for h in looked_up)


def test_MCP_005_insecure_skips_verification_only_when_asked(mock, tmp_path):
    """--insecure reaches the transport (verify=False); a plain-HTTP port still fails the TLS handshake."""
    plain = mock({})
    config = config_for(tmp_path, {"type": "http", "url": plain.srv.url.replace("http://", "https://")})
    result = run_bkmcp("--config", config, "--insecure", "off", "--tools")
    assert result.exit_status == 2 and result.error_code == "mcp_connection_error"


@pytest.mark.parametrize("url", ["http://a..b/mcp", "http://xn--zz.invalid/mcp"])
def test_MCP_005_unencodable_host_name_is_a_connection_error(tmp_path, url):
    result = run_bkmcp("--config", config_for(tmp_path, {"type": "http", "url": url}), "off", "--tools")
    assert result.exit_status == 2
    assert result.error_code == "mcp_connection_error"
    assert "host name" in result.json["error"]["message"]
