"""Fixed rate (an exact integer-ns grid; misfire modes) and fixed delay.

The reference experiment from DESIGN.md: period 400 ms, first run at 200 ms
taking 1 s, every later run instant.
"""

from __future__ import annotations

from typing import Any

import pytest

import procsched
from procsched._core import Kind, Misfire, Schedule, SchedulerCore

MS = 1_000_000
NS = 1_000_000_000


def reference(sched_method: str, until: float = 2.0, **kwargs: Any) -> procsched.TaskHandle:
    """Run the DESIGN.md experiment on an InlineScheduler and return the handle."""
    clock = procsched.ManualClock()
    sched = procsched.InlineScheduler(clock)

    def job() -> None:
        if procsched.current_run().run == 1:
            clock.advance(1.0)  # the first run takes 1 s

    handle = getattr(sched, sched_method)(job, 0.4, initial_delay=0.2, **kwargs)
    sched.run_until(until)
    assert clock.now() == until
    return handle


def starts_ms(handle: procsched.TaskHandle) -> list[int]:
    return [round(r.started_at * 1000) for r in handle.runs]


def scheduled_ms(handle: procsched.TaskHandle) -> list[int]:
    return [round(r.scheduled_for * 1000) for r in handle.runs]


def test_catch_up_matches_the_reference_table() -> None:
    handle = reference("schedule_at_fixed_rate")  # misfire="catch_up" is the default
    assert starts_ms(handle) == [200, 1200, 1200, 1400, 1800]
    assert scheduled_ms(handle) == [200, 600, 1000, 1400, 1800]
    assert handle.next_run == pytest.approx(2.2)


def test_fixed_delay_matches_the_reference_table() -> None:
    handle = reference("schedule_with_fixed_delay")
    assert starts_ms(handle) == [200, 1600, 2000]
    assert handle.next_run == pytest.approx(2.4)


def test_skip_jumps_to_the_first_grid_point_at_or_after_the_finish() -> None:
    handle = reference("schedule_at_fixed_rate", misfire="skip")
    assert starts_ms(handle) == [200, 1400, 1800]
    assert scheduled_ms(handle) == [200, 1400, 1800]


def test_coalesce_runs_the_last_missed_slot_once_then_resumes_the_grid() -> None:
    handle = reference("schedule_at_fixed_rate", misfire="coalesce")
    assert starts_ms(handle) == [200, 1200, 1400, 1800]
    assert scheduled_ms(handle) == [200, 1000, 1400, 1800]


# -- the same decisions, on the core, in exact nanoseconds ------------------------------


def overrun(misfire: Misfire, outcome: str = "ok", finish_ms: int = 1200) -> tuple[int | None, int]:
    core = SchedulerCore()
    tid = core.add(200 * MS, schedule=Schedule(Kind.FIXED_RATE, 400 * MS, misfire=misfire))
    run = core.claim(200 * MS)
    assert run is not None
    done = core.complete(tid, 1, outcome, finish_ms * MS)  # type: ignore[arg-type]
    assert done is not None
    return done.next_due_ns, done.missed


@pytest.mark.parametrize(
    ("misfire", "finish_ms", "next_ms", "missed"),
    [
        (Misfire.CATCH_UP, 1200, 600, 0),
        (Misfire.SKIP, 1200, 1400, 2),
        (Misfire.COALESCE, 1200, 1000, 1),
        # finishing exactly on a grid point: that point is ">= finish"
        (Misfire.CATCH_UP, 1000, 600, 0),
        (Misfire.SKIP, 1000, 1000, 1),
        (Misfire.COALESCE, 1000, 1000, 1),
        # a late finish that misses no slot is not a misfire
        (Misfire.SKIP, 599, 600, 0),
        (Misfire.COALESCE, 600, 600, 0),
        (Misfire.CATCH_UP, 600, 600, 0),
    ],
)
def test_misfire_decisions(misfire: Misfire, finish_ms: int, next_ms: int, missed: int) -> None:
    assert overrun(misfire, finish_ms=finish_ms) == (next_ms * MS, missed)


