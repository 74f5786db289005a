"""Section 4: identity headers (A01 forms, A03 rejections, A05 redaction), all checked with zero network."""

from __future__ import annotations

import json

import pytest

import bkmcp
from tests.helpers import run_bkmcp

SECRET = "S3CRET-value-9f8e7d"


def cfg(headers):
    return {"mcpServers": {"a": {"type": "http", "url": "https://mcp.example.com/mcp/", "headers": headers}}}


def dry(path, *extra, env=None):
    return run_bkmcp("--config", str(path), "a", "t", "--body", "{}", "--dry-run", *extra, env=env)


def bkapi(**fields):
    return json.dumps(fields)


ACCEPTED = {
    "bearer": {"Authorization": f"Bearer {SECRET}"},
    "bearer-lowercase-scheme": {"authorization": f"bearer {SECRET}"},
    "app-ticket": {"X-Bkapi-Authorization": bkapi(bk_app_code="app", bk_app_secret=SECRET, bk_ticket="tkt-1234")},
    "app-token": {"X-Bkapi-Authorization": bkapi(bk_app_code="app", bk_app_secret=SECRET, bk_token="tok-1234")},
    "access-token": {"X-Bkapi-Authorization": bkapi(access_token=SECRET)},
    "bkapi-any-case": {"x-bkapi-authorization": bkapi(access_token=SECRET)},
    "other-scheme": {"Authorization": f"Basic {SECRET}"},
    "custom-api-key": {"X-Api-Key": SECRET, "X-Tenant": "t1"},
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_a01_supported_forms_are_accepted_and_redacted(name, write_config, no_network):
    """A01/A05: the four identity forms (and pass-through headers) dry-run fine; secrets print as ***."""
    headers = ACCEPTED[name]
    path = write_config(cfg(headers))
    for extra in ((), ("-v",)):
        res = dry(path, *extra)
        assert res.exit_status == 0, res.stderr
        shown = res.json["data"]["headers"]
        for key in headers:
            assert shown[key] == ("t1" if key == "X-Tenant" else "***")
        assert SECRET not in res.stdout + res.stderr


def test_a01_expanded_forms_via_environment(write_config, no_network):
    path = write_config(cfg({"X-Bkapi-Authorization": "${REPORT_BK_AUTH}"}))
    value = bkapi(bk_app_code="app", bk_app_secret=SECRET, bk_ticket="ticket-abcdef")
    res = dry(path, "-v", env={"REPORT_BK_AUTH": value})
    assert res.exit_status == 0 and res.json["data"]["headers"] == {"X-Bkapi-Authorization": "***"}
    assert SECRET not in res.stdout + res.stderr and "ticket-abcdef" not in res.stdout + res.stderr


def test_resolve_server_auth_source_and_secrets():
    conf = bkmcp.parse_config(json.dumps(cfg({"Authorization": "Bearer ${T}", "X-Trace": "x"})), "/f")
    server = bkmcp.resolve_server(conf.servers["a"], {"T": SECRET})
    assert server.auth_source == "server_headers"
    assert server.headers == {"Authorization": f"Bearer {SECRET}", "X-Trace": "x"}
    assert server.redactor.scrub(f"oops {SECRET} and Bearer {SECRET}") == "oops *** and ***"
    anon = bkmcp.parse_config(json.dumps(cfg({"X-Trace": "x"})), "/f")
    assert bkmcp.resolve_server(anon.servers["a"], {}).auth_source == "none"


CONFLICTS = [
    {"Authorization": f"Bearer {SECRET}", "X-Bkapi-Authorization": bkapi(access_token=SECRET)},
    {"authorization": f"Bearer {SECRET}", "x-bkapi-authorization": bkapi(access_token=SECRET)},
    {"AUTHORIZATION": "Basic abc", "X-BKAPI-AUTHORIZATION": "${UNSET_VARIABLE}"},
    {"Authorization": "${UNSET_A}", "X-Bkapi-Authorization": "${UNSET_B}"},
]


@pytest.mark.parametrize("headers", CONFLICTS)
def test_a03_both_identity_headers_in_any_case_conflict(headers, write_config, no_network):
    """A03: both identity headers → mcp_auth_conflict before expansion, zero network, no value printed."""
    path = write_config(cfg(headers))
    for extra in ((), ("-v",)):
        res = dry(path, *extra)
        assert res.exit_status == 1 and res.error_code == "mcp_auth_conflict" and res.stdout == ""
        assert SECRET not in res.stderr
    res = run_bkmcp("--config", str(path), "a", "--check")
    assert res.error_code == "mcp_auth_conflict"


REJECTED = {
    "empty-bearer": {"Authorization": "Bearer "},
    "empty-bearer-spaces": {"Authorization": "Bearer    "},
    "bearer-only-word": {"Authorization": "Bearer"},
    "empty-authorization": {"Authorization": ""},
    "empty-bkapi": {"X-Bkapi-Authorization": ""},
    "bkapi-not-json": {"X-Bkapi-Authorization": f"app:{SECRET}"},
    "bkapi-broken-json": {"X-Bkapi-Authorization": '{"access_token": "' + SECRET + '",}'},
    "bkapi-dup-key": {"X-Bkapi-Authorization": '{"access_token": "' + SECRET + '", "access_token": "x"}'},
    "bkapi-array": {"X-Bkapi-Authorization": json.dumps([SECRET])},
    "bkapi-string": {"X-Bkapi-Authorization": json.dumps(SECRET)},
    "bkapi-number": {"X-Bkapi-Authorization": "12345"},
    "bkapi-empty-object": {"X-Bkapi-Authorization": "{}"},
    "bkapi-mixed": {
        "X-Bkapi-Authorization": bkapi(access_token=SECRET, bk_app_code="a", bk_app_secret=SECRET, bk_ticket="t")
    },
    "bkapi-access-plus-code": {"X-Bkapi-Authorization": bkapi(access_token=SECRET, bk_app_code="a")},
    "bkapi-ticket-and-token": {
        "X-Bkapi-Authorization": bkapi(bk_app_code="a", bk_app_secret=SECRET, bk_ticket="t", bk_token="k")
    },
    "bkapi-no-secret": {"X-Bkapi-Authorization": bkapi(bk_app_code="a", bk_ticket=SECRET)},
    "bkapi-no-ticket": {"X-Bkapi-Authorization": bkapi(bk_app_code="a", bk_app_secret=SECRET)},
    "bkapi-empty-field": {"X-Bkapi-Authorization": bkapi(bk_app_code="", bk_app_secret=SECRET, bk_ticket="t")},
    "bkapi-blank-field": {"X-Bkapi-Authorization": bkapi(access_token="   ")},
    "bkapi-non-string": {
        "X-Bkapi-Authorization": json.dumps({"bk_app_code": 1, "bk_app_secret": SECRET, "bk_ticket": "t"})
    },
    "bkapi-null": {"X-Bkapi-Authorization": json.dumps({"access_token": None})},
    "bkapi-extra-field": {"X-Bkapi-Authorization": bkapi(access_token=SECRET, bk_username="admin")},
    "bkapi-extra-secret-field": {"X-Bkapi-Authorization": json.dumps({"access_token": "x", SECRET: "y"})},
}


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_a03_invalid_credentials_rejected_with_zero_network_and_no_echo(name, write_config, no_network):
    """A03/A05: empty Bearer and malformed X-Bkapi-Authorization → invalid_mcp_config; the secret never shows."""
    path = write_config(cfg(REJECTED[name]))
    for extra in ((), ("-v",)):
        res = dry(path, *extra)
        assert res.exit_status == 1 and res.error_code == "invalid_mcp_config" and res.stdout == ""
        assert SECRET not in res.stderr
    # via an environment variable too (the recommended way)
    header = next(iter(REJECTED[name]))
    path = write_config(cfg({header: "${AUTH_VALUE}"}))
    res = dry(path, "-v", env={"AUTH_VALUE": REJECTED[name][header]})
    assert res.error_code == "invalid_mcp_config" and SECRET not in res.stdout + res.stderr
    for mode in ("--check", "--tools"):
        res = run_bkmcp("--config", str(path), "a", mode, env={"AUTH_VALUE": REJECTED[name][header]})
        assert res.error_code == "invalid_mcp_config"


def test_a05_server_help_redacts_without_needing_variables(write_config, no_network):
    """A05/D01: server help shows header names, *** for credentials, templates for others; no variables needed."""
    path = write_config(cfg({"Authorization": f"Bearer {SECRET}", "X-Trace": "${TRACE}", "Cookie": "c=1"}))
    res = run_bkmcp("--config", str(path), "a", "--help")
    assert res.exit_status == 0
    assert SECRET not in res.stdout and "c=1" not in res.stdout
    assert "Authorization" in res.stdout and "***" in res.stdout and "${TRACE}" in res.stdout


def test_a05_secret_fragments_are_scrubbed_from_errors(write_config, monkeypatch, no_network):
    """Every secret value (after expansion) is scrubbed from any diagnostic string before it is printed."""
    path = write_config(cfg({"X-Bkapi-Authorization": "${AUTH}"}))
    auth = bkapi(bk_app_code="my-app-code", bk_app_secret=SECRET, bk_token="token-part-777")

    def leaky(*a, **k):
        raise bkmcp.ConnectionFailedError(
            f"server said: bad secret {SECRET}, token token-part-777", hint=f"hint {SECRET}"
        )

    monkeypatch.setattr(bkmcp, "run_tools", leaky)
    res = run_bkmcp("--config", str(path), "a", "--tools", "-v", env={"AUTH": auth})
    assert res.exit_status == 2
    assert SECRET not in res.stdout + res.stderr and "token-part-777" not in res.stdout + res.stderr
    assert "***" in res.json["error"]["message"]


def test_a05_internal_errors_are_scrubbed_too(write_config, monkeypatch, no_network):
    path = write_config(cfg({"Authorization": "Bearer ${TOK}"}))
    monkeypatch.setattr(bkmcp, "run_check", lambda *a, **k: (_ for _ in ()).throw(RuntimeError(f"leak {SECRET}")))
    res = run_bkmcp("--config", str(path), "a", "--check", env={"TOK": SECRET})
    assert res.error_code == "internal_error" and res.exit_status == 2
    assert SECRET not in res.stdout + res.stderr


def test_a05_dry_run_scrubs_secret_values_repeated_in_other_headers(write_config, no_network):
    """Every secret value (after expansion) is scrubbed, even inside a header whose name is not a credential."""
    path = write_config(cfg({"Authorization": "Bearer ${TOK}", "X-Trace": "t-${TOK}", "X-Tenant": "plain"}))
    res = dry(path, "-v", env={"TOK": SECRET})
    assert res.exit_status == 0
    assert res.json["data"]["headers"] == {"Authorization": "***", "X-Trace": "t-***", "X-Tenant": "plain"}
    assert SECRET not in res.stdout + res.stderr


@pytest.mark.parametrize("value", [SECRET + "\n", SECRET + "\r\nX-Evil: 1", "a\x00" + SECRET])
@pytest.mark.parametrize("header", ["Authorization", "X-Trace"])
def test_a03_expanded_values_cannot_inject_header_lines(value, header, write_config, no_network):
    """A token read from a file keeps its newline: refused locally (never sent, never printed)."""
    template = "Bearer ${TOK}" if header == "Authorization" else "${TOK}"
    path = write_config(cfg({header: template}))
    res = dry(path, "-v", env={"TOK": value})
    assert res.exit_status == 1 and res.error_code == "invalid_mcp_config" and res.stdout == ""
    assert SECRET not in res.stderr and "line break" in res.stderr


def test_stdio_expanded_nul_is_refused(write_config, no_network):
    path = write_config({"mcpServers": {"a": {"type": "stdio", "command": "x", "args": ["${V}"]}}})
    assert dry(path, env={"V": "a\x00b"}).error_code == "invalid_mcp_config"
    path = write_config({"mcpServers": {"a": {"type": "stdio", "command": "x", "env": {"K": "${V}"}}}})
    assert dry(path, env={"V": "a\x00b"}).error_code == "invalid_mcp_config"
