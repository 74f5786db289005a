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
     +-- InvalidCommandError        invalid_command        (resident mode, SPEC §11.2)
     +-- UnknownActionError         unknown_action         (resident)
     +-- DuplicateTaskIdError       duplicate_task_id      (resident)
     +-- CredentialsMissingError    mcp_credentials_missing (resident)
     +-- ServerDisabledError        mcp_server_disabled    (resident)
     +-- RegistryError              registry_error         (resident)
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
          +-- ResourceLimitError    resource_limit         (resident)

Heavy dependencies (httpx, jsonschema, jq) are imported lazily by the code paths that need them, so
``bkmcp --help`` and ``bkmcp <server> --help`` import none of them. Nothing connects at import time.
"""

from __future__ import annotations

import os
import sys
import time

# Start-up matters (`bkmcp --help` within 2x of a bare interpreter, SPEC §13): typing, collections.abc and
# dataclasses (which imports inspect, ast, dis and tokenize) cost more than the rest of bkmcp together, and json,
# re and decimal are not needed by the help paths. Type checkers see the real modules; the running program uses
# the already-loaded `_collections_abc`, the small `dataclass` of section 2, and imports json, re and decimal on
# first use (`JsonNumber` too: see section 2).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import decimal
    import json
    import re
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
    from dataclasses import dataclass, field
    from typing import IO, Any
else:
    from _collections_abc import Callable, Iterable, Iterator, Mapping, Sequence

    class _LazyModule:
        """A module imported on first attribute access; it then replaces itself in this module's globals."""

        def __init__(self, name):
            self._name = name

        def __getattr__(self, attr):
            module = __import__(self._name)
            globals()[self._name] = module
            return getattr(module, attr)

    decimal = _LazyModule("decimal")
    json = _LazyModule("json")
    re = _LazyModule("re")


class _LazyPattern:
    """A regular expression compiled on first use (module-level patterns must not import ``re`` at start-up)."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._source = (pattern, flags)

    def __getattr__(self, attr: str) -> Any:
        value = getattr(re.compile(*self._source), attr)
        setattr(self, attr, value)  # later lookups skip __getattr__: the bound method of the compiled pattern
        return value


def _lazy_re(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return _LazyPattern(pattern, flags)  # type: ignore[return-value]

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


# Resident mode (SPEC §11.2): codes a command can fail with besides the CLI's. Exit statuses only matter for
# start-up failures (``registry_error``: the registry cannot be opened) and the ``--registry --import/--list`` tools.


class InvalidCommandError(BkmcpError):
    code = "invalid_command"


class UnknownActionError(BkmcpError):
    code = "unknown_action"


class DuplicateTaskIdError(BkmcpError):
    code = "duplicate_task_id"


class CredentialsMissingError(BkmcpError):
    code = "mcp_credentials_missing"


class ServerDisabledError(BkmcpError):
    code = "mcp_server_disabled"


class ResourceLimitError(RemoteError):
    code = "resource_limit"


class RegistryError(BkmcpError):
    code = "registry_error"


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

if not TYPE_CHECKING:
    _MISSING = object()

    class _Field:
        __slots__ = ("default_factory",)

        def __init__(self, default_factory: Callable[[], Any]) -> None:
            self.default_factory = default_factory

    def field(*, default_factory: Callable[[], Any]) -> Any:
        """``dataclasses.field`` for the one use bkmcp has: a ``default_factory``."""
        return _Field(default_factory)

    _COMPILE_INIT_AFTER = 8  # instances a class makes through the generic __init__ before it gets its own

    def dataclass(cls: Any = None, *, frozen: bool = False, slots: bool = False) -> Any:
        """``dataclasses.dataclass`` for the features bkmcp uses, without importing ``inspect``.

        Fields come from the class annotations in order, defaults from class attributes or ``field()``;
        generates ``__init__`` (positional or keyword), ``__repr__``, ``__eq__``, and for ``frozen`` classes
        read-only attributes and ``__hash__`` (non-frozen classes are unhashable, as with dataclasses);
        ``slots`` rebuilds the class with ``__slots__`` (its methods must not use zero-argument ``super()``).

        ``__init__`` starts generic, which costs nothing at import; a class that makes more than a few instances
        (the records of a 10 000-property catalogue) then gets an ``__init__`` compiled for its fields, as fast
        as a hand-written one.
        """

        def wrap(cls: Any) -> Any:
            names = tuple(cls.__dict__.get("__annotations__", {}))
            defaults = {n: cls.__dict__[n] for n in names if n in cls.__dict__}
            for name, value in defaults.items():
                if isinstance(value, _Field) or slots:
                    delattr(cls, name)
            if slots:
                body = {k: v for k, v in cls.__dict__.items() if k not in ("__dict__", "__weakref__")}
                body.update(__slots__=names, __qualname__=cls.__qualname__)
                cls = type(cls)(cls.__name__, cls.__bases__, body)
            qualname = cls.__qualname__
            made = 0

            def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
                nonlocal made
                made += 1
                if made == _COMPILE_INIT_AFTER:
                    cls.__init__ = _compiled_init(names, defaults, frozen)
                if len(args) > len(names):
                    raise TypeError(f"{qualname}() takes {len(names)} arguments, {len(args)} given")
                values = dict(zip(names, args))
                for key, value in kwargs.items():
                    if key not in names or key in values:
                        raise TypeError(f"{qualname}() got an unexpected or repeated argument {key!r}")
                    values[key] = value
                for name in names:
                    if name not in values:
                        default = defaults.get(name, _MISSING)
                        if default is _MISSING:
                            raise TypeError(f"{qualname}() missing argument {name!r}")
                        values[name] = default.default_factory() if isinstance(default, _Field) else default
                    object.__setattr__(self, name, values[name])

            def __repr__(self: Any) -> str:
                return f"{qualname}({', '.join(f'{n}={getattr(self, n)!r}' for n in names)})"

            def __eq__(self: Any, other: Any) -> Any:
                if other.__class__ is not self.__class__:
                    return NotImplemented
                return all(getattr(self, n) == getattr(other, n) for n in names)

            cls.__init__, cls.__repr__, cls.__eq__ = __init__, __repr__, __eq__
            if frozen:
                def __setattr__(self: Any, name: str, value: Any) -> None:
                    raise AttributeError(f"cannot assign to field {name!r} of frozen {qualname}")

                def __delattr__(self: Any, name: str) -> None:
                    raise AttributeError(f"cannot delete field {name!r} of frozen {qualname}")

                def __hash__(self: Any) -> int:
                    return hash(tuple(getattr(self, n) for n in names))

                cls.__setattr__, cls.__delattr__, cls.__hash__ = __setattr__, __delattr__, __hash__
            else:
                cls.__hash__ = None
            return cls

        return wrap if cls is None else wrap(cls)

    def _compiled_init(names: tuple[str, ...], defaults: dict[str, Any], frozen: bool) -> Callable[..., None]:
        """``def __init__(self, a, b=_d_b, c=_MISSING): ...`` for these fields, as dataclasses generates it."""
        namespace: dict[str, Any] = {"_MISSING": _MISSING, "_set": object.__setattr__}
        params, lines = [], []
        for name in names:
            default = defaults.get(name, _MISSING)
            if default is _MISSING:
                params.append(name)
            elif isinstance(default, _Field):
                namespace[f"_f_{name}"] = default.default_factory
                params.append(f"{name}=_MISSING")
                lines.append(f"    if {name} is _MISSING: {name} = _f_{name}()")
            else:
                namespace[f"_d_{name}"] = default
                params.append(f"{name}=_d_{name}")
        lines += [f"    _set(self, {n!r}, {n})" if frozen else f"    self.{n} = {n}" for n in names]
        exec(f"def __init__(self, {', '.join(params)}):\n" + "\n".join(lines or ["    pass"]), namespace)
        return namespace["__init__"]  # type: ignore[no-any-return]



def _define_json_number() -> type:
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

    return JsonNumber


if TYPE_CHECKING:

    class JsonNumber(decimal.Decimal):
        text: str

        def __new__(cls, text: str) -> JsonNumber: ...

else:

    class _StandInMeta(type):
        def __instancecheck__(cls, obj):
            return bool(_JSON_NUMBER_CLASS) and isinstance(obj, _JSON_NUMBER_CLASS[0])

        def __subclasscheck__(cls, sub):
            return bool(_JSON_NUMBER_CLASS) and issubclass(sub, _JSON_NUMBER_CLASS[0])

    class JsonNumber(metaclass=_StandInMeta):
        """Stands in for the real ``JsonNumber`` (``_define_json_number``) until the first one is made.

        ``decimal`` (with ``collections``) is a measurable part of start-up and the help paths never meet a
        non-integer number, so the ``Decimal`` subclass is created on first use and replaces this class in the
        module globals. No instance of the stand-in exists; a reference to it taken early (``from bkmcp import
        JsonNumber``) still constructs real instances and answers ``isinstance`` for the real class.
        """

        def __new__(cls, text):
            return _real_json_number()(text)

    _JSON_NUMBER_CLASS = []

    def _real_json_number():
        """The real class, created once; it replaces the stand-in in the module globals."""
        if not _JSON_NUMBER_CLASS:
            real = _define_json_number()
            real.__module__, real.__qualname__ = __name__, "JsonNumber"
            _JSON_NUMBER_CLASS.append(real)
            globals()["JsonNumber"] = real
        return _JSON_NUMBER_CLASS[0]
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


def _json_float(text: str) -> Any:
    return JsonNumber(text)  # looked up per call: the stand-in only until the first one is made


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
    start = len(text) - len(text.lstrip(_JSON_SPACE))
    try:
        try:
            value, end = _json_scanner(strict_keys)(text, start)
        except StopIteration as stop:
            raise _JsonSyntax("expecting value" if text.strip() else "empty input", text, stop.value) from None
        end += len(text) - end - len(text[end:].lstrip(_JSON_SPACE))
        if end != len(text):
            raise _JsonSyntax("extra data", text, end)
        return value
    except _DuplicateKey as exc:
        raise JsonInputError(f"duplicate key {json.dumps(exc.key, ensure_ascii=False)}") from None
    except RecursionError:
        raise JsonInputError("nesting too deep") from None
    except ValueError as exc:  # the scanner's JSONDecodeError (msg, lineno, colno), or a rejected constant
        if hasattr(exc, "lineno"):
            reason = exc.msg.lower() if text.strip() else "empty input"  # type: ignore[attr-defined]
            raise JsonInputError(reason, exc.lineno, exc.colno) from None  # type: ignore[attr-defined]
        raise JsonInputError(str(exc)) from None


_JSON_SPACE = " \t\n\r"
_SCANNERS: dict[bool, Callable[[str, int], tuple[Any, int]]] = {}


class _JsonSyntax(ValueError):
    """Same fields as ``json.JSONDecodeError``, without importing json (and re) for the parse itself."""

    def __init__(self, msg: str, doc: str, pos: int) -> None:
        super().__init__(msg)
        self.msg = msg
        self.lineno = doc.count("\n", 0, pos) + 1
        self.colno = pos - doc.rfind("\n", 0, pos)


class _ScanContext:
    """The settings ``_json.make_scanner`` reads (what ``json.JSONDecoder`` would hold)."""

    def __init__(self, strict_keys: bool) -> None:
        self.strict = True
        self.object_hook = None
        self.object_pairs_hook = _strict_pairs if strict_keys else None
        self.parse_float = _json_float
        self.parse_int = _parse_int
        self.parse_constant = _reject_constant
        self.memo: dict[str, str] = {}


def _json_scanner(strict_keys: bool) -> Callable[[str, int], tuple[Any, int]]:
    """The C scanner behind ``json.loads``, used directly: importing ``json`` pulls in ``re`` (and ``enum``),
    which would be most of ``bkmcp <server> --help``'s start-up (SPEC §13)."""
    scanner = _SCANNERS.get(strict_keys)
    if scanner is None:
        try:
            from _json import make_scanner  # type: ignore[import-not-found]
        except ImportError:  # not CPython: the pure-Python scanner of the json package
            from json.scanner import make_scanner
        scanner = _SCANNERS[strict_keys] = make_scanner(_ScanContext(strict_keys))  # type: ignore[arg-type]
    return scanner


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
    if _ESCAPE_ALWAYS.search(out):
        # JSON allows "\udcff" escapes that are not valid Unicode; written raw they make every UTF-8 stream fail.
        # U+0085/U+2028/U+2029 are line breaks to many readers: escaped, an envelope stays one line everywhere.
        out = _ESCAPE_ALWAYS.sub(lambda m: f"\\u{ord(m.group()):04x}", out)
    return out


_ESCAPE_ALWAYS = _lazy_re("[\ud800-\udfff\u0085\u2028\u2029]")


def _decimal_text(number: decimal.Decimal) -> str:
    if not number.is_finite():
        raise TypeError("NaN and infinite numbers are not valid JSON")
    return str(number)


def _is_json_integer(value: Any) -> bool:
    """JSON Schema's integer (draft 6+): a number with no fractional part; never a boolean."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            return False
        if value.as_tuple().exponent >= 0:  # type: ignore[operator]
            return True
        try:
            return value == value.to_integral_value()
        except decimal.DecimalException:
            return False
    return False


def json_type(value: Any, *, integers: bool = False) -> str:
    """The JSON type of a parsed value: null, boolean, number (``integer`` when asked and integral), string,
    array, object; any other Python type by its name."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float, decimal.Decimal)):
        return "integer" if integers and _is_json_integer(value) else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


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


_SECRET_QUERY_NAMES = frozenset({"sig", "code", "sid", "pwd", "pass", "hmac", "otp", "jwt"})
_SECRET_QUERY_WORDS = ("signature", "credential", "session", "passw", "bearer")


def redact_url(url: str) -> str:
    """``url`` as bkmcp prints it: the value of each secret-looking query parameter becomes ``***``.

    A parameter is secret when its (decoded) name passes ``is_secret_name`` (token, key, secret, auth, password,
    ticket: ``access_token``, ``apikey``, ``api_key``, ``key`` …), is one of ``sig code sid pwd pass hmac otp
    jwt``, or contains ``signature``, ``credential``, ``session``, ``passw`` or ``bearer`` (case-insensitive).
    Everything else is kept byte for byte, names included, so the URL stays recognisable.
    """
    base, mark, query = url.partition("?")
    if not mark or not query:
        return url
    query, hash_mark, _fragment = query.partition("#")
    pieces = []
    for piece in query.split("&"):
        name, equals, _value = piece.partition("=")
        if "%" in name or "+" in name:  # urllib.parse (with re) only when the name is encoded: help stays lean
            from urllib.parse import unquote_plus

            name_text = unquote_plus(name)
        else:
            name_text = name
        lowered = name_text.lower()
        secret = (is_secret_name(lowered) or lowered in _SECRET_QUERY_NAMES
                  or any(word in lowered for word in _SECRET_QUERY_WORDS))
        pieces.append(f"{name}={REDACTED}" if equals and secret else piece)
    return f"{base}?{'&'.join(pieces)}" + (f"#{REDACTED}" if hash_mark else "")


# -- durations and deadlines ---------------------------------------------------------------------------

_DURATION = _lazy_re(r"^([0-9]+(?:\.[0-9]+)?|\.[0-9]+)(ms|s|m|h)?$")
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
_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_ENV_REF = _lazy_re(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$\{")
_CONTROL = _lazy_re(r"[\x00-\x1f\x7f]")


# Plain string checks instead of regular expressions: `bkmcp <server> --help` validates the whole file, and
# importing re (with enum) would be the largest part of its start-up.
def _is_token(text: str) -> bool:
    """An RFC 9110 token (a valid header name)."""
    return bool(text) and all(ch in _TOKEN_CHARS for ch in text)


def _is_env_name(text: str) -> bool:
    """``[A-Za-z_][A-Za-z0-9_]*``."""
    return text.isascii() and text.isidentifier()


def _has_control(text: str) -> bool:
    return any(ch < " " or ch == "\x7f" for ch in text)


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
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise InvalidConfigError(f"cannot read config file {path!r}: {getattr(exc, 'strerror', None) or exc}") from None
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
        shown = ", ".join(repr(_safe_name(k)) for k in extra)
        raise InvalidConfigError(f"{path}: unsupported top-level field(s): {shown}")
    entries = document["mcpServers"]
    if not isinstance(entries, dict):
        raise InvalidConfigError(f"{path}: \"mcpServers\" must be an object of named servers")
    servers = {name: _parse_server(path, name, entry) for name, entry in entries.items()}
    return ConfigFile(path, servers)


def _safe_name(name: str) -> str:
    """A config key as diagnostics may show it: up to its first character outside a header token, so a pasted
    ``Authorization: Bearer <token>`` or ``API_KEY=<value>`` key never prints its secret part (A05)."""
    prefix = re.match(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]*", name).group()  # type: ignore[union-attr]
    return name if prefix == name and len(name) <= 64 else prefix[:64] + "…"


def check_server_name(name: str) -> str | None:
    """Why ``name`` cannot be a server name, or None when it can."""
    if not name:
        return "a server name must not be empty"
    if name.startswith("-"):
        return "a server name must not start with '-'"
    if any(ch.isspace() for ch in name) or _has_control(name):
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
            f"{where}: unknown field(s) {', '.join(repr(_safe_name(k)) for k in unknown)} for type {kind!r}",
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
        if not _is_env_name(key):
            raise InvalidConfigError(f"{where}: field \"env\" has an invalid variable name {_safe_name(key)!r}")
    cwd = entry.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not cwd):
        raise InvalidConfigError(f"{where}: field \"cwd\" must be a non-empty string")
    for label, text in (("command", command), ("cwd", cwd or ""), *(("args", a) for a in args),
                        *(("env", v) for v in env.values())):
        if "\x00" in text:  # no process can be started with it
            raise InvalidConfigError(f"{where}: field \"{label}\" contains a NUL character")
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
    """Absolute http(s), a host, no user information, no fragment; the URL itself is kept byte for byte."""
    if not isinstance(url, str) or not url:
        raise InvalidConfigError(f"{where}: field \"url\" is required and must be a string")
    if _has_control(url) or " " in url:
        raise InvalidConfigError(f"{where}: field \"url\" contains whitespace or control characters")
    scheme, separator, rest = url.partition("://")
    if not separator or scheme.lower() not in ("http", "https"):
        raise InvalidConfigError(f"{where}: field \"url\" must be an absolute http:// or https:// URL")
    authority = rest
    for stop in "/?#":
        authority = authority.split(stop, 1)[0]
    if "@" in authority:
        raise InvalidConfigError(
            f"{where}: field \"url\" must not contain user information",
            hint="put credentials in \"headers\", not in the URL",
        )
    if "#" in url:
        raise InvalidConfigError(f"{where}: field \"url\" must not contain a fragment (#…)")
    host, port = authority, ""
    if authority.startswith("["):  # an IPv6 literal
        end = authority.find("]")
        host, after = authority[1:end], authority[end + 1:]
        if end < 0 or not host or (after and not after.startswith(":")) or any(c not in _IPV6_CHARS for c in host):
            raise InvalidConfigError(f"{where}: field \"url\" is not a valid URL")
        port = after[1:]
    elif ":" in authority:
        host, _, port = authority.rpartition(":")
        if ":" in host or "[" in host or "]" in authority:
            raise InvalidConfigError(f"{where}: field \"url\" is not a valid URL")
    if port and not (port.isascii() and port.isdigit() and int(port) <= 65535):
        raise InvalidConfigError(f"{where}: field \"url\" is not a valid URL")
    if not host:
        raise InvalidConfigError(f"{where}: field \"url\" has no host")
    if port and int(port) == 0:
        raise InvalidConfigError(f"{where}: field \"url\" has an invalid port")
    return url


_IPV6_CHARS = frozenset("0123456789abcdefABCDEF:.")


def _check_headers(where: str, headers: Any) -> tuple[tuple[str, str], ...]:
    if headers is None:
        return ()
    if not isinstance(headers, dict):
        raise InvalidConfigError(f"{where}: field \"headers\" must be an object of strings")
    seen: dict[str, str] = {}
    for name, value in headers.items():
        if not _is_token(name):
            # never echo the whole name: a pasted "Authorization: Bearer <token>" key would print the token
            raise InvalidConfigError(
                f"{where}: header name {_safe_name(name)!r} is not a valid HTTP header name",
                hint="header names are tokens without spaces, ':' or control characters; values go after them",
            )
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


# What a stdio server inherits from bkmcp's environment (SPEC §9): locating programs, the user, locale, temp
# dirs, the terminal and what Windows needs to start a process. Nothing else (no tokens, no proxies).
STDIO_INHERITED_ENV = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "TMPDIR", "TEMP", "TMP", "SHELL", "TERM",
    "SYSTEMROOT", "COMSPEC", "PATHEXT", "WINDIR",
)


