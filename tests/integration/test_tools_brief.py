"""Issue 28 item 7: ``--tools --brief`` is the compact catalogue an agent starts from: per tool its name, first
description line and flag signature (required first, optional in brackets, body-only fields named), in the usual
envelope, a tenth of ``--tools``' bytes on rich schemas and a quarter on server-everything (contract §7)."""

from __future__ import annotations

import pytest

from tests.helpers import object_tool, run_bkmcp, write_mcp_json

pytestmark = [pytest.mark.integration]


def _rich_property(kind: str, i: int) -> dict:
    """A property as generated SDKs write them: a long description, an example, bounds or an enum."""
    prop: dict = {
        "type": kind,
        "title": f"Field number {i}",
        "description": f"What field {i} means, when to set it and what the server does with it. " * 3,
        "examples": [f"example-{i}"],
    }
    if kind == "string":
        prop |= {"enum": [f"choice-{i}-{k}" for k in range(8)], "default": f"choice-{i}-0"}
    elif kind == "integer":
        prop |= {"minimum": 0, "maximum": 10_000, "default": 10}
    return prop


def _rich_tool(n: int) -> dict:
    properties = {f"p{i}": _rich_property(("string", "integer", "boolean")[i % 3], i) for i in range(8)}
    properties["filter"] = {
        "type": "object",
        "description": "A nested filter object with its own schema.",
        "properties": {f"f{k}": {"type": "string", "description": "a nested field " * 4} for k in range(6)},
        "additionalProperties": False,
    }
    properties["odd name"] = {"type": "string", "description": "a property that cannot be a flag"}
    return {
        "name": f"rich_{n}",
        "description": f"Rich tool {n} does one thing well.\n\nLonger notes that only --tools shows. " * 2,
        "inputSchema": {"type": "object", "properties": properties, "required": ["p1", "odd name"]},
        "outputSchema": {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}}}},
        "annotations": {"title": f"Rich {n}", "readOnlyHint": True},
    }


RICH = [_rich_tool(n) for n in range(5)]
TASKY = {
    "name": "tasky",
    "description": "Runs as a task.",
    "inputSchema": {"type": "object"},
    "execution": {"taskSupport": "required"},
}
SIMPLE = object_tool(
    "simple",
    {
        "depth": {"type": "integer"},
        "path": {"type": "string"},
        "loud": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "either": {"type": ["string", "integer"]},
    },
    ["path"],
    description="  Echo it.  \nSecond line.",
)


def test_brief_gives_name_summary_and_signature_in_a_tenth_of_the_bytes(mock) -> None:
    target = mock({"tools": [SIMPLE, *RICH, {"name": "bare", "inputSchema": {"type": "object"}}, TASKY]})
    full = target.run(target.name, "--tools")
    brief = target.run(target.name, "--tools", "--brief")
    assert full.exit_status == 0 and brief.exit_status == 0, brief.stderr
    data = brief.json["data"]
    assert brief.json["ok"] is True and data["complete"] is True and data["tool_count"] == 8
    assert "cli" not in data
    tools = {t["name"]: t for t in data["tools"]}
    assert tools["simple"] == {
        "name": "simple",
        "summary": "Echo it.",
        "usage": "--path STRING [--depth INTEGER] [--loud=true|false] [--tags JSON-ARRAY] [--either JSON]",
    }
    assert tools["rich_0"]["summary"] == "Rich tool 0 does one thing well."
    choices = "|".join(f"choice-0-{k}" for k in range(5)) + "|…"  # an enum's first values in place of its type
    assert tools["rich_0"]["usage"].startswith(f"--p1 INTEGER [--p0 {choices}] [--p2=true|false]")
    assert tools["rich_0"]["body_only"] == ["odd name"]
    assert tools["bare"] == {"name": "bare", "summary": "", "usage": ""}
    assert tools["tasky"] == {"name": "tasky", "summary": "Runs as a task.", "usage": "", "task_support": "required"}
    assert len(brief.stdout.encode()) * 10 <= len(full.stdout.encode()), (len(brief.stdout), len(full.stdout))
    assert target.count("tools/list") == 2 and target.count("tools/call") == 0  # discovery only, on the wire


