"""Wall-clock times for everything the CLI shows or prints.

The scheduler reports times in seconds of the monotonic clock (``RunInfo``,
event fields, ``TaskHandle.next_run``). People and log collectors want wall
time, so the CLI converts at its edge, here and only here: take one
:func:`offset` per event (or per redraw), then :func:`wall` each time with it,
so the times of one event are consistent with each other.

When the runtime reports wall times itself (``RunInfo.scheduled_at``,
``TaskHandle.next_run_at``), this is the one place to swap them in.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime


def offset() -> float:
    """Wall seconds minus monotonic seconds, now."""
    return time.time() - time.monotonic()


def wall(mono: float | None, off: float) -> datetime | None:
    """A monotonic time (seconds) -> an aware UTC datetime, given :func:`offset`."""
    if mono is None:
        return None
    return datetime.fromtimestamp(mono + off, UTC)


def iso(mono: float | None, off: float) -> str | None:
    """ISO 8601 in UTC, microseconds: ``2026-12-03T04:20:00.123456+00:00``."""
    when = wall(mono, off)
    return None if when is None else when.isoformat(timespec="microseconds")


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def clock_text(when: datetime) -> str:
    """Local wall time for a plain line: ``04:20:07.123``."""
    return when.astimezone().strftime("%H:%M:%S.%f")[:-3]


def until_text(due: float, now: float, off: float) -> str:
    """When ``due`` comes, as a person reads it: ``due``, ``in 850 ms``,
    ``in 42 s``, then the local wall time (``03:00 CET``; with the date when
    it is not today)."""
    left = due - now
    if left <= 0:
        return "due"
    if left < 1:
        return f"in {left * 1e3:.0f} ms"
    if left < 60:
        return f"in {left:.0f} s" if left >= 10 else f"in {left:.1f} s"
    local = datetime.fromtimestamp(due + off).astimezone()
    today = datetime.fromtimestamp(now + off).astimezone().date()
    text = local.strftime("%H:%M:%S" if left < 3600 else "%H:%M")
    if local.date() != today:
        text = local.strftime("%b %d ") + text
    return f"{text} {local.tzname() or ''}".rstrip()
