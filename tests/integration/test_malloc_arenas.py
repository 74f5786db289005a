"""A long-running bkmcp process caps glibc's malloc arenas (``limit_malloc_arenas``; docs/resident.md, soak).

Fresh interpreters: the cap is process-wide, and the test process must keep glibc's default for the control run.
"""

from __future__ import annotations

import io
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from resident_harness import write_registry

import bkmcp
from tests.helpers import resident_options

ROOT = Path(__file__).resolve().parents[2]

# 16 threads allocate at once outside the GIL (zlib's state), then glibc's malloc_info names every arena (<heap nr=N>)
_ARENAS = r"""
import ctypes, os, sys, tempfile, threading, zlib
sys.path.insert(0, sys.argv[1])
if sys.argv[2] == "limit":
    import bkmcp
    print(bkmcp.limit_malloc_arenas())
data = os.urandom(1 << 20) * 4
def work():
    for _ in range(4):
        c = zlib.compressobj(9); c.compress(data); c.flush()
threads = [threading.Thread(target=work) for _ in range(16)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
fd, path = tempfile.mkstemp()
os.close(fd)
fp = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, ctypes.c_void_p(fp))
libc.fclose(ctypes.c_void_p(fp))
print(open(path).read().count("<heap nr="))
os.unlink(path)
"""

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only"
)


def _probe(program: str, mode: str, **env: str) -> list[str]:
    """What ``program`` prints in a fresh interpreter, with no malloc tuning from this environment but ``env``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | env
    run = subprocess.run(
        [sys.executable, "-c", program, str(ROOT), mode], capture_output=True, text=True, timeout=120, env=environ
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.split()


def _arenas(mode: str, **env: str) -> list[str]:
    return _probe(_ARENAS, mode, **env)


@glibc
def test_the_cap_holds_where_glibcs_default_makes_an_arena_per_busy_thread():
    assert int(_arenas("default")[-1]) > 2  # the control: this load does make arenas of its own
    assert _arenas("limit") == ["True", "2"]


@glibc
def test_an_operators_malloc_arena_max_wins():
    assert _arenas("limit", MALLOC_ARENA_MAX="4")[0] == "False"


def test_the_resident_and_the_warm_process_cap_them(tmp_path, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(bkmcp, "limit_malloc_arenas", lambda: calls.append("capped") or True)
    write_registry(str(tmp_path / "r.db"), [])
    opts = resident_options(str(tmp_path / "r.db"))
    log = bkmcp.Log(io.StringIO())
    assert (
        bkmcp.run_resident(opts, stdin=io.BytesIO(b""), stdout=io.BytesIO(), log=log, env={}, stderr=io.StringIO()) == 0
    )
    assert calls == ["capped"]
    monkeypatch.setattr(bkmcp, "WarmServer", lambda place, artifact, log: type("S", (), {"serve": lambda self: 0})())
    place = tmp_path / "warm"
    place.mkdir(mode=0o700)
    here = os.getcwd()
    fd = os.open(place, os.O_RDONLY | os.O_DIRECTORY)  # the folder a client hands its background process
    monkeypatch.setattr(bkmcp, "keep_large_blocks_mapped", lambda: calls.append("mapped") or True)
    try:
        assert bkmcp.serve_warm_process(["--keep-alive-daemon", str(place), str(fd)]) == 0
    finally:
        os.chdir(here)
        os.close(fd)
    assert calls == ["capped", "capped", "mapped"]  # the resident: arenas only


# After a 16 MiB block is freed, is an 8 MiB block still given its own mapping? (mallinfo2's hblks counts them.) In a
# thread of its own: a fresh arena, whose heap has no free 8 MiB (the main one keeps what importing bkmcp freed).
_MAPPED = r"""
import ctypes, sys, threading
sys.path.insert(0, sys.argv[1])
import bkmcp
fixed = bkmcp.keep_large_blocks_mapped() if sys.argv[2] == "fixed" else False
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks "
                "fordblks keepcost".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
def measure():
    libc.free(ctypes.c_void_p(libc.malloc(16 << 20)))  # glibc's default now raises its threshold to 16 MiB
    before = libc.mallinfo2().hblks
    block = libc.malloc(8 << 20)
    print(fixed, libc.mallinfo2().hblks - before)
    libc.free(ctypes.c_void_p(block))
thread = threading.Thread(target=measure)
thread.start()
thread.join()
"""


def _mapped(mode: str, **env: str) -> list[str]:
    return _probe(_MAPPED, mode, **env)


@glibc
def test_the_warm_process_keeps_large_blocks_mapped_where_glibc_would_raise_its_threshold():
    """Issue 29 point 7: after a large result glibc's dynamic threshold put the next large blocks into the heap,
    whose fragmentation kept +3 to +36 MB after malloc_trim; a fixed threshold gives each its own mapping."""
    assert _mapped("default") == ["False", "0"]  # the control: glibc put the 8 MiB block in the heap
    assert _mapped("fixed") == ["True", "1"]
    assert _mapped("fixed", MALLOC_MMAP_THRESHOLD_="16777216") == ["False", "0"]  # the operator's value wins