def select_inherited_env(env: Mapping[str, str]) -> dict[str, str]:
    """The minimal inherited part of a stdio server's environment (``LC_*`` included); the entry's ``env`` is
    laid over it by the transport."""
    return {name: value for name, value in env.items() if name in STDIO_INHERITED_ENV or name.startswith("LC_")}


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
    inherited_env: dict[str, str] = field(default_factory=dict)  # stdio: the minimal set from bkmcp's environment


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
        if any(ch in value for ch in "\r\n\x00"):  # e.g. a token read from a file with its trailing newline
            raise InvalidConfigError(
                f"{where}: header {name!r} contains a line break or NUL after expansion",
                hint="strip the newline from the variable's value (export VAR=\"$(cat file)\" does that)",
            )
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
    if any("\x00" in arg for arg in args):
        raise InvalidConfigError(f"{where}: an argument contains a NUL character after expansion")
    child_env: dict[str, str] = {}
    for name, template in server.env:
        value, used = expand_env(template, env, where=f"{where}, env {name!r}")
        if "\x00" in value:
            raise InvalidConfigError(f"{where}: env {name!r} contains a NUL character after expansion")
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
        inherited_env=select_inherited_env(env) if server.type == "stdio" else {},
    )


# ======================================================================================================
# 5. Protocol core (sans-IO)
# ======================================================================================================
# Everything here is pure: it turns bytes into events and dicts into wire messages and back, and decides
# what an answer means. It imports neither httpx nor sockets nor subprocess (STYLE.md: the h11 model); the
# transports of section 6 own the I/O and drive these functions message by message.

LEGACY_VERSIONS = ("2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS = ("2026-07-28",)
LATEST_LEGACY_VERSION = "2025-11-25"
LATEST_MODERN_VERSION = "2026-07-28"
CLIENT_INFO = {"name": "bkmcp", "version": __version__}
META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"

MAX_PAGES = 1000
MAX_TOOLS = 100_000


@dataclass(frozen=True)
class EraRules:
    """What one protocol version changes on the wire (protocol-notes.md §0). Flows read this table, not ifs."""

    version: str
    era: str  # "legacy" | "modern"
    handshake: bool  # initialize + notifications/initialized
    version_header: bool  # MCP-Protocol-Version on requests after the handshake (every request when modern)
    sessions: bool  # Mcp-Session-Id issued by initialize, DELETE at close
    request_meta: bool  # params._meta protocolVersion / clientCapabilities / clientInfo on every request
    method_headers: bool  # Mcp-Method, Mcp-Name, Mcp-Param-*
    sse_resumption: bool  # GET + Last-Event-ID when a POST's stream closes early
    server_requests: bool  # server -> client requests may arrive on a stream
    cancel_notification: bool  # Ctrl-C sends notifications/cancelled (modern HTTP closes the stream)


ERA_TABLE: dict[str, EraRules] = {
    "2025-03-26": EraRules("2025-03-26", "legacy", True, False, True, False, False, True, True, True),
    "2025-06-18": EraRules("2025-06-18", "legacy", True, True, True, False, False, True, True, True),
    "2025-11-25": EraRules("2025-11-25", "legacy", True, True, True, False, False, True, True, True),
    "2026-07-28": EraRules("2026-07-28", "modern", False, True, False, True, True, False, False, False),
}


def era_rules(version: str) -> EraRules:
    try:
        return ERA_TABLE[version]
    except KeyError:
        raise ProtocolError(f"protocol version {version!r} is not supported by bkmcp "
                            f"(supported: {', '.join(SUPPORTED_VERSIONS)})") from None


# -- JSON-RPC framing ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    """One decoded JSON-RPC message. ``kind``: request | notification | result | error."""

    kind: str
    id: Any = None
    method: str | None = None
    params: Any = None
    result: Any = None
    error: dict[str, Any] | None = None


def _is_rpc_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def same_id(a: Any, b: Any) -> bool:
    """JSON-RPC ids match only with the same type and value (``1`` is not ``"1"``, ``True`` is no id)."""
    return _is_rpc_id(a) and _is_rpc_id(b) and type(a) is type(b) and a == b


def parse_message(value: Any) -> Message:
    """Classify one decoded JSON value as a JSON-RPC 2.0 message; ``ProtocolError`` says what is wrong."""
    if not isinstance(value, dict):
        raise ProtocolError(f"the server sent a JSON-RPC message that is {_json_kind(value)}, not an object")
    if value.get("jsonrpc") != "2.0":
        raise ProtocolError('the server sent a message without "jsonrpc": "2.0"')
    has_id = "id" in value
    msg_id = value.get("id")
    if "method" in value:
        method = value["method"]
        if not isinstance(method, str) or not method:
            raise ProtocolError('the server sent a message whose "method" is not a non-empty string')
        params = value.get("params")
        if params is not None and not isinstance(params, (dict, list)):
            raise ProtocolError(f"the server sent {method!r} with params that are {_json_kind(params)}")
        if has_id and msg_id is not None:
            if not _is_rpc_id(msg_id):
                raise ProtocolError(f"the server sent request {method!r} with an invalid id ({_json_kind(msg_id)})")
            return Message("request", id=msg_id, method=method, params=params)
        return Message("notification", method=method, params=params)
    if "result" in value and "error" not in value:
        if not _is_rpc_id(msg_id):
            raise ProtocolError(f"the server sent a result with an invalid id ({_json_kind(msg_id)})")
        return Message("result", id=msg_id, result=value["result"])
    if "error" in value and "result" not in value:
        error = value["error"]
        if msg_id is not None and not _is_rpc_id(msg_id):
            raise ProtocolError(f"the server sent an error with an invalid id ({_json_kind(msg_id)})")
        if not isinstance(error, dict):
            raise ProtocolError(f"the server sent a JSON-RPC error that is {_json_kind(error)}, not an object")
        code = error.get("code")
        if not isinstance(code, int) or isinstance(code, bool):
            raise ProtocolError("the server sent a JSON-RPC error without an integer code")
        if not isinstance(error.get("message"), str):
            raise ProtocolError(f"the server sent JSON-RPC error {code} without a message string")
        return Message("error", id=msg_id, error=error)
    raise ProtocolError("the server sent a JSON object that is neither a request, a notification nor a response")


def decode_messages(text: str | bytes) -> list[Message]:
    """A response body or SSE data: one message, or (2025-03-26) a batch array of them."""
    try:
        value = parse_json(text, strict_keys=False)
    except JsonInputError as exc:
        raise ProtocolError(f"the server sent invalid JSON: {exc}") from None
    if isinstance(value, list):
        if not value:
            raise ProtocolError("the server sent an empty JSON-RPC batch")
        return [parse_message(item) for item in value]
    return [parse_message(value)]


def _json_kind(value: Any) -> str:
    """``json_type`` with its article, for messages: "an object", "a number", "null"."""
    kind = json_type(value)
    return kind if kind == "null" else ("an " if kind[0] in "aeiou" else "a ") + kind


# -- SSE decoding --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SseEvent:
    event: str
    data: str
    id: str | None = None


_SSE_EOL = _lazy_re(r"\r\n|\r|\n")
_RETRY_MAX_MS = 600_000


class SseDecoder:
    """Incremental ``text/event-stream`` decoder (WHATWG rules) fed with chunks as they arrive.

    LF, CRLF and CR line ends (a CRLF split across chunks counts once); ``:`` comments ignored; ``data``
    lines joined with ``\\n``; events with empty data are not dispatched (MCP priming events) but their ``id``
    still becomes ``last_event_id``; ``retry`` kept in ``retry_ms``. Each input character is scanned once and
    a long line is kept as a list of pieces joined once, so a 50 MB event costs linear time and memory.
    """

    def __init__(self) -> None:
        import codecs

        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._pieces: list[str] = []
        self._skip_lf = False
        self._started = False
        self._data: list[str] = []
        self._event = ""
        self._id_buffer: str | None = None
        self.last_event_id: str | None = None
        self.retry_ms: int | None = None

    def feed(self, chunk: bytes | str) -> list[SseEvent]:
        text = self._utf8.decode(chunk) if isinstance(chunk, bytes) else chunk
        if not text:
            return []
        if not self._started:
            self._started = True
            if text.startswith("\ufeff"):
                text = text[1:]
        events: list[SseEvent] = []
        pos = 0
        if self._skip_lf and text:
            self._skip_lf = False
            if text[0] == "\n":
                pos = 1
        for match in _SSE_EOL.finditer(text, pos):
            start = match.start()
            if self._pieces:
                self._pieces.append(text[pos:start])
                pieces, self._pieces = self._pieces, []
                if pieces[0].startswith("data:") and len(pieces[0]) > 5:  # strip "data:" before the one join
                    head = pieces[0][5:]
                    pieces[0] = head[1:] if head[:1] == " " else head
                    self._data.append("".join(pieces))
                    line = None
                else:
                    line = "".join(pieces)
                del pieces
            else:
                line = text[pos:start]
            pos = match.end()
            if match.group() == "\r" and pos == len(text):
                self._skip_lf = True  # a "\n" opening the next chunk belongs to this line end
            if line is not None:
                self._line(line, events)
        if pos < len(text):
            self._pieces.append(text[pos:])
        return events

    def close(self) -> list[SseEvent]:
        """End of stream: an unterminated event is discarded (WHATWG), nothing else to flush."""
        tail = self._utf8.decode(b"", final=True)
        events = self.feed(tail) if tail else []
        self._pieces = []
        self._data = []
        return events

    def _line(self, line: str, events: list[SseEvent]) -> None:
        if not line:
            self._dispatch(events)
            return
        if line[0] == ":":
            return
        name, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\x00" not in value:
                self._id_buffer = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self.retry_ms = min(int(value[:9]), _RETRY_MAX_MS)

    def _dispatch(self, events: list[SseEvent]) -> None:
        self.last_event_id = self._id_buffer
        data = self._data[0] if len(self._data) == 1 else "\n".join(self._data)
        if not data:  # no data line, or one empty data line (WHATWG: an empty data buffer is not dispatched)
            self._data = []
            self._event = ""
            return
        events.append(SseEvent(self._event or "message", data, self._id_buffer))
        self._data = []
        self._event = ""


# -- request building ----------------------------------------------------------------------------------


def build_request(request_id: int, method: str, params: dict[str, Any] | None, rules: EraRules) -> dict[str, Any]:
    """A JSON-RPC request; modern requests carry the per-request ``_meta`` keys (protocol-notes.md §3.1)."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    params = _with_meta(params, rules)
    if params is not None:
        message["params"] = params
    return message


def build_notification(method: str, params: dict[str, Any] | None, rules: EraRules) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    params = _with_meta(params, rules)
    if params is not None:
        message["params"] = params
    return message


def build_response(request_id: Any, *, result: Any = None, error: dict[str, Any] | None = None) -> dict[str, Any]:
    if error is not None:
        return {"jsonrpc": "2.0", "id": request_id, "error": error}
    return {"jsonrpc": "2.0", "id": request_id, "result": result if result is not None else {}}


def _with_meta(params: dict[str, Any] | None, rules: EraRules) -> dict[str, Any] | None:
    if not rules.request_meta:
        return params
    params = dict(params or {})
    meta = dict(params.get("_meta") or {})
    meta[META_PROTOCOL_VERSION] = rules.version
    meta[META_CLIENT_CAPABILITIES] = {}
    meta[META_CLIENT_INFO] = dict(CLIENT_INFO)
    params["_meta"] = meta
    return params


def build_initialize_params(version: str) -> dict[str, Any]:
    return {"protocolVersion": version, "capabilities": {}, "clientInfo": dict(CLIENT_INFO)}


_SENTINEL_PREFIX = "=?base64?"
_SENTINEL_SUFFIX = "?="
_HEADER_TOKEN = _lazy_re(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


def encode_header_value(value: Any) -> str | None:
    """A value for ``Mcp-Name`` / ``Mcp-Param-*``; None means "omit the header" (null, absent, non-scalar).

    Plain visible ASCII without surrounding whitespace goes as is; anything else, or a value that itself looks
    like the sentinel, is sent as ``=?base64?<base64 of UTF-8>?=`` (2026-07-28 streamable-http §Request Metadata).
    """
    if value is None:
        return None
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, str):
        text = value
    else:
        return None
    plain = all(" " <= ch <= "~" for ch in text) and text == text.strip()
    looks_encoded = text.startswith("=?") and text.endswith(_SENTINEL_SUFFIX)
    if plain and not looks_encoded:
        return text
    import base64

    return _SENTINEL_PREFIX + base64.b64encode(text.encode("utf-8")).decode("ascii") + _SENTINEL_SUFFIX


def build_param_headers(tool: Mapping[str, Any] | None, arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``Mcp-Param-{Name}`` headers for the arguments whose top-level property declares ``x-mcp-header``.

    Only valid declarations count: an RFC 9110 token, unique ignoring case, on a string/integer/boolean
    property. Invalid ones are skipped (the server still gets the argument in the body).
    """
    schema = tool.get("inputSchema") if type(tool) is dict or isinstance(tool, Mapping) else None
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(props, Mapping):
        return []
    headers: list[tuple[str, str]] = []
    seen: set[str] = set()
    for prop, prop_schema in props.items():
        if not isinstance(prop_schema, Mapping):
            continue
        name = prop_schema.get("x-mcp-header")
        if not isinstance(name, str) or not _HEADER_TOKEN.match(name) or name.lower() in seen:
            continue
        if prop_schema.get("type") not in ("string", "integer", "boolean"):
            continue
        seen.add(name.lower())
        encoded = encode_header_value(arguments.get(prop))
        if encoded is not None:
            headers.append((f"Mcp-Param-{name}", encoded))
    return headers


def build_headers(
    rules: EraRules | None,
    *,
    configured: Mapping[str, str],
    message: Mapping[str, Any] | None = None,
    session_id: str | None = None,
    extra: Iterable[tuple[str, str]] = (),
    accept: str = "application/json, text/event-stream",
) -> list[tuple[str, str]]:
    """Headers of one HTTP request: the configured ones (identical on every request), then the managed ones.

    ``rules`` is None for the legacy ``initialize`` (no version negotiated yet, so no version header).
    """
    headers = list(configured.items())
    headers.append(("Accept", accept))
    if message is not None:
        headers.append(("Content-Type", "application/json"))
    if rules is not None and rules.version_header:
        headers.append(("MCP-Protocol-Version", rules.version))
    if session_id is not None and (rules is None or rules.sessions):
        headers.append(("Mcp-Session-Id", session_id))
    if rules is not None and rules.method_headers and message is not None and "method" in message:
        method = message["method"]
        headers.append(("Mcp-Method", method))
        params = message.get("params") or {}
        name_key = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}.get(method)
        if name_key and isinstance(params, Mapping):
            encoded = encode_header_value(params.get(name_key))
            if encoded is not None:
                headers.append(("Mcp-Name", encoded))
        headers.extend(extra)
    return headers


# -- answers: era evidence, results, errors ------------------------------------------------------------


def classify_discover(status: int, message: Message | None, requested: str) -> tuple[str, Any]:
    """What a ``server/discover`` probe's answer says about the server's era (SPEC §5).

    Returns ``("modern", version)``, ``("retry", version)`` (``-32022`` naming another modern version we
    speak), ``("legacy", None)`` or ``("incompatible", supported)``. 401/403, redirects, timeouts and
    connection failures never reach this function: the transport raises them (they are no era evidence).
    """
    if message is not None and message.kind == "result" and 200 <= status < 300:
        result = message.result if isinstance(message.result, dict) else {}
        offered = result.get("supportedVersions")
        if isinstance(offered, list):
            mutual = [v for v in MODERN_VERSIONS if v in offered]
            if mutual:
                return "modern", (requested if requested in mutual else mutual[-1])
        return "legacy", None  # e.g. a dual-era server that lists no modern version, or any stub result
    if message is not None and message.kind == "error" and message.error is not None:
        code = message.error.get("code")
        data = message.error.get("data")
        supported = data.get("supported") if isinstance(data, dict) else None
        if code == -32022 and isinstance(supported, list) and all(isinstance(v, str) for v in supported):
            modern = [v for v in MODERN_VERSIONS if v in supported and v != requested]
            if modern:
                return "retry", modern[-1]
            if requested in supported:
                return "modern", requested
            if any(v in LEGACY_VERSIONS for v in supported):
                return "legacy", None
            return "incompatible", list(supported)
        if code == -32601 and status == 404:
            return "modern", requested
    return "legacy", None


def check_initialize_result(result: Any, offered: str) -> str:
    """The version a legacy server chose; ``ProtocolError`` when bkmcp does not speak it."""
    if not isinstance(result, dict):
        raise ProtocolError(f"initialize returned {_json_kind(result)}, not an InitializeResult object")
    version = result.get("protocolVersion")
    if not isinstance(version, str):
        raise ProtocolError("initialize result has no protocolVersion string")
    if version not in LEGACY_VERSIONS:
        raise ProtocolError(
            f"the server chose protocol version {version!r}; bkmcp offered {offered!r} and speaks "
            f"{', '.join(SUPPORTED_VERSIONS)}",
            hint="pin a version the server supports with \"protocolVersion\" in the config, or upgrade the server",
            details={"server_version": version, "client_versions": list(SUPPORTED_VERSIONS)},
        )
    return version


def rpc_error_exception(method: str, error: Mapping[str, Any]) -> RemoteError:
    """A JSON-RPC error answering ``method``, as the error bkmcp reports (rpc code/message/data kept)."""
    code = error.get("code")
    text = _clip(str(error.get("message", "")), 500)
    data = error.get("data")
    rpc = {"code": code, "message": text}
    if data is not None:
        rpc["data"] = data
    if code == -32042:  # 2025-11-25 URLElicitationRequired
        elicitations = data.get("elicitations") if isinstance(data, dict) else None
        urls = [e["url"] for e in (elicitations if isinstance(elicitations, list) else [])
                if isinstance(e, dict) and isinstance(e.get("url"), str)]
        return CapabilityUnsupportedError(
            f"{method}: the server requires URL elicitation, which bkmcp does not support ({text})",
            hint="open the URL(s) yourself if you trust them; bkmcp never answers elicitation interactively",
            details={"capability": "elicitation.url", "urls": urls, "rpc_error": rpc},
        )
    if code == -32021:  # 2026-07-28 MissingRequiredClientCapability
        required = data.get("requiredCapabilities") if isinstance(data, dict) else None
        return CapabilityUnsupportedError(
            f"{method}: the server requires client capabilities bkmcp does not have ({text})",
            details={"capability": "client_capabilities", "required": required, "rpc_error": rpc},
        )
    return ProtocolError(
        f"the server answered {method} with JSON-RPC error {code}: {text}",
        details={"rpc_error": rpc},
    )


def check_result(method: str, message: Message) -> dict[str, Any]:
    """The result of ``method`` if it is one bkmcp can report as complete; otherwise the error to raise.

    ``resultType`` absent/``complete`` is a result; ``input_required``, ``task`` (and legacy ``{"task": …}``)
    need capabilities bkmcp lacks (raw result kept in ``data``); anything else is a protocol error.
    """
    if message.kind == "error":
        raise rpc_error_exception(method, message.error or {})
    result = message.result
    if not isinstance(result, dict):
        raise ProtocolError(f"{method} returned {_json_kind(result)} instead of a result object",
                            data={"result": result})
    result_type = result.get("resultType", "complete")
    if result_type == "input_required":
        requests = result.get("inputRequests")
        wanted = sorted({str(r.get("method")) for r in requests.values() if isinstance(r, dict)}) \
            if isinstance(requests, dict) else []
        raise CapabilityUnsupportedError(
            f"{method}: the server needs input from the client ({', '.join(wanted) or 'requestState only'}), "
            "which bkmcp does not support",
            hint="bkmcp declares no elicitation/sampling/roots capability and never answers interactively",
            details={"result_type": "input_required", "input_requests": wanted},
            data={"result": result},
        )
    if result_type == "task" or (method == "tools/call" and isinstance(result.get("task"), dict)
                                 and "content" not in result):
        task = result.get("task") if result_type != "task" else result
        task_id = task.get("taskId") if isinstance(task, dict) else None
        raise CapabilityUnsupportedError(
            f"{method}: the server answered with a task{f' ({task_id})' if task_id else ''}; bkmcp does not "
            "support tasks and never polls them",
            hint="the work may continue on the server; do not re-run blindly",
            details={"result_type": "task", "task_id": task_id},
            data={"result": result},
        )
    if result_type != "complete":
        raise ProtocolError(f"{method} returned an unknown resultType {_clip(repr(result_type), 80)}",
                            data={"result": result})
    if method == "tools/call":
        if not isinstance(result.get("content"), list):
            raise ProtocolError("tools/call result has no content array (malformed CallToolResult)",
                                data={"result": result})
        if "isError" in result and not isinstance(result["isError"], bool):
            raise ProtocolError("tools/call result has a non-boolean isError", data={"result": result})
    elif method == "tools/list":
        tools = result.get("tools")
        if not isinstance(tools, list):
            raise ProtocolError("tools/list result has no tools array")
        for index, tool in enumerate(tools):
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                raise ProtocolError(f"tools/list entry {index} is not a tool object with a string name")
        cursor = result.get("nextCursor")
        if cursor is not None and not isinstance(cursor, str):
            raise ProtocolError("tools/list nextCursor is not a string")
    return result


