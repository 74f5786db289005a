"""HTTP transport and negotiation (sections 6-7) on a real loopback socket: the CLI fuzz against a scripted
``ThreadingHTTPServer`` that answers with canned bytes, and the transport alone against the in-process mock (the
real MCP wire). The canned-bytes cases that need no socket are in tests/unit/test_http_transport.py.

Seed rows: R01 (negotiation table on the wire), R02 (classification).
"""

from __future__ import annotations

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bkmcp
from bkmcp import Deadline, HttpTransport, Log, era_rules
from mock_server.mcp_mock import MockServer, mock_tool
from tests.helpers import FUZZ_EXAMPLES, FlowClient, attached, http_server, run_bkmcp, write_mcp_json

pytestmark = [pytest.mark.integration]

Reply = tuple  # (status, headers dict, body bytes | str)


class Scripted:
    """A loopback HTTP server that answers POST/GET/DELETE with ``handler(verb, rpc, headers) -> (status,
    headers, body)``; records requests."""

    def __init__(self, handler: Callable[[str, dict | None, dict], Reply]) -> None:
        self.handler = handler
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                rpc = json.loads(raw) if raw else None
                headers = {k.lower(): v for k, v in self.headers.items()}
                outer.requests.append({"verb": self.command, "rpc": rpc, "headers": headers})
                status, extra, body = outer.handler(self.command, rpc, headers)
                data = body.encode() if isinstance(body, str) else body
                self.send_response(status)
                for key, value in extra.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_POST = do_GET = do_DELETE = _serve  # noqa: N815

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/mcp"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# -- fuzzing through the CLI: whatever the server answers, bkmcp exits 0, 1 or 2 with one envelope ------------


_bodies = st.one_of(
    st.binary(max_size=200),
    st.sampled_from(
        [
            b"",
            b"{}",
            b"[]",
            b"null",
            b'{"jsonrpc":"2.0"}',
            b'{"jsonrpc":"2.0","id":1}',
            b'{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"t"}]}}',
            b'{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"t"},{"name":"t"}]}}',
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32042,"message":"x","data":{"elicitations":5}}}',
            b'{"jsonrpc":"2.0","id":"1","result":{}}',
            b"data: {}\n\n",
            b"id: x\nretry: 1\ndata: \n\n",
        ]
    ),
    st.builds(
        lambda r: json.dumps({"jsonrpc": "2.0", "id": 1, "result": r}).encode(),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=8),
            lambda c: (
                st.lists(c, max_size=3)
                | st.dictionaries(
                    st.sampled_from(
                        [
                            "tools",
                            "content",
                            "resultType",
                            "nextCursor",
                            "task",
                            "isError",
                            "protocolVersion",
                            "supportedVersions",
                            "name",
                        ]
                    ),
                    c,
                    max_size=4,
                )
            ),
            max_leaves=10,
        ),
    ),
)
_hostile = st.sampled_from(
    [
        b"[" * 3000 + b"]" * 3000,  # deeper than any parser should follow
        b'{"jsonrpc":"2.0","id":1,"result":{"tools":['
        + b'{"name":"n"},' * 0
        + b'{"name":"'
        + b"x" * 2_000_000
        + b'"}]}}',
        b'{"jsonrpc":"2.0","id":1,"result":' + b'{"a":' * 2000 + b"1" + b"}" * 2000 + b"}",
        b'data: {"jsonrpc":"2.0","id":1,"res',  # SSE cut in the middle of an event
        b'id: e1\ndata: {"jsonrpc":"2.0","id":1,"result":{"content":[]}}',  # no blank line: never dispatched
        b'data: {"jsonrpc":"2.0","id":999,"result":{}}\n\n',  # a response for an id never sent
        b'data: {"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"x"}}\n\n',
        b'[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":1,"result":{}}]',  # two answers for one id
        b'{"jsonrpc":"2.0","id":1,"result":{"resultType":"task","taskId":"t"}}',
        b'{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{"a":{"method":"x"}}}}',
        b'{"jsonrpc":"2.0","method":"sampling/createMessage","id":"s1","params":{}}',
        b"\xff\xfe\x00garbage",
    ]
)
_answers = st.tuples(
    st.sampled_from([200, 200, 200, 202, 204, 301, 400, 401, 403, 404, 405, 500, 503]),
    st.sampled_from(["application/json", "text/event-stream", "text/html", "application/json; charset=utf-8", ""]),
    st.one_of(_bodies, _hostile),
)


