"""The core's two inputs for several schedulers on one durable store
(issue 11): ``skip`` (another scheduler won this run's claim: go on to the
next slot, counting nothing) and ``realign`` (the store says where the task
is: run numbers and due time). ManualClock, no sleeping."""

from __future__ import annotations

from datetime import UTC, datetime

from procsched import ManualClock
from procsched._core import Kind, Misfire, Schedule, SchedulerCore, TaskState
from procsched._core._calendar import CronTrigger
from procsched._core._task import RetryPolicy

NS = 1_000_000_000


def test_skip_moves_a_fixed_rate_task_to_its_next_slot_without_counting() -> None:
    clock = ManualClock()
    core = SchedulerCore()
    tid = core.add(clock.now_ns() + NS, schedule=Schedule(Kind.FIXED_RATE, NS))
    clock.advance(1)
    run = core.claim(clock.now_ns())
    assert run is not None and run.run == 1
    done = core.skip(tid, 1, clock.now_ns())
    assert done is not None and done.state is TaskState.PENDING and done.next_due_ns == 2 * NS
    assert core.state(tid) is TaskState.PENDING and core.next_claim(tid) == (2, 1)
    assert core.skip(tid, 1, clock.now_ns()) is None  # not in flight any more: a stale skip changes nothing
    clock.advance(1)
    assert core.claim(clock.now_ns()).run == 2


def test_skip_is_late_like_a_run_catch_up_follows_the_grid() -> None:
    clock = ManualClock()
    core = SchedulerCore()
    tid = core.add(0, schedule=Schedule(Kind.FIXED_RATE, NS, misfire=Misfire.CATCH_UP))
    core.claim(0)
    clock.advance(3.5)  # the claim came back lost 3.5 s later: slots 1 s, 2 s, 3 s come one by one
    assert core.skip(tid, 1, clock.now_ns()).next_due_ns == NS


def test_skip_of_a_retry_goes_to_the_next_regular_slot_not_another_attempt() -> None:
    core = SchedulerCore()
    policy = RetryPolicy(3, 0, 1.0, 0, 0.0, frozenset({"crashed"}))
    tid = core.add(0, schedule=Schedule(Kind.FIXED_RATE, 10 * NS), retry=policy)
    core.claim(0)
    assert core.complete(tid, 1, "crashed", NS).retrying
    run = core.claim(NS)
    assert (run.run, run.attempt) == (1, 2)
    done = core.skip(tid, 1, NS)
    assert not done.retrying and done.next_due_ns == 10 * NS and core.next_claim(tid) == (2, 1)


def test_skip_of_a_one_shot_cancels_it_here_and_a_limit_ends_a_periodic_task() -> None:
    core = SchedulerCore()
    once = core.add(0)
    core.claim(0)
    done = core.skip(once, 1, 0)
    assert done.state is TaskState.CANCELLED and done.ended and core.state(once) is None
    limited = core.add(0, schedule=Schedule(Kind.FIXED_RATE, NS, max_runs=1))
    core.claim(0)
    assert core.skip(limited, 1, 0).state is TaskState.DONE  # the other scheduler ran the last run


def test_skip_keeps_a_pause_asked_and_a_cancel_during_the_claim() -> None:
    core = SchedulerCore()
    tid = core.add(0, schedule=Schedule(Kind.FIXED_RATE, NS))
    core.claim(0)
    assert core.pause(tid)
    assert core.skip(tid, 1, 0).state is TaskState.PAUSED
    other = core.add(0, schedule=Schedule(Kind.FIXED_RATE, NS))
    core.claim(0)
    core.cancel(other)
    assert core.skip(other, 1, 0).state is TaskState.CANCELLED and core.state(other) is None


def test_realign_sets_run_numbers_and_due_time() -> None:
    clock = ManualClock()
    core = SchedulerCore()
    tid = core.add(5 * NS, schedule=Schedule(Kind.FIXED_RATE, NS))
    assert core.realign(tid, 7, 1, 2 * NS)
    assert core.next_claim(tid) == (8, 1) and core.due(tid) == 2 * NS
    clock.advance(2)
    run = core.claim(clock.now_ns())
    assert (run.run, run.scheduled_ns) == (8, 2 * NS)
    assert not core.realign(tid, 9, 1, 3 * NS)  # RUNNING: not realigned
    assert core.claim(10 * NS) is None  # exactly one live entry: nothing left behind