def _clip(text: str, limit: int) -> str:
    text = _CONTROL.sub(" ", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_www_authenticate(value: str) -> dict[str, str]:
    """``Bearer resource_metadata="…", scope="…", error="…"`` -> its params (plus ``scheme``)."""
    out: dict[str, str] = {}
    value = value.strip()
    scheme = re.match(r"^([A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]*)(?:\s+|$)", value)
    if scheme and "=" not in scheme.group(1):
        out["scheme"] = scheme.group(1)
        value = value[scheme.end():]
    for match in re.finditer(r'([A-Za-z0-9_.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))', value):
        key = match.group(1).lower()
        raw = match.group(2) if match.group(2) is not None else match.group(3)
        out.setdefault(key, re.sub(r"\\(.)", r"\1", raw))
    return out


def strip_url_credentials(url: str) -> str:
    """A URL safe to print: no userinfo, no query, no fragment."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{host}:{parts.port}" if parts.port else host
    except ValueError:
        return "(unparsable location)"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


# ======================================================================================================
# 6. Transports
# ======================================================================================================
# A transport moves section-5 messages; it decides nothing about eras. Interface (stdio plugs in the same way):
#   ``exchange(message, *, rules, deadline) -> Iterable[Message]``  send one request, yield what arrives for it
#       (notifications, server requests, then the response, last); never resends.
#   ``send_message(message, *, rules, deadline)``  a notification or a response to a server request.
#   ``end_session(deadline)``, ``close()``; attributes ``session_id``, ``responses`` (answers received).
# Foreign exceptions are translated once, here, with ``raise … from exc`` (STYLE.md: the httpx model).


class HttpStatus(Exception):
    """A non-2xx HTTP answer that is not 3xx/401/403. Internal: flows turn it into era evidence, a lost
    session, or a ``ProtocolError`` via ``status_error`` — it never reaches ``main``."""

    def __init__(self, status: int, message: Message | None, text: str, with_session: bool) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.message = message
        self.text = text
        self.with_session = with_session

    @property
    def session_lost(self) -> bool:
        """404 on a request carrying a session id (spec), or server-everything's 400 "No valid session ID"."""
        if not self.with_session:
            return False
        if self.status == 404:
            return True
        error = self.message.error if self.message is not None and self.message.kind == "error" else None
        return self.status == 400 and bool(error) and "session" in str((error or {}).get("message", "")).lower()


def status_error(exc: HttpStatus, method: str) -> RemoteError:
    details: dict[str, Any] = {"http_status": exc.status}
    if exc.message is not None and exc.message.kind == "error" and exc.message.error is not None:
        inner = rpc_error_exception(method, exc.message.error)
        inner.details["http_status"] = exc.status
        if isinstance(inner, ProtocolError):
            inner.message = f"the server answered {method} with HTTP {exc.status} and JSON-RPC error " \
                            f"{exc.message.error.get('code')}: {_clip(str(exc.message.error.get('message')), 300)}"
        return inner
    snippet = f": {_clip(exc.text.strip(), 200)}" if exc.text.strip() else ""
    return ProtocolError(f"the server answered {method} with HTTP {exc.status}{snippet}", details=details)


def _mark(error: BkmcpError, *, sent: bool) -> BkmcpError:
    error.request_sent = sent  # type: ignore[attr-defined]
    return error


def request_was_sent(error: BaseException) -> bool:
    return bool(getattr(error, "request_sent", True))


_LONE_SURROGATE = _lazy_re("[\ud800-\udfff]")


def encode_body(message: Mapping[str, Any]) -> bytes:
    """UTF-8 JSON; a lone surrogate (``"\\ud800"`` in --body is valid JSON) is re-escaped, not a crash."""
    text = dump_json(message)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")


def _wire_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str | bytes]]:
    """httpx encodes str header values as ASCII; a configured non-ASCII value goes out as its UTF-8 bytes."""
    return [(name, value if value.isascii() else value.encode("utf-8")) for name, value in headers]


_ERROR_BODY_LIMIT = 64 * 1024
_RESUME_DEFAULT_MS = 1000
_RESUME_MAX_IDLE = 20


# httpcore imports every async back end it can find (trio, anyio, sniffio) when it loads, and httpx its optional
# extras (click, rich and pygments for its own CLI; brotli and zstandard decoders). bkmcp uses the sync client
# only and must behave the same on every host, so while httpx loads these names are hidden (unless something
# imported them already). That saves loading anyio (~25 ms) on every remote command, trio (~100 ms) on hosts that
# have it, and keeps the Accept-Encoding header from depending on what the host has installed.
_HTTPX_HIDDEN = ("trio", "anyio", "sniffio", "click", "rich", "pygments", "brotli", "brotlicffi", "zstandard", "h2",
                 "socksio")


def _import_httpx() -> Any:
    """The httpx module, loaded (the first time) without the optional modules of ``_HTTPX_HIDDEN``."""
    module = sys.modules.get("httpx")
    if module is not None:
        return module
    hidden = [name for name in _HTTPX_HIDDEN if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # `import name` now raises ImportError
    try:
        import httpcore  # noqa: F401  # httpx imports it on the first Client: load it here, with the rest hidden
        import httpx
    except ImportError as exc:  # nothing was sent: a local error that says what is missing, not "a bkmcp bug"
        raise InternalError(
            f"bkmcp cannot load httpx, which every remote command needs: {exc}",
            hint="from bkmcp.pyz: download or build it again (and check that XDG_CACHE_HOME or TMPDIR is writable);"
            " from source: pip install httpx",
        ) from exc
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    return httpx


class HttpTransport:
    """Streamable HTTP over one ``httpx.Client`` per operation (keep-alive, no redirects, TLS verified)."""

    kind = "http"

    def __init__(self, server: ResolvedServer, *, insecure: bool, log: Log) -> None:
        assert server.url is not None
        self.server = server
        self.url = server.url
        self.configured = dict(server.headers)
        self.insecure = insecure
        self.log = log
        self.session_id: str | None = None
        self.responses = 0
        self._client: Any = None

    # -- plumbing --------------------------------------------------------------------------------------

    def _http(self) -> Any:
        if self._client is None:
            httpx = _import_httpx()

            # trust_env=False: no proxies from the environment and, above all, no ~/.netrc credentials —
            # the server's configured headers are the only identity (SPEC §4). A plain http:// endpoint needs
            # no TLS context (redirects are never followed), which saves loading the CA bundle (~35 ms).
            verify = not self.insecure if self.url.lower().startswith("https:") else False
            self._client = httpx.Client(follow_redirects=False, verify=verify, trust_env=False,
                                        headers={"User-Agent": f"bkmcp/{__version__}"})
        return self._client

    @staticmethod
    def _timeout(deadline: Deadline, cap: float | None = None) -> Any:
        httpx = _import_httpx()

        left = deadline.remaining()
        return httpx.Timeout(min(left, cap) if cap else left)

    def _log_request(self, verb: str, headers: list[tuple[str, str]], message: Mapping[str, Any] | None) -> None:
        if not self.log.verbose:
            return
        rpc = ""
        if message is not None:
            rpc = f" [{message.get('method', 'response')}" + (f" id={message['id']}]" if "id" in message else "]")
        shown = ", ".join(f"{k}: {v}" for k, v in redact_headers(headers).items())
        self.log.debug(f"-> {verb} {redact_url(self.url)}{rpc} {{{shown}}}")

    def _log_response(self, response: Any, started: float) -> None:
        self.responses += 1
        if self.log.verbose:
            ctype = response.headers.get("content-type", "-")
            ms = (time.monotonic() - started) * 1000
            self.log.debug(f"<- HTTP {response.status_code} {ctype} ({ms:.0f} ms)")

    def _translate(self, exc: Exception, deadline: Deadline) -> BkmcpError:
        """httpx exception -> bkmcp error (the one boundary where foreign exceptions are converted)."""
        httpx = _import_httpx()

        target = strip_url_credentials(self.url)
        if isinstance(exc, (httpx.InvalidURL, UnicodeError)):  # IDNA / host name encoding, before any I/O
            return _mark(ConnectionFailedError(
                f"the host name in {target} is not valid: {_clip(str(exc), 200)}",
                hint="check the host name in the server's \"url\"",
            ), sent=False)
        if isinstance(exc, httpx.TimeoutException):
            sent = not isinstance(exc, (httpx.ConnectTimeout, httpx.PoolTimeout))
            return _mark(McpTimeoutError(
                f"no answer from {target} within --timeout {format_duration(deadline.seconds)}",
                hint="raise --timeout if the server is slow, or run with -v to see which step waits",
            ), sent=sent)
        chain: list[BaseException] = []
        cursor: BaseException | None = exc
        while cursor is not None and len(chain) < 10:
            chain.append(cursor)
            cursor = cursor.__cause__ or cursor.__context__
        import socket
        import ssl

        if isinstance(exc, httpx.ConnectError):
            if any(isinstance(e, ssl.SSLError) for e in chain) or "SSL" in str(exc) or "TLS" in str(exc):
                return _mark(ConnectionFailedError(
                    f"TLS handshake with {target} failed: {_clip(str(exc), 200)}",
                    hint="check the URL scheme and the server certificate; --insecure skips verification "
                    "(only for servers you trust)",
                ), sent=False)
            if any(isinstance(e, socket.gaierror) for e in chain) or "name resolution" in str(exc).lower() \
                    or "name or service not known" in str(exc).lower():
                return _mark(ConnectionFailedError(
                    f"cannot resolve the host of {target}: {_clip(str(exc), 200)}",
                    hint="check the host name in the server's \"url\"",
                ), sent=False)
            return _mark(ConnectionFailedError(
                f"cannot connect to {target}: {_clip(str(exc), 200) or 'connection failed'}",
                hint="is the server running and the URL right?",
            ), sent=False)
        if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError, httpx.CloseError)):
            return _mark(ConnectionFailedError(
                f"the connection to {target} broke before the answer was complete: "
                f"{_clip(str(exc), 200) or type(exc).__name__}",
            ), sent=True)
        return _mark(ConnectionFailedError(f"HTTP request to {target} failed: {type(exc).__name__}: "
                                           f"{_clip(str(exc), 200)}"), sent=True)

    def _check_status(self, response: Any, *, with_session: bool) -> None:
        status = response.status_code
        if 200 <= status < 300:
            return
        target = strip_url_credentials(self.url)
        where = f"server {self.server.name!r} in {self.server.config_file}"
        if 300 <= status < 400:
            location = response.headers.get("location")
            shown = strip_url_credentials(location) if location else "(no Location header)"
            raise _mark(ConnectionFailedError(
                f"{target} answered HTTP {status} redirecting to {shown}; bkmcp never follows redirects",
                hint=f"update \"url\" of {where} if the endpoint moved",
                details={"http_status": status, "location": shown},
            ), sent=True)
        text = self._read_error_body(response)
        message = _decode_error_message(text)
        if status == 401:
            params = parse_www_authenticate(response.headers.get("www-authenticate", ""))
            details: dict[str, Any] = {"http_status": 401}
            details.update({k: v for k, v in params.items()
                            if k in ("scheme", "resource_metadata", "scope", "error", "error_description")})
            raise _mark(AuthRequiredError(
                f"{target} requires authentication (HTTP 401)"
                + (f": {_clip(params['error_description'], 200)}" if params.get("error_description") else ""),
                hint=f"fix the headers (or the environment variables they use) of {where}; the credentials are "
                "missing, expired or not accepted",
                details=details,
            ), sent=False)
        if status == 403:
            params = parse_www_authenticate(response.headers.get("www-authenticate", ""))
            reason = params.get("error_description") or (
                str(message.error.get("message")) if message is not None and message.error else text.strip())
            details = {"http_status": 403}
            details.update({k: v for k, v in params.items() if k in ("scope", "error", "resource_metadata")})
            raise _mark(PermissionDeniedError(
                f"{target} refused the request (HTTP 403)" + (f": {_clip(reason, 300)}" if reason else ""),
                hint=f"the identity in {where} lacks permission for this server, tool or resource",
                details=details,
            ), sent=False)
        raise HttpStatus(status, message, text, with_session)

    @staticmethod
    def _read_error_body(response: Any) -> str:
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size >= _ERROR_BODY_LIMIT:
                break
        return b"".join(chunks)[:_ERROR_BODY_LIMIT].decode("utf-8", "replace")

    # -- the interface ---------------------------------------------------------------------------------

    def exchange(self, message: dict[str, Any], *, rules: EraRules | None, deadline: Deadline,
                 extra_headers: Iterable[tuple[str, str]] = ()) -> Iterable[Message]:
        """POST one request and yield every message that arrives for it; the matching response comes last."""
        httpx = _import_httpx()

        request_id = message["id"]
        is_initialize = message.get("method") == "initialize"
        headers = build_headers(
            rules, configured=self.configured, message=message, session_id=self.session_id, extra=extra_headers,
        )
        body = encode_body(message)
        decoder: SseDecoder | None = None
        try:
            timeout = self._timeout(deadline)
        except McpTimeoutError as exc:
            raise _mark(exc, sent=False) from None
        started = time.monotonic()
        self._log_request("POST", headers, message)
        try:
            with self._http().stream("POST", self.url, content=body, headers=_wire_headers(headers),
                                     timeout=timeout) as response:
                self._log_response(response, started)
                self._check_status(response, with_session=self.session_id is not None)
                if is_initialize:
                    issued = response.headers.get("mcp-session-id")
                    if issued:
                        self.session_id = issued
                ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if ctype == "text/event-stream":
                    decoder = SseDecoder()
                    for incoming in self._read_sse(response, decoder, deadline):
                        yield incoming
                        if incoming.kind in ("result", "error") and (same_id(incoming.id, request_id)
                                                                     or incoming.id is None):
                            return
                elif ctype == "application/json" or ctype.endswith("+json"):
                    chunks = []
                    for chunk in response.iter_bytes():  # the budget is checked while a slow body trickles in
                        chunks.append(chunk)
                        deadline.remaining()
                    raw = b"".join(chunks)
                    del chunks
                    for incoming in decode_messages(raw):
                        if incoming.kind in ("result", "error") and not (
                                same_id(incoming.id, request_id) or incoming.id is None):
                            raise ProtocolError(
                                f"the server answered request id {request_id} with a response for id "
                                f"{_clip(repr(incoming.id), 60)}")
                        yield incoming
                        if incoming.kind in ("result", "error"):
                            return
                    raise ProtocolError(f"the server's JSON answer to {message.get('method')} has no response "
                                        f"for request id {request_id}")
                elif response.status_code == 202 or not ctype:
                    raise ProtocolError(
                        f"the server answered request {message.get('method')} with HTTP {response.status_code} "
                        "and no JSON-RPC response")
                else:
                    raise ProtocolError(f"the server answered with unsupported content type {ctype!r} "
                                        "(expected application/json or text/event-stream)")
        except (httpx.HTTPError, httpx.InvalidURL, UnicodeError) as exc:
            raise self._translate(exc, deadline) from exc
        # The POST's event stream ended before the response (SPEC §5: 2025-11-25 resumption).
        if rules is not None and rules.sse_resumption and decoder is not None and decoder.last_event_id:
            yield from self._resume(decoder, request_id, rules, deadline)
            return
        raise _mark(ConnectionFailedError(
            f"the server closed the event stream before answering {message.get('method')} (id {request_id})",
        ), sent=True)

    def _read_sse(self, response: Any, decoder: SseDecoder, deadline: Deadline) -> Iterable[Message]:
        for chunk in response.iter_bytes():
            events = decoder.feed(chunk)
            del chunk
            while events:
                event = events.pop(0)
                if event.event != "message":
                    self.log.debug(f"ignoring SSE event of type {_clip(event.event, 40)!r}")
                    continue
                messages = decode_messages(event.data)
                del event  # the event text goes before its parsed value travels on (50 MB results)
                yield from messages
            deadline.remaining()
        for event in decoder.close():  # pragma: no cover - close() never dispatches (unterminated events drop)
            if event.event == "message":
                yield from decode_messages(event.data)

    def _resume(self, decoder: SseDecoder, request_id: Any, rules: EraRules, deadline: Deadline
                ) -> Iterable[Message]:
        """GET + Last-Event-ID after the server's ``retry`` delay, until the response or the budget ends."""
        httpx = _import_httpx()

        idle = 0
        while True:
            delay = (decoder.retry_ms if decoder.retry_ms is not None else _RESUME_DEFAULT_MS) / 1000
            if delay >= deadline.remaining():
                raise _mark(McpTimeoutError(
                    f"the server closed the event stream and its retry delay ({delay:g}s) exceeds the time left",
                    hint="raise --timeout",
                ), sent=True)
            time.sleep(delay)
            last_id = decoder.last_event_id
            assert last_id is not None
            headers = build_headers(rules, configured=self.configured, session_id=self.session_id,
                                    accept="text/event-stream", extra=())
            headers.append(("Last-Event-ID", last_id))
            started = time.monotonic()
            self._log_request("GET", headers, None)
            try:
                with self._http().stream("GET", self.url, headers=_wire_headers(headers),
                                         timeout=self._timeout(deadline)) as response:
                    self._log_response(response, started)
                    try:
                        self._check_status(response, with_session=self.session_id is not None)
                    except HttpStatus as exc:
                        raise _mark(ConnectionFailedError(
                            f"the server closed the event stream early and refused to resume it "
                            f"(GET with Last-Event-ID: HTTP {exc.status})",
                        ), sent=True) from None
                    ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()
                    if ctype != "text/event-stream":
                        raise _mark(ConnectionFailedError(
                            f"resuming the event stream returned {ctype or 'no content type'}, not "
                            "text/event-stream"), sent=True)
                    for incoming in self._read_sse(response, decoder, deadline):
                        yield incoming
                        if incoming.kind in ("result", "error") and same_id(incoming.id, request_id):
                            return
            except (httpx.HTTPError, httpx.InvalidURL, UnicodeError) as exc:
                raise self._translate(exc, deadline) from exc
            idle = 0 if decoder.last_event_id != last_id else idle + 1
            if idle >= _RESUME_MAX_IDLE:
                raise _mark(ConnectionFailedError(
                    "the server keeps closing the resumed event stream without sending anything"), sent=True)

    def send_message(self, message: dict[str, Any], *, rules: EraRules | None, deadline: Deadline,
                     strict: bool = True) -> None:
        """POST a notification or a response; expects 202 (any 2xx accepted)."""
        httpx = _import_httpx()

        headers = build_headers(rules, configured=self.configured, message=message, session_id=self.session_id)
        started = time.monotonic()
        self._log_request("POST", headers, message)
        try:
            with self._http().stream("POST", self.url, content=encode_body(message),
                                     headers=_wire_headers(headers), timeout=self._timeout(deadline)) as response:
                self._log_response(response, started)
                if strict:
                    self._check_status(response, with_session=self.session_id is not None)
        except (httpx.HTTPError, httpx.InvalidURL, UnicodeError) as exc:
            if strict:
                raise self._translate(exc, deadline) from exc
            self.log.debug(f"sending {message.get('method', 'a response')} failed: {type(exc).__name__}")

    def end_session(self, deadline: Deadline, rules: EraRules | None = None) -> None:
        """DELETE the legacy session (405 is fine); best effort, never raises."""
        if self.session_id is None or self._client is None:
            return
        httpx = _import_httpx()

        headers = build_headers(rules, configured=self.configured, session_id=self.session_id)
        started = time.monotonic()
        self._log_request("DELETE", headers, None)
        try:
            response = self._client.request("DELETE", self.url, headers=_wire_headers(headers),
                                            timeout=self._timeout(deadline, cap=2.0))
            self._log_response(response, started)
        except (httpx.HTTPError, httpx.InvalidURL, UnicodeError, BkmcpError) as exc:
            self.log.debug(f"ending the session failed: {type(exc).__name__}")
        self.session_id = None

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            finally:
                self._client = None


