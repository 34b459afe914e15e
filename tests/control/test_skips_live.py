"""Issue 22: a skipped slot is told to the listeners when it is skipped (its
due time), not held until some other event (the end of the run it overlapped)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import ctl_tasks as t
import pytest

import procsched

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("runner", ["threads", "processes"])
def test_run_skipped_comes_while_the_overlapped_run_still_runs(runner: str, tmp_path: Path) -> None:
    fifo = str(tmp_path / "release")
    os.mkfifo(fifo)
    skipped = threading.Event()
    seen: list[str] = []

    def on_event(event: dict[str, Any]) -> None:
        seen.append(event["event"])
        if event["event"] == "run_skipped":
            skipped.set()

    with procsched.Scheduler(2, runner=runner) as sched:
        sched.add_listener(on_event)
        handle = sched.schedule_at_fixed_rate(t.first_run_waits, 0.02, args=(fifo,), overlap="skip")
        try:
            assert skipped.wait(30), f"no run_skipped while run 1 runs; events: {seen}"
            assert "run_finished" not in seen
        finally:
            with open(fifo, "w") as release:  # run 1 ends
                release.write("go")
        handle.cancel()
    assert handle.slots()[0].outcome == "ok" and handle.slots()[1].reason == "overlap"


def test_with_a_store_the_skipped_slots_kept_are_bounded_by_keep_runs(tmp_path: Path) -> None:
    fifo = str(tmp_path / "release")
    os.mkfifo(fifo)
    skipped = threading.Semaphore(0)

    def on_event(event: dict[str, Any]) -> None:
        if event["event"] == "run_skipped":
            skipped.release()

    store = f"sqlite:///{tmp_path}/store.db?keep_runs=3"
    with procsched.Scheduler(1, store=store) as sched:
        sched.add_listener(on_event)
        handle = sched.schedule_at_fixed_rate(t.first_run_waits, 0.01, args=(fifo,), overlap="skip", key="k")
        try:
            for _ in range(8):
                assert skipped.acquire(timeout=30), "fewer than 8 skipped slots"
        finally:
            with open(fifo, "w") as release:
                release.write("go")
        handle.cancel()
        history = sched.history("k", 1000, skipped=True)
    kept = [s for s in history if s.outcome == "skipped"]
    assert len(kept) == 3 and all(s.reason == "overlap" for s in kept)
    assert [s.scheduled_for for s in history] == sorted(s.scheduled_for for s in history)


def test_slots_missed_while_down_are_told_and_listed_at_the_restart(tmp_path: Path) -> None:
    """Every slot ends with a reason in the program too: the slots a restart
    finds missed while no scheduler ran the task (recorded "down" in the
    store) come as ``run_skipped`` events and in ``handle.slots()``, before
    the task's first run after the restart - and are stored once."""
    log = str(tmp_path / "log")
    store = str(tmp_path / "store.db")
    ran = [threading.Semaphore(0), threading.Semaphore(0)]  # each scheduler's own: runs the first
    # ended after the wait (before its shutdown) are not the second's

    def listener(life: int) -> Any:
        def on_event(event: dict[str, Any]) -> None:
            if event["event"] == "run_finished":
                ran[life].release()

        return on_event

    with procsched.Scheduler(1, store=store) as sched:
        sched.add_listener(listener(0))
        sched.schedule_at_fixed_rate(t.note, 0.05, args=(log,), misfire="skip", key="k")
        assert ran[0].acquire(timeout=30), "no run"
    time.sleep(0.5)  # down: ~10 slots pass while no scheduler runs
    with procsched.Scheduler(1, store=store) as sched:
        sched.add_listener(listener(1))
        handle = sched.get("k")
        assert handle is not None
        assert ran[1].acquire(timeout=30), "no run after the restart"  # (the down slots were told before it)
        slots = handle.slots()
        stored = sched.history("k", 1000, skipped=True)
        handle.cancel()
    down = [s.scheduled_at for s in slots if s.outcome == "skipped" and s.reason == "down"]
    stored_down = [s.scheduled_at for s in stored if s.outcome == "skipped" and s.reason == "down"]
    assert len(down) >= 5 and down == stored_down  # told here, stored once
    first_run = next(i for i, s in enumerate(slots) if s.outcome != "skipped")
    assert all(s.reason == "down" for s in slots[:first_run])
