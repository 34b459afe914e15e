"""Calendar schedules on a ManualClock: every DST rule of DESIGN.md across the
2026 transitions of America/New_York, Europe/Berlin and Australia/Lord_Howe
(a 30-minute shift), wall-clock steps, misfires, and a property test against
a brute-force walk of real time, minute by minute.

Rules (DESIGN.md, "Calendar schedules", cronie's):
  gap     - a time in a spring-forward gap runs once, at the first instant after it;
  fixed   - a time that happens twice at fall-back runs once, at its first
            occurrence, when the hour field is a fixed value or a list;
  wild    - with `*`, a range or a step in the hour field, it fires at every
            matching instant of real time (both 01:00s; 23 times on a spring day).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

import procsched
from procsched import InlineScheduler, ManualClock, TaskState, current_run
from procsched._tz import next_fire_times

UTC = UTC


def fires(expr: str, tz: str, start_local: str, hours: float, **options: object) -> list[str]:
    """Run ``expr`` on an InlineScheduler for ``hours`` from ``start_local`` (in
    ``tz``); return each run's slot as local "MM-DD HH:MM+hhmm". Also checks
    that each run started exactly at its slot, on the wall clock."""
    zone = ZoneInfo(tz)
    start = datetime.fromisoformat(start_local).replace(tzinfo=zone)
    clock = ManualClock(wall=start)
    sched = InlineScheduler(clock)
    seen: list[datetime] = []

    def job() -> None:
        info = current_run()
        assert info.scheduled_at == clock.wall_now()  # on time, to the microsecond
        assert info.scheduled_at.tzinfo is not None and info.scheduled_at.utcoffset() == timedelta(0)
        seen.append(info.scheduled_at)

    sched.schedule_cron(job, expr, tz=tz, **options)  # type: ignore[arg-type]
    sched.run_until(hours * 3600)
    return [d.astimezone(zone).strftime("%m-%d %H:%M%z") for d in seen]


# -- America/New_York: spring forward 2026-03-08 02:00 EST -> 03:00 EDT;
#    fall back 2026-11-01 02:00 EDT -> 01:00 EST.

NY = "America/New_York"


def test_ny_gap_fixed_time_runs_once_at_the_end_of_the_gap() -> None:
    assert fires("30 2 * * *", NY, "2026-03-07T12:00", 48) == ["03-08 03:00-0400", "03-09 02:30-0400"]


def test_ny_gap_wildcard_hours_fire_23_times() -> None:
    got = fires("0 * * * *", NY, "2026-03-08T00:00", 23.5)
    assert len(got) == 23  # 01:00, 03:00, ... 23:00 (and not 00:00: strictly after the call)
    assert "03-08 02:00-0500" not in got and got[:2] == ["03-08 01:00-0500", "03-08 03:00-0400"]


def test_ny_gap_fixed_hour_with_any_minute_runs_once_after_the_gap() -> None:
    # Every minute of the missing hour falls in the gap: one run at 03:00, then none (hour 2 is over).
    assert fires("*/15 2 * * *", NY, "2026-03-08T00:00", 24) == ["03-08 03:00-0400"]


def test_ny_gap_time_that_also_matches_after_the_gap_runs_once() -> None:
    assert fires("0 2,3 * * *", NY, "2026-03-08T00:00", 12) == ["03-08 03:00-0400"]


def test_ny_fallback_fixed_hour_runs_at_the_first_occurrence_only() -> None:
    assert fires("30 1 * * *", NY, "2026-10-31T12:00", 48) == ["11-01 01:30-0400", "11-02 01:30-0500"]


def test_ny_fallback_hour_list_runs_once() -> None:
    assert fires("30 1,5 * * *", NY, "2026-11-01T00:00", 12) == ["11-01 01:30-0400", "11-01 05:30-0500"]


def test_ny_fallback_wildcard_hour_fires_at_both_occurrences() -> None:
    got = fires("0 * * * *", NY, "2026-11-01T00:30", 3.6)
    assert got == ["11-01 01:00-0400", "11-01 01:00-0500", "11-01 02:00-0500", "11-01 03:00-0500"]
    assert len(fires("0 * * * *", NY, "2026-10-31T23:30", 25)) == 25  # a 25-hour day


@pytest.mark.parametrize("expr", ["30 1-2 * * *", "30 */1 * * *", "30 0-23/1 * * *"])
def test_ny_fallback_range_and_step_hours_fire_at_every_instant(expr: str) -> None:
    got = fires(expr, NY, "2026-11-01T00:45", 3)
    assert got == ["11-01 01:30-0400", "11-01 01:30-0500", "11-01 02:30-0500"]


# -- Europe/Berlin: 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET.

BERLIN = "Europe/Berlin"


def test_berlin_gap_and_fallback() -> None:
    assert fires("30 2 * * *", BERLIN, "2026-03-28T12:00", 48) == ["03-29 03:00+0200", "03-30 02:30+0200"]
    assert fires("30 2 * * *", BERLIN, "2026-10-24T12:00", 48) == ["10-25 02:30+0200", "10-26 02:30+0100"]
    assert fires("0 3 * * *", BERLIN, "2026-03-28T12:00", 48) == ["03-29 03:00+0200", "03-30 03:00+0200"]


def test_berlin_wildcard_hours() -> None:
    assert len(fires("0 * * * *", BERLIN, "2026-03-28T23:30", 23)) == 23
    got = fires("15 * * * *", BERLIN, "2026-10-25T01:30", 2.9)
    assert got == ["10-25 02:15+0200", "10-25 02:15+0100", "10-25 03:15+0100"]


def test_berlin_daily_at_three_keeps_its_wall_time_across_both_changes() -> None:
    got = fires("0 3 * * *", BERLIN, "2026-03-27T12:00", 24 * 4)
    assert got == ["03-28 03:00+0100", "03-29 03:00+0200", "03-30 03:00+0200", "03-31 03:00+0200"]


# -- Australia/Lord_Howe: a 30-minute shift. DST ends 2026-04-05 02:00 (+11) -> 01:30 (+10:30);
#    starts 2026-10-04 02:00 (+10:30) -> 02:30 (+11).

LH = "Australia/Lord_Howe"


def test_lord_howe_gap_of_thirty_minutes() -> None:
    assert fires("15 2 * * *", LH, "2026-10-03T12:00", 48) == ["10-04 02:30+1100", "10-05 02:15+1100"]
    assert fires("45 2 * * *", LH, "2026-10-03T12:00", 30) == ["10-04 02:45+1100"]  # not in the gap
    got = fires("0,15,30,45 * * * *", LH, "2026-10-04T01:50", 0.75)  # wildcard hour: the gap's 02:00, 02:15 skipped
    assert got == ["10-04 02:30+1100", "10-04 02:45+1100", "10-04 03:00+1100"]


def test_lord_howe_repeated_half_hour() -> None:
    assert fires("45 1 * * *", LH, "2026-04-04T12:00", 48) == ["04-05 01:45+1100", "04-06 01:45+1030"]
    got = fires("15,45 * * * *", LH, "2026-04-05T01:00", 1.9)
    assert got == ["04-05 01:15+1100", "04-05 01:45+1100", "04-05 01:45+1030", "04-05 02:15+1030"]


# -- expressions, aliases, six fields, day of week 7 --------------------------


def test_aliases_six_fields_and_sunday_as_seven() -> None:
    after = datetime(2026, 1, 1, tzinfo=UTC)
    assert next_fire_times("@daily", "UTC", after, 2) == next_fire_times("0 0 * * *", "UTC", after, 2)
    assert next_fire_times("@hourly", "UTC", after, 1)[0] == datetime(2026, 1, 1, 1, tzinfo=UTC)
    assert next_fire_times("@weekly", "UTC", after, 1)[0].weekday() == 6
    assert next_fire_times("0 0 * * 7", "UTC", after, 3) == next_fire_times("0 0 * * 0", "UTC", after, 3)
    assert next_fire_times("0 0 * * sun", "UTC", after, 1)[0] == datetime(2026, 1, 4, tzinfo=UTC)
    assert next_fire_times("*/20 * * * * *", "UTC", after, 3) == [after + timedelta(seconds=s) for s in (20, 40, 60)]
    assert (
        next_fire_times("0 9 * jan mon-fri", ZoneInfo(BERLIN), after, 1)[0].isoformat() == "2026-01-01T09:00:00+01:00"
    )
    for alias in ("@yearly", "@annually", "@monthly", "@midnight"):
        assert next_fire_times(alias, None, after, 1)


def test_first_run_strictly_after_the_call() -> None:
    clock = ManualClock(wall=datetime(2026, 5, 1, 3, 0, tzinfo=UTC))
    sched = InlineScheduler(clock)
    handle = sched.schedule_cron(lambda: None, "0 3 * * *", tz="UTC")
    assert handle.next_run_at == datetime(2026, 5, 2, 3, 0, tzinfo=UTC)
    assert handle.next_run == 86400.0


def test_tz_none_is_the_local_zone_with_dst(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", BERLIN)
    from procsched._tz import local_zone

    assert local_zone() == ZoneInfo(BERLIN)
    after = datetime(2026, 3, 28, 12, tzinfo=UTC)
    assert next_fire_times("30 2 * * *", None, after, 2) == next_fire_times("30 2 * * *", BERLIN, after, 2)


# -- the wall clock steps -------------------------------------------------------


def test_wall_clock_step_forward_runs_the_slot_now_and_coalesces() -> None:
    clock = ManualClock(wall=datetime(2026, 6, 1, 0, 0, tzinfo=UTC))
    sched = InlineScheduler(clock)
    seen: list[tuple[float, datetime]] = []
    handle = sched.schedule_cron(lambda: seen.append((clock.now(), current_run().scheduled_at)), "0 * * * *", tz="UTC")
    assert handle.next_run == 3600.0
    clock.set_wall(datetime(2026, 6, 1, 5, 30, tzinfo=UTC))  # NTP step / resume after 5.5 h asleep
    # coalesce (the default): one run, now, for the slots 01:00 ... 05:00 - the last of them.
    assert sched.run_until(1.0) == 1
    assert seen == [(0.0, datetime(2026, 6, 1, 5, tzinfo=UTC))]
    assert handle.next_run_at == datetime(2026, 6, 1, 6, 0, tzinfo=UTC)
    assert handle.next_run == pytest.approx(1800.0)


def test_wall_clock_step_forward_with_skip_waits_for_the_next_slot() -> None:
    clock = ManualClock(wall=datetime(2026, 6, 1, 0, 0, tzinfo=UTC))
    sched = InlineScheduler(clock)
    handle = sched.schedule_cron(lambda: None, "0 * * * *", tz="UTC", misfire="skip")
    clock.set_wall(datetime(2026, 6, 1, 5, 30, tzinfo=UTC))
    assert sched.run_until(1799.0) == 0 and sched.run_until(1800.0) == 1
    assert handle.runs[0].scheduled_at == datetime(2026, 6, 1, 6, tzinfo=UTC)


def test_wall_clock_step_back_never_repeats_a_slot() -> None:
    clock = ManualClock(wall=datetime(2026, 6, 1, 0, 59, 0, tzinfo=UTC))
    sched = InlineScheduler(clock)
    seen: list[datetime] = []
    sched.schedule_cron(lambda: seen.append(current_run().scheduled_at), "0 * * * *", tz="UTC")
    sched.run_until(61)  # 01:00 runs
    assert [d.hour for d in seen] == [1]
    clock.set_wall(datetime(2026, 6, 1, 0, 30, tzinfo=UTC))  # stepped back 30 min
    sched.run_until(61 + 3600)  # the wall clock now reads 01:30
    assert [d.hour for d in seen] == [1]  # 01:00 did not run again; 02:00 is 30 min ahead
    sched.run_until(61 + 3600 + 1800)
    assert [d.hour for d in seen] == [1, 2]
    assert seen[1] == datetime(2026, 6, 1, 2, tzinfo=UTC)


@pytest.mark.parametrize(("misfire", "hours"), [("coalesce", [0, 4]), ("skip", [0]), ("catch_up", [0, 1, 2, 3, 4])])
def test_overrun_misfire_policies(misfire: str, hours: list[int]) -> None:
    clock = ManualClock(wall=datetime(2026, 6, 1, 23, 59, 59, tzinfo=UTC))
    sched = InlineScheduler(clock)
    seen: list[datetime] = []

    def job() -> None:
        seen.append(current_run().scheduled_at)
        if len(seen) == 1:
            clock.advance(4 * 3600 + 60)  # the first run overruns past 04:00

    sched.schedule_cron(job, "0 * * * *", tz="UTC", misfire=misfire)
    sched.run_until(4 * 3600 + 62)
    assert [d.hour for d in seen] == hours


# -- limits, retries, pause, keys (inline) ---------------------------------------


def test_until_ends_a_calendar_task_done() -> None:
    start = datetime(2026, 6, 1, tzinfo=UTC)
    clock = ManualClock(wall=start)
    sched = InlineScheduler(clock)
    handle = sched.schedule_cron(lambda: 1, "0 * * * *", tz="UTC", until=start + timedelta(hours=3))
    sched.run_until(10 * 3600)
    assert [r.scheduled_at.hour for r in handle.runs] == [1, 2, 3]  # 03:00 is not after until
    assert handle.state is TaskState.DONE and handle.result() is None


def test_cron_tz_as_tzinfo() -> None:
    after = datetime(2026, 3, 7, 12, tzinfo=UTC)
    assert next_fire_times("30 2 * * *", ZoneInfo(NY), after, 1) == next_fire_times("30 2 * * *", NY, after, 1)
    fixed = timezone(timedelta(hours=5, minutes=30))
    assert next_fire_times("0 0 * * *", fixed, after, 1)[0].isoformat() == "2026-03-08T00:00:00+05:30"


def test_procsched_names() -> None:
    assert procsched.Retry().attempts == 3