ENUMS = {
    "name": "notify",
    "description": "Sends a notification.\nSecond line.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "messageType": {"type": "string", "enum": ["error", "success", "debug"]},
            "level": {"type": "integer", "enum": [1, 2, 3]},
            "many": {"type": "string", "enum": [f"v{k}" for k in range(12)]},
            "spaced": {"type": "string", "enum": ["two words", "x"]},
            "odd name": {"type": "string"},
        },
        "required": ["messageType", "odd name"],
    },
}


def test_brief_usage_names_enum_values_and_raw_prints_one_line_per_tool(mock) -> None:
    """Issue 40 item 5: the signature shows an enum's values (as tool help lists them), and ``--tools --brief -r``
    is a list a person reads: one line per tool with its name, flags, --body-only fields and first line."""
    target = mock({"tools": [ENUMS, SIMPLE, {"name": "bare", "inputSchema": {"type": "object"}}, TASKY]})
    brief = target.run(target.name, "--tools", "--brief")
    assert brief.exit_status == 0, brief.stderr
    usage = {t["name"]: t["usage"] for t in brief.json["data"]["tools"]}
    many = "|".join(f"v{k}" for k in range(5)) + "|…"
    assert usage["notify"] == f"--messageType error|success|debug [--level 1|2|3] [--many {many}] [--spaced STRING]"
    lines = target.run(target.name, "--tools", "--brief", "-r")
    assert lines.exit_status == 0 and lines.stderr == "", lines.stderr
    assert lines.stdout.splitlines() == [
        f"notify {usage['notify']} --body {{odd name}}  — Sends a notification.",
        f"simple {usage['simple']}  — Echo it.",
        "bare",
        "tasky (task-only)  — Runs as a task.",
    ]
    assert target.count("tools/list") == 2 and target.count("tools/call") == 0


def test_brief_cuts_a_long_first_line_and_keeps_jq(mock) -> None:
    long_tool = {"name": "long", "description": "word " * 100, "inputSchema": {"type": "object"}}
    target = mock({"tools": [long_tool]})
    done = target.run(target.name, "--tools", "--brief", "--jq", ".data.tools[0].summary", "--raw")
    assert done.exit_status == 0, done.stderr
    summary = done.stdout.rstrip("\n")
    assert len(summary) == 120 and summary.endswith("…")


def test_brief_without_tools_is_a_usage_error_and_after_a_tool_is_a_tool_flag(mock) -> None:
    target = mock(
        {"tools": [{"name": "t", "inputSchema": {"type": "object", "properties": {"brief": {"type": "string"}}}}]}
    )
    for args in (
        (target.name, "--brief"),
        (target.name, "--check", "--brief"),
        ("--brief",),
        ("--sessions", "--brief"),
        (target.name, "--tools", "--brief", "--brief"),
    ):
        done = target.run(*args)
        assert done.exit_status == 1 and done.error_code == "usage_error", (args, done.stderr)
    assert target.count("initialize") == 0
    called = target.run(target.name, "t", "--brief", "yes")
    assert called.exit_status == 0, called.stderr
    assert target.srv.requests("tools/call")[0]["json"]["params"]["arguments"] == {"brief": "yes"}


@pytest.mark.interop
def test_brief_on_server_everything_is_at_most_a_quarter(everything_server, tmp_path) -> None:
    config = write_mcp_json(tmp_path / "mcp.json", {"ev": {"type": "http", "url": everything_server.url}})
    full = run_bkmcp("--config", str(config), "ev", "--tools")
    brief = run_bkmcp("--config", str(config), "ev", "--tools", "--brief")
    assert full.exit_status == 0 and brief.exit_status == 0, brief.stderr
    tools = {t["name"]: t for t in brief.json["data"]["tools"]}
    assert set(tools) == {t["name"] for t in full.json["data"]["tools"]}
    assert tools["echo"]["usage"] == "--message STRING" and tools["echo"]["summary"]
    assert tools["simulate-research-query"]["task_support"] == "required"
    assert len(brief.stdout.encode()) * 4 <= len(full.stdout.encode()), (len(brief.stdout), len(full.stdout))
