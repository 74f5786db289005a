"""The built bkmcp.pyz in resident mode on every available CPython 3.9-3.14: two users, a public HTTP server and
a per-user stdio server, calls, a crash and restart, shutdown; asserting what the servers received."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from resident_harness import Resident, group_alive, http_row, mock_stdio, stdio_row, write_registry  # noqa: E402

from mock_server.mcp_mock import DEFAULT_TOOLS, MockServer, mock_tool  # noqa: E402

pytestmark = pytest.mark.artifact


def test_pyz_resident_two_users_public_http_user_stdio(
    python: str, pyz_path: Path, pyz_env: dict, tmp_path: Path
) -> None:
    srv = MockServer({"require_headers": {"Authorization": "Bearer sys-pyz-1"}})
    srv.start()
    try:
        env_tool = mock_tool("whoami", "env", vars=["MY_TOKEN"])
        rows = [
            http_row("pub", srv.url),
            stdio_row(
                "box",
                mock_stdio({"tools": [env_tool, mock_tool("crash", "drop"), *DEFAULT_TOOLS]}),
                env={"MY_TOKEN": "${user.token}"},
            ),
        ]
        users = {("ann", "box"): {"token": "ann-pyz-2"}, ("ben", "box"): {"token": "ben-pyz-3"}}
        reg = tmp_path / "registry.db"
        write_registry(str(reg), rows, {"pub": {"api_key": "sys-pyz-1"}}, users)
        res = Resident(reg, pyz=pyz_path, python=python, env=pyz_env)
        try:
            assert res.ok("init")["servers"][0]["status"] == "connected"
            for user in ("ann", "ben"):
                names = {t["name"] for t in res.ok("list_tools", user)["tools"]}
                assert {"mcp_pub_echo", "mcp_box_whoami"} <= names
                env = res.ok("call_tool", user, name="mcp_box_whoami", arguments={})
                assert env["result"]["structuredContent"]["env"]["MY_TOKEN"] == users[(user, "box")]["token"]
                res.ok("call_tool", user, name="mcp_pub_echo", arguments={"text": user})
            line = (
                '{"command":"invoke","task_id":"exact","params":{"action":"call_tool","name":"mcp_pub_echo",'
                '"arguments":{"text":"n","ratio":1e400}},"user":{"userId":"ann"}}\n'
            )
            res.send_raw(line.encode())
            assert res.wait("exact")["success"] is True
            assert "1e400" in srv.requests("tools/call")[-1]["body"]
            crashed = res.ask("call_tool", "ann", server_name="box", tool_name="crash", arguments={})
            assert crashed["error_code"] == "mcp_connection_error"
            res.ok("call_tool", "ann", server_name="box", tool_name="echo", arguments={"text": "again"})
            pids = res.child_pids()
            assert len(pids) == 3
            assert res.ok("shutdown") == {"stopped": True}
            assert res.exit_status() == 0
            assert [p for p in pids if group_alive(p)] == []
            assert "Traceback" not in "".join(res.stderr_lines)
            assert json.dumps(res.answers).count("sys-pyz-1") == 0
        finally:
            assert res.close() == []
    finally:
        srv.stop()


def test_pyz_cold_start_concurrency(pyz_path: Path, pyz_env: dict, tmp_path: Path) -> None:
    """Issue 16 item 6a through the pyz, where the deferred sections and the vendored packages' finder meet their
    first use too: 20 fresh processes, 500 commands each across every server kind, all sent before any answer is
    read: every one answered, none internal_error, no child left (tests/integration/cold_start.py)."""
    from cold_start import run_cold_starts

    assert run_cold_starts(tmp_path, processes=20, commands=500, pyz=pyz_path, python=sys.executable, env=pyz_env) == []
