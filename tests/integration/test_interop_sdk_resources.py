"""Resources, the resource template and prompts (issue 38, Done when, first bullet) against the Python SDK's
everything-server fixtures (``sdk_server.py --everything-fixtures``: python-sdk@57394b0548d1
examples/servers/everything-server, 2026-08-20, re-declared on ``mcp`` 2.3.0) over Streamable HTTP (stateful SSE and
stateless JSON) and stdio, all three unpinned and so speaking 2026-07-28: every resource (3) and the template (1)
listed, every resource read (text and blob), the template read through its ``--id`` flag, every prompt (4) fetched
with its arguments, an unknown URI's stable code (the 2026-07-28 ``-32602``); and the
one-shot, warm (``--keep-alive``) and resident answers the same.
"""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from resident_harness import Resident, http_row, stdio_row, write_registry

from tests.integration.test_interop_everything_resources import Everything

pytestmark = [pytest.mark.integration, pytest.mark.interop]

ERA = "2026-07-28"
TEMPLATE = "test://template/{id}/data"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
# uri -> (name, the content item's key, its value): the SDK's decorators give every resource text/plain
RESOURCES = {
    "test://static-text": ("static_text_resource", "text", "This is the content of the static text resource."),
    "test://static-binary": ("static_binary_resource", "blob", PNG),
    "test://watched-resource": ("watched_resource", "text", "Watched resource content"),
}
# name -> (arguments as flags, the arguments as the resident takes them, the first message's content)
PROMPTS = {
    "test_simple_prompt": ([], {}, {"type": "text", "text": "This is a simple prompt for testing."}),
    "test_prompt_with_arguments": (
        ["--arg1", "one", "--arg2", "two"],
        {"arg1": "one", "arg2": "two"},
        {"type": "text", "text": "Prompt with arguments: arg1='one', arg2='two'"},
    ),
    "test_prompt_with_embedded_resource": (
        ["--resourceUri", "test://static-text"],
        {"resourceUri": "test://static-text"},
        {
            "type": "resource",
            "resource": {
                "uri": "test://static-text",
                "mimeType": "text/plain",
                "text": "Embedded resource content for testing.",
            },
        },
    ),
    "test_prompt_with_image": ([], {}, {"type": "image", "data": PNG, "mimeType": "image/png"}),
}
PROMPT_ARGUMENTS = {
    "test_simple_prompt": [],
    "test_prompt_with_arguments": [{"name": "arg1", "required": True}, {"name": "arg2", "required": True}],
    "test_prompt_with_embedded_resource": [{"name": "resourceUri", "required": True}],
    "test_prompt_with_image": [],
}


@pytest.fixture(params=["stateful-sse", "stateless-json", "stdio"])
def sdk(request, tmp_path):
    if request.param == "stdio":
        argv = request.getfixturevalue("sdk_stdio_argv")("stateful-sse") + ["--everything-fixtures"]
        env = request.getfixturevalue("interop_subprocess_env")
        entry = {"type": "stdio", "command": argv[0], "args": argv[1:], "env": env}
    else:
        name = "sdk_everything_stateful" if request.param == "stateful-sse" else "sdk_everything_stateless"
        entry = {"type": "http", "url": request.getfixturevalue(name).url}
    made = Everything(tmp_path, entry)
    made.entry = entry
    yield made
    made.close()


def test_every_resource_and_the_template_listed_and_read_in_2026_07_28(sdk):
    data = sdk.data("--resources")
    assert (data["protocol_version"], data["resource_count"], data["template_count"], data["complete"]) == (
        ERA,
        3,
        1,
        True,
    )
    assert {r["uri"]: (r["name"], r["mimeType"]) for r in data["resources"]} == {
        uri: (name, "text/plain") for uri, (name, _, _) in RESOURCES.items()
    }
    assert [(t["name"], t["uriTemplate"], t["mimeType"]) for t in data["templates"]] == [
        ("template_resource", TEMPLATE, "text/plain")
    ]
    for uri, (_, key, value) in RESOURCES.items():
        result = sdk.data("--read", uri)["result"]
        assert result["contents"] == [{"uri": uri, "mimeType": "text/plain", key: value}], uri
        assert result["resultType"] == "complete", uri  # a 2026-07-28 result
    assert base64.b64decode(PNG).startswith(b"\x89PNG")
    raw = sdk.run("--read", "test://static-text", "-r")
    assert (raw.returncode, raw.stdout) == (0, "This is the content of the static text resource.\n")
    read = sdk.data("--read", TEMPLATE, "--id", "42")
    assert read["uri"] == "test://template/42/data"
    item = read["result"]["contents"][0]
    assert (item["uri"], item["mimeType"]) == ("test://template/42/data", "text/plain")
    assert json.loads(item["text"]) == {"id": "42", "templateTest": True, "data": "Data for ID: 42"}
    help_ = sdk.run("--read", TEMPLATE, "--help")
    assert help_.returncode == 0 and "--id VALUE  required" in help_.stdout
    # RFC 6570 simple expansion escapes "/", and the SDK's template matcher decodes it back
    read = sdk.data("--read", TEMPLATE, "--id", "a/b c")
    assert read["uri"] == "test://template/a%2Fb%20c/data"
    assert json.loads(read["result"]["contents"][0]["text"])["id"] == "a/b c"