def _documented_exit_statuses() -> dict[str, str]:
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "errors.md").read_text(encoding="utf-8")
    return {m.group(1): m.group(2) for m in re.finditer(r"^\|\s*`([a-z_]+)`\s*\|\s*([^|]+?)\s*\|", text, re.M)}


_EXITS = _documented_exit_statuses()


@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    st.lists(_answers, min_size=1, max_size=6),
    st.sampled_from([None, "2025-03-26", "2025-11-25", "2026-07-28"]),
    st.sampled_from(["--check", "--tools", "call"]),
)
def test_fuzz_any_server_answer_gives_exit_0_1_or_2_R02(tmp_path, answers, version, mode):
    """The hostile-server fuzz target (issue 11): random statuses, content types, truncated or invalid JSON and
    SSE, wrong and duplicate ids, huge and deep values and random JSON-RPC shapes for every answer of both eras.
    bkmcp answers with one envelope carrying a documented code and its documented exit status (2 after a remote
    step; 1 only for a complete catalogue without the tool), never a traceback, and sends tools/call at most once."""
    queue = list(answers)

    def handler(verb, rpc, headers):
        status, ctype, body = queue.pop(0) if queue else answers[-1]
        if isinstance(rpc, dict) and body.startswith(b'{"jsonrpc":"2.0","id":1'):
            body = body.replace(b'"id":1', b'"id":' + json.dumps(rpc.get("id")).encode(), 1)
        extra = {"Content-Type": ctype} if ctype else {}
        if 300 <= status < 400:
            extra["Location"] = "http://user:pw@elsewhere.invalid/x?token=t"
        return status, extra, body

    srv = Scripted(handler)
    try:
        entry: dict[str, Any] = {"type": "http", "url": srv.url}
        if version:
            entry["protocolVersion"] = version
        config = write_mcp_json(tmp_path, {"s": entry})
        args = ["t", "--body", "{}"] if mode == "call" else [mode]
        result = run_bkmcp("--timeout", "5s", "--config", str(config), "s", *args)
        assert result.exit_status in (0, 1, 2), result.stdout + result.stderr
        assert "internal_error" not in result.stdout + result.stderr, result.stdout + result.stderr
        assert "Traceback" not in result.stderr
        assert "pw@" not in result.stdout and "token=t" not in result.stdout
        envelope = result.json
        assert isinstance(envelope, dict) and "ok" in envelope
        if result.exit_status != 0:  # a documented code, with its documented exit status (docs/errors.md)
            code = envelope["error"]["code"]
            assert code in _EXITS, code
            assert _EXITS[code] == str(result.exit_status), (code, result.exit_status)
            if result.exit_status == 1:  # local after a remote step: only a catalogue without the tool
                assert code == "mcp_tool_not_found", code
        assert [r["rpc"].get("method") for r in srv.requests if isinstance(r["rpc"], dict)].count("tools/call") <= 1
    finally:
        srv.stop()


# -- the transport alone against the in-process mock (real MCP wire) ----------------------------------------


