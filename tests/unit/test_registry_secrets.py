"""The registry's secrets on disk and in print (issue 16 items 15-18, 20; docs/contract.md §11.3, §11.4):
``--list`` redaction of URLs, 0600 registry files and the warning for readable ones, a new file created by
``--resident``, odd paths, a registry replaced by rename, ``mcp_credentials_missing`` naming the field, and tool
entries for both model families."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest

import bkmcp
from tests.helpers import run_bkmcp, write_mcp_json


def _schema(path: Path, rows: list[tuple[str, str]]) -> None:
    db = sqlite3.connect(path)
    db.executescript(bkmcp.REGISTRY_SCHEMA)
    for name, url in rows:
        db.execute("INSERT INTO mcp_servers (name, transport_type, url) VALUES (?, 'http', ?)", (name, url))
    db.commit()
    db.close()


# -- item 15 ------------------------------------------------------------------------------------------------------


def test_list_redacts_url_passwords_and_secret_query_parameters(tmp_path: Path) -> None:
    reg = tmp_path / "r.db"
    _schema(
        reg,
        [
            ("userinfo", "https://admin:pa55-SENTINEL@example.com/mcp?x=1"),
            ("query", "https://example.com/mcp?access_token=tok-SENTINEL&region=eu"),
        ],
    )
    res = run_bkmcp("--registry", str(reg), "--list")
    assert res.exit_status == 0, res.stderr
    assert "SENTINEL" not in res.stdout + res.stderr
    rows = {r["name"]: r for r in json.loads(res.stdout)["data"]["servers"]}
    assert rows["query"]["url"] == "https://example.com/mcp?access_token=***&region=eu"
    assert rows["userinfo"]["url"] == "https://admin:***@example.com/mcp?x=1"
    assert rows["userinfo"]["problem"]["code"] == "invalid_mcp_config"


# -- item 16 ------------------------------------------------------------------------------------------------------


def test_import_creates_a_0600_registry(tmp_path: Path) -> None:
    config = write_mcp_json(tmp_path, {"a": {"type": "http", "url": "https://example.com/mcp"}})
    reg = tmp_path / "new.db"
    old = os.umask(0o022)
    try:
        res = run_bkmcp("--registry", str(reg), "--import", str(config))
    finally:
        os.umask(old)
    assert res.exit_status == 0, res.stderr
    assert stat.S_IMODE(reg.stat().st_mode) == 0o600


def test_resident_creates_a_0600_registry_and_warns_that_it_is_new(tmp_path: Path) -> None:
    reg = tmp_path / "typo.db"
    shutdown = '{"command":"invoke","task_id":"z","params":{"action":"shutdown"}}\n'
    res = run_bkmcp("--resident", "--registry", str(reg), stdin=shutdown)
    assert res.exit_status == 0, res.stderr
    assert stat.S_IMODE(reg.stat().st_mode) == 0o600
    assert "created a new, empty registry" in res.stderr and str(reg) in res.stderr
    again = run_bkmcp("--resident", "--registry", str(reg), stdin=shutdown)
    assert "created" not in again.stderr and "readable" not in again.stderr


def test_a_group_or_world_readable_registry_is_warned_about_once(tmp_path: Path) -> None:
    reg = tmp_path / "r.db"
    _schema(reg, [])
    reg.chmod(0o644)
    log_stream = io.StringIO()
    log = bkmcp.Log(log_stream)
    for _ in range(2):
        bkmcp.SqliteRegistry(str(reg), log=log).close()
    assert log_stream.getvalue().count("readable by group/others") == 1, log_stream.getvalue()
    assert "chmod 600" in log_stream.getvalue()


# -- item 17 (registry paths) -------------------------------------------------------------------------------------


def test_dev_null_and_other_non_files_are_named_as_such(tmp_path: Path) -> None:
    res = run_bkmcp("--resident", "--registry", "/dev/null", stdin="")
    assert res.exit_status == 1
    assert res.error_code == "registry_error"
    assert "not a regular file" in res.stderr and "rollback" not in res.stderr


def test_a_registry_replaced_by_rename_is_noticed(tmp_path: Path) -> None:
    reg = tmp_path / "registry.db"
    _schema(reg, [("old", "https://example.com/old")])
    registry = bkmcp.SqliteRegistry(str(reg), log=bkmcp.Log(io.StringIO()))
    try:
        assert set(registry.view(None).servers) == {"old"}
        new = tmp_path / "new.db"
        _schema(new, [("fresh", "https://example.com/new")])
        os.replace(new, reg)  # the atomic deploy: mv new.db registry.db
        assert set(registry.view(None).servers) == {"fresh"}
        assert set(registry.view("u1").servers) == {"fresh"}
    finally:
        registry.close()


# -- item 18 ------------------------------------------------------------------------------------------------------


def test_credentials_missing_without_any_row_names_the_field() -> None:
    row = bkmcp.parse_registry_row(
        {
            "name": "crm",
            "transport_type": "http",
            "url": "https://example.com/mcp",
            "isolation": "user",
            "headers": {"X-Tenant": "${user.tenant_token}"},
        },
        source="registry r.db",
    )
    view = bkmcp.RegistryView({"crm": row})
    with pytest.raises(bkmcp.CredentialsMissingError) as info:
        bkmcp.resolve_registry_server(row, view=view, user_id="u1", env={})
    assert info.value.details == {"server": "crm", "field": "tenant_token"}
    assert "'crm'" in info.value.message and "'tenant_token'" in info.value.message


# -- item 20 ------------------------------------------------------------------------------------------------------


def test_tool_entries_fit_openai_and_anthropic_unchanged() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    entry = bkmcp.build_tool_entry("mcp_s_find", "s", {"name": "find", "description": "Find.", "inputSchema": schema})
    assert entry["function"] == {"name": "mcp_s_find", "description": "Find.", "parameters": schema}
    assert entry["anthropic"] == {"name": "mcp_s_find", "description": "Find.", "input_schema": schema}


# -- item 17 (small issues) ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "option",
    [["--jq", ".data"], ["--config", "/tmp/mcp.json"], ["--dry-run"]],
    ids=["jq", "config", "dry-run"],
)
def test_resident_refuses_cli_only_options_by_name(tmp_path: Path, option: list[str]) -> None:
    res = run_bkmcp("--resident", "--registry", str(tmp_path / "r.db"), *option, stdin="")
    assert res.exit_status == 1 and res.error_code == "usage_error", res.stderr
    assert f"--resident cannot be combined with {option[0]}" in res.stderr
    assert not (tmp_path / "r.db").exists()  # refused before anything starts


@pytest.mark.parametrize(
    ("column", "value", "why"),
    [
        ("args", ["--token=${user.token}"], "visible to every process"),
        ("command", "${user.token}", "not expanded in command"),
    ],
)
def test_user_field_outside_env_and_headers_says_why(column: str, value, why: str) -> None:
    cols = {"name": "s", "transport_type": "stdio", "command": "srv", "isolation": "user", column: value}
    row = bkmcp.parse_registry_row(cols, source="registry r.db")
    view = bkmcp.RegistryView({"s": row}, {"s": {"token": "tok-SENTINEL"}})
    with pytest.raises(bkmcp.InvalidConfigError) as info:
        bkmcp.resolve_registry_server(row, view=view, user_id="u1", env={})
    assert why in info.value.message and "${user.FIELD}" in info.value.message
    assert "SENTINEL" not in info.value.message


# -- item 10 (the HTTP source's answer cache) ---------------------------------------------------------------------


def test_http_answer_cache_stays_bounded_when_every_command_has_a_new_token() -> None:
    """A platform rotating short-lived tokens: 6 000 tokens within the cache time keep at most 4 096 answers."""
    registry = bkmcp.HttpRegistry(
        "http://127.0.0.1:9/internal/mcp/config", log=bkmcp.Log(io.StringIO()), clock=lambda: 0
    )
    registry._fetch = lambda user_id, token, *_: bkmcp.RegistryView({})  # type: ignore[method-assign]
    for i in range(6000):
        registry.view(f"u{i % 50}", f"token-{i}")
    assert len(registry._answers) <= 4096
    assert registry.view("u1", "token-5951") is not None  # a recent answer is still served
