#!/usr/bin/env python3
"""bkmcp: a command-line MCP (Model Context Protocol) client in one file.

Connect to MCP servers configured in one ``mcp.json``, check them, discover their tools, read a tool's help and
call a tool with typed arguments, with one JSON envelope on stdout and exit codes scripts can trust
(0 success, 1 local/usage error, 2 remote/runtime error, 130 interrupted).

The module is split into sections by banner comments (``grep -n '^# ====' bkmcp.py`` prints them). Each section
uses only the sections above it:

    1. Errors & exit codes      one exception root, every stable error code of SPEC §7
    2. Helpers                  JSON with number fidelity, redaction, durations, deadlines, logging
    3. Config                   file selection, strict parsing, per-field validation, ${VAR} expansion
    4. Auth                     Bearer / X-Bkapi-Authorization forms, conflicts, secrets to scrub
    5. Protocol core (sans-IO)  JSON-RPC framing, SSE decoder, eras, request building, classification
    6. Transports               HTTP via httpx, stdio via subprocess
    7. Client flows             negotiation, discovery with pagination guards, calls
    8. Schema flags             inputSchema -> typed flags, values, validation
    9. Output                   envelopes, --jq, help text
   10. Resident mode            (not implemented in this build: stable error)
   11. CLI                      argument routing and ``main(argv) -> int``, the one exception -> exit ladder

Exception tree (section 1)::

    BkmcpError                      exit 1 unless stated
     +-- UsageError                 usage_error
     +-- InvalidConfigError         invalid_mcp_config
     +-- ConfigNotFoundError        mcp_config_not_found
     +-- ServerNotFoundError        mcp_server_not_found
     +-- MissingEnvironmentVariableError  missing_environment_variable
     +-- AuthConflictError          mcp_auth_conflict
     +-- InvalidArgumentsError      invalid_mcp_arguments
     +-- UnsupportedOptionError     unsupported_option
     +-- ToolNotFoundError          mcp_tool_not_found
     +-- InvalidJqExpressionError   invalid_jq_expression
     +-- JqUnavailableError         jq_unavailable
     +-- InternalError              internal_error (exit 1 before a remote step, 2 after)
     +-- RemoteError                exit 2
          +-- AuthRequiredError     mcp_auth_required
          +-- PermissionDeniedError mcp_permission_denied
          +-- ConnectionFailedError mcp_connection_error
          +-- McpTimeoutError       mcp_timeout
          +-- ProtocolError         mcp_protocol_error
          +-- DiscoveryIncompleteError  mcp_discovery_incomplete
          +-- ToolError             mcp_tool_error
          +-- CapabilityUnsupportedError  mcp_capability_unsupported
          +-- JqError               jq_error

Heavy dependencies (httpx, jsonschema, jq) are imported lazily by the code paths that need them, so
``bkmcp --help`` and ``bkmcp <server> --help`` import none of them. Nothing connects at import time.
"""

from __future__ import annotations

import decimal
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

__version__ = "0.1.0"

# ======================================================================================================
# 1. Errors & exit codes
# ======================================================================================================

EXIT_OK = 0
EXIT_LOCAL = 1
EXIT_REMOTE = 2
EXIT_INTERRUPTED = 130


