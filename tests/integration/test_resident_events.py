"""Events and the operator's log never stop serving (docs/contract.md §11.6; issue 16 item 13): with ``--events -``
or ``-v`` and a stderr nobody reads, every command is still answered; lines that do not fit a bounded buffer are
dropped, counted and reported once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from resident_harness import ROOT, mock_stdio, stdio_row, write_registry

import bkmcp
from mock_server.mcp_mock import DEFAULT_TOOLS

WAIT = 120.0  # a hard safety net, never a performance threshold


def _serve_with_unread_stderr(tmp_path, options: list[str], *, count: int = 1500, read_at_end: bool = True):
    """``count`` calls to a resident whose stderr pipe nobody reads while they run: (answers, stderr text, exit
    status). ``read_at_end``: stderr is read after the last answer (else never, and the process must still exit)."""
    reg = tmp_path / "registry.db"  # one stdio child: 1 500 calls on one pipe, no connection storm on a mock
    write_registry(str(reg), [stdio_row("pub", mock_stdio({"tools": DEFAULT_TOOLS}), isolation="public")])
    lines = [
        json.dumps(
            {
                "command": "invoke",
                "task_id": f"e{i}",
                "params": {
                    "action": "call_tool",
                    "server_name": "pub",
                    "tool_name": "echo",
                    "arguments": {"text": "x"},
                },
                "user": {"userId": "u"},
            }
        )
        for i in range(count)
    ]
    argv = [sys.executable, str(ROOT / "bkmcp.py"), "--resident", "--registry", str(reg), *options]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    answers: list[dict] = []

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            answers.append(json.loads(line))
            if len(answers) == count:
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        for line in lines:  # stderr is never read while the commands run: its pipe fills after a few hundred lines
            proc.stdin.write((line + "\n").encode())  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        reader.join(WAIT)
        assert len(answers) == count, f"{len(answers)} of {count} answered"
        assert [a for a in answers if a["success"] is not True][:3] == []
        proc.stdin.close()  # type: ignore[union-attr]
        err = proc.stderr.read().decode() if read_at_end else ""  # type: ignore[union-attr]
        return answers, err, proc.wait(WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_stderr_nobody_reads_never_stops_serving(tmp_path):
    _answers, err, status = _serve_with_unread_stderr(tmp_path, ["--events", "-"])
    assert status == 0
    events = [json.loads(line) for line in err.splitlines() if line.startswith('{"ts"')]
    started = [e for e in events if e["event"] == "tool.started"]
    dropped = sum(e["count"] for e in events if e["event"] == "events.dropped")
    # 3 000 lines fit the buffer; what the exit's bounded wait for a slow reader leaves unwritten is not counted
    assert 0 < len(started) <= 1500 and dropped == 0


@pytest.mark.parametrize("options", [["-v"], ["-v", "--events", "-"]], ids=["log", "log+events"])
def test_an_operator_log_nobody_reads_never_stops_serving(tmp_path, options):
    """``-v`` writes several log lines a call (the child's stderr too): they wait in the same bounded buffer as the
    events, never in a command's thread; sharing stderr with ``--events -``, every line stays whole."""
    _answers, err, status = _serve_with_unread_stderr(tmp_path, options)
    assert status == 0
    lines = err.splitlines()
    assert lines and all(line.startswith(("bkmcp: ", '{"ts"')) for line in lines), [
        line for line in lines if not line.startswith(("bkmcp: ", '{"ts"'))
    ][:3]
    for line in lines:
        if line.startswith("{"):
            json.loads(line)  # an event line is never cut by a log line, nor the other way round
    if "--events" in options:
        assert any(line.startswith('{"ts"') for line in lines) and any(line.startswith("bkmcp: ") for line in lines)


def test_a_stderr_never_read_still_lets_the_process_exit(tmp_path):
    """At the end, what still waits for a stream nobody reads is given up (counted as dropped): the exit is prompt."""
    start = time.monotonic()
    _answers, _err, status = _serve_with_unread_stderr(tmp_path, ["-v", "--events", "-"], read_at_end=False)
    assert status == 0
    assert time.monotonic() - start < WAIT


def test_event_drops_are_counted_and_reported_once():
    """A pipe nobody reads, a buffer of 10 lines: emit never blocks; once the pipe is read, one events.dropped line
    reports every drop, and written + dropped is every event emitted."""
    read_fd, write_fd = os.pipe()
    stream = os.fdopen(write_fd, "w", encoding="utf-8")
    sink = bkmcp.EventSink(stream, bkmcp.Redactor(), buffer=10)
    emitted = 0
    done = threading.Event()

    def emit_all() -> None:
        nonlocal emitted
        for i in range(2000):  # ~100 KB: more than the pipe holds
            sink.emit("tool.started", server="s", tool="t", user="u", task_id=f"t{i}")
            emitted += 1
        done.set()

    threading.Thread(target=emit_all, daemon=True).start()
    assert done.wait(WAIT), "emit blocked on a full pipe"
    assert sink.dropped > 0
    drops = sink.dropped
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: os.read(read_fd, 65536), b"")), daemon=True)
    reader.start()
    end = time.monotonic() + WAIT
    while sink.lines._backlog and time.monotonic() < end:  # the writer thread empties the buffer as the pipe drains
        time.sleep(0.01)
    sink.emit("tool.finished", server="s", tool="t", user="u", task_id="last")
    sink.close()
    stream.close()
    reader.join(WAIT)
    os.close(read_fd)
    events = [json.loads(line) for line in b"".join(chunks).decode().splitlines()]
    reports = [e for e in events if e["event"] == "events.dropped"]
    assert [e["count"] for e in reports] == [drops]
    assert len(events) - len(reports) + drops == emitted + 1
    assert events[-1]["task_id"] == "last"


