"""A minimal private stand-in of the block-10.1 registry interface, for resident-mode tests, bench and demo.

The registry engineer builds the real ``open_registry`` / ``Registry`` / ``resolve_registry_server`` in bkmcp.py
section 10.1. Until that branch is merged, ``install(bkmcp)`` puts these stand-ins into the module (only when
it has no ``open_registry`` of its own), so block 10.2 runs against the interface alone. SQLite only, with the
SPEC §11.3 schema; credentials per SPEC §11.4 (user -> system default -> ``mcp_credentials_missing``,
``${user.FIELD}``, the ``api_key``/``token``/``API_KEY`` header mapping); then the CLI's own
``resolve_server`` (``${NAME}`` expansion, header rules, redactor). It never ships in bkmcp.py.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS mcp_servers (
  name TEXT PRIMARY KEY,
  transport_type TEXT NOT NULL CHECK (transport_type IN ('stdio','http')),
  command TEXT, args TEXT,
  env_template TEXT,
  url TEXT, headers TEXT,
  isolation TEXT NOT NULL DEFAULT 'public' CHECK (isolation IN ('public','user')),
  protocol_version TEXT,
  enabled INTEGER NOT NULL DEFAULT 1);
CREATE TABLE IF NOT EXISTS mcp_credentials (
  server_name TEXT PRIMARY KEY REFERENCES mcp_servers(name), credentials TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS mcp_user_credentials (
  user_id TEXT NOT NULL, server_name TEXT NOT NULL REFERENCES mcp_servers(name), credentials TEXT NOT NULL,
  PRIMARY KEY (user_id, server_name));
CREATE TABLE IF NOT EXISTS mcp_tools_cache (
  server_name TEXT NOT NULL, user_id TEXT NOT NULL, tools TEXT NOT NULL, protocol_version TEXT,
  fetched_at REAL NOT NULL, PRIMARY KEY (server_name, user_id));
"""


def write_registry(path: str, servers: list[dict[str, Any]], system: dict[str, dict] | None = None,
                   users: dict[tuple[str, str], dict] | None = None) -> None:
    """Write a registry file with raw sqlite3 (rows as dicts of the schema's columns; JSON columns as values)."""
    db = sqlite3.connect(path)
    try:
        db.executescript(SCHEMA)
        for row in servers:
            values = dict(row)
            for column in ("args", "env_template", "headers"):
                if column in values and not isinstance(values[column], (str, type(None))):
                    values[column] = json.dumps(values[column])
            columns = ", ".join(values)
            db.execute(f"INSERT OR REPLACE INTO mcp_servers ({columns}) VALUES ({', '.join('?' * len(values))})",
                       list(values.values()))
        for server, creds in (system or {}).items():
            db.execute("INSERT OR REPLACE INTO mcp_credentials VALUES (?, ?)", (server, json.dumps(creds)))
        for (user, server), creds in (users or {}).items():
            db.execute("INSERT OR REPLACE INTO mcp_user_credentials VALUES (?, ?, ?)",
                       (user, server, json.dumps(creds)))
        db.commit()
    finally:
        db.close()


@dataclass
class RegistryServer:
    name: str
    transport_type: str
    command: str | None
    args: list[str]
    env_template: dict[str, str]
    url: str | None
    headers: dict[str, str]
    isolation: str
    protocol_version: str | None
    enabled: bool
    problem: Any = None


@dataclass
class RegistryView:
    servers: dict[str, RegistryServer]
    system_credentials: dict[str, dict[str, Any]] = field(default_factory=dict)
    user_credentials: dict[str, dict[str, Any]] = field(default_factory=dict)


def _json_column(bkmcp: Any, name: str, column: str, text: Any, kind: type) -> Any:
    if text is None:
        return kind()
    value = json.loads(text) if isinstance(text, str) else text
    if not isinstance(value, kind):
        raise bkmcp.InvalidConfigError(f"registry server {name!r}: column {column!r} must be a JSON {kind.__name__}")
    return value


