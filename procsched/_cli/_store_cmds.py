"""``procsched jobs`` and ``procsched history``: what a durable store holds.

    procsched jobs --store S     ──▶ open_store(S).jobs()      ──▶ a table, or JSON lines
    procsched history --store S  ──▶ open_store(S).history(..) ──▶ a table, or JSON lines

Read-only: one read transaction each, safe next to running schedulers.
Times are printed in ISO 8601 UTC.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from typing import Any

from .._errors import StoreError

EXIT_STORE = 1


def add_parsers(commands: Any) -> None:
    jobs = commands.add_parser("jobs", help="list the keyed tasks a durable store holds",
                               description="List the keyed tasks in a store (key, schedule, next run, "
                               "last outcome, paused, and why a task cannot be loaded).")  # fmt: skip
    jobs.set_defaults(handler=jobs_command)
    _store_option(jobs)
    jobs.add_argument("--json", action="store_true", help="one JSON object per line")
    history = commands.add_parser("history", help="print past runs from a durable store",
                                  description="Print the last runs of one keyed task, or of all of them.")  # fmt: skip
    history.set_defaults(handler=history_command)
    _store_option(history)
    history.add_argument("key", nargs="?", default=None, metavar="KEY", help="one task's key (default: every task)")
    history.add_argument("-n", type=_count, default=20, metavar="N", help="the last N runs (default 20)")
    history.add_argument("--json", action="store_true", help="one JSON object per line")


def _store_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", required=True, metavar="PATH_OR_URL",
                   help="the store: a SQLite file path, sqlite:///path or postgresql://...")  # fmt: skip


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).isoformat(timespec="milliseconds")


def _schedule(s: dict[str, Any]) -> str:
    kind = s["kind"]
    if kind == "cron":
        return f"cron {s['expr']}" + (f" ({s['tz']})" if s.get("tz") else "")
    if kind == "once":
        return "once"
    word = "every" if kind == "fixed_rate" else "delay"
    return f"{word} {s['period_ns'] / 1e9:g}s"


def _open(target: str) -> Any:
    from .._store import open_store

    try:
        return open_store(target)
    except (StoreError, ValueError, TypeError) as exc:
        print(f"procsched: cannot open the store: {exc}", file=sys.stderr)
        return None


def jobs_command(args: argparse.Namespace) -> int:
    store = _open(args.store)
    if store is None:
        return EXIT_STORE
    with store:
        tasks = store.jobs()
        schedulers = {h.id: h for h in store.schedulers()}
    rows = [{
        "key": t.key, "schedule": _schedule(t.definition.schedule), "function": t.definition.fn_ref,
        "next_run": _iso(t.state.next_due_ns), "runs": t.state.run_count, "last_outcome": t.last_outcome,
        "paused": t.state.paused, "unloadable": t.unloadable, "held_by": _holder(t.holder, schedulers),
    } for t in tasks]  # fmt: skip
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    for row in rows:
        held = row["held_by"]
        row["held_by"] = None if held is None else f"{held['host']}/{held['pid']}"
    _table(["key", "schedule", "next_run", "runs", "last_outcome", "paused", "held_by", "unloadable"], rows)
    return 0


def _holder(holder_id: str | None, schedulers: dict[str, Any]) -> dict[str, Any] | None:
    """Which scheduler (host, pid) holds a task's run in flight (several
    schedulers may share a store); ``registered`` False: its lease was not
    renewed and nobody took it over yet (it is probably dead)."""
    if holder_id is None:
        return None
    h = schedulers.get(holder_id)
    if h is not None:
        return {"host": h.host, "pid": h.pid, "registered": True}
    host, _, rest = holder_id.partition(":")
    pid = rest.partition(":")[0]
    return {"host": host, "pid": int(pid) if pid.isdigit() else None, "registered": False}


def history_command(args: argparse.Namespace) -> int:
    store = _open(args.store)
    if store is None:
        return EXIT_STORE
    with store:
        records = store.history(args.key, args.n)
    rows = [{
        "key": r.key, "run": r.run, "attempt": r.attempt, "scheduled": _iso(r.scheduled_ns),
        "started": _iso(r.started_ns), "finished": _iso(r.finished_ns), "outcome": r.outcome,
        "host": r.host, "pid": r.pid, "error": None if r.error_type is None else f"{r.error_type}: {r.error_message}",
    } for r in records]  # fmt: skip
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    _table(["key", "run", "attempt", "scheduled", "finished", "outcome", "pid", "error"], rows)
    return 0


def _table(columns: list[str], rows: list[dict[str, Any]]) -> None:
    cells = [[("-" if row[c] is None else str(row[c])) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
