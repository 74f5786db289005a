"""Resources and prompts in the resident mode (issue 38 item 7, docs/contract.md §11.2): ``list_resources``,
``read_resource``, ``list_prompts``, ``get_prompt`` and the resource-reading tool ``--inject-resource-tools`` adds,
against the mock server over HTTP and stdio in both eras; what the servers received (methods, params, headers, none
at all without the capability), two users' own sessions, events without URIs' query strings or argument values, and
each command's own timeout. server-everything: tests/integration/test_resident_interop.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any

import pytest
from resident_harness import KINDS, LEGACY, MODERN, http_row, mock_stdio, stdio_row, world_fixtures, write_registry

from mock_server.mcp_mock import DEFAULT_TOOLS, TINY_PNG, MockServer, mock_tool

pytestmark = pytest.mark.integration

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
FAMILIES = ("function", "function_strict", "anthropic", "gemini")

make_world, world = world_fixtures()


def test_list_resources_gives_every_resource_and_template_per_server(world):
    result = world.res.ok("list_resources", "ann")
    assert result["errors"] == []
    [server] = result["servers"]
    assert (server["server_name"], server["resource_count"], server["template_count"]) == ("m", 2, 2)
    assert server["resources"][0] == {
        "uri": "mock://notes/readme",
        "name": "readme",
        "title": "Read me",
        "description": "A short text note.\nIts second line.",
        "mimeType": "text/plain",
    }
    assert [t["uriTemplate"] for t in server["templates"]] == ["mock://notes/{id}", "mock://search{?q,lang}"]
    assert [e["rpc_method"] for e in world.received() if e["rpc_method"].startswith("resources/")] == [
        "resources/list",
        "resources/templates/list",
    ]


def test_read_resource_gives_text_as_received_and_a_blob_as_its_size_and_hash(world):
    text = world.res.ok("read_resource", "ann", server_name="m", uri="mock://notes/readme")
    assert (text["server_name"], text["uri"]) == ("m", "mock://notes/readme")
    assert text["result"]["contents"] == [
        {"uri": "mock://notes/readme", "mimeType": "text/plain", "text": "hello from the mock\n"}
    ]
    png = base64.b64decode(TINY_PNG)
    blob = world.res.ok("read_resource", "ann", server_name="m", uri="mock://images/dot.png")
    assert blob["result"]["contents"] == [
        {
            "uri": "mock://images/dot.png",
            "mimeType": "image/png",
            "bytes": 70,
            "sha256": hashlib.sha256(png).hexdigest(),
        }
    ]
    whole = world.res.ok("read_resource", "ann", server_name="m", uri="mock://images/dot.png", include_blobs=True)
    assert whole["result"]["contents"][0]["blob"] == TINY_PNG and len(png) == 70
    reads = world.params("resources/read")
    assert reads == [{"uri": "mock://notes/readme"}] + [{"uri": "mock://images/dot.png"}] * 2
    missing = world.res.ask("read_resource", "ann", server_name="m", uri="mock://nowhere")
    assert (missing["success"], missing["error_code"]) == (False, "mcp_resource_not_found")


def test_list_prompts_and_get_prompt_with_its_arguments(world):
    listed = world.res.ok("list_prompts", "ann")
    assert listed["errors"] == [] and [p["name"] for p in listed["servers"][0]["prompts"]] == ["greet", "plain"]
    assert listed["servers"][0]["prompt_count"] == 2
    got = world.res.ok("get_prompt", "ann", server_name="m", name="greet", arguments={"who": "Ann", "tone": "007"})
    assert (got["server_name"], got["name"]) == ("m", "greet")
    assert [m["role"] for m in got["result"]["messages"]] == ["user", "assistant"]
    assert world.params("prompts/get") == [{"name": "greet", "arguments": {"who": "Ann", "tone": "007"}}]
    # checked against the prompt's declaration before sending, as the one-shot --prompt does
    missing = world.res.ask("get_prompt", "ann", server_name="m", name="greet", arguments={"tone": "x"})
    assert missing["error_code"] == "invalid_mcp_arguments" and "'who' is missing" in missing["error"]
    unknown = world.res.ask("get_prompt", "ann", server_name="m", name="greet", arguments={"who": "a", "nope": "b"})
    assert unknown["error_code"] == "invalid_mcp_arguments" and "no argument 'nope'" in unknown["error"]
    assert world.res.ask("get_prompt", "ann", server_name="m", name="gret")["error_code"] == "mcp_prompt_not_found"
    bad = world.res.ask("get_prompt", "ann", server_name="m", name="greet", arguments={"who": 1})
    assert bad["error_code"] == "invalid_command"
    assert len(world.received("prompts/get")) == 1  # nothing more was sent


@pytest.mark.parametrize("transport,version", KINDS, ids="-".join)
def test_a_server_without_the_capability_gets_no_request(make_world, transport, version):
    world = make_world(transport, version, capabilities={"tools": {}})
    res = world.res
    for action, params in (
        ("list_resources", {}),
        ("read_resource", {"server_name": "m", "uri": "mock://notes/readme"}),
        ("list_prompts", {}),
        ("get_prompt", {"server_name": "m", "name": "greet", "arguments": {"who": "a"}}),
    ):
        answer = res.ask(action, "ann", **params)
        if answer["success"]:  # a listing across servers: the server is in its errors
            assert answer["result"]["servers"] == []
            [error] = answer["result"]["errors"]
            assert (error["server_name"], error["error_code"]) == ("m", "mcp_capability_unsupported")
        else:
            assert answer["error_code"] == "mcp_capability_unsupported", answer
    sent = {e["rpc_method"] for e in world.received()}
    assert not sent & {"resources/list", "resources/templates/list", "resources/read", "prompts/list", "prompts/get"}


def test_a_blob_over_the_cap_is_blob_too_large_as_in_the_cli_and_its_summary_still_reads(make_world):
    """One rule with the CLI's --out (docs/contract.md §7, §11.2): --max-blob-bytes bounds each decoded blob."""
    world = make_world("http", MODERN, "--max-blob-bytes", "69")
    res = world.res
    over = res.ask("read_resource", "ann", server_name="m", uri="mock://images/dot.png", include_blobs=True)
    assert (over["success"], over["error_code"], over["details"]["limit"], over["details"]["bytes"]) == (
        False,
        "blob_too_large",
        69,
        70,
    )
    assert TINY_PNG not in json.dumps(over)
    summary = res.ok("read_resource", "ann", server_name="m", uri="mock://images/dot.png")
    assert summary["result"]["contents"][0]["bytes"] == 70
    assert res.ok("read_resource", "ann", server_name="m", uri="mock://notes/readme", include_blobs=True)


