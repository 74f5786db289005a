"""A server that asks, for real (docs/contract.md §5): server-everything's ``trigger-elicitation-request`` (legacy,
TypeScript SDK) answered with ``--input`` over stdio and HTTP and by a person on a terminal (a real pty); the Python SDK
2.3.0 server with the everything-server's SEP-2322 fixtures (``sdk_server.py --input-fixtures``: single question,
request state, three rounds, a sealed state bkmcp echoes exactly, a prompt) answered on the command line, a headless
run's ``--resume`` handle completed by a second process, and the sampling and roots fixtures ending with the name of
what bkmcp does not provide. The mock's control characters never reach the terminal.

Seed row R04. Skipped with the fixture's reason only when a server is not installed.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mock_server.mcp_mock import mock_tool
from tests.helpers import ROOT, run_bkmcp, write_mcp_json

pytestmark = [pytest.mark.integration, pytest.mark.interop]

FIXTURES = ["--input-fixtures"]


def state_env(tmp_path: Path) -> dict[str, str]:
    return {"XDG_STATE_HOME": str(tmp_path / "state")}


@pytest.fixture
def sdk(tmp_path, sdk_stdio_argv, interop_subprocess_env):
    argv = sdk_stdio_argv("stateful-sse") + FIXTURES
    entry = {"type": "stdio", "command": argv[0], "args": argv[1:], "env": interop_subprocess_env}
    config = write_mcp_json(tmp_path / "sdk.json", {"sdk": entry})
    return lambda *args: run_bkmcp("--config", str(config), "sdk", *args, env=state_env(tmp_path))


@pytest.mark.parametrize(
    ("tool", "answers", "text"),
    [
        ("test_input_required_result_elicitation", ["--input", "name=Ada"], "Hello, Ada!"),
        ("test_input_required_result_request_state", ["--input", "ok=true"], "state-ok: confirmation received"),
        (
            "test_input_required_result_multi_round",
            ["--input", "name=Ada", "--input", "color=teal"],
            "Ada likes teal.",
        ),
        ("test_input_required_result_tampered_state", ["--inputs", '{"ok": true}'], "state-ok: round-1"),
    ],
)
def test_interop_sdk_input_required_tools_complete_with_answers_R04(sdk, tool, answers, text):
    result = sdk(tool, *answers)
    assert result.exit_status == 0, result.stdout + result.stderr
    assert result.json["data"]["result"]["content"][0]["text"] == text  # the server saw the answers and its state


def test_interop_sdk_input_required_prompt_completes_R04(sdk):
    result = sdk("--prompt", "test_input_required_result_prompt", "--input", "context=release notes")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert result.json["data"]["result"]["messages"][0]["content"]["text"] == "Use the following context: release notes"


def test_interop_sdk_headless_run_resumed_by_a_second_process_R04(sdk, tmp_path):
    first = sdk("test_input_required_result_multi_round")
    assert first.exit_status == 2 and first.error_code == "input_required"
    assert first.json["data"]["input_requests"]["step1"]["message"] == "Step 1: What is your name?"
    second = sdk("--resume", first.json["data"]["resume"], "--input", "name=Ada")  # round 2 asks again: kept anew
    assert second.exit_status == 2 and "step2" in second.json["data"]["input_requests"]
    third = sdk("--resume", second.json["data"]["resume"], "--input", "color=teal")
    assert third.exit_status == 0, third.stdout + third.stderr
    assert third.json["data"]["result"]["content"][0]["text"] == "Ada likes teal."
    assert not list((tmp_path / "state" / "bkmcp" / "resume").iterdir())


@pytest.mark.parametrize(
    ("tool", "method"),
    [
        ("test_input_required_result_sampling", "sampling/createMessage"),
        ("test_input_required_result_list_roots", "roots/list"),
    ],
)
def test_interop_sdk_sampling_and_roots_are_never_made_up_R04(sdk, tool, method):
    result = sdk(tool, "--inputs", "{}")
    assert result.exit_status == 2 and result.error_code == "mcp_capability_unsupported"
    assert result.json["error"]["capability"] == method and "does not provide" in result.json["error"]["message"]


def everything_answers() -> list[str]:
    return [
        "--input",
        "name=Ada",
        "--input",
        'untitledMultipleSelectEnum=["Piano","Bass"]',
        "--input",
        "titledSingleSelectEnum=hero-3",
        "--input",
        "integer=7",
    ]


def check_everything_answer(result) -> None:
    assert result.exit_status == 0, result.stdout + result.stderr
    texts = "".join(c.get("text", "") for c in result.json["data"]["result"]["content"])
    raw = json.loads(texts.split("Raw result:", 1)[1])  # what the server received, as it reports it
    assert raw["action"] == "accept"
    assert raw["content"]["name"] == "Ada" and raw["content"]["integer"] == 7
    assert raw["content"]["untitledMultipleSelectEnum"] == ["Piano", "Bass"]
    assert raw["content"]["firstLine"] == "It was a dark and stormy night."  # SEP-1034 default


def test_interop_everything_elicitation_answered_from_input_stdio_R04(tmp_path, everything_stdio_argv):
    from tests.integration.conftest_interop import interop_env

    entry = {"type": "stdio", "command": everything_stdio_argv[0], "args": everything_stdio_argv[1:]}
    config = write_mcp_json(tmp_path / "ev.json", {"ev": {**entry, "env": interop_env()}})
    result = run_bkmcp("--config", str(config), "ev", "trigger-elicitation-request", *everything_answers())
    check_everything_answer(result)


def test_interop_everything_elicitation_answered_from_input_http_R04(tmp_path, everything_server):
    config = write_mcp_json(tmp_path / "ev.json", {"ev": {"type": "http", "url": everything_server.url}})
    result = run_bkmcp("--config", str(config), "ev", "trigger-elicitation-request", *everything_answers())
    check_everything_answer(result)


def on_a_terminal(argv: list[str], typed: bytes, env: dict[str, str]) -> tuple[int, str, bytes]:
    """``argv`` with stdin and stderr on a new pseudo-terminal and ``typed`` typed into it: (exit status, stdout,
    everything written to the terminal). The child is gone when this returns."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            argv, stdin=slave, stderr=slave, stdout=subprocess.PIPE, start_new_session=True, env=env, cwd=str(ROOT)
        )
    finally:
        os.close(slave)
    terminal = b""
    try:
        os.write(master, typed)
        end = time.monotonic() + 120  # a safety net, not a threshold
        while time.monotonic() < end:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                terminal += chunk
            elif proc.poll() is not None:
                break
        out = proc.stdout.read().decode() if proc.stdout else ""
        return proc.wait(30), out, terminal
    finally:
        os.close(master)
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


