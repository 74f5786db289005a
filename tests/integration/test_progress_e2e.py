"""Progress for long calls (contract §5, issue 11 item 5): ``tools/call`` carries ``params._meta.progressToken`` when
stderr is a terminal or ``-v`` is given, and the server's ``notifications/progress`` for it are shown on stderr —
one updating line on a terminal (checked in a real pseudo-terminal, against the mock and against
server-everything's ``trigger-long-running-operation``), plain lines with ``-v`` — while stdout stays exactly
what it is without progress. Without a terminal and without ``-v`` no token is sent (the mock's request log)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mock_server.mcp_mock import mock_tool
from tests.helpers import child_on_a_pty, read_terminal, write_mcp_json

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SLOW = mock_tool("long_job", "progress", properties={"text": {"type": "string"}}, steps=3, ms=150)
CAP_S = 60.0  # hard safety net only; the commands take well under a few seconds


def run_with_terminal_stderr(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """Run ``argv`` with stderr on a pseudo-terminal (120 columns) and stdout on a pipe; (status, stdout, the
    terminal's bytes as text). Bounded: the process group is killed after CAP_S."""
    with child_on_a_pty(argv, "stderr", columns=120, env=env, cwd=str(ROOT)) as (proc, master):
        deadline = time.monotonic() + CAP_S
        terminal = read_terminal(master, proc, deadline)
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("bkmcp did not finish within the safety net")
        assert proc.stdout is not None
        stdout = proc.stdout.read().decode()
        status = proc.wait(timeout=CAP_S)
    return status, stdout, terminal.decode("utf-8", "replace")


def bkmcp_argv(config: Path, *args: str) -> list[str]:
    return [sys.executable, str(ROOT / "bkmcp.py"), "--config", str(config), "--timeout", "30s", *args]


def child_env(tmp_path: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}


def run_without_a_terminal(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` with stdout and stderr on pipes (no terminal anywhere); bounded by CAP_S."""
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=child_env(tmp_path),
        cwd=str(ROOT),
        timeout=CAP_S,
        stdin=subprocess.DEVNULL,
    )


def call_meta(entry: dict) -> dict:
    return entry["json"]["params"].get("_meta") or {}


@pytest.mark.parametrize("version", ["2026-07-28", "2025-11-25"])
def test_verbose_asks_for_progress_and_prints_plain_lines(mock, version):
    target = mock({"tools": [SLOW]}, protocol_version=version)
    result = target.run("-v", target.name, "long_job", "--text", "x")
    assert result.exit_status == 0, result.stdout + result.stderr
    (call,) = target.srv.requests("tools/call")
    token = call_meta(call)["progressToken"]
    assert isinstance(token, str) and token.startswith("bkmcp-")
    lines = [line for line in result.stderr.splitlines() if line.startswith("bkmcp: progress ")]
    assert [line.split(" (")[0] for line in lines] == [f"bkmcp: progress {i}/3: step {i} of 3" for i in (1, 2, 3)]
    assert all(line.endswith("s)") for line in lines) and "\r" not in result.stderr
    assert "progress" not in result.stdout
    assert result.json["data"]["result"]["content"][0]["text"]


@pytest.mark.parametrize("version", ["2026-07-28", "2025-11-25"])
def test_no_terminal_and_no_verbose_sends_no_token_and_shows_nothing(mock, version):
    target = mock({"tools": [SLOW]}, protocol_version=version)
    result = target.run(target.name, "long_job", "--text", "x")
    assert result.exit_status == 0, result.stdout + result.stderr
    (call,) = target.srv.requests("tools/call")
    assert "progressToken" not in call_meta(call)
    if version == "2025-11-25":
        assert "_meta" not in call["json"]["params"]
    assert result.stderr == ""  # the mock still reports progress under its own token; none of it is shown


def test_progress_for_another_token_is_not_shown(mock):
    """Only the call's own token is rendered: a notification for another token is a -v debug line at most."""
    note = {"method": "notifications/progress", "params": {"progressToken": "someone-else", "progress": 1}}
    target = mock({"notifications_before_result": [note], "response_mode": "sse"}, protocol_version="2026-07-28")
    result = target.run("-v", target.name, "echo", "--text", "x")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert "bkmcp: progress " not in result.stderr
    assert "ignored notifications/progress not for this call" in result.stderr


def test_terminal_shows_one_updating_line_and_stdout_is_unchanged(mock, tmp_path):
    target = mock({"tools": [SLOW]}, protocol_version="2026-07-28")
    status, stdout, terminal = run_with_terminal_stderr(
        bkmcp_argv(target.config, target.name, "long_job", "--text", "x"), child_env(tmp_path)
    )
    assert status == 0, stdout + terminal
    (call,) = target.srv.requests("tools/call")
    assert call_meta(call)["progressToken"].startswith("bkmcp-")  # a terminal alone asks for progress
    for i in (1, 2, 3):
        assert f"\rbkmcp: progress {i}/3: step {i} of 3 (" in terminal
    assert terminal.count("\x1b[K") == 3 and terminal.endswith("\x1b[K\r\n")  # finished with a newline
    assert terminal.count("\n") == 1  # one line, redrawn in place
    # stdout is exactly the envelope a run without a terminal prints
    plain = run_without_a_terminal(bkmcp_argv(target.config, target.name, "long_job", "--text", "x"), tmp_path)
    assert plain.returncode == 0 and plain.stderr == ""
    assert stdout == plain.stdout and json.loads(stdout)["ok"] is True


def test_server_everything_long_running_operation_under_a_pseudo_terminal(everything_server, tmp_path):
    """The TypeScript reference server (legacy era, SSE) reports progress only when asked with a token."""
    config = write_mcp_json(tmp_path, {"ev": {"type": "http", "url": everything_server.url}})
    argv = bkmcp_argv(config, "ev", "trigger-long-running-operation", "--duration", "1", "--steps", "3")
    status, stdout, terminal = run_with_terminal_stderr(argv, child_env(tmp_path))
    assert status == 0, stdout + terminal
    for i in (1, 2, 3):
        assert f"\rbkmcp: progress {i}/3 (" in terminal
    assert terminal.endswith("\x1b[K\r\n") and terminal.count("\n") == 1
    assert "progress" not in stdout.replace("Long running operation", "")
    envelope = json.loads(stdout)
    assert envelope["ok"] is True and "Long running operation completed" in json.dumps(envelope["data"]["result"])
    plain = run_without_a_terminal(argv, tmp_path)
    assert plain.returncode == 0 and plain.stderr == ""  # no terminal, no -v: no token, so no progress at all
    assert plain.stdout == stdout
