"""Registry and credentials (contract.md §11.3, §11.4): the SQLite registry, rows, credential choice, templates, header
mapping, the CLI's header rules, and ``bkmcp --registry FILE --import mcp.json | --list`` through the real CLI.

Secrets are sentinels (``SENTINEL-…``) that must never appear in any message, envelope or log line.
"""

from __future__ import annotations

import io
import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import bkmcp
from tests.helpers import ROOT, run_bkmcp

# contract.md §11.3, copied verbatim (the test must not read the product's own constant to prove the product right).
SPEC_SCHEMA = """\
CREATE TABLE mcp_servers (
  name TEXT PRIMARY KEY,                -- [A-Za-z0-9_.-]{1,64}
  transport_type TEXT NOT NULL DEFAULT 'stdio' CHECK (transport_type IN ('stdio','http')),
  command TEXT, args TEXT,              -- stdio: args is a JSON array of strings
  env_template TEXT,                    -- stdio: JSON object of strings, may hold ${user.FIELD}
  url TEXT, headers TEXT,               -- http: headers is a JSON object of strings, may hold ${user.FIELD}
  isolation TEXT NOT NULL DEFAULT 'public' CHECK (isolation IN ('public','user')),
  protocol_version TEXT,                -- optional pin, as protocolVersion in mcp.json
  enabled INTEGER NOT NULL DEFAULT 1);
CREATE TABLE mcp_credentials (          -- system default credentials, per server
  server_name TEXT PRIMARY KEY REFERENCES mcp_servers(name), credentials TEXT NOT NULL);   -- JSON object
CREATE TABLE mcp_user_credentials (     -- a user's own credentials, per server
  user_id TEXT NOT NULL, server_name TEXT NOT NULL REFERENCES mcp_servers(name), credentials TEXT NOT NULL,
  PRIMARY KEY (user_id, server_name));
CREATE TABLE mcp_tools_cache (          -- user_id '' for a public server
  server_name TEXT NOT NULL, user_id TEXT NOT NULL, tools TEXT NOT NULL, protocol_version TEXT,
  fetched_at REAL NOT NULL, ttl_ms INTEGER,                     -- the server's ttlMs; NULL or 0: none
  PRIMARY KEY (server_name, user_id));
"""

SECRET_USER = "SENTINEL-user-a1b2c3"
SECRET_SYSTEM = "SENTINEL-system-d4e5f6"
SECRET_OTHER = "SENTINEL-other-user-778899"
SECRETS = (SECRET_USER, SECRET_SYSTEM, SECRET_OTHER)


