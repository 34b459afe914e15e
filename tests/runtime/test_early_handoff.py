"""Early hand-off: an idle worker gets a run before its due time and waits
for it itself (see procsched/_runtime/_engine.py, "Early hand-off"). A 5 s
window (PROCSCHED_EARLY_US) and runs due 3 s after a warmed-up scheduler
make "given early, not started yet" last long enough to act on without
racing the clock, even on a loaded machine."""

from __future__ import annotations

import prefetch_tasks as pt
import pytest
from prefetch_helpers import until_stats

from procsched import TaskState


@pytest.fixture(autouse=True)
def _wide_window(monkeypatch):
    monkeypatch.setenv("PROCSCHED_EARLY_US", "5000000")


def _given_early(handle):
    return lambda stats: stats["workers"][0]["task"] == handle.id


def _warm(make_scheduler, out):
    s = make_scheduler(1)
    s.submit(pt.mark, out + ".warm", "warm").result(30)  # up, so the delays below count from a running pool
    return s


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_run_given_early_starts_at_its_due_time_not_before(make_scheduler, tmp_path):
    out = str(tmp_path / "marks")
    s = _warm(make_scheduler, out)
    h = s.schedule(pt.mark, 3, args=(out, "due"))
    until_stats(s, _given_early(h))
    assert pt.marks(out) == []
    assert h.result(30) == "due"
    (run,) = h.runs
    assert run.started_at >= run.scheduled_for


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_run_given_early_and_cancelled_never_starts(make_scheduler, tmp_path):
    out = str(tmp_path / "marks")
    s = _warm(make_scheduler, out)
    h = s.schedule(pt.mark, 3, args=(out, "cancelled"))
    until_stats(s, _given_early(h))
    assert h.cancel() is True
    after = s.schedule(pt.mark, 3.2, args=(out, "after"))
    assert after.result(30) == "after"
    assert h.state is TaskState.CANCELLED
    assert pt.marks(out) == ["after"]


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_periodic_run_given_early_and_cancelled_never_starts(make_scheduler, tmp_path):
    out = str(tmp_path / "marks")
    s = _warm(make_scheduler, out)
    h = s.schedule_at_fixed_rate(pt.mark, 10, args=(out, "tick"), initial_delay=3)
    until_stats(s, _given_early(h))
    assert h.cancel() is True
    assert s.schedule(pt.mark, 3.2, args=(out, "after")).result(30) == "after"
    assert pt.marks(out) == ["after"]


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_run_due_now_does_not_wait_behind_one_given_early(make_scheduler, tmp_path):
    out = str(tmp_path / "marks")
    s = _warm(make_scheduler, out)
    started = []
    s.add_listener(lambda event: started.append((event["task_id"], event["run"])), events=["run_started"])
    later = s.schedule(pt.mark, 3, args=(out, "later"))
    until_stats(s, _given_early(later))  # its run_started has reached the listener
    now = s.submit(pt.mark, out, "now")
    # "later" is taken back; the worker passes over it when its wait for
    # later's due time ends (at most the early window: a bounded delay, not
    # an order change), then runs "now" first.
    assert now.result(30) == "now"
    assert later.result(30) == "later"
    assert pt.marks(out) == ["now", "later"]
    (run,) = later.runs
    assert run.started_at >= run.scheduled_for
    s.shutdown(wait=True)  # every event delivered
    assert started.count((later.id, 1)) == 1  # given again after the take-back: announced once


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_run_that_comes_due_before_one_given_early_is_not_passed_by_it(make_scheduler, tmp_path):
    out = str(tmp_path / "marks")
    s = _warm(make_scheduler, out)
    later = s.schedule(pt.mark, 4, args=(out, "later"))
    until_stats(s, _given_early(later))
    sooner = s.schedule(pt.mark, 2, args=(out, "sooner"))  # the only worker is reserved for "later"
    assert sooner.result(30) == "sooner"
    assert later.result(30) == "later"
    assert pt.marks(out) == ["sooner", "later"]
