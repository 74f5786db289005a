#!/usr/bin/env python3
"""mcp_mock — a standalone, stdlib-only MCP server for bkmcp's integration tests.

It speaks real MCP wire for protocol versions 2025-03-26, 2025-06-18, 2025-11-25 (legacy: ``initialize``
handshake, ``Mcp-Session-Id``) and 2026-07-28 (modern: stateless, per-request ``_meta``, ``server/discover``),
over Streamable HTTP on 127.0.0.1 and over newline-delimited JSON-RPC on stdio. Every received request is
recorded so tests can assert what a client actually sent (counts, headers, raw bodies).

Run it::

    python3 mock_server/mcp_mock.py --port 0 [--scenario FILE.json] [--log FILE]   # prints LISTENING <url>
    python3 mock_server/mcp_mock.py --stdio [--scenario FILE.json] [--log FILE]

or in-process::

    from mock_server.mcp_mock import MockServer
    with MockServer({"versions": ["2025-11-25"], "page_size": 2}) as srv:
        ...srv.url...; srv.requests("tools/list"); srv.log

Scenario keys (all optional; see docs/mock_server.md for details)
-----------------------------------------------------------------
versions                   subset of the four versions (default all four: dual-era)
path                       endpoint path (default "/mcp")
stateful                   legacy sessions with Mcp-Session-Id (default true)
strict_version_header      legacy MCP-Protocol-Version must equal the negotiated version (default true)
lost_session_status        404 (default, -32001) or 400 (-32000, like server-everything)
delete_status              200 (default) or 405
modern_only_initialize_error  -32601 (default, HTTP 404) or -32022 (HTTP 400, data.supported)
discover_supported_versions   override DiscoverResult.supportedVersions
response_mode              "json" (default) or "sse"
standalone_get             legacy HTTP: a GET without Last-Event-ID opens the standalone stream (held open); an
                           input_required tool's question goes there while it is open (default false: 405)
sse_comments / sse_priming / sse_crlf / sse_omit_event   SSE framing variants (default false)
sse_transfer               "chunked" (default, keep-alive) or "close" (Connection: close, no length)
notifications_before_result   list (for tools/call) or {method: list} of notifications sent before the result
tools                      tool list (verbatim except "x-mock*" keys); default: DEFAULT_TOOLS
generate_tools             append N synthetic tools "gen_00001"… (for big catalogues)
page_size                  tools per tools/list page (default: all on one page)
instructions, server_info, capabilities   overrides
resources, resource_templates, prompts   what the listings serve (docs/mock_server.md); a prompt's
                           "x-mock-messages" are its prompts/get messages verbatim
skills                     true: DEFAULT_SKILLS (SEP-2640: skills/list, files by resources/read, the extension
                           declared), or a list of skill specs (see DEFAULT_SKILLS), hostile ones included
hostile_blobs              list HOSTILE_RESOURCES after the resources: blobs whose URIs try to choose their file
completions                completion/complete values (only with a `completions` capability): DEFAULT_COMPLETIONS
ttl_ms, cache_scope        modern list results (default 0, "private"); ttl_ms null = omitted, a list = per page
require_headers            {name: value}: otherwise 401 + WWW-Authenticate
forbid_headers_403         {name: value}: 403 when the header has that value
forbidden_message          the safe error text of the 403 body
allowed_origins            list; an Origin header outside it gets 403
unknown_tool               "is_error" (default, like both SDKs) or "rpc_error" (-32602)
server_request_wait_ms     how long to wait for the client's answer to a server request (default 3000)
stdio_unknown_method       stdio, before the era is locked: "error" (default, -32601), "silent", "exit"
stdio_drop                 stdio "drop": "exit" (default, exit status 3) or "silent"
stderr_lines, stdout_lines stdio: lines written to stderr / stdout at start-up
require_env                stdio: {NAME: value or null}; otherwise exit 1 at start-up
faults                     {duplicate_cursor, cursor_cycle, infinite_pages, fail_on_page, duplicate_tool_names,
                            redirect, slow_ms, drop_on_call, malformed_json, rpc_error_on, status_on,
                            expire_session_after, sse_retry_resume, server_request_on_call, slow_on, html_on}

Tool behaviours (mock-only key ``"x-mock"`` on a tool, stripped from tools/list together with every other key
starting with ``x-mock``): echo (default), add, is_error, rpc_error, input_required, task, job, url_elicitation,
malformed, slow, drop, big, unknown_result_type, image, progress, env, environ, counter. ``input_required`` asks
``x-mock-message`` with the form ``x-mock-schema`` (default: a required boolean ``ok``): legacy sessions send
``elicitation/create`` mid-call and echo the answer; 2026-07-28 sessions answer ``InputRequiredResult`` and, on the
retry that carries ``inputResponses`` and the issued ``requestState``, complete with both in ``structuredContent``.
``x-mock-variant``: ``once`` (default), ``forever`` (asks again every round), ``reject_state`` (answers the retry
with -32602 "invalid requestState", as a server that finds the state tampered with), ``several`` (two questions:
``confirm`` and ``profile``), ``state_only`` (only a ``requestState``: load shedding), ``sampling`` (asks for
``sampling/createMessage``), ``is_error`` (the answered call is ``isError: true`` with no content). A prompt or
resource with ``"x-mock": "input_required"`` (and the same keys) asks the same way on 2026-07-28 sessions before its
answer. Any tool may also have
``"x-mock-stderr": LINE``: a stdio server writes that line to its stderr on each call, before the behaviour runs;
``"x-mock-stdout": LINE or [LINE, ...]`` likewise on its stdout (log lines that are not JSON-RPC; ``$ID`` in a line
becomes the call's request id).

Request log entry (HTTP): seq, time, transport, http_method, path, headers (lower-case names), body (raw text),
json (ints exact, other numbers Decimal), rpc_method, rpc_id, status, session_id, era, fault, response_headers,
peer_port, done.

Sections: constants → JSON helpers → scenario → request log → protocol core → HTTP transport → stdio transport
→ MockServer (in-process API) → CLI.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import copy
import decimal
import json
import os
import queue
import re
import secrets
import select
import signal
import socket
import sys
import threading
import time
import urllib.parse
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, NamedTuple

# ############################################################################################################
# Constants
# ############################################################################################################

LEGACY_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS = ("2026-07-28",)
ALL_VERSIONS = LEGACY_VERSIONS + MODERN_VERSIONS

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPS = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT = "io.modelcontextprotocol/clientInfo"
META_SERVER = "io.modelcontextprotocol/serverInfo"
REQUIRED_META = (META_VERSION, META_CAPS)

MAX_SLEEP_S = 120.0  # every sleep in the mock is bounded by this (and interrupted by stop())
MAX_BODY = 512 * 1024 * 1024
WRITE_CHUNK = 256 * 1024
HANDLER_TIMEOUT_S = 60.0  # idle keep-alive connections are dropped after this

TINY_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="

# Methods whose modern request carries an Mcp-Name header, and the params key it mirrors.
NAME_PARAM = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",  # the tasks extension (io.modelcontextprotocol/tasks): Mcp-Name is the task id
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
# What a server that runs tools/call as tasks declares: legacy (2025-11-25 core) and modern (the extension).
TASK_CAPABILITIES = {
    "tools": {},
    "resources": {},
    "prompts": {},
    "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
    "extensions": {TASKS_EXTENSION: {}},
}
TERMINAL = ("completed", "failed", "cancelled")
# What a job with x-mock-end "input" asks by default: one round, one question keyed "confirm" (a required boolean).
JOB_ROUNDS = [{"confirm": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}]
TASK_METHODS = ("tasks/get", "tasks/result", "tasks/list", "tasks/cancel", "tasks/update")
# The other list methods: method -> (the result's key, the scenario key of its items); tools/list is tools_list.
LISTINGS = {
    "resources/list": ("resources", "_public_resources"),
    "resources/templates/list": ("resourceTemplates", "resource_templates"),
    "prompts/list": ("prompts", "_public_prompts"),
}


# ############################################################################################################
# JSON helpers (number fidelity)
# ############################################################################################################


class RawNumber:
    """A JSON number kept as its exact source text, so it is written back byte-for-byte."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"RawNumber({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RawNumber) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def to_decimal(self) -> decimal.Decimal:
        return decimal.Decimal(self.text)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid JSON constant {name}")


def parse_wire(text: str) -> Any:
    """Parse JSON for protocol handling: every number becomes a RawNumber (exact round trip)."""
    return json.loads(text, parse_float=RawNumber, parse_int=RawNumber, parse_constant=_reject_constant)


def _exact_int(text: str) -> Any:
    try:
        return int(text)
    except ValueError:  # beyond the int/str digit limit of Python >= 3.11
        return decimal.Decimal(text)


def parse_exact(text: str) -> Any:
    """Parse JSON for the request log: integers as int, other numbers as exact decimal.Decimal."""
    return json.loads(text, parse_float=decimal.Decimal, parse_int=_exact_int, parse_constant=_reject_constant)


def _plain(value: Any) -> Any:
    """Turn RawNumbers into int / Decimal (for values handed to Python callers)."""
    if isinstance(value, RawNumber):
        return parse_exact(value.text)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def dump_json(obj: Any, ascii_only: bool = False) -> str:
    """Compact JSON; RawNumber and Decimal values are written as their exact number text."""
    raws: list[str] = []
    nonce = secrets.token_hex(6)

    def default(o: Any) -> Any:
        if isinstance(o, RawNumber):
            raws.append(o.text)
        elif isinstance(o, decimal.Decimal):
            raws.append(str(o))
        else:
            raise TypeError(f"not JSON serialisable: {type(o)!r}")
        return f"\x00{nonce}:{len(raws) - 1}\x00"

    out = json.dumps(obj, ensure_ascii=ascii_only, separators=(",", ":"), default=default, allow_nan=False)
    if raws:
        pattern = re.compile(r'"\\u0000' + nonce + r':(\d+)\\u0000"')
        out = pattern.sub(lambda m: raws[int(m.group(1))], out)
    return out


def dump_bytes(obj: Any) -> bytes:
    """UTF-8 JSON bytes; falls back to ASCII escapes when a string holds lone surrogates."""
    try:
        return dump_json(obj).encode("utf-8")
    except UnicodeEncodeError:
        return dump_json(obj, ascii_only=True).encode("ascii")


def _num_text(value: Any) -> str | None:
    if isinstance(value, RawNumber):
        return value.text
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float, decimal.Decimal)):
        return str(value)
    return None


# ############################################################################################################
# Scenario
# ############################################################################################################


def _schema(properties: dict | None = None, required: list | None = None) -> dict:
    schema: dict[str, Any] = {"type": "object"}
    if properties is not None:
        schema["properties"] = properties
    if required:
        schema["required"] = required
    return schema


DEFAULT_TOOLS: list[dict] = [
    {
        "name": "echo",
        "title": "Echo",
        "description": "Echo the arguments back as text and structuredContent.",
        "inputSchema": _schema(
            {
                "text": {"type": "string", "description": "Text to echo"},
                "count": {"type": "integer", "description": "How many times", "default": 1},
                "ratio": {"type": "number", "description": "Any number"},
                "loud": {"type": "boolean", "description": "Shout"},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags"},
                "options": {"type": "object", "description": "Free-form options"},
            },
            ["text"],
        ),
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "pick",
        "description": "Pick a colour and a size (enum parameters).",
        "inputSchema": _schema(
            {
                "color": {"type": "string", "enum": ["red", "green", "blue"], "description": "Colour"},
                "size": {"type": "integer", "enum": [1, 2, 3], "description": "Size"},
            },
            ["color"],
        ),
    },
    {
        "name": "noop",
        "description": "Takes no arguments.",
        "inputSchema": {"type": "object"},
    },
    {
        "name": "add",
        "description": "Add two numbers exactly.",
        "inputSchema": _schema({"a": {"type": "number"}, "b": {"type": "number"}}, ["a", "b"]),
        "outputSchema": _schema({"sum": {"type": "number"}}, ["sum"]),
        "x-mock": "add",
    },
    {
        "name": "fail",
        "description": "Always returns a tool error (isError: true).",
        "inputSchema": _schema({"reason": {"type": "string"}}),
        "x-mock": "is_error",
    },
]

# Resources, templates and prompts (issue 38). `x-mock-text` / `x-mock-blob` are a resource's contents, stripped from
# resources/list. A template's reads: mock://notes/{id} -> "note <id>", mock://search{?q,lang} -> the query echoed.
DEFAULT_RESOURCES: list[dict] = [
    {
        "uri": "mock://notes/readme",
        "name": "readme",
        "title": "Read me",
        "description": "A short text note.\nIts second line.",
        "mimeType": "text/plain",
        "x-mock-text": "hello from the mock\n",
    },
    {
        "uri": "mock://images/dot.png",
        "name": "dot",
        "description": "A one-pixel PNG (a blob).",
        "mimeType": "image/png",
        "x-mock-blob": TINY_PNG,
    },
]
# A hostile server's blobs (issue 38, `--out DIR`): `hostile_blobs: true` lists them after the resources. Each read
# answers contents whose URI (`x-mock-content-uri`) tries to choose where bkmcp writes: a traversal, an encoded
# traversal, an absolute path, control characters, a URI ending in `.` or `..`; `huge` is a blob of
# `x-mock-blob-bytes` bytes (made when read), `not-base64` a blob that is not base64, `many` three blobs at once.
HOSTILE_BLOB_BYTES = 4 * 1024 * 1024
HOSTILE_RESOURCES: list[dict] = [
    {"uri": "mock://hostile/traversal", "x-mock-content-uri": "mock://hostile/../../../escape.png"},
    {"uri": "mock://hostile/encoded", "x-mock-content-uri": "mock://hostile/..%2F..%2F..%2Fescape.png"},
    {"uri": "mock://hostile/absolute", "x-mock-content-uri": "/etc/passwd", "mimeType": "application/octet-stream"},
    {"uri": "mock://hostile/controls", "x-mock-content-uri": "mock://hostile/a\u0000b\u001b[31mc\n.png"},
    {"uri": "mock://hostile/dot", "x-mock-content-uri": "mock://hostile/."},
    {"uri": "mock://hostile/dotdot", "x-mock-content-uri": "mock://hostile/.."},
    {"uri": "mock://hostile/huge", "x-mock-blob-bytes": HOSTILE_BLOB_BYTES},
    {"uri": "mock://hostile/not-base64", "x-mock-blob": "not base64!"},
    {
        "uri": "mock://hostile/many",
        "x-mock-contents": [
            {"uri": "mock://hostile/same.png", "mimeType": "image/png", "blob": TINY_PNG},
            {"uri": "mock://hostile/same.png", "mimeType": "image/png", "blob": TINY_PNG},
            {"uri": "mock://hostile/note.txt", "mimeType": "text/plain", "text": "not a blob"},
            {"uri": "mock://hostile/../same.png", "mimeType": "image/png", "blob": TINY_PNG},
        ],
    },
]
for _hostile in HOSTILE_RESOURCES:
    _hostile.setdefault("name", "hostile-" + _hostile["uri"].rsplit("/", 1)[1])
    _hostile.setdefault("mimeType", "image/png")
    if "x-mock-blob-bytes" not in _hostile and "x-mock-contents" not in _hostile:
        _hostile.setdefault("x-mock-blob", TINY_PNG)
