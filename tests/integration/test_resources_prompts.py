"""Resources, resource templates and prompts (issue 38 items 1, 2, 8) against the mock server, over HTTP and stdio,
in both eras: what bkmcp printed and what the server received (methods, params, Mcp-Method/Mcp-Name headers, how
many requests; none at all without the capability).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from mock_server.mcp_mock import TINY_PNG, MockServer
from tests.helpers import MockTarget, run_bkmcp, write_mcp_json

pytestmark = pytest.mark.integration

MODERN, LEGACY = "2026-07-28", "2025-11-25"


class Target(MockTarget):
    """The mock over one transport and era; ``methods``: what it received but the handshake."""

    def methods(self) -> list[str]:
        return [e["rpc_method"] for e in self.received() if e["rpc_method"] not in ("initialize", "server/discover")]


@pytest.fixture(params=[("http", LEGACY), ("http", MODERN), ("stdio", LEGACY), ("stdio", MODERN)], ids="-".join)
def target(request, tmp_path):
    made = Target(tmp_path, *request.param)
    yield made
    made.stop()


@pytest.fixture
def make_target(tmp_path):
    made: list[Target] = []

    def make(transport: str, version: str, pin: bool = False, **scenario: Any) -> Target:
        made.append(Target(tmp_path, transport, version, scenario, pin=pin))
        return made[-1]

    yield make
    for one in made:
        one.stop()


def test_resources_lists_every_resource_and_template_as_received(target):
    result = target.run("--resources")
    assert result.exit_status == 0, result.stdout + result.stderr
    data = result.json["data"]
    assert data["resource_count"] == 2 and data["template_count"] == 2 and data["complete"] is True
    assert [r["uri"] for r in data["resources"]] == ["mock://notes/readme", "mock://images/dot.png"]
    assert data["resources"][0] == {
        "uri": "mock://notes/readme",
        "name": "readme",
        "title": "Read me",
        "description": "A short text note.\nIts second line.",
        "mimeType": "text/plain",
    }
    assert [t["uriTemplate"] for t in data["templates"]] == ["mock://notes/{id}", "mock://search{?q,lang}"]
    assert target.methods() == ["resources/list", "resources/templates/list"]


def test_resources_brief_gives_name_uri_mime_type_and_first_line(target):
    data = target.run("--resources", "--brief").json["data"]
    assert data["resources"][0] == {
        "name": "readme",
        "uri": "mock://notes/readme",
        "mimeType": "text/plain",
        "summary": "A short text note.",
    }
    assert data["templates"][1] == {
        "name": "search",
        "uriTemplate": "mock://search{?q,lang}",
        "summary": "A search, its query echoed.",
    }


def test_read_keeps_every_content_item_and_raw_prints_text(target):
    result = target.run("--read", "mock://notes/readme")
    assert result.exit_status == 0, result.stdout + result.stderr
    data = result.json["data"]
    assert (data["server"], data["uri"]) == ("m", "mock://notes/readme")
    assert data["result"]["contents"] == [
        {"uri": "mock://notes/readme", "mimeType": "text/plain", "text": "hello from the mock\n"}
    ]
    raw = target.run("--read", "mock://notes/readme", "-r")
    assert (raw.exit_status, raw.stdout) == (0, "hello from the mock\n")
    blob = target.run("--read", "mock://images/dot.png")
    assert blob.json["data"]["result"]["contents"][0]["blob"] == TINY_PNG
    assert (
        target.run("--read", "mock://images/dot.png", "-r").stdout
        == "[resource mock://images/dot.png, image/png, 70 bytes]\n"
    )
    reads = [e["json"]["params"]["uri"] for e in target.received() if e["rpc_method"] == "resources/read"]
    assert reads == ["mock://notes/readme", "mock://notes/readme", "mock://images/dot.png", "mock://images/dot.png"]


def test_a_template_is_read_through_its_variables_expanded_locally(target):
    note = target.run("--read", "mock://notes/{id}", "--id", "a b/c", "-r")
    assert (note.exit_status, note.stdout) == (0, "note a b/c\n"), note.stderr
    search = target.run("--read", "mock://search{?q,lang}", "--lang", "zh", "--q=x&y", "-r")
    assert json.loads(search.stdout) == {"lang": "zh", "q": "x&y"}
    reads = [e["json"]["params"]["uri"] for e in target.received() if e["rpc_method"] == "resources/read"]
    assert reads == ["mock://notes/a%20b%2Fc", "mock://search?q=x%26y&lang=zh"]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--id", "1", "--id", "2"], "given more than once"),
        ([], "needs --id"),
        (["--id", "1", "--nope", "2"], "--nope is not a variable"),
        (["--id"], "needs a value"),
    ],
)
def test_a_template_variable_twice_missing_or_unknown_is_a_usage_error_before_anything_is_sent(target, flags, message):
    result = target.run("--read", "mock://notes/{id}", *flags)
    assert (result.exit_status, result.error_code) == (1, "usage_error")
    assert message in result.json["error"]["message"]
    assert target.received() == []


def test_template_help_lists_its_variables_offline(target):
    result = target.run("--read", "mock://search{?q,lang}", "--help")
    assert result.exit_status == 0
    assert "--q VALUE" in result.stdout and "--lang VALUE" in result.stdout and "required" in result.stdout
    assert target.received() == []


def test_an_unknown_uri_is_mcp_resource_not_found_in_both_eras(target):
    result = target.run("--read", "mock://nowhere")
    assert (result.exit_status, result.error_code) == (2, "mcp_resource_not_found")
    version = target.config.name.rsplit("-", 3)[-3:]
    code = -32602 if "2026" in "-".join(version) else -32002
    assert result.json["error"]["rpc_error"]["code"] == code


def test_prompts_lists_every_prompt(target):
    result = target.run("--prompts")
    assert result.exit_status == 0, result.stdout + result.stderr
    data = result.json["data"]
    assert data["prompt_count"] == 2 and [p["name"] for p in data["prompts"]] == ["greet", "plain"]
    assert data["prompts"][0]["arguments"][0] == {"name": "who", "description": "Who to greet", "required": True}
    assert target.methods() == ["prompts/list"]


def test_prompt_help_lists_its_arguments_required_marked(target):
    result = target.run("--prompt", "greet", "--help")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert "--who VALUE [--tone VALUE]" in result.stdout
    assert "--who  required" in result.stdout and "--tone  optional" in result.stdout
    assert target.methods() == ["prompts/list"]  # never fetched


def test_prompt_get_sends_its_arguments_as_strings_and_raw_prints_each_message_with_its_role(target):
    result = target.run("--prompt", "greet", "--who", "Ann", "--tone=007")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert result.json["data"]["result"]["messages"][1] == {
        "role": "assistant",
        "content": {"type": "text", "text": "Hello, Ann!"},
    }
    raw = target.run("--prompt", "greet", "--who", "Ann", "-r")
    assert raw.stdout == "[user]\nGreet Ann.\n\n[assistant]\nHello, Ann!\n"
    gets = [e["json"]["params"] for e in target.received() if e["rpc_method"] == "prompts/get"]
    assert [(g["name"], g["arguments"]) for g in gets] == [
        ("greet", {"who": "Ann", "tone": "007"}),
        ("greet", {"who": "Ann"}),
    ]


def test_a_missing_required_prompt_argument_is_invalid_arguments_before_prompts_get(target):
    result = target.run("--prompt", "greet", "--tone", "formal")
    assert (result.exit_status, result.error_code) == (1, "invalid_mcp_arguments")
    assert result.json["error"]["problems"] == [{"path": "$.who", "message": "required argument 'who' is missing"}]
    unknown = target.run("--prompt", "greet", "--who", "x", "--whom", "y")
    assert unknown.error_code == "invalid_mcp_arguments" and "--whom" in unknown.json["error"]["message"]
    assert "prompts/get" not in target.methods()


def test_an_unknown_prompt_is_mcp_prompt_not_found_with_close_names(target):
    result = target.run("--prompt", "greeet")
    assert (result.exit_status, result.error_code) == (1, "mcp_prompt_not_found")
    assert "greet" in result.json["error"]["hint"]
    assert "prompts/get" not in target.methods()


@pytest.mark.parametrize("version", [LEGACY, MODERN])
def test_modern_http_names_the_uri_and_the_prompt_in_mcp_headers(make_target, version):
    target = make_target("http", version)
    assert target.run("--read", "mock://notes/{id}", "--id", "é 1").exit_status == 0
    assert target.run("--prompt", "greet", "--who", "Ann").exit_status == 0
    sent = {e["rpc_method"]: e["headers"] for e in target.received()}
    if version == MODERN:
        assert sent["resources/read"]["mcp-method"] == "resources/read"
        assert sent["resources/read"]["mcp-name"] == "mock://notes/%C3%A9%201"
        assert (sent["prompts/get"]["mcp-method"], sent["prompts/get"]["mcp-name"]) == ("prompts/get", "greet")
        assert sent["prompts/list"]["mcp-method"] == "prompts/list" and "mcp-name" not in sent["prompts/list"]
    else:
        after = [sent[m] for m in ("resources/read", "prompts/list", "prompts/get")]  # the era probe carries one
        assert not any("mcp-method" in headers or "mcp-name" in headers for headers in after)


@pytest.mark.parametrize("transport", ["http", "stdio"])
@pytest.mark.parametrize("version", [LEGACY, MODERN])
@pytest.mark.parametrize(
    "args", [["--resources"], ["--read", "mock://notes/readme"], ["--prompts"], ["--prompt", "greet", "--who", "x"]]
)
def test_without_the_capability_no_request_is_sent(make_target, transport, version, args):
    target = make_target(transport, version, capabilities={"tools": {}})
    result = target.run(*args)
    assert (result.exit_status, result.error_code) == (2, "mcp_capability_unsupported")
    assert result.json["error"]["capability"] in ("resources", "prompts")
    assert target.methods() == []


@pytest.mark.parametrize("version", [LEGACY, MODERN])
def test_listings_are_paginated_with_the_tool_catalogues_guards(make_target, version):
    paged = make_target("http", version, page_size=1)
    data = paged.run("--resources").json["data"]
    assert (data["resource_count"], data["template_count"]) == (2, 2)
    assert paged.run("--prompts").json["data"]["prompt_count"] == 2
    assert paged.methods() == ["resources/list"] * 2 + ["resources/templates/list"] * 2 + ["prompts/list"] * 2
    cycle = make_target("http", version, page_size=1, faults={"cursor_cycle": True})
    result = cycle.run("--prompts")
    assert (result.exit_status, result.error_code) == (2, "mcp_discovery_incomplete")
    assert result.json["error"]["message"].startswith("prompt discovery is incomplete: the server repeated cursor")
    assert result.json["data"]["complete"] is False and result.json["data"]["prompt_count"] == 2


def test_raw_prints_an_embedded_text_resource_of_a_tool_result_as_text():
    result = {
        "content": [
            {"type": "text", "text": "one"},
            {"type": "resource", "resource": {"uri": "demo://x", "mimeType": "text/plain", "text": "inside"}},
            {"type": "resource", "resource": {"uri": "demo://y", "mimeType": "image/png", "blob": "AAAA"}},
        ]
    }
    import bkmcp

    assert bkmcp.render_raw_result(result) == "one\ninside\n[resource demo://y, image/png, 3 bytes]\n"


def test_the_new_options_after_a_tool_name_stay_that_tools_flags(tmp_path):
    tool = {
        "name": "reader",
        "description": "A tool with flags named like the new options.",
        "inputSchema": {
            "type": "object",
            "properties": {n: {"type": "string"} for n in ("read", "prompt", "resources")},
        },
    }
    server = MockServer({"tools": [tool]})
    server.start()
    try:
        config = write_mcp_json(tmp_path, {"m": {"type": "http", "url": server.url}})
        result = run_bkmcp("--config", str(config), "m", "reader", "--read", "a", "--prompt", "b", "--resources", "c")
        assert result.exit_status == 0, result.stdout + result.stderr
        calls = [e["json"]["params"] for e in server.log if e.get("rpc_method") == "tools/call"]
        assert calls[0]["arguments"] == {"read": "a", "prompt": "b", "resources": "c"}
    finally:
        server.stop()


def test_after_the_prompt_name_brief_read_and_prompt_are_its_arguments(make_target):
    prompt = {"name": "p", "arguments": [{"name": n, "required": True} for n in ("brief", "read", "prompt")]}
    target = make_target("http", LEGACY, prompts=[prompt])
    result = target.run("--prompt", "p", "--brief", "b", "--read", "r", "--prompt", "q")
    assert result.exit_status == 0, result.stdout + result.stderr
    gets = [e["json"]["params"]["arguments"] for e in target.received() if e["rpc_method"] == "prompts/get"]
    assert gets == [{"brief": "b", "read": "r", "prompt": "q"}]


@pytest.mark.parametrize("version", [LEGACY, MODERN])
def test_a_server_without_templates_list_has_no_templates(make_target, version):
    target = make_target("http", version, faults={"rpc_error_on": {"resources/templates/list": -32601}})
    data = target.run("--resources").json["data"]
    assert (data["resource_count"], data["template_count"], data["templates"]) == (2, 0, [])
    other = make_target("http", version, faults={"rpc_error_on": {"resources/templates/list": -32603}})
    assert other.run("--resources").error_code == "mcp_protocol_error"


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_a_server_pinned_to_2026_07_28_is_asked_server_discover_once_for_its_capabilities(make_target, transport):
    """A pin turns the era probe off, so the session never heard the server's capabilities and refused
    --prompts, --resources and Tab as undeclared (tab38's report). Now the first request that needs a capability
    asks server/discover once; a server that declares none still gets nothing else."""
    target = make_target(transport, MODERN, pin=True)
    result = target.run("--prompts")
    assert result.exit_status == 0, result.stdout
    assert [e["rpc_method"] for e in target.received()] == ["server/discover", "prompts/list"]
    bare = make_target(transport, MODERN, pin=True, capabilities={"tools": {}})
    result = bare.run("--resources")
    assert (result.exit_status, result.error_code) == (2, "mcp_capability_unsupported")
    assert [e["rpc_method"] for e in bare.received()] == ["server/discover"]
