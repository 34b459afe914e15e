"""Issue 22's schedule control on runner="ray" (the same Engine as the other
runners): overlap skip and replace, run now, backfill, every slot explained."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import rt_tasks as t
from rt_helpers import Waiter, release

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("ray_cluster")]


def test_skip_replace_run_now_and_backfill_on_ray(make_scheduler, tmp_path, fifo) -> None:
    log = str(tmp_path / "log")
    sched = make_scheduler(2, runner="ray")
    waiter = Waiter(sched)
    skipped: list[dict] = []
    sched.add_listener(skipped.append, "run_skipped")

    skip = sched.schedule_at_fixed_rate(t.cause_and_wait, 0.05, args=(log, fifo), overlap="skip")
    waiter.until(lambda: skipped)
    assert not skip.runs  # told while run 1 still runs
    release(fifo)
    waiter.until(lambda: len(skip.runs) >= 2)
    skip.cancel()
    slots = skip.slots()
    assert slots[0].run == 1 and any(s.outcome == "skipped" and s.reason == "overlap" for s in slots)

    replaced = sched.schedule_at_fixed_rate(t.hang, 0.5, overlap="replace")
    waiter.until(lambda: replaced.runs)
    replaced.cancel(interrupt=True)
    first = replaced.runs[0]
    assert (first.run, first.outcome, first.reason) == (1, "cancelled", "replaced")

    hourly = sched.schedule_at_fixed_rate(t.record_run, 60, args=(log + ".2",), initial_delay=60)
    assert hourly.run_now()
    now = datetime.now(UTC)
    planned = hourly.backfill(now - timedelta(minutes=3), now)
    assert len(planned) == 3
    waiter.until(lambda: len(hourly.runs) == 4)
    assert sorted(r.cause for r in hourly.runs) == ["backfill"] * 3 + ["manual"]
    assert [r.scheduled_at for r in hourly.runs if r.cause == "backfill"] == planned
    hourly.cancel()


def test_a_ray_run_controls_another_task_through_current_scheduler(make_scheduler, tmp_path) -> None:
    sched = make_scheduler(2, runner="ray")
    waiter = Waiter(sched)
    target = sched.schedule_at_fixed_rate(t.record_run, 60, args=(str(tmp_path / "log"),), initial_delay=60)
    next_run = target.next_run
    now = datetime.now(UTC)
    done = sched.submit(t.control_from_a_run, target.id, now - timedelta(minutes=3), now).result(timeout=60)
    assert (done["paused"], done["resumed"], done["run_now"]) == (True, True, True)
    assert len(done["planned"]) == 3 and done["backfill"] == done["planned"]
    waiter.until(lambda: len(target.runs) == 4)
    assert sorted(r.cause for r in target.runs) == ["backfill"] * 3 + ["manual"]
    assert target.next_run == next_run
    target.cancel()
