"""Issue 26 item 3 with real workers: a run's error travels from the worker
to ``RunInfo.error`` and the events, also for the last run of a task that
ends at its ``max_runs``; failed runs of a periodic task are logged once per
burst; with a store, ``history()`` reads the error back with its traceback."""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any

import pytest

import procsched

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import rt_tasks  # noqa: E402


@pytest.mark.parametrize("runner", ["processes", "threads"])
def test_the_last_runs_error_reaches_runinfo_and_its_event(make_scheduler, runner, caplog) -> None:
    caplog.set_level(logging.WARNING, "procsched")
    failed: list[dict[str, Any]] = []
    ended = threading.Event()

    def on_failed(event: dict[str, Any]) -> None:
        failed.append(event)
        if event["state"] == "done":
            ended.set()

    s = make_scheduler(1, runner=runner)
    s.add_listener(on_failed, "run_failed")
    handle = s.schedule_at_fixed_rate(rt_tasks.raise_value_error, 0.01, args=("no data",), max_runs=3, name="f")
    assert handle.result(timeout=60) is None and handle.state is procsched.TaskState.DONE
    assert ended.wait(60)
    errors = [run.error for run in handle.runs]
    assert [(e.type, e.message) for e in errors if e is not None] == [("ValueError", "no data")] * 3
    tb = errors[-1].traceback  # type: ignore[union-attr]
    assert tb is not None and "in raise_value_error" in tb and tb.rstrip().endswith("ValueError: no data")
    # run_failed of the run that ended the task (max_runs): its error is there (was None)
    assert [e["error"] for e in failed] == ["ValueError: no data"] * 3
    assert failed[-1]["state"] == "done" and "in raise_value_error" in failed[-1]["traceback"]
    lines = [r.getMessage() for r in caplog.records if r.name == "procsched" and "task " in r.getMessage()]
    assert lines == [
        "task 1 (f) run 1 failed: ValueError: no data (its further failures are summed up until a run succeeds)",
        "task 1 (f) failed 2 more time(s) before it ended; the last: ValueError: no data",
    ]


def test_a_crash_is_a_run_error_without_a_traceback(make_scheduler) -> None:
    s = make_scheduler(1)
    handle = s.schedule(rt_tasks.hard_exit, args=(3,))
    with pytest.raises(procsched.WorkerCrashedError):
        handle.result(timeout=60)
    error = handle.runs[-1].error
    assert error is not None and error.type == "WorkerCrashedError" and "exit" in error.message
    assert error.traceback is None


def test_history_reads_a_stored_runs_error_and_traceback(tmp_path) -> None:
    db = str(tmp_path / "s.db")
    with procsched.Scheduler(1, store=db) as s:
        handle = s.schedule_at_fixed_rate(rt_tasks.raise_value_error, 0.01, args=("no data",), key="k", max_runs=2)
        assert handle.result(timeout=60) is None
        history = s.history("k")
    assert [r.outcome for r in history] == ["error", "error"]
    error = history[-1].error
    assert error is not None and (error.type, error.message) == ("ValueError", "no data")
    assert error.traceback is not None and "in raise_value_error" in error.traceback
