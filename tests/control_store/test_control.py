"""Control from outside (DESIGN part three) with real instances: pause,
resume, cancel, run now and backfill asked of the store - by ``procsched
pause|resume|cancel|run-now KEY --store S``, the console or another program -
are carried out once, by the instance that holds the task, within its
re-read interval. SQLite and PostgreSQL."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import procsched
from procsched import TaskState
from procsched._store import TaskDefinition, open_store
from procsched._store import TaskState as StoredState
from tests.cli.cli_helpers import cli_here

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import ctl_jobs  # noqa: E402

#: lease 3 s: the instances re-read the store every second (lease/3, at most 1 s)
LEASE = 3.0


def count(path: Path) -> int:
    try:
        return len(path.read_text().splitlines())
    except FileNotFoundError:
        return 0


def wait_until(predicate, timeout: float = 15.0, what: str = ""):
    """Wait (a deadlock guard, not a timing) until ``predicate()`` is truthy."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what or predicate}"
        time.sleep(0.02)
    return value


def test_pause_resume_cancel_from_the_cli_reach_the_holder(store_url, tmp_path):
    log = tmp_path / "tick.log"
    with procsched.Scheduler(workers=1, store=store_url, lease=LEASE) as s:
        tick = s.schedule_at_fixed_rate(ctl_jobs.mark, 0.1, args=(str(log),), key="tick")
        wait_until(lambda: count(log) >= 2, what="tick's runs")
        asked = time.monotonic()
        done = cli_here("pause", "tick", "--store", store_url)
        assert done.returncode == 0, done.stderr
        wait_until(lambda: tick.state is TaskState.PAUSED, what="the holder following the pause")
        assert time.monotonic() - asked < LEASE  # the re-read interval (1 s), and a loaded machine's slack
        seen = count(log)
        time.sleep(0.5)  # an absence: five periods of tick with no run
        assert count(log) <= seen + 1  # (a run that had started before the pause may end meanwhile)
        seen = count(log)
        assert cli_here("resume", "tick", "--store", store_url).returncode == 0
        wait_until(lambda: count(log) > seen, what="a run after the resume")
        assert cli_here("cancel", "tick", "--store", store_url).returncode == 0
        wait_until(lambda: tick.state is TaskState.CANCELLED, what="the holder dropping the task")
        assert s.get("tick") is None
        assert [r.run for r in s.history("tick")][:2] == [1, 2]  # its history is kept


def test_a_request_for_a_task_nobody_can_run_is_answered(store_url, tmp_path):
    # "gone": asked while no instance ran, then cancelled; "broken": its function imports nowhere
    with open_store(store_url) as store:
        batch = store.batch()
        schedule = {"kind": "fixed_rate", "period_ns": 3600 * 10**9, "initial_delay_ns": 0, "misfire": "skip"}
        for key, ref in (("gone", "ctl_jobs:mark"), ("broken", "no_such_module_here:mark")):
            batch.upsert(
                TaskDefinition(key, ref, b"", schedule, {"name": key}), StoredState(0, time.time_ns() + 3600 * 10**9)
            )
        batch.commit()
        gone = store.ask("gone", "run_now", asked_by="test")
        store.remove("gone")
        broken = store.ask("broken", "run_now", asked_by="test")
        with procsched.Scheduler(workers=1, store=store_url, lease=LEASE):
            answered = wait_until(
                lambda: all((r := store.request(i)) is not None and r.done for i in (gone, broken)),
                what="the instance's answers",
            )
            assert answered
            said = {i: store.request(i) for i in (gone, broken)}
    assert said[gone].error == "no task 'gone' in the store any more (cancelled, or it ended)"
    assert said[broken].error.startswith("no instance can run 'broken': ")
    assert "no_such_module_here" in said[broken].error
    assert all(r.result is None and r.taken_by is not None for r in said.values())