def _decode_error_message(text: str) -> Message | None:
    """The JSON-RPC message in an error body, if there is one."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    try:
        messages = decode_messages(stripped)
    except ProtocolError:
        return None
    return messages[0] if len(messages) == 1 else None


_STDIO_EXIT_GRACE = 2.0  # after closing stdin: time to exit on its own (0.5 s once the budget is spent)
_STDIO_TERM_GRACE = 2.0  # after SIGTERM to the process group, before SIGKILL
_STDIO_POLL = 0.1  # how often a wait for output also checks whether the child is still alive
_STDIO_STDERR_TAIL = 20  # stderr lines kept (without -v) for error details
_STDIO_LINE_CLIP = 500


class StdioTransport:
    """A stdio server (SPEC §9, protocol-notes.md §1.4): one child process, newline-delimited JSON-RPC.

    The child is spawned on the first message, without a shell, in its own session (so the whole process tree
    can be signalled), with the minimal inherited environment plus the entry's ``env``. A reader thread turns
    stdout into lines and another keeps stderr (streamed with ``-v``, else its last lines for error details);
    every wait is bounded by the ``Deadline``. ``restart()`` replaces a child that exited during the era probe.
    """

    kind = "stdio"

    def __init__(self, server: ResolvedServer, *, insecure: bool, log: Log) -> None:
        assert server.command is not None
        self.server = server
        self.log = log
        self.session_id: str | None = None  # stdio has no sessions; kept for the transport interface
        self.responses = 0
        self.spawns = 0
        self.pid: int | None = None
        self._proc: Any = None
        self._lines: Any = None  # queue.Queue of bytes lines; None marks the end of stdout
        self._readers: list[Any] = []
        self._writer: Any = None
        self._eof = False
        self._deadline: Deadline | None = None  # the last one used: once spent, the shutdown grace is shorter
        self._sent_at = 0.0
        import collections

        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=_STDIO_STDERR_TAIL)

    # -- process ---------------------------------------------------------------------------------------

    def _where(self) -> str:
        return f"server {self.server.name!r} in {self.server.config_file}"

    def _environment(self) -> dict[str, str]:
        env = dict(self.server.inherited_env)
        env.update(self.server.env)
        return env

    def _executable(self, env: Mapping[str, str]) -> str:
        """``command`` as a path to run: looked up on the child's PATH unless it names a path itself."""
        import shutil

        command = self.server.command or ""
        if os.sep in command or (os.altsep and os.altsep in command):
            path = os.path.join(self.server.cwd or os.getcwd(), os.path.expanduser(command))
            found = path if os.path.isfile(path) and os.access(path, os.X_OK) else None
            problem = "does not exist" if not os.path.exists(path) else "is not an executable file"
        else:
            found = shutil.which(command, path=env.get("PATH", os.defpath))
            problem = "was not found on PATH"
        if found is None:
            raise _mark(ConnectionFailedError(
                f"cannot start the stdio server: command {command!r} {problem}",
                hint=f"install it, or set \"command\" of {self._where()} to an absolute path of an executable "
                "(PATH comes from bkmcp's environment or the entry's \"env\")",
                details={"command": command},
            ), sent=False)
        return found

    def _start(self) -> None:
        import queue
        import subprocess
        import threading

        if self._proc is not None:
            return
        env = self._environment()
        executable = self._executable(env)
        cwd = self.server.cwd
        if cwd is not None and not os.path.isdir(cwd):
            raise _mark(ConnectionFailedError(
                f"cannot start the stdio server: working directory {cwd!r} does not exist",
                hint=f"fix \"cwd\" of {self._where()}",
            ), sent=False)
        argv = [executable, *self.server.args]
        if self.log.verbose:
            shown = " ".join(repr(a) if (not a or any(c.isspace() for c in a)) else a for a in argv)
            self.log.debug(f"spawning stdio server: {shown} (cwd: {cwd or os.getcwd()}; "
                           f"env: {', '.join(sorted(env)) or '(empty)'})")
        options: dict[str, Any] = {}
        if os.name == "posix":
            options["start_new_session"] = True  # own process group: the whole tree can be signalled
        else:  # pragma: no cover - Windows
            options["creationflags"] = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)
        try:
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
                close_fds=True, **options,
            )
        except OSError as exc:
            raise _mark(ConnectionFailedError(
                f"cannot start the stdio server {self.server.command!r}: {exc.strerror or exc}",
                hint=f"check \"command\" and \"args\" of {self._where()} (an interpreter named by a #! line "
                "must exist too)",
            ), sent=False) from exc
        self.spawns += 1
        self.pid = self._proc.pid
        self._stderr_tail.clear()  # error details describe the current child
        self._eof = False
        self._lines = queue.Queue()
        self._readers = [
            threading.Thread(target=self._read_stdout, args=(self._proc.stdout, self._lines),
                             name="bkmcp-stdio-out", daemon=True),
            threading.Thread(target=self._read_stderr, args=(self._proc.stderr,), name="bkmcp-stdio-err",
                             daemon=True),
        ]
        for thread in self._readers:
            thread.start()
        self.log.debug(f"stdio server started (pid {self._proc.pid})")

    @staticmethod
    def _read_stdout(stream: Any, lines: Any) -> None:
        try:
            for line in iter(stream.readline, b""):
                lines.put(line)
        except (OSError, ValueError):
            pass
        lines.put(None)

    def _read_stderr(self, stream: Any) -> None:
        try:
            for raw in iter(lambda: stream.readline(8192), b""):
                line = _clip(raw.decode("utf-8", "replace").rstrip("\r\n"), _STDIO_LINE_CLIP)
                if self.log.verbose:
                    self.log.debug(f"[server stderr] {line}")
                self._stderr_tail.append(self.log.redactor.scrub(line))
        except (OSError, ValueError):
            pass

    def stderr_tail(self) -> list[str]:
        return list(self._stderr_tail)

    @property
    def alive(self) -> bool:
        """The child is running and its stdout is open (False before the first spawn)."""
        return self._proc is not None and not self._eof and self._proc.poll() is None

    def restart_if_exited(self) -> bool:
        """Before the legacy fallback (SPEC §5): a child that exited during the probe is reaped and the next
        message spawns a fresh one. True when it was restarted."""
        if self._proc is None or self.alive:
            return False
        self.close()
        self.log.debug("the stdio server exited during the era probe; starting it again for initialize")
        return True

    def _failure(self, error: RemoteError, *, sent: bool) -> BkmcpError:
        """``error`` with the server's recent stderr attached (redacted), marked sent or not."""
        tail = self.stderr_tail()
        if tail:
            error.details.setdefault("server_stderr", tail)
        return _mark(error, sent=sent)

    def _exit_status(self, wait: float) -> int | None:
        import subprocess

        try:
            return int(self._proc.wait(timeout=max(wait, 0)))
        except subprocess.TimeoutExpired:
            return None

    def _exited_error(self, method: str, request_id: Any, *, sent: bool) -> BkmcpError:
        status = self._exit_status(0.5)
        if status is not None and len(self._readers) > 1:
            self._readers[1].join(0.5)  # its last stderr lines explain the exit: let the reader collect them
        if status is None:
            what = "closed its stdout"
        elif status < 0:
            import signal

            try:
                name = signal.Signals(-status).name
            except ValueError:
                name = f"signal {-status}"
            what = f"was killed by {name}"
        else:
            what = f"exited with status {status}"
        answer = f" before answering {method}" + (f" (id {request_id})" if request_id is not None else "")
        details: dict[str, Any] = {"exit_status": status}
        return self._failure(ConnectionFailedError(
            f"the stdio server {what}{answer}",
            hint=f"run with -v to see its stderr; check \"command\", \"args\" and \"env\" of {self._where()}",
            details=details,
        ), sent=sent)

    # -- wire ------------------------------------------------------------------------------------------

    def _write(self, message: Mapping[str, Any], deadline: Deadline) -> None:
        """One line on the child's stdin, bounded by the deadline (a child that stops reading cannot hang us)."""
        import threading

        text = dump_json(message)
        if "\n" in text or "\r" in text:  # pragma: no cover - dump_json escapes control characters
            raise InternalError("a JSON-RPC message would contain a raw line break")
        data = (text + "\n").encode("utf-8")
        fd = self._proc.stdin.fileno()
        failure: list[BaseException] = []

        def write() -> None:
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(fd, view):]
            except OSError as exc:
                failure.append(exc)

        self._writer = threading.Thread(target=write, name="bkmcp-stdio-in", daemon=True)
        self._writer.start()
        while self._writer.is_alive():
            try:
                left = deadline.remaining()
            except McpTimeoutError as exc:
                raise self._failure(exc, sent=True) from None  # partly written: treat as sent (never resend)
            self._writer.join(min(left, _STDIO_POLL))
        if failure:
            method = str(message.get("method", "a response"))
            raise self._exited_error(method, message.get("id"), sent=False) from failure[0]

    def _log_out(self, message: Mapping[str, Any]) -> None:
        if self.log.verbose:
            rpc = f"{message.get('method', 'response')}" + (f" id={message['id']}" if "id" in message else "")
            self.log.debug(f"-> stdio [{rpc}]")

    def _next_line(self, deadline: Deadline) -> bytes | None:
        """The next stdout line; None when stdout ended or the child exited (its last lines are drained first)."""
        import queue

        exited_at: float | None = None
        while True:
            left = deadline.remaining()
            try:
                line = self._lines.get(timeout=min(left, _STDIO_POLL))
            except queue.Empty:
                if self._proc.poll() is None:
                    continue
                # The child is gone; a grandchild may still hold stdout open, so give the reader a moment only.
                exited_at = exited_at or time.monotonic()
                if time.monotonic() - exited_at < 0.5:
                    continue
                return None
            if line is None:
                self._eof = True
                return None
            return line

    def _decode_line(self, line: bytes) -> list[Message]:
        text = line.decode("utf-8", "replace").strip()
        try:
            return decode_messages(line)
        except ProtocolError as exc:
            sample = _clip(self.log.redactor.scrub(text), 200)
            raise self._failure(ProtocolError(
                f"the stdio server wrote a line to stdout that is not a JSON-RPC message ({exc.message}): {sample!r}",
                hint="a stdio server must write only JSON-RPC messages to stdout (logs belong on stderr)",
            ), sent=True) from None

    def _receive(self, deadline: Deadline, method: str, request_id: Any) -> Iterable[Message]:
        """Messages from stdout, as they arrive, until the child ends (then ``ConnectionFailedError``)."""
        while True:
            try:
                line = self._next_line(deadline)
            except McpTimeoutError:
                raise self._failure(McpTimeoutError(
                    f"no answer to {method} from the stdio server within --timeout "
                    f"{format_duration(deadline.seconds)}",
                    hint="raise --timeout if the server is slow, or run with -v to see its stderr",
                ), sent=True) from None
            if line is None:
                raise self._exited_error(method, request_id, sent=True)
            if not line.strip():
                continue
            for incoming in self._decode_line(line):
                self.responses += 1
                if self.log.verbose:
                    label = incoming.method if incoming.kind in ("request", "notification") else incoming.kind
                    rpc = f"{label}" + (f" id={incoming.id}" if incoming.id is not None else "")
                    ms = (time.monotonic() - self._sent_at) * 1000
                    self.log.debug(f"<- stdio [{rpc}] ({ms:.0f} ms)")
                yield incoming

    # -- the interface ---------------------------------------------------------------------------------

    def exchange(self, message: dict[str, Any], *, rules: EraRules | None, deadline: Deadline,
                 extra_headers: Iterable[tuple[str, str]] = ()) -> Iterable[Message]:
        """Write one request and yield what the server writes until its response (last). Headers (``Mcp-Param-*``)
        do not exist on stdio; everything the server needs is in the message and its ``_meta``."""
        method = str(message.get("method"))
        request_id = message["id"]
        try:
            deadline.remaining()
        except McpTimeoutError as exc:
            raise _mark(exc, sent=False) from None
        self._start()
        if not self.alive:
            raise self._exited_error(method, request_id, sent=False)
        self._log_out(message)
        self._sent_at = time.monotonic()
        self._deadline = deadline
        self._write(message, deadline)
        for incoming in self._receive(deadline, method, request_id):
            yield incoming
            if incoming.kind in ("result", "error") and (same_id(incoming.id, request_id) or incoming.id is None):
                return

    def send_message(self, message: dict[str, Any], *, rules: EraRules | None, deadline: Deadline,
                     strict: bool = True) -> None:
        """A notification or a response to a server request: one line, no answer expected."""
        try:
            self._start()
            if not self.alive:
                raise self._exited_error(str(message.get("method", "a response")), None, sent=False)
            self._log_out(message)
            self._deadline = deadline
            self._write(message, deadline)
        except BkmcpError as exc:
            if strict:
                raise
            self.log.debug(f"sending {message.get('method', 'a response')} failed: {exc.message}")

    def end_session(self, deadline: Deadline, rules: EraRules | None = None) -> None:
        """Nothing to end: a stdio server's lifetime is its process (``close``)."""

    def close(self) -> None:
        """Shutdown (SPEC §9): close stdin, wait; SIGTERM the process group, wait; SIGKILL; always reap."""
        proc = self._proc
        if proc is None:
            return
        self._proc = None
        import signal
        import subprocess

        writing = self._writer is not None and self._writer.is_alive()
        if not writing:  # a write blocked on a full pipe keeps stdin open anyway: go straight to signals
            try:
                proc.stdin.close()
            except OSError:
                pass
        spent = self._deadline is not None and self._deadline.end <= time.monotonic()
        grace = 0.5 if spent else _STDIO_EXIT_GRACE
        try:
            status: int | None = proc.wait(timeout=0 if writing else grace)
        except subprocess.TimeoutExpired:
            status = None
        if status is None:
            self.log.debug(f"the stdio server did not exit within {grace:g}s of closing its stdin; sending SIGTERM")
        # Signal the group even after a clean exit of the leader: grandchildren must not outlive the operation.
        if self._signal_group(proc, signal.SIGTERM) and not self._wait_group(proc, _STDIO_TERM_GRACE):
            self.log.debug("the stdio server ignored SIGTERM; sending SIGKILL")
            self._signal_group(proc, getattr(signal, "SIGKILL", signal.SIGTERM))
            self._wait_group(proc, _STDIO_TERM_GRACE)
        try:
            status = proc.wait(timeout=_STDIO_TERM_GRACE)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
            status = None
        self.log.debug(f"stdio server stopped (pid {proc.pid}, status {status})")
        if self._writer is not None:
            self._writer.join(0.5)
        for thread in self._readers:
            thread.join(0.5)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            # A reader still blocked (a detached grandchild holds the pipe) keeps its stream: closing it would block.
            if stream is not None and not any(t.is_alive() for t in self._readers):
                try:
                    stream.close()
                except OSError:
                    pass

    @staticmethod
    def _signal_group(proc: Any, signum: int) -> bool:
        """Send ``signum`` to the child's process group; False when nothing is left to signal."""
        killpg = getattr(os, "killpg", None)
        try:
            if killpg is not None:
                killpg(proc.pid, signum)
            elif proc.poll() is None:  # pragma: no cover - Windows: no process groups to signal
                proc.terminate()
            else:  # pragma: no cover
                return False
        except (ProcessLookupError, PermissionError):
            return False
        return True

    @staticmethod
    def _group_running(pgid: int) -> bool:
        """Whether a process of group ``pgid`` still runs. Zombies do not count: an orphaned grandchild that
        died waits for init to reap it, which some container inits do only every few seconds."""
        killpg = getattr(os, "killpg", None)
        if killpg is None:  # pragma: no cover - Windows
            return False
        try:
            killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        if not os.path.isdir("/proc/self"):  # pragma: no cover - no procfs: count the group as running
            return True
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] not in (b"Z", b"X"):
                return True
        return False

    def _wait_group(self, proc: Any, seconds: float) -> bool:
        """Wait until the leader is reaped and no process of its group runs; True when all are gone."""
        end = time.monotonic() + seconds
        while True:
            if proc.poll() is not None and not self._group_running(proc.pid):
                return True
            if time.monotonic() >= end:
                return False
            time.sleep(0.05)


def open_transport(server: ResolvedServer, *, insecure: bool, log: Log) -> Any:
    """The transport for ``server.type`` (a registry: the stdio transport plugs in as ``TRANSPORTS["stdio"]``)."""
    factory = TRANSPORTS.get(server.type)
    if factory is None:
        raise ConnectionFailedError(
            f"{server.type} transport is not implemented in this build of bkmcp (server {server.name!r})",
            hint="use an http server entry, or a build of bkmcp with the stdio transport",
        )
    return factory(server, insecure=insecure, log=log)


TRANSPORTS: dict[str, Callable[..., Any]] = {"http": HttpTransport, "stdio": StdioTransport}


# ======================================================================================================
# 7. Client flows
# ======================================================================================================

_CANCEL_BUDGET = 1.0
_KEPT_NOTIFICATIONS = 1000  # a chatty server cannot grow memory without bound
_STDIO_PROBE_WINDOW = 2.0  # stdio: no answer to server/discover within this (inside the budget) means legacy
_DECLINED_CAPABILITIES = {"sampling/createMessage": "sampling", "elicitation/create": "elicitation"}


