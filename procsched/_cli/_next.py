"""``procsched next "EXPR" [--tz ZONE] [-n 5]``: check a cron expression before
deploying it - print its next fire times, in its zone and in UTC.

    $ procsched next "30 2 * * *" --tz America/New_York -n 3 --after 2026-03-07T12:00:00+00:00
    2026-03-08 03:00:00 EDT (-04:00)   2026-03-08T07:00:00Z   (02:30 does not exist that night: DST)
    2026-03-09 02:30:00 EDT (-04:00)   2026-03-09T06:30:00Z
    2026-03-10 02:30:00 EDT (-04:00)   2026-03-10T06:30:00Z

Built on ``procsched._core._calendar.next_fire_times``, the very computation
the schedulers use.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timedelta, timezone
from typing import Any

EXIT_BAD_INPUT = 2


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``next`` command to the ``procsched`` parser's subparsers."""
    parser = subparsers.add_parser(
        "next", help="print the next fire times of a cron expression",
        description="Print the next times a cron expression fires (five fields, six with seconds first, "
        "or an alias such as @daily), with cron's DST rules, to check it before deploying it.",
    )  # fmt: skip
    parser.add_argument("expr", metavar="EXPR", help='the cron expression, quoted: "0 3 * * *"')
    parser.add_argument("--tz", default=None, metavar="ZONE", help="IANA zone (default: this machine's zone)")
    parser.add_argument("-n", type=int, default=5, metavar="N", help="how many fire times (default 5)")
    parser.add_argument("--after", default=None, metavar="ISO",
                        help="start from this aware ISO 8601 time instead of now")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.set_defaults(handler=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Print the fire times; exit 2 (with the reason) for a bad expression or zone."""
    from .. import _tz  # noqa: F401 - the machine's local zone for --tz omitted
    from .._tz import next_fire_times, zone

    try:
        if args.n < 0:
            raise ValueError(f"-n must be >= 0, not {args.n}")
        after = datetime.now(timezone.utc) if args.after is None else datetime.fromisoformat(args.after)
        if after.tzinfo is None:
            raise ValueError(f"--after must carry a UTC offset, not {args.after!r}")
        tz = zone(args.tz)
        times = next_fire_times(args.expr, tz, after, args.n)
    except (ValueError, TypeError) as exc:
        print(f"procsched next: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for when in times:
        utc = when.astimezone(timezone.utc)
        if args.json:
            print(json.dumps({"local": when.isoformat(), "utc": utc.isoformat().replace("+00:00", "Z")}))
            continue
        note = _dst_note(args.expr, when)
        offset = when.strftime("%z")
        print(f"{when:%Y-%m-%d %H:%M:%S} {when.tzname()} ({offset[:3]}:{offset[3:]})   "
              f"{utc:%Y-%m-%dT%H:%M:%SZ}{note}")  # fmt: skip
    if not times and args.n:
        print("procsched next: the expression never fires again", file=sys.stderr)
    return 0


def _dst_note(expr: str, when: datetime) -> str:
    """A hint when the local time is not the one the expression names: a
    spring-forward gap moved it, or it is a repeated (second) local time."""
    before = (when.astimezone(timezone.utc) - timedelta(seconds=1)).astimezone(when.tzinfo)
    if when.replace(tzinfo=None) - before.replace(tzinfo=None) > timedelta(seconds=1):
        return "   (first instant after a DST gap)"
    if when.fold:
        return "   (a repeated local time, second occurrence: DST)"
    return ""
