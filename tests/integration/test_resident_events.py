"""Events never stop serving (docs/contract.md §11.6; issue 16 item 13): with ``--events -`` and a stderr nobody
reads, every command is still answered; event lines that do not fit a bounded buffer are dropped, counted and
reported once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

from resident_harness import ROOT, mock_stdio, stdio_row, write_registry

import bkmcp
from mock_server.mcp_mock import DEFAULT_TOOLS

WAIT = 120.0  # a hard safety net, never a performance threshold


def test_a_stderr_nobody_reads_never_stops_serving(tmp_path):
    reg = tmp_path / "registry.db"  # one stdio child: 1 500 calls on one pipe, no connection storm on a mock
    write_registry(str(reg), [stdio_row("pub", mock_stdio({"tools": DEFAULT_TOOLS}), isolation="public")])
    count = 1500
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
    argv = [sys.executable, str(ROOT / "bkmcp.py"), "--resident", "--registry", str(reg), "--events", "-"]
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
        for line in lines:  # stderr is never read while the commands run: its pipe fills after ~400 events
            proc.stdin.write((line + "\n").encode())  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        reader.join(WAIT)
        assert len(answers) == count, f"{len(answers)} of {count} answered"
        assert [a for a in answers if a["success"] is not True][:3] == []
        proc.stdin.close()  # type: ignore[union-attr]
        err = proc.stderr.read().decode()  # type: ignore[union-attr]  # now read: the buffered events come out
        assert proc.wait(WAIT) == 0
        events = [json.loads(line) for line in err.splitlines() if line.startswith('{"ts"')]
        started = [e for e in events if e["event"] == "tool.started"]
        dropped = sum(e["count"] for e in events if e["event"] == "events.dropped")
        # 3 000 lines fit the buffer; what the exit's bounded wait for a slow reader leaves unwritten is not counted
        assert 0 < len(started) <= count and dropped == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


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
    while sink._backlog and time.monotonic() < end:  # the writer thread empties the buffer as the pipe drains
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