class McpClient:
    """One client lifetime against one server: negotiate, discover, call once, close.

    Contract used by the CLI (section 11):
      ``with McpClient(server, deadline=…, insecure=…, log=…) as client:``
      ``client.connect()``            era negotiation (SPEC §5); sets era, protocol_version, server_info,
                                      capabilities, instructions. ``connect(server_info=True)`` makes a pinned
                                      modern client ask ``server/discover`` too (``--check`` reports it).
      ``client.list_tools()``         the complete catalogue (pagination guards) as a list of tool dicts
      ``client.call_tool(name, args)``  sends tools/call exactly once; returns the raw result dict
      leaving the block closes the session (DELETE for legacy HTTP sessions) and the transport.
    Remote failures raise ``RemoteError`` subclasses whose ``data`` keeps what was completed.
    Extra state for reports: ``pages`` (tools/list pages read), ``notifications`` (kept for -v),
    ``server_requests`` (server -> client requests seen and declined).
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
        self.rules: EraRules | None = None
        self.pages = 0
        self.tools: list[dict[str, Any]] | None = None
        self.notifications: list[dict[str, Any]] = []
        self.server_requests: list[str] = []
        self._transport: Any = None
        self._next_id = 0
        self._reinitialized = False

    def __enter__(self) -> McpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def transport(self) -> Any:
        if self._transport is None:
            self._transport = open_transport(self.server, insecure=self.insecure, log=self.log)
        return self._transport

    @property
    def responses(self) -> int:
        """HTTP answers (or stdio messages) received so far: evidence that the connection stage passed."""
        return int(getattr(self._transport, "responses", 0)) if self._transport is not None else 0

    def close(self) -> None:
        if self._transport is None:
            return
        try:
            if self.rules is not None and self.rules.sessions and getattr(self._transport, "session_id", None):
                try:
                    left = self.deadline.end - time.monotonic()
                    budget = Deadline(max(min(left, 2.0), 0.2))
                    self._transport.end_session(budget, rules=self.rules)
                except Exception as exc:  # cleanup never replaces the operation's own outcome
                    self.log.debug(f"session cleanup failed: {type(exc).__name__}")
        finally:
            self._transport.close()

    # -- negotiation (SPEC §5) -------------------------------------------------------------------------

    def connect(self, *, server_info: bool = False) -> None:
        pinned = self.server.protocol_version
        if pinned is not None:
            rules = era_rules(pinned)
            self.log.debug(f"protocol version pinned to {pinned} ({rules.era}); no era probe")
            if rules.era == "modern":
                self._use(rules)
                if server_info:
                    self._discover(rules, probing=False)
            else:
                self._initialize(pinned)
            return
        self._probe()

    def _probe(self) -> None:
        requested = LATEST_MODERN_VERSION
        for _attempt in range(2):
            verdict, value = self._discover(era_rules(requested), probing=True)
            if verdict == "modern":
                return
            if verdict == "retry" and value != requested:
                self.log.debug(f"era probe: server supports {value}; retrying server/discover once with it")
                requested = value
                continue
            if verdict == "incompatible":
                raise ProtocolError(
                    f"the server supports protocol versions {', '.join(map(str, value))}; bkmcp speaks "
                    f"{', '.join(SUPPORTED_VERSIONS)}",
                    details={"server_versions": value, "client_versions": list(SUPPORTED_VERSIONS)},
                )
            break
        self.log.debug(f"era probe: no modern answer; falling back to legacy initialize ({LATEST_LEGACY_VERSION})")
        # stdio (protocol-notes.md §3.4): a child that exited on the probe is restarted (also when it exits only
        # once initialize was queued behind the probe: a slow starter that stops on any pre-initialize request);
        # a server that answered discover only after the probe window locked the modern era refuses initialize
        # with -32022. Over HTTP the same -32022 comes from a modern-only server whose discover answer was not
        # recognisable: modern too.
        stdio = self.server.type == "stdio"
        restarted = self.transport.restart_if_exited() if stdio else False
        try:
            try:
                self._initialize(LATEST_LEGACY_VERSION)
            except ConnectionFailedError:
                if not stdio or restarted or not self.transport.restart_if_exited():
                    raise
                self._initialize(LATEST_LEGACY_VERSION)
        except ProtocolError as exc:
            rpc = exc.details.get("rpc_error") or {}
            data = rpc.get("data")
            supported = data.get("supported") if isinstance(data, dict) else None
            modern = [v for v in MODERN_VERSIONS if isinstance(supported, list) and v in supported]
            if rpc.get("code") != -32022 or not modern:
                raise
            self.log.debug(f"initialize refused with -32022: the server serves {modern[-1]}; using the modern era")
            self._discover(era_rules(modern[-1]), probing=False)

    def _discover(self, rules: EraRules, *, probing: bool) -> tuple[str, Any]:
        """``server/discover`` with the modern headers and ``_meta``; when probing, its answer is era evidence."""
        message = build_request(self._new_id(), "server/discover", None, rules)
        if probing:
            self.log.debug(f"era probe: server/discover at {rules.version}")
        stdio_probe = probing and self.server.type == "stdio"
        status = 200
        answer: Message | None
        try:
            window = Deadline(min(_STDIO_PROBE_WINDOW, self.deadline.remaining())) if stdio_probe else None
            answer = self._exchange(message, rules, "server/discover", deadline=window)
            if not probing and answer.kind == "error":
                raise rpc_error_exception("server/discover", answer.error or {})
        except HttpStatus as exc:
            status, answer = exc.status, exc.message
            if not probing and not (exc.status == 404 and answer is not None and answer.kind == "error"
                                    and (answer.error or {}).get("code") == -32601):
                raise status_error(exc, "server/discover") from None
        except ProtocolError:
            if not probing or stdio_probe:  # stdio: stdout that is not JSON-RPC is an error in any era (SPEC §9)
                raise
            answer = None  # an unparsable answer from a non-MCP or legacy endpoint: not modern evidence
        except (McpTimeoutError, ConnectionFailedError) as exc:
            # stdio: no answer within the probe window, or the child exited (the Rust SDK stops on any request
            # before initialize) -> legacy (SPEC §5). The operation's own budget still rules.
            if not stdio_probe:
                raise
            self.deadline.remaining()
            self.log.debug("era probe: " + ("no answer within the probe window" if isinstance(exc, McpTimeoutError)
                                            else "the server exited"))
            answer = None
        verdict, value = classify_discover(status, answer, rules.version)
        if probing:
            self.log.debug(f"era probe verdict: {verdict}" + (f" {value}" if value else ""))
        if verdict == "modern" or not probing:
            self._use(era_rules(value or rules.version))
            if answer is not None and answer.kind == "result" and isinstance(answer.result, dict):
                result = answer.result
                meta = result.get("_meta")
                info = meta.get("io.modelcontextprotocol/serverInfo") if isinstance(meta, dict) else None
                self.server_info = info if isinstance(info, dict) else {}
                caps = result.get("capabilities")
                self.capabilities = caps if isinstance(caps, dict) else {}
                instructions = result.get("instructions")
                self.instructions = instructions if isinstance(instructions, str) else None
        return verdict, value

    def _initialize(self, offer: str) -> None:
        self.rules = None
        message = build_request(self._new_id(), "initialize", build_initialize_params(offer), era_rules(offer))
        try:
            answer = self._exchange(message, None, "initialize")
        except HttpStatus as exc:
            raise status_error(exc, "initialize") from None
        if answer.kind == "error":
            raise rpc_error_exception("initialize", answer.error or {})
        version = check_initialize_result(answer.result, offer)
        result = answer.result
        if version != offer:
            self.log.debug(f"the server chose {version} (offered {offer})")
        rules = era_rules(version)
        self._use(rules)
        info = result.get("serverInfo")
        self.server_info = info if isinstance(info, dict) else {}
        caps = result.get("capabilities")
        self.capabilities = caps if isinstance(caps, dict) else {}
        instructions = result.get("instructions")
        self.instructions = instructions if isinstance(instructions, str) else None
        try:
            self.transport.send_message(build_notification("notifications/initialized", None, rules),
                                        rules=rules, deadline=self.deadline)
        except HttpStatus as exc:
            raise status_error(exc, "notifications/initialized") from None

    def _use(self, rules: EraRules) -> None:
        self.rules = rules
        self.era = rules.era
        self.protocol_version = rules.version
        self.log.debug(f"protocol: {rules.version} ({rules.era} era)")

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    # -- one request -----------------------------------------------------------------------------------

    def _exchange(self, message: dict[str, Any], rules: EraRules | None, method: str,
                  extra_headers: Iterable[tuple[str, str]] = (), deadline: Deadline | None = None) -> Message:
        """Send one request and return its response; handle what arrives before it. Raises ``HttpStatus``.
        ``deadline`` narrows the operation's budget for this request (the stdio probe window)."""
        stream = self.transport.exchange(message, rules=rules, deadline=deadline or self.deadline,
                                         extra_headers=extra_headers)
        try:
            for incoming in stream:
                if incoming.kind in ("result", "error"):
                    if incoming.id is None or same_id(incoming.id, message["id"]):
                        return incoming
                    self.log.debug(f"ignoring a response for another request id ({_clip(repr(incoming.id), 40)})")
                elif incoming.kind == "notification":
                    self._on_notification(incoming)
                else:
                    self._on_server_request(incoming, rules)
        finally:
            # Close the response stream now, also when Ctrl-C lands between two messages (modern cancellation
            # is the stream closing), instead of whenever the traceback releases the generator.
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        raise ConnectionFailedError(f"no response to {method}")  # pragma: no cover - transports raise first

    def _on_notification(self, note: Message) -> None:
        if len(self.notifications) < _KEPT_NOTIFICATIONS:
            self.notifications.append({"method": note.method, "params": note.params})
        params = note.params if isinstance(note.params, dict) else {}
        if note.method == "notifications/progress":
            total = params.get("total")
            text = f"progress {params.get('progress')}" + (f"/{total}" if total is not None else "")
            if isinstance(params.get("message"), str):
                text += f": {_clip(params['message'], 200)}"
            self.log.progress(text)
        elif note.method == "notifications/message":
            self.log.debug(f"server log [{params.get('level')}]: {_clip(dump_json(params.get('data')), 500)}")
        else:
            self.log.debug(f"notification {note.method}")

    def _on_server_request(self, request: Message, rules: EraRules | None) -> None:
        """Legacy server -> client request: ``ping`` gets ``{}``, anything else ``-32601`` (and is reported)."""
        if request.method == "ping":
            reply = build_response(request.id, result={})
        else:
            self.server_requests.append(str(request.method))
            self.log.warn(f"the server sent a {request.method!r} request; bkmcp declares no client capabilities "
                          "and declined it (-32601)")
            reply = build_response(request.id, error={"code": -32601, "message": "Method not found"})
        try:
            self.transport.send_message(reply, rules=rules, deadline=self.deadline, strict=False)
        except BkmcpError as exc:
            self.log.debug(f"answering the server request failed: {exc.message}")

    def _request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """A non-call request after negotiation; a lost legacy session is re-initialized once (SPEC §5)."""
        assert self.rules is not None
        for attempt in range(2):
            rules = self.rules
            message = build_request(self._new_id(), method, params, rules)
            try:
                answer = self._exchange(message, rules, method)
            except HttpStatus as exc:
                if exc.session_lost and attempt == 0 and rules.handshake and not self._reinitialized:
                    self._reinitialized = True  # once per operation: a server that keeps losing it is an error
                    self.log.debug(f"the server lost the session (HTTP {exc.status}); re-initializing once")
                    self._transport.session_id = None
                    self._initialize(rules.version)
                    continue
                raise status_error(exc, method) from None
            return check_result(method, answer)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- discovery -------------------------------------------------------------------------------------

    def list_tools(self) -> list[dict[str, Any]]:
        """Every page of ``tools/list`` with the SPEC §5 guards; the catalogue exactly as received."""
        tools: list[dict[str, Any]] = []
        names: dict[str, int] = {}
        cursors: list[str] = []
        cursor: str | None = None
        self.pages = 0

        def incomplete(reason: str, cause: BkmcpError | None = None) -> DiscoveryIncompleteError:
            details: dict[str, Any] = {"pages": self.pages, "tools_seen": len(tools)}
            if cause is not None:
                details["cause"] = {"code": cause.code, "message": cause.message, **cause.details}
            return DiscoveryIncompleteError(
                f"tool discovery is incomplete: {reason} (after {self.pages} page(s), {len(tools)} tool(s))",
                hint="the server's catalogue could not be read to the end; nothing is reported as complete",
                details=details,
                data={"pages": self.pages, "tool_count": len(tools), "complete": False, "tools": tools},
            )

        while True:
            if self.pages >= MAX_PAGES:
                raise incomplete(f"more than {MAX_PAGES} pages")
            try:
                result = self._request("tools/list", {"cursor": cursor} if cursor is not None else None)
            except RemoteError as exc:
                if self.pages == 0:
                    raise
                raise incomplete(f"page {self.pages + 1} failed: {exc.message}", exc) from exc
            self.pages += 1
            for tool in result["tools"]:
                name = tool["name"]
                if name in names:
                    raise ProtocolError(
                        f"the server listed tool {name!r} twice (pages {names[name]} and {self.pages})",
                        hint="the catalogue is ambiguous; bkmcp never picks one of two tools with the same name",
                        details={"duplicate": name},
                    )
                names[name] = self.pages
                tools.append(tool)
            if len(tools) > MAX_TOOLS:
                raise incomplete(f"more than {MAX_TOOLS} tools")
            next_cursor = result.get("nextCursor")
            if next_cursor is None:
                break
            if next_cursor == cursor:
                raise incomplete(f"the server repeated cursor {_clip(repr(next_cursor), 60)}")
            if next_cursor in cursors:
                raise incomplete(f"the cursors form a cycle (cursor {_clip(repr(next_cursor), 60)} came back)")
            cursors.append(next_cursor)
            cursor = next_cursor
        self.log.debug(f"discovered {len(tools)} tool(s) in {self.pages} page(s)")
        self.tools = tools
        return tools

    # -- the call --------------------------------------------------------------------------------------

    def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """``tools/call`` sent exactly once, on every path; an unknown outcome is said so, never retried."""
        assert self.rules is not None
        rules = self.rules
        tool = next((t for t in self.tools or [] if t.get("name") == name), None)
        extra = build_param_headers(tool, arguments) if rules.method_headers else []
        message = build_request(self._new_id(), "tools/call", {"name": name, "arguments": arguments}, rules)
        base = {"server": self.server.name, "tool": name}
        self.server_requests = []
        try:
            answer = self._exchange(message, rules, "tools/call", extra_headers=extra)
        except KeyboardInterrupt:
            self._cancel(message["id"], rules)
            raise
        except HttpStatus as exc:
            error = status_error(exc, "tools/call")
            if exc.session_lost:
                error = ConnectionFailedError(
                    f"the server lost the session (HTTP {exc.status}) while tools/call was in flight; "
                    "bkmcp never resends a call",
                    hint="the tool may or may not have run; check before calling again",
                    details={"http_status": exc.status},
                )
            if exc.status >= 500 or exc.session_lost:
                error.details["outcome"] = "unknown"
            error.data = dict(base)
            raise error from None
        except RemoteError as exc:
            if isinstance(exc, McpTimeoutError) and request_was_sent(exc):
                self._cancel(message["id"], rules, reason=f"timed out after {format_duration(self.deadline.seconds)}")
            if request_was_sent(exc) and not isinstance(exc, (AuthRequiredError, PermissionDeniedError)):
                exc.details["outcome"] = "unknown"
                exc.hint = (exc.hint + "; " if exc.hint else "") + \
                    "the call was sent and its outcome is unknown: check before calling again"
            exc.data = {**base, **(exc.data or {})}
            raise
        declined = [m for m in self.server_requests if m in _DECLINED_CAPABILITIES]
        try:
            result = check_result("tools/call", answer)
        except RemoteError as exc:
            if isinstance(exc, ProtocolError) and answer.kind == "result":
                exc.details["outcome"] = "unknown"
            if declined:
                exc = CapabilityUnsupportedError(
                    f"the tool asked for {', '.join(_DECLINED_CAPABILITIES[m] for m in declined)}, which bkmcp "
                    f"does not support ({exc.message})",
                    details={"server_requests": declined, **exc.details},
                )
            exc.data = {**base, **(exc.data or {})}
            raise exc from None
        if declined:
            raise CapabilityUnsupportedError(
                f"the tool asked for {', '.join(_DECLINED_CAPABILITIES[m] for m in declined)} while running, which "
                "bkmcp declined; its result may be incomplete",
                hint="the raw result is in data.result; bkmcp never answers sampling or elicitation",
                details={"server_requests": declined},
                data={**base, "result": result},
            )
        return result

    def _cancel(self, request_id: Any, rules: EraRules, reason: str = "interrupted by the user (Ctrl-C)") -> None:
        """Ctrl-C or a timed-out call: legacy (and stdio in both eras) sends ``notifications/cancelled`` (short
        bounded attempt; the lifecycle spec says a sender SHOULD after a timeout); modern HTTP already closed
        the stream by unwinding out of it."""
        if not rules.cancel_notification and self.server.type != "stdio":
            return
        try:
            note = build_notification("notifications/cancelled", {"requestId": request_id, "reason": reason}, rules)
            self.transport.send_message(note, rules=rules, deadline=Deadline(_CANCEL_BUDGET), strict=False)
        except BaseException as exc:  # noqa: B036 - a second Ctrl-C or any failure must not mask the first
            self.log.debug(f"sending notifications/cancelled failed: {type(exc).__name__}")


def _staged_failure(error: RemoteError, data: dict[str, Any]) -> RemoteError:
    extra = error.data or {}
    data = dict(data)
    for key in ("pages", "tool_count", "complete"):
        if key in extra:
            data[key] = extra[key]
    error.data = data
    return error


def run_check(server: ResolvedServer, *, deadline: Deadline, insecure: bool, log: Log) -> dict[str, Any]:
    """``--check`` data (SPEC §7); on failure raises a RemoteError whose ``data`` has the staged ``checks``."""
    checks = {"config": "passed", "connection": "not_run", "protocol": "not_run", "tools": "not_run"}
    data: dict[str, Any] = {
        "server": server.name, "config_file": server.config_file, "transport": server.type,
        "protocol_version": None, "era": None, "server_info": {}, "capabilities": {}, "checks": checks,
        "authentication": {"source": server.auth_source, "discovery_accepted": False},
        "tool_count": 0, "complete": False, "elapsed_ms": 0,
    }
    stage = "connection"
    with McpClient(server, deadline=deadline, insecure=insecure, log=log) as client:
        try:
            try:
                client.connect(server_info=True)
            finally:
                if client.responses:
                    checks["connection"] = "passed"
                    stage = "protocol"
            checks["protocol"] = "passed"
            data.update(protocol_version=client.protocol_version, era=client.era, server_info=client.server_info,
                        capabilities=client.capabilities)
            if client.instructions is not None:
                data["instructions"] = client.instructions
            stage = "tools"
            tools = client.list_tools()
            checks["tools"] = "passed"
            data.update(tool_count=len(tools), complete=True)
            data["authentication"]["discovery_accepted"] = True
        except RemoteError as exc:
            checks[stage] = "failed"
            data.update(protocol_version=client.protocol_version, era=client.era)
            data["elapsed_ms"] = deadline.elapsed_ms()
            raise _staged_failure(exc, data) from None
    data["elapsed_ms"] = deadline.elapsed_ms()
    return data


def run_tools(server: ResolvedServer, *, deadline: Deadline, insecure: bool, log: Log) -> dict[str, Any]:
    """``--tools`` data (SPEC §7): server, protocol_version, tool_count, complete, tools (as received)."""
    with McpClient(server, deadline=deadline, insecure=insecure, log=log) as client:
        try:
            client.connect()
            tools = client.list_tools()
        except RemoteError as exc:
            partial = (exc.data or {}).get("tools", [])
            exc.data = {"server": server.name, "protocol_version": client.protocol_version,
                        "tool_count": len(partial), "complete": False, "tools": partial}
            raise
    return {"server": server.name, "protocol_version": client.protocol_version, "tool_count": len(tools),
            "complete": True, "tools": tools}


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


# Rules (SPEC §6, seed §6): flags are named exactly as the property; only declared simple types get a flag;
# anything a flag cannot express unambiguously stays usable through --body. Only what the user typed is sent.

FLAG_TYPES = ("string", "integer", "number", "boolean", "array", "object")
_FLAG_METAVAR = {"string": "STRING", "integer": "INTEGER", "number": "NUMBER", "array": "JSON-ARRAY",
                 "object": "JSON-OBJECT"}