def test_an_unknown_uri_is_mcp_resource_not_found_with_the_2026_07_28_code(sdk):
    done = sdk.run("--read", "test://nowhere")
    error = json.loads(done.stdout)["error"]
    assert (done.returncode, error["code"], error["rpc_error"]["code"]) == (2, "mcp_resource_not_found", -32602)


def test_every_prompt_fetched_with_its_arguments_in_2026_07_28(sdk):
    listed = sdk.data("--prompts")
    assert (listed["protocol_version"], listed["prompt_count"], listed["complete"]) == (ERA, 4, True)
    assert {p["name"]: p["arguments"] for p in listed["prompts"]} == PROMPT_ARGUMENTS
    for name, (flags, _, first) in PROMPTS.items():
        messages = sdk.data("--prompt", name, *flags)["result"]["messages"]
        assert messages[0] == {"role": "user", "content": first}, name
    raw = sdk.run("--prompt", "test_prompt_with_image", "-r")
    assert (raw.returncode, raw.stdout) == (
        0,
        "[user]\n[image image/png, 70 bytes]\n\n[user]\nPlease analyze the image above.\n",
    )
    missing = sdk.run("--prompt", "test_prompt_with_arguments", "--arg1", "one")
    assert missing.returncode == 1
    assert json.loads(missing.stderr.splitlines()[-1])["error"]["code"] == "invalid_mcp_arguments"


def test_warm_and_resident_answers_are_the_one_shot_answers(sdk, tmp_path):
    commands = [
        ["--resources"],
        ["--resources", "--brief"],
        *(["--read", uri] for uri in RESOURCES),
        ["--read", TEMPLATE, "--id", "42"],
        ["--read", "test://static-text", "-r"],
        ["--read", "test://nowhere"],
        ["--prompts"],
        *(["--prompt", name, *flags] for name, (flags, _, _) in PROMPTS.items()),
    ]
    one_shot = {}
    for args in commands:
        one = sdk.run(*args)
        warm = sdk.run(*args, "--keep-alive")
        assert one.returncode == (2 if "test://nowhere" in args else 0), (args, one.stdout, one.stderr)
        assert (warm.returncode, warm.stdout, warm.stderr) == (one.returncode, one.stdout, one.stderr), args
        if "-r" not in args and "--brief" not in args:
            one_shot[tuple(args)] = json.loads(one.stdout)["data"]

    entry = sdk.entry
    if entry["type"] == "http":
        row = http_row("sdk", entry["url"])
    else:
        row = stdio_row("sdk", [entry["command"], *entry["args"]])
    reg = tmp_path / "registry.db"
    write_registry(str(reg), [row], {"sdk": {}})
    res = Resident(reg, "--timeout", "60s")
    try:
        listed = res.ok("list_resources", "alice", server_name="sdk")
        assert listed["errors"] == []
        [server] = listed["servers"]
        want = one_shot[("--resources",)]
        assert (server["resources"], server["templates"]) == (want["resources"], want["templates"])
        for uri in RESOURCES:
            read = res.ok("read_resource", "alice", server_name="sdk", uri=uri, include_blobs=True)
            assert read["result"]["contents"] == one_shot[("--read", uri)]["result"]["contents"], uri
        summary = res.ok("read_resource", "alice", server_name="sdk", uri="test://static-binary")["result"]
        data = base64.b64decode(PNG)
        item = summary["contents"][0]
        assert (item["bytes"], item["sha256"], "blob" in item) == (len(data), hashlib.sha256(data).hexdigest(), False)
        uri = "test://template/42/data"
        read = res.ok("read_resource", "alice", server_name="sdk", uri=uri)
        assert read["result"]["contents"] == one_shot[("--read", TEMPLATE, "--id", "42")]["result"]["contents"]
        prompts = res.ok("list_prompts", "alice", server_name="sdk")
        assert prompts["servers"][0]["prompts"] == one_shot[("--prompts",)]["prompts"]
        for name, (flags, arguments, _) in PROMPTS.items():
            got = res.ok("get_prompt", "alice", server_name="sdk", name=name, arguments=arguments)
            assert got["result"]["messages"] == one_shot[("--prompt", name, *flags)]["result"]["messages"], name
    finally:
        assert res.close() == []
