"""Prefetch in the process runtime: a busy worker holds runs given ahead,
and every exactness rule still holds (see procsched/_runtime/_engine.py,
"Prefetch", and the ticket pipe in _dispatcher.py's ProcessCarrier).

One worker and a run blocked on a FIFO make the queue observable: the runs
submitted next are given ahead to that worker (``stats()["workers"][i]
["queued"]``) and cannot start until the test releases the FIFO.
"""

from __future__ import annotations

import os

import prefetch_tasks as pt
import pytest
from prefetch_helpers import until_stats
from rt_helpers import Waiter, release

from procsched import TaskState, TaskTimeoutError, WorkerCrashedError

DEPTH = 2


@pytest.fixture(autouse=True)
def _depth(monkeypatch):
    monkeypatch.setenv("PROCSCHED_PREFETCH", str(DEPTH))  # pinned: the tests count the runs given ahead


def _queued_is(n, slot=0):
    return lambda stats: stats["workers"][slot]["queued"] == n


def _queued(s, slot=0):
    return s.stats()["workers"][slot]["queued"]


def _blocked(make_scheduler, fifo, workers=1, fn=pt.gate, **kwargs):
    s = make_scheduler(workers, **kwargs)
    waiter = Waiter(s)
    blocker = s.submit(fn, fifo)
    waiter.until(lambda: blocker.state is TaskState.RUNNING)
    return s, waiter, blocker


def test_runs_are_given_ahead_only_as_deep_as_the_prefetch(make_scheduler, fifo, tmp_path):
    out = str(tmp_path / "marks")
    s, waiter, blocker = _blocked(make_scheduler, fifo)
    handles = [s.submit(pt.mark, out, f"r{i}") for i in range(5)]
    until_stats(s, _queued_is(DEPTH))
    assert s.stats()["pending"] == 5 + 1  # the queued runs are not started: still counted pending by the core
    release(fifo)
    assert [h.result(30) for h in handles] == [f"r{i}" for i in range(5)]
    assert pt.marks(out) == [f"r{i}" for i in range(5)]  # in submission order


def test_a_cancelled_queued_run_never_starts_and_the_cancel_is_answered_while_the_worker_is_busy(
    make_scheduler, fifo, tmp_path
):
    out = str(tmp_path / "marks")
    s, waiter, blocker = _blocked(make_scheduler, fifo)
    a, b, c = (s.submit(pt.mark, out, tag) for tag in "abc")
    until_stats(s, _queued_is(DEPTH))  # a and b given ahead; c in the core
    assert b.cancel() is True  # the blocker still runs: answered by the ticket, not the worker
    assert a.cancel() is True
    assert c.cancel() is True
    assert _queued(s) == 0
    release(fifo)
    assert blocker.result(30) == "go"
    for h in (a, b, c):
        assert h.state is TaskState.CANCELLED
    d = s.submit(pt.mark, out, "d")  # the worker passed over the revoked runs and takes new ones
    assert d.result(30) == "d"
    assert pt.marks(out) == ["d"]
    assert s.stats()["outcomes"]["cancelled"] == 0  # never started: not a run, a cancelled task


def test_a_cancelled_periodic_task_queued_never_starts_again(make_scheduler, fifo, tmp_path):
    out = str(tmp_path / "marks")
    s, waiter, blocker = _blocked(make_scheduler, fifo)
    tick = s.schedule_at_fixed_rate(pt.mark, 0.001, args=(out, "tick"))
    until_stats(s, _queued_is(1))  # its first run is given ahead
    assert tick.cancel() is True
    release(fifo)
    blocker.result(30)
    assert s.submit(pt.mark, out, "after").result(30) == "after"
    assert pt.marks(out) == ["after"]


def test_a_higher_priority_run_is_never_passed_by_runs_given_ahead(make_scheduler, fifo, tmp_path):
    out = str(tmp_path / "marks")
    s, waiter, blocker = _blocked(make_scheduler, fifo)
    lows = [s.submit(pt.mark, out, f"low{i}") for i in range(3)]
    until_stats(s, _queued_is(DEPTH))
    high = s.schedule(pt.mark, args=(out, "high"), priority=5)
    assert _queued(s) == 0  # revoked as the first task with another priority came in
    release(fifo)
    high.result(30)
    for h in lows:
        h.result(30)
    assert pt.marks(out) == ["high", "low0", "low1", "low2"]
    # Once no task with another priority is left, runs are given ahead again.
    s2_blocker = s.submit(pt.gate, fifo)
    waiter.until(lambda: s2_blocker.state is TaskState.RUNNING)
    more = [s.submit(pt.mark, out, f"m{i}") for i in range(3)]
    until_stats(s, _queued_is(DEPTH))
    release(fifo)
    for h in more:
        h.result(30)