_COMBINATORS = ("anyOf", "oneOf", "allOf")
_REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
_JSON_INTEGER = _lazy_re(r"-?(?:0|[1-9][0-9]*)")
_JSON_NUMBER = _lazy_re(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_IDENTIFIER = _lazy_re(r"[A-Za-z_][A-Za-z0-9_]*")
_PLAIN_ASCII_NAME = _lazy_re(r"[!#-~]+")  # printable ASCII without space and '"': always a fine flag name
_FAST_FLAG_NAME = _lazy_re(r"[!#-,.-<>-~][!#-<>-~]*")  # the same, minus '=' and a leading '-'
_HARD_KEYWORDS = frozenset(_REF_KEYWORDS + _COMBINATORS)
_FLAG_TYPE_SET = frozenset(FLAG_TYPES)


@dataclass(slots=True)
class ToolFlag:
    """A property that has a flag: ``--<name>`` typed by ``kind`` (one of FLAG_TYPES)."""

    name: str
    kind: str
    required: bool
    schema: dict[str, Any]

    @property
    def option(self) -> str:
        return f"--{self.name}"

    @property
    def usage(self) -> str:
        """``--limit INTEGER`` / ``--enabled=true|false``."""
        if self.kind == "boolean":
            return f"--{self.name}=true|false"
        return f"--{self.name} {_FLAG_METAVAR[self.kind]}"


@dataclass(slots=True)
class BodyOnlyField:
    """A property (or required name) that gets no flag; it is set through ``--body``."""

    name: str
    reason: str
    required: bool
    schema: Any = None


@dataclass(slots=True)
class ToolFlags:
    """What a tool's ``inputSchema`` offers on the command line."""

    flags: dict[str, ToolFlag]
    body_only: dict[str, BodyOnlyField]
    required: tuple[str, ...]
    notes: tuple[str, ...] = ()


def _schema_object(tool: Mapping[str, Any]) -> dict[str, Any] | None:
    schema = tool.get("inputSchema") if type(tool) is dict or isinstance(tool, Mapping) else None
    return schema if isinstance(schema, dict) else None


def _flag_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a ``--name`` flag (None when it can)."""
    if not name:
        return "an empty name cannot be a flag"
    if name.startswith("-"):
        return "a name starting with '-' cannot be a flag"
    if "=" in name:
        return "a name containing '=' cannot be a flag (--name=value would split it)"
    if not _PLAIN_ASCII_NAME.fullmatch(name):  # printable ASCII (the common case) needs no per-character look
        import unicodedata

        if any(ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in name):
            return "a name containing whitespace or control characters cannot be a flag"
    if name in RESERVED_OPTION_NAMES:
        own = f"-{name}" if len(name) == 1 else f"--{name}"
        return f"the name collides with bkmcp's own option {own} (reserved names are never tool flags)"
    return None


def _property_kind(schema: Any) -> tuple[str | None, str]:
    """(flag type, "") when the property schema maps to a flag, else (None, reason to use --body)."""
    if not isinstance(schema, dict):
        return None, "its schema is not an object (any value allowed), so a flag could not know the type"
    for keyword in _REF_KEYWORDS:
        if keyword in schema:
            return None, f"its schema is a reference ({keyword}: {_short(schema[keyword])})"
    for keyword in _COMBINATORS:
        if keyword in schema:
            nullable = isinstance(schema[keyword], list) and any(
                isinstance(s, dict) and s.get("type") == "null" for s in schema[keyword]
            )
            extra = ", e.g. an optional value that may be null" if nullable else ""
            return None, f"its schema combines alternatives ({keyword}{extra})"
    declared = schema.get("type")
    if isinstance(declared, list):
        if len(declared) == 1 and isinstance(declared[0], str):
            declared = declared[0]
        else:
            return None, f"its type is a union ({', '.join(_short(t) for t in declared)})"
    if declared is None:
        return None, "its schema declares no type"
    if declared == "null":
        return None, "its type is null (only JSON null is valid)"
    if declared not in FLAG_TYPES:
        return None, f"its type {_short(declared)} is not a JSON Schema type a flag can map"
    return str(declared), ""


def _short(value: Any, limit: int = 40) -> str:
    text = value if isinstance(value, str) else dump_json(value)
    text = _printable(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _printable(text: str) -> str:
    """Server text made safe for a terminal: control (and other unprintable) characters shown as JSON escapes,
    never interpreted. Applied to JSON text it keeps it valid JSON: such characters only occur inside strings."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else json.dumps(ch)[1:-1] for ch in text)


def build_tool_flags(tool: Mapping[str, Any]) -> ToolFlags:
    """Map ``inputSchema.properties`` to typed flags (SPEC §6). Never raises on odd schemas.

    A property whose schema a flag cannot express (null, union, anyOf/oneOf/allOf, $ref, no type) or whose name
    cannot be a flag (empty, leading '-', '=', whitespace/control characters, reserved option name) goes to
    ``body_only`` with the reason; the other properties still get their flags.
    """
    notes: list[str] = []
    schema = _schema_object(tool)
    if schema is None:
        notes.append("the tool has no inputSchema object; only --body can pass arguments")
        return ToolFlags({}, {}, (), tuple(notes))
    raw_required = schema.get("required")
    required: list[str] = []
    if type(raw_required) is list and raw_required:
        required = list(dict.fromkeys(r for r in raw_required if isinstance(r, str)))
    elif raw_required is not None and not isinstance(raw_required, list):
        notes.append("inputSchema.required is not a list and was ignored")
    properties = schema.get("properties")
    if properties is None:
        properties = {}
    elif not isinstance(properties, dict):
        notes.append("inputSchema.properties is not an object; only --body can pass arguments")
        properties = {}
    flags: dict[str, ToolFlag] = {}
    body_only: dict[str, BodyOnlyField] = {}
    required_set = set(required)
    for name, prop in properties.items():
        is_required = name in required_set
        if type(prop) is dict and _FAST_FLAG_NAME.fullmatch(name) and name not in RESERVED_OPTION_NAMES:
            declared = prop.get("type")  # fast path for the common plain property; same rules as below
            if type(declared) is str and declared in _FLAG_TYPE_SET and prop.keys().isdisjoint(_HARD_KEYWORDS):
                flags[name] = ToolFlag(name, declared, is_required, prop)
                continue
        problem = _flag_name_problem(name)
        kind, reason = (None, problem) if problem else _property_kind(prop)
        if kind is None:
            body_only[name] = BodyOnlyField(name, reason, is_required, prop)
        else:
            flags[name] = ToolFlag(name, kind, is_required, prop)
    for name in required:
        if name not in properties:
            body_only[name] = BodyOnlyField(name, "it is required but has no schema in properties", True)
    return ToolFlags(flags, body_only, tuple(required), tuple(notes))


def describe_cli(tool: Mapping[str, Any]) -> dict[str, Any]:
    """Per-tool CLI summary for ``--tools`` (``data.cli[tool_name]``): flags and fields that need --body."""
    mapped = build_tool_flags(tool)
    out: dict[str, Any] = {
        "flags": [
            {"name": f.name, "flag": f.usage, "type": f.kind, "required": f.required} for f in mapped.flags.values()
        ],
        "body_only": [{"name": b.name, "reason": b.reason} for b in mapped.body_only.values()],
    }
    if mapped.notes:
        out["notes"] = list(mapped.notes)
    return out


# -- values --------------------------------------------------------------------------------------------


def _tool_command(server_name: str, tool_name: Any) -> str:
    """``bkmcp <server> <tool>`` as a user can paste it: shell-quoted when needed, control characters escaped."""
    import shlex

    return _printable(f"bkmcp {shlex.quote(server_name)} {shlex.quote(str(tool_name))}")


def _tool_help_command(server_name: str, tool: Mapping[str, Any]) -> str:
    return f"{_tool_command(server_name, tool.get('name'))} --help"


def _flag_path(name: str) -> str:
    return json_path([name])


def json_path(parts: Iterable[Any]) -> str:
    """``$.a.b[0]["odd key"]``: the JSON path of a location in the arguments object."""
    out = "$"
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        elif isinstance(part, str) and _IDENTIFIER.fullmatch(part):
            out += f".{part}"
        else:
            out += f"[{json.dumps(str(part), ensure_ascii=False)}]"
    return out


def convert_flag_value(flag: ToolFlag, token: ToolToken) -> Any:
    """The JSON value of one flag token; ``ValueError`` with a user-facing reason when it is malformed."""
    value = token.value
    if flag.kind == "boolean":
        if value is None:
            raise ValueError(f"{flag.option} needs a value: write {flag.option}=true or {flag.option}=false")
        if not token.has_equals:
            raise ValueError(
                f"boolean {flag.option} takes its value after '=': write {flag.option}=true or {flag.option}=false "
                f"(not '{flag.option} {_short(value)}')"
            )
        if value == "true":
            return True
        if value == "false":
            return False
        raise ValueError(f"{flag.option} must be {flag.option}=true or {flag.option}=false, got {_short(value)!r}")
    if value is None:
        raise ValueError(f"{flag.option} needs a value ({flag.usage})")
    if flag.kind == "string":
        return value
    if flag.kind == "integer":
        if not _JSON_INTEGER.fullmatch(value):
            raise ValueError(
                f"{flag.option} expects an integer (digits with an optional leading '-', e.g. 20), got "
                f"{_short(value)!r}"
            )
        return _exact_number(value)
    if flag.kind == "number":
        if not _JSON_NUMBER.fullmatch(value):
            raise ValueError(
                f"{flag.option} expects a JSON number (e.g. 0.5, -2, 1e-3), got {_short(value)!r}"
            )
        return _exact_number(value)
    try:
        parsed = parse_json(value)
    except JsonInputError as exc:
        example = "'[1,2,3]'" if flag.kind == "array" else '\'{"key":"value"}\''
        extra = " (arrays are JSON, never comma-separated)" if flag.kind == "array" else ""
        raise ValueError(
            f"{flag.option} takes a JSON {flag.kind}{extra}, e.g. {flag.option} {example}: {exc}"
        ) from None
    expected = list if flag.kind == "array" else dict
    if not isinstance(parsed, expected):
        raise ValueError(f"{flag.option} takes a JSON {flag.kind}, got {json_type(parsed, integers=True)}")
    return parsed


def _exact_number(text: str) -> Any:
    """Integers stay ``int`` (huge ones and -0 keep their text); everything else keeps its exact text."""
    if _JSON_INTEGER.fullmatch(text) and text != "-0":
        return _parse_int(text)
    return JsonNumber(text)


def _is_json_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, decimal.Decimal):
        return value.is_finite()
    return isinstance(value, (int, float))


