"""A stdio MCP server that is hard to stop: it ignores SIGTERM and SIGHUP, keeps running after EOF on stdin, and
(unless ``--alone``) has a descendant that ignores them too. Shutdown must still leave nothing behind (contract.md
§11.5), and so must SIGKILL of bkmcp (§14).

    python stubborn_stdio.py [--alone] [--tree PATH] [--pidfile PATH] [--delay SECONDS] [mcp_mock.py options...]

``--tree`` appends its own pid and, from the descendant itself, the descendant's; ``--pidfile`` appends its own pid
(its process group: bkmcp starts it as a group leader) once it runs; ``--delay`` waits that long before serving, so
the child is still starting (no answer to initialize) meanwhile.
"""

import os
import runpy
import signal
import subprocess
import sys
import time

MOCK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "mock_server", "mcp_mock.py")

signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
args = sys.argv[1:]
alone = args[:1] == ["--alone"]
if alone:
    args = args[1:]
tree = None
if args[:1] == ["--tree"]:
    tree, args = args[1], args[2:]
    with open(tree, "a") as handle:
        handle.write(f"{os.getpid()}\n")
if args[:1] == ["--pidfile"]:
    with open(args[1], "a") as handle:
        handle.write(f"{os.getpid()}\n")
    args = args[2:]
delay = 0.0
if args[:1] == ["--delay"]:
    delay, args = float(args[1]), args[2:]
if not alone:
    descendant = (
        "import os, signal, sys, time\nfor s in (signal.SIGTERM, signal.SIGHUP): signal.signal(s, signal.SIG_IGN)\n"
    )
    if tree is not None:
        descendant += "open(sys.argv[1], 'a').write(f'{os.getpid()}\\n')\n"
    subprocess.Popen(
        [sys.executable, "-c", descendant + "time.sleep(300)", *([tree] if tree else [])],
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