def _master(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()


def _log() -> tuple[bkmcp.Log, io.StringIO]:
    stream = io.StringIO()
    return bkmcp.Log(stream, verbose=True), stream


def _open(path: Path) -> bkmcp.Registry:
    return bkmcp.open_registry(str(path), env={}, log=_log()[0], timeout=10)


def _row(db: sqlite3.Connection, name: str, transport: str = "http", **cols: Any) -> None:
    cols = {"name": name, "transport_type": transport, **cols}
    for key in ("args", "env_template", "headers"):
        if key in cols and not isinstance(cols[key], str) and cols[key] is not None:
            cols[key] = json.dumps(cols[key])
    db.execute(
        f"INSERT INTO mcp_servers ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", tuple(cols.values())
    )


@pytest.fixture
def registry_db(tmp_path: Path):
    """A new registry file (created by bkmcp) and a writer connection standing in for the admin."""
    path = tmp_path / "registry.db"
    _open(path).close()
    db = sqlite3.connect(path, isolation_level=None)
    yield path, db
    db.close()


def _assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text


# -- the file -----------------------------------------------------------------------------------------------


def test_new_registry_has_exactly_the_spec_schema(tmp_path: Path) -> None:
    reference = tmp_path / "reference.db"
    with sqlite3.connect(reference) as db:
        db.executescript(SPEC_SCHEMA)
    made = tmp_path / "sub" / "made.db"
    made.parent.mkdir()
    registry = _open(made)
    registry.close()
    assert _master(made) == _master(reference)
    assert len(_master(made)) == 4 + 4  # four tables and the index of each one's text primary key


def test_existing_registry_is_opened_unchanged_and_partial_or_foreign_files_are_registry_errors(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    _open(path).close()
    before = _master(path)
    _open(path).close()
    assert _master(path) == before
    partial = tmp_path / "partial.db"
    with sqlite3.connect(partial) as db:
        db.execute("CREATE TABLE mcp_servers (name TEXT)")
    with pytest.raises(bkmcp.RegistryError, match="lacks the table"):
        _open(partial)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database, just text " * 100)
    with pytest.raises(bkmcp.RegistryError, match="garbage.db"):
        _open(garbage)
    with pytest.raises(bkmcp.RegistryError, match="directory"):
        _open(tmp_path)
    with pytest.raises(bkmcp.RegistryError, match="cannot open"):
        _open(tmp_path / "no" / "such" / "dir" / "r.db")
    with pytest.raises(bkmcp.RegistryError, match="unsupported URL scheme"):
        bkmcp.open_registry("ftp://example.com/x", env={}, log=_log()[0], timeout=1)
    with pytest.raises(bkmcp.RegistryError, match="user information"):
        bkmcp.open_registry(
            f"https://u:{SECRET_USER}@example.com/internal/mcp/config", env={}, log=_log()[0], timeout=1
        )
    with pytest.raises(bkmcp.RegistryError, match="needs"):
        bkmcp.open_registry("", env={}, log=_log()[0], timeout=1)


def test_relative_and_home_paths(tmp_path: Path) -> None:
    registry = bkmcp.open_registry("~/reg.db", env={"HOME": str(tmp_path)}, log=_log()[0], timeout=5)
    assert isinstance(registry, bkmcp.SqliteRegistry) and registry.path == str(tmp_path / "reg.db")
    registry.close()
    registry = bkmcp.open_registry("rel.db", env={}, log=_log()[0], timeout=5, cwd=str(tmp_path))
    assert isinstance(registry, bkmcp.SqliteRegistry) and registry.path == str(tmp_path / "rel.db")
    registry.close()


# -- rows ---------------------------------------------------------------------------------------------------


def test_bad_rows_are_isolated_as_invalid_mcp_config(registry_db) -> None:
    path, db = registry_db
    _row(db, "good", url="https://mcp.example.com/mcp/", headers={"X-Team": "a"})
    _row(db, "good-stdio", "stdio", command="server", args=["--x"], env_template={"A": "1"}, isolation="user")
    _row(db, "badjson", args="[not json", command="x", transport="stdio")
    _row(db, "badheaders", headers='{"Authorization": "Bearer ' + SECRET_SYSTEM)  # truncated text with a secret
    _row(db, "nocommand", "stdio")
    _row(db, "badurl", url="ftp://example.com/")
    _row(db, "userinfo", url=f"https://me:{SECRET_SYSTEM}@example.com/mcp")
    _row(db, "bad name!", url="https://example.com/")
    _row(db, "forbidden", url="https://example.com/", headers={"Host": "evil"})
    _row(db, "wrongtype", headers=["a"], url="https://example.com/")
    _row(db, "badpin", url="https://example.com/", protocol_version="1999-01-01")
    _row(db, "nonstring", url="https://example.com/", headers={"X-A": 5})
    _row(db, "badenv", "stdio", command="x", env_template={"NOT-A-NAME": "v"})
    _row(db, "badbkapi", url="https://example.com/", headers={"X-Bkapi-Authorization": '{"nope": "x"}'})
    view = _open(path).view(None)
    assert sorted(view.servers) == sorted(
        [
            "good",
            "good-stdio",
            "badjson",
            "badheaders",
            "nocommand",
            "badurl",
            "userinfo",
            "bad name!",
            "forbidden",
            "wrongtype",
            "badpin",
            "nonstring",
            "badenv",
            "badbkapi",
        ]
    )
    assert view.servers["good"].problem is None and view.servers["good"].headers == {"X-Team": "a"}
    good = view.servers["good-stdio"]
    assert good.problem is None and good.args == ["--x"] and good.env_template == {"A": "1"}
    assert good.isolation == "user" and good.enabled is True
    bad = {name: s.problem for name, s in view.servers.items() if name not in ("good", "good-stdio", "badbkapi")}
    for name, problem in bad.items():
        assert isinstance(problem, bkmcp.InvalidConfigError), name
        assert problem.code == "invalid_mcp_config"
        _assert_no_secret(problem.message, str(problem.hint))
    assert "not valid JSON" in bad["badjson"].message
    assert "managed by bkmcp" in bad["forbidden"].message
    assert "command" in bad["nocommand"].message
    # the X-Bkapi-Authorization form is checked after expansion (its value may be a template), like the CLI
    with pytest.raises(bkmcp.InvalidConfigError, match="X-Bkapi-Authorization"):
        bkmcp.resolve_registry_server(view.servers["badbkapi"], view=view, user_id=None, env={})
    for name in bad:
        with pytest.raises(bkmcp.InvalidConfigError):
            bkmcp.resolve_registry_server(view.servers[name], view=view, user_id="u", env={})
    assert bkmcp.resolve_registry_server(view.servers["good"], view=view, user_id=None, env={}).url


def test_rows_from_json_values_and_defaults() -> None:
    row = bkmcp.parse_registry_row(
        {
            "name": "s",
            "transport_type": "http",
            "url": "http://127.0.0.1:1/mcp",
            "headers": {"X-A": "b"},
            "enabled": False,
        },
        source="registry test",
    )
    assert row.problem is None and row.headers == {"X-A": "b"} and row.enabled is False and row.isolation == "public"
    for bad in (
        {"transport_type": "sse"},
        {"isolation": "team"},
        {"enabled": 2},
        {"enabled": "yes"},
        {"protocol_version": 5},
        {"command": ["x"]},
        {"url": 7},
    ):
        row = bkmcp.parse_registry_row(
            {"name": "s", "transport_type": "http", "url": "http://h/", **bad}, source="registry test"
        )
        assert isinstance(row.problem, bkmcp.InvalidConfigError), bad
    long = bkmcp.parse_registry_row({"name": "x" * 65, "transport_type": "http", "url": "http://h/"}, source="r")
    assert long.problem is not None and "1 to 64" in long.problem.message


def test_a_row_without_transport_type_is_stdio(registry_db) -> None:
    """Issue 17 item 4 (contract §11.3): "STDIO is the default" — the SQLite column default and an HTTP-source row
    without the field (or with null) are stdio; list_servers never shows "None"."""
    for row in ({"name": "s", "command": "srv"}, {"name": "s", "command": "srv", "transport_type": None}):
        parsed = bkmcp.parse_registry_row(row, source="registry test")
        assert parsed.problem is None and parsed.transport_type == "stdio", row
    path, db = registry_db
    db.execute("INSERT INTO mcp_servers (name, command) VALUES ('plain', 'srv')")
    registry = _open(path)
    try:
        view = registry.view(None)
        assert view.servers["plain"].transport_type == "stdio" and view.servers["plain"].problem is None
    finally:
        registry.close()
    res = run_bkmcp("--registry", str(path), "--list")
    assert res.exit_status == 0, res.stderr
    [listed] = res.json["data"]["servers"]
    assert listed["transport_type"] == "stdio" and "None" not in res.stdout


def test_disabled_server_is_in_the_view_and_refused(registry_db) -> None:
    path, db = registry_db
    _row(db, "off", url="https://example.com/", enabled=0)
    view = _open(path).view("u1")
    assert view.servers["off"].enabled is False
    with pytest.raises(bkmcp.ServerDisabledError) as info:
        bkmcp.resolve_registry_server(view.servers["off"], view=view, user_id="u1", env={})
    assert info.value.code == "mcp_server_disabled" and info.value.details["server"] == "off"


def test_admin_edits_are_seen_by_the_next_view(registry_db) -> None:
    path, db = registry_db
    registry = _open(path)
    assert registry.view(None).servers == {}
    _row(db, "later", url="https://example.com/")
    db.execute("INSERT INTO mcp_user_credentials VALUES ('u1', 'later', ?)", (json.dumps({"token": "t-1"}),))
    view = registry.view("u1")
    assert list(view.servers) == ["later"] and view.user_credentials == {"later": {"token": "t-1"}}
    db.execute("UPDATE mcp_servers SET enabled = 0 WHERE name = 'later'")
    db.execute("UPDATE mcp_user_credentials SET credentials = ? WHERE user_id = 'u1'", (json.dumps({"token": "t-2"}),))
    view = registry.view("u1")
    assert view.servers["later"].enabled is False and view.user_credentials["later"] == {"token": "t-2"}
    registry.close()


def test_concurrent_views_from_20_threads_while_an_admin_edits(registry_db) -> None:
    path, db = registry_db
    for i in range(5):
        _row(db, f"s{i}", url=f"https://example.com/{i}", isolation="user")
    for user in range(20):
        db.execute(
            "INSERT INTO mcp_user_credentials VALUES (?, 's0', ?)", (f"u{user}", json.dumps({"token": f"tok-{user}"}))
        )
    registry = _open(path)
    errors: list[BaseException] = []
    seen: dict[int, set[str]] = {}
    start = threading.Barrier(21)

    def reader(user: int) -> None:
        try:
            start.wait(timeout=30)
            for _ in range(50):
                view = registry.view(f"u{user}")
                assert view.user_credentials == {"s0": {"token": f"tok-{user}"}}  # only this user's own row
                seen.setdefault(user, set()).update(view.servers)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(u,)) for u in range(20)]
    for t in threads:
        t.start()
    start.wait(timeout=30)
    for i in range(5, 15):  # the admin adds servers while the readers read
        _row(db, f"s{i}", url=f"https://example.com/{i}")
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert all(not t.is_alive() for t in threads)
    assert all({f"s{i}" for i in range(5)} <= names for names in seen.values())
    assert len(registry.view(None).servers) == 15
    registry.close()