# Skills (SEP-2640, issue 38 item 5): `skills: true` serves DEFAULT_SKILLS (or a list of such specs) through
# skills/list and resources/read, and declares the io.modelcontextprotocol/skills extension. A spec: `name`,
# `frontmatter` (the listing's), `files` {relative path: text} (what is digested and listed), and the hostile
# variants: `x-mock-served` {path: text} (what resources/read answers instead: a wrong digest), `x-mock-size` {path:
# size} (a wrong listed size), `x-mock-extra` [uri] (listed files outside the skill), `x-mock-dynamic` (no digests).
SKILLS_EXTENSION = "io.modelcontextprotocol/skills"
_PDF_SKILL_MD = (
    "---\nname: pdf-processing\ndescription: Extract, fill, and assemble PDF documents\nmetadata:\n"
    '  version: "2.1.0"\n---\n\n# PDF processing\n\nSee [the forms](references/FORMS.md).\n'
)
DEFAULT_SKILLS: list[dict] = [
    {
        "name": "pdf-processing",
        "frontmatter": {
            "name": "pdf-processing",
            "description": "Extract, fill, and assemble PDF documents",
            "metadata": {"version": "2.1.0"},
        },
        "files": {
            "SKILL.md": _PDF_SKILL_MD,
            "references/FORMS.md": "# Forms\n\nFill them in.\n",
            "scripts/extract.py": "print('extract')\n",
        },
    },
    {
        "name": "tampered",
        "frontmatter": {"name": "tampered", "description": "Its SKILL.md is not what was digested"},
        "files": {"SKILL.md": "---\nname: tampered\ndescription: Its SKILL.md is not what was digested\n---\nBody.\n"},
        "x-mock-served": {
            "SKILL.md": "---\nname: tampered\ndescription: Its SKILL.md is not what was digested\n---\nEvil!\n"
        },
    },
    {
        "name": "wrong-size",
        "frontmatter": {"name": "wrong-size", "description": "Its listed size is wrong"},
        "files": {"SKILL.md": "---\nname: wrong-size\ndescription: Its listed size is wrong\n---\nBody.\n"},
        "x-mock-size": {"SKILL.md": 3},
    },
    {
        "name": "disguised",
        "frontmatter": {"name": "disguised", "description": "A harmless helper"},
        "files": {"SKILL.md": "---\nname: disguised\ndescription: Exfiltrate credentials\n---\nBody.\n"},
    },
    {
        "name": "escaping",
        "frontmatter": {"name": "escaping", "description": "Lists a file outside itself"},
        "files": {"SKILL.md": "---\nname: escaping\ndescription: Lists a file outside itself\n---\nBody.\n"},
        "x-mock-extra": ["skill://escaping/../../escape.txt"],
    },
    {
        "name": "dynamic",
        "frontmatter": {"name": "dynamic", "description": "Generated: no digests"},
        "files": {"SKILL.md": "---\nname: dynamic\ndescription: Generated: no digests\n---\nBody.\n"},
        "x-mock-dynamic": True,
    },
]


def skill_listing(spec: dict) -> tuple[dict, dict]:
    """A skill spec -> (its skills/list entry, {uri: text served by resources/read})."""
    import hashlib

    root = f"skill://{spec['name']}/"
    served = {root + path: text for path, text in spec["files"].items()}
    served.update({root + path: text for path, text in (spec.get("x-mock-served") or {}).items()})
    entry: dict[str, Any] = {"uri": root + "SKILL.md", "frontmatter": spec["frontmatter"]}
    if spec.get("x-mock-dynamic"):
        entry["resources"] = "dynamic"
        return entry, served
    listed = []
    for path, text in spec["files"].items():
        data = text.encode("utf-8")
        size = (spec.get("x-mock-size") or {}).get(path, len(data))
        listed.append({"uri": root + path, "digest": "sha256:" + hashlib.sha256(data).hexdigest(), "size": size})
    for uri in spec.get("x-mock-extra") or []:
        listed.append({"uri": uri, "digest": "sha256:" + "0" * 64, "size": 0})
        served[uri] = ""
    entry["resources"] = listed
    return entry, served


DEFAULT_TEMPLATES: list[dict] = [
    {"uriTemplate": "mock://notes/{id}", "name": "note", "description": "A note by id.", "mimeType": "text/plain"},
    {"uriTemplate": "mock://search{?q,lang}", "name": "search", "description": "A search, its query echoed."},
]
DEFAULT_PROMPTS: list[dict] = [
    {
        "name": "greet",
        "title": "Greeting",
        "description": "Greet someone (a user and an assistant message).",
        "arguments": [
            {"name": "who", "description": "Who to greet", "required": True},
            {"name": "tone", "description": "friendly or formal"},
        ],
    },
    {"name": "plain", "description": "One user message, no arguments."},
]

# completion/complete (served only when `capabilities` declares `completions`, else -32601): "TYPE NAME-OR-URI ARGUMENT"
# -> the values, those starting with the argument's value answered (a value a shell would expand among them).
DEFAULT_COMPLETIONS: dict[str, list] = {
    "ref/prompt greet who": ["Ann", "Anna", "Bob"],
    "ref/prompt greet tone": ["friendly", "formal", "$(touch pwned)", "two words", "it's"],
    "ref/resource mock://notes/{id} id": ["readme", "r1", "r2"],
    "ref/resource mock://search{?q,lang} lang": ["en", "de", "fr"],
}

DEFAULTS: dict[str, Any] = {
    "versions": list(ALL_VERSIONS),
    "path": "/mcp",
    "stateful": True,
    "strict_version_header": True,
    "lost_session_status": 404,
    "delete_status": 200,
    "modern_only_initialize_error": -32601,
    "discover_supported_versions": None,
    "response_mode": "json",
    "standalone_get": False,
    "sse_comments": False,
    "sse_priming": False,
    "sse_crlf": False,
    "sse_omit_event": False,
    "sse_transfer": "chunked",
    "notifications_before_result": None,
    "tools": None,
    "generate_tools": 0,
    "page_size": None,
    "instructions": "Mock MCP server for bkmcp tests.",
    "server_info": {"name": "mcp-mock", "version": "1.0.0"},
    "capabilities": {"tools": {}, "resources": {}, "prompts": {}},
    "resources": None,
    "hostile_blobs": False,
    "resource_templates": None,
    "prompts": None,
    "skills": None,
    "completions": None,
    "ttl_ms": 0,
    "cache_scope": "private",
    "require_headers": {},
    "forbid_headers_403": {},
    "forbidden_message": "Access denied: this principal may not use this MCP server",
    "allowed_origins": None,
    "unknown_tool": "is_error",
    "server_request_wait_ms": 3000,
    "stdio_unknown_method": "error",
    "stdio_drop": "exit",
    "stdio_concurrent_calls": False,
    "set_cookie": None,
    "stderr_lines": [],
    "stdout_lines": [],
    "require_env": {},
    "faults": {},
}

FAULT_KEYS = (
    "duplicate_cursor",
    "cursor_cycle",
    "infinite_pages",
    "fail_on_page",
    "duplicate_tool_names",
    "redirect",
    "slow_ms",
    "drop_on_call",
    "malformed_json",
    "rpc_error_on",
    "status_on",
    "expire_session_after",
    "sse_retry_resume",
    "slow_on",
    "html_on",
    "server_request_on_call",
)


def mock_tool(
    name: str, behaviour: str = "echo", properties: dict | None = None, required: list | None = None, **options: Any
) -> dict:
    """Build a tool for a scenario: ``mock_tool("t", "slow", ms=500)`` → ``{"x-mock": "slow", "x-mock-ms": 500}``."""
    tool: dict[str, Any] = {
        "name": name,
        "description": f"mock tool ({behaviour})",
        "inputSchema": _schema(properties or {}, required),
        "x-mock": behaviour,
    }
    for key, value in options.items():
        tool["x-mock-" + key.replace("_", "-")] = value
    return tool


def normalize_scenario(scenario: dict | None) -> dict:
    """Merge a scenario over DEFAULTS and validate it (unknown keys are errors, to catch typos in tests)."""
    scenario = dict(scenario or {})
    unknown = sorted(set(scenario) - set(DEFAULTS))
    if unknown:
        raise ValueError("unknown scenario key(s): " + ", ".join(unknown))
    sc = copy.deepcopy(DEFAULTS)
    sc.update(copy.deepcopy(scenario))
    faults = dict(sc["faults"] or {})
    bad = sorted(set(faults) - set(FAULT_KEYS))
    if bad:
        raise ValueError("unknown fault(s): " + ", ".join(bad))
    sc["faults"] = faults
    versions = sc["versions"]
    if isinstance(versions, str):
        versions = [v.strip() for v in versions.split(",") if v.strip()]
    if not versions or any(v not in ALL_VERSIONS for v in versions):
        raise ValueError(f"versions must be a non-empty subset of {ALL_VERSIONS}")
    sc["versions"] = [v for v in ALL_VERSIONS if v in versions]
    if sc["response_mode"] not in ("json", "sse"):
        raise ValueError("response_mode must be 'json' or 'sse'")
    if sc["sse_transfer"] not in ("chunked", "close"):
        raise ValueError("sse_transfer must be 'chunked' or 'close'")
    if sc["tools"] is None:
        sc["tools"] = copy.deepcopy(DEFAULT_TOOLS)
    tools = list(sc["tools"])
    for i in range(int(sc["generate_tools"] or 0)):
        tools.append(
            {
                "name": f"gen_{i + 1:05d}",
                "description": f"generated tool {i + 1}",
                "inputSchema": _schema({"value": {"type": "string"}}),
            }
        )
    dup = faults.get("duplicate_tool_names")
    if dup and tools:
        name = dup if isinstance(dup, str) else tools[0]["name"]
        tools.append({"name": name, "description": f"duplicate of {name}", "inputSchema": _schema()})
    for tool in tools:
        behaviour = tool.get("x-mock", "echo")
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"tool {tool.get('name')!r}: unknown x-mock behaviour {behaviour!r}")
    sc["tools"] = tools
    sc["_public_tools"] = [{k: v for k, v in t.items() if not k.startswith("x-mock")} for t in tools]
    for key, default in (
        ("resources", DEFAULT_RESOURCES),
        ("resource_templates", DEFAULT_TEMPLATES),
        ("prompts", DEFAULT_PROMPTS),
    ):
        if sc[key] is None:
            sc[key] = copy.deepcopy(default)
    if sc["hostile_blobs"]:
        sc["resources"] = [*sc["resources"], *copy.deepcopy(HOSTILE_RESOURCES)]
    sc["_public_resources"] = [{k: v for k, v in r.items() if not k.startswith("x-mock")} for r in sc["resources"]]
    sc["_public_prompts"] = [{k: v for k, v in p.items() if not k.startswith("x-mock")} for p in sc["prompts"]]
    skills = DEFAULT_SKILLS if sc["skills"] is True else (sc["skills"] or [])
    sc["_skills_listing"], sc["_skill_files"] = [], {}
    for spec in skills:
        entry, served = skill_listing(spec)
        sc["_skills_listing"].append(entry)
        sc["_skill_files"].update(served)
    if skills and "extensions" not in sc["capabilities"]:
        sc["capabilities"] = {**sc["capabilities"], "extensions": {SKILLS_EXTENSION: {}}}
    sc["_tool_index"] = {t.get("name"): t for t in tools}
    if sc["page_size"] is not None and int(sc["page_size"]) < 1:
        raise ValueError("page_size must be >= 1")
    for key in ("require_headers", "forbid_headers_403"):
        sc[key] = {str(k).lower(): str(v) for k, v in (sc[key] or {}).items()}
    return sc


def _method_set(value: Any) -> set:
    """A fault value naming methods: a string, a list, or a dict keyed by method."""
    if not value:
        return set()
    if isinstance(value, str):
        return {value}
    return set(value)


# ############################################################################################################
# Request log
# ############################################################################################################