def test_each_command_has_its_own_timeout(make_world):
    world = make_world("stdio", MODERN, faults={"slow_on": {"resources/read": 5000, "prompts/list": 5000}})
    res = world.res
    res.ok("list_resources", "ann", timeout_ms=30000)  # the server started: 400 ms are the read's alone
    slow = res.send("read_resource", "ann", server_name="m", uri="mock://notes/readme", timeout_ms=400)
    fast = res.ok("list_resources", "ann", timeout_ms=30000)  # not held back by the slow read
    assert fast["servers"][0]["resource_count"] == 2
    answer = res.wait(slow)
    assert (answer["success"], answer["error_code"]) == (False, "mcp_timeout")
    assert answer["error"] == "no answer on server 'm' within 400 ms"
    listed = res.ok("list_prompts", "ann", timeout_ms=300)
    assert [e["error_code"] for e in listed["errors"]] == ["mcp_timeout"]
    assert res.wait_event("resource.read", error_code="mcp_timeout")


@pytest.mark.parametrize("transport,version", [("http", LEGACY), ("stdio", MODERN), ("http", MODERN)], ids="-".join)
def test_a_timed_out_read_or_prompt_is_cancelled_on_the_wire_as_a_call_is(make_world, transport, version):
    """As a timed-out tools/call: notifications/cancelled for the request's id where closing its stream does not
    cancel it (legacy, stdio); modern HTTP closes the stream instead."""
    slow = {"resources/read": 3000, "prompts/get": 3000}
    world = make_world(transport, version, faults={"slow_on": slow})
    res = world.res
    read = res.ask("read_resource", "ann", server_name="m", uri="mock://notes/readme", timeout_ms=300)
    got = res.ask("get_prompt", "ann", server_name="m", name="plain", timeout_ms=300)
    assert [read["error_code"], got["error_code"]] == ["mcp_timeout", "mcp_timeout"]
    ids = [e["json"]["id"] for method in ("resources/read", "prompts/get") for e in world.received(method)]
    if transport == "http" and version == MODERN:
        assert world.notifications("notifications/cancelled") == []
        return
    cancels = until_found(lambda: world.notifications("notifications/cancelled"), 2)
    assert [c["requestId"] for c in cancels] == ids and all("timed out" in c["reason"] for c in cancels)


