"""Shared limits and jitter in the core (manual time, no sleeping).

A group's due runs wait while the group is full and start in priority order
when a unit frees; any end of a run frees it (ok, error, crash, cancel,
timeout); a cancelled or paused waiter never blocks the group. Jitter puts
each slot off by a delay in [0, jitter) and leaves scheduled_ns the slot.
"""

from __future__ import annotations

import re

import pytest

from procsched import _tz
from procsched._core import ONCE, Kind, Schedule, SchedulerCore
from procsched._core._limits import checked_group, checked_limits

NS = 1_000_000_000
MS = 1_000_000
DB = Schedule(Kind.ONCE, group="db")


def started(core: SchedulerCore, now: int) -> list[object]:
    """Claim everything that may start at ``now``; the payloads, in order."""
    out = []
    while (run := core.claim(now)) is not None:
        out.append(run)
    return [r.payload for r in out]


@pytest.mark.parametrize("policy", ["priority", "due", "fifo"])
def test_a_full_group_makes_its_runs_wait(policy: str) -> None:
    core = SchedulerCore(policy, limits={"db": 2})
    for name in "abcd":
        core.add(0, 0, DB, payload=name)
    core.add(0, 0, ONCE, payload="free")  # not in the group: never gated
    assert started(core, 0) == ["a", "b", "free"]
    assert core.next_deadline() is None  # c and d wait for a unit, not for time


@pytest.mark.parametrize("outcome", ["ok", "error", "crashed", "timeout", "cancelled"])
def test_any_end_of_a_run_frees_its_unit(outcome: str) -> None:
    core = SchedulerCore(limits={"db": 1})
    a = core.add(0, 0, DB, payload="a")
    core.add(0, 0, DB, payload="b")
    assert started(core, 0) == ["a"]
    core.complete(a, 1, outcome, 5)  # type: ignore[arg-type]
    assert core.next_deadline() == 0  # due again: the waiter comes back
    assert started(core, 5) == ["b"]


def test_waiters_start_in_priority_order_when_a_unit_frees() -> None:
    core = SchedulerCore("priority", limits={"db": 1})
    first = core.add(0, 0, DB, payload="first")
    assert started(core, 0) == ["first"]
    for name, prio in [("low", -5), ("high", 10), ("mid", 0), ("mid2", 0)]:
        core.add(1, prio, DB, payload=name)
    core.add(1, -100, ONCE, payload="other")  # another task: runs, the group's wait does not hold it
    assert started(core, 1) == ["other"]
    order = []
    tid, run = first, 1
    for now in range(2, 6):
        core.complete(tid, run, "ok", now)
        (r,) = [core.claim(now)]
        assert r is not None and core.claim(now) is None  # one unit: one start
        order.append(r.payload)
        tid, run = r.task_id, r.run
    assert order == ["high", "mid", "mid2", "low"]


def test_a_cancelled_run_in_flight_frees_the_group() -> None:
    core = SchedulerCore(limits={"db": 1})
    tid = core.add(0, 0, Schedule.fixed_rate(10 * MS)._replace(group="db"), payload="p")
    core.add(0, 0, DB, payload="w")
    assert started(core, 0) == ["p"]
    assert core.cancel(tid, interrupt=True).accepted
    core.complete(tid, 1, "cancelled", 1)
    assert started(core, 1) == ["w"]


def test_a_cancelled_or_paused_waiter_never_blocks_the_group() -> None:
    core = SchedulerCore(limits={"db": 1})
    a = core.add(0, 0, DB, payload="a")
    assert started(core, 0) == ["a"]
    gone = core.add(0, 5, DB, payload="gone")
    held = core.add(0, 4, Schedule.fixed_rate(NS)._replace(group="db"), payload="held")
    core.add(0, 0, DB, payload="last")
    assert started(core, 0) == []  # all three wait
    assert core.cancel(gone).accepted
    assert core.pause(held)
    core.complete(a, 1, "ok", 1)
    assert started(core, 1) == ["last"]
    assert core.resume(held, 2)