def test_log_and_events_sharing_stderr_keep_whole_lines_and_report_each_kind_once():
    """One LineWriter for both (``--events -`` with the log on stderr): lines stay whole and in order, and each kind's
    drops are reported by its own line: ``events.dropped`` for events, a warning for the log."""
    read_fd, write_fd = os.pipe()
    stream = os.fdopen(write_fd, "w", encoding="utf-8")
    lines = bkmcp.LineWriter(stream, buffer=10)
    sink = bkmcp.EventSink(stream, bkmcp.Redactor(), lines=lines)
    log = bkmcp.Log(stream, verbose=True, lines=lines)
    assert not log.is_tty  # never a redrawn progress line through a LineWriter
    done = threading.Event()

    def write_all() -> None:
        for i in range(2000):  # ~200 KB: more than the pipe holds
            sink.emit("tool.started", server="s", tool="t", user="u", task_id=f"t{i}")
            log.debug(f"call {i} " + "x" * 40)
        done.set()

    threading.Thread(target=write_all, daemon=True).start()
    assert done.wait(WAIT), "a write blocked on a full pipe"
    drops = dict(lines.dropped)
    assert drops["events"] > 0 and drops["log"] > 0
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: os.read(read_fd, 65536), b"")), daemon=True)
    reader.start()
    end = time.monotonic() + WAIT
    while lines._backlog and time.monotonic() < end:  # the writer thread empties the buffer as the pipe drains
        time.sleep(0.01)
    log.warn("last")
    lines.close(WAIT)
    stream.close()
    reader.join(WAIT)
    os.close(read_fd)
    text = b"".join(chunks).decode().splitlines()
    assert all(line.startswith('{"ts"') or line.startswith("bkmcp: ") for line in text)
    events = [json.loads(line) for line in text if line.startswith("{")]
    assert [e["count"] for e in events if e["event"] == "events.dropped"] == [drops["events"]]
    notes = [line for line in text if "log lines dropped" in line]
    assert notes == [f"bkmcp: warning: {drops['log']} log lines dropped (stderr was not read)"]
    assert text[-1] == "bkmcp: warning: last"
    assert len(text) - 2 + sum(drops.values()) == 4000 + 1


def test_close_gives_up_on_a_stream_nobody_reads():
    """What still waits when ``close`` gives up is counted as dropped (nobody would read a report); close returns."""
    read_fd, write_fd = os.pipe()
    stream = os.fdopen(write_fd, "w", encoding="utf-8")
    lines = bkmcp.LineWriter(stream)
    for i in range(2000):  # fills the pipe; the rest waits in the buffer
        lines.write(f"bkmcp: line {i} " + "x" * 60 + "\n")
    waiting = len(lines._backlog)
    assert waiting > 0
    closed = threading.Event()
    threading.Thread(target=lambda: (lines.close(0.1), closed.set()), daemon=True).start()
    assert closed.wait(WAIT), "close waited for a stream nobody reads"
    assert lines.dropped["log"] == waiting and lines.written + waiting == 2000
    lines.write("bkmcp: after the end\n")  # nobody reads: dropped at once, never a block
    assert lines.dropped["log"] == waiting + 1
    stream.close()
    os.close(read_fd)
