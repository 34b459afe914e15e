"""``procsched next "EXPR" [--tz ZONE] [-n 5]``: check a cron expression before
deploying it - print its next fire times, in its zone and in UTC.

    $ procsched next "30 2 * * *" --tz America/New_York -n 3 --after 2026-03-07T12:00:00+00:00
    2026-03-08 03:00:00 EDT (-04:00)   2026-03-08T07:00:00Z   (02:30:00 does not exist that day: DST gap)
    2026-03-09 02:30:00 EDT (-04:00)   2026-03-09T06:30:00Z
    2026-03-10 02:30:00 EDT (-04:00)   2026-03-10T06:30:00Z

Built on ``procsched._core._calendar``'s ``CronTrigger``, the very computation
the schedulers use. Python's calendar ends at the year 9999 (and starts at
the year 1): a walk that reaches either end stops there, with a message.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from .._core._units import EPOCH, NS, wall_datetime, wall_ns

EXIT_BAD_INPUT = 2
_SECOND = timedelta(seconds=1)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``next`` command to the ``procsched`` parser's subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "next",
        help="print the next fire times of a cron expression",
        description="Print the next times a cron expression fires (five fields, six with seconds first, "
        "or an alias such as @daily), with cron's DST rules, to check it before deploying it.",
    )
    parser.add_argument("expr", metavar="EXPR", help='the cron expression, quoted: "0 3 * * *"')
    parser.add_argument("--tz", default=None, metavar="ZONE", help="IANA zone (default: this machine's zone)")
    parser.add_argument("-n", type=int, default=5, metavar="N", help="how many fire times (default 5)")
    parser.add_argument(
        "--after",
        default=None,
        metavar="ISO",
        help="start from this ISO 8601 time instead of now (without an offset: a wall time in --tz)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.set_defaults(handler=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Print the fire times; exit 2 (with the reason) for a bad expression,
    zone or time, or for a walk that leaves the calendar."""
    from .. import _tz  # noqa: F401 - the machine's local zone for --tz omitted
    from .._core._calendar import CronTrigger
    from .._tz import zone

    try:
        if args.n < 0:
            raise ValueError(f"-n must be >= 0, not {args.n}")
        tz = zone(args.tz)
        after = _after(args.after, tz)
        trigger = CronTrigger(args.expr, tz)
    except (ValueError, TypeError) as exc:
        print(f"procsched next: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    shown = 0
    instants = trigger.iter_ns(wall_ns(after))
    while shown < args.n:
        try:
            instant = next(instants, None)
            when = None if instant is None else wall_datetime(instant).astimezone(tz)
            note = "" if when is None or args.json else _dst_note(args.expr, when)
        except OverflowError:  # the walk (or a time zone's offset) left the years 1-9999
            if shown:
                print("procsched next: no later fire time: Python's calendar ends in the year 9999", file=sys.stderr)
                return 0
            print(
                f"procsched next: cannot compute fire times from {after.isoformat()} in {tz}: "
                "Python's calendar runs from the year 1 to 9999",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
        if when is None:
            print("procsched next: the expression never fires again", file=sys.stderr)
            break
        utc = when.astimezone(UTC)
        if args.json:
            print(json.dumps({"local": when.isoformat(), "utc": utc.isoformat().replace("+00:00", "Z")}))
        else:
            print(
                f"{when:%Y-%m-%d %H:%M:%S} {when.tzname()} ({offset_text(when.utcoffset())})   "
                f"{utc:%Y-%m-%dT%H:%M:%SZ}{note}"
            )
        shown += 1
    return 0


def _after(text: str | None, tz: tzinfo) -> datetime:
    """``--after`` as an aware datetime: now, an aware ISO time, or a naive one read in ``tz``."""
    if text is None:
        return datetime.now(UTC)
    try:
        after = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--after must be an ISO 8601 time (2026-03-08T02:30:00), not {text!r}") from None
    if after.tzinfo is None:
        after = after.replace(tzinfo=tz)
    try:
        after.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"--after is out of the calendar's range in this zone: {text!r}") from None
    return after


def offset_text(offset: timedelta | None) -> str:
    """A UTC offset as ``+01:00``, or ``+00:09:21`` when it has seconds (local mean times before 1900)."""
    seconds = int((offset or timedelta(0)).total_seconds())
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{sign}{hours:02d}:{minutes:02d}" + (f":{secs:02d}" if secs else "")


def _dst_note(expr: str, when: datetime) -> str:
    """A note when the local time is not one the expression names: a
    spring-forward gap moved it (the time it names does not exist that day),
    or it is the second occurrence of a repeated local time."""
    if when.fold:
        return "   (a repeated local time, second occurrence: DST)"
    wall = when.replace(tzinfo=None)
    before = (when.astimezone(UTC) - _SECOND).astimezone(when.tzinfo).replace(tzinfo=None)
    if wall - before <= _SECOND or _names(expr, wall):
        return ""  # no gap just before it, or the expression names this very time
    skipped = _first_named(expr, before + _SECOND)
    if skipped is None or skipped >= wall:
        return ""
    return f"   ({skipped:%H:%M:%S} does not exist that day: DST gap)"


def _names(expr: str, wall: datetime) -> bool:
    """Does the expression name this local wall time (calendar fields only, no zone)?"""
    return _first_named(expr, wall) == wall


def _first_named(expr: str, wall: datetime) -> datetime | None:
    """The first local wall time at or after ``wall`` the expression names
    (read on a calendar without DST: UTC)."""
    from .._core._calendar import CronTrigger

    start = wall.replace(tzinfo=UTC) - _SECOND
    instant = CronTrigger(expr, UTC).next_ns((start - EPOCH) // _SECOND * NS)
    return None if instant is None else wall_datetime(instant).replace(tzinfo=None)