# -- credentials --------------------------------------------------------------------------------------------


@pytest.fixture
def creds(registry_db):
    path, db = registry_db
    _row(
        db,
        "per-user",
        url="https://example.com/mcp",
        headers={"Authorization": "Bearer ${user.token}"},
        isolation="user",
    )
    _row(db, "shared", url="https://example.com/shared", headers={"X-Token": "${user.token}"})
    _row(
        db,
        "tool",
        "stdio",
        command="srv",
        env_template={"API_KEY": "${user.API_KEY}", "HOME_DIR": "${HOME}", "LITERAL": "$${user.API_KEY}"},
        isolation="user",
    )
    db.execute("INSERT INTO mcp_credentials VALUES ('per-user', ?)", (json.dumps({"token": SECRET_SYSTEM}),))
    db.execute("INSERT INTO mcp_credentials VALUES ('shared', ?)", (json.dumps({"token": SECRET_SYSTEM}),))
    for user, server, credential in (
        ("alice", "per-user", {"token": SECRET_USER}),
        ("alice", "shared", {"token": SECRET_USER}),
        ("alice", "tool", {"API_KEY": SECRET_USER}),
        ("carol", "tool", {"API_KEY": SECRET_OTHER}),
    ):
        db.execute("INSERT INTO mcp_user_credentials VALUES (?, ?, ?)", (user, server, json.dumps(credential)))
    registry = _open(path)
    yield registry, db
    registry.close()


def _resolve(registry: bkmcp.Registry, server: str, user: str | None, env: dict[str, str] | None = None):
    view = registry.view(user)
    return bkmcp.resolve_registry_server(view.servers[server], view=view, user_id=user, env=env or {})