class Registry:
    def __init__(self, bkmcp: Any, path: str) -> None:
        self.bkmcp = bkmcp
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False)
        self._db.executescript(SCHEMA)

    def _rows(self) -> dict[str, RegistryServer]:
        servers = {}
        for (name, kind, command, args, env_template, url, headers, isolation, version, enabled) in self._db.execute(
                "SELECT name, transport_type, command, args, env_template, url, headers, isolation, "
                "protocol_version, enabled FROM mcp_servers"):
            row = RegistryServer(name, kind, command, [], {}, url, {}, isolation, version, bool(enabled))
            try:
                row.args = _json_column(self.bkmcp, name, "args", args, list)
                row.env_template = _json_column(self.bkmcp, name, "env_template", env_template, dict)
                row.headers = _json_column(self.bkmcp, name, "headers", headers, dict)
                if kind == "stdio" and not command:
                    raise self.bkmcp.InvalidConfigError(f"registry server {name!r}: a stdio server needs a command")
            except (ValueError, self.bkmcp.InvalidConfigError) as exc:
                row.problem = exc if isinstance(exc, self.bkmcp.BkmcpError) else \
                    self.bkmcp.InvalidConfigError(f"registry server {name!r}: invalid JSON in a column")
            servers[name] = row
        return servers

    def view(self, user_id: str | None, access_token: str | None) -> RegistryView:
        with self._lock:
            try:
                servers = self._rows()
                system = {s: json.loads(c) for s, c in self._db.execute(
                    "SELECT server_name, credentials FROM mcp_credentials")}
                users = {} if user_id is None else {s: json.loads(c) for s, c in self._db.execute(
                    "SELECT server_name, credentials FROM mcp_user_credentials WHERE user_id = ?", (user_id,))}
            except sqlite3.Error as exc:
                raise self.bkmcp.RegistryError(f"registry {self.path}: cannot be read ({type(exc).__name__})") from None
        if user_id is None:
            servers = {n: r for n, r in servers.items() if r.isolation == "public"}
        return RegistryView(servers, system, users)

    def load_tools(self, server_name: str, user_id: str) -> list[dict] | None:
        with self._lock:
            row = self._db.execute("SELECT tools FROM mcp_tools_cache WHERE server_name = ? AND user_id = ?",
                                   (server_name, user_id)).fetchone()
        return self.bkmcp.parse_json(row[0]) if row else None

    def store_tools(self, server_name: str, user_id: str, tools: list, protocol_version: str | None) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO mcp_tools_cache VALUES (?, ?, ?, ?, ?)",
                             (server_name, user_id, self.bkmcp.dump_json(tools), protocol_version, time.time()))
            self._db.commit()

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _standin_open_registry(bkmcp: Any):
    def open_registry(source: str, *, env: Any, log: Any, timeout: float) -> Registry:
        if source.startswith(("http://", "https://")):
            raise bkmcp.RegistryError("the test stand-in registry reads SQLite files only")
        try:
            return Registry(bkmcp, source)
        except sqlite3.Error as exc:
            raise bkmcp.RegistryError(f"registry {source}: cannot be opened or created ({type(exc).__name__})") \
                from None
    return open_registry


_USER_REF = re.compile(r"\$\$\{|\$\{user\.([A-Za-z0-9_]+)\}")


def _standin_resolve(bkmcp: Any):
    def resolve_registry_server(row: RegistryServer, *, view: RegistryView, user_id: str | None, env: Any,
                                inherited_env: Any) -> Any:
        if row.isolation == "user":
            creds = view.user_credentials.get(row.name) if user_id is not None else None
            if creds is None:
                creds = view.system_credentials.get(row.name)
            if creds is None:
                raise bkmcp.CredentialsMissingError(f"server {row.name!r} has no credentials for this user",
                                                    details={"server_name": row.name})
        else:
            creds = view.system_credentials.get(row.name, {})

        def fill(text: str) -> str:
            def one(match: re.Match) -> str:
                if match.group(0) == "$${":
                    return "$${"
                field_name = match.group(1)
                if field_name not in creds:
                    raise bkmcp.CredentialsMissingError(
                        f"server {row.name!r}: the credential has no field {field_name!r}",
                        details={"server_name": row.name, "field": field_name})
                return str(creds[field_name])
            return _USER_REF.sub(one, text)

        headers = {k: fill(v) for k, v in row.headers.items()}
        if row.transport_type == "http":
            lowered = {k.lower() for k in headers}
            if "api_key" in creds and "token" in creds and "authorization" not in lowered:
                raise bkmcp.AuthConflictError(f"server {row.name!r}: the credential has both api_key and token")
            for key, header, prefix in (("api_key", "Authorization", "Bearer "), ("token", "Authorization", "Bearer "),
                                        ("API_KEY", "X-API-Key", "")):
                if key in creds and header.lower() not in lowered:
                    headers[header] = prefix + str(creds[key])
                    lowered.add(header.lower())
        config = bkmcp.ServerConfig(
            name=row.name, type=row.transport_type, config_file="registry", url=row.url,
            headers=tuple(headers.items()), command=row.command, args=tuple(row.args),
            env=tuple((k, fill(v)) for k, v in row.env_template.items()), protocol_version=row.protocol_version)
        server = bkmcp.resolve_server(config, env)
        for value in creds.values():
            if isinstance(value, str):
                server.redactor.add(value, whole=False)
        server.inherited_env = dict(inherited_env) if row.transport_type == "stdio" else {}
        return server
    return resolve_registry_server


def install(bkmcp: Any) -> bool:
    """Give ``bkmcp`` the stand-in registry functions unless it has its own; True when installed."""
    if hasattr(bkmcp, "open_registry"):
        return False
    bkmcp.open_registry = _standin_open_registry(bkmcp)
    bkmcp.resolve_registry_server = _standin_resolve(bkmcp)
    return True
