"""Issue 26 item 3, in the core's scheduler: a run's error on its RunInfo and
its events, and failed runs of periodic tasks logged once per burst."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import procsched
from procsched import RunError
from procsched._failure_log import BURST_WINDOW


def no_data() -> None:
    raise ValueError("no data")


class Flaky:
    """Raises while ``failing`` is true."""

    def __init__(self) -> None:
        self.failing = True

    def __call__(self) -> str:
        if self.failing:
            raise ValueError("no data")
        return "ok"


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "procsched" and r.levelno >= logging.WARNING]


def test_runinfo_carries_the_runs_error_type_message_and_traceback(
    sched: procsched.InlineScheduler, clock: procsched.ManualClock
) -> None:
    events: list[dict[str, Any]] = []
    sched.add_listener(events.append, "run_failed")
    handle = sched.schedule_at_fixed_rate(no_data, 1, max_runs=2)
    sched.run_until(5)
    assert handle.state is procsched.TaskState.DONE and handle.result() is None
    errors = [run.error for run in handle.runs]
    assert all(isinstance(e, RunError) for e in errors) and len(errors) == 2
    last = errors[-1]
    assert last is not None and (last.type, last.message, str(last)) == ("ValueError", "no data", "ValueError: no data")
    assert last.traceback is not None and "in no_data" in last.traceback
    assert last.traceback.rstrip().endswith("ValueError: no data")
    # the last run's event, the one that ends the task (max_runs), has it too
    assert [e["error"] for e in events] == ["ValueError: no data"] * 2
    assert events[-1]["state"] == "done" and "in no_data" in events[-1]["traceback"]


def test_an_ok_run_has_no_error(sched: procsched.InlineScheduler) -> None:
    handle = sched.schedule(lambda: 1)
    sched.run_due()
    assert handle.runs[0].outcome == "ok" and handle.runs[0].error is None


def test_a_timeout_is_a_run_error_without_a_traceback_of_the_task(
    sched: procsched.InlineScheduler, clock: procsched.ManualClock
) -> None:
    handle = sched.schedule(lambda: clock.advance(2), timeout=1)
    sched.run_due()
    error = handle.runs[0].error
    assert error is not None and error.type == "TaskTimeoutError" and "over its timeout" in error.message


def test_a_periodic_tasks_failed_runs_are_logged_once_per_burst(
    sched: procsched.InlineScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "procsched")
    task = Flaky()
    handle = sched.schedule_at_fixed_rate(task, 1, name="fetch")
    sched.run_until(9)  # runs at 0..9: ten failures
    assert handle.run_count == 10
    (first,) = warnings_of(caplog)
    assert "task 1 (fetch) run 1 failed: ValueError: no data" in first
    caplog.clear()
    task.failing = False
    sched.run_until(10)  # a success ends the burst: the nine failures not logged are summed up
    (summary,) = warnings_of(caplog)
    assert "task 1 (fetch) failed 9 more time(s) before run 11 succeeded; the last: ValueError: no data" in summary
    caplog.clear()
    task.failing = True
    sched.run_until(12)  # a new burst: its first failure is logged again
    (again,) = warnings_of(caplog)
    assert "run 12 failed" in again


def test_a_burst_that_goes_on_is_summed_up_every_window(
    sched: procsched.InlineScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "procsched")
    handle = sched.schedule_at_fixed_rate(no_data, 10)
    sched.run_until(BURST_WINDOW + 20)  # runs at 0, 10, ..., 320
    lines = warnings_of(caplog)
    assert len(lines) == 2, lines  # the first failure, one summary after the window
    assert lines[1] == (
        f"task 1 failed {int(BURST_WINDOW / 10)} more time(s) in the last {BURST_WINDOW:g} s; "
        "the last: ValueError: no data"
    )
    handle.cancel()  # the failures since that summary are summed up when the task ends
    assert warnings_of(caplog)[2:] == ["task 1 failed 2 more time(s) before it ended; the last: ValueError: no data"]


def test_a_task_at_its_limit_after_failing_says_so(
    sched: procsched.InlineScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "procsched")
    sched.schedule_at_fixed_rate(no_data, 1, max_runs=3)
    sched.run_until(5)
    assert warnings_of(caplog) == [
        "task 1 run 1 failed: ValueError: no data (its further failures are summed up until a run succeeds)",
        "task 1 failed 2 more time(s) before it ended; the last: ValueError: no data",
    ]


def test_a_one_shot_failure_is_not_logged_its_result_raises_it(
    sched: procsched.InlineScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "procsched")
    handle = sched.schedule(no_data)
    sched.run_due()
    with pytest.raises(ValueError, match="no data"):
        handle.result()
    assert warnings_of(caplog) == []
