"""A server's question and the person at the terminal (docs/contract.md §5, §14), through real pseudo-terminals.

Inside a warm call (``--keep-alive``) the background process has no terminal: a legacy ``elicitation/create`` and a
2026-07-28 ``input_required`` round are relayed to the client, which asks them on its own terminal with the one-shot
form and sends the answer back; a client that leaves (Ctrl-C, killed) makes the server hear ``cancel``. The warm
session declares what the client can answer (a terminal: form and URL). And the time a person takes does not
spend ``--timeout`` (cold and warm): the budget stands still while the person is asked, never while answers given
on the command line are read.

Each command runs ``bkmcp.py`` in a fresh interpreter with stdin and stderr on a new pseudo-terminal; the warm
process is the one those clients start, in the test's own runtime folder, and teardown stops it and waits until it
and every server process it started are gone.

Seed row R04.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mock_server.mcp_mock import MockServer, mock_tool
from tests.helpers import ROOT, process_running, until, write_mcp_json
from tests.integration.test_warm_sessions import World, _processes

pytestmark = [pytest.mark.integration]

MOCK = ROOT / "mock_server" / "mcp_mock.py"
LEGACY, MODERN = "2025-11-25", "2026-07-28"
ASK = "\x1b]0;pwned\x07Ship it?"  # control characters a server must never get onto the terminal


class Terminal:
    """One bkmcp command with stdin and stderr on a new pseudo-terminal (stdout on a pipe): ``expect`` reads what
    it writes until a text appears, ``type`` types; ``finish`` waits for its end. The child is gone afterwards."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        master, slave = pty.openpty()
        try:
            self.proc = subprocess.Popen(
                argv, stdin=slave, stderr=slave, stdout=subprocess.PIPE, start_new_session=True, env=env, cwd=cwd
            )
        finally:
            os.close(slave)
        self.master = master
        self.shown = b""
        self.out: list[bytes] = []
        self._reader = threading.Thread(target=lambda: self.out.append(self.proc.stdout.read()), daemon=True)
        self._reader.start()

    def _read(self, wait: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], wait)
        if not ready:
            return self.proc.poll() is None
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: every writer of the terminal is gone
            return False
        self.shown += chunk
        return bool(chunk)

    def expect(self, text: str) -> None:
        end = time.monotonic() + 120  # a safety net, not a threshold
        while text.encode() not in self.shown:
            if time.monotonic() > end or not self._read(0.2):
                raise AssertionError(f"never shown: {text!r}; the terminal shows {self.shown!r}")

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def finish(self) -> tuple[int, dict[str, Any]]:
        """(exit status, the envelope on stdout)."""
        end = time.monotonic() + 120
        while time.monotonic() < end and self._read(0.2):
            pass
        status = self.proc.wait(60)
        self._reader.join(60)
        out = b"".join(self.out).decode()
        return status, json.loads(out) if out.strip() else {}

    def answer(self, typed: str, send: str = "y\n") -> tuple[int, dict[str, Any]]:
        """Types ``typed`` once the question's form asks its ``ok`` field, and ``send`` at "Send them?"; then
        ``finish``."""
        self.expect("ok (boolean, required)")
        self.type(typed)
        self.expect("Send them?")
        self.type(send)
        return self.finish()

    def close(self) -> None:
        os.close(self.master)
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._reader.join(60)
        self.proc.stdout.close()


