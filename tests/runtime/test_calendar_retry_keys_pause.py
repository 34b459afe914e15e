"""Calendars, retries, limits, keys and pause on the real runtimes (processes, threads).

The DST rules and the slot arithmetic are tested in tests/core on a
ManualClock; here: the plumbing (facade -> dispatcher -> core -> worker and
back), the worker's retry-class check, and the wall-clock watch.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime, timedelta

import pytest
import rt_tasks
from rt_helpers import Waiter

from procsched import Retry, TaskState

pytestmark = pytest.mark.timeout(60)


def lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [tuple(map(int, line.split())) for line in f]


def test_cron_every_second_with_max_runs(make_scheduler, runner) -> None:
    s = make_scheduler(2, runner=runner)
    handle = s.schedule_cron(rt_tasks.square, "* * * * * *", args=(4,), max_runs=3, key="tick", tz="UTC")
    assert handle.key == "tick" and s.get("tick") is handle and s.get(handle.id) is handle
    first = handle.next_run_at
    assert first is not None and first.tzinfo is not None and first.microsecond == 0
    assert timedelta(0) < first - datetime.now(UTC) <= timedelta(seconds=1)
    assert handle.result(30) is None  # a periodic task that reached max_runs ends DONE with None
    assert handle.state is TaskState.DONE
    assert [r.run for r in handle.runs] == [1, 2, 3]
    slots = [r.scheduled_at for r in handle.runs]
    assert slots[0] == first
    assert [(b - a).total_seconds() for a, b in zip(slots, slots[1:])] == [1.0, 1.0]
    assert all(r.scheduled_at.microsecond == 0 and r.attempt == 1 for r in handle.runs)
    assert s.get("tick") is None and handle not in s.jobs()


def test_retry_on_an_exception_class_decided_in_the_worker(make_scheduler, runner, tmp_path) -> None:
    s = make_scheduler(2, runner=runner)
    path = str(tmp_path / "attempts")
    retry = Retry(attempts=3, delay=0.05, on=(rt_tasks.Flaky,))
    handle = s.schedule(rt_tasks.fail_until, args=(path, 2), retry=retry)
    assert handle.result(30) == 3
    assert [(r.run, r.attempt, r.outcome) for r in handle.runs] == [(1, 1, "error"), (1, 2, "error"), (1, 3, "ok")]
    assert lines(path) == [(1, 1), (1, 2), (1, 3)]
    # An exception class not in `on` is not retried: one attempt, the task fails.
    other = s.schedule(rt_tasks.fail_until, args=(str(tmp_path / "other"), 5, "KeyError"), retry=retry)
    with pytest.raises(KeyError):
        other.result(30)
    assert [r.attempt for r in other.runs] == [1]


def test_retry_gives_up_after_its_last_attempt(make_scheduler, runner, tmp_path) -> None:
    s = make_scheduler(1, runner=runner)
    handle = s.schedule(rt_tasks.fail_until, args=(str(tmp_path / "a"), 9), retry=Retry(attempts=2, delay=0.01))
    with pytest.raises(rt_tasks.Flaky):
        handle.result(30)
    assert [(r.attempt, r.outcome) for r in handle.runs] == [(1, "error"), (2, "error")]
    assert handle.state is TaskState.FAILED


def test_retry_after_a_crash(make_scheduler, tmp_path) -> None:
    s = make_scheduler(1)
    path = str(tmp_path / "a")
    handle = s.schedule(rt_tasks.fail_until, args=(path, 1, "crash"), retry=Retry(attempts=2, delay=0.01))
    assert handle.result(30) == 2
    assert [(r.attempt, r.outcome) for r in handle.runs] == [(1, "crashed"), (2, "ok")]


def test_keys_replace_and_jobs(make_scheduler, runner) -> None:
    s = make_scheduler(1, runner=runner)
    a = s.schedule(rt_tasks.square, 3600, args=(1,), key="job")
    with pytest.raises(ValueError, match="job"):
        s.schedule(rt_tasks.square, 3600, args=(2,), key="job")
    assert s.jobs() == [a]
    b = s.schedule(rt_tasks.square, 3600, args=(3,), key="job", replace_existing=True)
    assert a.cancelled() and s.get("job") is b and s.jobs() == [b]


def test_pause_and_resume(make_scheduler, runner, tmp_path) -> None:
    s = make_scheduler(1, runner=runner)
    waiter = Waiter(s)
    path = str(tmp_path / "runs")
    handle = s.schedule_at_fixed_rate(rt_tasks.record_run, 0.05, args=(path,))
    waiter.until(lambda: len(handle.runs) >= 2)
    assert handle.pause()
    waiter.until(lambda: handle.state is TaskState.PAUSED)
    count = len(handle.runs)
    # Paused: no run starts. (A bounded wait on a scheduler that has nothing to do.)
    other = s.schedule(rt_tasks.sleep_for, 0.3, args=(0,))
    other.result(30)
    assert len(handle.runs) == count and handle.state is TaskState.PAUSED and handle.next_run is None
    assert handle.resume()
    # (RUNNING already when the slot due at once started before this line: seen beside the suite)
    assert handle.state in (TaskState.PENDING, TaskState.RUNNING), handle.state
    assert handle.state is TaskState.RUNNING or handle.next_run_at is not None
    waiter.until(lambda: len(handle.runs) >= count + 2)
    assert handle.cancel()


def test_a_task_schedules_a_keyed_cron_task(make_scheduler, runner, tmp_path) -> None:
    s = make_scheduler(1, runner=runner)
    waiter = Waiter(s)
    go = str(tmp_path / "go")
    os.mkfifo(go)
    inner_id = s.schedule(rt_tasks.schedule_cron_inside, args=("* * * * * *", go)).result(30)
    inner = waiter.until(lambda: s.handle(inner_id))  # live until its run reads a line from ``go``
    assert inner.key == "inner-cron" and s.get("inner-cron") is inner
    with open(go, "w") as fifo:
        fifo.write("go\n")
    assert inner.result(30) is None and [r.run for r in inner.runs] == [1]


def test_dispatcher_recomputes_calendar_tasks_after_a_wall_clock_step(make_scheduler, caplog) -> None:
    """The wall clock is injected (the real one cannot be stepped in CI): the
    dispatcher's wall clock jumps forward to just before the next hourly
    slot, and the task runs within a couple of seconds instead of an hour."""
    s = make_scheduler(1)
    handle = s.schedule_cron(rt_tasks.square, "0 * * * *", args=(5,), tz="UTC", max_runs=1)
    slot = handle.next_run_at
    assert slot is not None
    ahead = (slot - datetime.now(UTC)).total_seconds()
    with caplog.at_level(logging.INFO, logger="procsched"):
        s._step_wall(ahead - 0.5)  # the wall clock now reads half a second before the slot
        assert handle.result(15) is None
    assert [r.scheduled_at for r in handle.runs] == [slot]
    assert any("calendar tasks rescheduled" in r.getMessage() for r in caplog.records)


def test_shutdown_with_a_paused_one_shot_does_not_hang(make_scheduler, runner) -> None:
    s = make_scheduler(1, runner=runner)
    handle = s.schedule(rt_tasks.square, 3600, args=(2,))
    assert handle.pause()
    s.shutdown(wait=True)
    assert handle.cancelled()
