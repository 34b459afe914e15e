"""max_concurrent and overlap on real worker processes: overlaps are read
from the tasks' own O_APPEND logs."""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import ctl_tasks as t
import pytest

import procsched

TIMEOUT = 60.0


class Events:
    """Collects listener events; ``until`` blocks (with a deadline) until a predicate holds."""

    def __init__(self, scheduler: procsched.Scheduler) -> None:
        self.seen: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        scheduler.add_listener(self._on)

    def _on(self, event: dict[str, Any]) -> None:
        with self._cond:
            self.seen.append(event)
            self._cond.notify_all()

    def of(self, kind: str, task_id: int) -> list[dict[str, Any]]:
        with self._cond:
            return [e for e in self.seen if e["event"] == kind and e["task_id"] == task_id]

    def until(self, predicate: Any, timeout: float = TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                assert left > 0, f"timed out waiting for {predicate}"
                self._cond.wait(left)


def test_skip_never_overlaps_and_records_the_skipped_slots(sched: procsched.Scheduler, tmp_path: Any) -> None:
    log = str(tmp_path / "log")
    events = Events(sched)
    handle = sched.schedule_at_fixed_rate(t.logged_sleep, 0.2, args=(log, 0.5), overlap="skip")
    events.until(lambda: len(events.of("run_finished", handle.id)) >= 2)
    handle.cancel()
    assert t.most_at_once(log) == 1
    skipped = events.of("run_skipped", handle.id)
    assert skipped and all(e["reason"] == "overlap" for e in skipped)
    slots = handle.slots()
    assert any(s.outcome == "skipped" and s.reason == "overlap" and s.run is None for s in slots)
    assert all(r.outcome != "skipped" for r in handle.runs)


def test_max_concurrent_two_runs_two_at_once_never_three(sched: procsched.Scheduler, tmp_path: Any) -> None:
    log = str(tmp_path / "log")
    events = Events(sched)
    handle = sched.schedule_at_fixed_rate(t.logged_sleep, 0.2, args=(log, 0.7), max_concurrent=2)
    events.until(lambda: len(events.of("run_finished", handle.id)) >= 3)
    handle.cancel()
    events.until(lambda: handle.done())
    assert t.most_at_once(log) == 2


def test_replace_kills_the_oldest_run_only(sched: procsched.Scheduler, tmp_path: Any) -> None:
    log = str(tmp_path / "log")
    other_log = str(tmp_path / "other")
    events = Events(sched)
    other = sched.schedule(t.logged_sleep, args=(other_log, 1.5))
    handle = sched.schedule_at_fixed_rate(t.logged_sleep, 0.4, args=(log, 30), overlap="replace")
    events.until(lambda: len(events.of("run_cancelled", handle.id)) >= 1)
    handle.cancel(interrupt=True)
    first = handle.runs[0]
    assert first.run == 1 and first.outcome == "cancelled" and first.reason == "replaced"
    assert events.of("run_cancelled", handle.id)[0]["reason"] == "replaced"
    assert other.result(timeout=TIMEOUT) is None  # the other task's run was never touched
    if os.path.exists(log):  # (none: a loaded machine killed run 1 before its first line)
        with open(log) as f:
            assert sum(line.startswith("end") for line in f) == 0  # every run of it was killed


def test_run_now_is_a_manual_run_and_the_schedule_stays(sched: procsched.Scheduler, tmp_path: Any) -> None:
    log = str(tmp_path / "log")
    events = Events(sched)
    handle = sched.schedule_at_fixed_rate(t.note, 3600, args=(log,), initial_delay=3600, key="hourly")
    next_run = handle.next_run
    assert sched.run_now("hourly")
    events.until(lambda: len(handle.runs) == 1)
    run = handle.runs[0]
    assert run.cause == "manual" and run.outcome == "ok" and run.run == 1
    assert handle.next_run == next_run
    assert events.of("run_started", handle.id)[0]["cause"] == "manual"
    assert not sched.run_now("nobody")
    with open(log) as f:
        assert f.read() == "manual\n"  # current_run() in the worker knows it too


@pytest.mark.parametrize("runner", ["threads"])
def test_run_now_and_skip_on_threads(runner: str, tmp_path: Any) -> None:
    log = str(tmp_path / "log")
    with procsched.Scheduler(workers=2, runner=runner) as sched:
        events = Events(sched)
        handle = sched.schedule_at_fixed_rate(t.note, 3600, args=(log,), initial_delay=3600, overlap="skip")
        assert handle.run_now()
        events.until(lambda: len(handle.runs) == 1)
        assert handle.runs[0].cause == "manual"
        handle.cancel()
    with open(log) as f:
        assert f.read() == "manual\n"


def test_backfill_runs_the_slots_in_order(sched: procsched.Scheduler, tmp_path: Any) -> None:
    log = str(tmp_path / "log")
    events = Events(sched)
    handle = sched.schedule_at_fixed_rate(t.note, 60, args=(log,), initial_delay=60)
    now = datetime.now(UTC)
    start = now - timedelta(minutes=4)
    planned = handle.backfill(start, now, dry_run=True)
    assert len(planned) == 4 and planned == sorted(planned)
    assert handle.backfill(start, now) == planned
    events.until(lambda: len(handle.runs) == 4)
    assert [r.cause for r in handle.runs] == ["backfill"] * 4
    assert [r.scheduled_at for r in handle.runs] == planned
    for earlier, later in zip(handle.runs, handle.runs[1:]):
        assert earlier.finished_at is not None and later.started_at is not None
        assert earlier.finished_at <= later.started_at  # one after another
    with pytest.raises(ValueError, match="fixed-delay"):
        sched.schedule_with_fixed_delay(t.note, 60, args=(log,), initial_delay=60).backfill(start, now)
    with open(log) as f:
        assert f.read() == "backfill\n" * 4


@pytest.mark.parametrize("runner", ["processes", "threads"])
def test_a_run_controls_another_task_through_current_scheduler(runner: str, tmp_path: Any) -> None:
    log = str(tmp_path / "log")
    with procsched.Scheduler(workers=2, runner=runner) as sched:
        events = Events(sched)
        target = sched.schedule_at_fixed_rate(t.note, 60, args=(log,), initial_delay=60, key="some-key")
        next_run = target.next_run
        now = datetime.now(UTC)
        done = sched.submit(t.control_from_a_run, target.id, now - timedelta(minutes=3), now).result(TIMEOUT)
        events.until(lambda: len(target.runs) == 4)
        assert (done["paused"], done["resumed"], done["run_now"]) == (True, True, True)
        planned = done["planned"]
        assert isinstance(planned, list) and len(planned) == 3 and done["backfill"] == planned
        assert all(slot.tzinfo is not None for slot in planned)
        assert sorted(r.cause for r in target.runs) == ["backfill"] * 3 + ["manual"]
        assert [r.scheduled_at for r in target.runs if r.cause == "backfill"] == planned
        assert target.next_run == next_run  # the schedule did not move
        assert str(done["reversed"]).startswith("ValueError: start must be before end")
        if runner == "processes":
            assert str(done["by_key"]).startswith("SchedulerError: current_scheduler() in a worker names tasks by id")
        else:  # (threads: the scheduler itself, keys and all)
            assert done["by_key"] is False
        target.cancel()