class BkmcpError(Exception):
    """Root of every error bkmcp reports. Subclasses only set ``code`` and ``exit_status``.

    ``details`` are extra machine-readable fields of the error object (e.g. ``outcome``, ``variable``);
    ``data`` is what the remote operation produced before it failed (completed stages, raw results).
    """

    code = "internal_error"
    exit_status = EXIT_LOCAL

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        data: dict[str, Any] | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.data = data
        self.details = dict(details or {})

    def error_object(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.hint:
            obj["hint"] = self.hint
        obj.update(self.details)
        return obj


class UsageError(BkmcpError):
    code = "usage_error"


class InvalidConfigError(BkmcpError):
    code = "invalid_mcp_config"


class ConfigNotFoundError(BkmcpError):
    code = "mcp_config_not_found"


class ServerNotFoundError(BkmcpError):
    code = "mcp_server_not_found"


class MissingEnvironmentVariableError(BkmcpError):
    code = "missing_environment_variable"


class AuthConflictError(BkmcpError):
    code = "mcp_auth_conflict"


class InvalidArgumentsError(BkmcpError):
    code = "invalid_mcp_arguments"


class UnsupportedOptionError(BkmcpError):
    code = "unsupported_option"


class ToolNotFoundError(BkmcpError):
    code = "mcp_tool_not_found"


class InvalidJqExpressionError(BkmcpError):
    code = "invalid_jq_expression"


class JqUnavailableError(BkmcpError):
    code = "jq_unavailable"


class InternalError(BkmcpError):
    code = "internal_error"


class RemoteError(BkmcpError):
    """An error after the remote operation started: reported on stdout with exit status 2."""

    code = "mcp_connection_error"
    exit_status = EXIT_REMOTE


class AuthRequiredError(RemoteError):
    code = "mcp_auth_required"


class PermissionDeniedError(RemoteError):
    code = "mcp_permission_denied"


class ConnectionFailedError(RemoteError):
    code = "mcp_connection_error"


class McpTimeoutError(RemoteError):
    code = "mcp_timeout"


class ProtocolError(RemoteError):
    code = "mcp_protocol_error"


class DiscoveryIncompleteError(RemoteError):
    code = "mcp_discovery_incomplete"


class ToolError(RemoteError):
    code = "mcp_tool_error"


class CapabilityUnsupportedError(RemoteError):
    code = "mcp_capability_unsupported"


class JqError(RemoteError):
    code = "jq_error"


def error_classes() -> list[type[BkmcpError]]:
    """Every concrete error class, for documentation and uniqueness tests."""
    seen: list[type[BkmcpError]] = []
    stack: list[type[BkmcpError]] = [BkmcpError]
    while stack:
        cls = stack.pop()
        seen.append(cls)
        stack.extend(cls.__subclasses__())
    return [c for c in seen if c not in (BkmcpError, RemoteError)]


# ======================================================================================================
# 2. Helpers: JSON with number fidelity, redaction, durations, deadlines, logging
# ======================================================================================================


class JsonNumber(decimal.Decimal):
    """A JSON number that Python's float cannot hold exactly, kept as its original text.

    It compares and validates like a number (it is a ``Decimal``) and ``dump_json`` writes its text back
    byte for byte, so ``1e400``, ``0.1`` and ``12345678901234567890.5`` survive a round trip.
    """

    __slots__ = ("text",)
    text: str

    def __new__(cls, text: str) -> JsonNumber:
        self = super().__new__(cls, text)
        self.text = text
        return self

    def __repr__(self) -> str:
        return f"JsonNumber({self.text!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (JsonNumber, (self.text,))


class JsonInputError(ValueError):
    """Invalid JSON text. ``str()`` says what and where, never echoes the text itself."""

    def __init__(self, reason: str, line: int = 0, column: int = 0) -> None:
        self.reason = reason
        self.line = line
        self.column = column
        where = f" at line {line} column {column}" if line else ""
        super().__init__(f"{reason}{where}")


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


_INT_DIGITS_LIMIT = 4000  # below CPython's int/str conversion limit (4300 digits)


def _parse_int(text: str) -> Any:
    # "-0" as an int would be written back as "0": keep its text (it still compares equal to 0)
    return int(text) if len(text) <= _INT_DIGITS_LIMIT and text != "-0" else JsonNumber(text)


def _strict_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(key)
        obj[key] = value
    return obj


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(text: str | bytes, *, strict_keys: bool = True) -> Any:
    """Parse JSON keeping every number exact: integers as ``int``, other numbers as ``JsonNumber``.

    ``strict_keys`` rejects duplicate object keys at every level (config, --body, flag values). ``NaN`` and
    ``Infinity`` are rejected. Errors are ``JsonInputError`` with a position but never the input text.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonInputError("input is not valid UTF-8") from exc
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        return json.loads(
            text,
            parse_float=JsonNumber,
            parse_int=_parse_int,
            parse_constant=_reject_constant,
            object_pairs_hook=_strict_pairs if strict_keys else None,
        )
    except _DuplicateKey as exc:
        raise JsonInputError(f"duplicate key {json.dumps(exc.key, ensure_ascii=False)}") from None
    except json.JSONDecodeError as exc:
        raise JsonInputError(exc.msg.lower() if text.strip() else "empty input", exc.lineno, exc.colno) from None
    except (ValueError, RecursionError) as exc:
        raise JsonInputError(str(exc) if isinstance(exc, ValueError) else "nesting too deep") from None


_RAW_MARK = "\ue000bkmcp-raw-"


def dump_json(value: Any, *, indent: int | None = None, sort_keys: bool = False) -> str:
    """Serialise ``value``; ``JsonNumber`` (and any ``Decimal``) is written as its exact text.

    The C encoder cannot emit raw text, so exact numbers are first encoded as unique marker strings and the
    markers are replaced afterwards. The marker carries a per-call nonce, so no real string can collide.
    """
    raws: list[str] = []
    nonce = ""

    def default(obj: Any) -> Any:
        nonlocal nonce
        if isinstance(obj, decimal.Decimal):
            if not nonce:
                nonce = os.urandom(6).hex()
            raws.append(obj.text if isinstance(obj, JsonNumber) else _decimal_text(obj))
            return f"{_RAW_MARK}{nonce}-{len(raws) - 1}\ue001"
        if isinstance(obj, (set, frozenset, tuple)):
            return list(obj)
        raise TypeError(f"cannot serialise {type(obj).__name__} as JSON")

    separators = (",", ": ") if indent is not None else (",", ":")
    out = json.dumps(
        value, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys, default=default
    )
    if raws:
        pattern = re.compile('"' + re.escape(_RAW_MARK + nonce) + r"-(\d+)\ue001" + '"')
        out = pattern.sub(lambda m: raws[int(m.group(1))], out)
    if _SURROGATE.search(out):
        # JSON allows "\udcff" escapes that are not valid Unicode; written raw they make every UTF-8 stream fail.
        out = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", out)
    return out


_SURROGATE = re.compile("[\ud800-\udfff]")


def _decimal_text(number: decimal.Decimal) -> str:
    if not number.is_finite():
        raise TypeError("NaN and infinite numbers are not valid JSON")
    return str(number)


# -- redaction -----------------------------------------------------------------------------------------

REDACTED = "***"
_SECRET_HEADER_NAMES = frozenset(
    {"authorization", "x-bkapi-authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key"}
)
_SECRET_NAME_WORDS = ("token", "secret", "key", "auth", "password", "ticket")


def is_secret_name(name: str) -> bool:
    """True when a header (or environment variable) name marks its value as a credential (SPEC §4)."""
    lowered = name.lower()
    return lowered in _SECRET_HEADER_NAMES or any(word in lowered for word in _SECRET_NAME_WORDS)


def redact_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    """A copy of ``headers`` whose credential values print as ``***``."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    return {name: (REDACTED if is_secret_name(name) else value) for name, value in items}


class Redactor:
    """Scrubs every known secret value from diagnostic text: the one redaction used at output boundaries."""

    MIN_FRAGMENT = 4  # fragments shorter than this (e.g. a 1-char token part) would mangle unrelated text

    def __init__(self) -> None:
        self._secrets: list[str] = []

    def add(self, value: str, *, whole: bool = True) -> None:
        """Register a secret. ``whole`` values are always scrubbed; fragments only when long enough."""
        if value and (whole or len(value) >= self.MIN_FRAGMENT) and value not in self._secrets:
            self._secrets.append(value)
            self._secrets.sort(key=len, reverse=True)

    def scrub(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def scrub_value(self, value: Any) -> Any:
        """Scrub strings inside a JSON-like value (used for error objects, not for tool results)."""
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, dict):
            return {k: self.scrub_value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.scrub_value(v) for v in value]
        return value


# -- durations and deadlines ---------------------------------------------------------------------------

_DURATION = re.compile(r"^([0-9]+(?:\.[0-9]+)?|\.[0-9]+)(ms|s|m|h)?$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: str, *, option: str = "--timeout") -> float:
    """``500ms``, ``30s``, ``2m``, ``1h`` or a bare number of seconds; must be positive and finite."""
    match = _DURATION.match(text.strip()) if text else None
    if not match:
        raise UsageError(
            f"invalid duration for {option}: {text!r}",
            hint="use a positive duration such as 500ms, 30s, 2m, 1h or a number of seconds",
        )
    seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if not seconds > 0 or seconds > 7 * 24 * 3600:
        raise UsageError(f"{option} must be positive and at most 168h, got {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    return f"{seconds:g}s"


class Deadline:
    """The whole remote operation's time budget (SPEC §2): every step asks how much is left."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._start = clock()
        self.end = self._start + seconds

    def remaining(self) -> float:
        """Seconds left; raises ``McpTimeoutError`` once the budget is spent."""
        left = self.end - self._clock()
        if left <= 0:
            raise McpTimeoutError(
                f"the operation did not finish within --timeout {format_duration(self.seconds)}",
                hint="raise --timeout if the server is slow, or run with -v to see which step waits",
            )
        return left

    def elapsed_ms(self) -> int:
        return int((self._clock() - self._start) * 1000)


# -- logging -------------------------------------------------------------------------------------------


class Log:
    """Diagnostics on stderr. ``debug`` only with ``-v``; every line goes through the redactor."""

    def __init__(self, stream: IO[str], *, verbose: bool = False, redactor: Redactor | None = None) -> None:
        self.stream = stream
        self.verbose = verbose
        self.redactor = redactor or Redactor()
        self._warned: set[str] = set()

    @property
    def is_tty(self) -> bool:
        isatty = getattr(self.stream, "isatty", None)
        try:
            return bool(isatty and isatty())
        except (OSError, ValueError):
            return False

    def _write(self, line: str) -> None:
        try:
            self.stream.write(self.redactor.scrub(line) + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed stderr must never turn into a second failure

    def debug(self, message: str) -> None:
        if self.verbose:
            self._write(f"bkmcp: {message}")

    def warn(self, message: str, *, once_key: str | None = None) -> None:
        if once_key is not None:
            if once_key in self._warned:
                return
            self._warned.add(once_key)
        self._write(f"bkmcp: warning: {message}")

    def progress(self, message: str) -> None:
        """Progress for long work: shown when stderr is a terminal (or with -v)."""
        if self.verbose or self.is_tty:
            self._write(f"bkmcp: {message}")


def closest_names(name: str, candidates: Iterable[str], *, limit: int = 3) -> list[str]:
    """Close spellings of ``name`` among ``candidates`` (for "did you mean" hints)."""
    import difflib

    pool = list(candidates)
    found = difflib.get_close_matches(name, pool, n=limit, cutoff=0.6)
    lowered = [c for c in pool if c.lower() == name.lower() and c not in found]
    return (lowered + found)[:limit]


# ======================================================================================================
# 3. Config
# ======================================================================================================

SUPPORTED_VERSIONS = ("2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28")
CONFIG_FILE_NAME = "mcp.json"
_HTTP_FIELDS = frozenset({"type", "url", "headers", "protocolVersion"})
_STDIO_FIELDS = frozenset({"type", "command", "args", "env", "cwd", "protocolVersion"})
_FORBIDDEN_HEADERS = frozenset(
    name.lower()
    for name in (
        "Host", "Content-Length", "Content-Type", "Accept", "Connection", "Keep-Alive", "Transfer-Encoding",
        "Upgrade", "TE", "Trailer", "Proxy-Connection", "Mcp-Session-Id", "MCP-Protocol-Version", "Mcp-Method",
        "Mcp-Name", "Last-Event-ID",
    )
)
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENV_REF = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$\{")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class ServerConfig:
    """One validated ``mcpServers`` entry, before environment expansion (templates kept as written)."""

    name: str
    type: str
    config_file: str
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    protocol_version: str | None = None


@dataclass(frozen=True)
class ConfigFile:
    path: str
    servers: dict[str, ServerConfig]
    readable_by_others: bool = False


def resolve_config_path(option: str | None, env: Mapping[str, str], cwd: str) -> str:
    """``--config`` if given, else ``$BK_CLI_CONFIG_DIR/mcp.json``, else ``~/.bk-cli/mcp.json`` (SPEC §3)."""
    if option is not None:
        if not option:
            raise UsageError("--config needs a file path")
        path = option
        if option == "~" or option.startswith("~/"):  # the injected HOME, like the default path below
            path = (env.get("HOME") or os.path.expanduser("~")) + option[1:]
        elif option.startswith("~"):
            path = os.path.expanduser(option)
    elif env.get("BK_CLI_CONFIG_DIR"):
        path = os.path.join(env["BK_CLI_CONFIG_DIR"], CONFIG_FILE_NAME)
    else:
        home = env.get("HOME") or os.path.expanduser("~")
        path = os.path.join(home, ".bk-cli", CONFIG_FILE_NAME)
    return os.path.normpath(os.path.join(cwd, path))


def load_config(path: str) -> ConfigFile:
    """Read and validate the whole file (syntax and structure of every server; no environment expansion)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
            mode = os.fstat(handle.fileno()).st_mode
    except FileNotFoundError:
        raise ConfigNotFoundError(
            f"config file not found: {path}",
            hint="create it, pass --config PATH, or set BK_CLI_CONFIG_DIR; bkmcp never falls back to another file",
        ) from None
    except IsADirectoryError:
        raise InvalidConfigError(f"config path is a directory, not a file: {path}") from None
    except OSError as exc:
        raise InvalidConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    config = parse_config(raw, path)
    return ConfigFile(config.path, config.servers, readable_by_others=bool(mode & 0o044))


def parse_config(raw: str | bytes, path: str) -> ConfigFile:
    """Parse strict JSON and validate every server entry. Messages name file, server and field, never values."""
    try:
        document = parse_json(raw)
    except JsonInputError as exc:
        raise InvalidConfigError(f"{path}: invalid JSON: {exc}", hint="the file must be strict JSON") from None
    if not isinstance(document, dict):
        raise InvalidConfigError(f"{path}: top level must be a JSON object with \"mcpServers\"")
    if "mcpServers" not in document:
        other = " (the \"servers\" layout of other clients is not supported)" if "servers" in document else ""
        raise InvalidConfigError(
            f"{path}: missing top-level \"mcpServers\"{other}",
            hint='write {"mcpServers": {"<name>": {"type": "http", "url": "https://…"}}}',
        )
    extra = sorted(set(document) - {"mcpServers"})
    if extra:
        raise InvalidConfigError(f"{path}: unsupported top-level field(s): {', '.join(map(repr, extra))}")
    entries = document["mcpServers"]
    if not isinstance(entries, dict):
        raise InvalidConfigError(f"{path}: \"mcpServers\" must be an object of named servers")
    servers = {name: _parse_server(path, name, entry) for name, entry in entries.items()}
    return ConfigFile(path, servers)


def check_server_name(name: str) -> str | None:
    """Why ``name`` cannot be a server name, or None when it can."""
    if not name:
        return "a server name must not be empty"
    if name.startswith("-"):
        return "a server name must not start with '-'"
    if any(ch.isspace() for ch in name) or _CONTROL.search(name):
        return "a server name must not contain whitespace or control characters"
    return None


def _parse_server(path: str, name: str, entry: Any) -> ServerConfig:
    where = f"{path}: server {name!r}"
    problem = check_server_name(name)
    if problem:
        raise InvalidConfigError(f"{path}: invalid server name {name!r}: {problem}")
    if not isinstance(entry, dict):
        raise InvalidConfigError(f"{where}: entry must be an object")
    kind = entry.get("type")
    if kind is None:
        raise InvalidConfigError(f"{where}: field \"type\" is required (\"http\" or \"stdio\")")
    if kind not in ("http", "stdio"):
        raise InvalidConfigError(
            f"{where}: unsupported type {kind!r}" if isinstance(kind, str) else f"{where}: \"type\" must be a string",
            hint='use "http" (Streamable HTTP) or "stdio"',
        )
    allowed = _HTTP_FIELDS if kind == "http" else _STDIO_FIELDS
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise InvalidConfigError(
            f"{where}: unknown field(s) {', '.join(map(repr, unknown))} for type {kind!r}",
            hint=f"known fields: {', '.join(sorted(allowed))}",
        )
    version = entry.get("protocolVersion")
    if version is not None and version not in SUPPORTED_VERSIONS:
        raise InvalidConfigError(
            f"{where}: field \"protocolVersion\" must be one of {', '.join(SUPPORTED_VERSIONS)}"
        )
    if kind == "http":
        return ServerConfig(
            name=name,
            type=kind,
            config_file=path,
            url=_check_url(where, entry.get("url")),
            headers=_check_headers(where, entry.get("headers")),
            protocol_version=version,
        )
    command = entry.get("command")
    if not isinstance(command, str) or not command.strip():
        raise InvalidConfigError(f"{where}: field \"command\" must be a non-empty string")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise InvalidConfigError(f"{where}: field \"args\" must be an array of strings")
    env = entry.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise InvalidConfigError(f"{where}: field \"env\" must be an object of string values")
    for key in env:
        if not _ENV_NAME.match(key):
            raise InvalidConfigError(f"{where}: field \"env\" has an invalid variable name {key!r}")
    cwd = entry.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not cwd):
        raise InvalidConfigError(f"{where}: field \"cwd\" must be a non-empty string")
    return ServerConfig(
        name=name,
        type=kind,
        config_file=path,
        command=command,
        args=tuple(args),
        env=tuple(env.items()),
        cwd=cwd,
        protocol_version=version,
    )


def _check_url(where: str, url: Any) -> str:
    from urllib.parse import urlsplit

    if not isinstance(url, str) or not url:
        raise InvalidConfigError(f"{where}: field \"url\" is required and must be a string")
    if _CONTROL.search(url) or " " in url:
        raise InvalidConfigError(f"{where}: field \"url\" contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise InvalidConfigError(f"{where}: field \"url\" is not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidConfigError(f"{where}: field \"url\" must be an absolute http:// or https:// URL")
    if not parts.hostname:
        raise InvalidConfigError(f"{where}: field \"url\" has no host")
    if "@" in parts.netloc:
        raise InvalidConfigError(
            f"{where}: field \"url\" must not contain user information",
            hint="put credentials in \"headers\", not in the URL",
        )
    if "#" in url:
        raise InvalidConfigError(f"{where}: field \"url\" must not contain a fragment (#…)")
    if port == 0:
        raise InvalidConfigError(f"{where}: field \"url\" has an invalid port")
    return url


def _check_headers(where: str, headers: Any) -> tuple[tuple[str, str], ...]:
    if headers is None:
        return ()
    if not isinstance(headers, dict):
        raise InvalidConfigError(f"{where}: field \"headers\" must be an object of strings")
    seen: dict[str, str] = {}
    for name, value in headers.items():
        if not _HEADER_NAME.match(name):
            raise InvalidConfigError(f"{where}: header name {name!r} is not a valid HTTP header name")
        if not isinstance(value, str):
            raise InvalidConfigError(f"{where}: header {name!r} must have a string value")
        if "\r" in value or "\n" in value or "\x00" in value:
            raise InvalidConfigError(f"{where}: header {name!r} contains a line break or NUL")
        lowered = name.lower()
        if lowered in _FORBIDDEN_HEADERS or lowered.startswith("mcp-param-"):
            raise InvalidConfigError(
                f"{where}: header {name!r} is managed by bkmcp and cannot be configured",
                hint="remove it from \"headers\"",
            )
        if lowered in seen:
            raise InvalidConfigError(
                f"{where}: headers {seen[lowered]!r} and {name!r} are the same header (names ignore case)"
            )
        seen[lowered] = name
    return tuple(headers.items())


def expand_env(template: str, env: Mapping[str, str], *, where: str) -> tuple[str, list[str]]:
    """Expand ``${NAME}`` references once (no recursion, no shell); ``$${`` is a literal ``${``.

    Returns the expanded text and the values substituted (so callers can register them as secrets).
    """
    used: list[str] = []

    def replace(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "$${":
            return "${"
        name = match.group(1)
        if name is None:
            raise InvalidConfigError(
                f"{where}: unsupported reference syntax (only ${{NAME}} with letters, digits and _ is allowed)",
                hint="write $${ for a literal ${",
            )
        if name not in env:
            raise MissingEnvironmentVariableError(
                f"environment variable {name} is not set (needed by {where})",
                hint=f"export {name}=… before running bkmcp",
                details={"variable": name},
            )
        used.append(env[name])
        return env[name]

    return _ENV_REF.sub(replace, template), used


# ======================================================================================================
# 4. Auth
# ======================================================================================================

_BKAPI_FORMS = (
    frozenset({"bk_app_code", "bk_app_secret", "bk_ticket"}),
    frozenset({"bk_app_code", "bk_app_secret", "bk_token"}),
    frozenset({"access_token"}),
)
_BKAPI_KNOWN = frozenset().union(*_BKAPI_FORMS)


@dataclass
class ResolvedServer:
    """The selected server after environment expansion and credential checks: what transports use."""

    name: str
    type: str
    config_file: str
    url: str | None
    headers: dict[str, str]
    command: str | None
    args: list[str]
    env: dict[str, str]
    cwd: str | None
    protocol_version: str | None
    auth_source: str  # "server_headers" | "none"
    redactor: Redactor = field(default_factory=Redactor)


def find_header(headers: Iterable[tuple[str, str]], name: str) -> tuple[str, str] | None:
    lowered = name.lower()
    for key, value in headers:
        if key.lower() == lowered:
            return key, value
    return None


def check_auth_conflict(server: ServerConfig) -> None:
    """Both identity headers configured (any case): refuse before anything is expanded or sent (A03)."""
    bearer = find_header(server.headers, "Authorization")
    bkapi = find_header(server.headers, "X-Bkapi-Authorization")
    if bearer and bkapi:
        raise AuthConflictError(
            f"server {server.name!r} in {server.config_file} sets both {bearer[0]!r} and {bkapi[0]!r}",
            hint="keep exactly one identity header for this server; bkmcp never picks one for you",
        )


def check_authorization_value(value: str, *, where: str) -> list[str]:
    """Validate an ``Authorization`` value; returns secret fragments to scrub."""
    if not value.strip():
        raise InvalidConfigError(f"{where}: header 'Authorization' is empty", hint="anonymous access needs no header")
    scheme, _, credentials = value.strip().partition(" ")
    if scheme.lower() == "bearer":
        if not credentials.strip():
            raise InvalidConfigError(f"{where}: header 'Authorization' has an empty Bearer token")
        return [credentials.strip()]
    return [credentials.strip()] if credentials.strip() else []


def check_bkapi_value(value: str, *, where: str) -> list[str]:
    """Validate ``X-Bkapi-Authorization``: app + ticket, app + token, or access_token alone (SPEC §4)."""
    label = f"{where}: header 'X-Bkapi-Authorization'"
    if not value.strip():
        raise InvalidConfigError(f"{label} is empty")
    try:
        document = parse_json(value)
    except JsonInputError:
        raise InvalidConfigError(
            f"{label} is not a valid JSON object",
            hint='expected {"bk_app_code": …, "bk_app_secret": …, "bk_ticket"|"bk_token": …} or {"access_token": …}',
        ) from None
    if not isinstance(document, dict):
        raise InvalidConfigError(f"{label} must be a JSON object")
    unknown = [k for k in document if k not in _BKAPI_KNOWN]
    if unknown:
        raise InvalidConfigError(f"{label} has {len(unknown)} unsupported field(s)",
                                 hint=f"allowed fields: {', '.join(sorted(_BKAPI_KNOWN))}")
    for key, item in document.items():
        if not isinstance(item, str) or not item.strip():
            raise InvalidConfigError(f"{label}: field {key!r} must be a non-empty string")
    if frozenset(document) not in _BKAPI_FORMS:
        raise InvalidConfigError(
            f"{label} has fields {', '.join(sorted(document))}, which is not a supported form",
            hint="use bk_app_code + bk_app_secret + exactly one of bk_ticket/bk_token, or access_token alone",
        )
    return list(document.values())


def resolve_server(server: ServerConfig, env: Mapping[str, str]) -> ResolvedServer:
    """Expand the selected server's ``${VAR}`` references and check its credentials (C04, A03)."""
    check_auth_conflict(server)
    redactor = Redactor()
    where = f"server {server.name!r} in {server.config_file}"
    headers: dict[str, str] = {}
    for name, template in server.headers:
        value, used = expand_env(template, env, where=f"{where}, header {name!r}")
        secret = is_secret_name(name)
        if secret:
            if not value.strip():
                raise InvalidConfigError(
                    f"{where}: credential header {name!r} is empty after expansion",
                    hint="set the variable to a real credential; bkmcp never falls back to anonymous access",
                )
            redactor.add(value)
            for fragment in used:
                redactor.add(fragment, whole=False)
        headers[name] = value
    auth_source = "none"
    for name, value in headers.items():
        lowered = name.lower()
        if lowered == "authorization":
            fragments = check_authorization_value(value, where=where)
        elif lowered == "x-bkapi-authorization":
            fragments = check_bkapi_value(value, where=where)
        else:
            fragments = []
        for fragment in fragments:
            redactor.add(fragment, whole=False)
        if is_secret_name(name):
            auth_source = "server_headers"
    args = [expand_env(arg, env, where=f"{where}, args[{i}]")[0] for i, arg in enumerate(server.args)]
    child_env: dict[str, str] = {}
    for name, template in server.env:
        value, used = expand_env(template, env, where=f"{where}, env {name!r}")
        child_env[name] = value
        if is_secret_name(name) or used:
            redactor.add(value, whole=is_secret_name(name))
    if child_env:
        auth_source = "server_headers" if auth_source == "none" and any(map(is_secret_name, child_env)) else auth_source
    return ResolvedServer(
        name=server.name,
        type=server.type,
        config_file=server.config_file,
        url=server.url,
        headers=headers,
        command=server.command,
        args=args,
        env=child_env,
        cwd=server.cwd,
        protocol_version=server.protocol_version,
        auth_source=auth_source,
        redactor=redactor,
    )


# ======================================================================================================
# 5. Protocol core (sans-IO)
# ======================================================================================================
# ENGINE-PLACEHOLDER-5: JSON-RPC framing, incremental SSE decoder, era table, request building, response
# classification. Imports neither httpx nor sockets (STYLE.md: the h11 model).


# ======================================================================================================
# 6. Transports
# ======================================================================================================
# ENGINE-PLACEHOLDER-6: HTTP over httpx (sync, one client per operation, no redirects), stdio via subprocess.


# ======================================================================================================
# 7. Client flows
# ======================================================================================================


class McpClient:
    """One client lifetime against one server: negotiate, discover, call once, close.

    Contract used by the CLI (section 11):
      ``with McpClient(server, deadline=…, insecure=…, log=…) as client:``
      ``client.connect()``            era negotiation (SPEC §5); sets era, protocol_version, server_info,
                                      capabilities, instructions
      ``client.list_tools()``         the complete catalogue (pagination guards) as a list of tool dicts
      ``client.call_tool(name, args)``  sends tools/call exactly once; returns the raw result dict
      leaving the block closes the session (DELETE for legacy HTTP sessions) and the transport.
    Remote failures raise ``RemoteError`` subclasses whose ``data`` keeps what was completed.
    """

    def __init__(self, server: ResolvedServer, *, deadline: Deadline, insecure: bool, log: Log) -> None:
        self.server = server
        self.deadline = deadline
        self.insecure = insecure
        self.log = log
        self.era: str | None = None
        self.protocol_version: str | None = None
        self.server_info: dict[str, Any] = {}
        self.capabilities: dict[str, Any] = {}
        self.instructions: str | None = None

    def __enter__(self) -> McpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        pass

    def connect(self) -> None:
        raise ConnectionFailedError("ENGINE-PLACEHOLDER: the MCP engine is not wired in yet")

    def list_tools(self) -> list[dict[str, Any]]:
        raise ConnectionFailedError("ENGINE-PLACEHOLDER: the MCP engine is not wired in yet")

    def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        raise ConnectionFailedError("ENGINE-PLACEHOLDER: the MCP engine is not wired in yet")


def run_check(server: ResolvedServer, *, deadline: Deadline, insecure: bool, log: Log) -> dict[str, Any]:
    """``--check`` data (SPEC §7); on failure raises a RemoteError whose ``data`` has the staged ``checks``."""
    raise ConnectionFailedError("ENGINE-PLACEHOLDER: the MCP engine is not wired in yet")


def run_tools(server: ResolvedServer, *, deadline: Deadline, insecure: bool, log: Log) -> dict[str, Any]:
    """``--tools`` data (SPEC §7): server, protocol_version, tool_count, complete, tools (as received)."""
    raise ConnectionFailedError("ENGINE-PLACEHOLDER: the MCP engine is not wired in yet")


# ======================================================================================================
# 8. Schema flags
# ======================================================================================================

RESERVED_OPTION_NAMES = frozenset(
    "help h check tools config body timeout jq context dry-run verbose v insecure format resident registry "
    "version".split()
)


@dataclass(frozen=True)
class ToolToken:
    """One tool option as typed after the tool name: ``--name value`` or ``--name=value``."""

    name: str
    value: str | None
    has_equals: bool
    raw: str


# FLAGS-PLACEHOLDER-8: build_tool_flags(tool), parse_tool_arguments(tool, tokens), check_tool_tokens(tool,
# tokens), validate_arguments(tool, arguments), find_tool(tools, name, server_name), describe_cli(tool).


def find_tool(tools: Sequence[dict[str, Any]], name: str, server_name: str) -> dict[str, Any]:
    """The tool called exactly ``name``; ``mcp_tool_not_found`` with close names otherwise."""
    for tool in tools:
        if tool.get("name") == name:
            return tool
    names = [str(t.get("name")) for t in tools]
    close = closest_names(name, names)
    hint = f"did you mean {', '.join(close)}?" if close else f"run: bkmcp {server_name} --tools"
    raise ToolNotFoundError(
        f"server {server_name!r} has no tool {name!r} ({len(names)} tools discovered)",
        hint=hint,
        details={"suggestions": close},
    )


def check_tool_tokens(tool: dict[str, Any], tokens: Sequence[ToolToken]) -> None:
    """FLAGS-PLACEHOLDER: with --body, named flags must still be well-formed and known (P05)."""
    for token in tokens:
        if token.value is None:
            raise UsageError(f"option --{token.name} needs a value")


def parse_tool_arguments(tool: dict[str, Any], tokens: Sequence[ToolToken]) -> dict[str, Any]:
    """FLAGS-PLACEHOLDER: flags -> arguments object by the tool's inputSchema."""
    raise InvalidArgumentsError("FLAGS-PLACEHOLDER: named tool flags are not wired in yet; use --body")


def validate_arguments(tool: dict[str, Any], arguments: dict[str, Any]) -> None:
    """FLAGS-PLACEHOLDER: required fields, types, enum and (when local) the full schema."""


# ======================================================================================================
# 9. Output: envelopes, --jq, help text
# ======================================================================================================


def build_success(data: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, "data": data}


def build_failure(error: BkmcpError, redactor: Redactor | None = None) -> dict[str, Any]:
    """Failure envelope. Diagnostics are scrubbed of secrets; a remote result kept in ``data`` is not."""
    scrub = redactor.scrub_value if redactor else (lambda v: v)
    envelope: dict[str, Any] = {"ok": False, "error": scrub(error.error_object())}
    if error.data is not None:
        envelope["data"] = error.data
    return envelope


# -- --jq ----------------------------------------------------------------------------------------------

_DOUBLE_EXACT = 2**53
_JQ_MARK = "\ue000bkmcp-num-"


def _load_jq_module() -> Any:
    """The ``jq`` binding, or None when no native build fits this interpreter/platform."""
    try:
        import jq  # type: ignore[import-not-found]
    except ImportError:
        return None
    return jq


class JqProgram:
    """A compiled ``--jq`` expression, via the ``jq`` binding or, failing that, a ``jq`` executable."""

    def __init__(self, expression: str) -> None:
        self.expression = expression
        self._module = _load_jq_module()
        self._executable: str | None = None
        if not expression.strip():
            raise InvalidJqExpressionError("--jq expression is empty")
        self._literal: Any = None  # the program wrapped in tojson, when jq keeps number literals (jq >= 1.7)
        if self._module is not None:
            try:
                self._program = self._module.compile(expression)
            except ValueError as exc:
                raise InvalidJqExpressionError(f"invalid --jq expression: {_first_line(exc)}") from None
            if _jq_keeps_literals(self._module):
                try:
                    self._literal = self._module.compile(f"({expression}\n) | tojson")
                except ValueError:  # e.g. a leading import/include directive: no literal mode, still exact
                    self._literal = None
            return
        import shutil

        self._executable = shutil.which("jq")
        if self._executable is None:
            raise JqUnavailableError(
                "--jq needs the jq library, which has no build for this Python/platform, and no jq executable "
                "is on PATH",
                hint="install jq (e.g. apt install jq) or drop --jq and filter the JSON output yourself",
            )
        proc = self._run_executable(["-n", f"if false then ({expression}\n) else empty end"], "")
        if proc.returncode != 0:
            raise InvalidJqExpressionError(f"invalid --jq expression: {_first_line(proc.stderr)}")

    def _run_executable(self, args: list[str], text: str) -> Any:
        import subprocess

        assert self._executable is not None
        return subprocess.run(
            [self._executable, *args], input=text, capture_output=True, text=True, encoding="utf-8", timeout=60
        )

    def apply(self, envelope: dict[str, Any]) -> list[str]:
        """Run over the final envelope; each output value as one compact JSON line, numbers preserved.

        jq computes with doubles. jq >= 1.7 keeps the literal text of a number it did not compute with, which
        ``tojson`` reveals: that is the "literal" mode, used when the binding has it. Otherwise numbers a double
        cannot hold (big integers, ``1e400``) travel as marker strings and come back exact. Numbers jq would only
        re-spell (``1E+2``, ``-0.0`` without literals; ``1e400`` -> ``1E+400`` with them) are tried as markers
        too; that answer is used only when it equals, value for value, the answer computed with real numbers
        (so comparisons and arithmetic keep jq's meaning). A runtime error is ``jq_error``.
        """
        nonce = os.urandom(4).hex()
        if self._literal is not None:
            exact_protect, text_protect = _jq_beyond_decimal, _jq_literal_differs
        else:
            exact_protect, text_protect = _jq_value_differs, _jq_text_differs
        try:
            outputs = self._project(envelope, nonce, exact_protect)
        except ValueError as exc:
            data = envelope.get("data")
            dry = isinstance(data, dict) and data.get("dry_run") is True
            raise JqError(
                f"--jq failed on the result: {_first_line(exc)}",
                hint="nothing was sent (dry run); fix the expression" if dry else "the remote operation already "
                "happened; do not retry it blindly, fix the expression and re-run it on saved output (data keeps "
                "the unprojected result)",
                data=data,
                details={} if envelope.get("ok") else {"unprojected_error": envelope.get("error")},
            ) from None
        if _any_number(envelope, lambda n: text_protect(n) and not exact_protect(n)):
            try:
                respelled = self._project(envelope, nonce, text_protect)
            except ValueError:
                respelled = None
            if respelled is not None and _same_json(respelled, outputs):
                outputs = respelled
        return [dump_json(value) for value in outputs]

    def _project(self, envelope: dict[str, Any], nonce: str, protect: Callable[[Any], bool]) -> list[Any]:
        table: list[str] = []
        text = dump_json(_jq_protect(envelope, table, nonce, protect))
        if self._literal is not None:
            texts = [str(item) for item in self._literal.input_text(text).all()]
        elif self._module is not None:
            texts = self._program.input_text(text).text().split("\n")
        else:
            proc = self._run_executable(["-c", self.expression], text)
            if proc.returncode != 0:
                raise ValueError(_first_line(proc.stderr))
            texts = proc.stdout.split("\n")
        return [_jq_restore(parse_json(item, strict_keys=False), table, nonce) for item in texts if item.strip()]


_JQ_LITERALS: dict[int, bool] = {}


def _jq_keeps_literals(module: Any) -> bool:
    """Whether this jq keeps number literals (built with decNumber), probed once per process."""
    if id(module) not in _JQ_LITERALS:
        probe = "100000000000000000001"
        try:
            _JQ_LITERALS[id(module)] = module.compile("tojson").input_text(probe).all() == [probe]
        except Exception:  # any surprise from the binding just means: no literal mode
            _JQ_LITERALS[id(module)] = False
    return _JQ_LITERALS[id(module)]


def _first_line(error: object) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else "unknown error"


def _jq_value_differs(number: Any) -> bool:
    """True when a double cannot hold ``number`` exactly (jq would change its value)."""
    if isinstance(number, bool):
        return False
    if isinstance(number, int):
        return abs(number) > _DOUBLE_EXACT
    if isinstance(number, decimal.Decimal):
        try:
            as_float = float(number)
        except (OverflowError, ValueError):
            return True
        if as_float in (float("inf"), float("-inf")) or as_float != as_float:
            return True
        return decimal.Decimal(repr(as_float)) != number
    return False


def _jq_text_differs(number: Any) -> bool:
    """True when jq would print ``number`` differently from its JSON text (value change or re-spelling)."""
    if _jq_value_differs(number):
        return True
    if isinstance(number, JsonNumber):
        # jq prints the shortest round-trip form, like repr(float), but integral values without ".0"
        text = number.text
        return text != repr(float(text)) or "e" in text or text.endswith(".0")
    return False


def _jq_beyond_decimal(number: Any) -> bool:
    """With literal-keeping jq: True for exponents its decNumber cannot hold (they would become doubles)."""
    return isinstance(number, decimal.Decimal) and (not number.is_finite() or abs(number.adjusted()) > 999_999_000)


def _jq_literal_differs(number: Any) -> bool:
    """With literal-keeping jq: True when it would re-spell the literal (``1e400`` -> ``1E+400``)."""
    if _jq_beyond_decimal(number):
        return True
    return isinstance(number, JsonNumber) and str(decimal.Decimal(number.text)) != number.text


def _any_number(value: Any, predicate: Callable[[Any], bool]) -> bool:
    if isinstance(value, dict):
        return any(_any_number(v, predicate) for v in value.values())
    if isinstance(value, list):
        return any(_any_number(v, predicate) for v in value)
    return isinstance(value, (int, decimal.Decimal)) and not isinstance(value, bool) and predicate(value)


def _same_json(a: Any, b: Any) -> bool:
    """JSON equality: numbers by value, but never a number equal to a boolean or a string."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, decimal.Decimal)) and isinstance(b, (int, decimal.Decimal)):
        return bool(a == b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same_json(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _jq_protect(value: Any, table: list[str], nonce: str, protect: Callable[[Any], bool] = _jq_value_differs) -> Any:
    """Replace the numbers ``protect`` selects with marker strings, so jq moves them without touching them."""
    if isinstance(value, dict):
        return {k: _jq_protect(v, table, nonce, protect) for k, v in value.items()}
    if isinstance(value, list):
        return [_jq_protect(v, table, nonce, protect) for v in value]
    if not isinstance(value, (str, bool)) and value is not None and protect(value):
        table.append(value.text if isinstance(value, JsonNumber) else str(value))
        return f"{_JQ_MARK}{nonce}-{len(table) - 1}\ue001"
    return value


def _jq_restore(value: Any, table: list[str], nonce: str) -> Any:
    if isinstance(value, dict):
        return {_jq_restore(k, table, nonce): _jq_restore(v, table, nonce) for k, v in value.items()}
    if isinstance(value, list):
        return [_jq_restore(v, table, nonce) for v in value]
    if isinstance(value, str) and _JQ_MARK in value:
        marker = re.compile(re.escape(_JQ_MARK + nonce) + r"-(\d+)\ue001")
        whole = marker.fullmatch(value)
        if whole:
            text = table[int(whole.group(1))]
            return int(text) if re.fullmatch(r"-?\d+", text) and len(text) <= _INT_DIGITS_LIMIT else JsonNumber(text)
        return marker.sub(lambda m: table[int(m.group(1))], value)
    return value


def compile_jq(expression: str) -> JqProgram:
    return JqProgram(expression)


# -- help text -----------------------------------------------------------------------------------------

ROOT_HELP = """\
bkmcp {version} - command-line MCP client: check servers, discover tools, call them.

Usage:
  bkmcp [GLOBAL...] <server> [-h | --help]             static server help (no network)
  bkmcp [GLOBAL...] <server> --check                   config + connection + protocol + full discovery
  bkmcp [GLOBAL...] <server> --tools                   complete tool catalogue as JSON
  bkmcp [GLOBAL...] <server> <tool> --help             discover the tool's schema and show its flags
  bkmcp [GLOBAL...] <server> <tool> [--<param> VALUE...]   validate and call the tool once
  bkmcp [GLOBAL...] <server> <tool> --body JSON|@FILE|-    call with a complete arguments object
  bkmcp [GLOBAL...] <server> <tool> --body ... --dry-run   offline preview, zero network

Global options (before or after <server>):
  --config PATH        config file (default: $BK_CLI_CONFIG_DIR/mcp.json, else ~/.bk-cli/mcp.json)
  --timeout DURATION   budget for the whole remote operation: 500ms, 30s, 2m, 1h (default 60s)
  --jq EXPR            project the final JSON envelope with a jq expression (one value per line)
  -v, --verbose        diagnostics on stderr (requests, eras, timing); secrets print as ***
  --insecure           skip TLS certificate verification
  -h, --help           show help (never calls a tool, never reads --body input)
  --version            print the version

Config file in use: {config_path}

Output: one JSON envelope on stdout, {{"ok": true, "data": …}} or {{"ok": false, "error": {{"code", …}}}}.
Exit status: 0 success or help; 1 local/usage error (envelope on stderr); 2 remote error (envelope on
stdout); 130 interrupted.

Examples:
  bkmcp report-prod --check
  bkmcp report-prod --tools --jq '.data.tools[].name'
  bkmcp report-prod search_reports --help
  bkmcp report-prod search_reports --keyword 'gateway error' --limit 20
  bkmcp report-prod search_reports --body '{{"keyword": "gateway error", "limit": 20}}'
  bkmcp report-prod search_reports --body @params.json --dry-run
  bkmcp --config ./.mcp.json report-prod --tools
"""


def render_root_help(config_path: str) -> str:
    return ROOT_HELP.format(version=__version__, config_path=config_path)


def render_server_help(server: ServerConfig) -> str:
    """Static help for one configured server: reads no environment variables and makes no request."""
    lines = [f"bkmcp server {server.name!r} ({server.type})", ""]
    lines.append(f"  config file    {server.config_file}")
    if server.type == "http":
        lines.append(f"  url            {server.url}")
        if server.headers:
            lines.append("  headers")
            width = max(len(n) for n, _ in server.headers)
            for name, value in server.headers:
                shown = REDACTED if is_secret_name(name) else value
                lines.append(f"    {name.ljust(width)}  {shown}")
        else:
            lines.append("  headers        (none: anonymous)")
    else:
        lines.append(f"  command        {server.command}")
        if server.args:
            lines.append(f"  args           {' '.join(server.args)}")
        if server.env:
            lines.append(f"  env            {', '.join(f'{n}={REDACTED}' for n, _ in server.env)}")
        if server.cwd:
            lines.append(f"  cwd            {server.cwd}")
    lines.append(f"  protocol       {server.protocol_version or 'negotiated (2026-07-28 probe, legacy fallback)'}")
    name = server.name
    lines += [
        "",
        "Usage:",
        f"  bkmcp {name} --check                    connect, negotiate and discover every tool",
        f"  bkmcp {name} --tools                    list every tool with its inputSchema (JSON)",
        f"  bkmcp {name} <tool> --help              show a tool's flags (discovers its schema)",
        f"  bkmcp {name} <tool> [--<param> VALUE]   call a tool once with typed flags",
        f"  bkmcp {name} <tool> --body '{{...}}'      call with a complete arguments object",
        f"  bkmcp {name} <tool> --body @args.json --dry-run   preview offline, no network",
        "",
        "Examples:",
        f"  bkmcp {name} --check",
        f"  bkmcp {name} --tools --jq '.data.tools[].name'",
        "",
    ]
    return "\n".join(lines)


def render_tool_help(server_name: str, tool: dict[str, Any]) -> str:
    """FLAGS-PLACEHOLDER: full tool help (flags, types, required, enum, defaults, --body example)."""
    lines = [f"bkmcp {server_name} {tool.get('name')}", "", str(tool.get("description") or "")]
    lines.append("")
    lines.append(f"Schema: {dump_json(tool.get('inputSchema'), indent=2)}")
    return "\n".join(lines) + "\n"


# ======================================================================================================
# 10. Resident mode
# ======================================================================================================


def run_resident(registry: str | None) -> int:
    """Resident multi-server mode (SPEC §11) is not part of this build; fail loudly, never silently."""
    raise UnsupportedOptionError(
        "--resident (resident multi-server mode) is not implemented in this build of bkmcp",
        hint="use one-shot commands (bkmcp <server> --check/--tools/<tool>) for now",
    )


# ======================================================================================================
# 11. CLI
# ======================================================================================================

_VALUE_OPTIONS = {"--config": "config", "--timeout": "timeout", "--jq": "jq", "--context": "context",
                  "--body": "body", "--registry": "registry"}
_FLAG_OPTIONS = {"-v": "verbose", "--verbose": "verbose", "--insecure": "insecure", "--check": "check",
                 "--tools": "tools", "--dry-run": "dry_run", "-h": "help", "--help": "help",
                 "--version": "version", "--resident": "resident"}
_RESERVED_UNSUPPORTED = {"--format"}
DEFAULT_TIMEOUT = 60.0


@dataclass
class Invocation:
    """The command line, parsed but not yet acted upon."""

    server: str | None = None
    tool: str | None = None
    config: str | None = None
    timeout: str | None = None
    jq: str | None = None
    context: str | None = None
    body: str | None = None
    registry: str | None = None
    verbose: bool = False
    insecure: bool = False
    check: bool = False
    tools: bool = False
    dry_run: bool = False
    help: bool = False
    version: bool = False
    resident: bool = False
    tool_tokens: list[ToolToken] = field(default_factory=list)


def _is_bkmcp_option(token: str) -> bool:
    name = token.split("=", 1)[0]
    return name in _VALUE_OPTIONS or name in _FLAG_OPTIONS


def parse_argv(argv: Sequence[str]) -> Invocation:
    """Route the command line (SPEC §2). Global options may stand before or after the server name.

    After the tool name, every other ``--name`` is a tool option: ``--name=value`` or ``--name value`` (the next
    token is the value, unless it is itself a bkmcp option: then ``--name`` has no value).
    """
    inv = Invocation()
    seen: set[str] = set()
    tokens = list(argv)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        name, eq, inline = token.partition("=")
        if token.startswith("--") and name in _VALUE_OPTIONS:
            attr = _VALUE_OPTIONS[name]
            if attr in seen:
                raise UsageError(f"option {name} given more than once")
            seen.add(attr)
            if eq:
                value = inline
            elif i < len(tokens) and not _is_bkmcp_option(tokens[i]):
                value = tokens[i]
                i += 1
            else:  # `--body --dry-run` must not silently make "--dry-run" the body (and skip the dry run)
                raise UsageError(f"option {name} needs a value", hint=f"write {name}=VALUE for a value starting with -")
            setattr(inv, attr, value)
        elif token in _FLAG_OPTIONS:
            attr = _FLAG_OPTIONS[token]
            if attr in seen and attr not in ("verbose", "help"):
                raise UsageError(f"option {token} given more than once")
            seen.add(attr)
            setattr(inv, attr, True)
        elif token.startswith("-") and token != "-":
            if name in _RESERVED_UNSUPPORTED:
                raise UnsupportedOptionError(f"option {name} is reserved and not supported by bkmcp")
            if name in _FLAG_OPTIONS:
                raise UsageError(f"option {name} takes no value")
            if inv.tool is None or not token.startswith("--") or len(name) <= 2:
                where = "" if inv.tool is None else " (tool options look like --name value or --name=value)"
                raise UsageError(f"unknown option {name}{where}", hint="run bkmcp --help")
            flag = name[2:]
            if eq:
                inv.tool_tokens.append(ToolToken(flag, inline, True, token))
            elif i < len(tokens) and not _is_bkmcp_option(tokens[i]):
                inv.tool_tokens.append(ToolToken(flag, tokens[i], False, token))
                i += 1
            else:
                inv.tool_tokens.append(ToolToken(flag, None, False, token))
        elif inv.server is None:
            problem = check_server_name(token)
            if problem:
                raise UsageError(f"invalid server name {token!r}: {problem}")
            inv.server = token
        elif inv.tool is None:
            if not token:
                raise UsageError("a tool name must not be empty")
            inv.tool = token
        else:
            raise UsageError(f"unexpected argument {token!r}", hint="quote values that contain spaces")
    return inv


def check_invocation(inv: Invocation) -> None:
    """Mode exclusivity and option combinations (SPEC §2, seed §3, §8 dry-run)."""
    if inv.context is not None:
        raise UnsupportedOptionError(
            "--context is not supported: bkmcp takes identity only from the server's headers in mcp.json",
            hint="remove --context; configure the server's headers instead",
        )
    if inv.registry is not None and not inv.resident:
        raise UsageError("--registry is only valid with --resident")
    modes = [m for m, on in (("--check", inv.check), ("--tools", inv.tools), ("a tool call", inv.tool)) if on]
    if len(modes) > 1:
        raise UsageError(f"{' and '.join(modes)} cannot be combined: choose one mode")
    if inv.resident and (inv.server or modes):
        raise UsageError("--resident takes no server, tool or mode options")
    if inv.check or inv.tools:
        mode = "--check" if inv.check else "--tools"
        if inv.body is not None:
            raise UsageError(f"{mode} takes no --body")
        if inv.dry_run:
            raise UsageError(f"--dry-run cannot be combined with {mode}")
    if inv.body is not None and inv.tool is None and not modes and not inv.help:
        raise UsageError("--body needs a tool: bkmcp <server> <tool> --body JSON|@FILE|-")
    if (inv.check or inv.tools or inv.tool) and inv.server is None:
        raise UsageError("a server name is required", hint="bkmcp <server> --check")
    if inv.dry_run:
        if inv.tool is None:
            raise UsageError("--dry-run needs a tool and --body", hint="bkmcp <server> <tool> --body '{}' --dry-run")
        if inv.help:
            raise UsageError("--dry-run cannot be combined with tool --help (tool help needs discovery)")
        if inv.body is None:
            raise UsageError(
                "--dry-run needs a complete --body (flag types come from the server, which dry-run never contacts)",
                hint="use --body '{...}' (or --body '{}' for a tool without arguments)",
            )
        if inv.tool_tokens:
            raise UsageError(
                f"--dry-run does not accept named tool flags (got --{inv.tool_tokens[0].name})",
                hint="put every argument into --body",
            )
    if inv.timeout is not None:
        parse_duration(inv.timeout)


def read_body(source: str, stdin: IO[str], cwd: str) -> dict[str, Any]:
    """``--body JSON | @FILE | -``: the complete arguments object (P04, P06). stdin is read once."""
    if source == "-":
        label = "stdin"
        try:
            raw: str | bytes = stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read()
        except (OSError, ValueError, AttributeError) as exc:  # AttributeError: no stdin at all (fd 0 closed)
            raise UsageError(f"cannot read --body from stdin: {exc}") from None
    elif source.startswith("@"):
        path = os.path.normpath(os.path.join(cwd, os.path.expanduser(source[1:])))
        label = path
        if not source[1:]:
            raise UsageError("--body @FILE needs a file name")
        try:
            with open(path, "rb") as handle:
                raw = handle.read()
        except OSError as exc:
            raise UsageError(f"cannot read --body file {path}: {exc.strerror or exc}") from None
    else:
        label = "--body"
        raw = source
        try:
            raw.encode("utf-8")
        except UnicodeEncodeError:  # undecodable argv bytes arrive as lone surrogates (PEP 383)
            raise InvalidArgumentsError("--body from --body is not valid JSON: input is not valid UTF-8") from None
    if not (raw.strip() if isinstance(raw, str) else raw.strip()):
        raise InvalidArgumentsError(f"--body from {label} is empty", hint="use --body '{}' for no arguments")
    try:
        value = parse_json(raw)
    except JsonInputError as exc:
        raise InvalidArgumentsError(f"--body from {label} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        kind = "an array" if isinstance(value, list) else "a scalar"
        raise InvalidArgumentsError(
            f"--body from {label} must be a JSON object (the tool's arguments), got {kind}",
            hint="wrap the values in an object, e.g. {\"name\": …}",
        )
    return value


@dataclass
class Environment:
    """What ``main`` may touch: streams, environment variables and working directory (tests inject them)."""

    stdin: IO[str]
    stdout: IO[str]
    stderr: IO[str]
    env: Mapping[str, str]
    cwd: str


def build_dry_run(server: ResolvedServer, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Dry-run data (SPEC §7, O02): what would be sent, redacted; nothing remote verified."""
    data: dict[str, Any] = {"dry_run": True, "server": server.name, "tool": tool, "transport": server.type}
    if server.type == "http":
        data["url"] = server.url
        data["headers"] = redact_headers(server.headers)
    else:
        data["command"] = server.command
        data["args"] = [server.redactor.scrub(a) for a in server.args]
        data["env"] = {name: REDACTED for name in server.env}
    data["arguments"] = arguments
    data["unverified"] = ["tool_exists", "input_schema", "authentication", "permissions"]
    return data


def _select_server(config: ConfigFile, name: str) -> ServerConfig:
    if name not in config.servers:
        names = sorted(config.servers)
        close = closest_names(name, names)
        hint = f"did you mean {', '.join(close)}?" if close else "check the server names in the config file"
        raise ServerNotFoundError(
            f"no server {name!r} in {config.path}; configured: {', '.join(names) if names else '(none)'}",
            hint=hint,
            details={"configured": names},
        )
    return config.servers[name]


def _warn_literal_credentials(config: ConfigFile, log: Log) -> None:
    if not config.readable_by_others:
        return
    for server in config.servers.values():
        for name, value in (*server.headers, *server.env):
            if is_secret_name(name) and "${" not in value.replace("$${", ""):
                log.warn(
                    f"{config.path} holds literal credentials and is readable by group/others; run chmod 600 on it",
                    once_key="perms",
                )
                return


class _Runner:
    """Executes one invocation. Raises BkmcpError; ``main`` turns it into an envelope and exit status."""

    def __init__(self, inv: Invocation, envr: Environment, log: Log) -> None:
        self.inv = inv
        self.envr = envr
        self.log = log
        self.redactor = log.redactor
        self.remote_started = False

    def emit_text(self, text: str) -> int:
        self.envr.stdout.write(text if text.endswith("\n") else text + "\n")
        return EXIT_OK

    def emit_envelope(self, envelope: dict[str, Any], jq: JqProgram | None, status: int) -> int:
        out = self.envr.stdout
        if jq is not None:
            lines = jq.apply(envelope)
            out.write("".join(line + "\n" for line in lines))
        else:
            pretty = 2 if getattr(out, "isatty", lambda: False)() else None
            out.write(dump_json(envelope, indent=pretty) + "\n")
        out.flush()
        return status

    def run(self) -> int:
        inv, envr = self.inv, self.envr
        if inv.version:
            return self.emit_text(f"bkmcp {__version__}")
        check_invocation(inv)
        if inv.resident:
            return run_resident(inv.registry)
        config_path = resolve_config_path(inv.config, envr.env, envr.cwd)
        if inv.server is None:
            if inv.help or not any((inv.check, inv.tools, inv.tool)):
                return self.emit_text(render_root_help(config_path))
        jq = compile_jq(inv.jq) if inv.jq is not None and not inv.help else None
        self.log.debug(f"config file: {config_path}")
        config = load_config(config_path)
        _warn_literal_credentials(config, self.log)
        assert inv.server is not None
        server_cfg = _select_server(config, inv.server)
        self.log.debug(f"server: {server_cfg.name} ({server_cfg.type})")
        if inv.tool is None and (inv.help or not (inv.check or inv.tools)):
            return self.emit_text(render_server_help(server_cfg))
        server = resolve_server(server_cfg, envr.env)
        for secret in server.redactor._secrets:
            self.redactor.add(secret)
        if inv.dry_run:
            assert inv.tool is not None and inv.body is not None
            preview = read_body(inv.body, envr.stdin, envr.cwd)
            return self.emit_envelope(build_success(build_dry_run(server, inv.tool, preview)), jq, EXIT_OK)
        arguments: dict[str, Any] | None = None
        if inv.tool is not None and not inv.help and inv.body is not None:
            arguments = read_body(inv.body, envr.stdin, envr.cwd)
        timeout = parse_duration(inv.timeout) if inv.timeout is not None else DEFAULT_TIMEOUT
        deadline = Deadline(timeout)
        try:
            self.remote_started = True
            if inv.check:
                data = run_check(server, deadline=deadline, insecure=inv.insecure, log=self.log)
                return self.emit_envelope(build_success(data), jq, EXIT_OK)
            if inv.tools:
                data = run_tools(server, deadline=deadline, insecure=inv.insecure, log=self.log)
                return self.emit_envelope(build_success(data), jq, EXIT_OK)
            assert inv.tool is not None
            return self.run_tool(server, inv.tool, arguments, jq, deadline)
        except RemoteError as exc:
            if isinstance(exc, JqError):
                raise
            return self.emit_envelope(build_failure(exc, self.redactor), jq, EXIT_REMOTE)

    def run_tool(
        self, server: ResolvedServer, name: str, arguments: dict[str, Any] | None, jq: JqProgram | None,
        deadline: Deadline,
    ) -> int:
        inv = self.inv
        with McpClient(server, deadline=deadline, insecure=inv.insecure, log=self.log) as client:
            client.connect()
            tool = find_tool(client.list_tools(), name, server.name)
            if inv.help:
                return self.emit_text(render_tool_help(server.name, tool))
            if arguments is None:
                arguments = parse_tool_arguments(tool, inv.tool_tokens)
            else:
                check_tool_tokens(tool, inv.tool_tokens)
            validate_arguments(tool, arguments)
            result = client.call_tool(name, arguments)
        data = {"server": server.name, "tool": name, "result": result}
        if result.get("isError") is True:
            raise ToolError(
                f"tool {name!r} reported an error (isError: true)",
                hint="the tool ran and returned an error result; see data.result",
                data=data,
            )
        return self.emit_envelope(build_success(data), jq, EXIT_OK)


def main(
    argv: Sequence[str] | None = None,
    *,
    stdin: IO[str] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> int:
    """Run bkmcp; the only place where exceptions become envelopes and exit statuses (STYLE.md)."""
    envr = Environment(
        stdin=stdin if stdin is not None else sys.stdin,
        stdout=stdout if stdout is not None else sys.stdout,
        stderr=stderr if stderr is not None else sys.stderr,
        env=env if env is not None else os.environ,
        cwd=cwd if cwd is not None else os.getcwd(),
    )
    args = list(sys.argv[1:] if argv is None else argv)
    log = Log(envr.stderr, verbose=any(a in ("-v", "--verbose") for a in args))
    runner: _Runner | None = None
    try:
        inv = parse_argv(args)
        runner = _Runner(inv, envr, log)
        return runner.run()
    except KeyboardInterrupt:
        log.warn("interrupted")
        return EXIT_INTERRUPTED
    except BkmcpError as exc:
        return _report_error(exc, envr, log, runner)
    except BrokenPipeError:
        return EXIT_REMOTE if runner is not None and runner.remote_started else EXIT_LOCAL
    except Exception as exc:  # the last rung of the ladder: never a traceback unless asked for
        if envr.env.get("BKMCP_TRACEBACK") == "1":
            import traceback

            traceback.print_exc(file=envr.stderr)
        remote = runner is not None and runner.remote_started
        error = InternalError(
            f"internal error: {type(exc).__name__}: {_first_line(exc)}",
            hint="this is a bkmcp bug; re-run with BKMCP_TRACEBACK=1 and report it"
            + ("; the remote operation may already have happened, do not retry it blindly" if remote else ""),
        )
        error.exit_status = EXIT_REMOTE if remote else EXIT_LOCAL
        return _report_error(error, envr, log, runner)


def _report_error(exc: BkmcpError, envr: Environment, log: Log, runner: _Runner | None) -> int:
    envelope = build_failure(exc, log.redactor)
    text = dump_json(envelope)
    try:
        if exc.exit_status == EXIT_REMOTE:
            envr.stdout.write(text + "\n")
            envr.stdout.flush()
        else:
            envr.stderr.write(text + "\n")
            envr.stderr.flush()
    except (OSError, ValueError):
        pass
    return exc.exit_status


if __name__ == "__main__":
    sys.exit(main())
