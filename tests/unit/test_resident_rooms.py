"""The command server's parts on their own (docs/design.md, "Resident mode"; no sockets, no children):
``WorkerPool`` (bounded, reuses idle threads, ends them), ``run_each`` (the one fan-out), ``read_lines`` (the line
reader) and ``InFlight`` (exactly one answer per command)."""

from __future__ import annotations

import io
import threading
import time

import bkmcp

WAIT = 30.0  # a hard safety net, never a performance threshold


def _until(check) -> None:
    end = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < end
        time.sleep(0.005)


def test_worker_pool_reuses_an_idle_thread_caps_the_idle_ones_and_stops_them():
    done: list[int] = []
    gate = threading.Event()

    def run(job: int) -> None:
        if job < 0:
            gate.wait(WAIT)
        done.append(job)

    pool = bkmcp.WorkerPool(run, limit=8, keep=2, idle_seconds=600.0, name="test-pool")
    assert pool.submit(1)
    _until(lambda: pool.idle == 1)
    first = set(pool.threads)
    for job in (2, 3, 4):  # one after the other: the idle thread takes each
        assert pool.submit(job)
        _until(lambda j=job: j in done and pool.idle == 1)
    assert set(pool.threads) == first
    for job in range(-1, -6, -1):  # five that block at once: they never wait for each other
        assert pool.submit(job)
    _until(lambda: len(pool.threads) == 5)
    gate.set()
    _until(lambda: len([j for j in done if j < 0]) == 5 and pool.idle == 2 and len(pool.threads) == 2)
    pool.stop(wait=WAIT)
    assert pool.threads == set() and pool.idle == 0


def test_an_idle_worker_thread_keeps_no_reference_to_a_job_it_ran():
    """A kept thread lives for hours: a command it ran (a user's arguments and access token) must not
    stay alive with it (soak memory; a secret kept no longer than its command)."""
    import gc
    import weakref

    class Job:
        pass

    job = Job()
    seen = weakref.ref(job)
    pool = bkmcp.WorkerPool(lambda j: None, limit=2, keep=2, idle_seconds=600.0, name="test-pool-first")
    assert pool.submit(job)
    _until(lambda: pool.idle == 1)
    del job
    gc.collect()
    assert seen() is None
    pool.stop(wait=WAIT)


def test_worker_pool_idle_threads_end_after_their_idle_time_and_a_late_job_still_runs():
    done: list[str] = []
    pool = bkmcp.WorkerPool(done.append, limit=4, keep=4, idle_seconds=0.01, name="test-pool")
    for i in range(200):  # submits racing with threads that time out: every job runs exactly once
        assert pool.submit(f"j{i}")
        if i % 7 == 0:
            time.sleep(0.012)
    _until(lambda: len(done) == 200)
    assert sorted(done) == sorted(f"j{i}" for i in range(200))
    _until(lambda: not pool.threads)
    assert pool.idle == 0


def test_worker_pool_says_when_no_thread_can_start(monkeypatch):
    pool = bkmcp.WorkerPool(lambda job: None, limit=1, keep=1, idle_seconds=1.0, name="test-pool-refused")

    def refuse(thread):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    assert pool.submit("x") is False
    assert pool.threads == set()
    monkeypatch.undo()
    assert pool.submit("y") is True  # the refused job gave its room back
    pool.stop(wait=WAIT)


def test_run_each_runs_every_item_at_once_and_honours_its_deadline():
    started: list[str] = []
    release = threading.Event()

    def job(item: str) -> None:
        started.append(item)
        if item != "a":
            release.wait(WAIT)

    run_thread = threading.Thread(target=bkmcp.run_each, args=(job, ["a", "b", "c"]), kwargs={"timeout": 0.05})
    run_thread.start()
    run_thread.join(WAIT)
    assert not run_thread.is_alive()  # returned at its deadline although b and c still run
    assert sorted(started) == ["a", "b", "c"]
    release.set()
    bkmcp.run_each(job, [])  # nothing to do


def test_read_lines_splits_skips_overlong_lines_and_keeps_a_last_line_without_newline(monkeypatch):
    monkeypatch.setattr(bkmcp, "_READ_CHUNK", 4)
    lines: list[bytes] = []
    skipped: list[bytes] = []
    stream = io.BytesIO(b"one\n" + b"x" * 25 + b"\ntwo\n\n" + b"y" * 11 + b"\nthree")
    bkmcp.read_lines(stream, lines.append, skipped.append, limit=10, stop=threading.Event())
    assert lines == [b"one", b"two", b"", b"three"] and skipped == [b"x" * 12, b"y" * 11]


def test_in_flight_gives_each_command_exactly_one_answer():
    table = bkmcp.InFlight()
    a, b = (
        bkmcp.ResidentCommand("t1", "list_tools", {}, "u", None, bkmcp.Deadline(60.0)),
        bkmcp.ResidentCommand("t1", "list_tools", {}, "u", None, bkmcp.Deadline(60.0)),
    )
    assert table.add(a) and not table.add(b) and "t1" in table
    assert table.claim(a) and not table.claim(a) and "t1" not in table
    assert table.add(b)
    end = time.monotonic() + 0.01
    table.wait(lambda c: end)  # returns at the latest deadline of those left
    table.wait(lambda c: end + WAIT, cut=lambda: True)  # or at once when cut
    assert [c.task_id for c in table.take_all()] == ["t1"] and not table.claim(b)


def test_read_lines_reports_an_endless_line_once_it_passes_the_limit_and_holds_no_more_of_it():
    """A line that never ends (a stdio server flooding stdout) is reported as soon as it is longer than the limit,
    and reading on keeps nothing of it: 100 MiB of one line read with a peak of a few MiB (the limit and a chunk)."""
    import tracemalloc

    stop = threading.Event()
    skipped: list[int] = []
    reads = 0

    class Endless(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def read(self, size: int = -1) -> bytes:
            nonlocal reads
            reads += 1
            if reads == 1600:  # 100 MiB in 64 KiB reads: bounds the test
                stop.set()
            return b"z" * size

    tracemalloc.start()
    try:
        bkmcp.read_lines(Endless(), lambda line: None, lambda head: skipped.append(reads), limit=1 << 20, stop=stop)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert skipped == [17] and reads == 1600  # reported at the read that passed 1 MiB, once
    assert peak < 8 << 20, peak
