"""A stdio MCP server that is hard to stop: it ignores SIGTERM, keeps running after EOF on stdin, and (unless
``--alone``) has a descendant that ignores SIGTERM too. Shutdown must still leave nothing behind (contract.md §11.5).

    python stubborn_stdio.py [--alone] [mcp_mock.py options...]
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
if args[:1] == ["--alone"]:
    args = args[1:]
else:
    subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
sys.argv = [MOCK, "--stdio", "--quiet", *args]
_exit = os._exit
os._exit = lambda status: (time.sleep(300), _exit(status))  # type: ignore[assignment]  # the mock leaves on EOF
try:
    runpy.run_path(MOCK, run_name="__main__")
except SystemExit:
    pass
time.sleep(300)
