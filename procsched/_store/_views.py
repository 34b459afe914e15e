"""The read model: what the console, the CLI and the metrics read (issue 23).

    change_mark()  ── the change counters (a row per instance + one) ── cheap, at most once a second
    jobs_view()    ── tasks JOIN definitions LEFT JOIN schedulers (holder, last claimer): one query
    job_view(key)  ── that row + the last runs and skipped slots
    instances()    ── schedulers + their runs in flight + how many tasks each keeps + their status
    counts()       ── the per-task totals (attempts by outcome, skipped slots by reason)

Plain data only: nothing here unpickles a task's arguments, so a view can
be shown to whoever may see a job's name, schedule and state (the console
still shows arguments, output and tracebacks to authenticated sessions
only). A store with a secret (``procsched web --secret-file``) reads the
arguments' bytes too, to check each row's signature: a row that fails is
listed unloadable with the reason (issue 24) even before an instance has
refused it. Every view is one read transaction: one snapshot.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._model import (
    OUTCOMES,
    SKIP_REASONS,
    ChangeMark,
    HolderRef,
    InstanceStatus,
    InstanceView,
    JobDetail,
    JobView,
    RunRecord,
    SkippedSlot,
    StoreCounts,
    TaskState,
)
from ._schema import RUN_COLS, RUN_COUNTERS, SCHED_COLS, SKIP_COUNTERS

if TYPE_CHECKING:
    from ._access import StoreAccess
    from ._trust import Keyring

_COUNTER_COLS = ", ".join(f"t.{c}" for c in RUN_COUNTERS + SKIP_COUNTERS)
_JOB_SELECT = """SELECT t.key, d.name, d.fn_ref, d.schedule, d.options, d.def_hash, t.run_count, t.next_due_ns,
    t.next_attempt, t.paused, t.last_outcome, t.unloadable, t.in_flight, t.max_concurrent, t.grp, t.updated_ns,
    t.holder, t.last_holder
    FROM procsched_tasks t JOIN procsched_definitions d ON d.key = t.key"""
#: The same with what a signature check reads (a store with a secret).
_JOB_SELECT_SIGNED = _JOB_SELECT.replace(" t.last_holder\n", " t.last_holder, d.signature, d.args\n", 1)
#: What tells whether a row listed before is unchanged: its write stamp and the
#: instances it names (who holds and who keeps it: their leases are read apart).
_JOB_STAMPS = "SELECT key, updated_ns, holder, last_holder FROM procsched_tasks ORDER BY key"
#: Keys per statement when only some rows are read again.
_KEYS_PER_READ = 500
_RUNS = len(RUN_COUNTERS)


def _select(store: StoreAccess) -> str:
    return _JOB_SELECT_SIGNED if store._keyring else _JOB_SELECT


def holder_ref(
    ident: str | None, host: str | None, pid: int | None, lease_until: int | None, now: int
) -> HolderRef | None:
    """Who ``ident`` is, from its registration row if it has one (else from
    the id, ``host:pid:nonce``: a registration taken over or ended)."""
    if ident is None:
        return None
    if lease_until is not None:
        return HolderRef(ident, host, pid, lease_until >= now, True)
    name, _, rest = ident.partition(":")
    number = rest.partition(":")[0]
    return HolderRef(ident, name or None, int(number) if number.isdigit() else None, False, False)


class _Refs:
    """The instances a listing's rows name, each made once (10,000 rows name
    a few): from the registrations read in the listing's transaction, else
    from the id (a registration taken over or ended)."""

    def __init__(self, store: StoreAccess, cur: Any, now: int) -> None:
        self.now = now
        self.known: dict[str | None, HolderRef | None] = {None: None}
        for ident, host, pid, until in store._x(
            cur, "SELECT id, host, pid, lease_until_ns FROM procsched_schedulers"
        ).fetchall():
            self.known[ident] = holder_ref(ident, host, pid, until, now)

    def __call__(self, ident: str | None) -> HolderRef | None:
        try:
            return self.known[ident]
        except KeyError:
            ref = self.known[ident] = holder_ref(ident, None, None, None, self.now)
            return ref


def _json(text: str, parsed: dict[str, Any]) -> Any:
    value = parsed.get(text)
    if value is None:
        value = parsed[text] = json.loads(text)
    return value


def _job(row: Any, refs: _Refs, parsed: dict[str, Any], keyring: Keyring | None = None) -> JobView:
    """A listing's row (``_select``: with a secret, ``keyring`` checks its signature)."""
    if keyring:
        *row, signature, args = row
    (
        key,
        name,
        fn_ref,
        schedule,
        options,
        def_hash,
        run_count,
        next_due,
        next_attempt,
        paused,
        last_outcome,
        unloadable,
        in_flight,
        max_concurrent,
        group,
        updated,
        holder,
        last,
    ) = row
    if keyring:  # a failed check first: what the store has may be older, or nothing yet
        unloadable = keyring.check(signature, key, fn_ref, args, schedule, options) or unloadable
    try:
        sched = _json(schedule, parsed)
    except ValueError:  # a row nobody can read is listed, not a reason to fail the listing
        sched = {"kind": "unknown"}
    return JobView(
        key,
        name,
        fn_ref,
        sched,
        options,
        def_hash,
        TaskState(run_count, next_due, next_attempt, bool(paused)),
        last_outcome,
        unloadable,
        in_flight,
        max_concurrent,
        group,
        refs(holder),
        refs(last),
        updated,
    )


