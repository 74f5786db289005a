"""Issue 29 item 7, the smaller defects, each on the real wire (HTTP on 127.0.0.1 or a real stdio child, the
resident over its real socket): a message nested deeper than bkmcp parses, a ``command`` behind a folder the user
cannot traverse, a registry file deleted under the resident, memory after a large warm result, refused other-uid
connections in warm.log, literal secrets in a registry's ``args``, a UTF-8 BOM before mcp.json.
"""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.helpers import run_bkmcp, write_mcp_json

ROOT = Path(__file__).resolve().parents[2]
MOCK = str(ROOT / "mock_server" / "mcp_mock.py")


def config(tmp_path: Path, entry: dict) -> str:
    return str(write_mcp_json(tmp_path, {"s": entry}))


class _DeepAnswers(BaseHTTPRequestHandler):
    """Answers every POST with a valid JSON-RPC result nested 5000 levels deep; records what it received."""

    received: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).received.append(body)
        answer = b'{"jsonrpc": "2.0", "id": 1, "result": {"deep": ' + b"[" * 5000 + b"]" * 5000 + b"}}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


def test_an_http_answer_nested_deeper_than_bkmcp_parses_names_bkmcps_limit(tmp_path):
    """Valid JSON nested 5000 deep is not "invalid JSON" and not "not JSON-RPC": the limit is bkmcp's, and the
    error says so (over stdio such a line is skipped with the same words: test_stdio_transport.py)."""
    _DeepAnswers.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _DeepAnswers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/mcp"
        res = run_bkmcp("--config", config(tmp_path, {"type": "http", "url": url}), "s", "--check", "--timeout", "10s")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert res.exit_status == 2, res.stdout + res.stderr
    error = res.json["error"]
    limit = f"nested deeper than bkmcp parses (about {sys.getrecursionlimit()} levels)"
    assert error["code"] == "mcp_protocol_error" and limit in error["message"], error
    assert "invalid JSON" not in error["message"] and "not JSON-RPC" not in error["message"]
    assert _DeepAnswers.received and b'"jsonrpc"' in _DeepAnswers.received[0]  # it reached the server