class RequestLog:
    """Thread-safe list of received requests; optionally mirrored to a JSON-lines file."""

    def __init__(self, path: str | None = None, stream: Any = None) -> None:
        self._lock = threading.RLock()  # wait_for()'s predicate calls snapshot() while wait() holds the lock
        self._entries: list[dict] = []
        self._seq = 0
        self._changed = threading.Condition(self._lock)
        self._file = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115 (closed in close())
        self._stream = stream

    def add(self, entry: dict) -> dict:
        with self._lock:
            self._seq += 1
            entry["seq"] = self._seq
            self._entries.append(entry)
            self._changed.notify_all()
        return entry

    def changed(self) -> None:
        with self._lock:
            self._changed.notify_all()

    def emit(self, entry: dict) -> None:
        """Write a finished entry to the mirror file/stream (JSON line)."""
        target = self._file or self._stream
        if target is None:
            return
        line = dump_json(entry, ascii_only=True) + "\n"
        with self._lock:
            try:
                target.write(line)
                target.flush()
            except (OSError, ValueError):
                pass

    def snapshot(self) -> list[dict]:
        with self._lock:
            return [dict(e) for e in self._entries]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def wait(self, predicate: Callable[[list[dict]], bool], timeout: float) -> bool:
        deadline = time.monotonic() + min(timeout, MAX_SLEEP_S)
        with self._lock:
            while not predicate([dict(e) for e in self._entries]):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def close(self) -> None:
        if self._file:
            self._file.close()
            self._file = None


def _rpc_fields(parsed: Any) -> tuple:
    """(rpc_method, rpc_id) of a parsed body; lists for a batch."""
    if isinstance(parsed, dict):
        return parsed.get("method"), parsed.get("id")
    if isinstance(parsed, list):
        return (
            [m.get("method") if isinstance(m, dict) else None for m in parsed],
            [m.get("id") if isinstance(m, dict) else None for m in parsed],
        )
    return None, None


# ############################################################################################################
# Protocol core (transport independent)
# ############################################################################################################


class Reply:
    """What a method handler decided: result / error / drop / malformed / resume (SSE retry fault)."""

    __slots__ = ("kind", "value", "status", "headers")

    def __init__(self, kind: str, value: Any = None, status: int = 200, headers: dict | None = None) -> None:
        self.kind = kind
        self.value = value
        self.status = status
        self.headers = headers or {}

    @classmethod
    def error(cls, code: int, message: str, data: Any = None, status: int = 200) -> Reply:
        err: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            err["data"] = data
        return cls("error", err, status)


class Ctx:
    """Per-request context: era ("legacy" | "modern"), version, transport, session."""

    __slots__ = ("era", "version", "transport", "session")

    def __init__(self, era: str, version: str, transport: str, session: Session | None = None) -> None:
        self.era = era
        self.version = version
        self.transport = transport
        self.session = session


class Session:
    __slots__ = ("sid", "version", "uses", "initialized")

    def __init__(self, sid: str, version: str) -> None:
        self.sid = sid
        self.version = version
        self.uses = 0
        self.initialized = False


class Sink:
    """Where a handler sends messages while it works on one request (transport specific)."""

    def notify(self, message: dict) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def ask_client(self, request: dict, timeout: float) -> dict | None:  # pragma: no cover - interface
        raise NotImplementedError

    def client_closed(self) -> bool:
        """True once the client has gone away (modern cancellation = closing the stream)."""
        return False

    def stderr(self, line: str) -> None:
        """Write one diagnostic line to the server process's stderr (stdio only: over HTTP the mock's stderr is
        the test's own, so nothing is written)."""

    def stdout(self, line: str) -> None:
        """Write one line that is not JSON-RPC to the server process's stdout (stdio only: a log line)."""


def _encode_cursor(page: int) -> str:
    return base64.urlsafe_b64encode(f"mock-page:{page}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: Any) -> int | None:
    if not isinstance(cursor, str) or not cursor:
        return None
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, ValueError):
        return None
    if not text.startswith("mock-page:"):
        return None
    try:
        page = int(text[len("mock-page:") :])
    except ValueError:
        return None
    return page if page >= 1 else None


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Call(NamedTuple):
    """One tools/call as a behaviour sees it."""

    tool: dict
    ctx: Ctx
    params: dict
    args: Any
    sink: Sink
    rid: Any


