"""Schedule control in the core (manual clock): max_concurrent and overlap,
run now, backfill, misfire_grace, and every skipped slot recorded."""

from __future__ import annotations

import pytest

from procsched._core import Misfire, Overlap, Schedule, SchedulerCore, TaskState
from procsched._core._task import BACKFILL_MAX, SkipRecord

MS = 1_000_000
NS = 1_000_000_000


def rate(period_ms: int = 400, **fields: object) -> Schedule:
    return Schedule.fixed_rate(period_ms * MS)._replace(**fields)


def skips(core: SchedulerCore) -> list[tuple[int, str]]:
    """Each skipped slot (a record of a run of grid points expanded)."""
    return [((s.scheduled_ns + k * s.period_ns) // MS, s.reason) for s in core.take_skips() for k in range(s.slots)]


def test_wait_with_one_run_keeps_the_plain_path() -> None:
    schedule = rate()
    assert not schedule.controlled and schedule.chained and not schedule.limited


def test_overlap_skip_records_each_slot_and_goes_on_at_the_next_grid_point() -> None:
    core = SchedulerCore()
    tid = core.add(0, schedule=rate(overlap=Overlap.SKIP))
    run = core.claim(0)
    assert run is not None and run.run == 1 and run.cause == "schedule"
    assert core.due(tid) == 400 * MS  # detached: its next slot is queued at once
    assert core.state(tid) is TaskState.RUNNING
    assert core.claim(400 * MS) is None
    assert core.claim(800 * MS) is None
    assert skips(core) == [(400, "overlap"), (800, "overlap")]
    done = core.complete(tid, 1, "ok", 1000 * MS)
    assert done is not None and done.next_due_ns == 1200 * MS and done.state is TaskState.PENDING
    nxt = core.claim(1200 * MS)
    assert nxt is not None and nxt.run == 2 and nxt.scheduled_ns == 1200 * MS


def test_overlap_replace_ends_the_oldest_run_and_starts_the_slot() -> None:
    core = SchedulerCore()
    tid = core.add(0, schedule=rate(overlap=Overlap.REPLACE))
    core.add(0, schedule=rate(overlap=Overlap.REPLACE))  # another task: never touched
    first = core.claim(0)
    other = core.claim(0)
    assert first is not None and other is not None
    second = core.claim(400 * MS)
    assert second is not None and second.task_id == tid and second.run == 2
    assert core.take_replaced() == [(tid, 1)]
    ended = core.complete(tid, 1, "cancelled", 410 * MS)
    assert ended is not None and ended.reason == "replaced" and ended.outcome == "cancelled"
    assert ended.state is TaskState.RUNNING  # run 2 is running
    last = core.complete(tid, 2, "ok", 500 * MS)
    assert last is not None and last.reason is None


def test_max_concurrent_two_waits_then_misfire_decides() -> None:
    core = SchedulerCore()
    tid = core.add(0, schedule=rate(max_concurrent=2))
    assert [r.run for r in (core.claim(0), core.claim(400 * MS)) if r is not None] == [1, 2]
    assert core.claim(800 * MS) is None  # two running: the slot waits
    assert core.state(tid) is TaskState.RUNNING
    core.complete(tid, 1, "ok", 1000 * MS)
    late = core.claim(1000 * MS)
    assert late is not None and late.run == 3 and late.scheduled_ns == 800 * MS  # catch_up: runs late


def test_waiting_slot_under_skip_misfire_is_recorded() -> None:
    core = SchedulerCore()
    tid = core.add(0, schedule=rate(max_concurrent=2, misfire=Misfire.SKIP))
    core.claim(0)
    core.claim(400 * MS)
    assert core.claim(800 * MS) is None
    core.complete(tid, 1, "ok", 1300 * MS)
    assert skips(core) == [(800, "misfire"), (1200, "misfire")]
    assert core.due(tid) == 1600 * MS


def test_run_now_does_not_move_the_next_slot_and_is_numbered() -> None:
    core = SchedulerCore()
    tid = core.add(1000 * MS, schedule=rate(1000))
    assert core.run_now(tid, 100 * MS)
    run = core.claim(100 * MS)
    assert run is not None and run.cause == "manual" and run.run == 1 and run.scheduled_ns == 100 * MS
    assert core.due(tid) == 1000 * MS
    done = core.complete(tid, 1, "ok", 200 * MS)
    assert done is not None and done.state is TaskState.PENDING
    regular = core.claim(1000 * MS)
    assert regular is not None and regular.run == 2 and regular.cause == "schedule"


def test_run_now_while_running_waits_for_the_run_under_wait() -> None:
    core = SchedulerCore()
    tid = core.add(0, schedule=rate(1000))
    assert core.claim(0) is not None
    assert core.run_now(tid, 100 * MS)
    assert core.claim(100 * MS) is None  # one at a time: it waits
    done = core.complete(tid, 1, "ok", 300 * MS)
    assert done is not None and done.next_due_ns == 1000 * MS
    manual = core.claim(300 * MS)
    assert manual is not None and manual.cause == "manual" and manual.run == 2


def test_run_now_under_skip_when_full_answers_false() -> None:
    core = SchedulerCore()
    tid = core.add(0, schedule=rate(overlap=Overlap.SKIP))
    core.claim(0)
    assert not core.run_now(tid, 100 * MS)
    assert core.claim(100 * MS) is None


def test_run_now_of_a_paused_task_runs_once_and_it_stays_paused() -> None:
    core = SchedulerCore()
    tid = core.add(400 * MS, schedule=rate())
    assert core.pause(tid)
    assert core.run_now(tid, 0)
    run = core.claim(0)
    assert run is not None and run.cause == "manual"
    core.complete(tid, run.run, "ok", 10 * MS)
    assert core.state(tid) is TaskState.PAUSED
    assert core.claim(2 * NS) is None


def test_run_now_of_a_one_shot_is_refused() -> None:
    core = SchedulerCore()
    tid = core.add(NS)
    assert not core.run_now(tid, 0)


def test_misfire_skip_and_coalesce_record_dropped_slots() -> None:
    for misfire, expected in (
        (Misfire.SKIP, [(400, "misfire"), (800, "misfire")]),
        (Misfire.COALESCE, [(400, "misfire")]),
    ):
        core = SchedulerCore()
        tid = core.add(0, schedule=rate(misfire=misfire))
        core.claim(0)
        core.complete(tid, 1, "ok", 1000 * MS)
        assert skips(core) == expected


def test_paused_slots_are_recorded_at_resume() -> None:
    core = SchedulerCore()
    tid = core.add(400 * MS, schedule=rate())
    core.pause(tid)
    core.resume(tid, 1000 * MS)
    assert skips(core) == [(400, "paused"), (800, "paused")]
    assert core.due(tid) == 1200 * MS


def test_a_resume_records_from_the_slot_after_since_wall_where_the_grid_stood_later() -> None:
    """A durable store's follower whose grid went on "not before now" records
    a gone runner's pause from the store's last slot (``since_wall``); a
    ``since_wall`` past the grid's position changes nothing (the engine
    leaves out what the store accounts for)."""
    for since, expected in ((400, [800, 1200, 1600, 2000]), (401, [800, 1200, 1600, 2000]), (1600, [2000])):
        core = SchedulerCore()
        tid = core.add(400 * MS, schedule=rate())
        assert core.realign(tid, 4, 1, 2000 * MS)  # runs 1-4 ran elsewhere; this one went on "not before now"
        core.pause(tid)
        core.resume(tid, 2100 * MS, since_wall=since * MS)
        assert skips(core) == [(slot, "paused") for slot in expected]
        assert core.due(tid) == 2400 * MS


def test_a_calendar_resume_records_from_the_slot_after_since_wall() -> None:
    from procsched import _tz
    from procsched._core import CronTrigger

    trigger = CronTrigger("* * * * *", _tz.zone("UTC"), "UTC")
    core = SchedulerCore()
    tid = core.add(60 * NS, 0, Schedule.calendar(trigger), start_wall_ns=0, first_slot_ns=60 * NS)
    assert core.realign(tid, 4, 1, 0, slot_wall=300 * NS)
    core.pause(tid)
    core.resume(tid, 330 * NS, since_wall=60 * NS)
    recorded = [(s.wall_ns // NS, s.reason) for s in core.take_skips()]
    assert recorded == [(t, "paused") for t in (120, 180, 240, 300)]


def test_misfire_grace_skips_late_slots() -> None:
    core = SchedulerCore()
    tid = core.add(0, schedule=rate(misfire_grace_ns=100 * MS))
    run = core.claim(900 * MS)  # 0 and 400 are late; 800 is 100 ms late: within the grace
    assert run is not None and run.scheduled_ns == 800 * MS and run.run == 1
    assert skips(core) == [(0, "late"), (400, "late")]
    assert core.state(tid) is TaskState.RUNNING


def test_misfire_grace_on_a_one_shot_cancels_it() -> None:
    core = SchedulerCore()
    tid = core.add(0, schedule=Schedule.once()._replace(misfire_grace_ns=0))
    assert core.claim(1) is None
    assert core.take_skips() == [SkipRecord(tid, 0, 0, "late", TaskState.CANCELLED)]
    assert core.state(tid) is None


def test_backfill_runs_slots_one_after_another_in_order() -> None:
    core = SchedulerCore()
    tid = core.add(10 * NS, schedule=rate(1000))
    slots = core.backfill_slots(tid, 2 * NS, 5 * NS, now=6 * NS)
    assert [wall // NS for _, wall in slots] == [2, 3, 4]
    assert core.backfill(tid, slots, 6 * NS)
    first = core.claim(6 * NS)
    assert first is not None and first.cause == "backfill" and first.scheduled_ns == 2 * NS
    assert core.claim(6 * NS) is None  # one after another
    core.complete(tid, first.run, "ok", 6 * NS + 1)
    second = core.claim(6 * NS + 1)
    assert second is not None and second.scheduled_ns == 3 * NS and second.wall_ns == 3 * NS
    core.complete(tid, second.run, "ok", 6 * NS + 2)
    third = core.claim(6 * NS + 2)
    assert third is not None and third.scheduled_ns == 4 * NS
    core.complete(tid, third.run, "ok", 6 * NS + 3)
    assert core.claim(7 * NS) is None
    assert core.due(tid) == 10 * NS


def test_backfill_slots_stop_at_now_and_refuse_bad_input() -> None:
    core = SchedulerCore()
    tid = core.add(0, schedule=rate(1000))
    assert [w // NS for _, w in core.backfill_slots(tid, 0, 100 * NS, now=2 * NS)] == [0, 1, 2]
    with pytest.raises(ValueError, match="before end"):
        core.backfill_slots(tid, 5 * NS, 5 * NS, now=6 * NS)
    with pytest.raises(ValueError, match="more than 10000"):
        core.backfill_slots(tid, 0, (BACKFILL_MAX + 5) * NS, now=(BACKFILL_MAX + 5) * NS)
    delay = core.add(0, schedule=Schedule.fixed_delay(NS))
    with pytest.raises(ValueError, match="fixed-delay"):
        core.backfill_slots(delay, 0, NS, now=NS)
    once = core.add(0)
    with pytest.raises(ValueError, match="once"):
        core.backfill_slots(once, 0, NS, now=NS)


def test_cancel_interrupt_of_a_controlled_task_with_runs_in_flight() -> None:
    core = SchedulerCore()
    tid = core.add(0, schedule=rate(max_concurrent=2))
    core.claim(0)
    core.claim(400 * MS)
    assert core.cancel(tid, interrupt=True).accepted
    assert core.state(tid) is TaskState.CANCELLED
    core.complete(tid, 1, "cancelled", 500 * MS)
    core.complete(tid, 2, "cancelled", 500 * MS)
    assert core.state(tid) is None and len(core) == 0
    assert core.claim(10 * NS) is None


def test_max_runs_counts_scheduled_runs_only() -> None:
    core = SchedulerCore()
    tid = core.add(0, schedule=rate(1000, max_runs=1))
    core.run_now(tid, 0)
    manual = core.claim(0)
    assert manual is not None and manual.cause == "manual"
    core.complete(tid, manual.run, "ok", 1)
    regular = core.claim(1)
    assert regular is not None and regular.cause == "schedule" and regular.run == 2
    done = core.complete(tid, 2, "ok", 2)
    assert done is not None and done.ended and done.state is TaskState.DONE


def test_schedule_fields_cross_the_wire_and_the_record() -> None:
    schedule = rate(max_concurrent=3, overlap=Overlap.REPLACE, misfire_grace_ns=5 * MS)
    assert Schedule.from_wire(schedule.to_wire(), lambda zone: None) == schedule  # type: ignore[arg-type,return-value]
    record = schedule.to_record(0, 0)
    assert record["max_concurrent"] == 3 and record["overlap"] == "replace" and record["misfire_grace_ns"] == 5 * MS
    assert Schedule.from_record(record, {}, 0, lambda zone: None)[0] == schedule  # type: ignore[arg-type,return-value]
    plain = rate().to_record(0, 0)
    assert "max_concurrent" not in plain and "overlap" not in plain and "misfire_grace_ns" not in plain
    old = {"v": 2, "kind": "fixed_rate", "delay_ns": 0, "period_ns": 400 * MS, "misfire": "catch_up"}
    assert Schedule.from_record(old, {}, 0, lambda zone: None)[0] == rate()  # type: ignore[arg-type,return-value]


def timeline(schedule: Schedule, until_ms: int = 2700) -> tuple[list[int], list[tuple[int, str]], list[int]]:
    """README's experiment on the core: fixed rate 400 ms, first slot at 200 ms,
    every run taking 1 s. Returns the runs' start times, the skipped slots and
    the replaced runs' numbers (ms)."""
    core = SchedulerCore()
    tid = core.add(200 * MS, schedule=schedule)
    ends: dict[int, int] = {}  # run -> end time
    starts: list[int] = []
    replaced: list[int] = []
    now = 0
    while now <= until_ms * MS:
        for run, end in sorted(ends.items()):
            if end <= now:
                del ends[run]
                core.complete(tid, run, "ok", now)
        while (claimed := core.claim(now)) is not None:
            starts.append(now // MS)
            ends[claimed.run] = now + NS
            for _, old in core.take_replaced():
                replaced.append(old)
                del ends[old]
                core.complete(tid, old, "cancelled", now)
        due = core.next_deadline()
        following = min([*ends.values(), *([due] if due is not None else [])], default=None)
        if following is None:
            break
        now = max(following, now + 1)
    return starts, skips(core), replaced


def test_the_readme_timelines() -> None:
    skip = timeline(rate(overlap=Overlap.SKIP))
    assert skip[0] == [200, 1400, 2600]
    assert skip[1] == [(600, "overlap"), (1000, "overlap"), (1800, "overlap"), (2200, "overlap")]
    replace = timeline(rate(overlap=Overlap.REPLACE))
    assert replace[0] == [200, 600, 1000, 1400, 1800, 2200, 2600] and replace[2] == [1, 2, 3, 4, 5, 6]
    three = timeline(rate(max_concurrent=3))
    assert three[0] == [200, 600, 1000, 1400, 1800, 2200, 2600] and three[1] == []


def test_backfill_slots_keep_to_the_grid_while_a_retry_is_queued() -> None:
    from procsched._core import RetryPolicy

    core = SchedulerCore()
    retry = RetryPolicy(3, 123 * MS, 1.0, NS, 0.0, frozenset({"error"}))
    tid = core.add(0, schedule=rate(1000), retry=retry)
    run = core.claim(0)
    assert run is not None
    done = core.complete(tid, 1, "error", 10 * MS)
    assert done is not None and done.retrying  # queued at 133 ms: off the grid
    assert [w // MS for _, w in core.backfill_slots(tid, 0, 3 * NS, now=3 * NS)] == [0, 1000, 2000]


def _ny_hourly() -> Schedule:
    from procsched import _tz
    from procsched._core import CronTrigger

    return Schedule.calendar(CronTrigger("0 * * * *", _tz.zone("America/New_York"), "America/New_York"))


def _wall_ns(text: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(text).timestamp()) * NS


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        # fall back (Nov 1 2026): 01:00 EDT and 01:00 EST both fire
        ("2026-11-01T00:00:00-04:00", "2026-11-01T03:00:00-05:00", ["04:00", "05:00", "06:00", "07:00"]),
        # spring forward (Mar 8 2026): 02:00 does not exist; 01:00 EST then 03:00 EDT
        ("2026-03-08T00:00:00-05:00", "2026-03-08T04:00:00-04:00", ["05:00", "06:00", "07:00"]),
    ],
)
def test_backfill_of_a_cron_task_across_dst_lists_its_fire_times(start: str, end: str, expected: list[str]) -> None:
    from datetime import UTC, datetime

    core = SchedulerCore()
    now_wall = _wall_ns("2026-12-01T00:00:00+00:00")
    core.set_wall_offset(now_wall)  # the core's clock at 0 is this wall time
    tid = core.add(0, schedule=_ny_hourly(), start_wall_ns=now_wall)
    slots = core.backfill_slots(tid, _wall_ns(start), _wall_ns(end), now=0)
    assert [datetime.fromtimestamp(w / NS, UTC).strftime("%H:%M") for _, w in slots] == expected


def test_a_retry_in_flight_counts_as_running() -> None:
    from procsched._core import RetryPolicy

    core = SchedulerCore()
    retry = RetryPolicy(2, 10 * MS, 1.0, NS, 0.0, frozenset({"error"}))
    tid = core.add(0, schedule=rate(overlap=Overlap.SKIP), retry=retry)
    core.claim(0)
    done = core.complete(tid, 1, "error", 300 * MS)
    assert done is not None and done.retrying
    again = core.claim(310 * MS)
    assert again is not None and again.run == 1 and again.attempt == 2
    assert core.claim(400 * MS) is None  # the retry is running: the slot is skipped
    assert skips(core) == [(400, "overlap")]


def test_a_wall_clock_step_records_the_slots_it_dropped() -> None:
    from procsched import _tz
    from procsched._core import CronTrigger, Misfire

    core = SchedulerCore()
    start = _wall_ns("2026-12-01T00:30:00+00:00")
    core.set_wall_offset(start)
    hourly = Schedule.calendar(CronTrigger("0 * * * *", _tz.zone("UTC"), "UTC"), Misfire.COALESCE)
    tid = core.add(0, schedule=hourly, start_wall_ns=start)
    core.set_wall_offset(start + 5 * 3600 * NS, now=0)  # asleep 00:30 -> 05:30
    dropped = [s.wall_ns for s in core.take_skips()]
    assert [(w - _wall_ns("2026-12-01T00:00:00+00:00")) // (3600 * NS) for w in dropped] == [1, 2, 3, 4]
    assert core.next_wall(tid) == _wall_ns("2026-12-01T05:00:00+00:00")  # coalesce: 05:00 runs once, for all