def test_interop_everything_elicitation_answered_on_a_terminal_R04(tmp_path, everything_stdio_argv):
    from tests.integration.conftest_interop import interop_env

    entry = {
        "type": "stdio",
        "command": everything_stdio_argv[0],
        "args": everything_stdio_argv[1:],
        "env": interop_env(),
    }
    config = write_mcp_json(tmp_path / "ev.json", {"ev": entry})
    argv = [sys.executable, str(ROOT / "bkmcp.py"), "--config", str(config), "ev", "trigger-elicitation-request"]
    # name, then Enter (the default, or nothing) for the 12 other fields, then the review: yes
    typed = b"Ada\n" + b"\n" * 12 + b"y\n"
    status, out, terminal = on_a_terminal(argv, typed, {**os.environ, "XDG_STATE_HOME": str(tmp_path)})
    assert status == 0, out + terminal.decode(errors="replace")
    shown = terminal.decode(errors="replace")
    assert "The server asks: Please provide inputs" in shown
    assert "Your full, legal name" in shown and "[It was a dark and stormy night.]" in shown  # default pre-filled
    assert "Superman" in shown and "Send them?" in shown  # SEP-1330 titled choices; reviewed before sending
    raw = json.loads(
        "".join(c.get("text", "") for c in json.loads(out)["data"]["result"]["content"]).split("Raw result:", 1)[1]
    )
    assert raw["action"] == "accept" and raw["content"]["name"] == "Ada" and raw["content"]["integer"] == 42


def test_terminal_form_never_writes_server_control_characters_and_sends_the_reviewed_answer_R04(mock, tmp_path):
    target = mock(
        {
            "response_mode": "sse",
            "tools": [mock_tool("ask", "input_required", message="\x1b[2J\x1b]0;pwned\x07Confirm?")],
        },
        protocol_version="2025-11-25",
    )
    argv = [sys.executable, str(ROOT / "bkmcp.py"), "--config", str(target.config), target.name, "ask"]
    status, out, terminal = on_a_terminal(argv, b"maybe\ntrue\ny\n", {**os.environ, "XDG_STATE_HOME": str(tmp_path)})
    assert status == 0, out + terminal.decode(errors="replace")
    assert b"\x1b" not in terminal and b"\x07" not in terminal
    assert b"Confirm?" in terminal and b"--ok=true or --ok=false" in terminal  # a wrong value is said, then asked again
    [answer] = target.srv.client_responses
    assert answer["result"] == {"action": "accept", "content": {"ok": True}}
    assert target.count("tools/call") == 1


def test_terminal_url_question_shows_host_and_url_and_asks_consent_R04(mock, tmp_path):
    url = "https://auth.example.com/authorize?x=1"
    target = mock({"tools": [mock_tool("login", "url_elicitation", url=url)]}, protocol_version="2026-07-28")
    argv = [sys.executable, str(ROOT / "bkmcp.py"), "--config", str(target.config), target.name, "login"]
    status, out, terminal = on_a_terminal(argv, b"y\n", {**os.environ, "XDG_STATE_HOME": str(tmp_path)})
    assert b"host: auth.example.com" in terminal and url.encode() in terminal and b"does not open it" in terminal
    first, retry = (e["json"] for e in target.srv.requests("tools/call"))
    assert first["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] == {
        "elicitation": {"form": {}, "url": {}}
    }
    assert retry["params"]["inputResponses"] == {"login": {"action": "accept"}}
    assert status == 0, out
