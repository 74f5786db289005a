"""HTTP transport and negotiation (sections 6-7) against a scripted server behind ``httpx.MockTransport``: it
answers each request with canned bytes, so odd server behaviour (wrong ids, unknown content types, -32022, 404
-32601, unsupported versions, refused resumption) is reproduced exactly, and records what it received; no socket
is opened. The same transport on a real loopback socket, and the CLI fuzz against any server answer, are in
tests/integration/test_http_wire.py.

Seed rows: R01 (negotiation table on the wire), R02 (classification), A04 (status translation).
"""

from __future__ import annotations

import io
import json
from typing import Any, Callable

import pytest

import bkmcp
from bkmcp import Deadline, HttpTransport, Log, era_rules
from tests.helpers import FlowClient, attached, http_server

Reply = tuple  # (status, headers dict, body bytes | str)


class Scripted:
    """Answers POST/GET/DELETE with ``handler(verb, rpc, headers) -> (status, headers, body)`` through
    ``httpx.MockTransport``; records every request (verb, JSON-RPC body, lower-cased headers). ``client`` is the
    ``httpx.Client`` to inject into ``HttpTransport`` (its owner, the fixture, closes it)."""

    url = "http://scripted.invalid/mcp"  # never resolved: the mock transport answers in-process

    def __init__(self, handler: Callable[[str, dict | None, dict], Reply]) -> None:
        httpx = bkmcp.import_httpx()
        self.handler = handler
        self.requests: list[dict[str, Any]] = []

        def answer(request: Any) -> Any:
            raw = request.read()
            rpc = json.loads(raw) if raw else None
            headers = {k.lower(): v for k, v in request.headers.items()}
            self.requests.append({"verb": request.method, "rpc": rpc, "headers": headers})
            status, extra, body = self.handler(request.method, rpc, headers)
            data = body.encode() if isinstance(body, str) else body
            return httpx.Response(status, headers={**extra, "Content-Length": str(len(data))}, content=data)

        self.client = httpx.Client(
            transport=httpx.MockTransport(answer), cookies=bkmcp._no_cookies(), follow_redirects=False
        )

    def methods(self) -> list[str]:
        return [
            (r["rpc"] or {}).get("method", r["verb"]) if isinstance(r["rpc"], dict) else r["verb"]
            for r in self.requests
        ]

    def stop(self) -> None:
        self.client.close()


JSON = {"Content-Type": "application/json"}
SSE = {"Content-Type": "text/event-stream"}


def ok(rpc: dict, result: Any) -> Reply:
    return 200, JSON, json.dumps({"jsonrpc": "2.0", "id": rpc["id"], "result": result})


def err(status: int, rpc: dict | None, code: int, message: str = "m", data: Any = None) -> Reply:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return status, JSON, json.dumps({"jsonrpc": "2.0", "id": (rpc or {}).get("id"), "error": error})


INIT = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "1"}}
TOOLS = {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}


def legacy_server(extra: Callable[[str, dict | None, dict], Reply | None] | None = None):
    def handler(verb: str, rpc: dict | None, headers: dict) -> Reply:
        if extra is not None:
            answer = extra(verb, rpc, headers)
            if answer is not None:
                return answer
        if verb != "POST":
            return 405, {}, ""
        method = rpc.get("method")
        if method == "server/discover":
            return err(400, rpc, -32000, "Bad Request: Server not initialized")
        if method == "initialize":
            return ok(rpc, INIT)
        if "id" not in rpc:
            return 202, {}, ""
        if method == "tools/list":
            return ok(rpc, TOOLS)
        if method == "tools/call":
            return ok(rpc, {"content": []})
        return err(200, rpc, -32601)

    return handler


@pytest.fixture
def scripted():
    servers: list[Scripted] = []

    def make(handler) -> Scripted:
        srv = Scripted(handler)
        servers.append(srv)
        return srv

    yield make
    for srv in servers:
        srv.stop()


def client_for(srv: Scripted, *, version: str | None = None, timeout: float = 5.0, verbose: bool = False) -> FlowClient:
    server = http_server(srv.url, headers={"X-Trace": "1"}, protocol_version=version, config_file="/tmp/mcp.json")
    return FlowClient(server, timeout=timeout, log=Log(io.StringIO(), verbose=verbose), client=srv.client)


