"""Issue 11 item 7: defects found as a hostile server and a careless user, each through the real entry point.

- a server's ``pattern`` cannot hang bkmcp: local validation keeps to its limits and the operation's budget;
- a secret in the server URL's query never prints (``-v`` request lines, ``--dry-run``, server help);
- ``--jq`` streams each value as it comes, stops at the budget, ends quietly on a closed pipe.

The subprocess tests run ``bkmcp.py`` in a fresh interpreter with a hard kill as the safety net only.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import bkmcp
from mock_server.mcp_mock import MockServer, mock_tool
from tests.helpers import ROOT, run_bkmcp, write_mcp_json

pytestmark = [pytest.mark.integration]

HARD_KILL = 60  # seconds: a safety net against a hang, never the assertion itself
MEMORY_LIMIT = 1 << 30  # bytes of address space for a bkmcp child: an output that grows without end fails fast
EVIL = {"s": {"type": "string", "pattern": "^(a+)+$"}}


def bkmcp_process(*args: str, home: Path, **kw) -> subprocess.Popen:
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bkmcp.py"), *args],
        env=env,
        stdin=subprocess.DEVNULL,
        preexec_fn=_limit_memory,
        **kw,
    )
    killer = threading.Timer(HARD_KILL, proc.kill)  # the safety net, also for reads that would block
    killer.daemon = True
    killer.start()
    return proc


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_process(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    proc = bkmcp_process(*args, home=home, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=HARD_KILL)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"bkmcp {' '.join(args)} did not end within {HARD_KILL}s") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def write_config(tmp_path: Path, url: str) -> str:
    return str(write_mcp_json(tmp_path, {"m": {"type": "http", "url": url}}))


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
        config = str(write_mcp_json(tmp_path, {"s": {"type": "http", "url": url}}))
        res = run_bkmcp("--config", config, "s", "--check", "--timeout", "10s")
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


def test_a_utf8_bom_before_mcp_json_is_accepted_and_utf16_is_refused(tmp_path):
    """Decided (contract §3): one UTF-8 byte order mark before mcp.json is accepted and ignored (Windows editors
    write it); the server is used as configured. A UTF-16 file (also with a BOM) is invalid_mcp_config."""
    with MockServer({"versions": ["2025-11-25"]}) as srv:
        text = json.dumps({"mcpServers": {"s": {"type": "http", "url": srv.url, "headers": {"X-From": "bom-file"}}}})
        path = tmp_path / "mcp.json"
        path.write_bytes(b"\xef\xbb\xbf" + text.encode())
        path.chmod(0o600)
        res = run_bkmcp("--config", str(path), "s", "echo", "--text", "hi")
        calls = srv.requests(rpc_method="tools/call")
        path.write_bytes(text.encode("utf-16"))
        refused = run_bkmcp("--config", str(path), "s", "echo", "--text", "hi")
        assert len(srv.requests(rpc_method="tools/call")) == 1  # nothing sent for the UTF-16 file
    assert res.exit_status == 0, res.stdout + res.stderr
    assert [json.loads(c["body"])["params"]["arguments"] for c in calls] == [{"text": "hi"}]
    assert calls[0]["headers"]["x-from"] == "bom-file"
    assert refused.exit_status == 1 and refused.error_code == "invalid_mcp_config", refused.stdout


@pytest.fixture
def evil_server():
    with MockServer({"tools": [mock_tool("evil", properties=EVIL), mock_tool("echo")]}) as srv:
        yield srv


def test_catastrophic_pattern_never_hangs_the_call(evil_server, tmp_path):
    """``^(a+)+$`` against 30 a's and '!' took minutes of CPU in jsonschema: it is left to the server now."""
    config = write_config(tmp_path, evil_server.url)
    value = "a" * 30 + "!"
    res = run_process("--config", config, "--timeout", "5s", "-v", "m", "evil", "--s", value, home=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "pattern ^(a+)+$ not run locally (it nests quantifiers" in res.stderr
    assert "the server validates those" in res.stderr
    calls = evil_server.requests("tools/call")
    assert len(calls) == 1 and calls[0]["json"]["params"]["arguments"] == {"s": value}


def test_safe_patterns_are_still_checked_locally(evil_server, tmp_path):
    evil_server.update(tools=[mock_tool("t", properties={"s": {"type": "string", "pattern": "^[a-z]+$"}})])
    config = write_config(tmp_path, evil_server.url)
    res = run_bkmcp("--config", config, "m", "t", "--s", "abc1")
    assert res.exit_status == 1 and res.error_code == "invalid_mcp_arguments"
    assert res.json["error"]["problems"] == [
        {"path": "$.s", "message": "\"abc1\" does not match '^[a-z]+$'", "flag": "--s"}  # given as --s (issue 27)
    ]
    assert evil_server.requests("tools/call") == []


@pytest.mark.parametrize("path", ["quick", "jsonschema"])
def test_validation_past_the_budget_is_a_timeout_and_nothing_is_sent(evil_server, tmp_path, monkeypatch, path):
    """The deadline is checked between schema keywords: a budget spent during validation stops before the call, on
    the quick path (section 8, ``_quick_valid``) and in jsonschema's validator alike."""
    schema_tool = mock_tool("t", properties={"xs": {"type": "array", "items": {"type": "string"}}})
    evil_server.update(tools=[schema_tool])
    config = write_config(tmp_path, evil_server.url)
    if path == "quick":
        real_quick = bkmcp._quick_valid

        def spend_quick(schema, instance, deadline):
            if deadline is not None:
                deadline.end = 0.0  # the running validation's budget runs out as it starts
            return real_quick(schema, instance, deadline)

        monkeypatch.setattr(bkmcp, "_quick_valid", spend_quick)
    else:
        real = bkmcp.validator_class

        def spend_budget(schema):
            bkmcp._active_budget().deadline.end = 0.0
            return real(schema)

        monkeypatch.setattr(bkmcp, "_quickly_valid", lambda *args: False)
        monkeypatch.setattr(bkmcp, "validator_class", spend_budget)
    res = run_bkmcp("--config", config, "m", "t", "--xs", json.dumps(["x"] * 50))
    assert res.exit_status == 2 and res.error_code == "mcp_timeout", res.stdout + res.stderr
    assert evil_server.requests("tools/call") == []


SECRET_URL_QUERY = "?token=QSECRET&sig=QSIG&page=2&api_key=QKEY"


def test_url_secrets_never_print_but_reach_the_server(evil_server, tmp_path):
    config = write_config(tmp_path, evil_server.url + SECRET_URL_QUERY)
    tools = run_bkmcp("--config", config, "-v", "m", "--tools")
    assert tools.exit_status == 0, tools.stderr
    requests = [line for line in tools.stderr.splitlines() if line.startswith("bkmcp: -> ")]
    assert requests and all("token=***&sig=***&page=2&api_key=***" in line for line in requests)
    dry = run_bkmcp("--config", config, "m", "echo", "--body", "{}", "--dry-run")
    assert dry.json["data"]["url"] == evil_server.url + "?token=***&sig=***&page=2&api_key=***"
    help_text = run_bkmcp("--config", config, "m", "--help")
    assert "token=***&sig=***&page=2&api_key=***" in help_text.stdout
    for res in (tools, dry, help_text):
        for secret in ("QSECRET", "QSIG", "QKEY"):
            assert secret not in res.stdout + res.stderr
    # the server still got the query as configured
    assert all(e["path"] == "/mcp" + SECRET_URL_QUERY for e in evil_server.log)


def test_error_locations_keep_stripping_the_query(tmp_path):
    config = write_config(tmp_path, "http://127.0.0.1:9/mcp" + SECRET_URL_QUERY)  # nothing listens on port 9
    res = run_bkmcp("--config", config, "m", "--check")
    assert res.exit_status == 2 and res.error_code == "mcp_connection_error"
    assert "QSECRET" not in res.stdout + res.stderr and "127.0.0.1:9/mcp" in res.stdout


def dry_run_args(config: str, *extra: str) -> list[str]:
    return ["--config", config, *extra, "m", "echo", "--body", "{}", "--dry-run"]


def test_jq_streams_and_ends_quietly_when_the_reader_goes_away(tmp_path):
    """``--jq 'repeat(.ok)' | head -c 20``: output comes value by value; a closed pipe ends bkmcp (exit 1: local)."""
    config = write_config(tmp_path, "http://127.0.0.1:9/mcp")
    proc = bkmcp_process(
        *dry_run_args(config, "--jq", "repeat(.ok)"), home=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        head = b""
        while len(head) < 20:
            chunk = proc.stdout.read(20 - len(head))
            assert chunk, proc.stderr.read()
            head += chunk
        assert head == b"true\n" * 4
        proc.stdout.close()
        status = proc.wait(timeout=HARD_KILL)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert status == bkmcp.EXIT_LOCAL and err == b""


def test_jq_stops_at_the_budget(tmp_path):
    config = write_config(tmp_path, "http://127.0.0.1:9/mcp")
    out = tmp_path / "out"
    with out.open("wb") as sink:
        proc = bkmcp_process(
            *dry_run_args(config, "--timeout", "1s", "--jq", "repeat(.ok)"),
            home=tmp_path,
            stdout=sink,
            stderr=subprocess.PIPE,
        )
        try:
            _out, err = proc.communicate(timeout=HARD_KILL)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 2, err
    last = out.read_bytes().rsplit(b"\n", 2)[-2]
    envelope = json.loads(last)
    assert envelope["error"]["code"] == "jq_error"
    assert "did not finish within the time --timeout left for it" in envelope["error"]["message"]
    assert out.read_bytes().startswith(b"true\ntrue\n")


def test_redirect_locations_keep_stripping_the_query(tmp_path):
    target = "http://127.0.0.1:1/elsewhere?access_token=QMOVED"
    with MockServer({"faults": {"redirect": target}}) as srv:
        config = write_config(tmp_path, srv.url + SECRET_URL_QUERY)
        res = run_bkmcp("--config", config, "-v", "m", "--tools")
    assert res.exit_status == 2, res.stdout + res.stderr
    assert "http://127.0.0.1:1/elsewhere" in res.stdout
    for secret in ("QSECRET", "QSIG", "QKEY", "QMOVED"):
        assert secret not in res.stdout + res.stderr


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://h/mcp", "http://h/mcp"),
        ("http://h/mcp?", "http://h/mcp?"),
        ("http://h/mcp?page=1&x", "http://h/mcp?page=1&x"),
        (
            "http://h/mcp?token=a&Access_Token=b&apikey=c&api%5Fkey=d&key=e",
            "http://h/mcp?token=***&Access_Token=***&apikey=***&api%5Fkey=***&key=***",
        ),
        (
            "http://h/mcp?sig=a&X-Amz-Signature=b&X-Amz-Credential=c&code=d&sessionid=e&pwd=f&state=g",
            "http://h/mcp?sig=***&X-Amz-Signature=***&X-Amz-Credential=***&code=***&sessionid=***&pwd=***&state=g",
        ),
        ("http://h/mcp?client_secret=&auth", "http://h/mcp?client_secret=***&auth"),
    ],
)
def test_redact_url(url, shown):
    assert bkmcp.redact_url(url) == shown