@pytest.mark.parametrize("mode", ["json", "sse"])
def test_transport_exchange_against_the_mock_R01(mode):
    notes = [{"method": "notifications/message", "params": {"level": "info", "data": "n1"}}]
    with MockServer(
        {
            "response_mode": mode,
            "sse_priming": True,
            "sse_comments": True,
            "notifications_before_result": {"tools/list": notes},
        }
    ) as srv:
        server = http_server(srv.url, name="m", headers={"X-A": "1"})
        transport = HttpTransport(server, insecure=False, log=Log(io.StringIO()))
        core, seen = attached(transport)
        try:
            legacy = era_rules("2025-11-25")
            init = bkmcp.build_request(1, "initialize", bkmcp.build_initialize_params("2025-11-25"), legacy)
            transport.send(bkmcp.Outgoing(init, None, Deadline(5)))
            [answer] = seen
            assert answer.kind == "result" and answer.result["protocolVersion"] == "2025-11-25"
            assert core.session_id and transport.responses == 1
            sid = core.session_id
            transport.send(
                bkmcp.Outgoing(
                    bkmcp.build_notification("notifications/initialized", None, legacy), legacy, Deadline(5), sid
                )
            )
            seen.clear()
            listing = bkmcp.build_request(2, "tools/list", None, legacy)
            transport.send(bkmcp.Outgoing(listing, legacy, Deadline(5), sid))
            assert [m.kind for m in seen] == ["notification", "result"]
            transport.end_session(Deadline(5), rules=legacy, session_id=sid)
        finally:
            transport.close()
        log = srv.log
        assert [e["http_method"] for e in log] == ["POST", "POST", "POST", "DELETE"]
        assert all(e["headers"]["x-a"] == "1" for e in log)
        assert log[1]["status"] == 202 and log[3]["session_id"] == log[2]["session_id"]


@pytest.mark.parametrize("mode", ["json", "sse"])
def test_a_read_of_the_answer_goes_on_while_the_deadline_is_paused_and_times_out_when_spent_R04(mode):
    """A question asked on another stream pauses the call's deadline while its own answer is read (docs/contract.md
    §5): the read outlives the time that was left when the request was sent and gets the answer; the same read with
    no pause ends ``mcp_timeout`` as ever. The tool answers after 1.5 s; the budget is 0.5 s."""
    with MockServer({"response_mode": mode, "tools": [mock_tool("nap", "slow", ms=1500)]}) as srv:
        transport = HttpTransport(http_server(srv.url, name="m"), insecure=False, log=Log(io.StringIO()))
        core, seen = attached(transport)
        try:
            legacy = era_rules("2025-11-25")
            init = bkmcp.build_request(1, "initialize", bkmcp.build_initialize_params("2025-11-25"), legacy)
            transport.send(bkmcp.Outgoing(init, None, Deadline(5)))
            sid = core.session_id
            call = bkmcp.build_request(2, "tools/call", {"name": "nap", "arguments": {}}, legacy)
            deadline = Deadline(0.5)
            with deadline.paused():  # a person answering, from before the request until after its answer came
                transport.send(bkmcp.Outgoing(call, legacy, deadline, sid))
            assert seen[-1].kind == "result" and seen[-1].id == 2
            unpaused = bkmcp.build_request(3, "tools/call", {"name": "nap", "arguments": {}}, legacy)
            with pytest.raises(bkmcp.McpTimeoutError):
                transport.send(bkmcp.Outgoing(unpaused, legacy, Deadline(0.5), sid))
        finally:
            transport.close()
        assert [e["json"]["id"] for e in srv.requests("tools/call")] == [2, 3]


def test_modern_only_server_refusing_initialize_with_32022_is_modern_R01():
    """An unrecognisable discover answer -> initialize; a -32022 naming 2026-07-28 there means modern (the
    Python SDK client's rule); discover is asked once more for server info."""
    with MockServer(
        {"versions": ["2026-07-28"], "discover_supported_versions": [], "modern_only_initialize_error": -32022}
    ) as srv:
        server = http_server(srv.url, name="m")
        with FlowClient(server, timeout=5, log=Log(io.StringIO())) as client:
            client.connect()
            assert client.era == "modern" and client.protocol_version == "2026-07-28"
            assert [t["name"] for t in client.list_tools()][:1] == ["echo"]
        methods = [e["rpc_method"] for e in srv.log]
        assert methods[:3] == ["server/discover", "initialize", "server/discover"]
        assert "notifications/initialized" not in methods


# -- issue 36: a tentative modern era refused as a legacy server refuses, through the CLI -------------------------