def test_credential_priority_user_then_system_then_missing(creds) -> None:
    registry, db = creds
    assert _resolve(registry, "per-user", "alice").headers == {"Authorization": f"Bearer {SECRET_USER}"}
    assert _resolve(registry, "per-user", "bob").headers == {"Authorization": f"Bearer {SECRET_SYSTEM}"}
    db.execute("DELETE FROM mcp_credentials WHERE server_name = 'per-user'")
    with pytest.raises(bkmcp.CredentialsMissingError) as info:
        _resolve(registry, "per-user", "bob")
    assert info.value.code == "mcp_credentials_missing" and info.value.details["server"] == "per-user"
    with pytest.raises(bkmcp.CredentialsMissingError, match="needs a user"):
        _resolve(registry, "per-user", None)


def test_public_server_uses_system_credentials_only(creds) -> None:
    registry, _ = creds
    for user in ("alice", "bob", None):  # alice has her own row for 'shared': it never reaches a shared session
        resolved = _resolve(registry, "shared", user)
        assert resolved.headers == {"X-Token": SECRET_SYSTEM, "Authorization": f"Bearer {SECRET_SYSTEM}"}


def test_user_templates_in_env_and_the_resident_environment(creds) -> None:
    registry, _ = creds
    alice = _resolve(registry, "tool", "alice", env={"HOME": "/home/resident", "PATH": "/bin", "SECRET_X": "no"})
    assert alice.env == {"API_KEY": SECRET_USER, "HOME_DIR": "/home/resident", "LITERAL": "${user.API_KEY}"}
    assert alice.inherited_env == {"HOME": "/home/resident", "PATH": "/bin"} and alice.cwd is None
    carol = _resolve(registry, "tool", "carol", env={"HOME": "/h"})
    assert carol.env["API_KEY"] == SECRET_OTHER
    view = registry.view("carol")
    custom = bkmcp.resolve_registry_server(
        view.servers["tool"], view=view, user_id="carol", env={"HOME": "/h"}, inherited_env={"PATH": "/only"}
    )
    assert custom.inherited_env == {"PATH": "/only"}
    with pytest.raises(bkmcp.MissingEnvironmentVariableError) as info:
        _resolve(registry, "tool", "alice", env={})
    assert info.value.details == {"variable": "HOME", "server": "tool"}


def test_missing_credential_field_names_server_and_field_never_a_value(creds) -> None:
    registry, db = creds
    db.execute(
        "UPDATE mcp_user_credentials SET credentials = ? WHERE user_id = 'alice' AND server_name = 'tool'",
        (json.dumps({"api_key": SECRET_USER}),),
    )
    with pytest.raises(bkmcp.CredentialsMissingError) as info:
        _resolve(registry, "tool", "alice", env={"HOME": "/h"})
    error = info.value
    assert error.details == {"field": "API_KEY", "server": "tool"}
    assert "'API_KEY'" in error.message and "'tool'" in error.message
    _assert_no_secret(error.message, str(error.hint), json.dumps(error.error_object()))


def test_user_field_in_a_cli_config_is_still_unsupported_syntax(write_config) -> None:
    """The CLI behaves as before: ${user.FIELD} is only understood by the resident mode."""
    path = write_config(
        {"mcpServers": {"s": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"X-A": "${user.token}"}}}}
    )
    result = run_bkmcp("--config", str(path), "s", "--check")
    assert result.exit_status == 1 and result.error_code == "invalid_mcp_config"
    assert "unsupported reference syntax" in result.json["error"]["message"]


def test_bad_credential_rows_fail_only_their_server(registry_db) -> None:
    path, db = registry_db
    _row(db, "a", url="https://example.com/a", isolation="user")
    _row(db, "b", url="https://example.com/b", isolation="user")
    db.execute("INSERT INTO mcp_user_credentials VALUES ('u', 'a', ?)", ('{"token": "' + SECRET_USER,))
    db.execute("INSERT INTO mcp_user_credentials VALUES ('u', 'b', ?)", (json.dumps({"token": "fine-token"}),))
    db.execute("INSERT INTO mcp_credentials VALUES ('a', ?)", (json.dumps({"token": [1]}),))
    registry = _open(path)
    with pytest.raises(bkmcp.InvalidConfigError) as info:
        _resolve(registry, "a", "u")
    _assert_no_secret(info.value.message)
    with pytest.raises(bkmcp.InvalidConfigError, match="system credentials"):
        _resolve(registry, "a", "other")
    assert _resolve(registry, "b", "u").headers == {"Authorization": "Bearer fine-token"}
    registry.close()


# -- header mapping and the CLI's header rules ----------------------------------------------------------------


def _http(headers: dict[str, str] | None = None) -> bkmcp.RegistryServer:
    row = bkmcp.parse_registry_row(
        {
            "name": "h",
            "transport_type": "http",
            "url": "https://example.com/mcp",
            "headers": headers or {},
            "isolation": "user",
        },
        source="registry test",
    )
    assert row.problem is None
    return row


def _with(credential: dict[str, str], headers: dict[str, str] | None = None) -> bkmcp.ResolvedServer:
    row = _http(headers)
    view = bkmcp.RegistryView({"h": row}, user_credentials={"h": credential})
    return bkmcp.resolve_registry_server(row, view=view, user_id="u", env={})


