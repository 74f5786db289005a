"""Smoke tests of the interop fixtures (conftest_interop.py), with plain urllib — not bkmcp.

They prove that each third-party server starts on 127.0.0.1, speaks the wire described in
docs/interop.md, and is torn down.  bkmcp's own interop tests build on the same fixtures.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.integration.conftest_interop import SDK_TOOLS

pytestmark = [pytest.mark.integration, pytest.mark.interop]

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
HTTP_TIMEOUT = 15.0
STDIO_TIMEOUT = 20.0

# No proxies for loopback, whatever the environment says.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Reply:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers  # lower-cased names
        self.body = body

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip()

    def events(self) -> list[dict[str, str]]:
        """SSE events (CRLF or LF), data lines joined; comments ignored."""
        text = self.body.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
        events = []
        for block in text.split("\n\n"):
            ev: dict[str, Any] = {"data": []}
            for line in block.split("\n"):
                if not line or line.startswith(":"):
                    continue
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "data":
                    ev["data"].append(value)
                elif field in ("event", "id", "retry"):
                    ev[field] = value
            if ev["data"] or len(ev) > 1:
                ev["data"] = "\n".join(ev["data"])
                events.append(ev)
        return events

    def messages(self) -> list[dict[str, Any]]:
        """JSON-RPC messages of the body: one JSON object, or the non-empty SSE data events."""
        if self.content_type == "application/json":
            return [json.loads(self.body)] if self.body else []
        assert self.content_type == "text/event-stream", self.headers
        return [json.loads(e["data"]) for e in self.events() if e["data"].strip()]

    def response(self, req_id: Any) -> dict[str, Any]:
        for msg in self.messages():
            if msg.get("id") == req_id and ("result" in msg or "error" in msg):
                return msg
        raise AssertionError(f"no response with id {req_id!r} in {self.body[:2000]!r}")


def http(url: str, body: Any | None, headers: dict[str, str] | None = None, method: str = "POST") -> Reply:
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    h.update(headers or {})
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers=h, method=method)
    try:
        resp = _OPENER.open(req, timeout=HTTP_TIMEOUT)
    except urllib.error.HTTPError as exc:
        resp = exc
    with resp:
        status = resp.status if hasattr(resp, "status") else resp.code
        hdrs = {k.lower(): v for k, v in resp.headers.items()}
        return Reply(status, hdrs, resp.read())


def legacy_handshake(url: str, version: str = LEGACY) -> tuple[Reply, dict[str, str]]:
    init = http(
        url,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "smoke", "version": "0"}},
        },
    )
    assert init.status == 200, init.body
    result = init.response(1)["result"]
    headers = {"MCP-Protocol-Version": result["protocolVersion"]}
    if "mcp-session-id" in init.headers:
        headers["Mcp-Session-Id"] = init.headers["mcp-session-id"]
    note = http(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers)
    assert note.status == 202, (note.status, note.body)
    assert note.body == b""
    return init, headers


def modern_meta(**extra: Any) -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "smoke", "version": "0"},
    }
    meta.update(extra)
    return meta


def modern(url: str, req_id: Any, method: str, params: dict[str, Any] | None = None) -> Reply:
    params = dict(params or {})
    params["_meta"] = modern_meta()
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if method == "tools/call":
        headers["Mcp-Name"] = params["name"]
    return http(url, {"jsonrpc": "2.0", "id": req_id, "method": method, "params": params}, headers)


def listening_addresses(port: int) -> list[str]:
    """Local addresses of LISTEN sockets on ``port`` (Linux /proc; empty list elsewhere)."""
    found = []
    for name, _width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            with open(name) as fh:
                next(fh)
                for line in fh:
                    parts = line.split()
                    local, state = parts[1], parts[3]
                    addr_hex, port_hex = local.split(":")
                    if state == "0A" and int(port_hex, 16) == port:
                        found.append(addr_hex)
        except OSError:
            pass
    return found


LOOPBACK_V4_HEX = "0100007F"  # 127.0.0.1 in /proc/net/tcp byte order


def _check_sdk_tools(tools: list[dict[str, Any]]) -> None:
    by_name = {t["name"]: t for t in tools}
    assert SDK_TOOLS <= set(by_name), sorted(by_name)
    assert by_name["greet"]["inputSchema"]["properties"]["title"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert "outputSchema" not in by_name["greet"]
    assert by_name["choose"]["inputSchema"]["properties"]["mode"]["enum"] == ["a", "b"]
    summarize = by_name["summarize"]["inputSchema"]
    assert summarize["properties"]["shape"] == {"$ref": "#/$defs/Shape"}
    assert set(summarize["$defs"]) == {"Point", "Shape"}
    assert summarize["properties"]["values"]["items"] == {"type": "integer"}
    assert by_name["weather"]["outputSchema"]["title"] == "WeatherReport"
    assert by_name["echo_float"]["inputSchema"]["properties"]["value"]["type"] == "number"


# --------------------------------------------------------------------------- fixtures bind loopback only


@pytest.mark.parametrize(
    "fixture", ["sdk_server_stateful", "sdk_server_stateless", "sdk_server_legacy", "everything_server"]
)
def test_server_listens_on_loopback_only(fixture: str, request: pytest.FixtureRequest) -> None:
    server = request.getfixturevalue(fixture)
    assert server.alive(), server.log_tail()
    assert server.url == f"http://127.0.0.1:{server.port}/mcp"
    if not os.path.exists("/proc/net/tcp"):
        pytest.skip("no /proc/net/tcp on this platform")
    addrs = listening_addresses(server.port)
    assert addrs == [LOOPBACK_V4_HEX], (addrs, server.log_tail())


# --------------------------------------------------------------------------- Python SDK, legacy era


@pytest.mark.parametrize(
    "fixture,stateful,ctype",
    [
        ("sdk_server_stateful", True, "text/event-stream"),
        ("sdk_server_stateless", False, "application/json"),
        ("sdk_server_legacy", True, "text/event-stream"),
    ],
)
def test_sdk_legacy_handshake_and_tools(
    fixture: str, stateful: bool, ctype: str, request: pytest.FixtureRequest
) -> None:
    server = request.getfixturevalue(fixture)
    init, headers = legacy_handshake(server.url)
    assert init.content_type == ctype
    result = init.response(1)["result"]
    assert result["protocolVersion"] == LEGACY
    assert result["serverInfo"]["name"].startswith("bkmcp-interop-sdk-")
    assert ("Mcp-Session-Id" in headers) is stateful

    tl = http(server.url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers)
    assert tl.status == 200 and tl.content_type == ctype
    listed = tl.response(2)["result"]
    assert "resultType" not in listed and "nextCursor" not in listed
    _check_sdk_tools(listed["tools"])

    call = http(
        server.url,
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 2, "b": 40}}},
        headers,
    )
    res = call.response(3)["result"]
    assert res["isError"] is False and res["structuredContent"] == {"result": 42}
    assert res["content"] == [{"type": "text", "text": "42"}]

    fail = http(
        server.url,
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "fail", "arguments": {}}},
        headers,
    )
    res = fail.response(4)["result"]
    assert res["isError"] is True and res["content"][0]["text"] == "Error executing tool fail"

    flt = http(
        server.url,
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": "echo_float", "arguments": {"value": 0.1}},
        },
        headers,
    )
    assert b'"structuredContent":{"result":0.1}' in flt.body


def test_sdk_stateful_session_lifecycle(sdk_server_stateful) -> None:
    url = sdk_server_stateful.url
    _, headers = legacy_handshake(url)
    assert http(url, None, headers, method="DELETE").status == 200
    gone = http(url, {"jsonrpc": "2.0", "id": 9, "method": "tools/list"}, headers)
    assert gone.status == 404
    assert gone.response(None)["error"] == {"code": -32600, "message": "Session not found"}


# --------------------------------------------------------------------------- Python SDK, modern era


@pytest.mark.parametrize("fixture", ["sdk_server_stateful", "sdk_server_stateless"])
def test_sdk_modern_discover_and_tools(fixture: str, request: pytest.FixtureRequest) -> None:
    server = request.getfixturevalue(fixture)
    disc = modern(server.url, "d1", "server/discover")
    assert disc.status == 200 and disc.content_type == "application/json", disc.body
    assert "mcp-session-id" not in disc.headers
    result = disc.response("d1")["result"]
    assert result["supportedVersions"] == [MODERN]
    assert result["resultType"] == "complete"
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"].startswith("bkmcp-interop-sdk-")

    tl = modern(server.url, 2, "tools/list")
    assert tl.status == 200 and tl.content_type == "application/json"
    listed = tl.response(2)["result"]
    assert listed["resultType"] == "complete" and listed["cacheScope"] == "private" and listed["ttlMs"] == 0
    _check_sdk_tools(listed["tools"])

    call = modern(server.url, 3, "tools/call", {"name": "ns.tool-name_v2", "arguments": {"value": "ab", "count": 2}})
    res = call.response(3)["result"]
    assert res["resultType"] == "complete" and res["structuredContent"] == {"result": "abab"}

    mismatch = http(
        server.url,
        {"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"_meta": modern_meta()}},
        {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call"},
    )
    assert mismatch.status == 400 and mismatch.response(5)["error"]["code"] == -32020

    assert http(server.url, None, {"MCP-Protocol-Version": MODERN}, method="GET").status == 405


def test_sdk_legacy_pinned_rejects_modern(sdk_server_legacy) -> None:
    url = sdk_server_legacy.url
    disc = modern(url, "d1", "server/discover")
    assert disc.status == 400
    assert disc.response(None)["error"] == {"code": -32600, "message": "Bad Request: Missing session ID"}

    _, headers = legacy_handshake(url)
    with_session = dict(headers, **{"MCP-Protocol-Version": MODERN, "Mcp-Method": "server/discover"})
    rej = http(
        url, {"jsonrpc": "2.0", "id": 2, "method": "server/discover", "params": {"_meta": modern_meta()}}, with_session
    )
    assert rej.status == 400
    err = rej.response(None)["error"]
    assert err["code"] == -32600 and err["message"].startswith("Bad Request: Unsupported protocol version: 2026-07-28")

    inside = http(url, {"jsonrpc": "2.0", "id": 3, "method": "server/discover", "params": {}}, headers)
    assert inside.response(3)["error"]["code"] == -32601


# --------------------------------------------------------------------------- server-everything


def test_everything_legacy_handshake_and_tools(everything_server) -> None:
    url = everything_server.url
    init, headers = legacy_handshake(url)
    assert init.content_type == "text/event-stream"
    events = init.events()
    assert events[0]["data"] == "" and "id" in events[0], events  # priming event (2025-11-25 + event store)
    result = init.response(1)["result"]
    assert result["protocolVersion"] == LEGACY
    assert result["serverInfo"]["name"] == "mcp-servers/everything"
    assert "Mcp-Session-Id" in headers

    tl = http(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers)
    names = [t["name"] for t in tl.response(2)["result"]["tools"]]
    assert {"echo", "get-sum", "get-structured-content", "get-tiny-image"} <= set(names)
    assert "trigger-sampling-request" not in names  # capability-gated, we declared none

    echo = http(
        url,
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "hi"}}},
        headers,
    )
    assert echo.response(3)["result"]["content"] == [{"type": "text", "text": "Echo: hi"}]

    add = http(
        url,
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "get-sum", "arguments": {"a": 1.5, "b": 2}},
        },
        headers,
    )
    assert add.response(4)["result"]["content"][0]["text"] == "The sum of 1.5 and 2 is 3.5."


def test_everything_rejects_modern(everything_server) -> None:
    disc = modern(everything_server.url, "d1", "server/discover")
    assert disc.status == 400
    assert disc.response(None)["error"] == {"code": -32000, "message": "Bad Request: Server not initialized"}


# --------------------------------------------------------------------------- stdio command lines


class StdioPeer:
    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        self._buf = b""

    def send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()

    def recv_response(self, req_id: Any) -> dict[str, Any]:
        """Read lines until the response to ``req_id`` (notifications in between are skipped)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + STDIO_TIMEOUT
        while True:
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                if line.strip():
                    msg = json.loads(line)
                    if msg.get("id") == req_id and ("result" in msg or "error" in msg):
                        return msg
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no stdio response to {req_id!r}")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise AssertionError(f"stdio server closed stdout before answering {req_id!r}")
                self._buf += chunk

    def request(self, req_id: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": req_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return self.recv_response(req_id)


def _close(peer: StdioPeer) -> int | None:
    assert peer.proc.stdin is not None
    peer.proc.stdin.close()
    try:
        return peer.proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        peer.proc.kill()
        peer.proc.wait(timeout=5)
        return None


def _init_params() -> dict[str, Any]:
    return {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "smoke", "version": "0"}}