def test_a_low_priority_task_does_not_pass_queued_runs_either(make_scheduler, fifo, tmp_path):
    out = str(tmp_path / "marks")
    s, waiter, blocker = _blocked(make_scheduler, fifo)
    normal = [s.submit(pt.mark, out, f"n{i}") for i in range(2)]
    until_stats(s, _queued_is(DEPTH))
    low = s.schedule(pt.mark, args=(out, "low"), priority=-5)
    release(fifo)
    low.result(30)
    for h in normal:
        h.result(30)
    assert pt.marks(out) == ["n0", "n1", "low"]


def test_a_crash_costs_only_the_running_run_and_queued_runs_go_back_untouched(make_scheduler, fifo, tmp_path):
    out = str(tmp_path / "marks")
    s, waiter, blocker = _blocked(make_scheduler, fifo, fn=pt.gate_then_exit)
    dead = s.stats()["workers"][0]["pid"]
    a, b = s.submit(pt.mark, out, "a"), s.submit(pt.mark, out, "b")
    until_stats(s, _queued_is(DEPTH))
    release(fifo)
    assert isinstance(blocker.exception(30), WorkerCrashedError)
    assert (a.result(30), b.result(30)) == ("a", "b")
    assert [[r.run for r in h.runs] for h in (a, b)] == [[1], [1]]
    with open(out) as f:
        pids = {int(line.split()[1]) for line in f}
    assert dead not in pids and len(pids) == 1  # both ran, once, on the replacement
    assert s.stats()["outcomes"] == {"ok": 2, "error": 0, "crashed": 1, "timeout": 0, "cancelled": 0}


def test_an_idle_worker_takes_over_runs_queued_behind_a_long_one(make_scheduler, fifo, tmp_path):
    out = str(tmp_path / "marks")
    s, waiter, blocker = _blocked(make_scheduler, fifo, workers=2)
    handles = [s.submit(pt.mark, out, f"r{i}", 0.05) for i in range(8)]
    for h in handles:  # all done while the blocker still holds its worker
        h.result(30)
    assert blocker.state is TaskState.RUNNING
    release(fifo)
    blocker.result(30)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_queued_run_s_timeout_counts_from_its_real_start(make_scheduler, tmp_path):
    out = str(tmp_path / "marks")
    s = make_scheduler(1)
    s.submit(pt.mark, out, "warm").result(30)
    first = s.submit(pt.mark, out, "first", 1.5)
    fits = s.schedule(pt.mark, args=(out, "fits", 0.2), timeout=1.0)  # 1.7 s after it was given, 0.2 s of its own
    overruns = s.schedule(pt.mark, args=(out, "overruns", 5.0), timeout=0.5)
    until_stats(s, _queued_is(2))
    assert first.result(30) == "first"
    assert fits.result(30) == "fits"
    assert isinstance(overruns.exception(30), TaskTimeoutError)


def test_max_tasks_per_worker_is_kept_with_runs_given_ahead(make_scheduler, tmp_path):
    out = str(tmp_path / "marks")
    s = make_scheduler(1, max_tasks_per_worker=3)
    handles = [s.submit(pt.mark, out, f"r{i}") for i in range(20)]
    for h in handles:
        h.result(30)
    with open(out) as f:
        pids = [int(line.split()[1]) for line in f]
    assert len(pids) == 20
    assert max(pids.count(p) for p in set(pids)) <= 3


def test_no_runs_are_given_ahead_with_a_memory_limit(make_scheduler, fifo, tmp_path):
    out = str(tmp_path / "marks")
    s, waiter, blocker = _blocked(make_scheduler, fifo, max_worker_memory=1 << 40)
    handles = [s.submit(pt.mark, out, f"r{i}") for i in range(3)]
    s.stats()  # (a turn of the dispatcher later)
    assert _queued(s) == 0
    release(fifo)
    for h in handles:
        h.result(30)


def test_shutdown_with_cancel_futures_cancels_runs_given_ahead(make_scheduler, fifo, tmp_path):
    out = str(tmp_path / "marks")
    s, waiter, blocker = _blocked(make_scheduler, fifo)
    handles = [s.submit(pt.mark, out, f"r{i}") for i in range(3)]
    until_stats(s, _queued_is(DEPTH))
    s.shutdown(wait=False, cancel_futures=True)
    # the dispatcher takes them back while the blocker runs (released first,
    # its worker could take the next one's ticket: a started run is not cancelled)
    waiter.until(lambda: all(h.state is TaskState.CANCELLED for h in handles))
    release(fifo)
    s.shutdown(wait=True)
    assert all(h.state is TaskState.CANCELLED for h in handles)
    assert not os.path.exists(out)