def test_credential_fields_map_to_headers() -> None:
    assert _with({"api_key": SECRET_USER}).headers == {"Authorization": f"Bearer {SECRET_USER}"}
    assert _with({"token": SECRET_USER}).headers == {"Authorization": f"Bearer {SECRET_USER}"}
    assert _with({"API_KEY": SECRET_USER}).headers == {"X-API-Key": SECRET_USER}
    both = _with({"token": SECRET_USER, "API_KEY": SECRET_OTHER})
    assert both.headers == {"Authorization": f"Bearer {SECRET_USER}", "X-API-Key": SECRET_OTHER}
    # a configured header of that name (any case) wins; the field is then only reachable as ${user.FIELD}
    configured = _with(
        {"token": SECRET_USER, "API_KEY": SECRET_OTHER}, {"authorization": "Token ${user.token}", "x-api-key": "fixed"}
    )
    assert configured.headers == {"authorization": f"Token {SECRET_USER}", "x-api-key": "fixed"}
    # other fields never become headers; a value with ${ is data, never expanded
    assert _with({"region": "eu", "token": "a${HOME}b"}).headers == {"Authorization": "Bearer a${HOME}b"}


def test_api_key_and_token_both_present_is_an_auth_conflict() -> None:
    with pytest.raises(bkmcp.AuthConflictError) as info:
        _with({"api_key": SECRET_USER, "token": SECRET_OTHER})
    assert info.value.code == "mcp_auth_conflict"
    _assert_no_secret(info.value.message, str(info.value.hint))
    # configured Authorization: neither maps, no conflict
    assert _with({"api_key": "k" * 8, "token": "t" * 8}, {"Authorization": "Bearer ${user.token}"}).headers == {
        "Authorization": "Bearer " + "t" * 8
    }
    with pytest.raises(bkmcp.AuthConflictError, match="X-Bkapi-Authorization"):
        _with({"api_key": SECRET_USER}, {"X-Bkapi-Authorization": '{"access_token": "${user.api_key}"}'})
    with pytest.raises(bkmcp.AuthConflictError):  # the CLI's own rule on configured headers (A03)
        _with({}, {"Authorization": "Bearer x", "x-bkapi-authorization": '{"access_token": "y"}'})


def test_cli_header_rules_apply_to_the_result() -> None:
    with pytest.raises(bkmcp.InvalidConfigError, match="line break"):
        _with({"token": "abc\r\nX-Evil: 1"})
    with pytest.raises(bkmcp.InvalidConfigError, match="line break"):
        _with({"t": "abc\nd"}, {"X-Token": "${user.t}"})
    with pytest.raises(bkmcp.InvalidConfigError, match="empty Bearer token"):
        _with({"token": ""})
    with pytest.raises(bkmcp.InvalidConfigError, match="empty after expansion"):
        _with({"t": " "}, {"X-Auth-Token": "${user.t}"})
    bkapi = _with(
        {"code": "app", "secret": SECRET_USER, "ticket": SECRET_OTHER},
        {
            "X-Bkapi-Authorization": '{"bk_app_code": "${user.code}", "bk_app_secret": "${user.secret}", '
            '"bk_ticket": "${user.ticket}"}'
        },
    )
    assert json.loads(bkapi.headers["X-Bkapi-Authorization"])["bk_app_secret"] == SECRET_USER
    with pytest.raises(bkmcp.InvalidConfigError, match="not a supported form"):
        _with({"code": "app"}, {"X-Bkapi-Authorization": '{"bk_app_code": "${user.code}"}'})


def test_redactor_knows_every_credential_value() -> None:
    resolved = _with({"token": SECRET_USER, "note": SECRET_OTHER, "region": "eu"})
    text = f"failed with {SECRET_USER} and {SECRET_OTHER} in eu"
    assert resolved.redactor.scrub(text) == "failed with *** and *** in eu"  # short non-secret fields stay readable
    assert bkmcp.redact_headers(resolved.headers) == {"Authorization": "***"}


# -- tools cache --------------------------------------------------------------------------------------------


def test_tools_cache_round_trip_public_key_and_exact_numbers(registry_db) -> None:
    path, db = registry_db
    _row(db, "pub", url="https://example.com/")
    _row(db, "own", url="https://example.com/", isolation="user")
    registry = _open(path)
    view = registry.view("u1")
    tools = bkmcp.parse_json('[{"name": "t", "inputSchema": {"type": "object", "maximum": 12345678901234567890.5}}]')
    assert registry.load_tools(view.servers["pub"], "u1") is None
    registry.store_tools(view.servers["pub"], "u1", tools, "2025-11-25")
    registry.store_tools(view.servers["own"], "u1", tools[:0], None)
    rows = db.execute("SELECT server_name, user_id, tools, protocol_version FROM mcp_tools_cache ORDER BY 1").fetchall()
    assert rows[0][:2] == ("own", "u1") and rows[1][:2] == ("pub", "")
    assert "12345678901234567890.5" in rows[1][2]
    loaded = registry.load_tools(view.servers["pub"], "someone-else")
    assert loaded is not None and loaded.protocol_version == "2025-11-25"
    assert bkmcp.dump_json(loaded.tools) == bkmcp.dump_json(tools)
    assert registry.load_tools("own", "u1") is not None and registry.load_tools("own", "u2") is None
    db.execute("UPDATE mcp_tools_cache SET tools = 'garbage' WHERE server_name = 'own'")
    assert registry.load_tools("own", "u1") is None
    registry.close()