def test_a_crashed_periodic_run_frees_its_unit_and_the_next_slot_waits_its_turn() -> None:
    core = SchedulerCore(limits={"db": 1})
    rate = core.add(0, 0, Schedule.fixed_rate(10 * MS)._replace(group="db"), payload="rate")
    core.add(5 * MS, 0, DB, payload="one")
    assert started(core, 0) == ["rate"]
    assert started(core, 5 * MS) == []  # full
    core.complete(rate, 1, "crashed", 20 * MS)
    # "one" (due at 5 ms) ranks before the next slot (20 ms: the crash skipped the backlog)
    assert started(core, 20 * MS) == ["one"]
    assert core.claim(20 * MS) is None


def test_a_group_without_a_limit_here_is_not_gated() -> None:
    core = SchedulerCore(limits={"db": 1})
    for name in "ab":
        core.add(0, 0, Schedule(Kind.ONCE, group="elsewhere"), payload=name)
    assert started(core, 0) == ["a", "b"]


def test_compaction_keeps_the_waiters() -> None:
    core = SchedulerCore(limits={"db": 1})
    a = core.add(0, 0, DB, payload="a")
    waiters = [core.add(0, 0, DB, payload=i) for i in range(3)]
    assert started(core, 0) == ["a"]
    for tid in [core.add(10, 0, ONCE) for _ in range(500)]:  # dead entries enough to compact
        core.cancel(tid)
    assert core.next_deadline() is not None  # compaction put the waiters back in the heaps
    assert started(core, 1) == []  # and the claim parks them again: still full
    order = []
    tid, run = a, 1
    for now in range(2, 5):
        core.complete(tid, run, "ok", now)
        r = core.claim(now)
        assert r is not None
        order.append(r.payload)
        tid, run = r.task_id, r.run
    assert order == [0, 1, 2] and waiters


def test_jitter_puts_each_slot_off_within_the_bound_and_keeps_scheduled_ns_the_slot() -> None:
    jitter = 300 * MS
    core = SchedulerCore(seed=7)
    period = NS
    tid = core.add(0, 0, Schedule.fixed_rate(period)._replace(jitter_ns=jitter), payload="j")
    delays = []
    now = 0
    for slot in range(0, 50 * period, period):
        now = max(now, slot)
        start = now
        run = core.claim(now)
        if run is None:  # put off (a delay of 0 ns starts at once)
            start = core.next_deadline()  # type: ignore[assignment]
            assert start is not None and slot <= start < slot + jitter
            run = core.claim(start)
        assert run is not None and run.scheduled_ns == slot and run.run == slot // period + 1
        delays.append(start - slot)
        core.complete(tid, run.run, "ok", start + MS)
        now = start + MS
    assert len(set(delays)) > 40 and max(delays) < jitter  # spread, never reaching the bound


