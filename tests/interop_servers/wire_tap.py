#!/usr/bin/env python3
"""Record what a client writes to a stdio server: ``python wire_tap.py [--delay SECONDS] LOG COMMAND [ARG...]``.

Runs COMMAND with its stdout and stderr inherited (the server speaks to the client directly) and copies each line
the client writes into COMMAND's stdin, appending it to LOG first (flushed per line). Tests read LOG to assert what
a third-party server received. With ``--delay`` nothing is read from stdin for SECONDS: to the client the server
is slow to start (what it wrote waits in the pipe, unread, as for @bytebase/dbhub connecting its database first on
a loaded machine). Stdlib only, Python 3.9+. SIGTERM/SIGINT are passed on to COMMAND.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time


def main(argv: list[str]) -> int:
    delay = 0.0
    if argv[:1] == ["--delay"] and len(argv) > 1:
        delay, argv = float(argv[1]), argv[2:]
    if len(argv) < 2:
        print("usage: wire_tap.py [--delay SECONDS] LOG COMMAND [ARG...]", file=sys.stderr)
        return 2
    child = subprocess.Popen(argv[1:], stdin=subprocess.PIPE)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda num, _frame: child.send_signal(num))

    def copy() -> None:
        assert child.stdin is not None
        time.sleep(delay)
        with open(argv[0], "ab") as log:
            for line in sys.stdin.buffer:
                log.write(line)
                log.flush()
                try:
                    child.stdin.write(line)
                    child.stdin.flush()
                except OSError:
                    break
        try:
            child.stdin.close()
        except OSError:
            pass

    threading.Thread(target=copy, daemon=True).start()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