class Questions(World):
    """``World`` (its runtime folder, its config) plus stdio mocks that ask (``lg`` legacy, ``md`` 2026-07-28),
    each logging what it receives, and ``on_a_terminal`` to run a command on a pseudo-terminal."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        self.logs: dict[str, Path] = {}
        for name, version in (("lg", LEGACY), ("md", MODERN)):
            self.logs[name] = tmp / f"{name}-log.jsonl"
            scenario = {
                "versions": [version],
                "tools": [mock_tool("ask", "input_required", message=ASK)],
                "server_request_wait_ms": 60000,  # the server waits for the person as long as the test may take
            }
            argv = [str(MOCK), "--stdio", "--quiet", "--scenario-json", json.dumps(scenario)]
            self.servers[name] = {
                "type": "stdio",
                "command": sys.executable,
                "args": [*argv, "--log", str(self.logs[name])],
            }
        write_mcp_json(self.config, self.servers)
        self.terminals: list[Terminal] = []

    def on_a_terminal(self, *args: str) -> Terminal:
        made = Terminal(self.argv(*args), {**self.env, "XDG_STATE_HOME": str(self.tmp / "state")}, self.tmp)
        self.terminals.append(made)
        return made

    def received(self, name: str) -> list[dict[str, Any]]:
        """What the stdio mock ``name`` received, message by message."""
        lines = self.logs[name].read_text().splitlines() if self.logs[name].exists() else []
        return [json.loads(line)["json"] for line in lines]

    def calls(self, name: str) -> list[dict[str, Any]]:
        return [m for m in self.received(name) if m.get("method") == "tools/call"]

    def answers(self, name: str) -> list[Any]:
        """The client's answers to the server's own requests (the legacy ``elicitation/create``)."""
        return [
            m.get("result")
            for m in self.received(name)
            if "method" not in m and str(m.get("id")).startswith("mock-srv")
        ]

    def close(self) -> None:
        for made in self.terminals:
            made.close()
        servers = descendants(self.daemons())  # the servers the warm process started (server-everything too)
        super().close()
        until(lambda: not any(process_running(pid) for pid in servers), "the warm process's servers ended", 20)


def descendants(roots: list[int]) -> set[int]:
    """Every process below ``roots`` now (by each process's parent in /proc)."""
    parents: dict[int, int] = {}
    for pid in _processes():
        try:
            parents[pid] = int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = set(), set(roots)
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def write_when_read(fifo: Path, text: str) -> None:
    """``text`` into ``fifo`` if a reader has it open now (never blocks when none has)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # ENXIO: no reader (it gave up)
        return
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


@pytest.fixture
def place(tmp_path: Path):
    with contextlib.closing(Questions(tmp_path)) as made:
        yield made


def test_R04_warm_legacy_question_is_asked_on_the_client_terminal(place):
    term = place.on_a_terminal("lg", "ask", "--keep-alive")
    term.expect("Ship it?")
    status, envelope = term.answer("true\n")
    assert status == 0, (envelope, term.shown)
    assert place.answers("lg") == [{"action": "accept", "content": {"ok": True}}]
    assert len(place.calls("lg")) == 1
    assert envelope["data"]["result"]["structuredContent"]["result"] == {"action": "accept", "content": {"ok": True}}
    assert b"\x1b" not in term.shown and b"\x07" not in term.shown  # server text made terminal-safe
    [init] = [m for m in place.received("lg") if m.get("method") == "initialize"]
    assert init["params"]["capabilities"] == {"elicitation": {"form": {}, "url": {}}}  # what a terminal answers
    assert place.daemons()  # it ran in the warm process


def test_R04_warm_question_declined_only_when_the_person_says_so(place):
    term = place.on_a_terminal("lg", "ask", "--keep-alive")
    status, _envelope = term.answer("false\n", "d\n")
    assert status == 0
    assert place.answers("lg") == [{"action": "decline"}] and len(place.calls("lg")) == 1


def test_R04_warm_modern_round_is_asked_on_the_client_terminal(place):
    term = place.on_a_terminal("md", "ask", "--keep-alive")
    status, envelope = term.answer("true\n")
    assert status == 0, (envelope, term.shown)
    first, retry = place.calls("md")
    assert first["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] == {
        "elicitation": {"form": {}, "url": {}}
    }
    assert retry["params"]["inputResponses"] == {"confirm": {"action": "accept", "content": {"ok": True}}}
    assert envelope["data"]["result"]["structuredContent"]["inputResponses"]["confirm"]["content"] == {"ok": True}


@pytest.mark.parametrize("leaves", ["ctrl-c", "killed"])
def test_R04_warm_client_that_leaves_while_asked_makes_the_server_hear_cancel(place, leaves):
    term = place.on_a_terminal("lg", "ask", "--keep-alive")
    term.expect("ok (boolean, required)")
    if leaves == "ctrl-c":
        term.proc.send_signal(signal.SIGINT)
        status, envelope = term.finish()
        assert status == 130 and envelope["error"]["code"] == "mcp_cancelled", (envelope, term.shown)
        assert envelope["error"]["outcome"] == "unknown"  # tools/call had been sent
    else:
        os.killpg(term.proc.pid, signal.SIGKILL)
        term.proc.wait(60)
    end = time.monotonic() + 60
    while not place.answers("lg") and time.monotonic() < end:
        time.sleep(0.05)
    assert place.answers("lg") == [{"action": "cancel"}]  # never decline, never a made-up answer
    assert len(place.calls("lg")) == 1


def test_R04_warm_everything_elicitation_answered_on_the_client_terminal(place, everything_stdio_argv):
    from tests.integration.conftest_interop import interop_env

    entry = {"type": "stdio", "command": everything_stdio_argv[0], "args": everything_stdio_argv[1:]}
    place.servers["ev"] = {**entry, "env": interop_env()}
    write_mcp_json(place.config, place.servers)
    term = place.on_a_terminal("ev", "trigger-elicitation-request", "--keep-alive")
    term.expect("The server asks: Please provide inputs")
    term.type("Ada\n" + "\n" * 12)  # a name, then Enter (the default, or nothing) for the 12 other fields
    term.expect("Send them?")
    term.type("y\n")
    status, envelope = term.finish()
    assert status == 0, (envelope, term.shown)
    texts = "".join(c.get("text", "") for c in envelope["data"]["result"]["content"])
    raw = json.loads(texts.split("Raw result:", 1)[1])  # what the server received, as it reports it
    assert raw["action"] == "accept" and raw["content"]["name"] == "Ada" and raw["content"]["integer"] == 42
    assert place.daemons()


@pytest.mark.parametrize("warm", [False, True], ids=["one-shot", "warm"])
@pytest.mark.parametrize("server", ["lg", "md"])
def test_R04_time_a_person_takes_does_not_spend_the_timeout(place, warm, server):
    """--timeout 1s, the person answers after 2 s: the call completes; answers read from --inputs (not a person)
    are bounded by --timeout as ever."""
    term = place.on_a_terminal(server, "ask", "--timeout", "1s", *(["--keep-alive"] if warm else []))
    term.expect("ok (boolean, required)")
    time.sleep(2)  # longer than the whole --timeout: only a paused budget lets the call complete
    term.type("true\n")
    term.expect("Send them?")
    term.type("y\n")
    status, envelope = term.finish()
    assert status == 0, (envelope, term.shown)
    accepted = {"action": "accept", "content": {"ok": True}}
    if server == "lg":
        assert place.answers(server) == [accepted] and len(place.calls(server)) == 1
    else:
        assert place.calls(server)[-1]["params"]["inputResponses"] == {"confirm": accepted}
    calls = len(place.calls(server))

    fifo = place.tmp / f"answers-{server}-{warm}"
    os.mkfifo(fifo)
    writer = threading.Timer(2.0, write_when_read, (fifo, '{"ok": true}'))
    writer.start()
    try:
        slow = place.on_a_terminal(
            server, "ask", "--timeout", "1s", "--inputs", f"@{fifo}", *(["--keep-alive"] if warm else [])
        )
        status, envelope = slow.finish()
    finally:
        writer.join()
    assert status == 1 and b"delivered no end of input within --timeout 1s" in slow.shown, slow.shown
    assert len(place.calls(server)) == calls  # nothing was sent: the answers were not read in time


@pytest.mark.parametrize("warm", [False, True], ids=["one-shot", "warm"])
@pytest.mark.parametrize("mode", ["json", "sse"])
def test_R04_a_question_on_the_standalone_get_stream_does_not_spend_the_timeout_of_the_call(place, mode, warm):
    """Legacy HTTP, the question on the standalone GET stream (as a TypeScript SDK server sends it) while the call's
    own answer (its JSON response's headers, or its event stream) is being read: --timeout 1s, the person answers
    after 2 s, the call completes and the server received the answer."""
    question = mock_tool("ask", "input_required", message=ASK)
    http = MockServer(
        {"standalone_get": True, "response_mode": mode, "tools": [question], "server_request_wait_ms": 60000}
    )
    http.start()
    try:
        place.servers["hq"] = {"type": "http", "url": http.url, "protocolVersion": LEGACY}
        write_mcp_json(place.config, place.servers)
        term = place.on_a_terminal("hq", "ask", "--timeout", "1s", *(["--keep-alive"] if warm else []))
        term.expect("ok (boolean, required)")
        time.sleep(2)  # longer than the whole --timeout: only a paused budget lets the call's read go on
        term.type("true\ny\n")
        status, envelope = term.finish()
        assert status == 0, (envelope, term.shown)
        accepted = {"action": "accept", "content": {"ok": True}}
        assert [r["result"] for r in http.client_responses] == [accepted]
        assert envelope["data"]["result"]["structuredContent"]["result"] == accepted
        assert len(http.requests("tools/call")) == 1
        [get] = [g for g in http.requests(http_method="GET") if "last-event-id" not in g["headers"]]
        assert get["headers"]["accept"] == "text/event-stream"  # the stream the question came on
    finally:
        http.stop()