def test_modern_32022_with_only_legacy_versions_falls_back_to_initialize_R01(scripted):
    def extra(verb, rpc, headers):
        if rpc and rpc.get("method") == "server/discover":
            return err(400, rpc, -32022, "Unsupported protocol version", {"supported": ["2025-11-25"]})
        return None

    srv = scripted(legacy_server(extra))
    with client_for(srv) as client:
        client.connect()
        assert client.era == "legacy" and client.protocol_version == "2025-11-25"
    assert srv.methods() == ["server/discover", "initialize", "notifications/initialized"]


LEGACY_OPEN = ["server/discover", "initialize", "notifications/initialized"]


def n8n_like_server(*, modern_discover: bool = False):
    """A legacy, session-based server shaped like n8n-mcp 2.87.0's HTTP mode: without a session id, an unknown
    method is HTTP 404 + -32601 and any other request but ``initialize`` is 400 -32000 "No valid session ID provided
    and not an initialize request". ``modern_discover``: a stub in front of it answers ``server/discover`` with a
    modern ``DiscoverResult`` (a modern verdict the rest of the server does not bear out)."""

    def handler(verb: str, rpc: dict | None, headers: dict) -> Reply:
        if verb == "DELETE":
            return 200, {}, ""
        method, session = rpc.get("method"), headers.get("mcp-session-id")
        if method == "server/discover":
            if modern_discover:
                return ok(rpc, {"supportedVersions": ["2026-07-28"], "capabilities": {}, "resultType": "complete"})
            return err(404 if session is None else 200, rpc, -32601, "Method not found: server/discover")
        if method == "initialize":
            return (
                200,
                {**JSON, "Mcp-Session-Id": "n8n-1"},
                json.dumps({"jsonrpc": "2.0", "id": rpc["id"], "result": INIT}),
            )
        if session != "n8n-1":
            return err(400, rpc, -32000, "Bad Request: No valid session ID provided and not an initialize request")
        if "id" not in rpc:
            return 202, {}, ""
        if method == "tools/list":
            return ok(rpc, TOOLS)
        if method == "tools/call":
            return ok(rpc, {"content": [{"type": "text", "text": "ran"}]})
        return err(200, rpc, -32601)

    return handler


def test_404_method_not_found_to_discover_means_legacy_initialize_issue36(scripted):
    """n8n-mcp answers server/discover with HTTP 404 + -32601: every modern server implements server/discover
    (2026-07-28 server/discover: "Servers MUST implement it"), so that is no proof of a modern server."""
    srv = scripted(n8n_like_server())
    with client_for(srv) as client:
        client.connect()
        assert client.era == "legacy" and client.protocol_version == "2025-11-25"
        assert [t["name"] for t in client.list_tools()] == ["t"]
        assert client.call_tool("t", {})["content"][0]["text"] == "ran"
    assert srv.methods() == [*LEGACY_OPEN, "tools/list", "tools/call", "DELETE"]


def test_404_method_not_found_to_discover_and_initialize_means_modern_R01(scripted):
    """A modern server that lacks server/discover refuses initialize the same way: modern after all, with no
    further probe (and no server/discover for the server info it does not have)."""

    def handler(verb, rpc, headers):
        if rpc["method"] in ("server/discover", "initialize"):
            return err(404, rpc, -32601, "Method not found")
        return ok(rpc, {**TOOLS, "resultType": "complete"})

    srv = scripted(handler)
    with client_for(srv) as client:
        client.connect()
        assert client.era == "modern"
        assert [t["name"] for t in client.list_tools()] == ["t"]
    assert srv.methods() == ["server/discover", "initialize", "tools/list"]
    assert srv.requests[2]["headers"]["mcp-protocol-version"] == "2026-07-28"


def test_modern_verdict_refused_as_legacy_falls_back_to_initialize_once_issue36(scripted):
    """A modern verdict whose first request, tools/list, is refused as a legacy server refuses a request outside a
    session: initialize once, then tools/list again in the legacy session; the call is sent once, after it."""
    srv = scripted(n8n_like_server(modern_discover=True))
    with client_for(srv) as client:
        client.connect()
        assert client.era == "modern"
        assert [t["name"] for t in client.list_tools()] == ["t"]
        assert client.era == "legacy" and client.protocol_version == "2025-11-25"
        client.call_tool("t", {})
    assert srv.methods() == [
        "server/discover",
        "tools/list",
        "initialize",
        "notifications/initialized",
        "tools/list",
        "tools/call",
        "DELETE",
    ]
    assert [r["headers"].get("mcp-session-id") for r in srv.requests[4:]] == ["n8n-1", "n8n-1", "n8n-1"]


