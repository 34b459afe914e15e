"""Issue 20 item 24: the cron rules the README documents, checked against
what a scheduler really does (an InlineScheduler on a manual clock whose
wall time starts at a known instant) and what ``procsched next`` prints."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from cli_helpers import cli

from procsched import InlineScheduler, ManualClock, current_run

START = datetime(2026, 1, 1, tzinfo=timezone.utc)  # a Thursday


def _fires(expr: str, days: float = 120, start: datetime = START) -> list[datetime]:
    """The fire times of ``expr`` (UTC) over ``days`` days, as the scheduler runs them."""
    clock = ManualClock(0.0, wall=start)
    sched = InlineScheduler(clock)
    seen: list[datetime] = []
    sched.schedule_cron(lambda: seen.append(current_run().scheduled_at), expr, tz="UTC")  # type: ignore[union-attr]
    sched.run_until(days * 86_400)
    return seen


def _days(fires: list[datetime]) -> list[str]:
    return [f"{d:%a %m-%d %H:%M}" for d in fires]


def test_day_of_month_and_day_of_week_together_mean_or() -> None:
    # every Friday, and every 13th (whatever its weekday): cron's rule, not APScheduler's AND
    assert _days(_fires("0 0 13 * 5", days=20)) == [
        "Fri 01-02 00:00", "Fri 01-09 00:00", "Tue 01-13 00:00", "Fri 01-16 00:00"]


def test_a_day_field_starting_with_a_star_means_and() -> None:
    # day-of-month "*/2" starts with a star, so both fields must match: Mondays that are odd days
    assert _days(_fires("0 0 */2 * 1", days=40)) == ["Mon 01-05 00:00", "Mon 01-19 00:00", "Mon 02-09 00:00"]


@pytest.mark.parametrize(("expr", "expected"), [
    ("0 0 L * *", ["Sat 01-31 00:00", "Sat 02-28 00:00", "Tue 03-31 00:00"]),  # the last day of the month
    ("0 0 LW * *", ["Fri 01-30 00:00", "Fri 02-27 00:00", "Tue 03-31 00:00"]),  # its last weekday (Mon-Fri)
    ("0 0 * * 5L", ["Fri 01-30 00:00", "Fri 02-27 00:00", "Fri 03-27 00:00"]),  # the last Friday
    ("0 0 * * 1#2", ["Mon 01-12 00:00", "Mon 02-09 00:00", "Mon 03-09 00:00"]),  # the second Monday
])  # fmt: skip
def test_last_and_nth_days(expr: str, expected: list[str]) -> None:
    assert _days(_fires(expr, days=90)) == expected


def test_six_fields_are_read_seconds_first() -> None:
    # "0 0 1 1 * *" is second 0, minute 0, hour 1, day 1, every month: monthly at 01:00, not yearly
    assert _days(_fires("0 0 1 1 * *", days=90)) == ["Thu 01-01 01:00", "Sun 02-01 01:00", "Sun 03-01 01:00"]


def test_a_year_field_is_refused_with_a_reason() -> None:
    with pytest.raises(ValueError, match="cron has no year field"):
        InlineScheduler(ManualClock()).schedule_cron(print, "0 0 1 1 * 2030", tz="UTC")
    done = cli("next", "0 0 1 1 * 2030")
    assert done.returncode == 2 and "no year field" in done.stderr and "Bad day-of-week" not in done.stderr


@pytest.mark.parametrize("expr", ["0 0 30 2 *", "0 0 31 4,6 *"])
def test_a_day_no_month_has_can_never_fire(expr: str) -> None:
    with pytest.raises(ValueError, match="can never fire"):
        InlineScheduler(ManualClock()).schedule_cron(print, expr, tz="UTC")
    done = cli("next", expr)
    assert done.returncode == 2 and "can never fire" in done.stderr and "Bad day-of-month" not in done.stderr


def test_until_equal_to_now_is_accepted_and_its_run_runs() -> None:
    """Issue 20 item 23: a run due exactly at ``until`` runs, also when that is now."""
    clock = ManualClock(0.0, wall=START)
    sched = InlineScheduler(clock)
    handle = sched.schedule_at_fixed_rate(print, 10, until=clock.wall_now())
    assert sched.run_until(30) == 1 and handle.state.value == "done"
    assert sched.schedule_at_fixed_rate(print, 10, until=0).next_run == 30.0  # until=0: now, the first run
    with pytest.raises(ValueError, match="until must not lie in the past"):
        sched.schedule_at_fixed_rate(print, 10, until=datetime(2025, 12, 31, tzinfo=timezone.utc))
