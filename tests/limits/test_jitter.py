"""Schedule jitter end to end: each slot starts a random delay in
[0, jitter) after it; the run's scheduled time stays the slot."""

from __future__ import annotations

import procsched

NS = 1_000_000_000


def noop() -> None:
    return None


def test_jitter_on_a_manual_clock_stays_within_the_bound() -> None:
    clock = procsched.ManualClock()
    s = procsched.InlineScheduler(clock)
    handle = s.schedule_at_fixed_rate(noop, 1, jitter=0.5, max_runs=30)
    s.run_until(40)
    runs = handle.runs
    assert [r.scheduled_for for r in runs] == [float(k) for k in range(30)]
    delays = [r.started_at - r.scheduled_for for r in runs]
    assert all(0 <= d < 0.5 for d in delays)
    assert len(set(delays)) > 20  # spread, not one offset
    walls = [r.scheduled_at for r in runs]
    assert all(a is not None and b is not None and (b - a).total_seconds() == 1.0 for a, b in zip(walls, walls[1:]))


def test_jitter_with_worker_processes_keeps_the_grid() -> None:
    with procsched.Scheduler(2) as s:
        handle = s.schedule_at_fixed_rate(noop, 0.1, jitter=0.08, max_runs=5)
        handle.result(timeout=60)
        runs = handle.runs
    slots = [r.scheduled_for for r in runs]
    assert len(runs) == 5
    assert all(abs(b - a - 0.1) < 1e-6 for a, b in zip(slots, slots[1:]))  # the grid, not the jittered starts
    assert all(r.started_at >= r.scheduled_for for r in runs)
