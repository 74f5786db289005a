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


def _arenas(mode: str, **env: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env
    run = subprocess.run(
        [sys.executable, "-c", _ARENAS, str(ROOT), mode], capture_output=True, text=True, timeout=120, env=environ
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.split()


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
    try:
        assert bkmcp.serve_warm_process(["--keep-alive-daemon", str(place), str(fd)]) == 0
    finally:
        os.chdir(here)
        os.close(fd)
    assert calls == ["capped", "capped"]