@pytest.mark.parametrize("outcome", ["crashed", "timeout"])
def test_catch_up_after_a_crash_or_timeout_behaves_like_skip(outcome: str) -> None:
    # Documented core decision: no back-to-back backlog after a lost run.
    assert overrun(Misfire.CATCH_UP, outcome) == overrun(Misfire.SKIP, outcome) == (1400 * MS, 2)


def test_catch_up_after_an_error_still_catches_up() -> None:
    assert overrun(Misfire.CATCH_UP, "error") == (600 * MS, 0)


def test_catch_up_after_a_timeout_on_the_inline_scheduler() -> None:
    handle = reference("schedule_at_fixed_rate", timeout=0.5)
    assert [r.outcome for r in handle.runs] == ["timeout", "ok", "ok"]
    assert starts_ms(handle) == [200, 1400, 1800]
    assert handle.state is procsched.TaskState.PENDING


@pytest.mark.parametrize("misfire", list(Misfire))
def test_grid_is_exact_in_integer_nanoseconds(misfire: Misfire) -> None:
    first, period = 7, 333_333_333  # no float could keep this grid exact
    core = SchedulerCore()
    tid = core.add(first, schedule=Schedule(Kind.FIXED_RATE, period, misfire=misfire))
    now = 0
    for k in range(3000):
        deadline = core.next_deadline()
        assert deadline == first + k * period
        now = max(now, deadline)
        run = core.claim(now)
        assert run is not None and run.scheduled_ns == first + k * period
        # finish late, but within the period: the grid must not drift
        core.complete(tid, run.run, "ok", now + period - 1)


def test_grid_from_a_float_period_stays_on_first_plus_k_period() -> None:
    clock = procsched.ManualClock(0.5)
    sched = procsched.InlineScheduler(clock, handle_runs=3001)  # every RunInfo kept
    handle = sched.schedule_at_fixed_rate(lambda: None, 1 / 3, initial_delay=0.1)
    sched.run_until(1000.6)
    assert len(handle.runs) == 3001
    period_ns = round(NS / 3)
    first_ns = 600 * MS
    for k, info in enumerate(handle.runs):
        assert info.scheduled_for == (first_ns + k * period_ns) / NS
        assert info.started_at == info.scheduled_for


def test_a_late_run_does_not_shift_the_grid() -> None:
    clock = procsched.ManualClock()
    sched = procsched.InlineScheduler(clock)
    handle = sched.schedule_at_fixed_rate(lambda: clock.advance(0.3), 0.4)
    sched.run_until(2.0)
    assert scheduled_ms(handle) == starts_ms(handle) == [0, 400, 800, 1200, 1600, 2000]
    assert [round(r.finished_at * 1000) for r in handle.runs] == [300, 700, 1100, 1500, 1900, 2300]


def test_fixed_delay_never_catches_up() -> None:
    core = SchedulerCore()
    tid = core.add(0, schedule=Schedule(Kind.FIXED_DELAY, 100))
    core.claim(0)
    done = core.complete(tid, 1, "ok", 10_000)
    assert done is not None and (done.next_due_ns, done.missed) == (10_100, 0)
    assert core.claim(10_099) is None
    assert core.claim(10_100) is not None


def test_a_periodic_task_never_overlaps_itself() -> None:
    """Re-queued only when its run completes: however late, no second claim meanwhile."""
    core = SchedulerCore()
    tid = core.add(0, schedule=Schedule(Kind.FIXED_RATE, 10))
    run = core.claim(0)
    assert run is not None
    assert core.claim(10**9) is None
    assert core.next_deadline() is None
    core.complete(tid, run.run, "ok", 35)
    again = core.claim(35)
    assert again is not None and (again.run, again.scheduled_ns) == (2, 10)