def test_realign_to_a_retry_and_a_calendar_slot() -> None:
    core = SchedulerCore()
    tid = core.add(0, schedule=Schedule(Kind.FIXED_RATE, 10 * NS))
    assert core.realign(tid, 3, 2, NS)
    run = core.claim(NS)
    assert (run.run, run.attempt) == (3, 2)
    wall0 = int(datetime(2030, 1, 1, tzinfo=UTC).timestamp()) * NS
    core.set_wall_offset(wall0)
    cal = core.add(
        0, schedule=Schedule.calendar(CronTrigger("* * * * * *", UTC), Misfire.COALESCE), start_wall_ns=wall0
    )
    assert core.realign(cal, 4, 1, 0, slot_wall=wall0 + 5 * NS)
    assert core.due(cal) == 5 * NS and core.next_wall(cal) == wall0 + 5 * NS
    run = core.claim(5 * NS)
    assert (run.run, run.wall_ns) == (5, wall0 + 5 * NS)


def test_a_retry_realigned_from_the_store_keeps_its_runs_grid() -> None:
    """Issue 20 (the campaign's lost slots of r1): a take-over realigns a task to a retry of
    its run (attempt 2, due when the survivor took over); after it the fixed-rate grid goes
    on from that run's regular slot, catching up the slots missed meanwhile - not from the
    retry's due time (the grid shifted, and its slots were neither run nor recorded)."""
    core = SchedulerCore()
    tid = core.add(0, schedule=Schedule(Kind.FIXED_RATE, NS))  # (catch_up: the default misfire)
    # run 3's regular slot was 2 s; its first attempt crashed with its instance; retried at 4.3 s
    assert core.realign(tid, 3, 2, 4_300_000_000, base=2 * NS)
    run = core.claim(4_300_000_000)
    assert (run.run, run.attempt, run.scheduled_ns) == (3, 2, 4_300_000_000)
    core.complete(tid, 3, "ok", 4_400_000_000)
    slots = []
    while (nxt := core.claim(4_400_000_000)) is not None:  # the slots missed meanwhile, caught up
        slots.append((nxt.run, nxt.scheduled_ns))
        core.complete(tid, nxt.run, "ok", 4_400_000_000)
    assert slots == [(4, 3 * NS), (5, 4 * NS)] and core.due(tid) == 5 * NS
    # without the regular slot (not in the store's history), the grid goes on from the retry
    other = core.add(0, schedule=Schedule(Kind.FIXED_RATE, NS))
    assert core.realign(other, 3, 2, 4_300_000_000)
    core.claim(4_300_000_000)
    core.complete(other, 3, "ok", 4_400_000_000)
    assert core.due(other) == 5_300_000_000


def test_a_late_crash_that_is_retried_drops_no_slot_the_retry_then_catches_up() -> None:
    """The fault campaign's stores (seed 3404): a catch_up task's run ended
    late with a crash (a crash is not caught up: "skip") and was retried.
    The slots the crash's "skip" passed over were recorded skipped
    ("misfire"), then the retry went well and the grid went on from the
    run's slot, catch_up: every one of them ran too - one slot, two ends. A
    retried run drops nothing; what its last attempt drops is recorded then."""
    core = SchedulerCore()
    policy = RetryPolicy(2, 0, 1.0, 0, 0.0, frozenset({"crashed"}))
    tid = core.add(0, schedule=Schedule(Kind.FIXED_RATE, NS, misfire=Misfire.CATCH_UP), retry=policy)
    core.claim(0)
    done = core.complete(tid, 1, "crashed", 3 * NS + NS // 2)  # slots 1 s, 2 s, 3 s passed meanwhile
    assert done.retrying and done.missed == 0
    assert core.take_skips() == []
    retry = core.claim(3 * NS + NS // 2)
    assert (retry.run, retry.attempt) == (1, 2)
    done = core.complete(tid, 1, "ok", 4 * NS - 1)
    assert done.next_due_ns == NS and core.take_skips() == []  # catch_up: 1 s, 2 s, 3 s run, one by one

    tid = core.add(0, schedule=Schedule(Kind.FIXED_RATE, NS, misfire=Misfire.CATCH_UP), retry=policy)
    core.claim(0)
    core.complete(tid, 1, "crashed", NS // 2)
    core.claim(NS // 2)
    done = core.complete(tid, 1, "crashed", 2 * NS + NS // 2)  # its last attempt crashed too: "skip" to 3 s
    assert not done.retrying and done.next_due_ns == 3 * NS and done.missed == 2
    assert [(s.scheduled_ns, s.slots, s.reason) for s in core.take_skips()] == [(NS, 2, "misfire")]
