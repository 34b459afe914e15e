"""Prefetch with a durable store: runs given ahead to busy workers have their
starts recorded (claimed) in the turn's transaction and are held until it
has committed; every exactness rule of prefetch and of the store holds
(procsched/_runtime/_durable.py, "Prefetch with a store").

Real processes and real SQLite / PostgreSQL; waits are on handles, FIFOs,
scheduler events and the child program's pipe, never a sleep. A write lock
taken on the SQLite file by the test holds the dispatcher's commit in
flight, so runs stay held (claimed, not sent) while the test acts.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import threading

import psutil
import pytest

import procsched
from procsched import TaskState, WorkerCrashedError
from procsched._store import open_store

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import prefetch_jobs as pj  # noqa: E402

from tests.durable.killing import any_store as any_store  # noqa: E402  (sqlite and postgresql)
from tests.durable.killing import check_exact, kill_and_restart  # noqa: E402
from tests.runtime.prefetch_helpers import until_stats  # noqa: E402
from tests.runtime.rt_helpers import Waiter, release  # noqa: E402

DEPTH = 4  # runs given ahead per worker with a store (_durable.STORE_PREFETCH)


@pytest.fixture(autouse=True)
def _depth(monkeypatch):
    monkeypatch.setenv("PROCSCHED_PREFETCH", "2")  # the defaults, stated
    monkeypatch.setenv("PROCSCHED_STORE_PREFETCH", str(DEPTH))


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return str(path)


def _marks(path: str) -> list[tuple[str, int]]:
    try:
        with open(path) as f:
            return [(line.split()[0], int(line.split()[1])) for line in f]
    except FileNotFoundError:
        return []


def _queued(n: int, slot: int = 0):
    return lambda stats: stats["workers"][slot]["queued"] == n


def _write_lock(db: str) -> sqlite3.Connection:
    """Hold the SQLite file's write lock: the dispatcher's next commit waits for it."""
    lock = sqlite3.connect(db, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    return lock


def test_a_cancelled_run_given_ahead_never_starts_and_the_store_records_it_so(tmp_path, fifo):
    db, out = str(tmp_path / "s.db"), str(tmp_path / "marks")
    s = procsched.Scheduler(1, store=db)
    try:
        waiter = Waiter(s)
        blocker = s.submit(pj.gate, fifo)
        waiter.until(lambda: blocker.state is TaskState.RUNNING)
        # Held: given ahead to the busy worker, but the commit that records
        # their starts cannot finish (the test holds the write lock), so they
        # are claimed and never sent. The cancels' answers come once that
        # commit is done (the user hears of a turn after its commit), so they
        # are asked from a thread.
        lock = _write_lock(db)
        d, e = (s.schedule(pj.mark, args=(out, k), key=k) for k in "de")
        answers: dict[str, bool] = {}
        asking = [
            threading.Thread(target=lambda h=h, k=k: answers.update({k: h.cancel()})) for h, k in ((e, "e"), (d, "d"))
        ]
        try:
            for t in asking:
                t.start()
        finally:
            lock.execute("ROLLBACK")  # the commit goes on (SQLite's busy handler retries it)
            lock.close()
        for t in asking:
            t.join(30)
        assert answers == {"d": True, "e": True}
        release(fifo)
        assert blocker.result(30) == "go"
        # Given ahead, their starts committed (the worker holds them, behind the blocker).
        fifo2 = str(tmp_path / "fifo2")
        os.mkfifo(fifo2)
        blocker = s.submit(pj.gate, fifo2)
        waiter.until(lambda: blocker.state is TaskState.RUNNING)
        a, b, c = (s.schedule(pj.mark, args=(out, k), key=k) for k in "abc")
        until_stats(s, _queued(3))
        assert b.cancel() is True and a.cancel() is True and c.cancel() is True
        assert s.stats()["workers"][0]["queued"] == 0
        release(fifo2)
        assert blocker.result(30) == "go"
        for h in (a, b, c, d, e):
            assert h.state is TaskState.CANCELLED
        f = s.schedule(pj.mark, args=(out, "f"), key="f")
        assert f.result(30) == "f"  # the worker passed over what was taken back and goes on
        assert s.stats()["outcomes"]["cancelled"] == 0  # never started: cancelled tasks, not runs
    finally:
        s.shutdown(wait=True, cancel_futures=True)
    assert [tag for tag, _ in _marks(out)] == ["f"]
    store = open_store(db)
    try:
        for key in "abcde":
            runs = store.history(key)
            # A run whose start was recorded is recorded cancelled, never left in flight;
            # one taken back before its start was written has no record at all.
            assert [(r.run, r.outcome) for r in runs] in ([], [(1, "cancelled")]), (key, runs)
            assert store.get(key) is None  # cancelled: gone from the live set
        for key in "abc":  # given ahead (queued): recorded started, then cancelled
            assert [(r.run, r.outcome) for r in store.history(key)] == [(1, "cancelled")], key
        assert [(r.run, r.outcome) for r in store.history("f")] == [(1, "ok")]
    finally:
        store.close()


def test_a_worker_killed_with_runs_queued_crashes_only_its_run_the_queued_ones_run_once(tmp_path, fifo):
    db, out = str(tmp_path / "s.db"), str(tmp_path / "marks")
    fifo2 = str(tmp_path / "fifo2")
    os.mkfifo(fifo2)
    s = procsched.Scheduler(1, store=db)
    dead = []
    try:
        waiter = Waiter(s)
        # 1. Queued on a blocked worker, their starts committed and sent (the ticket path).
        blocker = s.schedule(pj.gate, args=(fifo,), key="blocker")
        waiter.until(lambda: blocker.state is TaskState.RUNNING)
        dead.append(s.stats()["workers"][0]["pid"])
        a, b = (s.schedule(pj.mark, args=(out, k), key=k) for k in "ab")
        until_stats(s, _queued(2))
        os.kill(dead[0], signal.SIGKILL)
        assert isinstance(blocker.exception(30), WorkerCrashedError)
        assert [h.result(30) for h in (a, b)] == ["a", "b"]
        # 2. Held: their starts' commit waits for the test's write lock while the worker dies.
        blocker2 = s.schedule(pj.gate, args=(fifo2,), key="blocker2")
        waiter.until(lambda: blocker2.state is TaskState.RUNNING)
        dead.append(s.stats()["workers"][0]["pid"])
        lock = _write_lock(db)
        c, d = (s.schedule(pj.mark, args=(out, k), key=k) for k in "cd")
        worker = psutil.Process(dead[1])
        try:
            os.kill(dead[1], signal.SIGKILL)
            psutil.wait_procs([worker], timeout=30)  # gone: reaped by the dispatcher, its crash handled
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        assert isinstance(blocker2.exception(30), WorkerCrashedError)
        assert [h.result(30) for h in (c, d)] == ["c", "d"]
        assert s.stats()["outcomes"] == {"ok": 4, "error": 0, "crashed": 2, "timeout": 0, "cancelled": 0}
    finally:
        s.shutdown(wait=True, cancel_futures=True)
    ran = _marks(out)
    assert sorted(tag for tag, _ in ran) == ["a", "b", "c", "d"]  # each once
    on = dict(ran)
    assert dead[0] not in (on["a"], on["b"]) and dead[1] not in (on["c"], on["d"])  # on the replacements
    store = open_store(db)
    try:
        for key in ("blocker", "blocker2"):
            assert [(r.run, r.outcome) for r in store.history(key)] == [(1, "crashed")], key
        for key in "abcd":  # recorded once: one run row, ended ok
            assert [(r.run, r.attempt, r.outcome) for r in store.history(key)] == [(1, 1, "ok")], key
    finally:
        store.close()


# -- the user process SIGKILLed while runs are given ahead ---------------------------


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigkill_while_runs_are_given_ahead_loses_nothing_runs_nothing_twice(tmp_path, any_store):
    out = str(tmp_path / "out")
    kill_and_restart("prefetch_child.py", any_store, out, most_lines=40, last_lines=12)
    crashed = sum(check_exact(any_store, out, f"t{i}", 12_000, retried=bool(i % 2)) for i in range(6))
    assert crashed  # the kills hit runs in flight