def jobs_view(store: StoreAccess, known: Mapping[str, JobView] | None = None) -> list[JobView]:
    """Every task by key. ``known``: the views of an earlier listing, by
    key; a row whose write stamp (``updated_ns``) is the one its known view
    has is not read again: that view is listed, with who holds and keeps it
    as the registrations say now. On a store with a secret every row is
    read and its signature checked, whatever is known."""
    keyring = store._keyring
    parsed: dict[str, Any] = {}
    with store._tx("listing jobs", write=False) as cur:
        refs = _Refs(store, cur, store._now(cur))
        if known and not keyring:
            stamps = store._x(cur, _JOB_STAMPS).fetchall()
            stale = [k for k, updated, _, _ in stamps if (v := known.get(k)) is None or v.updated_ns != updated]
            if 2 * len(stale) <= len(stamps):  # (else one read of every row costs less)
                read: dict[str, JobView] = {}
                for i in range(0, len(stale), _KEYS_PER_READ):
                    some = stale[i : i + _KEYS_PER_READ]
                    sql = f"{_JOB_SELECT} WHERE t.key IN ({', '.join('?' * len(some))})"
                    for r in store._x(cur, sql, some).fetchall():
                        read[r[0]] = _job(r, refs, parsed)
                return _listed(stamps, known, read, refs)
        rows = store._x(cur, f"{_select(store)} ORDER BY t.key").fetchall()
    return [_job(r, refs, parsed, keyring) for r in rows]


def _listed(stamps: list[Any], known: Mapping[str, JobView], read: dict[str, JobView], refs: _Refs) -> list[JobView]:
    """The listing in ``stamps``' order: the rows ``read`` again, the others as ``known``."""
    views = []
    for key, _, holder, last in stamps:
        v = read.get(key)
        if v is None:
            v = known.get(key)
            if v is None:  # a state row without its definition: not listed (as the join does not)
                continue
            held, kept = refs(holder), refs(last)
            if v.held_by != held or v.claimed_by != kept:  # an instance's lease ran out, or it left
                v = dataclasses.replace(v, held_by=held, claimed_by=kept)
        views.append(v)
    return views


def job_view(store: StoreAccess, key: str, n: int) -> JobDetail | None:
    if type(n) is not int or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    with store._tx("reading a job", write=False) as cur:
        now = store._now(cur)
        row = store._x(cur, f"{_select(store)} WHERE t.key = ?", (key,)).fetchone()
        if row is None:
            return None
        refs = _Refs(store, cur, now)
        totals = store._x(cur, f"SELECT {_COUNTER_COLS} FROM procsched_tasks t WHERE t.key = ?", (key,)).fetchone()
        last_runs = runs(store, cur, key, n)
        last_skipped = skipped(store, cur, key, n)
    return JobDetail(
        _job(row, refs, {}, store._keyring),
        last_runs,
        last_skipped,
        merge(last_runs, last_skipped, n),
        dict(zip(OUTCOMES, totals[:_RUNS], strict=False)),
        dict(zip(SKIP_REASONS, totals[_RUNS:], strict=False)),
    )


def runs(store: StoreAccess, cur: Any, key: str | None, n: int) -> list[RunRecord]:
    """The last ``n`` attempts of ``key`` (every task's if None), oldest first."""
    if key is None:
        sql = (
            f"SELECT {RUN_COLS} FROM procsched_runs "
            "ORDER BY COALESCE(started_ns, scheduled_ns) DESC, key DESC, run DESC, attempt DESC LIMIT ?"
        )
        rows = store._x(cur, sql, (n,)).fetchall()
    else:
        sql = f"SELECT {RUN_COLS} FROM procsched_runs WHERE key = ? ORDER BY run DESC, attempt DESC LIMIT ?"
        rows = store._x(cur, sql, (key, n)).fetchall()
    return [RunRecord(*r) for r in reversed(rows)]


#: A skipped slot's row, and the misfire slots a run's end dropped (on its
#: run's row: recorded when it ended, by its holder), as the same columns.
_OWN = "key, slot_ns, reason, recorded_ns, holder, period_ns, slots"
_ON_RUNS = "key, skip_first_ns, 'misfire', finished_ns, holder, skip_period_ns, skip_slots"


