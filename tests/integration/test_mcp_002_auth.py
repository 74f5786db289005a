"""MCP-002 authentication and isolation: each of the four credential forms reaches EVERY request of the operation
(initialize, notifications/initialized, every tools/list page, tools/call, DELETE / discover) identically and no
other identity header appears; anonymous access; 401 / 403 classification; redirects are never followed; no
secret appears in any output.

Seed rows: A01 (four credential forms), A02 (anonymous vs auth-required server), A04 (401, 403, redirect, TLS —
TLS is in MCP-005).
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import VERSIONS

pytestmark = [pytest.mark.integration, pytest.mark.scenario]

TOKEN = "tok-Abc123-very-secret"
APP_SECRET = "app-secret-Zyx987"
TICKET = "ticket-Qwe456-secret"
FORMS = {
    "bearer": ("Authorization", "Bearer ${BK_TOKEN}", {"BK_TOKEN": TOKEN}, f"Bearer {TOKEN}"),
    "app_ticket": (
        "X-Bkapi-Authorization",
        "${BK_AUTH}",
        {"BK_AUTH": json.dumps({"bk_app_code": "app", "bk_app_secret": APP_SECRET, "bk_ticket": TICKET})},
        None,
    ),
    "app_token": (
        "X-Bkapi-Authorization",
        "${BK_AUTH}",
        {"BK_AUTH": json.dumps({"bk_app_code": "app", "bk_app_secret": APP_SECRET, "bk_token": TOKEN})},
        None,
    ),
    "access_token": ("X-Bkapi-Authorization", '{"access_token": "${BK_TOKEN}"}', {"BK_TOKEN": TOKEN}, None),
}
SECRETS = (TOKEN, APP_SECRET, TICKET)


def expected_value(form: str) -> str:
    _name, template, env, literal = FORMS[form]
    if literal is not None:
        return literal
    value = template
    for key, val in env.items():
        value = value.replace("${" + key + "}", val)
    return value


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text


@pytest.mark.parametrize("version", [*VERSIONS, None])
@pytest.mark.parametrize("form", sorted(FORMS))
def test_MCP_002_credential_form_reaches_every_request_A01(mock, form, version):
    """MCP-002 / A01: the configured identity header is on every request, byte-identical, for check and call."""
    name, template, env, _ = FORMS[form]
    value = expected_value(form)
    target = mock(
        {"page_size": 2, "require_headers": {name: value}}, headers={name: template}, protocol_version=version
    )
    check = target.run("-v", target.name, "--check", env=env)
    assert check.exit_status == 0, check.stdout + check.stderr
    assert check.json["data"]["authentication"] == {"source": "server_headers", "discovery_accepted": True}
    call = target.run("-v", target.name, "echo", "--body", '{"text":"x"}', env=env)
    assert call.exit_status == 0, call.stdout + call.stderr
    log = target.srv.log
    assert len(log) >= 8
    other = "x-bkapi-authorization" if name == "Authorization" else "authorization"
    for entry in log:
        assert entry["headers"].get(name.lower()) == value, (entry["http_method"], entry["rpc_method"])
        assert other not in entry["headers"]
        assert entry["status"] != 401
    methods = {e["rpc_method"] for e in log}
    assert {"tools/list", "tools/call"} <= methods
    if version in VERSIONS[:3]:
        assert {"initialize", "notifications/initialized"} <= methods
        assert target.srv.requests(http_method="DELETE")
    assert target.count("tools/call") == 1
    assert_no_secret(check.stdout, check.stderr, call.stdout, call.stderr)


def test_MCP_002_anonymous_server_succeeds_A02(mock):
    target = mock({})
    result = target.run(target.name, "--check")
    assert result.exit_status == 0
    assert result.json["data"]["authentication"] == {"source": "none", "discovery_accepted": True}
    assert all(
        "authorization" not in e["headers"] and "x-bkapi-authorization" not in e["headers"] for e in target.srv.log
    )


@pytest.mark.parametrize("version", [None, "2025-11-25", "2026-07-28"])
def test_MCP_002_anonymous_against_auth_server_is_401_never_era_evidence_A02_A04(mock, version):
    """MCP-002 / A02: 401 -> mcp_auth_required with parsed WWW-Authenticate; the probe's 401 is not taken as
    'legacy' (no initialize follows); hint names server and config file."""
    target = mock({"require_headers": {"Authorization": "Bearer right"}}, protocol_version=version)
    result = target.run(target.name, "--check")
    assert result.exit_status == 2
    error = result.json["error"]
    assert error["code"] == "mcp_auth_required"
    assert error["resource_metadata"].endswith("/.well-known/oauth-protected-resource")
    assert error["scope"] == "mcp:read" and error["error"] == "invalid_token"
    assert "'m'" in error["hint"] and str(target.config) in error["hint"]
    data = result.json["data"]
    assert data["checks"]["connection"] == "passed" and data["checks"]["protocol"] == "failed"
    assert data["checks"]["tools"] == "not_run"
    assert data["authentication"]["discovery_accepted"] is False
    assert len(target.srv.log) == 1, target.methods()


def test_MCP_002_wrong_token_on_call_path_is_401_and_no_call_A02(mock):
    target = mock(
        {"require_headers": {"Authorization": "Bearer right"}},
        headers={"Authorization": "Bearer wrong"},
        protocol_version="2025-06-18",
    )
    result = target.run(target.name, "echo", "--body", "{}")
    assert result.exit_status == 2 and result.error_code == "mcp_auth_required"
    assert target.count("tools/call") == 0 and target.count("tools/list") == 0
    assert "wrong" not in result.stdout


@pytest.mark.parametrize("version", [None, "2025-11-25"])
def test_MCP_002_403_keeps_the_servers_safe_text_A04(mock, version):
    target = mock(
        {
            "forbid_headers_403": {"X-Api-Key": "limited-key"},
            "forbidden_message": "principal bob may not use report tools",
        },
        headers={"X-Api-Key": "limited-key"},
        protocol_version=version,
    )
    result = target.run(target.name, "--tools")
    assert result.exit_status == 2
    error = result.json["error"]
    assert error["code"] == "mcp_permission_denied"
    assert "principal bob may not use report tools" in error["message"]
    assert error["error"] == "insufficient_scope"
    assert "limited-key" not in result.stdout + result.stderr
    assert len(target.srv.log) == 1


def test_MCP_002_redirect_is_not_followed_and_location_has_no_credentials_A04(mock):
    """MCP-002 / A04: a 307 is mcp_connection_error naming the location without userinfo/query; the redirect
    target never receives anything (credentials never leave the configured endpoint)."""
    elsewhere = mock({})
    location = elsewhere.srv.url.replace("http://", "http://user:pw@") + "?token=leak"
    target = mock({"faults": {"redirect": location}}, headers={"Authorization": "Bearer ${T}"})
    result = target.run(target.name, "echo", "--body", "{}", env={"T": TOKEN})
    assert result.exit_status == 2
    error = result.json["error"]
    assert error["code"] == "mcp_connection_error"
    assert error["location"] == elsewhere.srv.url
    assert "pw@" not in result.stdout and "leak" not in result.stdout
    assert elsewhere.srv.log == []
    assert len(target.srv.log) == 1  # the probe got the redirect; it is no era evidence, nothing else was sent
    assert_no_secret(result.stdout, result.stderr)


def test_MCP_002_secrets_never_printed_even_in_verbose_failures_A04(mock):
    target = mock(
        {"require_headers": {"X-Bkapi-Authorization": "other"}},
        headers={"X-Bkapi-Authorization": "${BK_AUTH}"},
        protocol_version="2025-11-25",
    )
    env = {"BK_AUTH": FORMS["app_ticket"][2]["BK_AUTH"]}
    result = target.run("-v", target.name, "--check", env=env)
    assert result.exit_status == 2
    assert "X-Bkapi-Authorization: ***" in result.stderr
    assert_no_secret(result.stdout, result.stderr)


def test_MCP_002_custom_headers_pass_through_and_user_agent(mock):
    """Custom headers reach every request untouched; bkmcp identifies itself unless the config says otherwise."""
    import bkmcp

    plain = mock({}, protocol_version="2025-11-25", headers={"X-Tenant": "t-1"})
    assert plain.run(plain.name, "--check").exit_status == 0
    assert all(e["headers"]["user-agent"] == f"bkmcp/{bkmcp.__version__}" for e in plain.srv.log)
    assert all(e["headers"]["x-tenant"] == "t-1" for e in plain.srv.log)
    custom = mock({}, protocol_version="2026-07-28", headers={"User-Agent": "my-agent/1"})
    assert custom.run(custom.name, "--check").exit_status == 0
    assert all(e["headers"]["user-agent"] == "my-agent/1" for e in custom.srv.log)


def test_MCP_002_non_ascii_header_value_goes_out_as_utf8(mock):
    """A configured non-ASCII header value is sent as its UTF-8 bytes (not an internal error)."""
    target = mock({}, protocol_version="2025-06-18", headers={"X-Name": "网关"})
    result = target.run(target.name, "--tools")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert all(e["headers"]["x-name"].encode("latin-1").decode("utf-8") == "网关" for e in target.srv.log)
