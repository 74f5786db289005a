"""What a person reads, on the real wire (HTTP on 127.0.0.1, a real pseudo-terminal): the ``mcp_cancelled``
envelope pretty-printed on a terminal like every other envelope, tool help's ``--body`` example without optional
booleans, the array-flag error's example for a string array."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from mock_server.mcp_mock import mock_tool
from tests.helpers import body_example, child_on_a_pty, object_tool, read_terminal, sigint_as_in_a_terminal, until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CAP_S = 60.0  # a safety net only: the command ends within a second or two of its Ctrl-C


def test_cancelled_envelope_is_pretty_on_a_terminal(mock) -> None:
    target = mock({"tools": [mock_tool("slow", "slow", ms=20_000)]}, protocol_version="2025-11-25")
    argv = [sys.executable, str(ROOT / "bkmcp.py"), "--config", str(target.config), target.name, "slow", "--body", "{}"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(target.config.parent)}
    with child_on_a_pty(argv, "stdout", env=env, preexec_fn=sigint_as_in_a_terminal) as (proc, master):
        until(lambda: target.count("tools/call") == 1, "the call reached the server", CAP_S)  # outcome now unknown
        proc.send_signal(signal.SIGINT)
        terminal = read_terminal(master, proc, time.monotonic() + CAP_S)
        status = proc.wait(timeout=CAP_S)
    text = terminal.decode().replace("\r\n", "\n")
    assert status == 130, text
    envelope = json.loads(text)
    assert envelope["error"]["code"] == "mcp_cancelled" and envelope["error"]["outcome"] == "unknown"
    assert text.startswith('{\n  "ok": false,\n'), text  # indented like every envelope on a terminal
    assert target.srv.wait_for("notifications/cancelled", timeout=CAP_S)  # and the server heard of it
    assert target.count("tools/call") == 1


THINK = object_tool(
    "think",
    {
        "thought": {"type": "string"},
        "nextThoughtNeeded": {"type": "boolean"},
        "isRevision": {"type": "boolean"},
        "branchy": {"type": ["boolean", "null"]},
        "quiet": {"type": "boolean", "default": False},
        "options": {"type": "object", "properties": {"deep": {"type": "boolean"}, "n": {"type": "integer"}}},
    },
    ["thought", "nextThoughtNeeded"],
    description="a sequential-thinking style tool",
)


def test_tool_help_body_example_leaves_optional_booleans_out(mock) -> None:
    """`"isRevision": true` in the example would change what the call means: an optional boolean without a
    default is left out (counted as not shown), one with a default shows it, a required one stays."""
    target = mock({"tools": [THINK]})
    helped = target.run(target.name, "think", "--help")
    assert helped.exit_status == 0, helped.stderr
    example = body_example(helped.stdout)
    assert example == {"thought": "<thought>", "nextThoughtNeeded": True, "quiet": False, "options": {"n": 1}}
    assert "(2 more optional fields not shown)" in helped.stdout
    assert target.count("tools/list") == 1 and target.count("tools/call") == 0


def test_array_flag_error_shows_an_example_of_the_items_type(mock) -> None:
    properties = {
        "tags": {"type": "array", "items": {"type": "string"}},
        "ids": {"type": "array", "items": {"type": "integer"}},
        "any": {"type": "array"},
    }
    target = mock({"tools": [{"name": "tag", "inputSchema": {"type": "object", "properties": properties}}]})
    examples = {"tags": """--tags '["a","b"]'""", "ids": "--ids '[1,2,3]'", "any": """--any '["a",1]'"""}
    for name, example in examples.items():
        done = target.run(target.name, "tag", f"--{name}", "a,b")
        assert done.exit_status == 1 and done.error_code == "invalid_mcp_arguments", done.stderr
        message = done.json["error"]["message"]
        assert f"e.g. {example}" in message, message
    assert "[1,2,3]" not in target.run(target.name, "tag", "--tags", "a,b").stderr
    assert target.count("tools/list") == 4 and target.count("tools/call") == 0  # refused locally, after discovery