def skipped(store: StoreAccess, cur: Any, key: str | None, n: int) -> list[SkippedSlot]:
    """The last ``n`` skipped slots of ``key`` (every task's if None; at most
    ``keep_runs`` of one task), oldest first. A row is ``slots`` slots
    ``period_ns`` apart: of each table, the ``n`` rows whose last slots are
    the newest hold its newest ``n`` slots. A slot found twice is listed once."""
    if key is None:
        rows = store._x(
            cur,
            f"SELECT {_OWN} FROM procsched_skipped ORDER BY slot_ns + period_ns * (slots - 1) DESC, key DESC LIMIT ?",
            (n,),
        ).fetchall()
        rows += store._x(
            cur,
            f"SELECT {_ON_RUNS} FROM procsched_runs WHERE skip_slots > 0 "
            "ORDER BY skip_first_ns + skip_period_ns * (skip_slots - 1) DESC, key DESC LIMIT ?",
            (n,),
        ).fetchall()
    else:  # (a task's rows are trimmed to keep_runs now and then: see _writes)
        n = min(n, store.keep_runs)
        rows = store._x(
            cur, f"SELECT {_OWN} FROM procsched_skipped WHERE key = ? ORDER BY slot_ns DESC LIMIT ?", (key, n)
        ).fetchall()
        rows += store._x(
            cur,
            f"SELECT {_ON_RUNS} FROM procsched_runs WHERE key = ? AND skip_slots > 0 "
            "ORDER BY run DESC, attempt DESC LIMIT ?",
            (key, n),
        ).fetchall()
    slots: dict[tuple[str, int], SkippedSlot] = {}
    for k, first, reason, recorded, holder, period, count in rows:
        for i in range(max(0, count - n), count):
            slots.setdefault((k, first + i * period), SkippedSlot(k, first + i * period, reason, recorded, holder))
    newest = sorted(slots, key=lambda ks: (ks[1], ks[0]))[-n:] if n > 0 else []
    return [slots[ks] for ks in newest]


def merge(last_runs: list[RunRecord], last_skipped: list[SkippedSlot], n: int) -> list[RunRecord | SkippedSlot]:
    """Runs and skipped slots in slot order (a skipped slot before a run of
    the same slot), the last ``n``."""
    both: list[RunRecord | SkippedSlot] = [*last_runs, *last_skipped]
    both.sort(key=lambda x: (x.slot_ns, 1, x.run, x.attempt) if isinstance(x, RunRecord) else (x.slot_ns, 0, 0, 0))
    return both[-n:]


def instances(store: StoreAccess) -> list[InstanceView]:
    with store._tx("listing instances", write=False) as cur:
        now = store._now(cur)
        rows = store._x(cur, f"SELECT {SCHED_COLS}, status FROM procsched_schedulers ORDER BY host, pid, id").fetchall()
        held = store._x(cur, "SELECT holder, key FROM procsched_runs WHERE outcome IS NULL ORDER BY key").fetchall()
        keeping = dict(
            store._x(
                cur,
                "SELECT last_holder, count(*) FROM procsched_tasks WHERE last_holder IS NOT NULL GROUP BY last_holder",
            ).fetchall()
        )
    holding: dict[str, list[str]] = {}
    for holder, key in held:
        keys = holding.setdefault(holder, [])
        if not keys or keys[-1] != key:
            keys.append(key)
    return [
        InstanceView(
            ident,
            host,
            pid,
            token,
            lease,
            until,
            beat,
            until >= now,
            holding.get(ident, []),
            int(keeping.get(ident, 0)),
            InstanceStatus.from_json(status),
        )
        for ident, token, host, pid, lease, until, beat, status in rows
    ]


def counts(store: StoreAccess) -> StoreCounts:
    cols = ", ".join(RUN_COUNTERS + SKIP_COUNTERS)
    with store._tx("counting", write=False) as cur:
        now = store._now(cur)
        rows = store._x(cur, f"SELECT key, {cols} FROM procsched_tasks").fetchall()
        leases = [r[0] for r in store._x(cur, "SELECT lease_until_ns FROM procsched_schedulers").fetchall()]
    runs_total = dict.fromkeys(OUTCOMES, 0)
    skipped_total = dict.fromkeys(SKIP_REASONS, 0)
    by_job = {}
    for key, *values in rows:
        r, s = dict(zip(OUTCOMES, values[:_RUNS], strict=False)), dict(zip(SKIP_REASONS, values[_RUNS:], strict=False))
        for name, v in r.items():
            runs_total[name] += v
        for name, v in s.items():
            skipped_total[name] += v
        by_job[key] = (r, s)
    return StoreCounts(
        len(rows), len(leases), sum(1 for until in leases if until >= now), runs_total, skipped_total, by_job
    )


def change_mark(store: StoreAccess) -> ChangeMark:
    with store._tx("reading the change mark", write=False) as cur:
        now = store._now(cur)
        rows = store._x(
            cur,
            "SELECT '', changes, (SELECT max(updated_ns) FROM procsched_tasks), NULL "
            "FROM procsched_version UNION ALL "
            "SELECT id, changes, lease_until_ns, status FROM procsched_schedulers",
        ).fetchall()
    rows.sort(key=lambda r: r[0])
    jobs = hashlib.blake2b(repr([(r[0], r[1]) for r in rows] + [rows[0][2]]).encode(), digest_size=12).hexdigest()
    instances = hashlib.blake2b(
        repr([(r[0], r[2] >= now, r[3]) for r in rows[1:]]).encode(), digest_size=12
    ).hexdigest()
    return ChangeMark(jobs, instances)