def until_found(read: Any, count: int) -> list[Any]:
    """``read()`` once it holds ``count`` items (a notification is logged as it arrives), within a safety net."""
    import time

    end = time.monotonic() + 30
    while len(found := read()) < count and time.monotonic() < end:
        time.sleep(0.05)
    return found  # type: ignore[no-any-return]


def test_events_carry_no_query_strings_and_no_argument_values(make_world):
    world = make_world("http", MODERN)
    res = world.res
    query = "q-sentinel-5d1e"
    found = res.ok("read_resource", "ann", server_name="m", uri=f"mock://search?q={query}&lang=zh#frag-9c2e")
    assert query in json.dumps(found)  # the answer is the user's own: the server echoed the query
    res.ok("get_prompt", "ann", server_name="m", name="greet", arguments={"who": "arg-sentinel-77aa"})
    res.ok("list_resources", "ann")
    res.ok("list_prompts", "ann")
    [read] = res.wait_event("resource.read")
    assert (read["uri"], read["server"], read["user"], read["content_count"]) == ("mock://search", "m", "ann", 1)
    [fetched] = res.wait_event("prompt.fetched")
    assert (fetched["prompt"], fetched["message_count"]) == ("greet", 2)
    [listed] = res.wait_event("resources.listed")
    assert (listed["resource_count"], listed["template_count"]) == (2, 2)
    assert res.wait_event("prompts.listed")[0]["prompt_count"] == 2
    events = res.events_path.read_text()
    for secret in (query, "frag-9c2e", "arg-sentinel-77aa"):
        assert secret not in events


def test_two_users_read_through_their_own_sessions_and_never_see_each_others_credentials(tmp_path, resident):
    """A per-user HTTP server (each user's credential in a header) and a per-user stdio server (one child each):
    each user's reads reach the server with that user's own credential, and no answer or event of one user holds
    the other's credential or query."""
    srv = MockServer()
    srv.start()
    try:
        users = {"ann": "cred-ann-3f9b", "bob": "cred-bob-81c4"}
        rows = [
            http_row("hown", srv.url, isolation="user", headers={"X-Tenant": "${user.token}"}),
            stdio_row("sown", mock_stdio(), env={"MY_TOKEN": "${user.token}"}),
        ]
        creds = {(user, server): {"token": token} for user, token in users.items() for server in ("hown", "sown")}
        reg = tmp_path / "registry.db"
        write_registry(str(reg), rows, None, creds)
        res = resident(reg)
        answers: dict[str, str] = {}
        for user in users:
            for server in ("hown", "sown"):
                uri = f"mock://search?q=query-of-{user}"
                answers[user] = answers.get(user, "") + json.dumps(
                    res.ask("read_resource", user, server_name=server, uri=uri)
                )
                answers[user] += json.dumps(res.ask("list_resources", user, server_name=server))
                answers[user] += json.dumps(res.ask("get_prompt", user, server_name=server, name="plain"))
        for user, text in answers.items():
            other = next(u for u in users if u != user)
            assert f"query-of-{user}" in text
            assert users[other] not in text and f"query-of-{other}" not in text
        reads = srv.requests("resources/read")
        assert {(json.loads(e["body"])["params"]["uri"], e["headers"]["x-tenant"]) for e in reads} == {
            (f"mock://search?q=query-of-{user}", token) for user, token in users.items()
        }
        starts = res.events("process.started")
        assert sorted((e["server"], e["user"]) for e in starts) == [("sown", "ann"), ("sown", "bob")]
        events = res.events_path.read_text()
        assert all(token not in events for token in users.values()) and "query-of-" not in events
    finally:
        srv.stop()


