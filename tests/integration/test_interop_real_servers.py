"""bkmcp against real stdio servers nobody here wrote, one of each kind issue 27 met (docs/interop.md, "Real servers").

For each server: ``--check`` (and its era) and ``--tools`` succeed; the help of every tool exits 0; every required
field whose name can be an option has a flag; one flag call per kind of parameter (string, integer, number,
boolean, enum, JSON object through a ``$ref``, union through a JSON-value flag) reaches the server as the JSON the
test expects (each server runs with a stdin tap, ``stdin_tap.cjs`` / ``stdin_tap.py``, that logs what it read); and the
same calls through ``--keep-alive`` and ``--resident`` give the one-shot answer. Server-specific expectations:
a banner (time-mcp, mcp-server-code-runner) or a log line during a call (mcp-hello-world) on stdout is skipped;
sequential-thinking's ``nextThoughtNeeded`` (``type: ["boolean","string"]``) is a flag; FastMCP 1.x is legacy and a
later failure's ``server_stderr`` holds none of the probe's lines; the Python SDK 2.x is modern; a TypeScript SDK
2.x server that starts 4 s late is still modern; server-everything's task-only tool is refused before sending.

Seed rows: R01 (era), R02 (calls), R04 (a task-required tool is never called), I01.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from resident_harness import Resident, stdio_row, write_registry

import bkmcp
from tests.helpers import ROOT, run_bkmcp, until, write_mcp_json
from tests.integration.conftest_interop import (
    EVERYTHING_TOOLS,
    INTEROP_DIR,
    SDK_TOOLS,
    InteropUnavailable,
    _unavailable,
    real_stdio_command,
)
from tests.tool_shape_checkers import check_listing

pytestmark = [pytest.mark.integration, pytest.mark.interop]

MODERN, LEGACY = "2026-07-28", "2025-11-25"
NODE_TAP, PYTHON_TAP = INTEROP_DIR / "stdin_tap.cjs", INTEROP_DIR / "stdin_tap.py"
NOON = "2025-03-23 12:30:00"
SLOW_START_S = "4"  # beyond the 2 s stdio probe window of docs/contract.md §5 before issue 27


@dataclass
class Call:
    """One flag call: the flags typed, the arguments the server must receive, a text its answer must hold."""

    tool: str
    flags: tuple[str, ...]
    arguments: dict[str, Any]
    expect: str
    stable: bool = True  # the same answer every time (compared across one-shot, warm and resident)


@dataclass
class Spec:
    source: str  # the name real_stdio_command knows
    era: str
    tools: set[str]
    calls: list[Call] = field(default_factory=list)
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


SPECS = {
    # prints "Starting Time MCP server..." on stdout before any JSON-RPC
    "time-mcp": Spec(
        "time-mcp",
        LEGACY,
        {"current_time", "relative_time", "days_in_month", "get_timestamp", "convert_time", "get_week_year"},
        [
            Call(
                "convert_time",
                (
                    "--sourceTimezone",
                    "Asia/Shanghai",
                    "--targetTimezone",
                    "Europe/London",
                    "--time",
                    "2025-03-23 12:30:00",
                ),
                {"sourceTimezone": "Asia/Shanghai", "targetTimezone": "Europe/London", "time": "2025-03-23 12:30:00"},
                "Europe/London is 2025-03-23 04:30:00",
            ),
            Call("days_in_month", ("--date", "2024-02-10"), {"date": "2024-02-10"}, "days in month is 29"),
            # its optional "format" is bkmcp's reserved --format: --body only, by the seed's rule
            Call("current_time", ("--timezone", "UTC"), {"timezone": "UTC"}, "Current UTC time is", stable=False),
        ],
    ),
    # prints a banner on stdout at start and two lines on stdout during each run-code call
    "code-runner": Spec(
        "code-runner",
        LEGACY,
        {"run-code"},
        [
            Call(
                "run-code",
                ("--languageId", "javascript", "--code", "console.log(6 * 7)"),
                {"languageId": "javascript", "code": "console.log(6 * 7)"},
                '"text": "42\\n"',
            )
        ],
    ),
    # console.logs "[Mock SDK Server] Executing add tool ..." to stdout while its add tool runs
    "hello-world": Spec(
        "hello-world",
        LEGACY,
        {"echo", "debug", "add"},
        [
            Call("add", ("--a", "2.5", "--b", "3"), {"a": 2.5, "b": 3}, "The sum is: 5.5"),
            Call("echo", ("--message", "网关"), {"message": "网关"}, "You said: 网关"),
        ],
    ),
    # required nextThoughtNeeded is type ["boolean","string"]; integers carry zod's 9007199254740991 maximum
    "sequential-thinking": Spec(
        "sequential-thinking",
        LEGACY,
        {"sequentialthinking"},
        [
            Call(
                "sequentialthinking",
                ("--thought", "x", "--nextThoughtNeeded", "true", "--thoughtNumber", "1", "--totalThoughts", "1"),
                {"thought": "x", "nextThoughtNeeded": True, "thoughtNumber": 1, "totalThoughts": 1},
                '"thoughtHistoryLength": 1',
            )
        ],
    ),
    # mcp 1.x FastMCP: legacy only, pydantic-model parameter ($ref into $defs), enum through a $ref
    "fastmcp1": Spec(
        "fastmcp1",
        LEGACY,
        {"name_shrimp", "feed", "crash"},
        [
            Call(
                "name_shrimp",
                ("--tank", '{"shrimp": [{"name": "bob"}]}', "--extra_names", '["alice"]'),
                {"tank": {"shrimp": [{"name": "bob"}]}, "extra_names": ["alice"]},
                '"bob"',
            ),
            Call(
                "feed",
                ("--count", "3", "--water", "salt", "--live=true", "--note", "ok"),
                {"count": 3, "water": "salt", "live": True, "note": "ok"},
                "fed 3 in salt water, live=True, note='ok'",
            ),
        ],
    ),
    # the official Python SDK 2.3.0 (tests/interop_servers/sdk_server.py): dual-era, modern here
    "sdk2": Spec(
        "sdk2",
        MODERN,
        SDK_TOOLS,
        [
            Call("add", ("--a", "19", "--b", "23"), {"a": 19, "b": 23}, '"result": 42'),
            Call("echo", ("--text", "hi", "--upper=true"), {"text": "hi", "upper": True}, '"result": "HI"'),
            Call("choose", ("--mode", "b", "--color", "blue"), {"mode": "b", "color": "blue"}, '"color": "blue"'),
            Call(
                "summarize",
                ("--values", "[1, 2]", "--shape", '{"name": "tri", "points": [{"x": 1}]}'),
                {"values": [1, 2], "shape": {"name": "tri", "points": [{"x": 1}]}},
                '"n_points": 1',
            ),
        ],
    ),
    # TypeScript SDK 2.4.0 serveStdio (what @bytebase/dbhub runs): dual-era
    "ts2": Spec(
        "ts2",
        MODERN,
        {"add", "label"},
        [
            Call("add", ("--a", "2", "--b", "40"), {"a": 2, "b": 40}, '"text": "42"'),
            Call(
                "label",
                ("--name", "box", "--size", "large", "--loud=true"),
                {"name": "box", "size": "large", "loud": True},
                "BOX (LARGE)",
            ),
        ],
    ),
    # the same, reading nothing for 4 s (dbhub connecting its database under load): still modern
    "ts2-slow": Spec(
        "ts2",
        MODERN,
        {"add", "label"},
        [Call("add", ("--a", "1", "--b", "1"), {"a": 1, "b": 1}, '"text": "2"')],
        extra_args=("--delay", SLOW_START_S),
    ),
    # server-everything over stdio: legacy; simulate-research-query is task-only (test below)
    "everything": Spec(
        "everything",
        LEGACY,
        EVERYTHING_TOOLS,
        [
            Call("get-sum", ("--a", "19", "--b", "23"), {"a": 19, "b": 23}, "42"),
            Call(
                "get-annotated-message",
                ("--messageType", "success", "--includeImage=false"),
                {"messageType": "success", "includeImage": False},
                "Operation completed successfully",
            ),
        ],
    ),
}


class Bed:
    """Every available server in one config (each behind the wire tap), a private runtime folder for the warm
    process, and the reasons of the servers that are not installed."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.runtime = tmp / "run"
        self.runtime.mkdir(mode=0o700)
        self.missing: dict[str, str] = {}
        self.argv: dict[str, list[str]] = {}
        self.server_env: dict[str, dict[str, str]] = {}
        servers: dict[str, Any] = {}
        for name, spec in SPECS.items():
            try:
                command = real_stdio_command(spec.source)
            except InteropUnavailable as exc:
                self.missing[name] = str(exc)
                continue
            tap = ["--require", str(NODE_TAP)] if Path(command[0]).name.startswith("node") else [str(PYTHON_TAP)]
            self.argv[name] = [command[0], *tap, *command[1:], *spec.extra_args]
            self.server_env[name] = {"BKMCP_STDIN_TAP": str(self.tap_path(name))}
            if name == "code-runner":  # it writes the code to $TMPDIR/tmp.<language> before running it
                (tmp / "runner-tmp").mkdir()
                self.server_env[name]["TMPDIR"] = str(tmp / "runner-tmp")
            servers[name] = {
                "type": "stdio",
                "command": command[0],
                "args": self.argv[name][1:],
                "env": self.server_env[name],
            }
        self.config = write_mcp_json(tmp / "mcp.json", servers)
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(tmp),
            "XDG_RUNTIME_DIR": str(self.runtime),
            "PYTHONDONTWRITEBYTECODE": "1",
        }

    def need(self, name: str) -> None:
        if name in self.missing:
            _unavailable(self.missing[name])

    def tap_path(self, name: str) -> Path:
        return self.tmp / f"{name}.received.jsonl"

    def received(self, name: str) -> list[dict[str, Any]]:
        """Every message the server read, in order."""
        path = self.tap_path(name)
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def calls_of(self, name: str, tool: str) -> list[dict[str, Any]]:
        return [
            m["params"]["arguments"]
            for m in self.received(name)
            if m.get("method") == "tools/call" and m["params"]["name"] == tool
        ]

    def one_shot(self, *args: str) -> Any:
        return run_bkmcp("--config", str(self.config), *args, env={"HOME": str(self.tmp)})

    def warm(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        argv = [sys.executable, str(ROOT / "bkmcp.py"), "--config", str(self.config), *args, "--keep-alive"]
        return subprocess.run(argv, capture_output=True, env=self.env, cwd=self.tmp, timeout=180)

    def daemons(self) -> list[int]:
        """The warm process of this module (found by its runtime folder on its command line)."""
        marker = f"--keep-alive-daemon {self.runtime / 'bkmcp'}".encode()
        return _pids_with(lambda pid: marker in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" "))

    def servers(self) -> list[int]:
        """Server processes of this module, whoever started them (their environment names this module's tap)."""
        marker = str(self.tmp).encode()
        return _pids_with(lambda pid: b"BKMCP_STDIN_TAP=" + marker in Path(f"/proc/{pid}/environ").read_bytes())

    def close(self) -> None:
        argv = [sys.executable, str(ROOT / "bkmcp.py"), "--sessions", "--stop"]
        subprocess.run(argv, capture_output=True, env=self.env, cwd=self.tmp, timeout=120)
        until(lambda: not self.daemons() and not self.servers(), "the warm process and every server ended", 60)


