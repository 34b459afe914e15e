"""InlineScheduler driving: run_due, run_until, current_run / current_scheduler."""

from __future__ import annotations

import threading

import pytest

import procsched
from procsched import TaskState


def test_run_until_moves_the_clock_to_each_due_time_and_leaves_it_at_t(
    sched: procsched.InlineScheduler, clock: procsched.ManualClock
) -> None:
    seen: list[float] = []
    for delay in (4, 1, 2.5):
        sched.schedule(lambda: seen.append(clock.now()), delay)
    assert sched.run_until(3) == 2
    assert seen == [1.0, 2.5] and clock.now() == 3.0
    assert sched.run_until(3) == 0 and clock.now() == 3.0
    assert sched.run_until(10) == 1
    assert seen == [1.0, 2.5, 4.0] and clock.now() == 10.0


def test_run_until_with_nothing_scheduled(sched: procsched.InlineScheduler, clock: procsched.ManualClock) -> None:
    assert sched.run_until(2.5) == 0 and clock.now() == 2.5


def test_run_until_includes_t_itself(sched: procsched.InlineScheduler) -> None:
    sched.schedule(lambda: None, 2)
    assert sched.run_until(2) == 1


def test_run_until_counts_every_periodic_run(sched: procsched.InlineScheduler) -> None:
    rate = sched.schedule_at_fixed_rate(lambda: None, 0.5)
    delay = sched.schedule_with_fixed_delay(lambda: None, 2, initial_delay=1)
    assert sched.run_until(5) == 11 + 3
    assert [r.started_at for r in delay.runs] == [1.0, 3.0, 5.0]
    assert len(rate.runs) == 11 and rate.next_run == 5.5


def test_run_due_runs_only_what_is_due_and_does_not_move_the_clock(
    sched: procsched.InlineScheduler, clock: procsched.ManualClock
) -> None:
    now = sched.submit(lambda: "now")
    later = sched.schedule(lambda: "later", 1)
    assert sched.run_due() == 1
    assert now.done() and not later.done() and clock.now() == 0.0
    assert sched.run_due() == 0
    clock.advance(1)
    assert sched.run_due() == 1 and later.result(timeout=0) == "later"


def test_run_due_runs_what_becomes_due_during_the_call(sched: procsched.InlineScheduler) -> None:
    chain: list[int] = []

    def step(n: int) -> None:
        chain.append(n)
        if n < 5:
            procsched.current_scheduler().submit(step, n + 1)

    sched.submit(step, 1)
    assert sched.run_due() == 5
    assert chain == [1, 2, 3, 4, 5]


def test_run_due_catches_up_back_to_back(sched: procsched.InlineScheduler, clock: procsched.ManualClock) -> None:
    handle = sched.schedule_at_fixed_rate(lambda: None, 1)
    clock.advance(3.5)
    assert sched.run_due() == 4
    assert [r.scheduled_for for r in handle.runs] == [0.0, 1.0, 2.0, 3.0]
    assert {r.started_at for r in handle.runs} == {3.5}


def test_current_run_and_current_scheduler_inside_a_task(
    sched: procsched.InlineScheduler, clock: procsched.ManualClock
) -> None:
    inside: list[object] = []

    def job() -> None:
        inside.append(procsched.current_run())
        inside.append(procsched.current_scheduler())

    handle = sched.schedule(job, 2, name="job")
    sched.run_until(2)
    info, owner = inside
    assert owner is sched
    assert isinstance(info, procsched.RunInfo)
    assert (info.task_id, info.run, info.scheduled_for, info.started_at) == (handle.id, 1, 2.0, 2.0)
    assert info.finished_at is None and info.outcome is None
    assert info.worker == threading.current_thread().name


def test_current_run_outside_a_task_raises() -> None:
    with pytest.raises(RuntimeError, match="outside a running task"):
        procsched.current_run()
    with pytest.raises(RuntimeError, match="outside a running task"):
        procsched.current_scheduler()


def test_context_is_restored_after_a_nested_run(sched: procsched.InlineScheduler) -> None:
    """A task that drives its own scheduler (run_due inside a run) sees its own RunInfo again."""
    ids: list[int] = []

    def outer() -> None:
        me = procsched.current_run().task_id
        assert sched.run_due() == 1  # runs `inner`, nested in this run
        ids.append(me if procsched.current_run().task_id == me else -1)

    outer_handle = sched.submit(outer)
    inner = sched.submit(lambda: ids.append(procsched.current_run().task_id))
    assert sched.run_due() == 1
    assert ids == [inner.id, outer_handle.id]
    with pytest.raises(RuntimeError):
        procsched.current_run()


def test_context_manager_shuts_down(clock: procsched.ManualClock) -> None:
    with procsched.InlineScheduler(clock) as sched:
        periodic = sched.schedule_at_fixed_rate(lambda: None, 1)
        once = sched.schedule(lambda: 1, 2)
    assert periodic.cancelled() and once.result(timeout=0) == 1
    with pytest.raises(procsched.SchedulerClosedError):
        sched.submit(print)


def test_repr_shows_pending(sched: procsched.InlineScheduler) -> None:
    sched.schedule(print, 1)
    assert "pending=1" in repr(sched)


def test_manual_clock(clock: procsched.ManualClock) -> None:
    assert clock.now() == 0.0
    clock.advance(1.5)
    assert clock.now() == 1.5 and clock.now_ns() == 1_500_000_000
    with pytest.raises(ValueError, match="seconds"):
        clock.advance(-1)
    assert procsched.ManualClock(start=3).now() == 3.0
    assert "3.0" in repr(procsched.ManualClock(3))


def test_states_seen_by_a_running_task(sched: procsched.InlineScheduler) -> None:
    handles: list[procsched.TaskHandle] = []
    seen: list[tuple[TaskState, bool]] = []
    handles.append(sched.submit(lambda: seen.append((handles[0].state, handles[0].running()))))
    assert handles[0].state is TaskState.PENDING and not handles[0].running()
    sched.run_due()
    assert seen == [(TaskState.RUNNING, True)]
    assert handles[0].state is TaskState.DONE and not handles[0].running()
