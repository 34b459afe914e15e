"""Cancel rules, on the core (CancelResult) and through InlineScheduler."""

from __future__ import annotations

import concurrent.futures

import pytest

import procsched
from procsched import TaskState
from procsched._core import CancelResult, Kind, Schedule, SchedulerCore

PERIODIC = [Kind.FIXED_RATE, Kind.FIXED_DELAY]

# -- the core's decisions ---------------------------------------------------------


@pytest.mark.parametrize("kind", list(Kind))
@pytest.mark.parametrize("interrupt", [False, True])
def test_pending_is_cancelled(kind: Kind, interrupt: bool) -> None:
    core = SchedulerCore()
    tid = core.add(10, schedule=Schedule(kind, 5))
    result = core.cancel(tid, interrupt)
    assert result is CancelResult.CANCELLED and result.accepted
    assert core.state(tid) is None and len(core) == 0
    assert core.claim(10**12) is None


@pytest.mark.parametrize("kind", PERIODIC)
def test_running_periodic_is_stopped_and_its_run_finishes(kind: Kind) -> None:
    core = SchedulerCore()
    tid = core.add(0, schedule=Schedule(kind, 5))
    run = core.claim(0)
    assert run is not None
    result = core.cancel(tid)
    assert result is CancelResult.STOPPED and result.accepted
    assert core.state(tid) is TaskState.CANCELLED and len(core) == 0
    # the run in flight is still the task's current run, and it finishes
    done = core.complete(tid, run.run, "ok", 3)
    assert done is not None and done.state is TaskState.CANCELLED and done.next_due_ns is None
    assert core.claim(10**12) is None and core.next_deadline() is None
    assert core.state(tid) is None


def test_running_one_shot_is_refused() -> None:
    core = SchedulerCore()
    tid = core.add(0)
    run = core.claim(0)
    assert run is not None
    result = core.cancel(tid)
    assert result is CancelResult.REFUSED and not result.accepted
    assert core.state(tid) is TaskState.RUNNING and len(core) == 1
    done = core.complete(tid, run.run, "ok", 1)
    assert done is not None and done.state is TaskState.DONE


@pytest.mark.parametrize("kind", list(Kind))
def test_running_with_interrupt_is_interrupted(kind: Kind) -> None:
    core = SchedulerCore()
    tid = core.add(0, schedule=Schedule(kind, 5))
    run = core.claim(0)
    assert run is not None
    result = core.cancel(tid, interrupt=True)
    assert result is CancelResult.INTERRUPT and result.accepted
    assert core.state(tid) is TaskState.CANCELLED and len(core) == 0
    done = core.complete(tid, run.run, "cancelled", 1)
    assert done is not None and (done.state, done.ended) == (TaskState.CANCELLED, False)
    assert core.state(tid) is None and core.claim(10**12) is None


@pytest.mark.parametrize("how", ["done", "failed", "cancelled", "stopping", "unknown"])
@pytest.mark.parametrize("interrupt", [False, True])
def test_finished_cancelled_or_unknown_is_not_cancelled(how: str, interrupt: bool) -> None:
    core = SchedulerCore()
    kind = Kind.FIXED_RATE if how == "stopping" else Kind.ONCE
    tid = core.add(0, schedule=Schedule(kind, 5))
    if how == "cancelled":
        core.cancel(tid)
    elif how == "unknown":
        tid += 100
    else:
        run = core.claim(0)
        assert run is not None
        if how == "stopping":
            core.cancel(tid)
        else:
            core.complete(tid, 1, "ok" if how == "done" else "error", 0)
    result = core.cancel(tid, interrupt)
    assert result is CancelResult.UNKNOWN and not result.accepted


def test_cancel_all_cancels_in_submission_order_and_leaves_running_one_shots() -> None:
    core = SchedulerCore()
    running_once = core.add(0)
    running_rate = core.add(0, schedule=Schedule(Kind.FIXED_RATE, 5))
    core.claim(0)
    core.claim(0)
    later = core.add(10)
    later_rate = core.add(10, schedule=Schedule(Kind.FIXED_DELAY, 5))
    assert core.cancel_all(periodic_only=True) == [
        (running_rate, CancelResult.STOPPED),
        (later_rate, CancelResult.CANCELLED),
    ]
    assert core.cancel_all() == [
        (running_once, CancelResult.REFUSED),
        (running_rate, CancelResult.UNKNOWN),  # already cancelled; its last run in flight
        (later, CancelResult.CANCELLED),
    ]
    assert len(core) == 1 and core.next_deadline() is None


# -- through InlineScheduler ------------------------------------------------------


def test_cancel_pending_task(sched: procsched.InlineScheduler, clock: procsched.ManualClock) -> None:
    ran = []
    handle = sched.schedule(ran.append, 1, args=("x",))
    assert sched.pending() == 1
    assert sched.cancel(handle.id) is True
    assert handle.state is TaskState.CANCELLED and handle.cancelled() and handle.done()
    assert handle.next_run is None and sched.pending() == 0
    with pytest.raises(concurrent.futures.CancelledError):
        handle.result(timeout=0)
    assert sched.run_until(10) == 0 and ran == []
    assert sched.cancel(handle.id) is False
    assert handle.cancel() is False


