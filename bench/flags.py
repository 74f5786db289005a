#!/usr/bin/env python3
"""Schema-flag cost vs. one loopback HTTP round trip (docs/contract.md §13-style ratio, issue 4).

Maps a 200-tool catalogue with 50 properties per tool (a realistic mix: every flag type, enums, defaults,
pydantic-style ``anyOf`` optionals, ``$ref``s, a reserved name) and reports, as ratios to the median loopback HTTP
round trip measured in the same run (stdlib ``http.server`` on 127.0.0.1:0, keep-alive ``http.client``), and to
the loopback round trip that fetches this catalogue (its 1.7 MB tools/list reply, serialized beforehand, so only
the transfer counts):

  catalogue   build_tool_flags for all 200 tools
  --tools cli describe_cli for all 200 tools (the per-tool ``data.cli`` summary of --tools)
  call path   find_tool in the 200-tool catalogue + build_tool_flags + parse a 12-flag command line for that one
              tool (what every tool call pays: flags are mapped only for the tool being called)
  validate    one tool: validate_arguments with jsonschema (import excluded; measured warm)
  help        one tool: render_tool_help
  everything  all 200 tools: build + parse + help

No thresholds: this prints numbers. Run: ``python bench/flags.py`` (from the repo root).
"""

from __future__ import annotations

import http.client
import json
import socket
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bkmcp  # noqa: E402

TOOLS = 200
PROPERTIES = 50


def make_property(i: int) -> dict[str, Any]:
    kind = i % 10
    desc = f"Property number {i}: a realistic description that is long enough to wrap in an 80-column help."
    if kind == 0:
        return {"type": "string", "description": desc}
    if kind == 1:
        return {"type": "integer", "minimum": 0, "maximum": 1000, "default": 10, "description": desc}
    if kind == 2:
        return {"type": "number", "description": desc}
    if kind == 3:
        return {"type": "boolean", "default": False, "description": desc}
    if kind == 4:
        return {"type": "array", "items": {"type": "string"}, "description": desc}
    if kind == 5:
        return {"type": "object", "additionalProperties": {"type": "integer"}, "description": desc}
    if kind == 6:
        return {"type": "string", "enum": ["open", "closed", "archived"], "default": "open", "description": desc}
    if kind == 7:
        return {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": f"P{i}"}
    if kind == 8:
        return {"$ref": "#/$defs/Point", "description": desc}
    return {"type": "string", "format": "date-time", "description": desc}


def make_tool(n: int) -> dict[str, Any]:
    properties = {f"param_{i:02d}": make_property(i) for i in range(PROPERTIES)}
    properties["timeout"] = {"type": "integer"}  # a reserved name, as real servers send
    return {
        "name": f"tool_{n:03d}",
        "title": f"Tool {n}",
        "description": "A generated tool for the flag-mapping benchmark. " * 3,
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
        "inputSchema": {
            "type": "object",
            "properties": properties,
            "required": ["param_00", "param_01", "param_04"],
            "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
        },
    }


ARGV = [
    "srv",
    "tool_000",
    "--param_00",
    "gateway error 网关",
    "--param_01=20",
    "--param_02",
    "12345678901234567890.5",
    "--param_03=true",
    "--param_04",
    '["a","b","c"]',
    "--param_05",
    '{"a":1,"b":2}',
    "--param_06",
    "closed",
    "--param_10",
    "x",
    "--param_11",
    "7",
    "--param_12",
    "1e400",
    "--param_14",
    "[]",
    "--param_16=archived",
]


def time_it(fn: Callable[[], Any], repeat: int) -> float:
    """Median seconds of ``repeat`` runs (after one warm-up)."""
    fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:  # noqa: N802 (http.server API)
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        reply = self.server.reply if body else b"{}"  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: Any) -> None:
        pass


SMALL_REPLY = b'{"jsonrpc":"2.0","id":1,"result":{"content":[]}}'


def loopback_round_trip(repeat: int = 300, reply: bytes = SMALL_REPLY) -> float:
    """Median seconds of one keep-alive POST + response (``reply``, read whole) on 127.0.0.1."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.reply = reply  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1])
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        payload = json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x", "arguments": {"a": 1}}}
        ).encode()

        def once() -> None:
            conn.request("POST", "/mcp", body=payload, headers={"Content-Type": "application/json"})
            conn.getresponse().read()

        for _ in range(20):
            once()
        result = time_it(once, repeat)
        conn.close()
        return result
    finally:
        server.shutdown()
        server.server_close()


def main() -> int:
    catalogue = [make_tool(n) for n in range(TOOLS)]
    tokens = bkmcp.parse_argv(ARGV).tool_tokens
    tool0 = catalogue[0]

    def catalogue_flags() -> None:
        for tool in catalogue:
            bkmcp.build_tool_flags(tool)

    def catalogue_cli() -> None:
        for tool in catalogue:
            bkmcp.describe_cli(tool)

    def call_path() -> None:  # what one tool call pays: find the tool in the catalogue, map it, parse the flags
        tool = bkmcp.find_tool(catalogue, "tool_199", "srv")
        bkmcp.parse_tool_arguments(tool, tokens, server_name="srv")

    arguments = bkmcp.parse_tool_arguments(tool0, tokens, server_name="srv")
    bkmcp.validate_arguments(tool0, arguments)  # imports jsonschema once, outside the timing

    def validate() -> None:
        bkmcp.validate_arguments(tool0, arguments)

    def help_one() -> None:
        bkmcp.render_tool_help("srv", tool0)

    def everything() -> None:
        for tool in catalogue:
            bkmcp.parse_tool_arguments(tool, tokens, server_name="srv")
            bkmcp.render_tool_help("srv", tool)

    rtt = loopback_round_trip()
    # The round trip that delivers this very catalogue (its tools/list result, serialized beforehand: transfer only,
    # no JSON work on either side): the mapping can only start after it.
    listing = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"tools": catalogue}}).encode()
    listing_rtt = loopback_round_trip(30, listing)
    rows = [
        (f"catalogue: build_tool_flags x {TOOLS} tools x {PROPERTIES} props", time_it(catalogue_flags, 15)),
        (f"--tools cli: describe_cli x {TOOLS} tools", time_it(catalogue_cli, 15)),
        ("call path: find + map + parse 12 flags (1 of 200 tools)", time_it(call_path, 200)),
        ("validate: jsonschema, full schema (1 tool)", time_it(validate, 100)),
        ("help: render_tool_help (1 tool)", time_it(help_one, 100)),
        (f"everything: map + parse + help x {TOOLS} tools", time_it(everything, 5)),
    ]
    print(f"loopback HTTP round trip (median, keep-alive, {len(SMALL_REPLY)}-byte reply): {rtt * 1e6:9.1f} us")
    print(
        f"round trip fetching this catalogue ({len(listing) / 1e6:.1f} MB tools/list reply): "
        f"{listing_rtt * 1e6:9.1f} us"
    )
    print(f"{'':<56} {'time':>14}  {'x small RTT':>11}  {'x catalogue RTT':>15}")
    for label, seconds in rows:
        print(f"{label:<56} {seconds * 1e6:11.1f} us  {seconds / rtt:10.2f}x  {seconds / listing_rtt:14.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
