"""Local argument validation keeps the command's deadline (issue 29, item 2; docs/contract.md §6, §11.4).

The issue's schemas: a property with ~27 000 ``anyOf`` leaves (~550 KB), five of them (2.8 MB). Too large to
check in full, they are checked by the basic rules, and the answer says so; a schema small enough but slow to
validate stops at the deadline with the usual timeout answer. Real HTTP on 127.0.0.1 (the in-process mock), a
real ``bkmcp --resident`` / one-shot ``bkmcp`` process; each test asserts the server received no ``tools/call``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from resident_harness import http_row, write_registry

from mock_server.mcp_mock import mock_tool
from tests.helpers import write_mcp_json

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]


def anyof_leaves(tag: str, leaves: int = 27_000, width: int = 30) -> dict[str, Any]:
    """The issue's property: a string among ``leaves`` constants, as nested ``anyOf`` groups of ``width``."""

    def group(first: int, count: int) -> dict[str, Any]:
        if count <= width:
            return {"anyOf": [{"const": f"{tag}{first + i:05d}"} for i in range(count)]}
        step = -(-count // width)
        return {
            "anyOf": [group(start, min(step, first + count - start)) for start in range(first, first + count, step)]
        }

    return {"type": "string", **group(0, leaves)}


def big_tool(properties: int) -> dict[str, Any]:
    names = [f"q{k}" for k in range(properties)]
    return {
        "name": "big",
        "x-mock": "echo",
        "inputSchema": {
            "type": "object",
            "properties": {name: anyof_leaves(name) for name in names},
            "required": names,
        },
    }


def slow_tool() -> dict[str, Any]:
    """Small (a few objects) but exponential to reject: each nesting level tries two alternatives in full."""
    node = {
        "anyOf": [{"type": "array", "items": {"$ref": "#/$defs/n"}}, {"type": "array", "items": {"$ref": "#/$defs/n"}}]
    }
    return {
        "name": "slow",
        "x-mock": "echo",
        "inputSchema": {"type": "object", "properties": {"t": {"$ref": "#/$defs/n"}}, "$defs": {"n": node}},
    }


def nested(depth: int) -> Any:
    value: Any = "leaf"  # neither alternative takes a string: every path fails at the bottom
    for _ in range(depth):
        value = [value]
    return value


ECHO = mock_tool("echo", "echo", properties={"text": {"type": "string"}})


def vm_hwm_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def start(tmp_path: Path, resident, http_mock, tools: list[dict[str, Any]]):
    heavy = http_mock({"tools": tools})
    light = http_mock({"tools": [ECHO]})
    path = tmp_path / "registry.db"
    write_registry(str(path), [http_row("heavy", heavy.url), http_row("light", light.url)])
    return heavy, light, resident(path)


def test_issue_schemas_are_answered_within_the_timeout_by_the_basic_rules(tmp_path, resident, http_mock):
    """Five properties of 27 000 leaves (2.8 MB): four users' wrong arguments with timeout_ms 1000 are answered
    invalid_mcp_arguments (basic rules, said in details and message: the full check would not fit their 1 s),
    another user's echo meanwhile is answered, nothing reaches the server, and the resident's peak RSS stays
    within §13 (150 MB)."""
    heavy, light, res = start(tmp_path, resident, http_mock, [big_tool(5), ECHO])
    assert len(json.dumps(heavy.scenario["tools"][0]["inputSchema"])) > 2_500_000
    res.ok("list_tools", "u0", server_name="heavy")  # discovery is not what is timed here
    res.ok("call_tool", "bob", server_name="light", tool_name="echo", arguments={"text": "warm"})
    wrong = {f"q{k}": 5 for k in range(5)}
    tasks = [
        res.send("call_tool", f"u{i}", server_name="heavy", tool_name="big", arguments=wrong, timeout_ms=1000)
        for i in range(4)
    ]
    echo = res.send("call_tool", "bob", server_name="light", tool_name="echo", arguments={"text": "hi"})
    answers = [res.wait(task) for task in tasks]
    assert res.wait(echo)["success"] is True
    for answer in answers:
        assert answer["error_code"] == "invalid_mcp_arguments", answer
        assert answer["details"]["validation"] == "basic"
        assert answer["details"]["problems"][0] == {"path": "$.q0", "message": "expected string, got integer"}
    assert heavy.requests("tools/call") == []
    assert [json.loads(r["body"])["params"]["arguments"] for r in light.requests("tools/call")] == [
        {"text": "warm"},
        {"text": "hi"},
    ]
    assert vm_hwm_kb(res.proc.pid) <= 150 * 1024


def test_slow_validation_stops_at_the_call_deadline_and_holds_no_one_back(tmp_path, resident, http_mock):
    """A schema small enough to check in full but exponential to reject: the call answers mcp_timeout (its own
    timeout_ms in the message: the deadline, not the end of the work, ended it), and another user's echo sent
    after it is answered first — the validation cannot end before its deadline, so it was still running."""
    heavy, light, res = start(tmp_path, resident, http_mock, [slow_tool()])
    res.ok("list_tools", "alice", server_name="heavy")
    res.ok("call_tool", "bob", server_name="light", tool_name="echo", arguments={"text": "warm"})
    task = res.send(
        "call_tool", "alice", server_name="heavy", tool_name="slow", arguments={"t": nested(40)}, timeout_ms=2000
    )
    echo = res.wait(res.send("call_tool", "bob", server_name="light", tool_name="echo", arguments={"text": "hi"}))
    assert echo["success"] is True
    assert not any(a.get("task_id") == task for a in res.answers), "the heavy call ended before the echo"
    answer = res.wait(task)
    assert answer["error_code"] == "mcp_timeout", answer
    assert "within 2000 ms" in answer["error"]
    assert heavy.requests("tools/call") == []
    failed = res.wait_event("tool.failed", server="heavy", tool="slow")
    assert failed[0]["error_code"] == "mcp_timeout" and failed[0]["outcome"] == "not_sent"


def run_cli(tmp_path: Path, url: str, *argv: str) -> subprocess.CompletedProcess:
    config = write_mcp_json(tmp_path, {"heavy": {"type": "http", "url": url}})
    return subprocess.run(
        [sys.executable, str(ROOT / "bkmcp.py"), "--config", str(config), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")},
    )


def test_one_shot_cli_answers_the_issue_schema_within_its_timeout(tmp_path, http_mock):
    """One property of 27 000 leaves, --timeout 3s: the wrong argument is refused by the basic rules (the hint
    says why): the deadline-bounded path, where before the meta-schema pass ran on for seconds past it."""
    heavy = http_mock({"tools": [big_tool(1)]})
    done = run_cli(tmp_path, heavy.url, "heavy", "big", "--timeout", "3s", "--body", '{"q0": 5}')
    envelope = json.loads(done.stdout or done.stderr)  # a usage error's envelope goes to stderr
    assert envelope["error"]["code"] == "invalid_mcp_arguments", envelope
    assert "too large to check locally" in envelope["error"]["hint"]
    assert heavy.requests("tools/call") == []


def test_one_shot_cli_slow_validation_times_out_on_time(tmp_path, http_mock):
    heavy = http_mock({"tools": [slow_tool()]})
    body = json.dumps({"t": nested(40)})
    done = run_cli(tmp_path, heavy.url, "heavy", "slow", "--timeout", "2s", "--body", body)
    envelope = json.loads(done.stdout or done.stderr)
    assert envelope["error"]["code"] == "mcp_timeout", envelope
    assert heavy.requests("tools/call") == []


def test_in_process_resident_answers_a_slow_validation_with_its_own_timeout(tmp_path, http_mock):
    """The same through ``run_bkmcp`` in this process (the resident's call path under coverage)."""
    from tests.helpers import run_bkmcp

    heavy = http_mock({"tools": [slow_tool()]})
    path = tmp_path / "registry.db"
    write_registry(str(path), [http_row("heavy", heavy.url)])
    command = {
        "command": "invoke",
        "task_id": "slow",
        "params": {
            "action": "call_tool",
            "server_name": "heavy",
            "tool_name": "slow",
            "arguments": {"t": nested(40)},
            "timeout_ms": 500,
        },
        "user": {"userId": "alice"},
    }
    done = run_bkmcp("--resident", "--registry", str(path), stdin=json.dumps(command) + "\n")
    answer = json.loads(done.stdout)
    assert answer["error_code"] == "mcp_timeout" and "within 500 ms" in answer["error"], answer
    assert heavy.requests("tools/call") == []