def _pids_with(test: Any) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and test(entry):
                found.append(int(entry))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory):
    with closing(Bed(tmp_path_factory.mktemp("real-servers"))) as made:
        yield made


@pytest.fixture(scope="module")
def resident(bed: Bed):
    """One ``bkmcp --resident`` with every available server as a per-user stdio server; alice's catalogue listed."""
    rows = [stdio_row(name, argv, env=bed.server_env[name]) for name, argv in bed.argv.items()]
    registry = bed.tmp / "registry.db"
    write_registry(str(registry), rows, {name: {} for name in bed.argv}, {})
    res = Resident(registry, "--timeout", "60s", "--max-user-processes", str(2 * len(SPECS)))
    try:
        res.listed = res.ok("list_tools", "alice")  # type: ignore[attr-defined]
        yield res
    finally:
        assert res.close() == []


def test_every_real_tool_has_each_family_s_definition_or_a_warning_and_each_passes_its_checker(bed, resident):
    """Issue 30's corpus: the resident's list_tools over every real server (tests/tool_shape_checkers.py)."""
    listed = resident.listed
    assert {t["server_name"] for t in listed["tools"]} == set(bed.argv)
    assert check_listing(listed) == []


def _result(output: str) -> Any:
    return json.loads(output)["data"]["result"]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_check_and_era_R01(bed, name):
    bed.need(name)
    spec = SPECS[name]
    result = bed.one_shot(name, "--check")
    assert result.exit_status == 0, result.stdout + result.stderr
    data = result.json["data"]
    assert (data["era"], data["complete"]) == ("modern" if spec.era == MODERN else "legacy", True)
    assert data["protocol_version"] == spec.era
    assert data["tool_count"] == len(spec.tools)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_tools_help_of_every_tool_and_a_flag_for_every_required_field(bed, name):
    bed.need(name)
    result = bed.one_shot(name, "--tools")
    assert result.exit_status == 0, result.stdout + result.stderr
    data = result.json["data"]
    tools = {t["name"]: t for t in data["tools"]}
    assert set(tools) == SPECS[name].tools
    for tool_name, tool in tools.items():
        helped = bed.one_shot(name, tool_name, "--help")
        assert helped.exit_status == 0, (tool_name, helped.stderr)
        required = [f for f in tool["inputSchema"].get("required", []) if bkmcp.flag_name_problem(f) is None]
        flags = {f["name"] for f in data["cli"][tool_name]["flags"]}
        assert [f for f in required if f not in flags] == [], (tool_name, data["cli"][tool_name]["body_only"])
        for field_name in required:
            assert f"--{field_name}" in helped.stdout, (tool_name, field_name)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_flag_calls_one_shot_warm_and_resident_agree_R02(bed, resident, name):
    bed.need(name)
    for call in SPECS[name].calls:
        one = bed.one_shot(name, call.tool, *call.flags)
        assert one.exit_status == 0, (call.tool, one.stdout, one.stderr)
        shown = json.dumps(_result(one.stdout), ensure_ascii=False)
        assert call.expect in shown, (call.tool, shown)
        assert bed.calls_of(name, call.tool)[-1] == call.arguments  # what the server received

        warm = bed.warm(name, call.tool, *call.flags)
        assert warm.returncode == 0, (call.tool, warm.stderr)
        assert bed.calls_of(name, call.tool)[-1] == call.arguments
        answer = resident.ok("call_tool", "alice", server_name=name, tool_name=call.tool, arguments=call.arguments)
        if call.stable:
            assert warm.stdout.decode() == one.stdout, call.tool
            assert answer["result"] == _result(one.stdout), call.tool
        else:
            assert call.expect in json.dumps(answer["result"], ensure_ascii=False)
    assert [e for e in resident.listed["errors"] if e.get("server_name") == name] == []
    listed = [t["tool_name"] for t in resident.listed["tools"] if t["server_name"] == name]
    assert sorted(listed) == sorted(SPECS[name].tools)