def test_handle_cancel_delegates_to_the_scheduler(sched: procsched.InlineScheduler) -> None:
    handle = sched.schedule_at_fixed_rate(lambda: None, 1)
    assert handle.cancel() is True
    assert handle.state is TaskState.CANCELLED and sched.pending() == 0


def test_cancel_unknown_and_finished(sched: procsched.InlineScheduler) -> None:
    handle = sched.submit(lambda: 1)
    sched.run_due()
    assert handle.result() == 1
    assert sched.cancel(handle.id) is False
    assert sched.cancel(handle.id, interrupt=True) is False
    assert sched.cancel(12345) is False
    assert handle.state is TaskState.DONE and not handle.cancelled()


@pytest.mark.parametrize("method", ["schedule_at_fixed_rate", "schedule_with_fixed_delay"])
def test_periodic_task_cancelling_itself(sched: procsched.InlineScheduler, method: str) -> None:
    answers = []

    def job() -> str:
        if procsched.current_run().run == 3:
            me = procsched.current_run().task_id
            answers.append(procsched.current_scheduler().cancel(me))
            answers.append(procsched.current_scheduler().cancel(me))  # already cancelled
        return "ran"

    handle = getattr(sched, method)(job, 1)
    assert sched.run_until(10) == 3
    assert answers == [True, False]
    # the run that cancelled finishes normally and is recorded; no further runs
    assert [r.outcome for r in handle.runs] == ["ok", "ok", "ok"]
    assert handle.state is TaskState.CANCELLED and handle.cancelled()
    assert handle.next_run is None and sched.pending() == 0
    with pytest.raises(concurrent.futures.CancelledError):
        handle.result(timeout=0)


def test_one_shot_task_cannot_cancel_itself_without_interrupt(sched: procsched.InlineScheduler) -> None:
    answers = []

    def job() -> str:
        answers.append(procsched.current_scheduler().cancel(procsched.current_run().task_id))
        return "finished"

    handle = sched.submit(job)
    assert sched.run_due() == 1
    assert answers == [False]
    assert handle.result(timeout=0) == "finished" and handle.state is TaskState.DONE


def test_one_shot_task_interrupting_itself(sched: procsched.InlineScheduler) -> None:
    answers = []

    def job() -> str:
        answers.append(procsched.current_scheduler().cancel(procsched.current_run().task_id, interrupt=True))
        return "discarded"

    handle = sched.submit(job)
    assert sched.run_due() == 1
    assert answers == [True]
    assert handle.cancelled() and handle.state is TaskState.CANCELLED
    assert [r.outcome for r in handle.runs] == ["cancelled"]
    assert sched.pending() == 0


def test_task_cancelling_another_pending_task(sched: procsched.InlineScheduler) -> None:
    ran = []
    victim = sched.schedule(ran.append, 5, args=("victim",))
    killer = sched.schedule(lambda: procsched.current_scheduler().cancel(victim.id), 1)
    sched.run_until(10)
    assert killer.result() is True
    assert victim.cancelled() and ran == []


def test_task_scheduling_a_follow_up(sched: procsched.InlineScheduler, clock: procsched.ManualClock) -> None:
    seen: list[tuple[str, float]] = []
    follow_ups: list[procsched.TaskHandle] = []

    def child(tag: str) -> None:
        seen.append((tag, clock.now()))

    def parent() -> None:
        seen.append(("parent", clock.now()))
        s = procsched.current_scheduler()
        follow_ups.append(s.schedule(child, 0, args=("now",)))
        follow_ups.append(s.schedule(child, 2, args=("later",)))

    sched.schedule(parent, 1)
    assert sched.run_until(2) == 2  # parent and its 0-delay follow-up
    assert seen == [("parent", 1.0), ("now", 1.0)]
    assert sched.run_until(5) == 1
    assert seen[-1] == ("later", 3.0)
    assert all(h.state is TaskState.DONE for h in follow_ups)


def test_cancel_rejects_a_non_bool_interrupt(sched: procsched.InlineScheduler) -> None:
    handle = sched.schedule(lambda: None, 1)
    with pytest.raises(TypeError, match="interrupt"):
        sched.cancel(handle.id, interrupt="yes")  # type: ignore[arg-type]
    assert sched.pending() == 1 and handle.state is TaskState.PENDING


def test_shutdown_from_inside_a_periodic_task(sched: procsched.InlineScheduler) -> None:
    """shutdown() stops the periodic task that is running it; that run still finishes."""
    handle = sched.schedule_at_fixed_rate(lambda: procsched.current_scheduler().shutdown(wait=False), 1)
    assert sched.run_until(5) == 1
    assert handle.cancelled() and [r.outcome for r in handle.runs] == ["ok"]
    assert sched.pending() == 0
    with pytest.raises(procsched.SchedulerClosedError):
        sched.submit(print)


def test_shutdown_cancels_periodic_and_runs_remaining_one_shots(
    sched: procsched.InlineScheduler, clock: procsched.ManualClock
) -> None:
    periodic = sched.schedule_at_fixed_rate(lambda: None, 1)
    once = sched.schedule(lambda: "x", 3)
    sched.shutdown()
    assert periodic.cancelled() and once.result(timeout=0) == "x"
    assert clock.now() == 3.0


def test_shutdown_cancel_futures(sched: procsched.InlineScheduler) -> None:
    once = sched.schedule(lambda: "x", 3)
    sched.shutdown(cancel_futures=True)
    assert once.cancelled() and sched.pending() == 0
