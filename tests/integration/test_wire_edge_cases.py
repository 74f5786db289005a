"""Edge cases of the wire, each on the real wire (HTTP on 127.0.0.1 or a real stdio child):
a stdio ``cwd`` that is a file, a stdio server that exits at start, a 202 answer to ``tools/call``, the
authentication source of a stdio server, a second answer for one request id, and ``Set-Cookie`` never replayed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mock_server.mcp_mock import MockServer
from tests.helpers import run_bkmcp, write_mcp_json

ROOT = Path(__file__).resolve().parents[2]
MOCK = str(ROOT / "mock_server" / "mcp_mock.py")


def config(tmp_path: Path, entry: dict) -> str:
    return str(write_mcp_json(tmp_path, {"s": entry}))


def test_a_stdio_cwd_that_is_a_file_says_so(tmp_path):
    not_a_dir = tmp_path / "file.txt"
    not_a_dir.write_text("x")
    path = config(
        tmp_path, {"type": "stdio", "command": sys.executable, "args": [MOCK, "--stdio"], "cwd": str(not_a_dir)}
    )
    res = run_bkmcp("--config", path, "s", "--check")
    assert res.exit_status == 2 and res.error_code == "mcp_connection_error"
    assert "is not a directory" in res.json["error"]["message"]
    assert "does not exist" not in res.json["error"]["message"]


def test_a_stdio_server_that_exits_at_start_still_gets_an_envelope_with_data(tmp_path):
    path = config(tmp_path, {"type": "stdio", "command": sys.executable, "args": ["-c", "import sys; sys.exit(7)"]})
    res = run_bkmcp("--config", path, "--timeout", "10s", "s", "echo", "--body", "{}")
    assert res.exit_status == 2 and res.error_code == "mcp_connection_error", res.stdout + res.stderr
    assert res.json["data"] == {"server": "s", "tool": "echo"}
    assert "exited with status 7" in res.json["error"]["message"]


def test_a_202_answer_to_tools_call_is_named_for_what_it_is(tmp_path):
    with MockServer({"versions": ["2025-11-25"], "faults": {"status_on": {"tools/call": 202}}}) as srv:
        res = run_bkmcp("--config", config(tmp_path, {"type": "http", "url": srv.url}), "s", "echo", "--text", "hi")
        calls = srv.requests(rpc_method="tools/call")
    assert res.exit_status == 2 and res.error_code == "mcp_protocol_error", res.stdout
    message = res.json["error"]["message"]
    assert "HTTP 202" in message and "invalid JSON" not in message
    assert res.json["error"]["outcome"] == "unknown"  # the call was sent: it may have run
    assert len(calls) == 1


def test_check_on_a_stdio_server_never_claims_server_headers(tmp_path):
    plain = config(tmp_path, {"type": "stdio", "command": sys.executable, "args": [MOCK, "--stdio"]})
    res = run_bkmcp("--config", plain, "s", "--check")
    assert res.exit_status == 0, res.stdout + res.stderr
    assert res.json["data"]["authentication"] == {"source": "none", "discovery_accepted": True}
    keyed = config(
        tmp_path, {"type": "stdio", "command": sys.executable, "args": [MOCK, "--stdio"], "env": {"API_KEY": "${K}"}}
    )
    res = run_bkmcp("--config", keyed, "s", "--check", env={"K": "k-secret-value"})
    assert res.exit_status == 0, res.stdout + res.stderr
    assert res.json["data"]["authentication"]["source"] == "server_env"
    assert "k-secret-value" not in res.stdout + res.stderr


TWICE = r"""
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method = msg["method"]
    if method == "initialize":
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "twice"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "once"}]}
    else:
        result = {}
    for _ in range(2 if method == "tools/list" else 1):  # the catalogue is answered twice for one id
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    sys.stdout.flush()
"""


def test_a_second_answer_for_one_request_id_is_warned_and_ignored(tmp_path):
    """docs/contract.md §9 (issue 36 item 5): a second answer to an answered id is reported, never dropped silently."""
    script = tmp_path / "twice.py"
    script.write_text(TWICE, encoding="utf-8")
    path = config(
        tmp_path, {"type": "stdio", "command": sys.executable, "args": [str(script)], "protocolVersion": "2025-11-25"}
    )
    res = run_bkmcp("--config", path, "-v", "s", "t", "--body", "{}")
    assert res.exit_status == 0, res.stdout + res.stderr
    assert res.json["data"]["result"]["content"][0]["text"] == "once"
    warning = "bkmcp: warning: the server answered request id "
    assert warning in res.stderr and "a second time; it was ignored" in res.stderr
    quiet = run_bkmcp("--config", path, "s", "t", "--body", "{}")
    assert quiet.exit_status == 0 and [line.split(" id ")[0] for line in quiet.stderr.splitlines()] == [
        warning.split(" id ")[0]
    ]


def test_set_cookie_is_never_replayed(tmp_path):
    """The configured headers are the only identity (docs/contract.md §4): a Set-Cookie on initialize must not
    come back as Cookie on any later request (tools/call and DELETE included)."""
    with MockServer({"versions": ["2025-11-25"], "set_cookie": "sid=COOKIESECRET; Path=/"}) as srv:
        res = run_bkmcp(
            "--config", config(tmp_path, {"type": "http", "url": srv.url}), "-v", "s", "echo", "--text", "hi"
        )
        log = srv.log
    assert res.exit_status == 0, res.stdout + res.stderr
    first = next(i for i, e in enumerate(log) if e["rpc_method"] == "initialize")
    assert log[first]["response_headers"].get("set-cookie", "").startswith("sid=")
    later = log[first + 1 :]
    assert [e["http_method"] for e in later][-1] == "DELETE"
    assert all("cookie" not in e["headers"] for e in later)
    assert "COOKIESECRET" not in res.stdout + res.stderr
