"""``procsched why KEY --store S [-n N]``: every slot of a stored task explained.

    procsched why KEY --store S ──▶ store.job_view(KEY, attempts + skipped) ──▶ the last N slots, oldest first,
                                    (one read transaction)                     each with what happened and why
                                ──▶ the task's schedule from its next run ──▶ the next 5 slots

    $ procsched why nightly --store jobs.db -n 4          (--json: one JSON object, see _why_json.py)
    nightly: at 03:00 Europe/Berlin, every day - pending (runs 41; times are local, CET)
    last 4 slots:
      2026-12-01 03:00:00  run 40  ok         ran 0.2 s late, took 3.1 s
      2026-12-02 03:00:00  skipped down       no scheduler was running then (found at a restart)
      2026-12-03 03:00:00  run 41  error      raised ValueError: no data (attempt 1 of its run)
      2026-12-03 03:00:01  run 41  ok         retry: attempt 2, took 2.9 s
    next 5 slots:
      2026-12-04 03:00:00
      ...

A slot is a run's attempt (a retry is a line of its own, at its slot) or a
skipped slot (``outcome`` "skipped" and its reason: overlap, misfire, late,
paused, down). Times are the machine's local time. Reads only (never
creates a store, never unpickles anything); exit status 0, 1 when the store
cannot be opened or has no such key (the reason on stderr), 2 for a bad
command line - as the other store commands.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .._core._units import NS
from .._errors import StoreError
from ._args import positive_int
from ._store_cmds import EXIT_STORE, no_task, one_line, open_existing, store_option

if TYPE_CHECKING:
    from .._store import JobDetail, RunRecord, SkippedSlot

#: How many next slots ``why`` lists.
NEXT = 5
#: The most slots ``-n`` may ask for (the store keeps ``keep_runs`` per task anyway).
MAX_N = 10_000

#: Why a slot was not run (the store's SKIP_REASONS), in words.
SKIPPED = {
    "overlap": "the task's previous run was still running (overlap='skip')",
    "misfire": "missed while the task ran late; its misfire policy dropped it (skip/coalesce)",
    "late": "it would have started later than its slot + misfire_grace",
    "paused": "the task was paused",
    "down": "no scheduler was running then (found at a restart)",
}
CAUSES = {"manual": "run now", "backfill": "backfill"}


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "why",
        help="explain a stored task's last slots (what happened to each, and why) and list its next ones",
        description="Print the last N slots of the keyed task KEY in local time - each run with its "
        "outcome, lateness and duration, each skipped slot with why it was not run (overlap, misfire, "
        f"late, paused, down) - and its next {NEXT} slots. Reads only: never creates a store.",
        epilog="exit status: 0 printed; 1 the store cannot be opened or has no such key; 2 bad command line",
    )
    p.set_defaults(handler=why_command)
    p.add_argument("key", metavar="KEY", help="the task's key")
    store_option(p)
    p.add_argument("-n", type=positive_int("-n"), default=10, metavar="N", help="the last N slots (default 10)")
    p.add_argument("--json", action="store_true", help="one JSON object (the console API's fields, and why)")


def why_command(args: argparse.Namespace) -> int:
    n = min(args.n, MAX_N)
    store = open_existing(args.store)
    if store is None:
        return EXIT_STORE
    try:
        with store:
            detail = store.job_view(args.key, n)
    except StoreError as exc:
        print(f"procsched: cannot read the store: {one_line(exc)}", file=sys.stderr)
        return EXIT_STORE
    if detail is None:
        return no_task(args.key)
    if args.json:
        from ._why_json import as_json

        sys.stdout.write(as_json(detail, n, NEXT, lambda s: _slot(s)[2]) + "\n")
        return 0
    sys.stdout.write("\n".join(explain(detail, n)) + "\n")
    return 0


def explain(detail: JobDetail, n: int) -> list[str]:
    """The lines ``why`` prints for ``detail`` (its last ``n`` slots, then the next ones)."""
    from .._web._store_source import describe

    job = detail.job
    st = job.state
    words, _zone = describe(job.schedule)
    if job.unloadable is not None:
        state = f"unloadable: {job.unloadable}"
    elif job.in_flight:
        state = "running"
    elif st.paused:
        state = "paused"
    else:
        state = "ended" if st.next_due_ns is None else "pending"
    zone = datetime.now().astimezone().tzname() or "local"
    name = job.key if job.name in (None, job.key) else f"{job.key} ({job.name})"
    lines = [f"{name}: {words} - {state} (runs {st.run_count}; times are local, {zone})"]
    slots = detail.slots[-n:]
    if not slots:
        lines.append("no slot yet: it has not run, and no slot was skipped")
    else:
        lines.append(f"last {len(slots)} slot{'s' if len(slots) != 1 else ''}:")
        rows = [_slot(s) for s in slots]
        width = max(len(r[1]) for r in rows)
        lines.extend(f"  {when}  {what:<{width}}  {text}" for when, what, text in rows)
    lines.extend(_next(detail))
    return lines


def _slot(s: RunRecord | SkippedSlot) -> tuple[str, str, str]:
    """(its slot in local time, what happened, why) for one line."""
    from .._store import SkippedSlot

    if isinstance(s, SkippedSlot):
        return local(s.slot_ns), f"skipped {s.reason}", f"not run: {SKIPPED.get(s.reason, s.reason)}"
    what = f"run {s.run}  {s.outcome or 'running'}"
    said = []
    if s.cause in CAUSES:
        said.append(f"{CAUSES[s.cause]}")
    if s.attempt > 1:
        said.append(f"retry: attempt {s.attempt}")
    if s.outcome is None:
        said.append("in flight" if s.started_ns is None else f"started {_late(s)}, still running")
    else:
        if s.started_ns is not None and s.outcome not in ("crashed",) and s.cause != "manual":
            said.append(f"started {_late(s)}")
        if s.outcome == "error":
            error = s.error_type or "an error"
            said.append(f"raised {error}: {s.error_message}" if s.error_message else f"raised {error}")
        elif s.outcome == "crashed":
            said.append(f"its worker or its scheduler died ({s.error_message})" if s.error_message else "crashed")
        elif s.outcome == "timeout":
            said.append("ran past its timeout: its worker was killed")
        elif s.outcome == "cancelled":
            said.append("ended to start a newer slot (overlap='replace')" if s.reason == "replaced" else "cancelled")
        if s.started_ns is not None and s.finished_ns is not None:
            said.append(f"took {_duration(s.finished_ns - s.started_ns)}")
    return local(s.scheduled_ns), what, ", ".join(said)


def _late(s: RunRecord) -> str:
    assert s.started_ns is not None
    late = s.started_ns - s.scheduled_ns
    return "on time" if late < NS // 100 else f"{_duration(late)} late"


def _duration(ns: int) -> str:
    if ns < NS:
        return f"{ns / 1e6:.0f} ms"
    if ns < 120 * NS:
        return f"{ns / NS:.1f} s"
    return f"{ns / NS / 60:.1f} min"


def _next(detail: JobDetail) -> list[str]:
    from .._core._units import wall_datetime, wall_ns
    from .._web._words import next_slots

    job = detail.job
    st = job.state
    if st.next_due_ns is None:
        return ["no next slot: the task ended"]
    slots = next_slots(job.schedule, wall_datetime(st.next_due_ns), NEXT)
    head = f"next {len(slots)} slot{'s' if len(slots) != 1 else ''}"
    if st.paused:
        head += " (paused: none runs until it is resumed)"
    elif job.schedule.get("kind") == "fixed_delay":
        head += " (a fixed delay: the one after it counts from when its run ends)"
    return [f"{head}:", *(f"  {local(wall_ns(s))}" for s in slots)]


def local(ns: int) -> str:
    """A UTC ns time in the machine's local time: ``2026-12-01 03:00:00`` (``.250`` when not on a second)."""
    when = datetime.fromtimestamp(ns / NS).astimezone()
    text = when.strftime("%Y-%m-%d %H:%M:%S")
    ms = (ns // 1_000_000) % 1000
    return f"{text}.{ms:03d}" if ms else f"{text}    "