def test_fastmcp1_a_later_failure_shows_no_probe_noise(bed):
    """mcp 1.x answers server/discover with ~96 lines of pydantic errors on stderr; they stay with the probe."""
    bed.need("fastmcp1")
    result = bed.one_shot("fastmcp1", "crash", "--reason", "the pump broke")
    assert result.exit_status != 0
    stderr_tail = result.json["error"]["server_stderr"]
    assert "fastmcp1_server: giving up: the pump broke" in stderr_tail
    assert [line for line in stderr_tail if "server/discover" in line or "validation error" in line] == []


def test_everything_research_runs_as_a_task_one_shot_and_warm_R04(bed, resident):
    """server-everything's task-only ``simulate-research-query`` (2025-11-25 core tasks) runs as a task without
    ``--task``: one-shot over stdio it is waited for in the one process; ``--detach`` there is refused unsent (the
    task would die with the process); warm (``--keep-alive``) it detaches, its status and result are asked later by
    id, and another is cancelled. Every tools/call the server read carried ``params.task``; the resident runs it as
    a task too, waited for, with one tools/call."""
    bed.need("everything")

    def calls() -> list[dict[str, Any]]:
        return [
            m["params"]
            for m in bed.received("everything")
            if m.get("method") == "tools/call" and m["params"]["name"] == "simulate-research-query"
        ]

    before = len(calls())
    one = bed.one_shot("everything", "simulate-research-query", "--topic", "mcp")
    assert one.exit_status == 0, one.stdout + one.stderr
    assert "Research Report: mcp" in one.json["data"]["result"]["content"][0]["text"]
    assert "can only run as a task" in one.stderr
    refused = bed.one_shot("everything", "simulate-research-query", "--topic", "mcp", "--detach")
    assert (refused.exit_status, refused.error_code) == (1, "usage_error") and "--keep-alive" in refused.stderr
    assert len(calls()) == before + 1

    warm = bed.warm("everything", "simulate-research-query", "--topic", "warm")
    assert warm.returncode == 0, warm.stdout + warm.stderr
    assert "Research Report: warm" in json.loads(warm.stdout)["data"]["result"]["content"][0]["text"]
    detached = bed.warm("everything", "simulate-research-query", "--topic", "later", "--detach")
    assert detached.returncode == 0, detached.stdout + detached.stderr
    handle = json.loads(detached.stdout)["data"]["task"]
    assert (handle["era"], handle["status"], handle["transport"]) == ("legacy", "working", "stdio")
    assert handle["ttl_ms"] == 300000 and handle["poll_interval_ms"] == 1000
    status = bed.warm("everything", "--task-status", handle["mcp_task_id"])
    assert json.loads(status.stdout)["data"]["task"]["status"] in ("working", "completed"), status.stderr
    done = bed.warm("everything", "--task-result", handle["mcp_task_id"], "--wait")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Research Report: later" in json.loads(done.stdout)["data"]["result"]["content"][0]["text"]
    other = json.loads(bed.warm("everything", "simulate-research-query", "--topic", "x", "--detach").stdout)
    task_id = other["data"]["task"]["mcp_task_id"]
    cancelled = bed.warm("everything", "--task-cancel", task_id)
    assert json.loads(cancelled.stdout)["data"]["task"]["status"] == "cancelled", cancelled.stderr
    ended = bed.warm("everything", "--task-result", task_id)
    assert (ended.returncode, json.loads(ended.stdout)["error"]["code"]) == (2, "mcp_task_cancelled")
    sent = calls()[before:]
    assert len(sent) == 4 and all(params.get("task") == {} for params in sent)  # never sent twice

    answer = resident.ask(
        "call_tool", "alice", server_name="everything", tool_name="simulate-research-query", arguments={"topic": "mcp"}
    )
    assert answer["success"] is True, answer  # the resident runs it as a task and waits (issue 39 item 3)
    assert "Research Report: mcp" in answer["result"]["result"]["content"][0]["text"]
    assert answer["result"]["task"]["era"] == "legacy" and answer["result"]["task"]["status"] == "completed"
    sent = calls()[before:]
    assert len(sent) == 5 and all(params.get("task") == {} for params in sent)  # one tools/call, as a task
