"""Progress of long calls on stderr (contract §5, issue 11 item 5), section 2: ``render_progress``, the terminal line
of ``Log.progress``/``Log.progress_end`` and ``ProgressLine`` (token filtering, elapsed seconds). No I/O: the
terminal is a StringIO that says it is a TTY."""

from __future__ import annotations

import io

import pytest

import bkmcp
from bkmcp import JsonNumber, Log, ProgressLine, parse_json, render_progress


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    "params, expected",
    [
        ({"progress": 3, "total": 10, "message": "copying"}, "progress 3/10: copying (1.5s)"),
        ({"progress": 3}, "progress 3 (1.5s)"),
        ({"progress": 0.25, "total": 1}, "progress 0.25/1 (1.5s)"),
        ({"progress": 1, "total": 2, "message": "   "}, "progress 1/2 (1.5s)"),
        ({"progress": 1, "message": "a\x1b[2J\rb\x9bc\u2028d\n"}, "progress 1: a [2J b c d (1.5s)"),
        ({"progress": 1, "message": "m" * 300}, "progress 1: " + "m" * 199 + "… (1.5s)"),
        ({"progress": 10**40}, "progress 1e30+ (1.5s)"),
        ({"progress": 1, "total": "ten"}, "progress 1 (1.5s)"),
        ({"progress": 1, "total": True}, "progress 1 (1.5s)"),
    ],
)
def test_render_progress(params, expected):
    assert render_progress(params, 1.5) == expected


def test_render_progress_keeps_the_exact_number_text():
    params = parse_json('{"progress": 0.1, "total": 1e400}', strict_keys=False)
    assert isinstance(params["progress"], JsonNumber)
    assert render_progress(params, 0.04) == "progress 0.1/1e400 (0.0s)"


@pytest.mark.parametrize("progress", [None, "3", True, [1], {"a": 1}])
def test_a_notification_without_a_numeric_progress_is_not_rendered(progress):
    assert render_progress({"progress": progress, "total": 3}, 0.0) is None


def test_terminal_line_updates_in_place_and_ends_with_a_newline():
    stream = Tty()
    log = Log(stream)
    log.progress("progress 1/3 (0.1s)")
    log.progress("progress 2/3 (0.2s)")
    assert stream.getvalue() == "\rbkmcp: progress 1/3 (0.1s)\x1b[K\rbkmcp: progress 2/3 (0.2s)\x1b[K"
    log.warn("slow server")  # another line first clears the progress line
    log.progress("progress 3/3 (0.3s)")
    log.progress_end()
    log.progress_end()  # a second end writes nothing
    assert stream.getvalue().endswith("\x1b[K\r\x1b[Kbkmcp: warning: slow server\n\rbkmcp: progress 3/3 (0.3s)\x1b[K\n")


def test_terminal_line_is_scrubbed_then_clipped_to_the_width():
    stream = Tty()  # no fileno: the width is taken as 80 columns
    log = Log(stream)
    log.redactor.add("hunter2-secret")
    log.progress("progress 1: token hunter2-secret " + "x" * 200)
    line = stream.getvalue()
    assert "hunter2" not in line and "***" in line
    assert line.startswith("\r") and line.endswith("\x1b[K") and len(line) == 1 + 79 + 3


def test_terminal_width_from_the_real_terminal(tmp_path):
    import fcntl
    import os
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 40, 0, 0))
        with os.fdopen(os.dup(slave), "w", encoding="utf-8") as stream:
            log = Log(stream)
            assert log.is_tty
            log.progress("progress 1: " + "y" * 100)
            log.progress_end()
        out = os.read(master, 4096).decode()
        import select

        # the line discipline may hand the bytes over in more than one read (a guard, not a timing assertion)
        while not out.endswith("\n") and select.select([master], [], [], 10)[0]:
            out += os.read(master, 4096).decode()
    finally:
        os.close(master)
        os.close(slave)
    assert out.startswith("\rbkmcp: progress 1: yyy") and out.endswith("\x1b[K\r\n")  # the tty maps \n to \r\n
    assert len(out) == 1 + 39 + 3 + 2


def test_without_a_terminal_progress_is_plain_lines_with_verbose_only():
    quiet = Log(io.StringIO())
    quiet.progress("progress 1/2 (0.1s)")
    quiet.progress_end()
    assert quiet.stream.getvalue() == ""
    verbose = Log(io.StringIO(), verbose=True)
    verbose.progress("progress 1/2 (0.1s)")
    verbose.progress("progress 2/2 (0.2s)")
    verbose.progress_end()
    assert verbose.stream.getvalue() == "bkmcp: progress 1/2 (0.1s)\nbkmcp: progress 2/2 (0.2s)\n"


def test_progress_line_shows_only_its_token_with_the_elapsed_time():
    clock = Clock()
    log = Log(io.StringIO(), verbose=True)
    line = ProgressLine(log, "bkmcp-7", clock=clock)
    clock.now += 2.25
    assert line.update({"progressToken": "bkmcp-7", "progress": 1, "total": 4, "message": "one"}) is True
    assert line.update({"progressToken": "other", "progress": 2}) is False
    assert line.update({"progress": 2}) is False
    assert line.update({"progressToken": "bkmcp-7", "progress": "bad"}) is False
    clock.now += 1.0
    assert line.update({"progressToken": "bkmcp-7", "progress": 4, "total": 4}) is True
    line.end()
    assert log.stream.getvalue() == "bkmcp: progress 1/4: one (2.2s)\nbkmcp: progress 4/4 (3.2s)\n"
    assert line.shown == 2


def test_a_closed_terminal_never_fails_the_command():
    class Broken(Tty):
        def write(self, text: str) -> int:
            raise OSError("gone")

    log = Log(Broken())
    log.progress("progress 1")
    log._line_open = True
    log.progress_end()  # swallowed
    assert bkmcp.terminal_safe("a\x07b") == "a b"