def test_the_tools_cache_keeps_the_servers_ttl(registry_db, tmp_path: Path) -> None:
    """The one freshness rule's third store (docs/contract.md §11.3, §11.5): the cache keeps ``ttlMs`` with the
    catalogue; a registry made before the ``ttl_ms`` column works as before, its catalogues without a ttlMs."""
    path, db = registry_db
    registry = bkmcp.SqliteRegistry(str(path), log=_log()[0])
    registry.store_tools("pub", None, [{"name": "t"}], "2026-07-28", 60000)
    assert db.execute("SELECT ttl_ms FROM mcp_tools_cache").fetchall() == [(60000,)]
    loaded = registry.load_tools("pub", None)
    assert loaded is not None and loaded.ttl_ms == 60000 and loaded.tools == [{"name": "t"}]
    registry.close()
    old = tmp_path / "old.db"
    with sqlite3.connect(old) as made:
        made.executescript(SPEC_SCHEMA.replace("ttl_ms INTEGER,", ""))
    assert (
        "ttl_ms"
        not in sqlite3.connect(old)
        .execute("SELECT sql FROM sqlite_master WHERE name = 'mcp_tools_cache'")
        .fetchone()[0]
    )
    registry = bkmcp.SqliteRegistry(str(old), log=_log()[0])
    registry.store_tools("pub", None, [{"name": "t"}], None, 60000)
    loaded = registry.load_tools("pub", None)
    assert loaded is not None and loaded.ttl_ms == 0 and loaded.tools == [{"name": "t"}]
    registry.close()


def test_read_only_registry_keeps_the_tools_cache_in_memory(registry_db) -> None:
    path, db = registry_db
    _row(db, "pub", url="https://example.com/")
    log, stream = _log()
    registry = bkmcp.SqliteRegistry(str(path), log=log, timeout=0.1)
    db.execute("BEGIN EXCLUSIVE")  # the admin holds the file: the write cannot happen
    try:
        registry.store_tools("pub", None, [{"name": "t"}], None)
        registry.store_tools("pub", None, [{"name": "t2"}], None)
    finally:
        db.execute("ROLLBACK")
    assert stream.getvalue().count("cannot write the tools cache") == 1
    loaded = registry.load_tools("pub", None)
    assert loaded is not None and loaded.tools == [{"name": "t2"}]
    registry.close()


# -- CLI: --import / --list ---------------------------------------------------------------------------------

MCP_JSON = {
    "mcpServers": {
        "docs": {
            "type": "http",
            "url": "https://mcp.example.com/docs/?a=1",
            "protocolVersion": "2025-06-18",
            "headers": {"Authorization": "Bearer ${DOCS_TOKEN}", "X-Team": "core"},
        },
        "fs": {
            "type": "stdio",
            "command": "npx",
            "args": ["-y", "server-fs", "/data"],
            "env": {"API_KEY": "${user.API_KEY}", "MODE": "ro"},
            "cwd": "/srv",
        },
        "literal": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"X-API-Key": SECRET_SYSTEM}},
    }
}


def test_import_then_list_in_process(tmp_path: Path, write_config) -> None:
    config = write_config(MCP_JSON)
    result = run_bkmcp("--registry", "reg.db", "--import", str(config), cwd=str(tmp_path))
    assert result.exit_status == 0, result.stderr
    assert result.json == {
        "ok": True,
        "data": {"imported": ["docs", "fs", "literal"], "registry": str(tmp_path / "reg.db")},
    }
    assert result.stderr.count("warning") == 1 and "'fs'" in result.stderr and "cwd" in result.stderr
    with sqlite3.connect(tmp_path / "reg.db") as db:
        rows = {r[0]: r for r in db.execute("SELECT * FROM mcp_servers")}
    assert rows["docs"] == (
        "docs",
        "http",
        None,
        None,
        None,
        "https://mcp.example.com/docs/?a=1",
        '{"Authorization":"Bearer ${DOCS_TOKEN}","X-Team":"core"}',
        "public",
        "2025-06-18",
        1,
    )
    assert rows["fs"] == (
        "fs",
        "stdio",
        "npx",
        '["-y","server-fs","/data"]',
        '{"API_KEY":"${user.API_KEY}","MODE":"ro"}',
        None,
        None,
        "public",
        None,
        1,
    )
    listed = run_bkmcp("--registry", str(tmp_path / "reg.db"), "--list")
    assert listed.exit_status == 0 and listed.stderr == ""
    servers = {s["name"]: s for s in listed.json["data"]["servers"]}
    assert servers["docs"]["headers"] == {"Authorization": "Bearer ${DOCS_TOKEN}", "X-Team": "core"}
    assert servers["fs"]["env_template"] == {"API_KEY": "${user.API_KEY}", "MODE": "ro"}
    assert servers["literal"]["headers"] == {"X-API-Key": "***"}
    assert servers["fs"]["enabled"] is True and servers["fs"]["isolation"] == "public"
    _assert_no_secret(listed.stdout)


def test_import_takes_an_editor_file_as_it_is(tmp_path: Path, write_config) -> None:
    """Issue 28 item 5: a Claude Desktop / Cline file imports as written: a typeless "command" entry is stdio,
    "disabled": true arrives disabled, approval lists are not carried."""
    editor = {
        "mcpServers": {
            "fs": {"command": "npx", "args": ["-y", "server-fs"], "autoApprove": ["read_file"]},
            "off": {"command": "uvx", "args": ["mcp-server-git"], "disabled": True},
        }
    }
    result = run_bkmcp("--registry", "reg.db", "--import", str(write_config(editor)), cwd=str(tmp_path))
    assert result.exit_status == 0 and result.stderr == "", result.stderr
    with sqlite3.connect(tmp_path / "reg.db") as db:
        rows = {r[0]: r[1:] for r in db.execute("SELECT name, transport_type, command, args, enabled FROM mcp_servers")}
    assert rows == {"fs": ("stdio", "npx", '["-y","server-fs"]', 1), "off": ("stdio", "uvx", '["mcp-server-git"]', 0)}