def test_modern_verdict_refused_on_a_call_never_resends_it_issue36(scripted):
    """When the first request after the modern verdict is a tools/call (a kept catalogue: warm or resident), the
    refusal is reported and nothing is resent; the next read-only request still falls back, once."""
    srv = scripted(n8n_like_server(modern_discover=True))
    with client_for(srv) as client:
        client.connect()
        with pytest.raises(bkmcp.RemoteError) as info:
            client.call_tool("t", {})
        assert "No valid session ID" in info.value.message
        assert srv.methods() == ["server/discover", "tools/call"]
        assert client.era == "modern"
        client.list_tools()
        assert client.era == "legacy"
    assert srv.methods() == [
        "server/discover",
        "tools/call",
        "tools/list",
        "initialize",
        "notifications/initialized",
        "tools/list",
        "DELETE",
    ]


def test_a_confirmed_modern_era_does_not_fall_back_issue36(scripted):
    """Once a request was answered under the modern era (or it was pinned), a later refusal is the server's error."""
    answered = []

    def handler(verb, rpc, headers):
        if rpc["method"] == "server/discover":
            return ok(rpc, {"supportedVersions": ["2026-07-28"], "capabilities": {}, "resultType": "complete"})
        if rpc["method"] == "tools/list" and not answered:
            answered.append(1)
            return ok(rpc, {**TOOLS, "resultType": "complete"})
        return err(400, rpc, -32000, "Bad Request: No valid session ID provided")

    srv = scripted(handler)
    with client_for(srv) as client:
        client.connect()
        client.list_tools()
        with pytest.raises(bkmcp.RemoteError):
            client.list_tools()
    assert srv.methods() == ["server/discover", "tools/list", "tools/list"]


def test_modern_32022_with_disjoint_versions_is_protocol_error_listing_both_sides_R01(scripted):
    srv = scripted(lambda verb, rpc, h: err(400, rpc, -32022, "Unsupported", {"supported": ["2030-01-01"]}))
    with client_for(srv) as client, pytest.raises(bkmcp.ProtocolError) as info:
        client.connect()
    assert "2030-01-01" in info.value.message and "2026-07-28" in info.value.message
    assert srv.methods() == ["server/discover"]


def test_retry_once_with_a_shared_modern_version_R01(scripted, monkeypatch):
    monkeypatch.setattr(bkmcp, "MODERN_VERSIONS", ("2026-07-28", "2027-01-01"))
    monkeypatch.setattr(bkmcp, "LATEST_MODERN_VERSION", "2027-01-01")
    monkeypatch.setitem(
        bkmcp.ERA_TABLE,
        "2027-01-01",
        bkmcp.EraRules(**{**vars(bkmcp.ERA_TABLE["2026-07-28"]), "version": "2027-01-01"}),
    )

    def handler(verb, rpc, headers):
        if headers.get("mcp-protocol-version") == "2027-01-01":
            return err(400, rpc, -32022, "Unsupported", {"supported": ["2026-07-28"]})
        return ok(rpc, {"supportedVersions": ["2026-07-28"], "resultType": "complete"})

    srv = scripted(handler)
    with client_for(srv) as client:
        client.connect()
        assert client.protocol_version == "2026-07-28"
    assert [r["headers"]["mcp-protocol-version"] for r in srv.requests] == ["2027-01-01", "2026-07-28"]


def test_server_choosing_an_unsupported_version_is_protocol_error_R01(scripted):
    def extra(verb, rpc, headers):
        if rpc and rpc.get("method") == "initialize":
            return ok(rpc, {**INIT, "protocolVersion": "2024-10-07"})
        return None

    srv = scripted(legacy_server(extra))
    with client_for(srv) as client, pytest.raises(bkmcp.ProtocolError) as info:
        client.connect()
    assert "2024-10-07" in info.value.message and "2025-11-25" in info.value.message
    assert "protocolVersion" not in (info.value.hint or "")  # a pin cannot help: the server chose its version
    assert "notifications/initialized" not in srv.methods()