def _stub_modern_discover_before_a_legacy_server(verb: str, rpc: dict | None, headers: dict) -> Reply:
    """A modern ``DiscoverResult`` in front of a legacy, session-based server shaped like n8n-mcp (400 "No valid
    session ID provided and not an initialize request" for anything but initialize without its session)."""
    json_type = {"Content-Type": "application/json"}

    def answer(result: Any, extra: dict | None = None) -> Reply:
        return 200, {**json_type, **(extra or {})}, json.dumps({"jsonrpc": "2.0", "id": rpc["id"], "result": result})

    if verb == "DELETE":
        return 200, {}, ""
    method = rpc.get("method")
    if method == "server/discover":
        return answer({"supportedVersions": ["2026-07-28"], "capabilities": {}, "resultType": "complete"})
    if method == "initialize":
        info = {"name": "legacy-behind", "version": "1"}
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": info}
        return answer(result, {"Mcp-Session-Id": "s-1"})
    if headers.get("mcp-session-id") != "s-1":
        error = {"code": -32000, "message": "Bad Request: No valid session ID provided and not an initialize request"}
        return 400, json_type, json.dumps({"jsonrpc": "2.0", "id": rpc.get("id"), "error": error})
    if "id" not in rpc:
        return 202, {}, ""
    if method == "tools/list":
        return answer({"tools": [{"name": "t", "inputSchema": {"type": "object"}}]})
    return answer({"content": [{"type": "text", "text": "ran"}]})


def test_cli_falls_back_once_from_a_tentative_modern_era_issue36(tmp_path):
    """--check and a call: the first tools/list refused as by a legacy server -> initialize once, tools/list again;
    the envelope reports the legacy era and the server info of initialize; the call is sent once, in the session."""
    srv = Scripted(_stub_modern_discover_before_a_legacy_server)
    try:
        config = write_mcp_json(tmp_path, {"s": {"type": "http", "url": srv.url}})
        check = run_bkmcp("--config", str(config), "s", "--check")
        assert check.exit_status == 0, check.stdout
        data = check.json["data"]
        assert (data["era"], data["protocol_version"]) == ("legacy", "2025-11-25")
        assert data["server_info"]["name"] == "legacy-behind" and data["tool_count"] == 1
        opening = ["server/discover", "tools/list", "initialize", "notifications/initialized", "tools/list"]
        assert [(r["rpc"] or {}).get("method", r["verb"]) for r in srv.requests] == [*opening, "DELETE"]
        srv.requests.clear()
        call = run_bkmcp("--config", str(config), "s", "t")
        assert call.exit_status == 0, call.stdout
        assert call.json["data"]["result"]["content"][0]["text"] == "ran"
        sent = [(r["rpc"] or {}).get("method", r["verb"]) for r in srv.requests]
        assert sent == [*opening, "tools/call", "DELETE"]
        assert srv.requests[5]["headers"]["mcp-session-id"] == "s-1"
    finally:
        srv.stop()


def test_resident_reports_the_era_again_after_the_tentative_modern_one_fell_back(tmp_path):
    """The resident's protocol.initialized event said the tentative modern era and nothing once the first request
    fell back to initialize; now a second protocol.initialized says the legacy era the session speaks."""
    from tests.integration.resident_harness import http_row, write_registry

    srv = Scripted(_stub_modern_discover_before_a_legacy_server)
    try:
        reg, events = tmp_path / "r.db", tmp_path / "events.jsonl"
        write_registry(str(reg), [http_row("s", srv.url)])
        command = {"command": "invoke", "task_id": "a", "params": {"action": "init"}}
        res = run_bkmcp("--resident", "--registry", str(reg), "--events", str(events), stdin=json.dumps(command) + "\n")
        assert res.exit_status == 0, res.stderr
        assert json.loads(res.stdout)["result"]["servers"][0] == {
            "server_name": "s",
            "status": "connected",
            "tool_count": 1,
        }
        said = [json.loads(e) for e in events.read_text().splitlines() if '"protocol.initialized"' in e]
        assert [(e["era"], e["version"]) for e in said] == [("modern", "2026-07-28"), ("legacy", "2025-11-25")]
    finally:
        srv.stop()