def test_import_replaces_keeps_credentials_and_clears_the_tools_cache(tmp_path: Path, write_config) -> None:
    reg = tmp_path / "reg.db"
    assert run_bkmcp("--registry", str(reg), "--import", str(write_config(MCP_JSON))).exit_status == 0
    with sqlite3.connect(reg) as db:
        db.execute("UPDATE mcp_servers SET isolation = 'user', enabled = 0 WHERE name = 'docs'")
        db.execute("INSERT INTO mcp_credentials VALUES ('docs', ?)", (json.dumps({"token": SECRET_SYSTEM}),))
        db.execute(
            "INSERT INTO mcp_tools_cache (server_name, user_id, tools, fetched_at) VALUES ('docs', '', '[]', 1.0)"
        )
    again = {"mcpServers": {"docs": {"type": "http", "url": "https://new.example.com/mcp"}}}
    result = run_bkmcp("--registry", str(reg), "--import", str(write_config(again, name="again.json")))
    assert result.exit_status == 0 and result.json["data"]["imported"] == ["docs"]
    with sqlite3.connect(reg) as db:
        assert db.execute(
            "SELECT url, isolation, enabled, headers FROM mcp_servers WHERE name = 'docs'"
        ).fetchone() == ("https://new.example.com/mcp", "public", 1, "{}")
        assert db.execute("SELECT count(*) FROM mcp_servers").fetchone() == (3,)
        assert db.execute("SELECT count(*) FROM mcp_credentials").fetchone() == (1,)
        assert db.execute("SELECT count(*) FROM mcp_tools_cache").fetchone() == (0,)
    listed = run_bkmcp("--registry", str(reg), "--list")
    _assert_no_secret(listed.stdout, listed.stderr)


def test_import_uses_the_strict_parser_and_writes_nothing_on_error(tmp_path: Path, write_config) -> None:
    reg = tmp_path / "reg.db"
    dup = write_config('{"mcpServers": {"a": {"type": "http", "url": "http://h/", "url": "http://i/"}}}')
    result = run_bkmcp("--registry", str(reg), "--import", str(dup))
    assert result.exit_status == 1 and result.error_code == "invalid_mcp_config" and result.stdout == ""
    assert not reg.exists()
    missing = run_bkmcp("--registry", str(reg), "--import", str(tmp_path / "none.json"))
    assert missing.exit_status == 1 and missing.error_code == "mcp_config_not_found"
    long_name = write_config(
        {"mcpServers": {"ok": {"type": "http", "url": "http://h/"}, "x" * 70: {"type": "http", "url": "http://h/"}}},
        name="long.json",
    )
    result = run_bkmcp("--registry", str(reg), "--import", str(long_name))
    assert result.exit_status == 1 and result.error_code == "invalid_mcp_config"
    with sqlite3.connect(reg) as db:
        assert db.execute("SELECT count(*) FROM mcp_servers").fetchone() == (0,)


def test_list_reports_bad_rows_and_missing_files(tmp_path: Path) -> None:
    reg = tmp_path / "reg.db"
    missing = run_bkmcp("--registry", str(reg), "--list")
    assert missing.exit_status == 1 and missing.error_code == "registry_error" and not reg.exists()
    _open(reg).close()
    with sqlite3.connect(reg) as db:
        _row(db, "broken", headers='{"Authorization": "Bearer ' + SECRET_USER, url="https://e.com/")
    listed = run_bkmcp("--registry", str(reg), "--list")
    assert listed.exit_status == 0
    (row,) = listed.json["data"]["servers"]
    assert row["name"] == "broken" and row["problem"]["code"] == "invalid_mcp_config"
    _assert_no_secret(listed.stdout)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--registry", "r.db"], "only valid with --resident"),
        (["--import", "mcp.json"], "take a --registry FILE"),
        (["--list"], "take a --registry FILE"),
        (["--registry", "r.db", "--list", "--import", "mcp.json"], "take a --registry FILE"),
        (["--registry", "r.db", "--list", "--resident"], "--resident"),
        (["--registry", "r.db", "--list", "--config", "x.json"], "--config"),
        (["--registry", "r.db", "--list", "--jq", ".data"], "--jq"),
        (["--registry", "r.db", "--list", "--list"], "more than once"),
        (["--registry", "r.db", "--import"], "needs a value"),
        (["--registry", "r.db", "--import", "--list"], "needs a value"),
        (["--registry", "r.db", "--import="], "needs an mcp.json path"),
        (["--registry", "", "--list"], "needs a SQLite file path"),
        (["--registry", "https://platform.example.com/internal/mcp/config", "--list"], "not on a URL"),
        (["--registry", "r.db", "--list", "--timeout", "0"], "positive"),
    ],
)
def test_registry_tool_usage_errors(tmp_path: Path, argv: list[str], message: str) -> None:
    result = run_bkmcp(*argv, cwd=str(tmp_path))
    assert result.exit_status == 1 and result.error_code == "usage_error", result.stderr
    assert message in result.json["error"]["message"]
    assert not (tmp_path / "r.db").exists()