@pytest.mark.skipif(os.name != "posix", reason="POSIX pipes only")
@pytest.mark.parametrize("variant", ["stateful-sse", "legacy-pinned"])
def test_sdk_stdio_legacy(variant: str, sdk_stdio_argv, interop_subprocess_env) -> None:
    peer = StdioPeer(sdk_stdio_argv(variant), interop_subprocess_env)
    try:
        init = peer.request(1, "initialize", _init_params())
        assert init["result"]["protocolVersion"] == LEGACY
        peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        tools = peer.request(2, "tools/list")["result"]["tools"]
        _check_sdk_tools(tools)
    finally:
        assert _close(peer) == 0


@pytest.mark.skipif(os.name != "posix", reason="POSIX pipes only")
def test_sdk_stdio_modern_and_pinned(sdk_stdio_argv, interop_subprocess_env) -> None:
    peer = StdioPeer(sdk_stdio_argv("stateful-sse"), interop_subprocess_env)
    try:
        disc = peer.request("d1", "server/discover", {"_meta": modern_meta()})
        assert disc["result"]["supportedVersions"] == [MODERN]
        tl = peer.request(2, "tools/list", {"_meta": modern_meta()})
        assert tl["result"]["resultType"] == "complete"
        again = peer.request(3, "initialize", _init_params())  # era is locked after the first request
        assert again["error"]["code"] == -32022
    finally:
        _close(peer)

    pinned = StdioPeer(sdk_stdio_argv("legacy-pinned"), interop_subprocess_env)
    try:
        disc = pinned.request("d1", "server/discover", {"_meta": modern_meta()})
        assert disc["error"]["code"] == -32601
        assert pinned.request(2, "initialize", _init_params())["result"]["protocolVersion"] == LEGACY
    finally:
        _close(pinned)


@pytest.mark.skipif(os.name != "posix", reason="POSIX pipes only")
def test_everything_stdio(everything_stdio_argv, interop_subprocess_env) -> None:
    peer = StdioPeer(everything_stdio_argv, interop_subprocess_env)
    try:
        disc = peer.request("d1", "server/discover", {"_meta": modern_meta()})
        assert disc["error"]["code"] == -32601
        init = peer.request(1, "initialize", _init_params())
        assert init["result"]["serverInfo"]["name"] == "mcp-servers/everything"
        peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        tools = peer.request(2, "tools/list")["result"]["tools"]
        assert "echo" in {t["name"] for t in tools}
        echo = peer.request(3, "tools/call", {"name": "echo", "arguments": {"message": "x"}})
        assert echo["result"]["content"][0]["text"] == "Echo: x"
    finally:
        _close(peer)