def test_the_injected_resource_tool_reads_and_never_collides_with_a_server_tool(tmp_path, resident):
    """--inject-resource-tools: one resource-reading tool per server that declares resources, in the four model-family
    shapes; a server tool called read_resource gets its own name (both suffixed, §11.2), and each name calls its own
    thing: the tool is called, the reader reads."""
    own = mock_tool("read_resource", "echo", {"text": {"type": "string"}})
    srv = MockServer({"tools": [*DEFAULT_TOOLS, own]})
    bare = MockServer({"capabilities": {"tools": {}}})
    srv.start()
    bare.start()
    try:
        reg = tmp_path / "registry.db"
        write_registry(str(reg), [http_row("m", srv.url), http_row("bare", bare.url)])
        plain = resident(reg)
        names = {t["name"]: t for t in plain.ok("list_tools", "ann")["tools"]}
        assert names["mcp_m_read_resource"]["tool_name"] == "read_resource"  # without the option: the tool's plain name
        assert not any(t.get("resource_reader") for t in names.values())
        plain.close()

        res = resident(reg, "--inject-resource-tools")
        listed = res.ok("list_tools", "ann")
        assert listed["errors"] == []
        mine = [t for t in listed["tools"] if t["server_name"] == "m" and t["name"].startswith("mcp_m_read_resource")]
        reader = next(t for t in mine if t.get("resource_reader"))
        tool = next(t for t in mine if not t.get("resource_reader"))
        assert len(mine) == 2 and reader["tool_name"] is None and tool["tool_name"] == "read_resource"
        assert reader["name"] != tool["name"] and all(NAME_RE.match(t["name"]) for t in mine)
        for family in FAMILIES:
            assert reader[family]["name"] == reader["name"], family
        assert reader["anthropic"]["input_schema"]["required"] == ["uri"]
        assert not [t for t in listed["tools"] if t["server_name"] == "bare" and t.get("resource_reader")]

        read = res.ok("call_tool", "ann", name=reader["name"], arguments={"uri": "mock://notes/readme"})
        assert read["result"] == {
            "content": [
                {
                    "type": "resource",
                    "resource": {
                        "uri": "mock://notes/readme",
                        "mimeType": "text/plain",
                        "text": "hello from the mock\n",
                    },
                }
            ],
            "isError": False,
        }
        blob = res.ok("call_tool", "ann", name=reader["name"], arguments={"uri": "mock://images/dot.png"})
        assert blob["result"]["content"][0]["resource"]["bytes"] == 70
        called = res.ok("call_tool", "ann", name=tool["name"], arguments={"text": "hi"})
        assert called["tool_name"] == "read_resource" and called["result"]["isError"] is False
        assert [json.loads(e["body"])["params"]["uri"] for e in srv.requests("resources/read")] == [
            "mock://notes/readme",
            "mock://images/dot.png",
        ]
        assert [json.loads(e["body"])["params"]["name"] for e in srv.requests("tools/call")] == ["read_resource"]
        refused = res.ask("call_tool", "ann", name=reader["name"], arguments={})
        assert refused["error_code"] == "invalid_mcp_arguments"
        assert res.wait_event("tool.rejected", error_code="invalid_mcp_arguments")
    finally:
        srv.stop()
        bare.stop()


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_a_server_pinned_to_2026_07_28_gets_its_resource_tool_after_one_server_discover(make_world, transport):
    """A pin turns the era probe off, so the session never heard the server's capabilities: --inject-resource-tools
    asks them as the CLI does (declares_capability, one server/discover), then injects the reader; a pinned server
    without resources gets none; a second list_tools and a read ask nothing again. A pinned stdio server's child is
    spawned when its session opens (before, nothing had been sent, so the session was "not connected")."""
    world = make_world(transport, MODERN, "--inject-resource-tools", pin=True)
    listed = world.res.ok("list_tools", "ann")
    assert listed["errors"] == []
    [reader] = [t for t in listed["tools"] if t.get("resource_reader")]
    assert reader["server_name"] == "m" and reader["anthropic"]["input_schema"]["required"] == ["uri"]
    world.res.ok("list_tools", "ann")
    read = world.res.ok("call_tool", "ann", name=reader["name"], arguments={"uri": "mock://notes/readme"})
    assert read["result"]["content"][0]["resource"]["text"] == "hello from the mock\n"
    assert [e["rpc_method"] for e in world.received()] == [
        "tools/list",
        "server/discover",
        "resources/read",
    ]
    assert len(world.res.events("process.started")) == (transport == "stdio")  # spawned when its session opened
    bare = make_world(transport, MODERN, "--inject-resource-tools", pin=True, capabilities={"tools": {}})
    listed = bare.res.ok("list_tools", "ann")
    assert listed["errors"] == [] and not [t for t in listed["tools"] if t.get("resource_reader")]
    assert [e["rpc_method"] for e in bare.received()] == ["tools/list", "server/discover"]


