"""A stdio MCP server that counts its live peers: on start it appends its pid to ``PIDS`` (under ``flock``) and
records there how many processes of this program listed in it run now, itself included; at EOF on stdin it
lingers ``--linger`` seconds before exiting, as a server that saves its state does. The largest count is what the
resident's limits must bound (docs/contract.md §11.5), told by the servers themselves.

    python counted_stdio.py PIDS [--linger SECONDS] [mcp_mock.py options...]
"""

import fcntl
import os
import runpy
import sys
import time

MOCK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "mock_server", "mcp_mock.py")


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            if handle.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                return False
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return b"counted_stdio" in handle.read()
    except (OSError, IndexError):
        return False


path, args = sys.argv[1], sys.argv[2:]
linger = 0.0
if args[:1] == ["--linger"]:
    linger, args = float(args[1]), args[2:]
with open(path, "a+") as handle:
    fcntl.flock(handle, fcntl.LOCK_EX)
    handle.seek(0)
    pids = [int(line.split()[0]) for line in handle.read().splitlines()]
    live = 1 + sum(1 for pid in pids if running(pid))
    handle.write(f"{os.getpid()} {live}\n")
sys.argv = [MOCK, "--stdio", "--quiet", *args]
_exit = os._exit
os._exit = lambda status: (time.sleep(linger), _exit(status))  # type: ignore[assignment]  # the mock leaves on EOF
runpy.run_path(MOCK, run_name="__main__")
