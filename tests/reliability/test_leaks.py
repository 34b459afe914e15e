"""Resource leaks: hundreds of worker replacements leave the dispatcher as
it was - its open file descriptors, its threads and its memory - and a
Scheduler's whole life leaves no temporary files behind."""

from __future__ import annotations

import concurrent.futures
import os
import tempfile

import pytest
import rel_tasks
from rel_helpers import dispatcher, pool_whole, wait_until

import procsched

REPLACEMENTS = 500  # a leak of one fd or thread per replacement shows 500-fold; RSS: > 8 KiB each
MiB = 1 << 20


def _snapshot(proc):
    return {"fds": proc.num_fds(), "threads": proc.num_threads(), "rss": proc.memory_info().rss}


def _run_all(s, fn, n, *args):
    handles = [s.submit(fn, *args) for _ in range(n)]
    done, not_done = concurrent.futures.wait(handles, timeout=300)
    assert not not_done
    return handles


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["recycled", "crashed"])
def test_worker_replacements_leak_nothing_in_the_dispatcher(new_scheduler, how):
    """``recycled``: max_tasks_per_worker=1 retires a worker after every run.
    ``crashed``: every other run kills its worker (os._exit), every other one
    succeeds, so respawns never back off for long."""
    s = new_scheduler(2, max_tasks_per_worker=1 if how == "recycled" else None)
    proc = dispatcher(s)

    def replace(n):
        if how == "recycled":
            _run_all(s, rel_tasks.nothing, n)
        else:
            for _ in range(n // 2):
                crash = s.submit(rel_tasks.exit_hard, 3)
                ok = s.submit(rel_tasks.nothing)
                concurrent.futures.wait([crash, ok], timeout=60)
                assert isinstance(crash.exception(), procsched.WorkerCrashedError)
                assert ok.exception() is None
        wait_until(lambda: pool_whole(s), 15, "a whole pool")

    replace(100)  # warm up: lazy imports, allocator pools, the forkserver
    before = _snapshot(proc)
    spawned0 = s.stats()["spawned"]
    replace(REPLACEMENTS)
    after = _snapshot(proc)
    stats = s.stats()
    replaced = stats["spawned"] - spawned0
    print(f"\n{how}: {replaced} replacements; dispatcher before {before}, after {after}")
    assert replaced >= REPLACEMENTS * 0.95 if how == "recycled" else replaced >= REPLACEMENTS // 2
    # A worker still being retired at either snapshot holds its 4 fds (its
    # pipe, both ends of its ticket pipe, its sentinel): one worker's worth of
    # slack; a leak grows with the 500 replacements.
    assert after["fds"] <= before["fds"] + 4, (before, after)
    assert after["threads"] <= before["threads"], (before, after)
    assert after["rss"] - before["rss"] < 4 * MiB, (before, after)


@pytest.mark.timeout(60)
def test_a_scheduler_leaves_no_temporary_files(tmp_path, monkeypatch):
    """The dispatcher's multiprocessing temp dir (the forkserver's socket)
    is removed when it exits."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    tempfile.tempdir = None  # re-read TMPDIR here too
    try:
        with procsched.Scheduler(2) as s:
            assert s.submit(rel_tasks.hello, 1).result(timeout=30).startswith("hello 1 ")
        assert os.listdir(tmp_path) == []
    finally:
        tempfile.tempdir = None