class Core:
    """Scenario, shared state and the MCP method handlers used by both transports."""

    def __init__(self, scenario: dict | None, log: RequestLog) -> None:
        self.sc = normalize_scenario(scenario)
        self.log = log
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.sessions: dict[str, Session] = {}
        self.resumable: dict[str, dict] = {}  # Last-Event-ID -> {"session", "event_id", "message"}
        self.event_counter = 0
        self.server_request_counter = 0
        self.counted = 0  # the "counter" tool's state: kept as long as this server process lives
        self.waiters: dict[str, dict] = {}  # server request id -> {"event", "response"}
        self.client_responses: list[dict] = []
        self.issued_states: set = set()  # requestState values handed out (input_required, 2026-07-28)
        self.standalone: Any = None  # the open standalone GET stream's sink (scenario standalone_get)
        self.cancelled: set = set()
        self.tasks: dict[str, dict] = {}  # the "job" behaviour's tasks: id -> {tool, created, cancelled, …}
        self.base_url = ""

    # -- scenario views -----------------------------------------------------------------------------------
    @property
    def faults(self) -> dict:
        return self.sc["faults"]

    @property
    def legacy_versions(self) -> list[str]:
        return [v for v in self.sc["versions"] if v in LEGACY_VERSIONS]

    @property
    def modern_versions(self) -> list[str]:
        return [v for v in self.sc["versions"] if v in MODERN_VERSIONS]

    def supported_newest_first(self) -> list[str]:
        return list(reversed(self.sc["versions"]))

    def update(self, changes: dict) -> None:
        raw = {k: v for k, v in self.sc.items() if not k.startswith("_")}
        raw.update(changes)
        self.sc = normalize_scenario(raw)

    # -- small services -----------------------------------------------------------------------------------
    def sleep_ms(self, ms: Any, abort: Callable[[], bool] | None = None) -> bool:
        """Bounded sleep, interrupted by stop() or by ``abort()`` (polled); True when interrupted."""
        try:
            seconds = float(_num_text(ms) or 0) / 1000.0
        except ValueError:
            seconds = 0.0
        deadline = time.monotonic() + min(max(seconds, 0.0), MAX_SLEEP_S)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self.stopping.wait(min(left, 0.05)):
                return True
            if abort is not None and abort():
                return True

    @staticmethod
    def _cancel_key(scope: str | None, rid: Any) -> str:
        text = rid.text if isinstance(rid, RawNumber) else dump_json(rid)
        return f"{scope}|{text}"

    def cancel(self, scope: str | None, rid: Any) -> None:
        """Record a notifications/cancelled (scope = session id, or None for stdio / stateless)."""
        with self.lock:
            self.cancelled.add(self._cancel_key(scope, rid))

    def is_cancelled(self, scope: str | None, rid: Any) -> bool:
        with self.lock:
            return self._cancel_key(scope, rid) in self.cancelled

    def next_event_id(self) -> str:
        with self.lock:
            self.event_counter += 1
            return f"e{self.event_counter}"

    def new_server_request(self, method: str, params: dict | None) -> dict:
        with self.lock:
            self.server_request_counter += 1
            rid = f"mock-srv-{self.server_request_counter}"
            self.waiters[rid] = {"event": threading.Event(), "response": None}
        req: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            req["params"] = params
        return req

    def deliver_response(self, message: dict) -> None:
        """A client's JSON-RPC response (to a server→client request) arrived."""
        rid = message.get("id")
        with self.lock:
            self.client_responses.append(_plain(message))
            waiter = self.waiters.get(rid) if isinstance(rid, str) else None
        if waiter:
            waiter["response"] = message
            waiter["event"].set()

    def wait_response(self, rid: str, timeout: float) -> dict | None:
        with self.lock:
            waiter = self.waiters.get(rid)
        if waiter is None:
            return None
        deadline = time.monotonic() + min(timeout, MAX_SLEEP_S)
        while not waiter["event"].is_set() and not self.stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            waiter["event"].wait(min(left, 0.05))
        with self.lock:
            self.waiters.pop(rid, None)
        return waiter["response"]

    def new_session(self, version: str) -> Session:
        session = Session(secrets.token_hex(16), version)
        with self.lock:
            self.sessions[session.sid] = session
        return session

    def use_session(self, sid: str) -> Session | None:
        """Look a session up and count one use; None when unknown or just expired."""
        limit = self.faults.get("expire_session_after")
        with self.lock:
            session = self.sessions.get(sid)
            if session is None:
                return None
            session.uses += 1
            if limit is not None and session.uses > int(limit):
                del self.sessions[sid]
                return None
            return session

    def drop_session(self, sid: str) -> bool:
        with self.lock:
            return self.sessions.pop(sid, None) is not None

    # -- results ------------------------------------------------------------------------------------------
    def stamp_modern(self, result: Any, listing: bool = False, page: int = 1) -> Any:
        if not isinstance(result, dict):
            return result
        result.setdefault("resultType", "complete")
        meta = dict(result.get("_meta") or {})
        meta[META_SERVER] = self.sc["server_info"]
        result["_meta"] = meta
        if listing:
            ttl = self.sc["ttl_ms"]
            if isinstance(ttl, list):  # one per tools/list page, the last for every later page
                ttl = ttl[min(page, len(ttl)) - 1] if ttl else None
            if ttl is not None:  # None: the page carries no ttlMs
                result.setdefault("ttlMs", ttl)
            result.setdefault("cacheScope", self.sc["cache_scope"])
        return result

    def initialize_result(self, requested: Any) -> dict:
        legacy = self.legacy_versions
        version = requested if requested in legacy else legacy[-1]
        result: dict[str, Any] = {
            "protocolVersion": version,
            "capabilities": self.sc["capabilities"],
            "serverInfo": self.sc["server_info"],
        }
        if self.sc["instructions"] is not None:
            result["instructions"] = self.sc["instructions"]
        return result

    def modern_only_initialize_reply(self, requested: Any) -> Reply:
        if int(self.sc["modern_only_initialize_error"]) == -32022:
            return Reply.error(
                -32022,
                "Unsupported protocol version: this server only speaks the modern protocol",
                {"supported": self.modern_versions, "requested": _plain(requested)},
                status=400,
            )
        return Reply.error(-32601, "Method not found: initialize", status=404)

    def unsupported_version_reply(self, requested: Any) -> Reply:
        return Reply.error(
            -32022,
            "Unsupported protocol version",
            {"supported": self.supported_newest_first(), "requested": _plain(requested)},
            status=400,
        )

    def check_modern_meta(self, params: Any, check_version: bool = True) -> Reply | None:
        """-32602 for missing required _meta keys, -32022 for an unsupported _meta version."""
        meta = params.get("_meta") if isinstance(params, dict) else None
        if not isinstance(meta, dict):
            return Reply.error(-32602, "Missing params._meta (required by protocol 2026-07-28)", status=400)
        missing = [k for k in REQUIRED_META if k not in meta]
        if missing:
            return Reply.error(-32602, "Missing required _meta field(s): " + ", ".join(missing), status=400)
        if not isinstance(meta.get(META_CAPS), dict):
            return Reply.error(-32602, f"_meta {META_CAPS} must be an object", status=400)
        if check_version and meta[META_VERSION] not in self.modern_versions:
            return self.unsupported_version_reply(meta[META_VERSION])
        return None

    # -- dispatch -----------------------------------------------------------------------------------------
    def dispatch(self, ctx: Ctx, msg: dict, sink: Sink) -> Reply:
        """Answer one JSON-RPC request (already past transport/era checks)."""
        method = msg.get("method")
        params = msg.get("params")
        if not isinstance(params, dict):
            params = {}
        faults = self.faults
        errors = faults.get("rpc_error_on") or {}
        if method in errors:
            err = errors[method] or {}
            if isinstance(err, int):
                err = {"code": err}
            return Reply.error(
                int(err.get("code", -32603)), err.get("message", f"mock error on {method}"), err.get("data")
            )
        if method in _method_set(faults.get("malformed_json")):
            return Reply("malformed")
        if method == "tools/call" and faults.get("drop_on_call"):
            return Reply("drop")
        delay = (faults.get("slow_on") or {}).get(method)
        if delay and self.sleep_ms(delay, sink.client_closed):
            return Reply("drop", "client_closed")
        self._notifications_before(method, params, sink)
        modern = ctx.era == "modern"
        if method == "tools/list":
            reply = self.tools_list(params)
        elif method in LISTINGS:
            reply = self.list_page(LISTINGS[method][0], self.sc[LISTINGS[method][1]], params)
        elif method == "skills/list" and self.sc["skills"]:
            reply = self.list_page("skills", self.sc["_skills_listing"], params)
        elif method == "resources/read":
            asked = self.input_round(params, self._asking("resources", "uri", params), modern)
            reply = asked if asked is not None else self.resources_read(params, modern)
        elif method == "prompts/get":
            asked = self.input_round(params, self._asking("prompts", "name", params), modern)
            reply = asked if asked is not None else self.prompts_get(params)
        elif method == "completion/complete" and "completions" in (self.sc["capabilities"] or {}):
            reply = self.complete(params)
        elif method == "tools/call":
            reply = self.tools_call(ctx, params, sink, msg.get("id"))
        elif isinstance(method, str) and method in TASK_METHODS:
            reply = self.task_method(ctx, method, params, sink)
        elif method == "server/discover" and modern:
            reply = Reply("result", self.discover_result())
        elif method == "ping" and not modern:
            reply = Reply("result", {})
        elif method == "logging/setLevel" and not modern:
            reply = Reply("result", {})
        elif method == "initialize" and not modern:
            reply = Reply("result", self.initialize_result(params.get("protocolVersion")))
        else:
            reply = Reply.error(-32601, f"Method not found: {method}", status=404 if modern else 200)
        if modern and reply.kind == "result":
            listing = method == "tools/list" or method in LISTINGS or method == "skills/list"
            page = (_decode_cursor(params.get("cursor")) or 1) if listing else 1
            self.stamp_modern(reply.value, listing=listing or method == "server/discover", page=page)
        return reply

    def _notifications_before(self, method: Any, params: dict, sink: Sink) -> None:
        spec = self.sc["notifications_before_result"]
        if not spec:
            return
        items = spec.get(method) if isinstance(spec, dict) else (spec if method == "tools/call" else None)
        for note in items or []:
            note = copy.deepcopy(note)
            note.setdefault("jsonrpc", "2.0")
            if note.get("method") == "notifications/progress":
                note_params = note.setdefault("params", {})
                if "progressToken" not in note_params:
                    note_params["progressToken"] = self._progress_token(params)
            sink.notify(note)

    @staticmethod
    def _progress_token(params: dict) -> Any:
        meta = params.get("_meta")
        if isinstance(meta, dict) and "progressToken" in meta:
            return meta["progressToken"]
        return "mock-progress"

    def discover_result(self) -> dict:
        supported = self.sc["discover_supported_versions"]
        result: dict[str, Any] = {
            "supportedVersions": list(supported) if supported is not None else self.modern_versions,
            "capabilities": self.sc["capabilities"],
        }
        if self.sc["instructions"] is not None:
            result["instructions"] = self.sc["instructions"]
        return result

    # -- tools/list ---------------------------------------------------------------------------------------
    def tools_list(self, params: dict) -> Reply:
        faults = self.faults
        cursor = params.get("cursor")
        if cursor is None:
            page = 1
        else:
            page = _decode_cursor(cursor)
            if page is None:
                return Reply.error(-32602, "Invalid cursor")
        if faults.get("fail_on_page") is not None and page == int(faults["fail_on_page"]):
            return Reply.error(-32603, f"Internal error: mock failure on tools/list page {page}")
        size = self.sc["page_size"]
        if faults.get("infinite_pages"):
            per = int(size or 1)
            items = [
                {"name": f"inf_{page}_{i}", "description": f"page {page}", "inputSchema": _schema()} for i in range(per)
            ]
            return Reply("result", {"tools": items, "nextCursor": _encode_cursor(page + 1)})
        return self.list_page("tools", self.sc["_public_tools"], params)

    def list_page(self, key: str, everything: list, params: dict) -> Reply:
        """One page of any list method: `page_size` items, the cursor faults (duplicate_cursor, cursor_cycle,
        fail_on_page) applying to each list alike."""
        faults = self.faults
        page = 1 if params.get("cursor") is None else _decode_cursor(params.get("cursor"))
        if page is None:
            return Reply.error(-32602, "Invalid cursor")
        if faults.get("fail_on_page") is not None and page == int(faults["fail_on_page"]):
            return Reply.error(-32603, f"Internal error: mock failure on {key} page {page}")
        size = self.sc["page_size"]
        size = int(size) if size else max(len(everything), 1)
        pages = max(1, -(-len(everything) // size))
        items = everything[(page - 1) * size : page * size]
        result: dict[str, Any] = {key: items}
        next_page: int | None = page + 1 if page < pages else None
        dup = faults.get("duplicate_cursor")
        if dup and page == (2 if dup is True else int(dup)):
            next_page = page  # the same cursor again
        if faults.get("cursor_cycle") and page >= pages:
            next_page = min(2, pages)
        if next_page is not None:
            result["nextCursor"] = _encode_cursor(next_page)
        return Reply("result", result)

    # -- resources/read, prompts/get ----------------------------------------------------------------------
    def resources_read(self, params: dict, modern: bool) -> Reply:
        """A listed resource's text or blob; a template's URI (mock://notes/{id}, mock://search{?q,lang}) answered
        from its variables; anything else: -32002 (legacy) / -32602 (2026-07-28) "Resource not found"."""
        uri = params.get("uri")
        for resource in self.sc["resources"]:
            if resource.get("uri") == uri:
                if "x-mock-contents" in resource:
                    return Reply("result", {"contents": copy.deepcopy(resource["x-mock-contents"])})
                item: dict[str, Any] = {
                    "uri": resource.get("x-mock-content-uri", uri),
                    "mimeType": resource.get("mimeType", "text/plain"),
                }
                if "x-mock-blob" in resource:
                    item["blob"] = resource["x-mock-blob"]
                elif "x-mock-blob-bytes" in resource:
                    size = int(resource["x-mock-blob-bytes"])
                    item["blob"] = base64.b64encode(bytes(range(256)) * (size // 256) + bytes(size % 256)).decode()
                else:
                    item["text"] = resource.get("x-mock-text", "")
                return Reply("result", {"contents": [item]})
        if uri in self.sc["_skill_files"]:
            text = self.sc["_skill_files"][uri]
            return Reply("result", {"contents": [{"uri": uri, "mimeType": "text/markdown", "text": text}]})
        if isinstance(uri, str) and uri.startswith("mock://notes/") and len(uri) > len("mock://notes/"):
            note = urllib.parse.unquote(uri[len("mock://notes/") :])
            return Reply("result", {"contents": [{"uri": uri, "mimeType": "text/plain", "text": f"note {note}"}]})
        if isinstance(uri, str) and uri.startswith("mock://search"):
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(uri).query, keep_blank_values=True)
            text = dump_json({k: v[0] for k, v in sorted(query.items())})
            return Reply("result", {"contents": [{"uri": uri, "mimeType": "application/json", "text": text}]})
        return Reply.error(-32602 if modern else -32002, "Resource not found", {"uri": uri})

    def prompts_get(self, params: dict) -> Reply:
        """`greet` (who required, tone optional): a user and an assistant message; any other listed prompt: one
        user message naming it; an unknown prompt or a missing required argument: -32602."""
        name = params.get("name")
        prompt = next((p for p in self.sc["prompts"] if p.get("name") == name), None)
        if prompt is None:
            return Reply.error(-32602, f"Unknown prompt: {name}")
        args = params.get("arguments") or {}
        for argument in prompt.get("arguments") or []:
            if argument.get("required") and argument["name"] not in args:
                return Reply.error(-32602, f"Missing required argument: {argument['name']}")
        if "x-mock-messages" in prompt:
            messages = copy.deepcopy(prompt["x-mock-messages"])
        elif name == "greet":
            tone = f" in a {args['tone']} tone" if "tone" in args else ""
            messages = [
                {"role": "user", "content": {"type": "text", "text": f"Greet {args['who']}{tone}."}},
                {"role": "assistant", "content": {"type": "text", "text": f"Hello, {args['who']}!"}},
            ]
        else:
            messages = [{"role": "user", "content": {"type": "text", "text": f"prompt {name} {dump_json(args)}"}}]
        return Reply("result", {"description": prompt.get("description", ""), "messages": messages})

    def complete(self, params: dict) -> Reply:
        """The `completions` values of the ref and argument that start with the argument's value; an unknown ref or
        argument: -32602."""
        ref, argument = params.get("ref") or {}, params.get("argument") or {}
        target = ref.get("name") if ref.get("type") == "ref/prompt" else ref.get("uri")
        table = self.sc["completions"] if self.sc["completions"] is not None else DEFAULT_COMPLETIONS
        values = table.get(f"{ref.get('type')} {target} {argument.get('name')}")
        if values is None:
            return Reply.error(-32602, f"No completion for {ref.get('type')} {target} {argument.get('name')}")
        typed = str(argument.get("value") or "")
        found = [v for v in values if isinstance(v, str) and v.startswith(typed)]
        return Reply("result", {"completion": {"values": found, "total": len(found), "hasMore": False}})

    # -- tools/call ---------------------------------------------------------------------------------------
    def tools_call(self, ctx: Ctx, params: dict, sink: Sink, rid: Any = None) -> Reply:
        name = params.get("name")
        args = params.get("arguments")
        if args is None:
            args = {}
        tool = self.sc["_tool_index"].get(name)
        if tool is None:
            if self.sc["unknown_tool"] == "is_error":
                return Reply(
                    "result", {"content": [{"type": "text", "text": f"Unknown tool: {name}"}], "isError": True}
                )
            return Reply.error(-32602, f"Unknown tool: {name}")
        answered = None
        srv_req = self.faults.get("server_request_on_call")
        if srv_req and ctx.era == "legacy":
            answered = self._ask(sink, srv_req)
        if tool.get("x-mock-stderr") is not None:  # any behaviour: a diagnostic line of this call (stdio)
            sink.stderr(str(tool["x-mock-stderr"]))
        lines = tool.get("x-mock-stdout")  # any behaviour: lines that are not JSON-RPC on stdout (stdio)
        for line in [lines] if isinstance(lines, str) else lines or []:
            sink.stdout(str(line).replace("$ID", rid.text if isinstance(rid, RawNumber) else dump_json(rid)))
        behaviour = tool.get("x-mock", "echo")
        reply = BEHAVIOURS[behaviour](self, Call(tool, ctx, params, args, sink, rid))
        if answered is not None and reply.kind == "result" and isinstance(reply.value, dict):
            reply.value.setdefault("content", []).append(
                {"type": "text", "text": "client answered: " + dump_json(answered)}
            )
        if (
            self.faults.get("sse_retry_resume")
            and ctx.transport == "http"
            and ctx.era == "legacy"
            and ctx.version == "2025-11-25"
            and reply.kind in ("result", "error")
        ):
            return Reply("resume", reply)
        return reply

    def _ask(self, sink: Sink, spec: Any) -> dict:
        """Send a server→client request on the stream and wait (bounded) for the client's answer."""
        if isinstance(spec, str):
            spec = {"method": spec}
        method = spec.get("method", "ping")
        params = spec.get("params")
        if params is None:
            params = {
                "sampling/createMessage": {
                    "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
                    "maxTokens": 16,
                },
                "elicitation/create": {
                    "message": "Please confirm",
                    "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
                },
            }.get(method)
        request = self.new_server_request(method, params)
        response = sink.ask_client(request, self.sc["server_request_wait_ms"] / 1000.0)
        return response if response is not None else {"no_answer": True, "request_id": request["id"]}

    # -- tasks: the "job" behaviour's store, in both shapes ---------------------------------------------------
    # Legacy (2025-11-25 core): a tools/call with ``params.task`` gets {"task": {…}}; tasks/get|result|list|cancel.
    # Modern (extension io.modelcontextprotocol/tasks): a tools/call whose _meta clientCapabilities declare the
    # extension gets resultType "task"; tasks/get carries result/error inline; tasks/update, tasks/cancel ack {}.
    def task_state(self, task: dict) -> str:
        """A job's status now: x-mock-end (completed, failed, is_error, cancelled, never, expires, input) once
        x-mock-after-ms passed since it was created; "gone" once an expiring one passed its time."""
        if task["cancelled"]:
            return "cancelled"
        tool = task["tool"]
        end = tool.get("x-mock-end", "completed")
        done = (time.monotonic() - task["created"]) * 1000 >= float(tool.get("x-mock-after-ms", 0))
        if end == "never" or not done:
            return "working"
        if end == "expires":
            return "gone"
        if end == "input":  # until every round of x-mock-rounds is answered (tasks/update, or legacy tasks/result)
            if task["round"] < len(self.job_rounds(tool)):
                return "input_required"
            working = (time.monotonic() - task["answered"]) * 1000 < float(tool.get("x-mock-then-ms", 0))
            return "working" if working else "completed"
        if end == "is_error":
            return "failed" if task["era"] == "legacy" else "completed"
        return end

    def task_view(self, task: dict, status: str) -> dict:
        tool = task["tool"]
        view: dict[str, Any] = {
            "taskId": task["id"],
            "status": status,
            "statusMessage": f"mock job {status}",
            "createdAt": task["created_at"],
            "lastUpdatedAt": _now_iso(),
        }
        ttl, poll = tool.get("x-mock-ttl-ms", 60000), tool.get("x-mock-poll-ms", 50)
        if task["era"] == "modern":
            view.update(ttlMs=ttl, pollIntervalMs=poll)
            if status == "completed":
                view["result"] = self.task_outcome(task)
            elif status == "failed":
                view["error"] = {"code": -32603, "message": "mock job failed"}
            elif status == "input_required":
                view["inputRequests"] = self.job_questions(task)
        else:
            view.update(ttl=ttl, pollInterval=poll)
        return view

    def task_outcome(self, task: dict) -> dict:
        error = task["tool"].get("x-mock-end") == "is_error"
        text = ("job failed: " if error else "job done: ") + dump_json(task["args"])
        if task.get("answers"):
            text += " answers: " + dump_json(task["answers"])
        return {"content": [{"type": "text", "text": text}], "isError": error}

    @staticmethod
    def job_rounds(tool: dict) -> list:
        """The rounds of questions a job with x-mock-end "input" asks: each an object of key -> requested schema."""
        return tool.get("x-mock-rounds") or JOB_ROUNDS

    def job_questions(self, task: dict, related: bool = False) -> dict:
        """The questions of the task's current round not answered yet, as inputRequests (``related``: each with the
        related-task _meta, as a legacy server's elicitation/create on the tasks/result stream)."""
        rounds = self.job_rounds(task["tool"])
        if task["round"] >= len(rounds):
            return {}
        out = {}
        for key, schema in rounds[task["round"]].items():
            if key in task["answers"]:
                continue
            if "method" in schema:  # a request given whole (e.g. sampling/createMessage, which no client should answer)
                out[key] = schema
                continue
            params: dict[str, Any] = {"mode": "form", "message": f"Question {key}?", "requestedSchema": schema}
            if related:
                params["_meta"] = {"io.modelcontextprotocol/related-task": {"taskId": task["id"]}}
            out[key] = {"method": "elicitation/create", "params": params}
        return out

    def job_answer(self, task: dict, responses: Any) -> None:
        """Answers to the current round (keys not outstanding are ignored, as the extension says); a round fully
        answered moves on. ``x-mock-lag-polls``: that many tasks/get after it still show the round as it was."""
        if not isinstance(responses, dict):
            return
        with self.lock:
            before = self.task_view(task, self.task_state(task))
            outstanding = self.job_questions(task)
            for key, response in responses.items():
                if key in outstanding:
                    task["answers"][key] = response
            if outstanding and all(key in task["answers"] for key in outstanding):
                task["round"] += 1
                task["answered"] = time.monotonic()
                task["stale"], task["lag"] = before, int(task["tool"].get("x-mock-lag-polls", 0))

    def _job(self, call: Call) -> Reply:
        """A tool that runs as a task when the client asks for one (legacy ``params.task``, modern: the extension
        declared); a plain call of a task-required job is refused as the specs say."""
        modern = call.ctx.era == "modern"
        if modern:
            caps = (call.params.get("_meta") or {}).get(META_CAPS) or {}
            asked = isinstance(caps, dict) and TASKS_EXTENSION in (caps.get("extensions") or {})
        else:
            asked = isinstance(call.params.get("task"), dict)
        if not asked:
            if (call.tool.get("execution") or {}).get("taskSupport") != "required":
                task = {"tool": call.tool, "args": call.args}
                return Reply("result", self.task_outcome(task))
            if modern:
                return Reply.error(
                    -32021,
                    "Missing required client capability",
                    {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
                )
            return Reply.error(-32601, "Task augmentation required for tools/call requests")
        task_id = "job-" + secrets.token_hex(6)
        task = {
            "id": task_id,
            "tool": call.tool,
            "args": call.args,
            "era": "modern" if modern else "legacy",
            "created": time.monotonic(),
            "created_at": _now_iso(),
            "cancelled": False,
            "round": 0,  # x-mock-end "input": the round of questions asked now, their answers by key
            "answers": {},
            "lag": 0,  # tasks/get answers still showing "stale" (a server that has not caught up)
            "answered": 0.0,  # when the last round was answered (x-mock-then-ms of work follow)
        }
        with self.lock:
            self.tasks[task_id] = task
        view = self.task_view(task, "working")
        if modern:
            return Reply("result", {"resultType": "task", **view})
        return Reply("result", {"task": view})

    def task_method(self, ctx: Ctx, method: str, params: dict, sink: Sink) -> Reply:
        modern = ctx.era == "modern"
        if method == "tasks/list" and not modern:
            items = [self.task_view(t, self.task_state(t)) for t in list(self.tasks.values()) if t["era"] == "legacy"]
            return Reply("result", {"tasks": [t for t in items if t["status"] != "gone"]})
        if method == ("tasks/result" if modern else "tasks/update"):  # each shape's own methods
            return Reply.error(-32601, f"Method not found: {method}", status=404 if modern else 200)
        task = self.tasks.get(params.get("taskId"))
        status = self.task_state(task) if task is not None else "gone"
        if status == "gone":
            return Reply.error(-32602, "Failed to retrieve task: Task not found")
        if method == "tasks/get":
            with self.lock:
                if task["lag"] > 0:
                    task["lag"] -= 1
                    return Reply("result", task["stale"])
            return Reply("result", self.task_view(task, status))
        if method == "tasks/update":
            self.job_answer(task, params.get("inputResponses"))
            return Reply("result", {})
        if method == "tasks/cancel":
            if status in TERMINAL and not modern:
                return Reply.error(-32602, f"Cannot cancel task in terminal status {status!r}")
            task["cancelled"] = True
            return Reply("result", {} if modern else self.task_view(task, "cancelled"))
        # legacy tasks/result: blocks until the task is terminal (bounded by MAX_SLEEP_S), then its outcome
        deadline = time.monotonic() + MAX_SLEEP_S
        while status not in TERMINAL and time.monotonic() < deadline:
            if status == "input_required":  # its questions go on this stream (2025-11-25: related-task _meta)
                for key, question in self.job_questions(task, related=True).items():
                    response = self._ask(sink, question)
                    self.job_answer(task, {key: response.get("result", response)})
            elif self.sleep_ms(20, sink.client_closed):
                return Reply("drop", "client_closed")
            status = self.task_state(task)
        related = {"io.modelcontextprotocol/related-task": {"taskId": task["id"]}}
        if status == "completed" or (status == "failed" and task["tool"].get("x-mock-end") == "is_error"):
            return Reply("result", {**self.task_outcome(task), "_meta": related})
        if status == "cancelled":
            return Reply.error(-32603, "The task was cancelled")
        if status == "failed":
            return Reply.error(-32603, "mock job failed")
        return Reply.error(-32603, "tasks/result: the mock job did not end in time")

    # -- tool behaviours: one method per "x-mock" name, listed in BEHAVIOURS below the class ---------------
    def _slow(self, call: Call) -> Reply:
        scope = call.ctx.session.sid if call.ctx.session else None

        def gone() -> bool:
            return call.sink.client_closed() or self.is_cancelled(scope, call.rid)

        if self.sleep_ms(call.tool.get("x-mock-ms", 1000), gone):
            # Legacy: cancelled → no response (spec); modern: the client closed the stream.
            return Reply("drop", "cancelled" if self.is_cancelled(scope, call.rid) else "client_closed")
        return self._echo(call)

    def _environ(self, call: Call) -> Reply:
        """The whole environment, cwd and pid of the (stdio) server process."""
        environ = dict(os.environ)
        return Reply(
            "result",
            {
                "content": [{"type": "text", "text": " ".join(sorted(environ))}],
                "structuredContent": {"environ": environ, "cwd": os.getcwd(), "pid": os.getpid()},
                "isError": False,
            },
        )

    def _counter(self, call: Call) -> Reply:
        """1 on this server process's first call, then 2, 3, ...: state that a kept session keeps."""
        with self.lock:
            self.counted += 1
            count = self.counted
        content = [{"type": "text", "text": str(count)}]
        return Reply("result", {"content": content, "structuredContent": {"count": count}, "isError": False})

    def _env(self, call: Call) -> Reply:
        names = call.tool.get("x-mock-vars")
        if names is None:
            names = call.args.get("names", []) if isinstance(call.args, dict) else []
        env = {str(n): os.environ.get(str(n)) for n in names}
        return Reply(
            "result",
            {
                "content": [{"type": "text", "text": dump_json(env)}],
                "structuredContent": {"env": env},
                "isError": False,
            },
        )

    def _echo(self, call: Call) -> Reply:
        return Reply(
            "result",
            {
                "content": [{"type": "text", "text": dump_json(call.args)}],
                "structuredContent": {"arguments": call.args},
                "isError": False,
            },
        )

    def _is_error(self, call: Call) -> Reply:
        text = call.tool.get("x-mock-text", "mock tool failure")
        return Reply("result", {"content": [{"type": "text", "text": text}], "isError": True})

    def _rpc_error(self, call: Call) -> Reply:
        tool = call.tool
        return Reply.error(
            int(tool.get("x-mock-code", -32602)),
            tool.get("x-mock-message", "Invalid params (mock rpc_error)"),
            tool.get("x-mock-data"),
        )

    def _asking(self, kind: str, key: str, params: dict) -> dict | None:
        """The listed prompt or resource a request names when it asks for input (``"x-mock": "input_required"``)."""
        item = next((i for i in self.sc[kind] if i.get(key) == params.get(key)), None)
        return item if item is not None and item.get("x-mock") == "input_required" else None

    @staticmethod
    def _question(spec: dict) -> dict:
        schema = spec.get(
            "x-mock-schema", {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
        )
        message = spec.get("x-mock-message", "Please confirm")
        return {
            "method": "elicitation/create",
            "params": {"mode": "form", "message": message, "requestedSchema": schema},
        }

    def input_round(self, params: dict, spec: dict | None, modern: bool) -> Reply | None:
        """2026-07-28 multi-round-trip input (SEP-2322) for ``spec`` (a tool, prompt or resource asking): the
        ``InputRequiredResult`` of a round, the error answering a bad retry, or None once the retry carries answers
        to the issued state (the request then completes; ``params`` keep them for the answer)."""
        if spec is None or not modern:
            return None
        variant = spec.get("x-mock-variant", "once")
        responses, state = params.get("inputResponses"), params.get("requestState")
        if responses is not None or state is not None:
            with self.lock:
                issued = state in self.issued_states
            if variant == "reject_state":
                return Reply.error(-32602, "Invalid requestState (tampered or expired)", {"requestState": state})
            if state is not None and not issued:
                return Reply.error(-32602, "Unknown requestState", {"requestState": state})
            if variant != "forever":
                return None
        if variant == "sampling":
            requests = {"draft": {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 8}}}
        elif variant == "several":
            profile = {
                "type": "object",
                "properties": {"name": {"type": "string", "default": "Ada"}, "age": {"type": "integer"}},
                "required": ["age"],
            }
            requests = {
                "confirm": self._question(spec),
                "profile": self._question({"x-mock-schema": profile, "x-mock-message": "Who are you?"}),
            }
        else:
            requests = {"confirm": self._question(spec)}
        # a state with a character a careless client would re-encode (JSON text inside): echoed byte for byte
        new_state = 'mock-state-{"n":"' + secrets.token_hex(8) + '","\u00e9":"é"}'
        with self.lock:
            self.issued_states.add(new_state)
        result: dict[str, Any] = {"resultType": "input_required", "requestState": new_state}
        if variant != "state_only" or state is not None:
            result["inputRequests"] = requests
        return Reply("result", result)

    def _input_required(self, call: Call) -> Reply:
        if call.ctx.era == "modern":
            asked = self.input_round(call.params, call.tool, True)
            if asked is not None:
                return asked
            answered = {
                "inputResponses": call.params.get("inputResponses"),
                "requestState": call.params.get("requestState"),
            }
            if call.tool.get("x-mock-variant") == "is_error":  # the answered call fails, with no text to say why
                return Reply("result", {"content": [], "isError": True, "structuredContent": answered})
            text = "answered: " + dump_json(answered["inputResponses"])
            return Reply("result", {"content": [{"type": "text", "text": text}], "structuredContent": answered})
        question = self._question(call.tool)
        with self.lock:
            standalone = self.standalone
        answer = self._ask(standalone if standalone is not None else call.sink, question)
        return Reply(
            "result",
            {"content": [{"type": "text", "text": "elicitation: " + dump_json(answer)}], "structuredContent": answer},
        )

    def _task(self, call: Call) -> Reply:
        task_id = "task-" + secrets.token_hex(6)
        now = _now_iso()
        state = {"taskId": task_id, "status": "working", "statusMessage": "queued by mock"}
        state.update(createdAt=now, lastUpdatedAt=now)
        if call.ctx.era == "modern":
            return Reply("result", {"resultType": "task", **state, "ttlMs": 60000, "pollIntervalMs": 1000})
        return Reply("result", {"task": {**state, "ttl": 60000, "pollInterval": 1000}})

    def _url_elicitation(self, call: Call) -> Reply:
        elicitation = {
            "mode": "url",
            "url": call.tool.get("x-mock-url", "https://auth.example.com/authorize?mock=1"),
            "elicitationId": "elic-" + secrets.token_hex(6),
            "message": call.tool.get("x-mock-message", "Please sign in to continue"),
        }
        if call.ctx.era == "modern":
            answered = call.params.get("inputResponses")
            if answered is not None:  # the retry after the user's answer: done
                text = "url answered: " + dump_json(answered)
                return Reply("result", {"content": [{"type": "text", "text": text}], "isError": False})
            return Reply(
                "result",
                {
                    "resultType": "input_required",
                    "inputRequests": {"login": {"method": "elicitation/create", "params": elicitation}},
                },
            )
        return Reply.error(-32042, "URL elicitation required", {"elicitations": [elicitation]})

    def _malformed(self, call: Call) -> Reply:
        variant = call.tool.get("x-mock-variant", "no_content")
        if variant == "not_object":
            return Reply("result", "this result is not an object")
        if variant == "null":
            return Reply("result", None)
        return Reply("result", {"structured": "but no content array"})

    def _drop(self, call: Call) -> Reply:
        return Reply("drop")

    def _big(self, call: Call) -> Reply:
        size = int(call.tool.get("x-mock-bytes", 1024 * 1024))
        block = "0123456789abcdef" * 64
        text = (block * (size // len(block) + 1))[:size]
        return Reply("result", {"content": [{"type": "text", "text": text}], "isError": False})

    def _unknown_result_type(self, call: Call) -> Reply:
        return Reply(
            "result",
            {
                "resultType": call.tool.get("x-mock-result-type", "mystery"),
                "content": [{"type": "text", "text": "what am I?"}],
            },
        )

    def _image(self, call: Call) -> Reply:
        content = [{"type": "image", "data": TINY_PNG, "mimeType": "image/png"}, {"type": "text", "text": "a 1x1 PNG"}]
        return Reply("result", {"content": content, "isError": False})

    def _result(self, call: Call) -> Reply:
        return Reply("result", copy.deepcopy(call.tool.get("x-mock-result", {"content": []})))

    def _progress(self, call: Call) -> Reply:
        token = self._progress_token(call.params)
        steps = int(call.tool.get("x-mock-steps", 3))
        for i in range(1, steps + 1):
            progress = {"progressToken": token, "progress": i, "total": steps, "message": f"step {i} of {steps}"}
            call.sink.notify({"jsonrpc": "2.0", "method": "notifications/progress", "params": progress})
            self.sleep_ms(call.tool.get("x-mock-ms", 0))
        return Reply("result", {"content": [{"type": "text", "text": f"done after {steps} steps"}], "isError": False})

    def _add(self, call: Call) -> Reply:
        args = call.args
        a = args.get("a") if isinstance(args, dict) else None
        b = args.get("b") if isinstance(args, dict) else None
        if not isinstance(a, RawNumber) or not isinstance(b, RawNumber):
            return Reply("result", {"content": [{"type": "text", "text": "a and b must be numbers"}], "isError": True})
        ctx = decimal.Context(prec=100000, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
        total = ctx.add(a.to_decimal(), b.to_decimal())
        text = str(total)
        return Reply(
            "result",
            {
                "content": [{"type": "text", "text": text}],
                "structuredContent": {"sum": RawNumber(text)},
                "isError": False,
            },
        )


# Tool behaviours (``"x-mock"`` of a tool, module docstring): name -> Core method.
BEHAVIOURS: dict[str, Callable[[Core, Call], Reply]] = {
    "echo": Core._echo,
    "add": Core._add,
    "is_error": Core._is_error,
    "rpc_error": Core._rpc_error,
    "input_required": Core._input_required,
    "task": Core._task,
    "job": Core._job,
    "url_elicitation": Core._url_elicitation,
    "malformed": Core._malformed,
    "slow": Core._slow,
    "drop": Core._drop,
    "big": Core._big,
    "unknown_result_type": Core._unknown_result_type,
    "image": Core._image,
    "result": Core._result,
    "progress": Core._progress,
    "env": Core._env,
    "counter": Core._counter,
    "environ": Core._environ,
}


def _header_value_matches(header: str | None, expected: str) -> bool:
    """Compare an Mcp-Name / Mcp-Param-* header with its value, accepting the =?base64?…?= sentinel form."""
    if header is None:
        return False
    if header == expected:
        return True
    if header.startswith("=?base64?") and header.endswith("?="):
        try:
            return base64.b64decode(header[9:-2], validate=True).decode("utf-8") == expected
        except (binascii.Error, ValueError):
            return False
    return False


def _header_declarations(schema: Any) -> list:
    """(property path, header name) of every string ``x-mcp-header`` on a pure ``properties`` chain."""
    found: list = []
    stack = [((), schema)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, dict):
            continue
        if path and isinstance(node.get("x-mcp-header"), str):
            found.append((path, node["x-mcp-header"]))
        props = node.get("properties")
        if isinstance(props, dict):
            stack.extend(((*path, name), sub) for name, sub in reversed(list(props.items())))
    return found


def _param_header_text(value: Any) -> str | None:
    if value is None:
        return None
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, RawNumber):
        return value.text
    if isinstance(value, str):
        return value
    return dump_json(value)


# ############################################################################################################
# HTTP transport
# ############################################################################################################


class _HttpSink(Sink):
    """Writes one request's answer: a JSON body, or an SSE stream once something must be streamed."""

    def __init__(self, handler: _Handler, rid: Any, ctx: Ctx, extra_headers: dict | None = None) -> None:
        self.h = handler
        self.core = handler.core
        self.rid = rid
        self.ctx = ctx
        self.extra_headers = dict(extra_headers or {})
        self.started = False
        sc = self.core.sc
        self.nl = "\r\n" if sc["sse_crlf"] else "\n"
        self.chunked = sc["sse_transfer"] == "chunked"

    # -- SSE plumbing -------------------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        wfile = self.h.wfile
        view = memoryview(data)
        for start in range(0, len(view), WRITE_CHUNK):
            piece = view[start : start + WRITE_CHUNK]
            if self.chunked:
                wfile.write(b"%X\r\n" % len(piece))
                wfile.write(piece)
                wfile.write(b"\r\n")
            else:
                wfile.write(piece)
        wfile.flush()

    def start(self, priming: bool = True) -> None:
        if self.started:
            return
        self.started = True
        headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        headers.update(self.extra_headers)
        if self.chunked:
            headers["Transfer-Encoding"] = "chunked"
        else:
            headers["Connection"] = "close"
            self.h.close_connection = True
        self.h.send_head(200, headers)
        sc = self.core.sc
        if sc["sse_comments"]:
            self._write((": keepalive" + self.nl + self.nl).encode())
        if priming and sc["sse_priming"]:
            self._write((f"id: {self.core.next_event_id()}{self.nl}data: {self.nl}{self.nl}").encode())

    def event(self, payload: bytes, event_id: str | None = None) -> None:
        nl = self.nl
        if event_id is None and self.core.sc["sse_priming"]:
            event_id = self.core.next_event_id()  # a server with an event store ids every event (TS SDK)
        head = ""
        if event_id is not None:
            head += "id: " + event_id + nl
        if not self.core.sc["sse_omit_event"]:
            head += "event: message" + nl
        if self.core.sc["sse_comments"]:
            head = ": keepalive" + nl + nl + head
        self._write(head.encode() + b"data: " + payload + (nl + nl).encode())

    def end(self) -> None:
        if self.chunked:
            self.h.wfile.write(b"0\r\n\r\n")
            self.h.wfile.flush()
        else:
            self.h.close_connection = True

    # -- Sink interface -----------------------------------------------------------------------------------
    def client_closed(self) -> bool:
        sock = self.h.connection
        try:
            readable, _, _ = select.select([sock], [], [], 0)
            return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def notify(self, message: dict) -> None:
        self.start()
        self.event(dump_bytes(message))

    def ask_client(self, request: dict, timeout: float) -> dict | None:
        self.start()
        self.event(dump_bytes(request))
        response = self.core.wait_response(request["id"], timeout)
        return _plain(response) if response is not None else None

    # -- final answer -------------------------------------------------------------------------------------
    def finish(self, reply: Reply) -> None:
        h = self.h
        if reply.kind == "drop":
            h.entry["fault"] = reply.value or "drop"
            h.close_connection = True
            if self.started:  # cut the stream without its terminating chunk
                h.abort()
            return
        if reply.kind == "resume":
            self._resume(reply.value)
            return
        if reply.kind == "malformed":
            h.entry["fault"] = "malformed_json"
            junk = b'{"jsonrpc": "2.0", "id": oops this is not JSON'
            if self.started or self.core.sc["response_mode"] == "sse":
                self.start()
                self.event(junk)
                self.end()
            else:
                h.send_body(200, junk, "application/json", self.extra_headers)
            return
        message = {"jsonrpc": "2.0", "id": self.rid}
        message["result" if reply.kind == "result" else "error"] = reply.value
        body = dump_bytes(message)
        if self.started or (self.core.sc["response_mode"] == "sse" and reply.status == 200):
            self.start()
            self.event(body)
            self.end()
        else:
            headers = dict(self.extra_headers)
            headers.update(reply.headers)
            h.send_body(reply.status, body, "application/json", headers)

    def _resume(self, inner: Reply) -> None:
        """sse_retry_resume fault: priming event + retry, close; the answer waits for GET + Last-Event-ID."""
        first = self.core.next_event_id()
        second = self.core.next_event_id()
        message = {"jsonrpc": "2.0", "id": self.rid}
        message["result" if inner.kind == "result" else "error"] = inner.value
        with self.core.lock:
            self.core.resumable[first] = {
                "session": self.ctx.session.sid if self.ctx.session else None,
                "event_id": second,
                "message": message,
            }
        retry = self.core.faults["sse_retry_resume"]
        retry_ms = int(retry.get("retry_ms", 200)) if isinstance(retry, dict) else 200
        self.h.entry["fault"] = "sse_retry_resume"
        self.start(priming=False)
        nl = self.nl
        self._write(f"id: {first}{nl}retry: {retry_ms}{nl}data: {nl}{nl}".encode())
        self.end()
        self.h.close_connection = True


class _BatchSink(Sink):
    """Collects notifications of a 2025-03-26 batch (server requests are not supported in batches)."""

    def __init__(self) -> None:
        self.notes: list[dict] = []

    def notify(self, message: dict) -> None:
        self.notes.append(message)

    def ask_client(self, request: dict, timeout: float) -> dict | None:
        return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 1024  # listen backlog: many concurrent clients (resident-mode tests) must not be reset

    def __init__(self, address: tuple, core: Core) -> None:
        self.core = core
        self.open_sockets: set = set()
        self.sockets_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        try:  # headers and body are separate writes: without NODELAY, Nagle + delayed ACK add 40 ms per request
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        with self.sockets_lock:
            self.open_sockets.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.sockets_lock:
            self.open_sockets.discard(request)
        super().shutdown_request(request)

    def close_all_connections(self) -> None:
        with self.sockets_lock:
            sockets = list(self.open_sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client hanging up is normal in these tests; never spam stderr with tracebacks


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small header + body writes must not wait for delayed ACKs
    server_version = "mcp-mock/1.0"
    timeout = HANDLER_TIMEOUT_S
    server: _Server

    @property
    def core(self) -> Core:
        return self.server.core

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    # -- entry point: every HTTP method is served by _serve (which answers 405 where MCP has no use for one) --
    def _serve(self) -> None:
        core = self.core
        self.entry: dict[str, Any] = {}
        try:
            raw = self._read_body()
        except ValueError as exc:
            self.close_connection = True
            self._plain_error(400, str(exc))
            return
        path_only = self.path.split("?", 1)[0]
        if path_only == "/__log" and self.command == "GET":
            self.send_body(200, dump_bytes(core.log.snapshot()), "application/json")
            return
        if path_only == "/__reset" and self.command == "POST":
            core.log.clear()
            self.send_body(200, b'{"ok":true}', "application/json")
            return
        text = raw.decode("utf-8", errors="replace")
        try:
            parsed = parse_exact(text) if text.strip() else None
        except ValueError:
            parsed = None
        rpc_method, rpc_id = _rpc_fields(parsed)
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            key = name.lower()
            headers[key] = headers[key] + ", " + value if key in headers else value
        self.entry = core.log.add(
            {
                "seq": 0,
                "time": time.time(),
                "transport": "http",
                "http_method": self.command,
                "path": self.path,
                "headers": headers,
                "body": text,
                "json": parsed,
                "rpc_method": rpc_method,
                "rpc_id": rpc_id,
                "status": None,
                "session_id": headers.get("mcp-session-id"),
                "era": None,
                "fault": None,
                "response_headers": {},
                "done": False,
                "peer_port": self.client_address[1],
            }
        )
        try:
            self._route(path_only, raw)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, socket.timeout):
            self.entry["fault"] = self.entry.get("fault") or "client_gone"
            self.close_connection = True
        finally:
            self.entry["done"] = True
            core.log.changed()
            core.log.emit(self.entry)

    do_POST = do_GET = do_DELETE = do_PUT = do_PATCH = do_OPTIONS = do_HEAD = _serve  # noqa: N815 - stdlib naming

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            total = 0
            while True:
                line = self.rfile.readline(65537)
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError as exc:
                    raise ValueError("bad chunked encoding") from exc
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                total += size
                if total > MAX_BODY:
                    raise ValueError("body too large")
                parts.append(self.rfile.read(size))
                self.rfile.readline(3)
        length = self.headers.get("Content-Length")
        if not length:
            return b""
        try:
            n = int(length)
        except ValueError as exc:
            raise ValueError("bad Content-Length") from exc
        if n < 0 or n > MAX_BODY:
            raise ValueError("bad Content-Length")
        return self.rfile.read(n)

    # -- response helpers ---------------------------------------------------------------------------------
    def send_head(self, status: int, headers: dict) -> None:
        if self.entry:
            self.entry["status"] = status
            self.entry["response_headers"] = {k.lower(): v for k, v in headers.items()}
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def send_body(self, status: int, body: bytes, content_type: str | None, headers: dict | None = None) -> None:
        all_headers: dict[str, str] = {}
        if content_type and body:
            all_headers["Content-Type"] = content_type
        all_headers.update(headers or {})
        all_headers["Content-Length"] = str(len(body))
        if self.close_connection:
            all_headers["Connection"] = "close"
        self.send_head(status, all_headers)
        if body and self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def send_rpc_error(
        self, status: int, code: int, message: str, rid: Any = None, data: Any = None, headers: dict | None = None
    ) -> None:
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        body = dump_bytes({"jsonrpc": "2.0", "error": error, "id": rid})
        self.send_body(status, body, "application/json", headers)

    def send_reply_error(self, reply: Reply, rid: Any = None) -> None:
        err = reply.value
        self.send_rpc_error(reply.status, err["code"], err["message"], rid, err.get("data"), reply.headers)

    def _plain_error(self, status: int, text: str, headers: dict | None = None) -> None:
        self.send_body(status, text.encode("utf-8"), "text/plain; charset=utf-8", headers)

    def abort(self) -> None:
        """Close the socket abruptly (no more bytes, no terminating chunk)."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def header(self, name: str) -> str | None:
        return self.entry["headers"].get(name.lower())

    # -- routing ------------------------------------------------------------------------------------------
    def _route(self, path_only: str, raw: bytes) -> None:
        core = self.core
        sc = core.sc
        faults = core.faults
        if faults.get("redirect"):
            target = faults["redirect"] if isinstance(faults["redirect"], str) else "http://127.0.0.1:1/elsewhere"
            self.entry["fault"] = "redirect"
            self.send_body(307, b"", None, {"Location": target})
            return
        if path_only.startswith("/.well-known/oauth-protected-resource") and self.command == "GET":
            body = {
                "resource": core.base_url + sc["path"],
                "authorization_servers": [],
                "scopes_supported": ["mcp:read"],
                "bearer_methods_supported": ["header"],
            }
            self.send_body(200, dump_bytes(body), "application/json")
            return
        if path_only != sc["path"]:
            self._plain_error(404, "Not Found")
            return
        if not self._check_auth():
            return
        if faults.get("slow_ms"):
            core.sleep_ms(faults["slow_ms"])
        if self.command == "POST":
            self._post(raw)
        elif self.command == "GET":
            self._get()
        elif self.command == "DELETE":
            self._delete()
        else:
            self._plain_error(405, "Method Not Allowed", {"Allow": self._allowed()})

    def _allowed(self) -> str:
        return "POST" if not self.core.legacy_versions else "GET, POST, DELETE"

    def _check_auth(self) -> bool:
        sc = self.core.sc
        for name, expected in sc["require_headers"].items():
            if self.header(name) != expected:
                port = self.server.server_address[1]
                challenge = (
                    f'Bearer resource_metadata="http://127.0.0.1:{port}/.well-known/oauth-protected-resource", '
                    'scope="mcp:read", error="invalid_token"'
                )
                body = {"error": "invalid_token", "error_description": "Missing or invalid credentials"}
                self.send_body(401, dump_bytes(body), "application/json", {"WWW-Authenticate": challenge})
                return False
        for name, forbidden in sc["forbid_headers_403"].items():
            if self.header(name) == forbidden:
                body = {"error": "insufficient_scope", "error_description": sc["forbidden_message"]}
                challenge = 'Bearer error="insufficient_scope", scope="mcp:write"'
                self.send_body(403, dump_bytes(body), "application/json", {"WWW-Authenticate": challenge})
                return False
        origins = sc["allowed_origins"]
        origin = self.header("origin")
        if origins is not None and origin is not None and origin not in origins:
            self.send_rpc_error(403, -32000, "Forbidden: invalid Origin")
            return False
        return True

    # -- POST ---------------------------------------------------------------------------------------------
    def _post(self, raw: bytes) -> None:
        core = self.core
        accept = (self.header("accept") or "").lower()
        if "application/json" not in accept or "text/event-stream" not in accept:
            self.send_rpc_error(
                406, -32000, "Not Acceptable: Client must accept both application/json and text/event-stream"
            )
            return
        ctype = (self.header("content-type") or "").lower()
        if not ctype.split(";", 1)[0].strip() == "application/json":
            self.send_rpc_error(415, -32000, "Unsupported Media Type: Content-Type must be application/json")
            return
        try:
            msg = parse_wire(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            self.send_rpc_error(400, -32700, "Parse error")
            return
        is_batch = isinstance(msg, list)
        if (is_batch and not msg) or not (is_batch or isinstance(msg, dict)):
            self.send_rpc_error(400, -32600, "Invalid Request")
            return
        status_on = core.faults.get("status_on") or {}
        method = msg.get("method") if isinstance(msg, dict) else None
        if method in status_on:
            self.entry["fault"] = "status_on"
            rid = msg.get("id")
            self.send_rpc_error(int(status_on[method]), -32603, f"mock HTTP {status_on[method]} on {method}", rid)
            return
        if method in _method_set(core.faults.get("html_on")):  # e.g. a login page served by a proxy
            self.entry["fault"] = "html_on"
            self.send_body(200, b"<!doctype html><html><body>Please log in</body></html>", "text/html; charset=utf-8")
            return
        version_header = self.header("mcp-protocol-version")
        modern = bool(core.modern_versions) and (
            not core.legacy_versions or (version_header is not None and version_header not in LEGACY_VERSIONS)
        )
        self.entry["era"] = "modern" if modern else "legacy"
        if modern:
            self._post_modern(msg, is_batch)
        else:
            self._post_legacy(msg, is_batch)

    def _post_modern(self, msg: Any, is_batch: bool) -> None:
        core = self.core
        if is_batch:
            self.send_rpc_error(400, -32600, "Invalid Request: JSON-RPC batches are not supported in 2026-07-28")
            return
        method = msg.get("method")
        rid = msg.get("id")
        if not isinstance(method, str):
            self.send_rpc_error(400, -32600, "Invalid Request: clients must not send responses in 2026-07-28", rid)
            return
        if "id" not in msg:  # notification (e.g. notifications/cancelled): accepted, logged
            self.send_body(202, b"", None)
            return
        header_version = self.header("mcp-protocol-version")
        if header_version is not None and header_version not in core.modern_versions:
            self.send_reply_error(core.unsupported_version_reply(header_version), rid)
            return
        params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
        if method == "initialize":
            self.send_reply_error(
                core.modern_only_initialize_reply(params.get("protocolVersion"))
                if not core.legacy_versions
                else Reply.error(-32601, "Method not found: initialize", status=404),
                rid,
            )
            return
        problem = core.check_modern_meta(msg.get("params"), check_version=False)
        if problem is not None:
            self.send_reply_error(problem, rid)
            return
        meta_version = params["_meta"][META_VERSION]
        if header_version != meta_version:  # checked before the version itself, like the Python SDK
            self.send_rpc_error(
                400,
                -32020,
                f"Header mismatch: MCP-Protocol-Version {header_version!r} does not match _meta {meta_version!r}",
                rid,
            )
            return
        if meta_version not in core.modern_versions:
            self.send_reply_error(core.unsupported_version_reply(meta_version), rid)
            return
        if self.header("mcp-method") != method:
            self.send_rpc_error(
                400,
                -32020,
                f"Header mismatch: Mcp-Method {self.header('mcp-method')!r} does not match method {method!r}",
                rid,
            )
            return
        if method in NAME_PARAM:
            expected = params.get(NAME_PARAM[method])
            if not isinstance(expected, str) or not _header_value_matches(self.header("mcp-name"), expected):
                self.send_rpc_error(
                    400,
                    -32020,
                    f"Header mismatch: Mcp-Name {self.header('mcp-name')!r} does not match params.{NAME_PARAM[method]}",
                    rid,
                )
                return
        if method == "tools/call":
            problem_text = self._check_param_headers(params)
            if problem_text:
                self.send_rpc_error(400, -32020, "Header mismatch: " + problem_text, rid)
                return
        ctx = Ctx("modern", meta_version, "http")
        sink = _HttpSink(self, rid, ctx)
        sink.finish(core.dispatch(ctx, msg, sink))

    def _check_param_headers(self, params: dict) -> str | None:
        """x-mcp-header arguments must arrive as Mcp-Param-{Name} headers (2026-07-28 §Request Metadata).

        Declarations count on properties reached through ``properties`` only, at any depth; a nested one
        (``properties.a.properties.b``) is checked against ``arguments.a.b``."""
        tool = self.core.sc["_tool_index"].get(params.get("name"))
        schema = tool.get("inputSchema") if tool else None
        args = params.get("arguments") if isinstance(params.get("arguments"), dict) else {}
        for path, header in _header_declarations(schema):
            header_name = "mcp-param-" + header.lower()
            got = self.header(header_name)
            value: Any = args
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            want = _param_header_text(value)
            prop = ".".join(path)
            if want is None:
                if got is not None:
                    return f"{header_name} sent but argument {prop!r} is absent"
            elif not _header_value_matches(got, want):
                return f"{header_name} is {got!r}, argument {prop!r} is {want!r}"
        return None

    def _lost_session(self, rid: Any = None) -> None:
        if int(self.core.sc["lost_session_status"]) == 400:
            self.send_rpc_error(400, -32000, "Bad Request: No valid session ID provided", rid)
        else:
            self.send_rpc_error(404, -32001, "Session not found", rid)

    def _legacy_session(self, rid: Any = None) -> Ctx | None:
        """Session and MCP-Protocol-Version checks of a legacy request; None once an error was sent."""
        core = self.core
        sc = core.sc
        header_version = self.header("mcp-protocol-version")
        supported = core.legacy_versions
        if not sc["stateful"]:
            if header_version is not None and header_version not in supported:
                self.send_rpc_error(
                    400,
                    -32000,
                    f"Bad Request: Unsupported protocol version: {header_version} "
                    f"(supported versions: {', '.join(reversed(supported))})",
                    rid,
                )
                return None
            return Ctx("legacy", header_version or "2025-03-26", "http")
        sid = self.header("mcp-session-id")
        if sid is None:
            if core.modern_versions:
                self.send_rpc_error(400, -32600, "Bad Request: Missing session ID", rid)
            else:
                self.send_rpc_error(400, -32000, "Bad Request: Server not initialized", rid)
            return None
        session = core.use_session(sid)
        if session is None:
            self.entry["fault"] = "lost_session" if sc["faults"].get("expire_session_after") is not None else None
            self._lost_session(rid)
            return None
        version = session.version
        if header_version is None:
            if version >= "2025-06-18" and sc["strict_version_header"]:
                self.send_rpc_error(400, -32000, "Bad Request: MCP-Protocol-Version header is required", rid)
                return None
        elif header_version not in supported or (
            sc["strict_version_header"] and version >= "2025-06-18" and header_version != version
        ):
            self.send_rpc_error(
                400,
                -32000,
                f"Bad Request: Unsupported protocol version: {header_version} "
                f"(supported versions: {', '.join(reversed(supported))}; negotiated {version})",
                rid,
            )
            return None
        return Ctx("legacy", version, "http", session)

    def _post_legacy(self, msg: Any, is_batch: bool) -> None:
        core = self.core
        messages = msg if is_batch else [msg]
        if any(not isinstance(m, dict) for m in messages):
            self.send_rpc_error(400, -32600, "Invalid Request")
            return
        inits = [m for m in messages if m.get("method") == "initialize"]
        if inits:
            if len(messages) > 1:
                self.send_rpc_error(400, -32600, "Invalid Request: initialize must not be part of a batch")
                return
            self._initialize(inits[0])
            return
        ctx = self._legacy_session()  # transport-level errors carry "id": null, like the TS SDK
        if ctx is None:
            return
        if is_batch and ctx.version != "2025-03-26":
            self.send_rpc_error(400, -32600, f"Invalid Request: batches are not supported in {ctx.version}")
            return
        requests = []
        for m in messages:
            method = m.get("method")
            if method is None:  # a response to one of our server→client requests
                core.deliver_response(m)
            elif "id" not in m:
                if method == "notifications/initialized" and ctx.session is not None:
                    ctx.session.initialized = True
                elif method == "notifications/cancelled" and isinstance(m.get("params"), dict):
                    core.cancel(ctx.session.sid if ctx.session else None, m["params"].get("requestId"))
            else:
                requests.append(m)
        if not requests:
            self.send_body(202, b"", None)
            return
        if not is_batch:
            sink = _HttpSink(self, requests[0].get("id"), ctx)
            sink.finish(core.dispatch(ctx, requests[0], sink))
            return
        batch_sink = _BatchSink()
        responses = []
        for m in requests:
            reply = core.dispatch(ctx, m, batch_sink)
            if reply.kind == "drop":
                self.entry["fault"] = "drop"
                self.close_connection = True
                return
            if reply.kind == "resume":
                reply = reply.value
            out = {"jsonrpc": "2.0", "id": m.get("id")}
            if reply.kind == "malformed":
                out["result"] = "malformed"
            else:
                out["result" if reply.kind == "result" else "error"] = reply.value
            responses.append(out)
        if core.sc["response_mode"] == "sse":
            sink = _HttpSink(self, None, ctx)
            sink.start()
            for note in batch_sink.notes:
                sink.event(dump_bytes(note))
            for response in responses:  # one event per response, like the TS SDK
                sink.event(dump_bytes(response))
            sink.end()
        else:
            self.send_body(200, dump_bytes(responses), "application/json")

    def _initialize(self, msg: dict) -> None:
        core = self.core
        rid = msg.get("id")
        params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
        requested = params.get("protocolVersion")
        if not core.legacy_versions:
            self.send_reply_error(core.modern_only_initialize_reply(requested), rid)
            return
        if "id" not in msg:
            self.send_rpc_error(400, -32600, "Invalid Request: initialize must be a request")
            return
        extra: dict[str, str] = {}
        result = core.initialize_result(requested)
        session = None
        if core.sc["stateful"]:
            session = core.new_session(result["protocolVersion"])
            extra["Mcp-Session-Id"] = session.sid
        if core.sc["set_cookie"]:
            extra["Set-Cookie"] = core.sc["set_cookie"]
        ctx = Ctx("legacy", result["protocolVersion"], "http", session)
        sink = _HttpSink(self, rid, ctx, extra)
        sink.finish(core.dispatch(ctx, msg, sink))

    # -- GET / DELETE -------------------------------------------------------------------------------------
    def _get(self) -> None:
        core = self.core
        if not core.legacy_versions:
            self._plain_error(405, "Method Not Allowed", {"Allow": "POST"})
            return
        last_id = self.header("last-event-id")
        with core.lock:
            pending = core.resumable.get(last_id) if last_id else None
        if pending is None:
            if core.sc["stateful"] and self.header("mcp-session-id") is not None:
                if core.use_session(self.header("mcp-session-id")) is None:
                    self._lost_session()
                    return
            if core.sc["standalone_get"] and not last_id:
                self._standalone()
                return
            self._plain_error(405, "Method Not Allowed", {"Allow": self._allowed()})
            return
        if pending["session"] is not None:
            sid = self.header("mcp-session-id")
            if sid is None:
                self.send_rpc_error(400, -32000, "Bad Request: Mcp-Session-Id header is required")
                return
            if sid != pending["session"] or core.use_session(sid) is None:
                self._lost_session()
                return
        with core.lock:
            core.resumable.pop(last_id, None)
        self.entry["fault"] = "sse_retry_resume"
        sink = _HttpSink(self, None, Ctx("legacy", "2025-11-25", "http"))
        sink.start(priming=False)
        sink.event(dump_bytes(pending["message"]), event_id=pending["event_id"])
        sink.end()

    def _standalone(self) -> None:
        """The standalone GET stream (scenario ``standalone_get``): held open until the client closes it or the
        server stops; an ``input_required`` tool's legacy question goes here while it is open (as a TypeScript SDK
        server's ``server.request()`` does)."""
        core = self.core
        sink = _HttpSink(self, None, Ctx("legacy", "2025-11-25", "http"))
        sink.start(priming=False)
        with core.lock:
            core.standalone = sink
        try:
            while not core.stopping.is_set() and not sink.client_closed():
                core.stopping.wait(0.05)
        finally:
            with core.lock:
                if core.standalone is sink:
                    core.standalone = None
        self.close_connection = True

    def _delete(self) -> None:
        core = self.core
        if not core.legacy_versions or not core.sc["stateful"]:
            self._plain_error(405, "Method Not Allowed", {"Allow": self._allowed()})
            return
        sid = self.header("mcp-session-id")
        if sid is None:
            self.send_rpc_error(400, -32000, "Bad Request: Mcp-Session-Id header is required")
            return
        if int(core.sc["delete_status"]) == 405:
            self._plain_error(405, "Method Not Allowed", {"Allow": "GET, POST"})
            return
        if core.use_session(sid) is None:
            self._lost_session()
            return
        core.drop_session(sid)
        self.send_body(200, b"", None)


# ############################################################################################################
# stdio transport
# ############################################################################################################


_UNPARSABLE = object()


class _StdioExit(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _StdioSink(Sink):
    def __init__(self, server: StdioServer) -> None:
        self.server = server

    def notify(self, message: dict) -> None:
        self.server.write(dump_bytes(message))

    def ask_client(self, request: dict, timeout: float) -> dict | None:
        self.server.write(dump_bytes(request))
        return self.server.wait_for_response(request["id"], timeout)

    def stderr(self, line: str) -> None:
        self.server.write_stderr(line)

    def stdout(self, line: str) -> None:
        self.server.write(line.encode("utf-8", errors="replace"))


class StdioServer:
    """Newline-delimited JSON-RPC on binary streams; the era is locked by the first request (like the SDKs)."""

    def __init__(self, core: Core, stdin: Any, stdout: Any, stderr: Any) -> None:
        self.core = core
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.era: str | None = None
        self.version: str | None = None
        self.lines: queue.Queue = queue.Queue()
        self.deferred: deque = deque()
        self.out_lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self.out_lock:
            self.stdout.write(data + b"\n")
            self.stdout.flush()

    def write_stderr(self, line: str) -> None:
        with self.out_lock:
            self.stderr.write((line + "\n").encode("utf-8", errors="replace"))
            self.stderr.flush()

    def _reader(self) -> None:
        try:
            for line in iter(self.stdin.readline, b""):
                if b"notifications/cancelled" in line:  # seen early so that a running slow call can stop
                    try:
                        note = parse_wire(line.decode("utf-8"))
                        self.core.cancel(None, note["params"]["requestId"])
                    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
                        pass
                self.lines.put(line)
        except (OSError, ValueError):
            pass
        self.lines.put(None)

    def run(self) -> int:
        sc = self.core.sc
        for name, expected in (sc["require_env"] or {}).items():
            value = os.environ.get(name)
            if not value or (expected is not None and value != expected):
                self.stderr.write(f"mcp_mock: environment variable {name} is missing or wrong\n".encode())
                self.stderr.flush()
                return 1
        for line in sc["stderr_lines"]:
            self.stderr.write((line + "\n").encode("utf-8", errors="replace"))
        self.stderr.flush()
        for line in sc["stdout_lines"]:
            self.write(line.encode("utf-8", errors="replace"))
        threading.Thread(target=self._reader, name="mcp-mock-stdin", daemon=True).start()
        try:
            while True:
                if self.deferred:
                    self._handle(self.deferred.popleft())
                    continue
                line = self.lines.get()
                if line is None:
                    return 0
                if line.strip():
                    self._handle(self._log_line(line))
        except _StdioExit as exc:
            return exc.status
        except BrokenPipeError:
            return 0

    def wait_for_response(self, rid: str, timeout: float) -> dict | None:
        """Read (and log) lines until the client answers our request; other messages are handled afterwards."""
        deadline = time.monotonic() + min(timeout, MAX_SLEEP_S)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                return None
            if line is None:
                self.lines.put(None)
                return None
            if not line.strip():
                continue
            msg = self._log_line(line)
            if isinstance(msg, dict) and "method" not in msg and msg.get("id") == rid:
                self.core.deliver_response(msg)
                return _plain(msg)
            self.deferred.append(msg)

    def _log_line(self, line: bytes) -> Any:
        """Log one received line; returns the parsed message or _UNPARSABLE."""
        text = line.decode("utf-8", errors="replace").rstrip("\r\n")
        try:
            parsed = parse_exact(text)
        except ValueError:
            parsed = None
        rpc_method, rpc_id = _rpc_fields(parsed)
        entry = self.core.log.add(
            {
                "seq": 0,
                "time": time.time(),
                "transport": "stdio",
                "pid": os.getpid(),  # which server process got it (a warm client's calls must reach the same one)
                "body": text,
                "json": parsed,
                "rpc_method": rpc_method,
                "rpc_id": rpc_id,
                "era": self.era,
                "done": True,
            }
        )
        self.core.log.emit(entry)
        try:
            return parse_wire(text)
        except ValueError:
            return _UNPARSABLE

    def _handle(self, msg: Any) -> None:
        if msg is _UNPARSABLE:
            self.write(dump_bytes({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}))
            return
        if not isinstance(msg, dict):
            self.write(
                dump_bytes({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid Request"}})
            )
            return
        method = msg.get("method")
        if method is None:
            self.core.deliver_response(msg)
            return
        if "id" not in msg:
            return  # notifications (initialized, cancelled, …) are only logged
        if method == "tools/call" and self.era is not None and self.core.sc["stdio_concurrent_calls"]:
            threading.Thread(target=self._call_in_thread, args=(msg,), name="mcp-mock-call", daemon=True).start()
            return
        reply = self._request(msg)
        if reply is not None:
            self._finish(msg.get("id"), reply)

    def _call_in_thread(self, msg: dict) -> None:
        """``stdio_concurrent_calls``: each tools/call runs on its own thread, so answers come in any order; a
        ``drop`` still ends the whole process (exit 3), failing every call in flight."""
        try:
            reply = self._request(msg)
            if reply is not None:
                self._finish(msg.get("id"), reply)
        except _StdioExit as exc:
            self.stdout.flush()
            os._exit(exc.status)
        except BrokenPipeError:
            pass

    def _request(self, msg: dict) -> Reply | None:
        core = self.core
        method = msg["method"]
        params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
        meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else None
        wants_modern = method == "server/discover" or (
            meta is not None and META_VERSION in meta and meta[META_VERSION] not in LEGACY_VERSIONS
        )
        if self.era is None:
            if method == "initialize":
                if not core.legacy_versions:
                    return core.modern_only_initialize_reply(params.get("protocolVersion"))
                self.era = "legacy"
            elif core.modern_versions and (wants_modern or not core.legacy_versions):
                self.era = "modern"
            elif wants_modern:
                return self._unknown(method)
            else:
                self.era = "legacy"
        if self.era == "modern":
            if method == "initialize":
                served = core.modern_versions[-1]
                return Reply.error(
                    -32022,
                    f"connection is serving the {served} protocol; the initialize handshake is not accepted",
                    {"supported": core.modern_versions, "requested": _plain(params.get("protocolVersion"))},
                )
            problem = core.check_modern_meta(params)
            if problem is not None:
                return problem
            ctx = Ctx("modern", params["_meta"][META_VERSION], "stdio")
        else:
            if method == "server/discover":
                return self._unknown(method)
            if method == "initialize":
                self.version = core.initialize_result(params.get("protocolVersion"))["protocolVersion"]
            ctx = Ctx("legacy", self.version or core.legacy_versions[-1], "stdio")
        return core.dispatch(ctx, msg, _StdioSink(self))

    def _unknown(self, method: str) -> Reply | None:
        mode = self.core.sc["stdio_unknown_method"]
        if mode == "silent":
            return None
        if mode == "exit":
            raise _StdioExit(4)
        return Reply.error(-32601, f"Method not found: {method}")

    def _finish(self, rid: Any, reply: Reply) -> None:
        if reply.kind == "resume":
            reply = reply.value
        if reply.kind == "drop":
            if reply.value != "cancelled" and self.core.sc["stdio_drop"] == "exit":
                raise _StdioExit(3)
            return
        if reply.kind == "malformed":
            self.write(b'{"jsonrpc": "2.0", "id": oops this is not JSON')
            return
        out = {"jsonrpc": "2.0", "id": rid}
        out["result" if reply.kind == "result" else "error"] = reply.value
        self.write(dump_bytes(out))


# ############################################################################################################
# MockServer (in-process API)
# ############################################################################################################


def _filter_entries(entries: list[dict], rpc_method: str | None, http_method: str | None) -> list[dict]:
    out = []
    for entry in entries:
        if http_method is not None and entry.get("http_method") != http_method:
            continue
        if rpc_method is not None:
            methods = entry.get("rpc_method")
            if not (methods == rpc_method or (isinstance(methods, list) and rpc_method in methods)):
                continue
        out.append(entry)
    return out


class MockServer:
    """In-process HTTP mock: ``url = srv.start()``, ``srv.log``, ``srv.requests(...)``, ``srv.stop()``."""

    def __init__(self, scenario: dict | None = None, log_path: str | None = None) -> None:
        self.log_store = RequestLog(log_path)
        self.core = Core(scenario, self.log_store)
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self.url = ""
        self.port = 0

    @classmethod
    def from_file(cls, path: str, **kwargs: Any) -> MockServer:
        with open(path, encoding="utf-8") as fh:
            return cls(json.load(fh), **kwargs)

    # -- lifecycle ----------------------------------------------------------------------------------------
    def start(self, port: int = 0, host: str = "127.0.0.1") -> str:
        if self._httpd is not None:
            return self.url
        self._httpd = _Server((host, port), self.core)
        self.port = self._httpd.server_address[1]
        self.core.base_url = f"http://{host}:{self.port}"
        self.url = self.core.base_url + self.core.sc["path"]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="mcp-mock-http", daemon=True
        )
        self._thread.start()
        return self.url

    def stop(self) -> None:
        httpd = self._httpd
        if httpd is None:
            return
        self._httpd = None
        self.core.stopping.set()
        httpd.shutdown()
        httpd.close_all_connections()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self.log_store.close()

    def __enter__(self) -> MockServer:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- inspection ---------------------------------------------------------------------------------------
    @property
    def log(self) -> list[dict]:
        """Snapshot of the request log (a list of entry dicts, oldest first)."""
        return self.log_store.snapshot()

    def requests(self, rpc_method: str | None = None, http_method: str | None = None) -> list[dict]:
        """Log entries, optionally only those with this JSON-RPC method (batches match any member) / HTTP verb."""
        return _filter_entries(self.log_store.snapshot(), rpc_method, http_method)

    def wait_for(
        self, rpc_method: str | None = None, count: int = 1, timeout: float = 5.0, http_method: str | None = None
    ) -> list[dict]:
        """Block (bounded) until ``count`` matching entries are complete ("done"); returns the matches."""

        def ready(entries: list[dict]) -> bool:
            return sum(1 for e in _filter_entries(entries, rpc_method, http_method) if e.get("done")) >= count

        self.log_store.wait(ready, timeout)
        return self.requests(rpc_method, http_method)

    def reset_log(self) -> None:
        self.log_store.clear()

    @property
    def sessions(self) -> list[str]:
        with self.core.lock:
            return list(self.core.sessions)

    @property
    def client_responses(self) -> list[dict]:
        """Responses the client POSTed to server→client requests (server_request_on_call)."""
        with self.core.lock:
            return list(self.core.client_responses)

    @property
    def scenario(self) -> dict:
        return {k: v for k, v in self.core.sc.items() if not k.startswith("_")}

    def update(self, **changes: Any) -> None:
        """Change scenario keys on the fly (e.g. switch a fault on after discovery)."""
        self.core.update(changes)


# ############################################################################################################
# CLI
# ############################################################################################################


def _parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="mcp_mock.py", description="Stdlib-only MCP mock server for tests.")
    p.add_argument("--port", type=int, default=0, help="HTTP port on 127.0.0.1 (0 = any free port)")
    p.add_argument("--stdio", action="store_true", help="serve newline-delimited JSON-RPC on stdin/stdout")
    p.add_argument("--scenario", metavar="FILE", help="scenario JSON file")
    p.add_argument("--scenario-json", metavar="JSON", help="scenario as inline JSON (applied after --scenario)")
    p.add_argument("--log", metavar="FILE", help="append the request log here as JSON lines")
    p.add_argument("--quiet", action="store_true", help="stdio: do not mirror the log to stderr")
    p.add_argument("--versions", help="comma-separated protocol versions")
    p.add_argument("--response-mode", choices=("json", "sse"))
    p.add_argument("--page-size", type=int)
    p.add_argument("--path", help="endpoint path (default /mcp)")
    p.add_argument("--stateless", action="store_true", help="legacy without Mcp-Session-Id")
    p.add_argument("--instructions")
    p.add_argument("--require-header", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=JSON",
        dest="sets",
        help="set any scenario key, e.g. --set 'faults={\"slow_ms\":500}'",
    )
    return p.parse_args(argv)


def scenario_from_args(args: argparse.Namespace) -> dict:
    scenario: dict[str, Any] = {}
    if args.scenario:
        with open(args.scenario, encoding="utf-8") as fh:
            scenario.update(json.load(fh))
    if args.scenario_json:
        scenario.update(json.loads(args.scenario_json))
    if args.versions:
        scenario["versions"] = [v.strip() for v in args.versions.split(",") if v.strip()]
    if args.response_mode:
        scenario["response_mode"] = args.response_mode
    if args.page_size is not None:
        scenario["page_size"] = args.page_size
    if args.path:
        scenario["path"] = args.path
    if args.stateless:
        scenario["stateful"] = False
    if args.instructions is not None:
        scenario["instructions"] = args.instructions
    for item in args.require_header:
        name, _, value = item.partition("=")
        scenario.setdefault("require_headers", {})[name] = value
    for item in args.sets:
        key, _, value = item.partition("=")
        try:
            scenario[key] = json.loads(value)
        except ValueError:
            scenario[key] = value
    return scenario


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    try:
        scenario = scenario_from_args(args)
        if args.stdio:
            stream = None if (args.log or args.quiet) else sys.stderr
            core = Core(scenario, RequestLog(args.log, stream))
        else:
            srv = MockServer(scenario, log_path=args.log)
    except (OSError, ValueError) as exc:
        print(f"mcp_mock: {exc}", file=sys.stderr)
        return 2
    if args.stdio:
        status = StdioServer(core, sys.stdin.buffer, sys.stdout.buffer, sys.stderr.buffer).run()
        core.log.close()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        # The stdin reader thread may still be blocked in readline(); interpreter shutdown would then abort
        # (SIGABRT on the buffered-reader lock), so leave without running it.
        os._exit(status)
    done = threading.Event()

    def _on_signal(signum: int, frame: Any) -> None:
        done.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    url = srv.start(port=args.port)
    print(f"LISTENING {url}", flush=True)
    while not done.wait(0.5):
        pass
    srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
