"""Issue 22: a skipped slot is told to the listeners when it is skipped (its
due time), not held until some other event (the end of the run it overlapped)."""

from __future__ import annotations

import os
import threading
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