def test_list_and_import_after_a_server_are_what_they_were(tmp_path: Path) -> None:
    """A tool's own --list/--import parameter (after the tool name) stays a tool option (CLI unchanged)."""
    inv = bkmcp.parse_argv(["srv", "tool", "--list", "x", "--import", "y"])
    assert inv.registry_list is False and inv.registry_import is None
    assert [(t.name, t.value) for t in inv.tool_tokens] == [("list", "x"), ("import", "y")]
    result = run_bkmcp("srv", "--list", cwd=str(tmp_path))
    assert result.exit_status == 1 and "unknown option --list" in result.json["error"]["message"]


def test_help_with_a_registry_tool_prints_help_only(tmp_path: Path) -> None:
    result = run_bkmcp("--registry", "r.db", "--list", "--help", cwd=str(tmp_path))
    assert result.exit_status == 0 and "bkmcp" in result.stdout and not (tmp_path / "r.db").exists()


def test_import_and_list_through_a_subprocess(tmp_path: Path, write_config) -> None:
    config = write_config(MCP_JSON)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    imported = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bkmcp.py"),
            "--registry",
            "~/r.db",
            "-v",
            "--import",
            str(config),
            "--timeout",
            "5s",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["data"]["registry"] == str(tmp_path / "r.db")
    listed = subprocess.run(
        [sys.executable, str(ROOT / "bkmcp.py"), "--list", "--registry", str(tmp_path / "r.db")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert listed.returncode == 0 and listed.stderr == ""
    assert [s["name"] for s in json.loads(listed.stdout)["data"]["servers"]] == ["docs", "fs", "literal"]
    _assert_no_secret(listed.stdout, imported.stdout, imported.stderr)
    broken = subprocess.run(
        [sys.executable, str(ROOT / "bkmcp.py"), "--registry", str(tmp_path), "--list"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert broken.returncode == 1 and json.loads(broken.stderr)["error"]["code"] == "registry_error"
    assert "Traceback" not in broken.stderr


def test_duplicate_and_nameless_rows_of_a_source() -> None:
    log, stream = _log()
    rows = [
        {"name": "twice", "transport_type": "http", "url": "http://h/"},
        {"name": "twice", "transport_type": "http", "url": "http://i/"},
        {"name": None, "transport_type": "http"},
        {"name": "ok", "transport_type": "http", "url": "http://h/", "enabled": None, "isolation": None},
    ]
    view = bkmcp._build_view(rows, [(5, "{}")], (), source="registry test", log=log)
    assert set(view.servers) == {"twice", "ok"}
    assert "listed more than once" in view.servers["twice"].problem.message  # type: ignore[union-attr]
    ok = view.servers["ok"]
    assert ok.problem is None and ok.enabled and ok.isolation == "public"
    assert "without a name" in stream.getvalue() and view.system_credentials == {}


def test_a_registry_broken_after_start_is_a_registry_error_per_command(registry_db) -> None:
    path, db = registry_db
    registry = _open(path)
    db.execute("ALTER TABLE mcp_servers RENAME TO old_servers")
    with pytest.raises(bkmcp.RegistryError, match="cannot read the registry") as info:
        registry.view("u1")
    assert str(path) in info.value.message
    assert registry.load_tools("x", "u1") is None  # the tools cache is still a table: a miss
    db.execute("ALTER TABLE old_servers RENAME TO mcp_servers")
    assert registry.view("u1").servers == {}
    registry.close()


def test_credentials_must_be_objects_of_strings() -> None:
    assert bkmcp.parse_credentials('{"a": "b"}', where="w") == {"a": "b"}
    assert bkmcp.parse_credentials({"a": "b"}, where="w") == {"a": "b"}
    for bad in ("", None, "[]", '{"a": 1}', "{bad"):
        with pytest.raises(bkmcp.InvalidConfigError):
            bkmcp.parse_credentials(bad, where="w")


def test_templates_are_one_pass_never_recursive() -> None:
    """A credential value that looks like a reference is data: ${user.a} -> "${user.b}" stays as it is."""
    row = bkmcp.parse_registry_row(
        {
            "name": "s",
            "transport_type": "stdio",
            "command": "srv",
            "env_template": {"A": "${user.a}", "B": "x-${user.b}-$${user.a}", "C": "${HOME}"},
        },
        source="registry test",
    )
    view = bkmcp.RegistryView({"s": row}, system_credentials={"s": {"a": "${user.b}", "b": "${HOME}"}})
    resolved = bkmcp.resolve_registry_server(row, view=view, user_id=None, env={"HOME": "${user.a}"})
    assert resolved.env == {"A": "${user.b}", "B": "x-${HOME}-${user.a}", "C": "${user.a}"}
    assert resolved.args == [] and resolved.cwd is None
    args = bkmcp.parse_registry_row(
        {"name": "s", "transport_type": "stdio", "command": "srv", "args": ["--token", "${user.a}"]},
        source="registry test",
    )
    with pytest.raises(bkmcp.InvalidConfigError, match="not allowed here: arguments are visible"):  # not in args
        bkmcp.resolve_registry_server(
            args, view=bkmcp.RegistryView({"s": args}, system_credentials={"s": {"a": "v"}}), user_id=None, env={}
        )