@pytest.mark.parametrize("pinned", [None, "2024-11-05"])
def test_server_choosing_2024_11_05_is_spoken_issue36(scripted, pinned):
    """chroma-mcp 0.2.6 (mcp 1.6.0) answers initialize with 2024-11-05: bkmcp speaks it (no version header: it
    came in 2025-06-18), unpinned or pinned."""

    def extra(verb, rpc, headers):
        if rpc and rpc.get("method") == "initialize":
            return ok(rpc, {**INIT, "protocolVersion": "2024-11-05"})
        return None

    srv = scripted(legacy_server(extra))
    with client_for(srv, version=pinned) as client:
        client.connect()
        assert client.protocol_version == "2024-11-05" and client.era == "legacy"
        assert [t["name"] for t in client.list_tools()] == ["t"]
    assert srv.methods() == [
        *(["server/discover"] if pinned is None else []),
        "initialize",
        "notifications/initialized",
        "tools/list",
    ]
    init = next(r for r in srv.requests if (r["rpc"] or {}).get("method") == "initialize")
    assert init["rpc"]["params"]["protocolVersion"] == (pinned or "2025-11-25")
    assert all(
        "mcp-protocol-version" not in r["headers"]
        for r in srv.requests
        if (r["rpc"] or {}).get("method") != "server/discover"
    )


def test_initialize_json_rpc_error_is_reported(scripted):
    srv = scripted(
        legacy_server(
            lambda v, rpc, h: (
                err(200, rpc, -32602, "Unsupported protocol version")
                if rpc and rpc.get("method") == "initialize"
                else None
            )
        )
    )
    with client_for(srv, version="2025-06-18") as client, pytest.raises(bkmcp.ProtocolError) as info:
        client.connect()
    assert info.value.details["rpc_error"]["code"] == -32602


def test_pinned_modern_discover_error_is_raised_not_a_fallback_R01(scripted):
    srv = scripted(lambda verb, rpc, h: err(200, rpc, -32603, "internal"))
    with client_for(srv, version="2026-07-28") as client, pytest.raises(bkmcp.ProtocolError):
        client.connect(server_info=True)
    assert srv.methods() == ["server/discover"]


def test_pinned_modern_without_server_info_sends_no_discover(scripted):
    srv = scripted(lambda verb, rpc, h: ok(rpc, {**TOOLS, "resultType": "complete"}))
    with client_for(srv, version="2026-07-28") as client:
        client.connect()
        client.list_tools()
    assert srv.methods() == ["tools/list"]


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ((200, JSON, '{"jsonrpc":"2.0","id":999,"result":{"tools":[]}}'), "has no response for request id"),
        ((200, {"Content-Type": "text/html"}, "<html>login</html>"), "unsupported content type"),
        ((202, {}, ""), "no JSON-RPC response"),
        ((200, JSON, '{"jsonrpc":"2.0","method":"notifications/message"}'), "has no response"),
        ((200, JSON, "{oops"), "invalid JSON"),
        ((500, {"Content-Type": "text/plain"}, "boom"), "HTTP 500: boom"),
    ],
)
def test_odd_answers_are_protocol_errors_R02(scripted, reply, message):
    srv = scripted(legacy_server(lambda v, rpc, h: reply if rpc and rpc.get("method") == "tools/list" else None))
    with client_for(srv, version="2025-11-25") as client:
        client.connect()
        with pytest.raises(bkmcp.ProtocolError) as info:
            client.list_tools()
    assert message in info.value.message


def test_sse_skips_other_event_types_and_other_ids(scripted):
    def extra(verb, rpc, headers):
        if rpc and rpc.get("method") == "tools/list":
            body = (
                ": hi\n\nevent: ping\ndata: {}\n\n"
                'data: {"jsonrpc":"2.0","id":"other","result":{}}\n\n'
                f"data: {json.dumps({'jsonrpc': '2.0', 'id': rpc['id'], 'result': TOOLS})}\n\n"
            )
            return 200, SSE, body
        return None

    srv = scripted(legacy_server(extra))
    with client_for(srv, version="2025-11-25", verbose=True) as client:
        client.connect()
        assert len(client.list_tools()) == 1
        assert "ignoring SSE event of type 'ping'" in client.log.stream.getvalue()


