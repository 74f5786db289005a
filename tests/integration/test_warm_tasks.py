"""A stdio server's task under ``--keep-alive`` (docs/contract.md §5 "Tasks", §14): the background process keys its
sessions by what each command declared (elicitation with answers or a terminal, nothing headless), and a task
lives in the server process that made it; so ``--task-status``, ``--task-result`` and ``--task-cancel`` are lent
the kept session the task lives in, whatever they or the creating command declared, and a task whose session
ended is ``mcp_task_expired`` without a server being started. Driven through a real background process (the
stdio mock logs each request with its process id)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mock_server.mcp_mock import TASK_CAPABILITIES, MockServer, mock_tool
from tests.helpers import ROOT, pids_running, stdio_mock_entry, stdio_mock_log, until, write_mcp_json

pytestmark = [pytest.mark.integration]

LEGACY, MODERN = "2025-11-25", "2026-07-28"
TEXT = {"text": {"type": "string"}}


def job(name: str, after_ms: int, **options: object) -> dict:
    tool = mock_tool(name, "job", TEXT, poll_ms=40, after_ms=after_ms, **options)
    tool["execution"] = {"taskSupport": "optional"}
    return tool


TOOLS = [job("research", 300), job("long", 600000), job("asking", 50, end="input")]


class Warm:
    """bkmcp in its own processes against stdio mocks ``old`` (2025-11-25) and ``new`` (2026-07-28) and the HTTP
    mock ``web`` (2026-07-28, ``http``), each command headless (stdin and stdout not terminals) with
    ``--keep-alive``; ``stop`` ends the background process."""

    def __init__(self, tmp_path: Path, http: MockServer) -> None:
        runtime = tmp_path / "run"
        runtime.mkdir(mode=0o700)
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(tmp_path),
            "XDG_RUNTIME_DIR": str(runtime),
            "XDG_STATE_HOME": str(tmp_path / "state"),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        servers, self.logs = {}, {}
        for name, version in (("old", LEGACY), ("new", MODERN)):
            (tmp_path / name).mkdir()
            scenario = {"tools": TOOLS, "capabilities": TASK_CAPABILITIES}
            servers[name], self.logs[name] = stdio_mock_entry(tmp_path / name, scenario, version)
        self.http = http
        servers["web"] = {"type": "http", "url": http.url, "protocolVersion": MODERN}
        self.config = write_mcp_json(tmp_path / "mcp.json", servers)
        self.cwd = ROOT  # where on_a_terminal runs too: a stdio child runs in the client's directory (part of its key)
        self.marker = f"--keep-alive-daemon {runtime / 'bkmcp'}"

    def __call__(self, *args: str) -> tuple[int, dict]:
        argv = [sys.executable, str(ROOT / "bkmcp.py"), "--config", str(self.config), *args, "--keep-alive"]
        done = subprocess.run(
            argv, capture_output=True, env=self.env, cwd=self.cwd, timeout=120, stdin=subprocess.DEVNULL
        )
        return done.returncode, json.loads(done.stdout or b"null")

    def task(self, *args: str) -> str:
        status, envelope = self(*args, "--task", "--detach")
        assert status == 0, envelope
        return envelope["data"]["task"]["mcp_task_id"]

    def stop(self) -> None:
        subprocess.run(
            [sys.executable, str(ROOT / "bkmcp.py"), "--sessions", "--stop"],
            capture_output=True,
            env=self.env,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        until(lambda: not pids_running(self.marker), "the background process ended", 20)

    def received(self, name: str) -> list[dict]:
        """What server ``name``'s processes received: each request with its method and the process's id."""
        return [e for e in stdio_mock_log(self.logs[name]) if e.get("rpc_method")]

    def process_of(self, name: str, task_id: str, text: str) -> int:
        """The one process that got the call made with ``--text TEXT`` (the task ``task_id``) and every request
        naming that task."""
        made = [
            e["pid"]
            for e in self.received(name)
            if e["rpc_method"] == "tools/call" and e["json"]["params"]["arguments"] == {"text": text}
        ]
        naming = [e["pid"] for e in self.received(name) if (e["json"].get("params") or {}).get("taskId") == task_id]
        assert len(made) == 1 and naming and set(naming) == set(made), (made, naming)
        return made[0]


@pytest.fixture
def warm(tmp_path: Path) -> Iterator[Warm]:
    http = MockServer({"tools": TOOLS, "capabilities": TASK_CAPABILITIES})
    http.start()
    made = Warm(tmp_path, http)
    try:
        yield made
    finally:
        made.stop()
        http.stop()


@pytest.mark.parametrize("server", ["old", "new"])
def test_a_task_made_with_answers_is_reached_by_later_commands_without_them(warm, server):
    """Made by a command with ``--input`` (its session declares elicitation), a task is read, waited for and
    cancelled by later headless commands that declare nothing: in the process that made it, results back."""
    done = warm.task(server, "research", "--text", "x", "--input", "ok=true")
    endless = warm.task(server, "long", "--text", "y", "--input", "ok=true")
    status, envelope = warm(server, "--task-status", done)
    assert status == 0 and envelope["data"]["task"]["mcp_task_id"] == done, envelope
    status, envelope = warm(server, "--task-result", done, "--wait")
    assert status == 0, envelope
    assert envelope["data"]["result"]["content"][0]["text"].startswith('job done: {"text":"x"}')
    status, envelope = warm(server, "--task-cancel", endless)
    assert status == 0 and envelope["data"]["task"]["status"] in ("cancelled", "cancel_requested"), envelope
    assert warm.process_of(server, done, "x") == warm.process_of(server, endless, "y")
    methods = [e["rpc_method"] for e in warm.received(server)]
    assert methods.count("tools/call") == 2 and "tasks/cancel" in methods


def test_a_task_made_headless_is_answered_by_a_later_command_with_answers(warm):
    """The reverse: made by a command that declares nothing, a legacy task is reached by ``--task-result --wait
    --input`` (which may be answered on the tasks/result stream) and a modern one's questions go back in tasks/update,
    each in the process that made it; a task made with answers (kept apart, in a second process) is still reached by
    a terminal-less status."""
    old = warm.task("old", "asking", "--text", "a")
    new = warm.task("new", "asking", "--text", "b")
    with_answers = warm.task("old", "research", "--text", "c", "--input", "ok=true")
    for name, task_id, text in (("old", old, "a"), ("new", new, "b")):
        status, envelope = warm(name, "--task-result", task_id, "--wait", "--input", "ok=true")
        assert status == 0, envelope
        assert envelope["data"]["result"]["content"][0]["text"].startswith("job done:")
        warm.process_of(name, task_id, text)
    status, envelope = warm("old", "--task-status", with_answers)
    assert status == 0, envelope
    assert warm.process_of("old", old, "a") != warm.process_of("old", with_answers, "c")  # kept apart, each reached
    answers = [e["json"]["result"] for e in stdio_mock_log(warm.logs["old"]) if "result" in (e.get("json") or {})]
    assert answers == [{"action": "accept", "content": {"ok": True}}]  # asked on the tasks/result stream
    updates = [e["json"]["params"]["inputResponses"] for e in warm.received("new") if e["rpc_method"] == "tasks/update"]
    assert updates == [{"confirm": {"action": "accept", "content": {"ok": True}}}]


def test_a_stdio_task_is_reached_from_another_directory_in_the_process_that_made_it(warm, tmp_path):
    """A stdio server with no ``cwd`` runs in the directory of the command that started it, which is part of its
    session's key; a task command run elsewhere is still lent the session its task lives in (the same config
    entry), and no second server process is started."""
    task_id = warm.task("old", "research", "--text", "d", "--input", "ok=true")
    started = [e for e in warm.received("old") if e["rpc_method"] == "initialize"]
    warm.cwd = tmp_path / "elsewhere"
    warm.cwd.mkdir()
    status, envelope = warm("old", "--task-result", task_id, "--wait")
    assert status == 0, envelope
    assert envelope["data"]["result"]["content"][0]["text"].startswith('job done: {"text":"d"}')
    warm.process_of("old", task_id, "d")
    assert [e for e in warm.received("old") if e["rpc_method"] == "initialize"] == started
    status, envelope = warm("old", "--task-status", "no-such-task")  # one it does not hold: no process started
    assert (status, envelope["error"]["code"]) == (2, "mcp_task_expired"), envelope
    assert [e for e in warm.received("old") if e["rpc_method"] == "initialize"] == started


def test_a_task_whose_warm_session_ended_is_expired_and_no_server_starts(warm):
    """After the background process restarted, no kept session holds the task: ``mcp_task_expired`` (the stable
    error of a task the server no longer knows), and no server process is started to ask. An HTTP server's
    2026-07-28 task does not live in a session: a new one reaches it."""
    task_id = warm.task("old", "long", "--text", "x", "--input", "ok=true")
    web = warm.task("web", "long", "--text", "w", "--input", "ok=true")
    warm.stop()
    status, envelope = warm("web", "--task-status", web)
    assert (status, envelope["data"]["task"]["status"]) == (0, "working"), envelope
    assert len(warm.http.requests("tasks/get")) == 1
    before = warm.received("old")
    for mode in ("--task-status", "--task-result", "--task-cancel"):
        status, envelope = warm("old", mode, task_id)
        assert (status, envelope["error"]["code"]) == (2, "mcp_task_expired"), envelope
        assert "warm session that has ended" in envelope["error"]["message"]
    assert warm.received("old") == before


def test_a_task_made_on_a_terminal_is_reached_by_a_command_without_one(warm):
    """Made on a terminal (the warm client says so: its session declares elicitation form and url), a task is
    waited for by a later command with no terminal and no answers, in the process that made it."""
    from tests.integration.test_input_required_interop import on_a_terminal

    argv = [sys.executable, str(ROOT / "bkmcp.py"), "--config", str(warm.config), "old", "research", "--text", "t"]
    status, out, shown = on_a_terminal([*argv, "--task", "--detach", "--keep-alive"], b"", warm.env)
    assert status == 0, out + shown.decode(errors="replace")
    task_id = json.loads(out)["data"]["task"]["mcp_task_id"]
    initialize = [e for e in warm.received("old") if e["rpc_method"] == "initialize"]
    assert initialize[0]["json"]["params"]["capabilities"] == {"elicitation": {"form": {}, "url": {}}}
    status, envelope = warm("old", "--task-result", task_id, "--wait")
    assert status == 0, envelope
    assert envelope["data"]["result"]["content"][0]["text"].startswith('job done: {"text":"t"}')
    warm.process_of("old", task_id, "t")
    assert len([e for e in warm.received("old") if e["rpc_method"] == "initialize"]) == 1
