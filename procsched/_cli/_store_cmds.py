"""``procsched jobs``, ``history`` and ``remove``: what a durable store holds,
and opening a store for the commands that read or change one from outside.

    procsched jobs --store S                ──▶ store.jobs_view() (+ instances())  ──▶ a table, or JSON lines
    procsched history [KEY] --store S       ──▶ store.history(KEY, n, skipped=)    ──▶ a table, or JSON lines
                      [--skipped]
    procsched remove KEY --store S          ──▶ store.remove(KEY): its history kept
    procsched run FILE --store S            ──▶ sync_jobs: store.remove for the stored jobs the file no
                                                longer declares (unless --keep-others)

No command here (nor pause, resume, cancel, run-now, web) ever creates a
store: ``open_existing`` opens it read-only first (a missing SQLite file, a
database without procsched's tables, is an error), and ``jobs`` and
``history`` read it that way only (one read transaction each, safe next to
running schedulers; a store on a read-only file system - a backup snapshot
- can be listed). An unknown key is an error. Whatever goes wrong opening a
store is one line, ``procsched: cannot open the store: ...``, and exit
status 1. Times are printed in ISO 8601 UTC.

``jobs`` lists 100,000 stored jobs in well under a second (``python -m
benchmarks.console --cli-jobs 100000``): one query, each distinct schedule
put in words once, and the table formatted with one format string.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from .._errors import StoreError
from ._args import positive_int

if TYPE_CHECKING:
    from .._store import RunRecord, SkippedSlot, Store

EXIT_STORE = 1


def add_parsers(commands: Any) -> None:
    jobs = commands.add_parser(
        "jobs",
        help="list the keyed tasks a durable store holds",
        description="List the keyed tasks in a store (key, schedule, state, next run, "
        "runs, last outcome, which instance holds a run in flight, and why a task cannot "
        "be loaded). Reads only: never creates a store.",
    )
    jobs.set_defaults(handler=jobs_command)
    store_option(jobs)
    jobs.add_argument("--json", action="store_true", help="one JSON object per line")
    history = commands.add_parser(
        "history",
        help="print past runs from a durable store",
        description="Print the last runs of one keyed task, or of all of them "
        "(with --skipped, the slots that were not run too, and why). "
        "Reads only.",
    )
    history.set_defaults(handler=history_command)
    store_option(history)
    history.add_argument("key", nargs="?", default=None, metavar="KEY", help="one task's key (default: every task)")
    history.add_argument(
        "-n",
        type=positive_int("-n"),
        default=20,
        metavar="N",
        help="the last N runs (with --skipped: runs and skipped slots; default 20)",
    )
    history.add_argument(
        "--skipped",
        action="store_true",
        help="list the skipped slots too, with their reason (overlap, misfire, late, paused, down), in slot order",
    )
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
    store_option(remove)


def store_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store",
        required=True,
        metavar="PATH_OR_URL",
        help="the store: a SQLite file path, sqlite:///path or postgresql://...",
    )


def iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="milliseconds")


#: "YYYY-MM-DDTHH:MM:" by minute since the epoch, for ``iso_z`` (a listing's times share few minutes).
_MINUTES: dict[int, str] = {}


def iso_z(ns: int | None) -> str:
    """``2026-03-08T07:00:00.000Z`` (``-`` for None): ``iso`` for tables of
    100,000 rows (each minute's text made once: a third of ``iso``'s cost)."""
    if ns is None:
        return "-"
    ms = ns // 1_000_000
    minute, ms = divmod(ms, 60_000)
    head = _MINUTES.get(minute)
    if head is None:
        if len(_MINUTES) > 100_000:
            _MINUTES.clear()
        head = _MINUTES[minute] = time.strftime("%Y-%m-%dT%H:%M:", time.gmtime(minute * 60))
    return f"{head}{ms // 1000:02d}.{ms % 1000:03d}Z"


def schedule_words(s: dict[str, Any]) -> str:
    kind = s.get("kind")
    if kind == "cron":
        return f"cron {s['expr']}" + (f" ({s['tz']})" if s.get("tz") else "")
    if kind == "once":
        return "once"
    if kind in ("fixed_rate", "fixed_delay"):
        word = "every" if kind == "fixed_rate" else "delay"
        return f"{word} {s['period_ns'] / 1e9:g}s"
    return "unknown schedule"


def open_existing(target: str, *, write: bool = False, secret: list[bytes] | None = None) -> Store | None:
    """The store ``target`` names, if there is one: None (the one-line
    reason on stderr) if it cannot be opened. Never creates a store: it is
    opened read-only (``open_store(read_only=True)``: a missing SQLite file,
    a database without procsched's tables, is an error); ``write``: then
    opened again to be written (pause, remove, the console's actions).
    ``secret``: the store's (``procsched web --secret-file``), or None."""
    store = open_store_or_say(target, read_only=True, secret=secret)
    if store is None or not write:
        return store
    store.close()
    return open_store_or_say(target, secret=secret)


def open_store_or_say(target: str, **options: Any) -> Store | None:
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


def no_task(key: str) -> int:
    print(f"procsched: no task {key!r} in the store (see procsched jobs --store ...)", file=sys.stderr)
    return EXIT_STORE


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


# -- procsched jobs -------------------------------------------------------------------


def job_state(view: Any, st: Any) -> str:
    """unloadable, running (a run in flight), paused, done (no next run) or
    pending (``st``: its ``state``)."""
    if view.unloadable is not None:
        return "unloadable"
    if view.in_flight:
        return "running"
    if st.paused:
        return "paused"
    return "done" if st.next_due_ns is None else "pending"


JOB_COLUMNS = ("key", "schedule", "state", "next_run", "runs", "last_outcome", "held_by", "unloadable")


def jobs_command(args: argparse.Namespace) -> int:
    # 100,000 rows make ~500,000 objects in no cycle: without this the cyclic
    # collector walks the growing listing again and again (a fifth of the time)
    gc.disable()
    try:
        return _jobs(args)
    finally:
        gc.enable()


def _jobs(args: argparse.Namespace) -> int:
    store = open_existing(args.store)
    if store is None:
        return EXIT_STORE
    try:
        with store:
            views = store.jobs_view()
            holders = {v.held_by.id for v in views if v.held_by is not None}
            instances = {i.id: i for i in store.instances()} if holders else {}
    except StoreError as exc:
        print(f"procsched: cannot read the store: {one_line(exc)}", file=sys.stderr)
        return EXIT_STORE
    held = {ident: holder_of(ident, instances) for ident in holders}
    words: dict[int, str] = {}  # id(schedule) -> words: the read model shares one dict among equal schedules
    if args.json:
        out = []
        for v in views:
            s = v.schedule
            text = words.get(id(s))
            if text is None:
                text = words[id(s)] = schedule_words(s)
            out.append(
                json.dumps(
                    {
                        "key": v.key,
                        "name": v.name,
                        "schedule": text,
                        "function": v.fn_ref,
                        "state": job_state(v, v.state),
                        "next_run": iso(v.state.next_due_ns),
                        "runs": v.state.run_count,
                        "last_outcome": v.last_outcome,
                        "paused": v.state.paused,
                        "in_flight": v.in_flight,
                        "unloadable": v.unloadable,
                        "held_by": None if v.held_by is None else held[v.held_by.id],
                        "kept_by": None if v.claimed_by is None else _ref_dict(v.claimed_by),
                    }
                )
            )
        _write(out)
        return 0
    held_text = {ident: holder_text(h) for ident, h in held.items()}
    rows = []
    for v in views:
        s = v.schedule
        text = words.get(id(s))
        if text is None:
            text = words[id(s)] = schedule_words(s)
        st = v.state
        rows.append(
            (
                v.key,
                text,
                job_state(v, st),
                iso_z(st.next_due_ns),
                str(st.run_count),
                v.last_outcome or "-",
                "-" if v.held_by is None else held_text[v.held_by.id],
                v.unloadable or "-",
            )
        )
    table(JOB_COLUMNS, rows)
    return 0


def _ref_dict(ref: Any) -> dict[str, Any]:
    return {"host": ref.host, "pid": ref.pid, "alive": ref.alive}


def holder_of(holder_id: str, instances: dict[str, Any]) -> dict[str, Any]:
    """Which instance (host, pid) holds a task's run in flight (several may
    share a store), and whether it is alive: ``registered`` False: its
    registration is gone (taken over, or unregistered); ``lease`` is
    ``"alive"`` (renewed in time), ``"expired"`` (not renewed: it stopped or
    hangs, and nobody took it over yet) or ``"gone"``; ``process`` is
    ``"alive"``, ``"dead"`` (on this host) or ``None`` (another host: not
    known here)."""
    i = instances.get(holder_id)
    if i is not None:
        host, pid = i.host, i.pid
        lease = "alive" if i.alive else "expired"
        since = i.heartbeat_ns
    else:
        host, _, rest = holder_id.partition(":")
        pid_text = rest.partition(":")[0]
        pid = int(pid_text) if pid_text.isdigit() else None
        lease, since = "gone", None
    return {
        "host": host,
        "pid": pid,
        "registered": i is not None,
        "lease": lease,
        "process": process_state(host, pid, since),
    }


def process_state(host: str, pid: int | None, heartbeat_ns: int | None) -> str | None:
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


def holder_text(held: dict[str, Any] | None) -> str:
    """``vm/3029``, ``vm/3029 (dead)``, ``vm/3029 (lease expired)``, ..."""
    if held is None:
        return "-"
    text = f"{held['host']}/{held['pid'] if held['pid'] is not None else '?'}"
    if held["process"] == "dead":
        return text + " (dead)"
    if held["lease"] == "expired":
        return text + " (lease expired)"
    if held["lease"] == "gone":
        return text + " (gone)"
    return text


# -- procsched history -------------------------------------------------------------------

HISTORY_COLUMNS = (
    "key",
    "run",
    "attempt",
    "cause",
    "scheduled",
    "finished",
    "outcome",
    "reason",
    "instance",
    "worker",
    "error",
)


def history_command(args: argparse.Namespace) -> int:
    store = open_existing(args.store)
    if store is None:
        return EXIT_STORE
    try:
        with store:
            if args.key is not None and not store.last_run(args.key) and store.job_view(args.key, 1) is None:
                return no_task(args.key)
            records = store.history(args.key, args.n, skipped=args.skipped)
    except StoreError as exc:
        print(f"procsched: cannot read the store: {one_line(exc)}", file=sys.stderr)
        return EXIT_STORE
    if args.json:
        _write([json.dumps(_history_json(r)) for r in records])
        return 0
    from .._store import SkippedSlot

    rows = []
    for r in records:
        if isinstance(r, SkippedSlot):
            instance = _instance_text(r.holder)
            rows.append((r.key, "-", "-", "-", iso_z(r.slot_ns), "-", "skipped", r.reason, instance, "-", "-"))
            continue
        error = _error(r)
        rows.append(
            (
                r.key,
                str(r.run),
                str(r.attempt),
                r.cause,
                iso_z(r.scheduled_ns),
                iso_z(r.finished_ns),
                r.outcome or "running",
                r.reason or "-",
                "-" if r.pid is None else f"{r.host}/{r.pid}",
                "-" if r.worker_pid is None else str(r.worker_pid),
                "-" if error is None else " ".join(error.split()),
            )
        )
    # "instance": the scheduler (host/pid) that ran the run; "worker": the worker process that ran it
    table(HISTORY_COLUMNS, rows)
    return 0


def _error(r: RunRecord) -> str | None:
    if r.error_type is None:
        return r.error_message
    return f"{r.error_type}: {r.error_message}" if r.error_message else r.error_type


def _instance_text(ident: str | None) -> str:
    if ident is None:
        return "-"
    host, _, rest = ident.partition(":")
    return f"{host}/{rest.partition(':')[0]}"


def _history_json(r: RunRecord | SkippedSlot) -> dict[str, Any]:
    from .._store import SkippedSlot

    if isinstance(r, SkippedSlot):
        host, _, rest = (r.holder or "").partition(":")
        pid = rest.partition(":")[0]
        return {
            "key": r.key,
            "run": None,
            "attempt": None,
            "cause": None,
            "scheduled": iso(r.slot_ns),
            "started": None,
            "finished": None,
            "outcome": "skipped",
            "reason": r.reason,
            "instance": {"host": host, "pid": int(pid)} if pid.isdigit() else None,
            "worker_pid": None,
            "error": None,
            "traceback": None,
            "output": None,
        }
    return {
        "key": r.key,
        "run": r.run,
        "attempt": r.attempt,
        "cause": r.cause,
        "scheduled": iso(r.scheduled_ns),
        "started": iso(r.started_ns),
        "finished": iso(r.finished_ns),
        "outcome": r.outcome,
        "reason": r.reason,
        "instance": None if r.host is None else {"host": r.host, "pid": r.pid},
        "worker_pid": r.worker_pid,
        "error": _error(r),
        "traceback": r.error_traceback,
        "output": r.output,
    }


# -- procsched remove, and run --store's sync ------------------------------------------------


def remove_command(args: argparse.Namespace) -> int:
    store = open_existing(args.store, write=True)
    if store is None:
        return EXIT_STORE
    try:
        with store:
            if not store.remove(args.key):
                return no_task(args.key)
    except StoreError as exc:
        print(f"procsched: cannot write the store: {one_line(exc)}", file=sys.stderr)
        return EXIT_STORE
    print(
        f"procsched: removed {args.key!r} from the store (its history is kept); "
        "an instance running it drops it within a second"
    )
    return 0


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
            for key in removed:
                store.remove(key)
            now = store.now_ns()
            live = {
                h.id: h
                for h in store.schedulers()  # (a dead one on this host is taken over at start)
                if h.lease_until_ns >= now and process_state(h.host, h.pid, h.heartbeat_ns) != "dead"
            }
    except StoreError as exc:
        print(f"procsched: cannot open the store: {one_line(exc)}", file=sys.stderr)
        return None
    return StoreSnapshot({k: t for k, t in tasks.items() if k not in removed}, live, now, removed)


# -- output ------------------------------------------------------------------------------------


def table(columns: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    """Aligned columns, the last one not padded: each column's width in one
    C-level pass, then one format string for every row (100,000 rows: a few
    tens of ms)."""
    widths = [max(len(c), max(map(len, map(itemgetter(i), rows)), default=0)) for i, c in enumerate(columns)]
    fmt = "  ".join(f"%-{w}s" for w in widths[:-1]) + "  %s"
    _write([fmt % columns, *[fmt % row for row in rows]])


def _write(lines: list[str]) -> None:
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