def test_jitter_is_the_seeds() -> None:
    def starts(seed: int) -> list[int]:
        core = SchedulerCore(seed=seed)
        core.add(0, 0, Schedule.fixed_rate(NS)._replace(jitter_ns=NS // 2), payload="j")
        core.claim(0)
        due = core.next_deadline()
        assert due is not None
        return [due]

    assert starts(1) == starts(1) != starts(2)


def test_a_paused_jittered_task_resumes_on_its_grid() -> None:
    core = SchedulerCore(seed=3)
    tid = core.add(0, 0, Schedule.fixed_rate(NS)._replace(jitter_ns=NS // 2), payload="j")
    assert core.claim(0) is None
    assert core.pause(tid)
    assert core.resume(tid, 3 * NS + 1)
    assert core.due(tid) == 4 * NS  # the grid point, not the grid point + the old delay
    assert core.claim(4 * NS) is None  # a fresh delay
    start = core.next_deadline()
    assert start is not None
    run = core.claim(start)
    assert run is not None and run.scheduled_ns == 4 * NS


def test_a_cron_slot_is_jittered_and_reported_at_its_fire_time() -> None:
    from procsched._core import CronTrigger

    trigger = CronTrigger("* * * * *", _tz.zone("UTC"), "UTC")
    core = SchedulerCore(seed=5)
    core.add(0, 0, Schedule.calendar(trigger)._replace(jitter_ns=10 * NS), start_wall_ns=0)
    assert core.claim(60 * NS) is None
    start = core.next_deadline()
    assert start is not None and 60 * NS <= start < 70 * NS
    run = core.claim(start)
    assert run is not None and run.scheduled_ns == 60 * NS and run.wall_ns == 60 * NS


def test_jitter_and_group_survive_the_wire_and_the_record() -> None:
    schedule = Schedule.fixed_rate(NS)._replace(jitter_ns=5 * MS, group="db")
    assert Schedule.from_wire(schedule.to_wire(), _tz.zone) == schedule
    record = schedule.to_record(0, 0)
    assert record["jitter_ns"] == 5 * MS and record["group"] == "db"
    assert Schedule.from_record(record, {}, 0, _tz.zone) == (schedule, 0)
    once = Schedule(Kind.ONCE, group="db")
    assert Schedule.from_wire(once.to_wire(), _tz.zone) == once


def test_records_without_jitter_or_group_load_as_before() -> None:
    old = {"v": 2, "kind": "fixed_rate", "delay_ns": 0, "period_ns": NS, "misfire": "catch_up"}
    assert Schedule.from_record(old, {}, 0, _tz.zone) == (Schedule.fixed_rate(NS), 0)
    first_release = {"kind": "fixed_rate", "period_ns": NS, "initial_delay_ns": 0, "misfire": "skip"}
    schedule, _ = Schedule.from_record(first_release, {}, 0, _tz.zone)
    assert schedule.jitter_ns == 0 and schedule.group is None
    assert "jitter_ns" not in Schedule.fixed_rate(NS).to_record(0, 0)  # unchanged records, unchanged hashes


@pytest.mark.parametrize(
    ("value", "error", "says"),
    [
        ([("db", 2)], TypeError, "limits must be a mapping"),
        ({1: 2}, TypeError, "a group name must be a str, not int 1"),
        ({"": 2}, ValueError, "must not be empty"),
        ({"db": 0}, ValueError, "limits['db'] must be an int >= 1, not 0"),
        ({"db": 1.5}, TypeError, "limits['db'] must be an int >= 1, not float 1.5"),
        ({"db": True}, TypeError, "limits['db'] must be an int >= 1, not bool True"),
    ],
)
def test_bad_limits_are_refused_naming_them(value: object, error: type[Exception], says: str) -> None:
    with pytest.raises(error, match=re.escape(says)):
        checked_limits(value)


def test_an_unknown_group_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="group 'web' is not one of this scheduler's limits"):
        checked_group("web", {"db": 2})
    with pytest.raises(TypeError, match="group must be a str or None, not int 3"):
        checked_group(3, {"db": 2})
    assert checked_group("db", {"db": 2}) == "db" and checked_group(None, {}) is None


def test_a_run_now_waits_for_its_group_too() -> None:
    core = SchedulerCore(limits={"db": 1})
    busy = core.add(0, 0, DB, payload="busy")
    other = core.add(10 * NS, 0, Schedule.fixed_rate(10 * NS)._replace(group="db"), payload="other")
    assert started(core, 0) == ["busy"]
    assert core.run_now(other, 1)
    assert core.claim(1) is None  # the group is full: the manual run waits
    core.complete(busy, 1, "ok", 2)
    run = core.claim(2)
    assert run is not None and run.payload == "other" and run.cause == "manual"
    assert core.claim(3) is None
    core.complete(other, run.run, "ok", 3)
    assert core.next_deadline() == 10 * NS  # its schedule did not move


def test_misfire_grace_counts_from_the_jittered_start() -> None:
    core = SchedulerCore(seed=11)
    schedule = Schedule.fixed_rate(10 * NS)._replace(jitter_ns=5 * NS, misfire_grace_ns=NS // 10)
    core.add(0, 0, schedule, payload="j")
    assert core.claim(0) is None  # put off (seed 11: not by 0 ns)
    start = core.next_deadline()
    assert start is not None and start > NS // 10  # later than the grace after the slot: still not late
    run = core.claim(start + NS // 20)
    assert run is not None and run.scheduled_ns == 0
    assert core.take_skips() == []
