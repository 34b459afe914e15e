"""Calendar schedules and daylight saving time, told on a virtual clock.

A job "every night at 02:30 New York time" meets the two DST nights of 2026:
in March 02:30 does not exist (clocks jump from 02:00 to 03:00), in November
01:30 happens twice. procsched does what cron (cronie) does: a time in the
gap runs once, at the first instant after it; a fixed time that happens
twice runs once, the first time; an hourly job (`*` in the hour field)
follows real time: 23 runs on the spring-forward day, both 01:00s in
November. An InlineScheduler on a ManualClock walks through those nights in
microseconds; then a real Scheduler runs a six-field (seconds) expression.

    python examples/calendar_and_dst.py
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from zoneinfo import ZoneInfo

import procsched
from procsched import InlineScheduler, ManualClock, current_run

FAST = os.environ.get("PROCSCHED_EXAMPLE_FAST") == "1"
NY = ZoneInfo("America/New_York")


def walk(expr: str, start: datetime, hours: float) -> list[str]:
    clock = ManualClock(wall=start)
    sched = InlineScheduler(clock)
    seen: list[str] = []
    sched.schedule_cron(lambda: seen.append(current_run().scheduled_at.astimezone(NY).strftime("%b %d %H:%M %Z")),
                        expr, tz=NY)  # fmt: skip
    sched.run_until(hours * 3600)
    return seen


def stamp() -> str:
    return current_run().scheduled_at.strftime("%H:%M:%S")  # type: ignore[union-attr]


def main() -> None:
    print("30 2 * * *  across the spring-forward night (02:30 does not exist):")
    print("   ", walk("30 2 * * *", datetime(2026, 3, 7, 12, tzinfo=NY), 48))
    print("30 1 * * *  across the fall-back night (01:30 happens twice, fixed hour):")
    print("   ", walk("30 1 * * *", datetime(2026, 10, 31, 12, tzinfo=NY), 48))
    print("0 * * * *   on the fall-back night (wildcard hour: every real instant):")
    print("   ", walk("0 * * * *", datetime(2026, 11, 1, 0, 30, tzinfo=NY), 3.6))
    runs = walk("0 * * * *", datetime(2026, 3, 8, 0, 0, tzinfo=NY), 23.99)
    print(f"0 * * * *   on the spring-forward day: {len(runs)} runs (02:00 never happens)")

    print("\nthe same computation, for checking an expression: procsched next \"30 2 * * *\" --tz America/New_York")
    with procsched.Scheduler(workers=1) as s:
        runs = 2 if FAST else 4
        handle = s.schedule_cron(stamp, "*/1 * * * * *", max_runs=runs)  # six fields: every second
        started = time.monotonic()
        handle.result(30)
        print(f"\na real Scheduler, '*/1 * * * * *' with max_runs={runs}: ran at "
              f"{[r.scheduled_at.strftime('%H:%M:%S') for r in handle.runs]} (UTC), state {handle.state.name}, "
              f"in {time.monotonic() - started:.1f} s")  # fmt: skip


if __name__ == "__main__":
    main()
