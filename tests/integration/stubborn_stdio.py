"""A stdio MCP server that is hard to stop: it ignores SIGTERM, keeps running after EOF on stdin, and (unless
``--alone``) has a descendant that ignores SIGTERM too. Shutdown must still leave nothing behind (contract.md §11.5).

    python stubborn_stdio.py [--alone] [--pidfile PATH] [--delay SECONDS] [mcp_mock.py options...]

``--pidfile`` appends its own pid (its process group: bkmcp starts it as a group leader) once it runs; ``--delay``
waits that long before serving, so the child is still starting (no answer to initialize) meanwhile.
"""

import os
import runpy
import signal
import subprocess
import sys
import time

MOCK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "mock_server", "mcp_mock.py")

signal.signal(signal.SIGTERM, signal.SIG_IGN)
args = sys.argv[1:]
alone = args[:1] == ["--alone"]
if alone:
    args = args[1:]
if args[:1] == ["--pidfile"]:
    with open(args[1], "a") as handle:
        handle.write(f"{os.getpid()}\n")
    args = args[2:]
delay = 0.0
if args[:1] == ["--delay"]:
    delay, args = float(args[1]), args[2:]
if not alone:
    subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
time.sleep(delay)
sys.argv = [MOCK, "--stdio", "--quiet", *args]
_exit = os._exit
os._exit = lambda status: (time.sleep(300), _exit(status))  # type: ignore[assignment]  # the mock leaves on EOF
try:
    runpy.run_path(MOCK, run_name="__main__")
except SystemExit:
    pass
time.sleep(300)
