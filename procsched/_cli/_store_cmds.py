"""``procsched jobs``, ``history`` and ``remove``: what a durable store holds,
and the one change made from outside a scheduler.

    procsched jobs --store S        ──▶ open_store(S).jobs()        ──▶ a table, or JSON lines
    procsched history --store S     ──▶ open_store(S).history(..)   ──▶ a table, or JSON lines
    procsched remove KEY --store S  ──▶ a batch that deletes the task (its history kept)
    procsched run FILE --store S    ──▶ sync_jobs: the same delete, for the stored jobs the file
                                        no longer declares (unless --keep-others)

``jobs`` and ``history`` only read (one read transaction each, safe next to
running schedulers) and never create a store: a missing one is an error, as
is an unknown key. Whatever goes wrong opening a store is one line,
``procsched: cannot open the store: ...``, and exit status 1. Times are
printed in ISO 8601 UTC.

Removing a task deletes its row with the store's batch delete, which keeps
its runs in the history; an instance running it drops it at its next re-read
of the store (at most a second later), and a run of it in flight finishes
there. (A ``remove(key)`` method of the store, once there, is the one to call.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .._errors import StoreError

EXIT_STORE = 1


def add_parsers(commands: Any) -> None:
    jobs = commands.add_parser(
        "jobs",
        help="list the keyed tasks a durable store holds",
        description="List the keyed tasks in a store (key, schedule, next run, "
        "last outcome, paused, who holds a run in flight, and why a task cannot be "
        "loaded).",
    )
    jobs.set_defaults(handler=jobs_command)
    _store_option(jobs)
    jobs.add_argument("--json", action="store_true", help="one JSON object per line")
    history = commands.add_parser(
        "history",
        help="print past runs from a durable store",
        description="Print the last runs of one keyed task, or of all of them.",
    )
    history.set_defaults(handler=history_command)
    _store_option(history)
    history.add_argument("key", nargs="?", default=None, metavar="KEY", help="one task's key (default: every task)")
    history.add_argument("-n", type=_count, default=20, metavar="N", help="the last N runs (default 20)")
    history.add_argument("--json", action="store_true", help="one JSON object per line")
    remove = commands.add_parser(
        "remove",
        help="remove a keyed task from a durable store (its history is kept)",
        description="Remove the keyed task KEY from the store: no instance runs it "
        "any more (an instance running it drops it within a second; a run in flight "
        "finishes). Its past runs stay in the history.",
    )
    remove.set_defaults(handler=remove_command)
    remove.add_argument("key", metavar="KEY", help="the task's key")
    _store_option(remove)


def _store_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store",
        required=True,
        metavar="PATH_OR_URL",
        help="the store: a SQLite file path, sqlite:///path or postgresql://...",
    )


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="milliseconds")


def schedule_words(s: dict[str, Any]) -> str:
    kind = s["kind"]
    if kind == "cron":
        return f"cron {s['expr']}" + (f" ({s['tz']})" if s.get("tz") else "")
    if kind == "once":
        return "once"
    word = "every" if kind == "fixed_rate" else "delay"
    return f"{word} {s['period_ns'] / 1e9:g}s"


def open_existing(target: str) -> Any:
    """The store ``target`` names, for reading: None (and the reason on
    stderr) if it cannot be opened or, for a SQLite file, does not exist:
    reading must never create a store.

    (The existence check is the CLI's until ``open_store`` can open a store
    read-only by itself; it follows ``open_store``'s reading of a target.)
    """
    path = _sqlite_path(target)
    if path is not None and not os.path.exists(path):
        print(f"procsched: cannot open the store: no store at {path}", file=sys.stderr)
        return None
    return open_store_or_say(target)


def open_store_or_say(target: str, **options: Any) -> Any:
    """``open_store(target)``, or None with the one-line reason on stderr."""
    from .._store import open_store

    try:
        return open_store(target, **options)
    except (StoreError, ValueError, TypeError, OSError, ImportError) as exc:
        print(f"procsched: cannot open the store: {one_line(exc)}", file=sys.stderr)
        return None


def one_line(exc: BaseException) -> str:
    """An error's message on one line (a driver's may span several)."""
    return " ".join(str(exc).split())


def store_label(target: str) -> str:
    """How the CLI names a store in what it prints: a SQLite target as
    given, a PostgreSQL URL without its password and parameters
    (``postgresql://user@host:5432/db``)."""
    if not target.startswith(("postgresql://", "postgres://")):
        return target
    from urllib.parse import urlsplit

    try:
        url = urlsplit(target)
        netloc = url.hostname or ""
        if url.port is not None:
            netloc += f":{url.port}"
    except ValueError:
        return target.partition("://")[0] + "://..."
    user = f"{url.username}@" if url.username else ""
    return f"{url.scheme}://{user}{netloc}{url.path}"


def _sqlite_path(target: str) -> str | None:
    """The file a SQLite target names (as ``open_store`` reads it), or None for another store."""
    if target.startswith(("postgresql://", "postgres://")):
        return None
    if target.startswith("sqlite://"):
        path = target[len("sqlite://") :].partition("?")[0]
        return path[1:] if path.startswith("/") and path != "/" else None  # "/rel" -> "rel", "//abs" -> "/abs"
    return None if "://" in target else target


def jobs_command(args: argparse.Namespace) -> int:
    store = open_existing(args.store)
    if store is None:
        return EXIT_STORE
    try:
        with store:
            tasks = store.jobs()
            schedulers = {h.id: h for h in store.schedulers()}
            store_now = store.now_ns()
    except StoreError as exc:
        print(f"procsched: cannot read the store: {one_line(exc)}", file=sys.stderr)
        return EXIT_STORE
    rows = [
        {
            "key": t.key,
            "schedule": schedule_words(t.definition.schedule),
            "function": t.definition.fn_ref,
            "next_run": iso(t.state.next_due_ns),
            "runs": t.state.run_count,
            "last_outcome": t.last_outcome,
            "paused": t.state.paused,
            "unloadable": t.unloadable,
            "held_by": holder_of(t.holder, schedulers, store_now),
        }
        for t in tasks
    ]
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    for row in rows:
        row["held_by"] = holder_text(row["held_by"])
    _table(["key", "schedule", "next_run", "runs", "last_outcome", "paused", "held_by", "unloadable"], rows)
    return 0


def holder_of(holder_id: str | None, schedulers: dict[str, Any], store_now: int) -> dict[str, Any] | None:
    """Which instance (host, pid) holds a task's run in flight (several may
    share a store), and whether it is alive: ``registered`` False: its
    registration is gone (taken over, or unregistered); ``lease`` is
    ``"alive"`` (renewed in time), ``"expired"`` (not renewed: it stopped or
    hangs, and nobody took it over yet) or ``"gone"``; ``process`` is
    ``"alive"``, ``"dead"`` (on this host) or ``None`` (another host: not
    known here)."""
    if holder_id is None:
        return None
    h = schedulers.get(holder_id)
    if h is not None:
        host, pid = h.host, h.pid
        lease = "alive" if h.lease_until_ns >= store_now else "expired"
        since = h.heartbeat_ns
    else:
        host, _, rest = holder_id.partition(":")
        pid_text = rest.partition(":")[0]
        pid = int(pid_text) if pid_text.isdigit() else None
        lease, since = "gone", None
    return {
        "host": host,
        "pid": pid,
        "registered": h is not None,
        "lease": lease,
        "process": _process_state(host, pid, since),
    }


def _process_state(host: str, pid: int | None, heartbeat_ns: int | None) -> str | None:
    """``"alive"``/``"dead"`` for a process of this host; None for another host."""
    import socket

    import psutil

    if pid is None or host != socket.gethostname():
        return None
    try:
        started = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:  # a zombie too
        return "dead"
    except psutil.Error:
        return "alive"
    if heartbeat_ns is not None and started * 1e9 > heartbeat_ns:
        return "dead"  # that pid now belongs to a process started after the holder's last heartbeat
    return "alive"


def holder_text(held: dict[str, Any] | None) -> str | None:
    """``vm/3029``, ``vm/3029 (dead)``, ``vm/3029 (lease expired)``, ..."""
    if held is None:
        return None
    text = f"{held['host']}/{held['pid'] if held['pid'] is not None else '?'}"
    if held["process"] == "dead":
        return text + " (dead)"
    if held["lease"] == "expired":
        return text + " (lease expired)"
    if held["lease"] == "gone":
        return text + " (gone)"
    return text


def history_command(args: argparse.Namespace) -> int:
    store = open_existing(args.store)
    if store is None:
        return EXIT_STORE
    try:
        with store:
            if args.key is not None and store.get(args.key) is None and not store.last_run(args.key):
                print(f"procsched: no task {args.key!r} in the store (see procsched jobs --store ...)", file=sys.stderr)
                return EXIT_STORE
            records = store.history(args.key, args.n)
    except StoreError as exc:
        print(f"procsched: cannot read the store: {one_line(exc)}", file=sys.stderr)
        return EXIT_STORE
    rows = [
        {
            "key": r.key,
            "run": r.run,
            "attempt": r.attempt,
            "scheduled": iso(r.scheduled_ns),
            "started": iso(r.started_ns),
            "finished": iso(r.finished_ns),
            "outcome": r.outcome,
            "instance": None if r.host is None else {"host": r.host, "pid": r.pid},
            "error": None if r.error_type is None else f"{r.error_type}: {r.error_message}",
        }
        for r in records
    ]
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    for row in rows:
        instance = row["instance"]
        row["instance"] = None if instance is None else f"{instance['host']}/{instance['pid']}"
        row["outcome"] = row["outcome"] or "running"
    # "instance": the scheduler (host/pid) that ran the run, not its worker process
    _table(["key", "run", "attempt", "scheduled", "finished", "outcome", "instance", "error"], rows)
    return 0


def remove_command(args: argparse.Namespace) -> int:
    store = open_existing(args.store)
    if store is None:
        return EXIT_STORE
    try:
        with store:
            if store.get(args.key) is None:
                print(f"procsched: no task {args.key!r} in the store (see procsched jobs --store ...)", file=sys.stderr)
                return EXIT_STORE
            remove_keys(store, [args.key])
    except StoreError as exc:
        print(f"procsched: cannot write the store: {one_line(exc)}", file=sys.stderr)
        return EXIT_STORE
    print(
        f"procsched: removed {args.key!r} from the store (its history is kept); "
        "an instance running it drops it within a second"
    )
    return 0


def remove_keys(store: Any, keys: list[str]) -> None:
    """Delete these keyed tasks (their history kept), in one transaction."""
    batch = store.batch()
    for key in keys:
        batch.delete(key)
    batch.commit()


@dataclass(frozen=True)
class StoreSnapshot:
    """What the store held when ``procsched run --store`` started, before
    the scheduler opened it: for the start-up report (see ``_store_view``)."""

    tasks: dict[str, Any]  # key -> StoredTask
    live: dict[str, Any]  # scheduler id -> Holder: the other instances alive (lease renewed, process not dead)
    now_ns: int  # the store clock
    removed: list[str]  # keys removed because the jobs file no longer declares them


def sync_jobs(
    target: str, names: list[str], *, keep_others: bool, secret: list[bytes] | None = None
) -> StoreSnapshot | None:
    """Make the store's keyed jobs match a jobs file's before it starts:
    the stored tasks the file does not declare are removed (their history
    kept), unless ``keep_others``. Returns what the store holds, or None
    (the reason on stderr) if it cannot be opened or written. ``secret``:
    the program's (``--secret-file``), for the store it opens."""
    store = open_store_or_say(target, secret=secret)
    if store is None:
        return None
    try:
        with store:
            tasks = {t.key: t for t in store.jobs()}
            removed = [] if keep_others else sorted(set(tasks) - set(names))
            if removed:
                remove_keys(store, removed)
            now = store.now_ns()
            live = {
                h.id: h
                for h in store.schedulers()  # (a dead one on this host is taken over at start)
                if h.lease_until_ns >= now and _process_state(h.host, h.pid, h.heartbeat_ns) != "dead"
            }
    except StoreError as exc:
        print(f"procsched: cannot open the store: {one_line(exc)}", file=sys.stderr)
        return None
    return StoreSnapshot({k: t for k, t in tasks.items() if k not in removed}, live, now, removed)


def _table(columns: list[str], rows: list[dict[str, Any]]) -> None:
    cells = [[("-" if row[c] is None else str(row[c])) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=False)).rstrip())
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=False)).rstrip())