def _read_tokens(
    tool: Mapping[str, Any], tokens: Sequence[ToolToken], server_name: str
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """Convert tokens to values; collect every problem instead of stopping at the first."""
    mapped = build_tool_flags(tool)
    values: dict[str, Any] = {}
    problems: list[dict[str, str]] = []
    seen: set[str] = set()
    for token in tokens:
        option = _short(f"--{token.name}", 60)
        if token.name in seen:
            problems.append({"flag": option, "path": _flag_path(token.name),
                             "message": f"{option} is given more than once (give each flag once; arrays are JSON)"})
            continue
        seen.add(token.name)
        flag = mapped.flags.get(token.name)
        if flag is not None:
            try:
                values[token.name] = convert_flag_value(flag, token)
            except ValueError as exc:
                problems.append({"flag": option, "path": _flag_path(token.name), "message": str(exc)})
            continue
        body_field = mapped.body_only.get(token.name)
        if body_field is not None:
            problems.append({
                "flag": option, "path": _flag_path(token.name),
                "message": f"{_printable(token.name)!r} has no flag: {body_field.reason}; set it with --body",
            })
            continue
        close = closest_names(token.name, [*mapped.flags, *mapped.body_only])
        shown = [f"--{c}" if c in mapped.flags else f"{_short(c)!r} (no flag: set it with --body)" for c in close]
        suggestion = f"; did you mean {', '.join(shown)}?" if close else ""
        problems.append({"flag": option,
                         "message": f"unknown option {option} for tool {tool.get('name')!r}{suggestion}"})
    return values, problems


def _raise_token_problems(tool: Mapping[str, Any], problems: list[dict[str, str]], server_name: str) -> None:
    if not problems:
        return
    first = problems[0]["message"]
    more = f" (and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''})" if len(problems) > 1 else ""
    raise InvalidArgumentsError(
        f"{first}{more}",
        hint=f"see the tool's flags with: {_tool_help_command(server_name, tool)}",
        details={"problems": problems},
    )


def parse_tool_arguments(
    tool: Mapping[str, Any], tokens: Sequence[ToolToken], *, server_name: str = "<server>"
) -> dict[str, Any]:
    """Named flags -> the ``arguments`` object (P01, P02, P03). Only given flags are sent; no defaults.

    Every malformed, repeated, unknown or body-only flag is reported at once as ``invalid_mcp_arguments`` whose
    ``problems`` name the flag, and the hint names the tool help command.
    """
    values, problems = _read_tokens(tool, tokens, server_name)
    _raise_token_problems(tool, problems, server_name)
    return values


def check_tool_tokens(
    tool: Mapping[str, Any], tokens: Sequence[ToolToken], *, server_name: str = "<server>"
) -> list[str]:
    """With ``--body`` (P05): tool flags are not merged or sent, but must be well-formed flags of the tool.

    Returns the ignored flags (``--name``), for a warning; raises like ``parse_tool_arguments`` otherwise.
    """
    _values, problems = _read_tokens(tool, tokens, server_name)
    _raise_token_problems(tool, problems, server_name)
    return [f"--{t.name}" for t in tokens]


# -- validation ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArgumentCheck:
    """What ``validate_arguments`` actually checked: ``"full"`` (whole schema) or ``"basic"`` (top level)."""

    scope: str
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.scope == "full":
            if self.notes:
                return (f"arguments validated locally against the full inputSchema, except: {'; '.join(self.notes)}"
                        "; the server validates those")
            return "arguments validated locally against the full inputSchema"
        why = "; ".join(self.notes) or "no full schema check"
        return f"arguments checked locally for required fields, types and enum only ({why}); the server validates"


class _NotLocal(Exception):
    """The full schema cannot be checked here (remote reference, unsupported feature): fall back, say so."""


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_json_number(a) and _is_json_number(b):
        try:
            return decimal.Decimal(str(a) if isinstance(a, float) else a) == decimal.Decimal(
                str(b) if isinstance(b, float) else b
            )
        except (decimal.DecimalException, ValueError):
            return False
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    return a is None and b is None


_TYPE_TESTS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": _is_json_integer,
    "number": _is_json_number,
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _basic_problems(schema: dict[str, Any], arguments: Mapping[str, Any]) -> list[dict[str, str]]:
    """Required, declared type and enum/const of top-level properties: needs no library, always runs."""
    problems: list[dict[str, str]] = []
    required = schema.get("required")
    if isinstance(required, list):
        for name in dict.fromkeys(r for r in required if isinstance(r, str)):
            if name not in arguments:
                problems.append({"path": json_path([name]), "message": "required property is missing"})
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return problems
    for name, value in arguments.items():
        prop = properties.get(name)
        if not isinstance(prop, dict):
            continue
        path = json_path([name])
        declared = prop.get("type")
        types = [declared] if isinstance(declared, str) else declared if isinstance(declared, list) else []
        known = [t for t in types if isinstance(t, str) and t in _TYPE_TESTS]
        if known and len(known) == len(types) and not any(_TYPE_TESTS[t](value) for t in known):
            got = json_type(value, integers=True)
            problems.append({"path": path, "message": f"expected {' or '.join(known)}, got {got}"})
            continue
        enum = prop.get("enum")
        if isinstance(enum, list) and not any(_json_equal(value, e) for e in enum):
            problems.append({"path": path, "message": f"must be one of {_short(enum, 200)}"})
        if "const" in prop and not _json_equal(value, prop["const"]):
            problems.append({"path": path, "message": f"must be {_short(prop['const'], 200)}"})
    return problems


def _non_local_refs(schema: Any, found: list[str], depth: int = 0) -> None:
    if depth > 200 or len(found) > 5:
        found.append("(schema nested too deeply to inspect)")
        return
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in _REF_KEYWORDS and isinstance(value, str):
                if not value.startswith("#"):
                    found.append(value)
            elif key in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas"):
                if isinstance(value, dict):
                    for sub in value.values():
                        _non_local_refs(sub, found, depth + 1)
            elif key in ("enum", "const", "default", "examples", "title", "description"):
                continue  # data, not schemas
            else:
                _non_local_refs(value, found, depth + 1)
    elif isinstance(schema, list):
        for item in schema:
            _non_local_refs(item, found, depth + 1)


# Limits on what local validation attempts (docs/arguments.md): a server's schema must never hang bkmcp. Python's
# re cannot be interrupted, so a pattern runs only when its worst case is small: no backreference, no quantified
# group that holds a quantifier or an alternation (``(a+)+``, ``(a|ab)*``: exponential backtracking), and a string
# short enough for its number k of open-ended quantifiers (polynomial backtracking, about len**k steps, one more
# factor when the pattern is not anchored with ^).
REGEX_WORK_LIMIT = 10**8  # ~0.1 s of the re engine in the worst case
REGEX_TEXT_LIMIT = 1_000_000  # characters any pattern is run on locally
UNIQUE_ITEMS_LIMIT = 2000  # uniqueItems over containers is quadratic in jsonschema: longer arrays go to the server
_REGEX_SHAPES: dict[str, tuple[str | None, int, bool]] = {}


def _regex_shape(pattern: str) -> tuple[str | None, int, bool]:
    """(why the pattern may backtrack catastrophically or None, its degree k, anchored at the start), cached."""
    shape = _REGEX_SHAPES.get(pattern)
    if shape is None:
        try:
            from re import _parser as sre  # type: ignore[attr-defined]  # Python >= 3.11
        except ImportError:  # pragma: no cover - Python < 3.11
            import sre_parse as sre  # type: ignore[no-redef]
        c = sre._constants if hasattr(sre, "_constants") else sre
        repeats = {c.MAX_REPEAT, c.MIN_REPEAT} | ({c.POSSESSIVE_REPEAT} if hasattr(c, "POSSESSIVE_REPEAT") else set())
        backrefs = {c.GROUPREF, c.GROUPREF_EXISTS} | ({c.GROUPREF_IGNORE} if hasattr(c, "GROUPREF_IGNORE") else set())

        def walk(items: Any, repeated: bool) -> int:
            """The degree of a sequence; raises ValueError naming the risk."""
            degree = 0
            for op, av in items:
                if op in backrefs:
                    raise ValueError("it uses a backreference")
                if op in repeats:
                    low, high, body = av
                    if repeated and high != low:
                        raise ValueError("it nests quantifiers")
                    inner = walk(body, repeated or high > 1)
                    degree += inner + (1 if high != low else 0)
                elif op is c.BRANCH:
                    if repeated:
                        raise ValueError("it repeats an alternation")
                    degree += max((walk(alt, repeated) for alt in av[1]), default=0)
                elif op is c.SUBPATTERN:
                    degree += walk(av[-1], repeated)
                elif op in (c.ASSERT, c.ASSERT_NOT):
                    degree += walk(av[1], repeated)
                elif hasattr(c, "ATOMIC_GROUP") and op is c.ATOMIC_GROUP:
                    degree += walk(av, repeated)
            return degree

        try:
            parsed = sre.parse(pattern)
        except Exception:  # not a Python regex: jsonschema reports it as it always did
            shape = (None, 0, False)
        else:
            first = list(parsed)[:1]
            anchored = bool(first) and first[0][0] is c.AT and first[0][1] in (c.AT_BEGINNING, c.AT_BEGINNING_STRING) \
                and not parsed.state.flags & c.SRE_FLAG_MULTILINE
            try:
                shape = (None, walk(parsed, False), anchored)
            except ValueError as exc:
                shape = (str(exc), 0, anchored)
            except RecursionError:
                shape = ("it is nested too deeply", 0, anchored)
        _REGEX_SHAPES[pattern] = shape
    return shape


def regex_risk(pattern: str, length: int) -> str | None:
    """Why ``pattern`` is not run locally on a string of ``length`` characters (None: it is safe to run)."""
    why, degree, anchored = _regex_shape(pattern)
    if why is not None:
        return f"{why}, which can backtrack for minutes"
    if length > REGEX_TEXT_LIMIT:
        return f"the string is longer than {REGEX_TEXT_LIMIT} characters"
    work = length ** (degree + (0 if anchored else 1))
    if degree and work > REGEX_WORK_LIMIT:
        return f"a {length}-character string is too long for its {degree} open-ended quantifiers"
    return None


class _ValidationBudget:
    """What a validator class of ``_validator_class`` checks between keywords and what it chose not to run."""

    def __init__(self, deadline: Deadline | None) -> None:
        self.deadline = deadline
        self.skipped: list[str] = []

    def skip(self, note: str) -> None:
        if note not in self.skipped:
            self.skipped.append(note)


def _guarded_validators(base: Any, budget: _ValidationBudget) -> dict[str, Any]:
    """``base``'s keyword functions, each checking the deadline first; pattern matching and uniqueItems limited."""
    originals = dict(base.VALIDATORS)

    def pattern(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if isinstance(value, str) and isinstance(instance, str):
            why = regex_risk(value, len(instance))
            if why is not None:
                budget.skip(f"pattern {_short(value)} not run locally ({why})")
                return None
        return originals["pattern"](validator, value, instance, schema)

    def key_patterns(name: str) -> Callable[..., Any]:
        def keyword(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
            patterns = schema.get("patternProperties") if isinstance(schema, dict) else None
            if isinstance(instance, dict) and instance and isinstance(patterns, dict):
                longest = max(len(k) for k in instance)
                for key_pattern in patterns:
                    why = regex_risk(key_pattern, longest) if isinstance(key_pattern, str) else None
                    if why is not None:
                        budget.skip(f"{name} with pattern {_short(key_pattern)} not run locally ({why})")
                        return None
            return originals[name](validator, value, instance, schema)

        return keyword

    def unique_items(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if value is True and isinstance(instance, list) and len(instance) > UNIQUE_ITEMS_LIMIT and any(
                isinstance(item, (dict, list)) for item in instance):
            budget.skip(f"uniqueItems not run locally (an array of more than {UNIQUE_ITEMS_LIMIT} containers)")
            return None
        return originals["uniqueItems"](validator, value, instance, schema)

    replaced: dict[str, Callable[..., Any]] = {"pattern": pattern, "uniqueItems": unique_items}
    for name in ("patternProperties", "additionalProperties", "unevaluatedProperties"):
        replaced[name] = key_patterns(name)
    return _timed_validators({name: replaced.get(name) or function for name, function in originals.items()},
                             budget.deadline)


def _timed_validators(keywords: dict[str, Any], deadline: Deadline | None) -> dict[str, Any]:
    """Keyword functions that check ``deadline`` first (``mcp_timeout`` once the operation's budget is spent)."""
    if deadline is None:
        return keywords

    def timed(function: Callable[..., Any]) -> Callable[..., Any]:
        def keyword(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
            deadline.remaining()
            return function(validator, value, instance, schema)

        return keyword

    return {name: timed(function) for name, function in keywords.items()}


def _check_schema(cls: Any, schema: Any, deadline: Deadline | None) -> None:
    """``cls.check_schema(schema)`` (the schema against its meta-schema), checking ``deadline`` between keywords:
    a huge schema from the server must not outlast the budget either."""
    if deadline is None or not hasattr(cls, "META_SCHEMA"):
        cls.check_schema(schema)
        return
    from jsonschema import exceptions as jexc
    from jsonschema import validators

    meta = validators.validator_for(cls.META_SCHEMA, default=cls)
    meta = validators.extend(meta, _timed_validators(dict(meta.VALIDATORS), deadline))
    for error in meta(cls.META_SCHEMA, format_checker=meta.FORMAT_CHECKER).iter_errors(schema):
        raise jexc.SchemaError.create_from(error)


def _validator_class(schema: dict[str, Any], budget: _ValidationBudget | None = None) -> Any:
    """jsonschema validator for the schema's dialect, with JSON number semantics for Decimal/JsonNumber; with a
    ``budget``, every keyword checks its deadline and pattern matching keeps to the limits above."""
    from jsonschema import validators  # lazily: only the call path validates

    dialect = schema.get("$schema")
    if "$schema" in schema:
        base = validators.validator_for(schema, default=None) if isinstance(dialect, str) else None
        if base is None:
            raise _NotLocal(f"unknown $schema dialect {_short(dialect)}")
    else:
        base = validators.validator_for(schema)
    checker = base.TYPE_CHECKER.redefine_many({
        "integer": lambda _checker, value: _is_json_integer(value),
        "number": lambda _checker, value: _is_json_number(value),
    })

    def multiple_of(validator: Any, divisor: Any, instance: Any, _schema: Any) -> Any:
        from jsonschema.exceptions import ValidationError

        if not _is_json_number(instance) or not _is_json_number(divisor):
            return
        if any(isinstance(n, decimal.Decimal) and abs(n.adjusted()) > 4000 for n in (instance, divisor)):
            raise _NotLocal("multipleOf on a number too large to check exactly")
        import fractions

        quotient = fractions.Fraction(instance) / fractions.Fraction(divisor)
        if quotient.denominator != 1:
            yield ValidationError(f"must be a multiple of {_short(divisor)}")

    extended = validators.extend(base, {"multipleOf": multiple_of}, type_checker=checker)
    return extended if budget is None else validators.extend(extended, _guarded_validators(extended, budget))


def _schema_problems(
    schema: dict[str, Any], arguments: Mapping[str, Any], budget: _ValidationBudget | None = None
) -> list[dict[str, str]]:
    """The full schema via jsonschema; ``_NotLocal`` when that is not possible without the network."""
    remote: list[str] = []
    _non_local_refs(schema, remote)
    if remote:
        raise _NotLocal(f"the schema references {_short(remote[0], 80)}, which is never fetched")
    try:
        import jsonschema
        from jsonschema import exceptions as jexc
    except ImportError:
        raise _NotLocal("the jsonschema library is not available") from None
    budget = budget or _ValidationBudget(None)
    cls = _validator_class(schema, budget)

    class LocalOnlyResolver(jsonschema.RefResolver):
        def resolve_remote(self, uri: str) -> Any:
            raise _NotLocal(f"the schema references {_short(uri, 80)}, which is never fetched")

    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            resolver = LocalOnlyResolver.from_schema(schema, id_of=cls.ID_OF)
            try:
                errors = list(cls(schema, resolver=resolver).iter_errors(arguments))
            except (jexc.RefResolutionError, _NotLocal, McpTimeoutError):
                raise
            except (Exception, RecursionError):
                _check_schema(cls, schema, budget.deadline)  # a SchemaError explains the failure better
                raise
            if errors:
                # Checking the schema against its meta-schema costs ~100x the validation itself, so it runs only
                # when there are problems to report: a malformed schema must never block a call with false ones.
                _check_schema(cls, schema, budget.deadline)
    except jexc.SchemaError as exc:
        if exc.validator == "format":  # e.g. an ECMA-262 regex Python's re cannot compile
            raise _NotLocal(f"the inputSchema uses a {exc.validator_value} this local validator cannot check "
                            f"({_short(exc.message, 80)})") from None
        raise _NotLocal(f"the inputSchema is not a valid JSON Schema ({_short(exc.message, 80)})") from None
    except jexc.RefResolutionError as exc:
        cause = exc._cause if isinstance(getattr(exc, "_cause", None), _NotLocal) else None
        raise _NotLocal(str(cause) if cause else f"a $ref could not be resolved locally ({_short(str(exc), 80)})") \
            from None
    except (_NotLocal, McpTimeoutError):
        raise
    except (Exception, RecursionError) as exc:  # a validator bug or an exotic keyword must not crash the call
        raise _NotLocal(f"local validation failed ({type(exc).__name__})") from None
    return [p for e in errors for p in _problems_from_error(e)]


def _problems_from_error(error: Any) -> list[dict[str, str]]:
    """Readable problems for one jsonschema error (JSON paths, JSON values, never Python reprs)."""
    if error.validator == "required" and isinstance(error.validator_value, list) and isinstance(error.instance, dict):
        missing = [r for r in error.validator_value if isinstance(r, str) and r not in error.instance]
        if missing:  # one problem per missing property, at the path where it belongs
            base = list(error.absolute_path)
            return [{"path": json_path([*base, name]), "message": "required property is missing"} for name in missing]
    return [_problem_from_error(error)]


def _problem_from_error(error: Any) -> dict[str, str]:
    path = list(error.absolute_path)
    keyword = error.validator
    value = error.validator_value
    instance = error.instance
    if keyword == "type":
        types = value if isinstance(value, list) else [value]
        return {"path": json_path(path),
                "message": f"expected {' or '.join(str(t) for t in types)}, got {json_type(instance, integers=True)}"}
    if keyword == "enum":
        return {"path": json_path(path), "message": f"must be one of {_short(value, 200)}"}
    if keyword == "const":
        return {"path": json_path(path), "message": f"must be {_short(value, 200)}"}
    if keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") and _is_json_number(value):
        words = {"minimum": "at least", "maximum": "at most", "exclusiveMinimum": "greater than",
                 "exclusiveMaximum": "less than"}
        return {"path": json_path(path), "message": f"must be {words[keyword]} {_short(value)}, got "
                f"{_short(instance)}"}
    message = str(error.message)
    try:  # jsonschema starts most messages with repr(instance); show JSON instead of Python reprs
        shown = repr(instance)
        if message.startswith(shown) and not isinstance(instance, (dict, list)):
            message = _short(dump_json(instance), 60) + message[len(shown):]
    except Exception:  # pragma: no cover - repr of plain JSON values does not fail
        pass
    return {"path": json_path(path), "message": _printable(message)}


def validate_arguments(
    tool: Mapping[str, Any], arguments: Mapping[str, Any], *, deadline: Deadline | None = None
) -> ArgumentCheck:
    """Check the final arguments object before any ``tools/call`` (SPEC §6, P03, P05).

    Always: required fields, declared top-level types and ``enum``/``const``. With jsonschema (imported here,
    lazily): the whole schema when it is self-contained; a remote ``$ref`` is never fetched. Returns what was
    actually checked (``ArgumentCheck``); raises ``invalid_mcp_arguments`` listing every problem with its path.

    Bounded: each schema keyword first checks ``deadline`` (``mcp_timeout`` once the operation's budget is spent),
    and patterns that could backtrack for long (``regex_risk``) are left to the server, noted in the result.
    """
    schema = _schema_object(tool)
    if schema is None:
        return ArgumentCheck("basic", ("the tool has no inputSchema object",))
    notes: list[str] = []
    budget = _ValidationBudget(deadline)
    try:
        problems = _schema_problems(schema, arguments, budget)
        scope = "full"
        notes += budget.skipped
    except _NotLocal as exc:
        notes.append(str(exc))
        problems = _basic_problems(schema, arguments)
        scope = "basic"
    if problems:
        unique: list[dict[str, str]] = []
        for problem in problems:
            if problem not in unique:
                unique.append(problem)
        unique.sort(key=lambda p: p["path"])
        lines = "; ".join(f"{p['path']}: {p['message']}" for p in unique[:5])
        more = f"; and {len(unique) - 5} more" if len(unique) > 5 else ""
        checked = "the full inputSchema" if scope == "full" else "required fields, types and enum only"
        hint = f"checked locally: {checked}"
        if notes:
            hint += f" ({notes[0]})"
        raise InvalidArgumentsError(
            f"arguments for tool {tool.get('name')!r} do not match its inputSchema: {lines}{more}",
            hint=hint,
            details={"problems": unique, "validation": scope},
        )
    return ArgumentCheck(scope, tuple(notes))


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
    """The ``jq`` binding, or None when no native build fits this interpreter/platform.

    Inside ``bkmcp.pyz`` the binding's native module is extracted on first use into the per-user cache by the
    artifact's boot module (docs/building.md); from a checkout or ``pip install`` it is an ordinary import.
    """
    try:
        import _bkmcp_boot  # type: ignore[import-not-found]  # exists only inside bkmcp.pyz
    except ImportError:
        pass
    else:
        module = _bkmcp_boot.load_native_module("jq")
        if module is not None:
            return module
    try:
        import jq  # type: ignore[import-not-found]
    except ImportError:
        return None
    return jq


class JqHalt(Exception):
    """``halt_error`` in a ``--jq`` program: the message as jq prints it on stderr and the exit status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class _JqOverBudget(Exception):
    """The ``--jq`` program ran past the operation's budget."""


JQ_MIN_BUDGET = 1.0  # seconds --jq always gets, even after an operation that spent its whole --timeout
JQ_EXECUTABLE_CHECK_SECONDS = 10.0  # compiling with a jq executable: a jq that answers nothing in 10s is unusable
_JQ_HALT_MARK = "\ue000bkmcp-halt-"


class JqProgram:
    """A compiled ``--jq`` expression, via the ``jq`` binding or, failing that, a ``jq`` executable.

    ``halt_error`` is redefined (in front of the expression) as an error carrying a marker, its message and its
    status, because the binding reports jq's own ``halt_error`` as a silent end of output; so both back ends
    behave the same, as jq 1.7 does. A program that starts with ``import``/``include`` cannot take the prefix:
    it runs as given, and ``halt_error`` in it is refused at compile time.
    """

    def __init__(self, expression: str) -> None:
        self.expression = expression
        self._module = _load_jq_module()
        self._executable: str | None = None
        if not expression.strip():
            raise InvalidJqExpressionError("--jq expression is empty")
        self._literal = False  # jq keeps number literals (jq >= 1.7 with decNumber)
        self._halt_mark = f"{_JQ_HALT_MARK}{os.urandom(4).hex()}:"
        defs = (
            'def halt_error($c): if ($c | type) != "number" then error("halt_error/1: number required") '
            f"else error({json.dumps(self._halt_mark)} + ({{m: ., c: $c}} | tojson)) end; "
            "def halt_error: halt_error(5); "
        )
        self._wrapped = True
        if self._module is not None:
            try:
                self._program = self._module.compile(expression)
            except ValueError as exc:
                raise InvalidJqExpressionError(f"invalid --jq expression: {_first_line(exc)}") from None
            self._literal = _jq_keeps_literals(self._module)
            try:  # each output as JSON text, so jq's own spelling of numbers reaches parse_json
                self._program = self._module.compile(f"{defs}({expression}\n) | tojson")
            except ValueError:  # e.g. a leading import/include directive: run as given, all output at once
                self._wrapped = False
            self._check_halt_error()
            return
        import shutil

        self._executable = shutil.which("jq")
        if self._executable is None:
            raise JqUnavailableError(
                "--jq needs the jq library, which has no build for this Python/platform, and no jq executable "
                "is on PATH",
                hint="install jq (e.g. apt install jq) or drop --jq and filter the JSON output yourself",
            )
        self._source = f"{defs}(\n{expression}\n)"
        if self._check_executable(f"{defs}if false then (\n{expression}\n) else empty end") is not None:
            self._wrapped = False
            self._source = f" {expression}"  # a leading "-" is no option
            problem = self._check_executable(f"if false then (\n{expression}\n) else empty end")
            if problem is not None:
                raise InvalidJqExpressionError(f"invalid --jq expression: {problem}")
        self._check_halt_error()

    def _check_halt_error(self) -> None:
        if not self._wrapped and "halt_error" in self.expression:
            raise InvalidJqExpressionError(
                "--jq: halt_error cannot be used in a program that starts with import/include",
                hint="drop the module directive, or use error(...) instead of halt_error",
            )

    def _check_executable(self, program: str) -> str | None:
        """Compile ``program`` with the jq executable: None when it compiles, else jq's first line of error."""
        import subprocess

        assert self._executable is not None
        try:
            proc = subprocess.run([self._executable, "-n", program], stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, encoding="utf-8", errors="replace",
                                  timeout=JQ_EXECUTABLE_CHECK_SECONDS)
        except subprocess.TimeoutExpired:
            raise JqUnavailableError(
                f"the jq executable {self._executable} did not compile the --jq expression within "
                f"{format_duration(JQ_EXECUTABLE_CHECK_SECONDS)}",
                hint="check that this jq works (jq --version), or drop --jq and filter the JSON output yourself",
            ) from None
        except OSError as exc:
            raise JqUnavailableError(f"the jq executable {self._executable} cannot be run: {exc.strerror or exc}",
                                     hint="install a working jq, or drop --jq") from None
        return None if proc.returncode == 0 else _first_line(proc.stderr)

    def apply(self, envelope: dict[str, Any], deadline: Deadline | None = None) -> list[str]:
        """Every output value of ``stream`` at once."""
        return list(self.stream(envelope, deadline))

    def stream(self, envelope: dict[str, Any], deadline: Deadline | None = None) -> Iterator[str]:
        """Run over the final envelope; yield each output value as one compact JSON line as soon as jq has it.

        ``deadline`` bounds the run: it is checked between output values (a ``jq`` executable is also killed when
        it is silent past it); past it the run is ``jq_error``. A ``halt_error`` raises ``JqHalt`` after the
        values before it; ``halt`` just ends the output.

        jq computes with doubles. jq >= 1.7 keeps the literal text of a number it did not compute with, which
        ``tojson`` reveals: that is the "literal" mode, used when the binding has it. Otherwise numbers a double
        cannot hold (big integers, ``1e400``) travel as marker strings and come back exact. Numbers jq would only
        re-spell (``1E+2``, ``-0.0`` without literals; ``1e400`` -> ``1E+400`` with them) are tried as markers
        too, in a second run side by side: each value of that run is used when it equals, value for value, the
        value computed with real numbers (so comparisons and arithmetic keep jq's meaning). A runtime error is
        ``jq_error``.
        """
        # The number walks below recurse about twice per JSON level; any depth parse_json accepted must fit.
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 10_000))
        try:
            yield from self._stream(envelope, deadline)
        except RecursionError:
            raise JqError(
                "--jq failed on the result: it is nested too deeply", data=envelope.get("data")
            ) from None
        finally:
            sys.setrecursionlimit(limit)

    def _stream(self, envelope: dict[str, Any], deadline: Deadline | None) -> Iterator[str]:
        nonce = os.urandom(4).hex()
        if self._literal:
            exact_protect, text_protect = _jq_beyond_decimal, _jq_literal_differs
        else:
            exact_protect, text_protect = _jq_value_differs, _jq_text_differs
        data = envelope.get("data")
        dry = isinstance(data, dict) and data.get("dry_run") is True
        exact = self._project(envelope, nonce, exact_protect, deadline)
        respelled: Iterator[Any] | None = None
        if _any_number(envelope, lambda n: text_protect(n) and not exact_protect(n)):
            respelled = self._project(envelope, nonce, text_protect, deadline)
        try:
            for value in exact:
                if respelled is not None:
                    try:
                        other = next(respelled)
                    except (StopIteration, ValueError, JqHalt, _JqOverBudget):
                        other = respelled = None
                    if respelled is not None and _same_json(other, value):
                        value = other
                    else:  # once the runs part, the value computed with real numbers is the answer
                        _close(respelled)
                        respelled = None
                yield dump_json(value)
                if deadline is not None and deadline.end - time.monotonic() <= 0:
                    raise _JqOverBudget()
        except (ValueError, _JqOverBudget) as exc:
            if isinstance(exc, _JqOverBudget):
                assert deadline is not None
                reason = (f"--jq did not finish within the time --timeout left for it "
                          f"({deadline.seconds:.1f}s)")
            else:
                reason = f"--jq failed on the result: {_first_line(exc)}"
            raise JqError(
                reason,
                hint="nothing was sent (dry run); fix the expression" if dry else "the remote operation already "
                "happened; do not retry it blindly, fix the expression and re-run it on saved output (data keeps "
                "the unprojected result)",
                data=data,
                details={} if envelope.get("ok") else {"unprojected_error": envelope.get("error")},
            ) from None
        finally:
            _close(respelled)
            _close(exact)

    def _project(self, envelope: dict[str, Any], nonce: str, protect: Callable[[Any], bool],
                 deadline: Deadline | None) -> Iterator[Any]:
        table: list[str] = []
        text = dump_json(_jq_protect(envelope, table, nonce, protect))
        if self._executable is not None:
            texts: Iterable[str] = _jq_executable_lines([self._executable, "-c", self._source], text, deadline)
        elif self._wrapped:
            texts = iter(self._program.input_text(text))
        else:
            texts = self._program.input_text(text).text().split("\n")
        try:
            for item in texts:
                if not item.strip():
                    continue
                try:
                    value = parse_json(item, strict_keys=False)
                except JsonInputError:
                    raise ValueError(
                        "jq printed a value that is not JSON (jq cuts values nested over 256 levels)") from None
                yield _jq_restore(value, table, nonce)
        except ValueError as exc:
            message = str(exc)
            at = message.find(self._halt_mark)
            if at < 0:
                raise
            self._halt(message[at + len(self._halt_mark):].split("\n", 1)[0], table, nonce)
        finally:
            _close(texts)

    def _halt(self, record: str, table: list[str], nonce: str) -> None:
        """Raise ``JqHalt`` for a halt_error record ``{"m": message, "c": status}`` as jq 1.7 prints it."""
        halted = _jq_restore(parse_json(record, strict_keys=False), table, nonce)
        message, code = halted["m"], halted["c"]
        try:
            status = int(code) % 256
        except (TypeError, ValueError, OverflowError, decimal.DecimalException):  # nan arrives as null
            raise ValueError(f"halt_error/1: invalid exit status {_short(code)}") from None
        raise JqHalt(message if isinstance(message, str) else dump_json(message) + "\n", status)


def _close(iterator: Any) -> None:
    """Close a generator (a jq executable behind it is killed); other iterables need nothing."""
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


def _jq_executable_lines(argv: list[str], text: str, deadline: Deadline | None) -> Iterator[str]:
    """Run a jq executable on ``text``; yield its stdout lines as they come. ``ValueError`` with jq's error
    when it fails; ``_JqOverBudget`` (the process killed) when ``deadline`` passes first."""
    import selectors
    import subprocess

    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        raise ValueError(f"the jq executable cannot be run: {exc.strerror or exc}") from None
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    pending = memoryview(text.encode("utf-8"))
    out, err = bytearray(), bytearray()
    selector = selectors.DefaultSelector()
    try:
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            os.set_blocking(stream.fileno(), False)
        selector.register(proc.stdin, selectors.EVENT_WRITE)
        selector.register(proc.stdout, selectors.EVENT_READ)
        selector.register(proc.stderr, selectors.EVENT_READ)
        while selector.get_map():
            wait = None if deadline is None else deadline.end - time.monotonic()
            if wait is not None and wait <= 0:
                raise _JqOverBudget()
            for key, _events in selector.select(wait):
                if key.fileobj is proc.stdin:
                    try:
                        pending = pending[os.write(proc.stdin.fileno(), pending[:65536]):]
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not pending:
                        selector.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                elif key.fileobj is proc.stderr:
                    err += chunk
                else:
                    out += chunk
                    *lines, rest = out.split(b"\n")
                    out = bytearray(rest)
                    for line in lines:
                        yield line.decode("utf-8", "replace")
        if out:
            yield out.decode("utf-8", "replace")
        if proc.wait() != 0:  # jq's error line (its debug/stderr output may come before it)
            messages = err.decode("utf-8", "replace").splitlines()
            errors = [m for m in messages if _JQ_HALT_MARK in m] or [
                m for m in messages if m.startswith("jq: error")] or messages
            raise ValueError(errors[0] if errors else f"the jq executable exited with status {proc.returncode}")
    finally:
        selector.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()


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
        lines.append(f"  url            {redact_url(server.url or '')}")
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


HELP_WIDTH = 80
_HINT_WORDS = (
    ("readOnlyHint", "read-only", "may modify its environment"),
    ("destructiveHint", "destructive", "not destructive (additive only)"),
    ("idempotentHint", "idempotent", "not idempotent"),
    ("openWorldHint", "open world (reaches external systems)", "closed world"),
)


def _cell_width(text: str) -> int:
    """Terminal columns of ``text``: East Asian wide/fullwidth characters take two, combining marks none."""
    if text.isascii():
        return len(text)
    import unicodedata

    return sum(2 if _is_wide(ch) else 0 if unicodedata.combining(ch) else 1 for ch in text)


def _wrap(text: str, width: int, indent: str = "", first_indent: str | None = None) -> list[str]:
    """Greedy wrap by display width; CJK text (no spaces) breaks between characters; paragraphs kept."""
    first = indent if first_indent is None else first_indent
    out: list[str] = []
    for paragraph in _printable_lines(text):
        if not paragraph.strip():
            if out and out[-1].strip():
                out.append("")
            continue
        atoms: list[tuple[str, bool]] = []  # (piece, space before it)
        if paragraph.isascii():
            atoms = [(word, True) for word in paragraph.split()]
        else:
            for word in paragraph.split():
                atoms.extend((piece, i == 0) for i, piece in enumerate(_word_atoms(word)))
        line = first if not out else indent
        line_start = len(line)
        used = _cell_width(line)
        for piece, spaced in atoms:
            sep = " " if spaced and len(line) > line_start else ""
            cells = (len(piece) if piece.isascii() else _cell_width(piece)) + len(sep)
            if len(line) > line_start and used + cells > width:
                out.append(line)
                line = indent
                line_start = len(line)
                used = _cell_width(line)
                sep = ""
                cells = _cell_width(piece)
            line += sep + piece
            used += cells
        out.append(line)
    while out and not out[-1].strip():
        out.pop()
    return out


def _is_wide(ch: str) -> bool:
    if ch < "\u1100":  # nothing below U+1100 is wide: skip the table lookup for Latin text
        return False
    import unicodedata

    return unicodedata.east_asian_width(ch) in ("W", "F")


def _word_atoms(word: str) -> list[str]:
    """Break points inside a word: around each wide (CJK) character, which may wrap anywhere."""
    if word < "\u1100" and max(word) < "\u1100":
        return [word]
    pieces: list[str] = []
    buf = ""
    for ch in word:
        if _is_wide(ch):
            if buf:
                pieces.append(buf)
                buf = ""
            pieces.append(ch)
        else:
            buf += ch
    if buf:
        pieces.append(buf)
    return pieces or [word]


def _printable_lines(text: str) -> list[str]:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return [_printable(line.replace("\t", "    ")) for line in lines]


def _resolve_local(schema: Any, root: Any, depth: int) -> Any:
    if isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and depth < 8:
        ref = schema["$ref"]
        if ref.startswith("#/"):
            node = root
            for part in ref[2:].split("/"):
                part = part.replace("~1", "/").replace("~0", "~")
                if isinstance(node, dict) and part in node:
                    node = node[part]
                else:
                    return schema
            return _resolve_local(node, root, depth + 1)
    return schema


def _example_value(schema: Any, root: Any, name: str, depth: int = 0) -> Any:
    """A plausible placeholder for a property: const, first enum value, default, else by type."""
    schema = _resolve_local(schema, root, depth)
    if not isinstance(schema, dict) or depth > 4:
        return f"<{name}>"
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    if "default" in schema and schema["default"] is not None:
        return schema["default"]
    examples = schema.get("examples")
    if isinstance(examples, list) and examples:
        return examples[0]
    for keyword in _COMBINATORS:
        options = schema.get(keyword)
        if isinstance(options, list):
            for option in options:
                resolved = _resolve_local(option, root, depth + 1)
                if isinstance(resolved, dict) and resolved.get("type") != "null":
                    return _example_value(resolved, root, name, depth + 1)
    declared = schema.get("type")
    if isinstance(declared, list):
        declared = next((t for t in declared if t != "null"), "null")
    if declared == "string":
        return f"<{name}>"
    if declared == "integer":
        low = schema.get("minimum")
        return low if isinstance(low, int) and not isinstance(low, bool) else 1
    if declared == "number":
        low = schema.get("minimum")
        return low if _is_json_number(low) else JsonNumber("1.5")
    if declared == "boolean":
        return True
    if declared == "null":
        return None
    if declared == "array":
        items = schema.get("items")
        return [_example_value(items, root, name, depth + 1)] if isinstance(items, dict) and items else []
    if declared == "object" or isinstance(schema.get("properties"), dict):
        return _example_object(schema, root, depth + 1, limit=4)[0]
    return f"<{name}>"


def _example_object(schema: dict[str, Any], root: Any, depth: int, limit: int) -> tuple[dict[str, Any], int]:
    """Required properties first, then optional ones up to ``limit``; returns (object, omitted count)."""
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = [r for r in schema.get("required") or [] if isinstance(r, str)] if isinstance(
        schema.get("required"), list) else []
    chosen = [r for r in dict.fromkeys(required)]
    optional = [n for n in properties if n not in chosen]
    room = max(0, limit - len(chosen))
    chosen += optional[:room]
    value = {name: _example_value(properties.get(name), root, name, depth) for name in chosen}
    return value, len(optional) - min(room, len(optional))


def _clip_strings(value: Any, limit: int = 32) -> Any:
    if isinstance(value, str):
        return value if len(value) <= limit else value[: limit - 1] + "…"
    if isinstance(value, list):
        return [_clip_strings(v, limit) for v in value]
    if isinstance(value, dict):
        return {k: _clip_strings(v, limit) for k, v in value.items()}
    return value


def _shell_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _flag_example(flag: ToolFlag, value: Any) -> list[str]:
    """Shell words for one flag in an example; a placeholder of the right type when the value does not fit."""
    if flag.kind == "boolean":
        return [f"{flag.option}={'false' if value is False else 'true'}"]
    if flag.kind == "string":
        ok = isinstance(value, str) and value.isprintable()  # newlines/controls make a poor example
        return [flag.option, _shell_quote(value if ok else f"<{flag.name}>")]
    if flag.kind in ("integer", "number"):
        fits = _is_json_number(value) and not isinstance(value, float)
        fits = fits and (flag.kind == "number" or _is_json_integer(value))
        return [flag.option, dump_json(value) if fits else "1"]
    fits = isinstance(value, list if flag.kind == "array" else dict)
    return [flag.option, _shell_quote(_printable(dump_json(value if fits else [] if flag.kind == "array" else {})))]


def _annotation_lines(tool: Mapping[str, Any]) -> list[str]:
    annotations = tool.get("annotations")
    if not isinstance(annotations, dict):
        return []
    words = []
    for key, yes, no in _HINT_WORDS:
        if isinstance(annotations.get(key), bool):
            words.append(yes if annotations[key] else no)
    if not words:
        return []
    return _wrap(", ".join(words) + " (hints declared by the server, not verified)", HELP_WIDTH, "  ", "  ")


def render_tool_help(server_name: str, tool: Mapping[str, Any]) -> str:
    """Tool help (D02, SPEC §7): flags with type, required, enum, default (information only) and description;
    the fields that need --body and why; a --body example built from the schema; examples. Fits 80 columns."""
    name = str(tool.get("name"))
    mapped = build_tool_flags(tool)
    schema = _schema_object(tool) or {}
    command = _tool_command(server_name, name)
    out: list[str] = []
    annotations = tool.get("annotations") if isinstance(tool.get("annotations"), dict) else {}
    title = tool.get("title") or (annotations or {}).get("title")
    heading = command + (f" - {title}" if isinstance(title, str) and title.strip() else "")
    out += _wrap(heading, HELP_WIDTH)
    description = tool.get("description")
    if isinstance(description, str) and description.strip():
        out.append("")
        out += _wrap(description.strip(), HELP_WIDTH, "  ", "  ")
    hints = _annotation_lines(tool)
    if hints:
        out += ["", "Annotations:", *hints]

    flags = list(mapped.flags.values())
    flags.sort(key=lambda f: not f.required)  # required first, then schema order
    out += ["", "Usage:"]
    optional = [f for f in flags if not f.required]
    usage_parts = [f.usage for f in flags if f.required]
    usage_parts += [f"[{f.usage}]" for f in optional] if len(optional) <= 4 else ["[FLAGS...]"] if optional else []
    out += _fill([command, *usage_parts], HELP_WIDTH, "  ", "      ")
    out += _fill([command, "--body", "JSON|@FILE|-"], HELP_WIDTH, "  ", "      ")

    out += ["", "Flags:" if flags else "Flags: none"]
    spec_width = min(max((len(f.usage) for f in flags), default=0), 44)
    for flag in flags:
        status = "required" if flag.required else "optional"
        spec = _printable(flag.usage)
        if len(spec) <= spec_width:
            out.append(f"  {spec.ljust(spec_width)}  {status}")
        else:
            out += _wrap(spec, HELP_WIDTH, "      ", "  ")
            out.append(f"  {''.ljust(spec_width)}  {status}")
        out += _flag_details(flag)

    if mapped.body_only:
        out += ["", "Fields without a flag (set them with --body):"]
        labels = {n: _field_label(n) for n in mapped.body_only}
        label_width = min(max(len(label) for label in labels.values()), 44)
        for field_ in mapped.body_only.values():
            status = "required" if field_.required else "optional"
            out.append(f"  {labels[field_.name].ljust(label_width)}  {status}")
            out += _wrap(f"no flag: {field_.reason}", HELP_WIDTH, "      ", "      ")
            if isinstance(field_.schema, dict) and isinstance(field_.schema.get("description"), str):
                out += _wrap(field_.schema["description"], HELP_WIDTH, "      ", "      ")
        reserved = [b.name for b in mapped.body_only.values() if b.name in RESERVED_OPTION_NAMES]
        if reserved:
            out += [""] + _wrap(
                f"Reserved names ({', '.join(reserved)}) are bkmcp's own options, so they are never tool flags "
                "and never renamed; pass them inside --body under their exact names.", HELP_WIDTH, "  ", "  ")
    for note in mapped.notes:
        out += [""] + _wrap(f"Note: {note}", HELP_WIDTH, "  ", "  ")

    example, omitted = _example_object(schema, schema, 0, limit=6)
    example = _clip_strings(example)
    out += ["", "--body example (required fields first; placeholder values):"]
    one_line = f"  {command} --body {_shell_quote(_compact_json(example))}"
    if _cell_width(one_line) <= HELP_WIDTH:
        out.append(one_line)
    else:
        start = _cell_width(f"  {command} --body '")
        body_lines = _shell_quote(_pretty_json(example, 2, HELP_WIDTH, start)).split("\n")
        out.append(f"  {command} --body {body_lines[0]}")
        out += body_lines[1:]
    if omitted:
        out.append(f"  ({omitted} more optional field{'s' if omitted != 1 else ''} not shown)")

    out += ["", "Examples:"]
    required_body_only = [b.name for b in mapped.body_only.values() if b.required]
    if flags and not required_body_only:
        chosen = [f for f in flags if f.required] or flags[:1]
        if len(chosen) < 3:
            chosen += [f for f in flags if not f.required and f not in chosen][: 3 - len(chosen)]
        parts = [word for f in chosen for word in _flag_example(f, _clip_strings(_example_value(f.schema, schema,
                                                                                                  f.name)))]
        out += _command_lines([command, *parts])
    elif not required_body_only:
        out.append(f"  {command}")
    else:
        which = "field {} has no flag" if len(required_body_only) == 1 else "fields {} have no flags"
        out += _wrap(f"(required {which.format(', '.join(required_body_only))}, so call this tool with --body as "
                     "shown above)", HELP_WIDTH, "  ", "  ")
    out.append(f"  {command} --body @args.json")
    out.append(f"  {command} --body @args.json --dry-run")
    out += [""] + _wrap(
        "Only the flags you give are sent; defaults are shown for information and never sent. Booleans are "
        "--name=true or --name=false; arrays and objects are JSON. With --body, the JSON object is the "
        "complete arguments and named flags are ignored.", HELP_WIDTH, "  ", "  ")
    return "\n".join(out) + "\n"


def _command_lines(parts: Sequence[str]) -> list[str]:
    """A copy-pasteable example command: words never split, wrapped lines end with a ' \\' continuation."""
    lines = _fill(parts, HELP_WIDTH - 2, "  ", "      ")
    return [line + " \\" for line in lines[:-1]] + lines[-1:]


def _fill(parts: Sequence[str], width: int, first_indent: str, indent: str) -> list[str]:
    """Greedy line fill where each part is unbreakable (usage synopsis, examples)."""
    lines: list[str] = []
    line = first_indent
    for part in parts:
        part = _printable(part)
        if line.strip() and _cell_width(line) + 1 + _cell_width(part) > width:
            lines.append(line)
            line = indent
        line += (" " if line.strip() else "") + part
    lines.append(line)
    return lines


def _field_label(name: str) -> str:
    """A property name as shown in help: plain when it reads unambiguously, else JSON-quoted."""
    if _PLAIN_ASCII_NAME.fullmatch(name) or (
        name and name.isprintable() and not any(ch.isspace() for ch in name) and '"' not in name
    ):
        return name
    return _printable(json.dumps(name, ensure_ascii=False))


def _compact_json(value: Any) -> str:
    """JSON on one line with a space after ':' and ',' (readable in help, still valid JSON, terminal-safe)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_printable(dump_json(k))}: {_compact_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_compact_json(v) for v in value) + "]"
    return _printable(dump_json(value))


def _plain(text: str) -> str:
    return re.sub(r"[\s_\-]+", "", text).lower()


def _pretty_json(value: Any, indent: int, width: int, start: int | None = None) -> str:
    """JSON that keeps short containers on one line and breaks long ones to fit ``width``.

    ``indent`` is the indentation of the line the value is on, ``start`` the column where the value begins.
    """
    compact = _compact_json(value)
    begin = indent if start is None else start
    shown = _cell_width(compact) + 4 * compact.count("'")  # inside '...', shell quoting turns ' into '"'"'
    if not isinstance(value, (dict, list)) or not value or begin + shown + 1 <= width:  # +1: a ',' or the closing '
        return compact
    pad = " " * (indent + 2)
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            label = f"{_printable(dump_json(key))}: "
            items.append(label + _pretty_json(item, indent + 2, width, indent + 2 + _cell_width(label)))
        opening, closing = "{", "}"
    else:
        items = [_pretty_json(item, indent + 2, width) for item in value]
        opening, closing = "[", "]"
    return opening + "\n" + ",\n".join(pad + item for item in items) + "\n" + " " * indent + closing


def _flag_details(flag: ToolFlag) -> list[str]:
    lines: list[str] = []
    schema = flag.schema
    indent = "      "
    title = schema.get("title")
    description = schema.get("description")
    if isinstance(description, str) and description.strip():
        lines += _wrap(description.strip(), HELP_WIDTH, indent, indent)
    elif isinstance(title, str) and _plain(title) != _plain(flag.name):  # pydantic titles just echo the name
        lines += _wrap(title.strip(), HELP_WIDTH, indent, indent)
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        limit = 30  # a huge enum would bury the other flags; --tools has the full list
        plain = [isinstance(v, str) and v and v.strip() == v and "," not in v for v in enum[:limit]]
        shown = ", ".join(v if ok else _short(dump_json(v), 60) for v, ok in zip(enum, plain))
        more = f" … and {len(enum) - limit} more (see --tools)" if len(enum) > limit else ""
        lines += _wrap(f"one of: {shown}{more}", HELP_WIDTH, indent, indent)
    if "const" in schema:
        lines += _wrap(f"must be: {dump_json(schema['const'])}", HELP_WIDTH, indent, indent)
    if "default" in schema:
        lines += _wrap(f"default: {_short(schema['default'], 60)} (information only, not sent)", HELP_WIDTH,
                       indent, indent)
    bounds = [f"{word} {dump_json(schema[key])}" for key, word in (
        ("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<"),
        ("minLength", "min length"), ("maxLength", "max length"), ("minItems", "min items"),
        ("maxItems", "max items")) if key in schema and _is_json_number(schema[key])]
    if bounds:
        lines += _wrap("limits: " + ", ".join(bounds), HELP_WIDTH, indent, indent)
    if flag.kind == "array":
        items = schema.get("items")
        item_type = items.get("type") if isinstance(items, dict) else None
        of = f" of {item_type}" if isinstance(item_type, str) else ""
        lines += _wrap(f"a JSON array{of}, e.g. {flag.option} '[...]' (never comma-separated)", HELP_WIDTH,
                       indent, indent)
    elif flag.kind == "object":
        lines += _wrap(f"a JSON object, e.g. {flag.option} '{{...}}'", HELP_WIDTH, indent, indent)
    return lines


# ======================================================================================================
# 10. Resident mode
# ======================================================================================================

# -- 10.1 registry and credentials (SPEC §11.3, §11.4) -------------------------------------------------



# -- 10.2 sessions, injected names, events, the command protocol (SPEC §11.1, §11.2, §11.5, §11.6) ----



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
            hint = "quote values that contain spaces"
            last = inv.tool_tokens[-1] if inv.tool_tokens else None
            if last is not None and not last.has_equals and (last.value or "").startswith("-"):
                # "--loud --text x": --loud took "--text" as its value, which left "x" over
                hint = (f"--{last.name} took {last.value!r} as its value; a boolean flag needs "
                        f"--{last.name}=true or --{last.name}=false, and a value starting with '-' can be given as "
                        f"--{last.name}=VALUE")
            raise UsageError(f"unexpected argument {token!r}", hint=hint)
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
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
            raise UsageError(f"cannot read --body file {path!r}: {getattr(exc, 'strerror', None) or exc}") from None
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
        data["url"] = redact_url(server.url or "")
        # credential headers by name, and any other header that repeats a known secret value (SPEC §4)
        data["headers"] = {k: server.redactor.scrub(v) for k, v in redact_headers(server.headers).items()}
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
        self.deadline: Deadline | None = None  # the remote operation's budget, once it started

    def emit_text(self, text: str) -> int:
        self.envr.stdout.write(text if text.endswith("\n") else text + "\n")
        return EXIT_OK

    def emit_envelope(self, envelope: dict[str, Any], jq: JqProgram | None, status: int) -> int:
        """Write the envelope, or each ``--jq`` value as it comes (flushed, within the budget). A reader that goes
        away ends the output quietly: ``main`` maps the ``BrokenPipeError`` to the exit status."""
        out = self.envr.stdout
        try:
            if jq is not None:
                try:
                    for line in jq.stream(envelope, self.jq_deadline()):
                        out.write(line + "\n")
                        out.flush()
                except JqHalt as halt:
                    out.flush()
                    self.envr.stderr.write(halt.message)
                    self.envr.stderr.flush()
                    return halt.status if envelope.get("ok") is True else status  # a failure is never hidden
            else:
                pretty = 2 if getattr(out, "isatty", lambda: False)() else None
                out.write(dump_json(envelope, indent=pretty) + "\n")
            out.flush()
        except BrokenPipeError:
            if out is sys.__stdout__:  # the interpreter would flush what is left at exit, fail again, exit 120
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, out.fileno())
                os.close(devnull)
            raise
        return status

    def jq_deadline(self) -> Deadline:
        """The budget of ``--jq``: what the operation left of ``--timeout``, at least ``JQ_MIN_BUDGET`` (so a
        timed-out envelope can still be projected); the whole ``--timeout`` when nothing remote ran (dry run)."""
        timeout = parse_duration(self.inv.timeout) if self.inv.timeout is not None else DEFAULT_TIMEOUT
        if self.deadline is None:
            return Deadline(timeout)
        return Deadline(max(self.deadline.end - time.monotonic(), min(timeout, JQ_MIN_BUDGET)))

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
        # help (root, server, tool; bare `bkmcp <server>` too) is never projected, so --jq is not even compiled
        projected = inv.jq is not None and not inv.help and (inv.check or inv.tools or inv.tool is not None)
        jq = compile_jq(inv.jq) if projected and inv.jq is not None else None
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
        deadline = self.deadline = Deadline(timeout)
        try:
            self.remote_started = True
            if inv.check:
                data = run_check(server, deadline=deadline, insecure=inv.insecure, log=self.log)
                return self.emit_envelope(build_success(data), jq, EXIT_OK)
            if inv.tools:
                data = run_tools(server, deadline=deadline, insecure=inv.insecure, log=self.log)
                # tools stay exactly as received; how each maps to flags (and what needs --body) sits beside them
                data["cli"] = {str(t.get("name")): describe_cli(t) for t in data["tools"] if isinstance(t, dict)}
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
                arguments = parse_tool_arguments(tool, inv.tool_tokens, server_name=server.name)
            else:
                ignored = check_tool_tokens(tool, inv.tool_tokens, server_name=server.name)
                if ignored:
                    self.log.warn(f"--body is the complete arguments object; not sent: {', '.join(ignored)}")
            self.log.debug(validate_arguments(tool, arguments, deadline=deadline).describe())
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
