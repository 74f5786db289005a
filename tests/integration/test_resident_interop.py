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


def test_everything_resources_and_prompts_through_the_resident(tmp_path, everything_server, everything_stdio_argv):
    """Issue 38 item 7 against server-everything over HTTP (public) and stdio (per user): 7 resources and 2
    templates each, every resource read, a blob's size and sha256 those of its bytes, 4 prompts, a prompt with its
    arguments, and the resource-reading tool of --inject-resource-tools reading the link a tool returned."""
    import base64
    import hashlib

    rows = [http_row("evhttp", everything_server.url), stdio_row("evstdio", everything_stdio_argv)]
    reg = tmp_path / "registry.db"
    write_registry(str(reg), rows, {"evstdio": {}})
    res = Resident(reg, "--timeout", "60s", "--inject-resource-tools")
    try:
        listed = res.ok("list_resources", "alice")
        assert listed["errors"] == []
        counts = {s["server_name"]: (s["resource_count"], s["template_count"]) for s in listed["servers"]}
        assert counts == {"evhttp": (7, 2), "evstdio": (7, 2)}
        for server in listed["servers"]:
            for resource in server["resources"]:
                read = res.ok("read_resource", "alice", server_name=server["server_name"], uri=resource["uri"])
                assert read["result"]["contents"][0]["text"].strip(), resource["uri"]
            uri = "demo://resource/dynamic/blob/3"
            summary = res.ok("read_resource", "alice", server_name=server["server_name"], uri=uri)
            whole = res.ok("read_resource", "alice", server_name=server["server_name"], uri=uri, include_blobs=True)
            data = base64.b64decode(whole["result"]["contents"][0]["blob"])
            item = summary["result"]["contents"][0]
            assert (item["bytes"], item["sha256"]) == (len(data), hashlib.sha256(data).hexdigest()) and data
            assert "blob" not in item
        prompts = res.ok("list_prompts", "alice")
        assert {s["server_name"]: s["prompt_count"] for s in prompts["servers"]} == {"evhttp": 4, "evstdio": 4}
        for server in ("evhttp", "evstdio"):
            args = {"city": "Paris", "state": "TX"}
            got = res.ok("get_prompt", "alice", server_name=server, name="args-prompt", arguments=args)
            assert "Paris" in got["result"]["messages"][0]["content"]["text"]
        tools = {t["name"]: t for t in res.ok("list_tools", "alice")["tools"]}
        readers = {t["server_name"]: t["name"] for t in tools.values() if t.get("resource_reader")}
        assert readers == {"evhttp": "mcp_evhttp_read_resource", "evstdio": "mcp_evstdio_read_resource"}
        links = res.ok("call_tool", "alice", server_name="evstdio", tool_name="get-resource-links", arguments={})
        link = next(c for c in links["result"]["content"] if c["type"] == "resource_link")
        read = res.ok("call_tool", "alice", name=readers["evstdio"], arguments={"uri": link["uri"]})
        assert read["result"]["content"][0]["resource"]["uri"] == link["uri"] and read["result"]["isError"] is False
    finally:
        assert res.close() == []