def test_parse_errors_of_the_new_actions_are_invalid_command(make_world):
    res = make_world("http", MODERN).res
    for action, params in (
        ("read_resource", {"server_name": "m"}),
        ("read_resource", {"uri": "mock://x"}),
        ("read_resource", {"server_name": "m", "uri": ""}),
        ("read_resource", {"server_name": "m", "uri": "mock://x", "include_blobs": "yes"}),
        ("get_prompt", {"server_name": "m"}),
        ("get_prompt", {"server_name": "m", "name": "greet", "arguments": ["who"]}),
        ("list_resources", {"timeout_ms": 0}),
        ("list_prompts", {"server_name": 3}),
    ):
        answer = res.ask(action, "ann", **params)
        assert answer["error_code"] == "invalid_command", (action, params, answer)
    assert res.ok("list_prompts", "ann")["servers"][0]["prompt_count"] == 2


def test_in_process_resources_prompts_and_the_reader(tmp_path):
    """The same actions through ``bkmcp.main`` in this process (what coverage measures): a public HTTP server, a
    per-user stdio one and one without resources or prompts, each answer and what it cost the servers."""
    from tests.helpers import run_bkmcp

    srv = MockServer({"tools": [*DEFAULT_TOOLS, mock_tool("read_resource", "echo", {"text": {"type": "string"}})]})
    bare = MockServer({"capabilities": {"tools": {}}})
    srv.start()
    bare.start()
    try:
        reg = tmp_path / "r.db"
        rows = [
            http_row("pub", srv.url),
            stdio_row("box", mock_stdio()),
            http_row("bare", bare.url),
            http_row("down", "http://127.0.0.1:9/mcp"),  # nothing listens
        ]
        write_registry(str(reg), rows, {"box": {}})
        events = tmp_path / "events.jsonl"

        def line(task: str, action: str, **params: Any) -> str:
            body = {"command": "invoke", "task_id": task, "params": {"action": action, **params}}
            return json.dumps({**body, "user": {"userId": "u1"}})

        reader = "mcp_pub_read_resource_" + hashlib.sha256(b"resources/read\0pub").hexdigest()[:8]
        stdin = "".join(
            line(*command[:2], **command[2]) + "\n"
            for command in (
                ("a", "list_resources", {}),
                ("b", "read_resource", {"server_name": "box", "uri": "mock://notes/readme"}),
                ("c", "read_resource", {"server_name": "pub", "uri": "mock://images/dot.png", "include_blobs": True}),
                ("d", "read_resource", {"server_name": "pub", "uri": "mock://images/dot.png"}),
                ("e", "read_resource", {"server_name": "pub", "uri": "mock://nowhere"}),
                ("f", "read_resource", {"server_name": "bare", "uri": "mock://notes/readme"}),
                ("g", "read_resource", {"server_name": "nope", "uri": "mock://notes/readme"}),
                ("h", "list_prompts", {"server_name": "box"}),
                ("i", "get_prompt", {"server_name": "pub", "name": "greet", "arguments": {"who": "Ann"}}),
                ("j", "get_prompt", {"server_name": "box", "name": "greet"}),
                ("k", "list_tools", {}),
                ("l", "call_tool", {"name": reader, "arguments": {"uri": "mock://notes/readme"}}),
                ("m", "call_tool", {"name": reader, "arguments": {"uri": 5}}),
                ("n", "connect_server", {"server_name": "box"}),
                ("o", "read_resource", {"server_name": "down", "uri": "mock://notes/readme"}),
                ("p", "get_prompt", {"server_name": "pub", "name": "greet", "arguments": {"who": "a", "x": "y"}}),
            )
        )
        res = run_bkmcp(
            "--resident",
            "--registry",
            str(reg),
            "--events",
            str(events),
            "--inject-resource-tools",
            "--max-blob-bytes",
            "10",
            stdin=stdin,
        )
        assert res.exit_status == 0, res.stderr
        got = {a["task_id"]: a for a in map(json.loads, res.stdout.splitlines())}
        listed = got["a"]["result"]
        assert [(s["server_name"], s["resource_count"]) for s in listed["servers"]] == [("box", 2), ("pub", 2)]
        assert [(e["server_name"], e["error_code"]) for e in listed["errors"]] == [
            ("bare", "mcp_capability_unsupported"),
            ("down", "mcp_connection_error"),
        ]
        assert got["b"]["result"]["result"]["contents"][0]["text"] == "hello from the mock\n"
        assert (got["c"]["error_code"], got["c"]["details"]["bytes"]) == ("blob_too_large", 70)
        assert got["d"]["result"]["result"]["contents"][0]["bytes"] == 70
        assert got["e"]["error_code"] == "mcp_resource_not_found"
        assert got["f"]["error_code"] == "mcp_capability_unsupported"
        assert got["g"]["error_code"] == "mcp_server_not_found"
        assert got["h"]["result"]["servers"][0]["prompt_count"] == 2
        assert got["i"]["result"]["result"]["messages"][0]["content"]["text"] == "Greet Ann."
        assert got["j"]["error_code"] == "invalid_mcp_arguments"
        tools = got["k"]["result"]["tools"]
        assert sorted(t["server_name"] for t in tools if t.get("resource_reader")) == ["box", "pub"]
        assert reader in {t["name"] for t in tools}
        assert got["l"]["result"]["result"]["content"][0]["resource"]["text"] == "hello from the mock\n"
        assert got["m"]["error_code"] == "invalid_mcp_arguments"
        assert got["n"]["result"]["status"] == "connected"
        assert got["o"]["error_code"] == "mcp_connection_error"
        assert got["p"]["error_code"] == "invalid_mcp_arguments" and "no argument 'x'" in got["p"]["error"]
        # a later run reads pub's catalogue from the registry's cache: it opens pub's session to learn its resources
        again = run_bkmcp(
            "--resident", "--registry", str(reg), "--inject-resource-tools", stdin=line("q", "list_tools")
        )
        tools = json.loads(again.stdout)["result"]["tools"]
        assert sorted(t["server_name"] for t in tools if t.get("resource_reader")) == ["box", "pub"]
        sent = {e["rpc_method"] for e in bare.log if e.get("rpc_method")}
        assert not sent & {"resources/list", "resources/read", "prompts/list"}
        kinds = [json.loads(e)["event"] for e in events.read_text().splitlines()]
        assert {"resources.listed", "resource.read", "prompts.listed", "prompt.fetched", "tool.rejected"} <= set(kinds)
    finally:
        srv.stop()
        bare.stop()


