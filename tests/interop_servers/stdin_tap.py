#!/usr/bin/env python3
"""``python stdin_tap.py SCRIPT [ARG...]``: run a Python stdio server SCRIPT as ``__main__`` with its ``sys.stdin``
reading file descriptor 0 through a tap that appends every chunk the server reads to ``$BKMCP_STDIN_TAP``.

The tap reads only when the server reads (a chunk of at most what the server's buffer asks for), so the client
sees the server's own reading (bkmcp's probe window watches exactly that). The tapped stdin has no ``fileno()``, so a
server that would claim descriptor 0 itself (mcp 2.x's stdio_server) reads through the tap. Stdlib only, Python 3.9+.
"""

from __future__ import annotations

import io
import os
import runpy
import sys


class _TappedStdin(io.RawIOBase):
    def __init__(self, log: io.BufferedWriter) -> None:
        self._log = log

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        data = os.read(0, len(buffer))
        buffer[: len(data)] = data
        self._log.write(data)
        self._log.flush()
        return len(data)


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: stdin_tap.py SCRIPT [ARG...]")
    log = open(os.environ["BKMCP_STDIN_TAP"], "ab")  # noqa: SIM115 - open for the server's whole life
    sys.stdin = io.TextIOWrapper(io.BufferedReader(_TappedStdin(log)), encoding="utf-8")
    sys.argv = list(argv)
    runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