def test_sse_stream_closed_without_event_id_is_connection_error_outcome_unknown(scripted):
    srv = scripted(
        legacy_server(
            lambda v, rpc, h: (200, SSE, ": nothing\n\n") if rpc and rpc.get("method") == "tools/call" else None
        )
    )
    with client_for(srv, version="2025-11-25") as client:
        client.connect()
        client.list_tools()
        with pytest.raises(bkmcp.ConnectionFailedError) as info:
            client.call_tool("t", {})
    assert info.value.details["outcome"] == "unknown"
    assert srv.methods().count("tools/call") == 1


def test_resumption_refused_by_the_server_is_reported(scripted):
    def extra(verb, rpc, headers):
        if rpc and rpc.get("method") == "tools/call":
            return 200, SSE, "id: e1\nretry: 10\ndata: \n\n"
        if verb == "GET":
            return 405, {}, ""
        return None

    srv = scripted(legacy_server(extra))
    with client_for(srv, version="2025-11-25") as client:
        client.connect()
        client.list_tools()
        with pytest.raises(bkmcp.ConnectionFailedError) as info:
            client.call_tool("t", {})
    assert "refused to resume" in info.value.message and info.value.details["outcome"] == "unknown"
    get = [r for r in srv.requests if r["verb"] == "GET"][0]
    assert get["headers"]["last-event-id"] == "e1" and get["headers"]["accept"] == "text/event-stream"
    assert srv.methods().count("tools/call") == 1


def test_modern_missing_capability_32021_is_capability_unsupported_R04(scripted):
    def handler(verb, rpc, headers):
        if rpc["method"] == "tools/call":
            return err(400, rpc, -32021, "needs elicitation", {"requiredCapabilities": {"elicitation": {}}})
        return ok(rpc, {**TOOLS, "supportedVersions": ["2026-07-28"], "resultType": "complete"})

    srv = scripted(handler)
    with client_for(srv) as client:
        client.connect()
        client.list_tools()
        with pytest.raises(bkmcp.CapabilityUnsupportedError) as info:
            client.call_tool("t", {})
    assert info.value.details["required"] == {"elicitation": {}}


def test_mcp_param_headers_reach_the_server_on_modern_calls(scripted):
    tool = {
        "name": "t",
        "inputSchema": {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}},
    }

    def handler(verb, rpc, headers):
        if rpc["method"] == "tools/call":
            return ok(rpc, {"content": [], "resultType": "complete"})
        return ok(rpc, {"tools": [tool], "supportedVersions": ["2026-07-28"], "resultType": "complete"})

    srv = scripted(handler)
    with client_for(srv) as client:
        client.connect()
        client.list_tools()
        client.call_tool("t", {"region": "eu west"})
    call = srv.requests[-1]
    assert call["headers"]["mcp-param-region"] == "eu west"
    assert call["headers"]["mcp-name"] == "t" and call["headers"]["x-trace"] == "1"


def test_transport_interface_directly(scripted):
    """The transport alone: exchange yields the response; send_message posts; end_session is best effort."""

    def handler(verb, rpc, headers):
        if verb == "DELETE":
            return 405, {}, ""
        if rpc and "id" in rpc:
            return (
                200,
                {**JSON, "Mcp-Session-Id": "abc"},
                json.dumps(
                    [
                        {"jsonrpc": "2.0", "method": "notifications/message", "params": {}},
                        {"jsonrpc": "2.0", "id": rpc["id"], "result": INIT},
                    ]
                ),
            )
        return 202, {}, ""

    srv = scripted(handler)
    transport = HttpTransport(http_server(srv.url), insecure=False, log=Log(io.StringIO()), client=srv.client)
    core, seen = attached(transport)
    rules = era_rules("2025-03-26")
    message = bkmcp.build_request(1, "initialize", bkmcp.build_initialize_params("2025-03-26"), rules)
    transport.send(bkmcp.Outgoing(message, None, Deadline(5)))
    assert [m.kind for m in seen] == ["notification", "result"] and core.session_id == "abc"
    transport.send(
        bkmcp.Outgoing(
            bkmcp.build_notification("notifications/initialized", None, rules), rules, Deadline(5), core.session_id
        )
    )
    assert srv.requests[-1]["headers"]["mcp-session-id"] == "abc"
    transport.end_session(Deadline(5), rules=rules, session_id=core.session_id)
    transport.close()
    assert srv.requests[-1]["verb"] == "DELETE" and srv.requests[-1]["headers"]["mcp-session-id"] == "abc"