def test_the_clis_read_and_prompt_cancel_a_timed_out_request_too(tmp_path):
    """One path per method: the CLI's --read and --prompt go through the same request as the resident's actions, so
    a timed-out one is cancelled on the wire there too (legacy HTTP, in this process)."""
    from tests.helpers import run_bkmcp, write_mcp_json

    srv = MockServer({"versions": [LEGACY], "faults": {"slow_on": {"resources/read": 3000, "prompts/get": 3000}}})
    srv.start()
    try:
        config = write_mcp_json(tmp_path / "mcp.json", {"m": {"type": "http", "url": srv.url}})
        read = run_bkmcp("--config", str(config), "--timeout", "300ms", "m", "--read", "mock://notes/readme")
        prompt = run_bkmcp("--config", str(config), "--timeout", "300ms", "m", "--prompt", "plain")
        assert [read.error_code, prompt.error_code] == ["mcp_timeout", "mcp_timeout"]
        ids = [e["json"]["id"] for method in ("resources/read", "prompts/get") for e in srv.requests(method)]
        cancels = [e["json"]["params"] for e in srv.requests("notifications/cancelled")]
        assert [c["requestId"] for c in cancels] == ids and all("timed out after 300ms" in c["reason"] for c in cancels)
    finally:
        srv.stop()
