"""Resident mode against real third-party servers: the official Python SDK server over HTTP (public, shared) and
stdio (per user), and server-everything over stdio (per user, whose ``get-env`` shows what each child got)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from resident_harness import Resident, group_alive, http_row, stdio_row, write_registry

pytestmark = pytest.mark.interop

USERS = {"alice": "alice-everything-9c1d", "bob": "bob-everything-4e7a"}


@pytest.fixture
def world(tmp_path: Path, sdk_server_stateful, sdk_stdio_argv, everything_stdio_argv):
    rows = [
        http_row("sdkhttp", sdk_server_stateful.url),
        stdio_row("sdkstdio", sdk_stdio_argv("stateful-sse")),
        stdio_row("every", everything_stdio_argv, env={"USER_TOKEN": "${user.token}"}),
    ]
    users = {(user, "every"): {"token": token} for user, token in USERS.items()}
    reg = tmp_path / "registry.db"
    write_registry(str(reg), rows, {"sdkstdio": {}}, users)
    res = Resident(reg, "--timeout", "60s")
    yield res
    left = res.close()
    assert left == []


def test_sdk_and_everything_for_two_users(world):
    res = world
    init = res.ok("init")
    assert init["servers"][0]["server_name"] == "sdkhttp" and init["servers"][0]["status"] == "connected"
    catalogues = {}
    for user in USERS:
        listed = res.ok("list_tools", user)
        assert listed["errors"] == [], listed["errors"]
        catalogues[user] = sorted(t["name"] for t in listed["tools"])
        names = {t["name"]: t for t in listed["tools"]}
        assert "mcp_sdkhttp_echo" in names and "mcp_sdkstdio_echo" in names
        assert any(n.startswith("mcp_every_") for n in names)
        assert "mcp_sdkhttp_ns_tool-name_v2" in names  # "ns.tool-name_v2" sanitised
        assert names["mcp_sdkhttp_ns_tool-name_v2"]["tool_name"] == "ns.tool-name_v2"
    assert catalogues["alice"] == catalogues["bob"]  # same servers seen: same injected names
    for user in USERS:
        for name in ("mcp_sdkhttp_echo", "mcp_sdkstdio_echo"):
            result = res.ok("call_tool", user, name=name, arguments={"text": f"hi {user}"})
            assert f"hi {user}" in json.dumps(result["result"]["content"])
        env = res.ok("call_tool", user, server_name="every", tool_name="get-env", arguments={})
        text = json.dumps(env["result"])
        assert USERS[user] in text and all(t not in text for u, t in USERS.items() if u != user)
    starts = res.events("process.started")
    assert {(e["server"], e["user"]) for e in starts} == {(s, u) for s in ("sdkstdio", "every") for u in USERS}
    failing = res.ok("call_tool", "alice", server_name="sdkstdio", tool_name="fail_tool_error", arguments={})
    assert failing["result"]["isError"] is True
    pids = res.child_pids()
    assert res.ok("shutdown") == {"stopped": True}
    assert res.exit_status() == 0
    assert [p for p in pids if group_alive(p)] == []
