"""Writing a batch (``Batch.commit`` -> ``commit``): one transaction, op by op or set-wise.

    commit(store, batch) ── _write(isolate=False) ── fence / change counter ── lock rows (PostgreSQL)
        │                       └─ per group of ops of one kind (claims and ends layered: _groups):
        │                            claims  ── _claim_group: set-wise when plain, else _op_started
        │                            ends    ── _end_group: set-wise while every run is ours, else _op_finished
        │                            (PostgreSQL: _pair_sent - ends and the claims after them in one round
        │                             trip, a batch's first ones with the BEGIN and the lease renewal)
        │                            skips   ── _skip_group: set-wise (gathered past claims and ends)
        │                            others  ── _op_upsert / _op_update / _op_delete / _op_unloadable /
        │                                       _op_skipped / _op_answer
        └─ an op refused for its own data ── _write(isolate=True): each op in a savepoint, the refused left out

The rules each op follows are in ``_sql``'s theory of operation ("Claims",
"Causes", "Concurrency", "Finishing", "Idempotent retries", "One bad op");
``_op_started`` and ``_op_finished`` are their reference implementations,
the set-wise paths fast paths that must give the same results.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from . import _schema
from ._access import NOW_SETTING
from ._batch import Answer, Batch, Delete, Finished, Moved, Op, Skipped, Started, Unloadable, Update, Upsert, op_key
from ._model import OUTCOMES, BatchResult, FailedOp, Holder, RunRecord, TaskState
from ._schema import RUN_COLS

if TYPE_CHECKING:
    from ._access import StoreAccess

#: PostgreSQL: the store clock the transaction's lease renewal (or ``_now``)
#: read, in SQL - for statements sent before its answer (``_pair_sent``). A
#: renewal that found its holder fenced out set nothing (then the setting
#: reads '', or nothing in a new session): 0, in a transaction rolled back.
_NOW_PG = f"COALESCE(NULLIF(current_setting('{NOW_SETTING}', true), '')::bigint, 0)"
#: A new scheduled run's slot must come at least this long after the last
#: scheduled slot claimed (a scheduler whose run numbers drifted from the
#: store's cannot run a slot twice under another number; two schedulers'
#: wall times of one slot differ by microseconds of clock reading, far below this).
SLOT_GAP_NS = 1_000_000

_REPLACE_RUN = (
    "ON CONFLICT (key, run, attempt) DO UPDATE SET scheduled_ns = excluded.scheduled_ns, "
    "started_ns = excluded.started_ns, finished_ns = NULL, host = excluded.host, pid = excluded.pid, "
    "outcome = NULL, error_type = NULL, error_message = NULL, holder = excluded.holder, "
    "token = excluded.token, skip_first_ns = NULL, skip_period_ns = 0, skip_slots = 0"
)

# A claimed run's row: it replaces one left by an earlier task of the same key
# (deleted, then scheduled again): the claim on the state row decided.
_INSERT_RUN = f"""INSERT INTO procsched_runs ({RUN_COLS})
    VALUES (?, ?, ?, ?, ?, NULL, ?, ?, NULL, NULL, NULL, ?, ?, ?, NULL, NULL, ?, NULL, NULL, ?)
    {_REPLACE_RUN}, cause = excluded.cause, reason = NULL, error_traceback = NULL, worker_pid = excluded.worker_pid,
    output = NULL, retry_due_ns = NULL, grp = excluded.grp"""
_RUN_COUNTER_SETS = ", ".join(f"{c} = {c} + ?" for c in _schema.RUN_COUNTERS)
# The end of a run: its row (fenced), then the task's state (see "Finishing").
_END_RUN = """UPDATE procsched_runs SET finished_ns = ?, outcome = ?, error_type = ?, error_message = ?,
    error_traceback = ?, reason = ?, worker_pid = COALESCE(?, worker_pid), output = ?, retry_due_ns = ?,
    skip_first_ns = ?, skip_period_ns = ?, skip_slots = ?
    WHERE key = ? AND run = ? AND attempt = ? AND outcome IS NULL AND holder = ? AND token = ?"""
_OTHER_HOLDER = """(SELECT r.{col} FROM procsched_runs r WHERE r.key = procsched_tasks.key AND r.outcome IS NULL
    AND NOT (r.run = ? AND r.attempt = ?) ORDER BY r.run DESC, r.attempt DESC LIMIT 1)"""
_RESCHEDULE = f"""UPDATE procsched_tasks SET next_due_ns = CASE WHEN sched_run = ? THEN ? ELSE next_due_ns END,
    next_attempt = CASE WHEN sched_run = ? AND run_count = ? THEN ? ELSE next_attempt END,
    in_flight = CASE WHEN in_flight > 0 THEN in_flight - 1 ELSE 0 END,
    holder = CASE WHEN in_flight <= 1 THEN NULL ELSE {_OTHER_HOLDER.format(col="holder")} END,
    token = CASE WHEN in_flight <= 1 THEN NULL ELSE {_OTHER_HOLDER.format(col="token")} END,
    last_outcome = ?, {_RUN_COUNTER_SETS}, skipped_misfire = skipped_misfire + ?,
    last_slot_ns = CASE WHEN sched_run = ? AND ? > COALESCE(last_slot_ns, -1) THEN ? ELSE last_slot_ns END,
    updated_ns = ? WHERE key = ?"""
# A run's end trims the run that fell out of the kept window (run - keep_runs,
# every attempt of it); every TRIM_SWEEP-th run's end trims all runs below the
# window (one that was still in flight when its turn came, a run number never
# claimed). Not every end all below: PostgreSQL keeps a deleted row's index
# entries until VACUUM, and a range from run 0 walked them all - every dead
# run of the task, hundreds after a busy second (0.5 ms of a 2.3 ms commit).
_TRIM = "DELETE FROM procsched_runs WHERE key = ? AND run >= ? AND run <= ? AND outcome IS NOT NULL"
TRIM_SWEEP = 64


def _trimmed(run: int, keep_runs: int) -> tuple[int, int] | None:
    """The run numbers (from, to) the end of ``run`` trims (None: nothing)."""
    upto = run - keep_runs
    if upto < 1:
        return None
    return (0 if run % TRIM_SWEEP == 0 else upto, upto)


# The set-wise claim (SQLite: executemany): a new scheduled run of a task with
# no group and no retry due - the claims of a busy turn. Anything else, and any
# claim this does not win, is decided op by op (_op_started).
_CLAIM_PLAIN = """UPDATE procsched_tasks SET run_count = ?, next_attempt = 1, next_due_ns = ?, sched_run = ?,
    last_slot_ns = ?, in_flight = in_flight + 1, holder = ?, token = ?, last_holder = ?, updated_ns = ?
    WHERE key = ? AND grp IS NULL AND paused = 0 AND next_attempt = 1 AND in_flight < max_concurrent
    AND run_count + 1 = ? AND (last_slot_ns IS NULL OR last_slot_ns <= ?)"""


def _outcome_counts(outcome: str, n: int = 1) -> list[int]:
    return [n if o == outcome else 0 for o in OUTCOMES]


class _Fenced(Exception):
    """The lease renewal found this holder fenced out: the transaction is
    rolled back (what was sent with the renewal included)."""


@contextlib.contextmanager
def _faults(store: StoreAccess, isolate: bool) -> Iterator[None]:
    """A refusal of an op's own data becomes _RowFault (the batch goes again
    op by op) - but while already isolating, where it is a fault."""
    try:
        yield
    except store._errors() + (ValueError, TypeError, OverflowError) as exc:
        if not isolate and store._row_fault(exc):
            raise _RowFault(exc) from exc
        raise


class _RowFault(Exception):
    """An op the database refused for its own data (see "One bad op"): the
    batch goes again op by op. Carries the original exception."""


@dataclasses.dataclass(slots=True)
class Commit:
    """One commit's context, for the ops it writes."""

    now: int
    holder: Holder | None
    result: BatchResult
    claim_keys: list[str]
    groups_locked: bool = False


def _groups(ops: list[Any]) -> Iterator[tuple[str, list[Any]]]:
    """The ops in groups of one kind, each key at most once per group (so a
    set-wise statement does exactly what the ops one by one would) - but for
    skipped slots, which ``_skip_group`` takes set-wise for any number per key.

    Claims and ends go each into the first group of its kind after its
    key's latest op and after the latest op of another kind (an add, a
    pause, a delete...: a barrier), so a batch of several turns (ends,
    claims, ends, claims) is one group of ends and one of claims, in each
    key's order. Only a claim of a group with a shared limit reads other
    keys' runs (those in flight): an end moved before it leaves it more
    room, as if that end had come first - it was done before this commit.
    PostgreSQL writes a statement per group, each a round trip (a two-turn
    batch of 20 keyed tasks: 4 of ~0.4-0.6 ms each in a 2.5 ms commit; keyed
    runs/s in ``benchmarks.durable``, three alternated pairs: 3.3-3.5k ->
    3.8-3.9k); on SQLite the same (with its sub-journals in memory: see
    ``SQLiteStore``)."""
    groups: list[tuple[str, list[Any], set[str]]] = []
    latest: dict[str, int] = {}  # key -> the group of its latest op
    layers: dict[str, list[int]] = {"started": [], "finished": []}  # kind -> its groups since the latest barrier
    for op in ops:
        kind = op[0]
        key = op_key(op)
        spots = layers.get(kind)
        if spots is not None and key is not None:
            i = bisect.bisect_right(spots, latest.get(key, -1))
            if i < len(spots):
                at = spots[i]
            else:
                at = len(groups)
                groups.append((kind, [], set()))
                spots.append(at)
        else:
            last = groups[-1] if groups else None
            if last is not None and last[0] == kind and (key is None or key not in last[2] or kind == "skipped"):
                at = len(groups) - 1
            else:
                at = len(groups)
                groups.append((kind, [], set()))
            layers = {"started": [], "finished": []}
        group = groups[at]
        group[1].append(op)
        if key is not None:
            group[2].add(key)
            latest[key] = at
    for kind, group_ops, _keys in groups:
        yield kind, group_ops


def commit(store: StoreAccess, batch: Batch) -> BatchResult:
    if not batch.ops:
        return BatchResult()
    try:
        return _write(store, batch, isolate=False)
    except _RowFault:
        return _write(store, batch, isolate=True)


def _write(store: StoreAccess, batch: Batch, isolate: bool) -> BatchResult:
    """One try at writing ``batch``; ``isolate``: op by op, each in a
    savepoint, leaving out those the database refuses."""
    ops = batch.ops
    holder = batch.holder
    c = Commit(0, holder, BatchResult(), [op[1] for op in ops if op[0] == "started"])
    groups = list(_groups(_skips_gathered(_misfires_folded(ops))))
    pairs = store._pg and not isolate  # (PostgreSQL: ends and claims set-wise, sent together: _pair_sent)
    # Pipelined (PostgreSQL): BEGIN, the row locks, the lease renewal (or the
    # clock) and the batch's first ends and claims in one round trip - an
    # error among them raises at the renewal's answer.
    try:
        with store._tx(f"writing a batch of {len(ops)} change(s)", pipelined=not isolate) as cur:
            status = None if batch.status is None else batch.status.to_json()
            _lock_keys(store, cur, ops, isolate)
            renew = holder is not None and batch.fenced
            i = 0
            with _faults(store, isolate):
                if renew:
                    assert holder is not None
                    answer = store._renewal_sent(cur, holder, status)  # (the clock read with it)
                    decide = _nothing
                    if pairs:
                        i, decide = _pair_sent(store, cur, c, groups, 0)
                    now = answer()
                    if now is None:  # fenced out: nothing written (what went with it is rolled back)
                        raise _Fenced
                    c.now = now
                    decide()
                else:
                    c.now = store._now(cur)
            if not renew and (holder is not None or any(op[0] in ("delete", "skipped") for op in ops)):
                store._bump(cur, holder)  # (a task row's write is seen by the mark through its updated_ns)
                if holder is not None and status is not None:
                    store._x(
                        cur,
                        "UPDATE procsched_schedulers SET status = ? WHERE id = ? AND token = ?",
                        (status, holder.id, holder.token),
                    )
            with _faults(store, isolate):
                while i < len(groups):
                    kind, group = groups[i]
                    i += 1
                    if isolate:
                        for op in group:
                            _isolated(store, cur, c, op)
                    elif pairs and kind in ("finished", "started"):
                        with store._together():
                            i, decide = _pair_sent(store, cur, c, groups, i - 1)
                        decide()
                    elif len(group) > 1 and kind == "started":
                        _claim_group(store, cur, c, group)
                    elif len(group) > 1 and kind == "finished":
                        _end_group(store, cur, c, group)
                    elif len(group) > 1 and kind == "skipped":
                        _skip_group(store, cur, c, group)
                    else:
                        for op in group:
                            _apply(store, cur, c, op)
            left = [_left(op.key, op.run) for op in ops if op[0] == "finished" and _left_slot(op)]
            if left:
                cur.executemany(store._q(_LEAVE_SLOT), left)
    except _Fenced:
        return BatchResult(fenced_out=True)
    c.result.lost = list(dict.fromkeys(c.result.lost))
    return c.result


# A run cancelled before it started whose end keeps its own slot as its task's
# next (a clean shutdown with runs given ahead: issue 20 item 2) leaves that
# slot to the next claim: the slot guard steps back below it (by two gaps: the
# slot, read back through a monotonic clock, may come back a little earlier:
# microseconds off the slot claimed when the dispatcher's wall offset was read
# again between the claim and the cancel - the slot is still the one left).
_LEAVE_SLOT = """UPDATE procsched_tasks SET last_slot_ns = last_slot_ns - ?
    WHERE key = ? AND sched_run = ? AND run_count = ? AND in_flight = 0 AND last_outcome = 'cancelled'
    AND next_due_ns >= last_slot_ns - ? AND next_due_ns <= last_slot_ns + ?"""


def _left(key: str, run: int) -> tuple[Any, ...]:
    """_LEAVE_SLOT's parameters for ``run`` of ``key``, in its order."""
    return (2 * SLOT_GAP_NS, key, run, run, SLOT_GAP_NS, SLOT_GAP_NS)


def _left_slot(op: Finished) -> bool:
    return op.outcome == "cancelled" and op.next_due_ns is not None and not op.retry


def _apply(store: StoreAccess, cur: Any, c: Commit, op: Op) -> None:
    _OPS[op[0]](store, cur, c, op)


def _isolated(store: StoreAccess, cur: Any, c: Commit, op: Op) -> None:
    """``op`` in a savepoint: refused for its own data, it is left out and reported."""
    cur.execute("SAVEPOINT procsched_op")
    try:
        _apply(store, cur, c, op)
    except store._errors() + (ValueError, TypeError, OverflowError) as exc:
        if not store._row_fault(exc):
            raise
        cur.execute("ROLLBACK TO SAVEPOINT procsched_op")
        run: int | None = None
        attempt: int | None = None
        if isinstance(op, (Started, Finished)):
            run, attempt = op.run, op.attempt
            (c.result.lost if isinstance(op, Started) else c.result.stale).append((op.key, op.run, op.attempt))
        c.result.failed.append(FailedOp(op[0], op_key(op), run, attempt, f"{type(exc).__name__}: {exc}"))
    cur.execute("RELEASE SAVEPOINT procsched_op")


def _lock_keys(store: StoreAccess, cur: Any, ops: list[Any], isolate: bool) -> None:
    """PostgreSQL: lock the state rows the batch writes, in key order:
    two instances' batches writing the same rows in different orders
    would deadlock (the server aborts one after a second). SQLite
    serialises writers already. (Isolating a bad op: the keys the database
    refuses make the lock fail: then the ops lock their rows one by one as
    they go - a deadlock with another batch is then possible, and the server
    ends it by aborting one, which its caller tries again.)"""
    if not store._pg:
        return
    keys = sorted({k for op in ops if (k := op_key(op)) is not None})
    if len(keys) < 2:
        return
    sql = "SELECT 1 FROM procsched_tasks WHERE key = ANY(?) ORDER BY key FOR UPDATE"
    if not isolate:
        try:
            store._x(cur, sql, (keys,))
        except store._errors() + (ValueError, TypeError, OverflowError) as exc:
            if store._row_fault(exc):
                raise _RowFault(exc) from exc
            raise
        return
    cur.execute("SAVEPOINT procsched_lock")
    try:
        store._x(cur, sql, (keys,))
    except store._errors() + (ValueError, TypeError, OverflowError) as exc:
        if not store._row_fault(exc):
            raise
        cur.execute("ROLLBACK TO SAVEPOINT procsched_lock")
    cur.execute("RELEASE SAVEPOINT procsched_lock")


# -- claims ------------------------------------------------------------------


class _State(NamedTuple):
    """What a claim is decided on: the task's state row, as locked."""

    run_count: int
    next_attempt: int
    paused: int
    in_flight: int
    max_concurrent: int
    group: str | None
    last_slot_ns: int | None


def _exists(store: StoreAccess, cur: Any, sql: str, params: tuple[Any, ...]) -> bool:
    return store._x(cur, sql, params).fetchone() is not None


def _op_started(store: StoreAccess, cur: Any, c: Commit, op: Started) -> None:
    """The reference claim (see "Claims"): decided on the state row, locked."""
    row = store._x(
        cur,
        "SELECT run_count, next_attempt, paused, in_flight, max_concurrent, grp, last_slot_ns "
        f"FROM procsched_tasks WHERE key = ?{store._for_update}",
        (op.key,),
    ).fetchone()
    state = None if row is None else _State(*row)
    if state is None or not _claimable(store, cur, op, state):
        if not _own_claim(store, cur, c.holder, op):  # (a batch sent again, a claim twice: it is ours)
            c.result.lost.append((op.key, op.run, op.attempt))
        return
    if state.group is not None and not _within_limit(store, cur, c, state.group):
        c.result.limited.append((op.key, op.run, op.attempt))
        return
    h = c.holder
    assert h is not None
    sets = ["in_flight = in_flight + 1", "holder = ?", "token = ?", "last_holder = ?", "updated_ns = ?"]
    values: list[Any] = [h.id, h.token, h.id, c.now]
    if op.attempt == 1:
        if state.next_attempt > 1:  # the latest run's retry, due still, moves to its run row (see "Concurrency")
            store._x(
                cur,
                "UPDATE procsched_runs SET retry_due_ns = COALESCE(retry_due_ns, "
                "(SELECT next_due_ns FROM procsched_tasks WHERE key = ?)) WHERE key = ? AND run = ? AND attempt = ?",
                (op.key, op.key, state.run_count, state.next_attempt - 1),
            )
        sets += ["run_count = ?", "next_attempt = 1"]
        values.append(op.run)
        if op.cause == "schedule":
            sets += ["next_due_ns = ?", "sched_run = ?", "last_slot_ns = ?"]
            values += [op.scheduled_ns, op.run, op.scheduled_ns]
    else:
        if op.run == state.run_count and state.next_attempt == op.attempt:  # the state's own next claim
            sets.append("next_due_ns = ?")
            values.append(op.scheduled_ns)
        store._x(
            cur,
            "UPDATE procsched_runs SET retry_due_ns = NULL WHERE key = ? AND run = ? AND attempt = ?",
            (op.key, op.run, op.attempt - 1),
        )
    store._x(cur, f"UPDATE procsched_tasks SET {', '.join(sets)} WHERE key = ?", (*values, op.key))
    run = (op.key, op.run, op.attempt, op.scheduled_ns, op.started_ns, h.host, h.pid, h.id, h.token, op.cause)
    store._x(cur, _INSERT_RUN, (*run, op.worker_pid, state.group))


def _claimable(store: StoreAccess, cur: Any, op: Started, state: _State) -> bool:
    """May ``op`` be claimed, given the task's state row? (see "Claims")"""
    scheduled = op.cause == "schedule"
    if state.in_flight >= state.max_concurrent or (scheduled and state.paused):
        return False
    if op.attempt == 1:
        if op.run != state.run_count + 1:
            return False
        if scheduled and state.next_attempt != 1 and state.max_concurrent == 1:
            return False  # the latest run's retry comes first
        last = state.last_slot_ns
        return not (scheduled and last is not None and last > op.scheduled_ns - SLOT_GAP_NS)
    attempt = "SELECT 1 FROM procsched_runs WHERE key = ? AND run = ? AND attempt = ?"
    if _exists(store, cur, attempt, (op.key, op.run, op.attempt)):
        return False  # claimed already (never twice)
    if op.run == state.run_count and state.next_attempt == op.attempt:
        return True
    return _exists(store, cur, attempt + " AND retry_due_ns IS NOT NULL", (op.key, op.run, op.attempt - 1))


def _own_claim(store: StoreAccess, cur: Any, holder: Holder | None, op: Started) -> bool:
    """Is (key, run, attempt) in flight already, claimed by this very holder and token?"""
    if holder is None:
        return False
    row = store._x(
        cur,
        "SELECT 1 FROM procsched_runs WHERE key = ? AND run = ? AND attempt = ? "
        "AND outcome IS NULL AND holder = ? AND token = ?",
        (op.key, op.run, op.attempt, holder.id, holder.token),
    ).fetchone()
    return row is not None


def _within_limit(store: StoreAccess, cur: Any, c: Commit, group: str) -> bool:
    """Has ``group`` room for one more run in flight? Counted in this
    transaction, on the group's locked limit row (no limit row: no limit)."""
    if store._pg and not c.groups_locked:
        # every group of the batch's claims at once, by name: never two
        # batches each holding one group and waiting for the other's
        store._x(
            cur,
            "SELECT 1 FROM procsched_limits WHERE name IN (SELECT grp FROM procsched_tasks WHERE "
            "key = ANY(?) AND grp IS NOT NULL) ORDER BY name FOR UPDATE",
            (c.claim_keys,),
        )
        c.groups_locked = True
    row = store._x(cur, "SELECT lim FROM procsched_limits WHERE name = ?", (group,)).fetchone()
    if row is None:
        return True
    n = store._x(cur, "SELECT count(*) FROM procsched_runs WHERE grp = ? AND outcome IS NULL", (group,)).fetchone()[0]
    return int(n) < int(row[0])


def _claim_group(store: StoreAccess, cur: Any, c: Commit, group: list[Started]) -> None:
    """A turn's claims (SQLite), set-wise when they are plain (see
    _CLAIM_PLAIN); the ones this does not win are decided op by op.
    PostgreSQL: ``_pair_sent``."""
    plain = _plain(group)
    _claims_decided(store, cur, c, group, _claim_plain_sqlite(store, cur, c, plain) if plain else set())


def _is_plain(op: Started) -> bool:
    """Does the set-wise claim take ``op``? A new scheduled run."""
    return op.attempt == 1 and op.cause == "schedule"


def _plain(group: list[Started]) -> list[Started]:
    return [op for op in group if _is_plain(op)]


def _claims_decided(store: StoreAccess, cur: Any, c: Commit, group: list[Started], won: set[str]) -> None:
    """The claims of ``group`` the set-wise statement did not win (``won``: their keys), op by op."""
    for op in group:
        if not (op.key in won and _is_plain(op)):
            _op_started(store, cur, c, op)


def _claim_plain_sqlite(store: StoreAccess, cur: Any, c: Commit, plain: list[Started]) -> set[str]:
    """SQLite: the plain claims with executemany (one prepared statement,
    no Python between rows), which sums the rows it changed: when every
    claim was won - the rule on one scheduler - two statements did it;
    otherwise they are rolled back to a savepoint (and decided op by op)."""
    h = c.holder
    assert h is not None
    cur.execute("SAVEPOINT procsched_claims")
    claims = [(op.run, op.scheduled_ns, op.run, op.scheduled_ns, h.id, h.token, h.id, c.now) for op in plain]
    cur.executemany(
        _CLAIM_PLAIN,
        [(*claim, op.key, op.run, op.scheduled_ns - SLOT_GAP_NS) for claim, op in zip(claims, plain, strict=False)],
    )
    if cur.rowcount != len(plain):
        cur.execute("ROLLBACK TO SAVEPOINT procsched_claims")
        cur.execute("RELEASE SAVEPOINT procsched_claims")
        return set()
    mine = (h.host, h.pid, h.id, h.token, "schedule")
    cur.executemany(
        _INSERT_RUN, [(op.key, op.run, 1, op.scheduled_ns, op.started_ns, *mine, op.worker_pid, None) for op in plain]
    )
    cur.execute("RELEASE SAVEPOINT procsched_claims")
    return {op.key for op in plain}


def _claim_plain_pg(store: StoreAccess, cur: Any, c: Commit, plain: list[Started]) -> Any:
    """PostgreSQL: the plain claims in one statement (a round trip and
    ~50 us of server work per statement made a 100-run turn ~3x slower op
    by op); its cursor, whose rows (RETURNING) are the keys won."""
    h = c.holder
    assert h is not None
    values, params = _values(
        [(op.key, op.run, op.scheduled_ns, op.started_ns, op.worker_pid) for op in plain],
        ("text", "bigint", "bigint", "bigint", "int"),
    )
    return store._x(
        cur,
        f"""WITH v (key, run, scheduled_ns, started_ns, worker_pid) AS ({values}),
        won AS (UPDATE procsched_tasks t SET run_count = v.run, next_attempt = 1, next_due_ns = v.scheduled_ns,
            sched_run = v.run, last_slot_ns = v.scheduled_ns, in_flight = t.in_flight + 1, holder = ?, token = ?,
            last_holder = ?, updated_ns = {_NOW_PG}
            FROM v WHERE t.key = v.key AND t.grp IS NULL AND t.paused = 0 AND t.next_attempt = 1
            AND t.in_flight < t.max_concurrent AND t.run_count + 1 = v.run
            AND (t.last_slot_ns IS NULL OR t.last_slot_ns <= v.scheduled_ns - ?)
            RETURNING t.key)
        INSERT INTO procsched_runs ({RUN_COLS})
        SELECT v.key, v.run, 1, v.scheduled_ns, v.started_ns, NULL, ?, ?, NULL, NULL, NULL, ?, ?, 'schedule',
            NULL, NULL, v.worker_pid, NULL, NULL, NULL
        FROM v JOIN won USING (key) {_REPLACE_RUN}, cause = excluded.cause, reason = NULL,
            error_traceback = NULL, worker_pid = excluded.worker_pid, output = NULL, retry_due_ns = NULL,
            grp = excluded.grp
        RETURNING key""",
        [*params, h.id, h.token, h.id, SLOT_GAP_NS, h.host, h.pid, h.id, h.token],
    )


# -- ends ----------------------------------------------------------------------


def _op_finished(store: StoreAccess, cur: Any, c: Commit, op: Finished) -> None:
    h = c.holder
    assert h is not None
    cur = store._x(cur, _END_RUN, _end_params(op, h))
    if cur.rowcount != 1:
        if not _own_end(store, cur, h, op):
            c.result.stale.append((op.key, op.run, op.attempt))
        return
    store._x(cur, _RESCHEDULE, _reschedule_params(op, c.now))
    if (span := _trimmed(op.run, store.keep_runs)) is not None:
        store._x(cur, _TRIM, (op.key, *span))


def _end_params(op: Finished, h: Holder) -> tuple[Any, ...]:
    """_END_RUN's parameters, in its order."""
    retry_due = op.next_due_ns if op.retry else None
    errors = (op.error_type, op.error_message, op.error_traceback, op.reason)
    return (
        op.finished_ns,
        op.outcome,
        *errors,
        op.worker_pid,
        op.output,
        retry_due,
        op.skip_first_ns,
        op.skip_period_ns,
        op.skip_slots,
        op.key,
        op.run,
        op.attempt,
        h.id,
        h.token,
    )


def _reschedule_params(op: Finished, now: int) -> tuple[Any, ...]:
    """_RESCHEDULE's parameters, in its order."""
    next_due = (op.run, op.next_due_ns)  # CASE WHEN sched_run = ? THEN ? ...
    next_attempt = (op.run, op.run, op.attempt + 1 if op.retry else 1)  # ... AND run_count = ? THEN ? ...
    other_holder = (op.run, op.attempt) * 2  # the holder and token of another run in flight
    counts = (*_outcome_counts(op.outcome), op.skip_slots)
    guard = (op.run, _skip_last(op), _skip_last(op))  # the slot guard past its misfire slots (_GUARD_PAST)
    return (*next_due, *next_attempt, *other_holder, op.outcome, *counts, *guard, now, op.key)


def _skip_last(op: Finished) -> int:
    """The slot guard past the last misfire slot folded on ``op``
    (``_misfires_folded``, ``_skip_guard``), or -1 (none)."""
    if not op.skip_slots or op.skip_first_ns is None:
        return -1
    return _skip_guard(op.skip_first_ns, op.skip_period_ns, op.skip_slots)


#: How far below the last slot recorded skipped its slot guard stays. A claim
#: needs its slot ``SLOT_GAP_NS`` past the guard: at the slot itself the guard
#: refuses a claim of it (a reading of it microseconds off included) and lets
#: the next slot of a 1 ms grid be claimed - at the slot, that next slot was
#: exactly ``SLOT_GAP_NS`` past it, and a claim whose clock read it a
#: microsecond early was lost: half of a late 1 ms task's claims, keyed runs/s
#: halved (``python -m benchmarks.durable --only throughput``).
SKIP_GUARD_BACK_NS = SLOT_GAP_NS // 2


def _skip_guard(first: int, period: int, slots: int) -> int:
    """The slot guard a skip of ``slots`` slots ``period`` apart from
    ``first`` leaves (``_GUARD_PAST``): below its last slot."""
    return _last_slot(first, period, slots) - SKIP_GUARD_BACK_NS


def _last_slot(first: int, period: int, slots: int) -> int:
    """The last of ``slots`` slots ``period`` apart from ``first`` (a skipped row's)."""
    return first + (slots - 1) * period


def _own_end(store: StoreAccess, cur: Any, h: Holder, op: Finished) -> bool:
    """Was this very end recorded already by this holder (a batch sent again)?"""
    row = store._x(
        cur,
        "SELECT 1 FROM procsched_runs WHERE key = ? AND run = ? AND attempt = ? AND outcome = ? "
        "AND finished_ns = ? AND holder = ? AND token = ?",
        (op.key, op.run, op.attempt, op.outcome, op.finished_ns, h.id, h.token),
    ).fetchone()
    return row is not None


def _end_group(store: StoreAccess, cur: Any, c: Commit, group: list[Finished]) -> None:
    """A turn's ends set-wise (SQLite; PostgreSQL: ``_pair_sent``) when
    every run is still ours - the rule on one scheduler; otherwise op by op,
    which says exactly which are stale."""
    h = c.holder
    assert h is not None
    cur.execute("SAVEPOINT procsched_ends")
    cur.executemany(store._q(_END_RUN), [_end_params(op, h) for op in group])
    if cur.rowcount != len(group):
        cur.execute("ROLLBACK TO SAVEPOINT procsched_ends")
        cur.execute("RELEASE SAVEPOINT procsched_ends")
        for op in group:
            _op_finished(store, cur, c, op)
        return
    cur.executemany(store._q(_RESCHEDULE), [_reschedule_params(op, c.now) for op in group])
    trim = [(op.key, *span) for op in group if (span := _trimmed(op.run, store.keep_runs)) is not None]
    if trim:
        cur.executemany(store._q(_TRIM), trim)
    cur.execute("RELEASE SAVEPOINT procsched_ends")


def _nothing() -> None:
    """What is left to decide when nothing was sent."""


def _pair_sent(
    store: StoreAccess, cur: Any, c: Commit, groups: list[tuple[str, list[Any]]], i: int
) -> tuple[int, Callable[[], None]]:
    """PostgreSQL: send the set-wise statements of ``groups[i]`` if it is a
    group of ends and of the group of claims after it (or of ``groups[i]``
    if claims), each on a cursor of its own (of the transaction's
    connection: never one made anew), their answers not read: the
    caller sends them together (pipeline mode: with the BEGIN and the lease
    renewal, or in a round trip of their own). Returns the index of the
    group after them and what to call once the answers are in (nothing
    sent: ``_nothing``): it decides op by op the ends not recorded and the claims
    not won. An end the set-wise statement did not record is one op by op
    does not either (the same conditions): it writes nothing, so deciding
    it after those claims changes nothing. A lone end or claim is one
    statement too, not three or four."""
    ends = groups[i][1] if i < len(groups) and groups[i][0] == "finished" else None
    j = i + (ends is not None)
    claims = groups[j][1] if j < len(groups) and groups[j][0] == "started" else None
    if ends is None and claims is None:
        return i, _nothing
    plain = _plain(claims or [])
    ended = None if ends is None else _end_pg(store, cur.connection.cursor(), c, ends)
    won = _claim_plain_pg(store, cur.connection.cursor(), c, plain) if plain else None

    def decide() -> None:
        if ends is not None and ended is not None:  # (both or neither: mypy)
            done = {tuple(r) for r in ended.fetchall()}
            for op in ends:
                if (op.key, op.run, op.attempt) not in done:
                    _op_finished(store, cur, c, op)
        if claims is not None:
            _claims_decided(store, cur, c, claims, set() if won is None else {r[0] for r in won.fetchall()})

    return j + (claims is not None), decide


def _end_pg(store: StoreAccess, cur: Any, c: Commit, group: list[Finished]) -> Any:
    """PostgreSQL: the ends and reschedules in one statement; its cursor,
    whose rows are the (key, run, attempt) it recorded."""
    h = c.holder
    assert h is not None
    rows = [
        (
            op.key,
            op.run,
            op.attempt,
            op.outcome,
            op.finished_ns,
            op.next_due_ns,
            op.attempt + 1 if op.retry else 1,
            op.error_type,
            op.error_message,
            op.error_traceback,
            op.reason,
            op.worker_pid,
            op.output,
            op.next_due_ns if op.retry else None,
            op.skip_first_ns,
            op.skip_period_ns,
            op.skip_slots,
            *(_trimmed(op.run, store.keep_runs) or (None, None)),
        )
        for op in group
    ]
    types = "text bigint int text bigint bigint int text text text text int text bigint bigint bigint bigint"
    types += " bigint bigint"  # the runs it trims (see _trimmed)
    values, params = _values(rows, tuple(types.split()))
    counters = ", ".join(
        f"{col} = t.{col} + CASE WHEN v.outcome = '{o}' THEN 1 ELSE 0 END"
        for col, o in zip(_schema.RUN_COUNTERS, OUTCOMES, strict=False)
    )
    other = """(SELECT r.{col} FROM procsched_runs r WHERE r.key = t.key AND r.outcome IS NULL
        AND NOT (r.run = v.run AND r.attempt = v.attempt) ORDER BY r.run DESC, r.attempt DESC LIMIT 1)"""
    return store._x(
        cur,
        f"""WITH v (key, run, attempt, outcome, finished_ns, next_due_ns,
            next_attempt, error_type, error_message, error_traceback, reason, worker_pid, output, retry_due_ns,
            skip_first_ns, skip_period_ns, skip_slots, trim_from, trim_to) AS ({values}),
        done AS (UPDATE procsched_runs r SET finished_ns = v.finished_ns, outcome = v.outcome,
            error_type = v.error_type, error_message = v.error_message, error_traceback = v.error_traceback,
            reason = v.reason, worker_pid = COALESCE(v.worker_pid, r.worker_pid), output = v.output,
            retry_due_ns = v.retry_due_ns, skip_first_ns = v.skip_first_ns, skip_period_ns = v.skip_period_ns,
            skip_slots = v.skip_slots
            FROM v WHERE r.key = v.key AND r.run = v.run AND r.attempt = v.attempt AND r.outcome IS NULL
            AND r.holder = ? AND r.token = ? RETURNING r.key, r.run, r.attempt),
        resched AS (UPDATE procsched_tasks t SET
            in_flight = CASE WHEN t.in_flight > 0 THEN t.in_flight - 1 ELSE 0 END,
            holder = CASE WHEN t.in_flight <= 1 THEN NULL ELSE {other.format(col="holder")} END,
            token = CASE WHEN t.in_flight <= 1 THEN NULL ELSE {other.format(col="token")} END,
            next_due_ns = CASE WHEN t.sched_run = v.run THEN v.next_due_ns ELSE t.next_due_ns END,
            next_attempt = CASE WHEN t.sched_run = v.run AND t.run_count = v.run THEN v.next_attempt
                ELSE t.next_attempt END,
            last_outcome = v.outcome, {counters}, skipped_misfire = t.skipped_misfire + v.skip_slots,
            last_slot_ns = CASE WHEN t.sched_run = v.run AND v.skip_slots > 0 THEN GREATEST(t.last_slot_ns,
                v.skip_first_ns + (v.skip_slots - 1) * v.skip_period_ns - {SKIP_GUARD_BACK_NS})
                ELSE t.last_slot_ns END,
            updated_ns = {_NOW_PG}
            FROM v JOIN done USING (key, run, attempt) WHERE t.key = v.key),
        trimmed AS (DELETE FROM procsched_runs r USING v JOIN done USING (key, run, attempt)
            WHERE r.key = v.key AND r.run >= v.trim_from AND r.run <= v.trim_to AND r.outcome IS NOT NULL)
        SELECT key, run, attempt FROM done""",
        [*params, h.id, h.token],
    )


# -- the other ops ---------------------------------------------------------------


# A task row made anew (a key deleted and declared again, e.g. replaced while
# a run of it is in flight here or on another scheduler: issue 20 items 3-4)
# counts the runs in flight the history shows, and their holder: no claim
# beside them, and their ends find their holder.
_IN_FLIGHT = "(SELECT {col} FROM procsched_runs r WHERE r.key = ? AND r.outcome IS NULL{end})"
_LATEST = " ORDER BY r.run DESC, r.attempt DESC LIMIT 1"
_HISTORY_RUNS = "(SELECT COALESCE(max(r.run), 0) FROM procsched_runs r WHERE r.key = ?)"


def _op_upsert(store: StoreAccess, cur: Any, c: Commit, op: Upsert) -> None:
    d, s = op.definition, op.state
    sched, opts = json.dumps(d.schedule, sort_keys=True), json.dumps(d.options, sort_keys=True)
    signature = store._keyring.sign(d.key, d.fn_ref, d.args, sched, opts)
    differs = "IS DISTINCT FROM" if store._pg else "IS NOT"
    # The definition's row only if it changed (item 18: arguments are written once)
    # - any signed column: a row tampered with under its old hash and signature
    # is written again, so declaring the task again repairs it (issue 24).
    store._x(
        cur,
        f"""INSERT INTO procsched_definitions (key, fn_ref, schedule, options, def_hash, name, signature,
            written_ns, args) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (key) DO UPDATE SET fn_ref = excluded.fn_ref, args = excluded.args,
            schedule = excluded.schedule, options = excluded.options, def_hash = excluded.def_hash,
            name = excluded.name, signature = excluded.signature, written_ns = excluded.written_ns
            WHERE procsched_definitions.def_hash <> excluded.def_hash
            OR procsched_definitions.fn_ref <> excluded.fn_ref
            OR procsched_definitions.signature {differs} excluded.signature
            OR procsched_definitions.schedule <> excluded.schedule
            OR procsched_definitions.options <> excluded.options
            OR procsched_definitions.args <> excluded.args""",
        (d.key, d.fn_ref, sched, opts, d.def_hash, _name(opts), signature, c.now, d.args),
    )
    st = s or TaskState()
    # A stored state is replaced only by a writer that saw every claim
    # (several schedulers: one that adopted the task before another
    # claimed a run must not set the run count back); its pause never is (a
    # deploy with a changed definition leaves a paused task paused).
    state_update = (
        ""
        if s is None or op.keep_state
        else "".join(
            f", {col} = CASE WHEN procsched_tasks.in_flight = 0 AND procsched_tasks.run_count <= excluded.run_count "
            f"THEN excluded.{col} ELSE procsched_tasks.{col} END"
            for col in ("next_due_ns", "next_attempt", "run_count")
        )
    )
    # A row made anew goes on from the key's history: its run count is never
    # below the highest run recorded (a writer whose count is stale - it kept
    # the task on standby while another scheduler claimed runs, then replaced
    # it - must not number a run again: a claim would overwrite that run's
    # row; the issue-20 campaign found it), and a count raised so is a new run next.
    # Its latest scheduled run (sched_run) is the history's too: the end of a
    # run in flight under the new row reschedules it (with sched_run 0 a
    # retry's end left the row on that retry, and no claim could ever win
    # again: the fault campaign, seed 316).
    greatest = "GREATEST" if store._pg else "MAX"
    store._x(
        cur,
        f"""INSERT INTO procsched_tasks (key, run_count, next_due_ns, next_attempt, paused, updated_ns,
            max_concurrent, grp, last_slot_ns, sched_run, in_flight, holder, token)
            VALUES (?, {greatest}(?, {_HISTORY_RUNS}), ?,
                CASE WHEN ? < {_HISTORY_RUNS} THEN 1 ELSE ? END, ?, ?, ?, ?,
                (SELECT max(r.scheduled_ns) FROM procsched_runs r WHERE r.key = ?
                AND r.attempt = 1 AND r.cause = 'schedule'),
                (SELECT COALESCE(max(r.run), 0) FROM procsched_runs r WHERE r.key = ?
                AND r.attempt = 1 AND r.cause = 'schedule'), {_IN_FLIGHT.format(col="count(*)", end="")},
                {_IN_FLIGHT.format(col="r.holder", end=_LATEST)}, {_IN_FLIGHT.format(col="r.token", end=_LATEST)})
            ON CONFLICT (key) DO UPDATE SET max_concurrent = excluded.max_concurrent, grp = excluded.grp,
            unloadable = NULL, updated_ns = excluded.updated_ns{state_update}""",
        (
            d.key,
            st.run_count,
            d.key,
            st.next_due_ns,
            st.run_count,
            d.key,
            st.next_attempt,
            int(st.paused),
            c.now,
            d.max_concurrent,
            d.group,
            *(d.key,) * 5,
        ),
    )


def op_update(store: StoreAccess, cur: Any, c: Commit, op: Update) -> None:
    fields = op.fields
    sets = ", ".join(f"{name} = ?" for name in fields)
    values = [int(v) if name == "paused" else v for name, v in fields.items()]
    if "run_count" in fields:
        # Run numbers are set only by a writer that saw every claim (as
        # in _op_upsert): several schedulers, one that adopted the task
        # before another claimed a run must not set the count back.
        # Nor may it move the next attempt of the same run back (a take-over
        # asked for a retry after the writer read the task: the retry stands),
        # nor ask again for a retry claimed since (its run's row says so: the
        # task's row is back at attempt 1 once the retry ended - a start-up's
        # write, committed late, set a retry that had run ok due again, and
        # no claim of it could ever win: the fault campaign, seed 4300).
        attempt = fields.get("next_attempt")
        guard = "run_count <= ?" if attempt is None else "(run_count < ? OR (run_count = ? AND next_attempt <= ?))"
        bounds = (fields["run_count"],) if attempt is None else (fields["run_count"], fields["run_count"], attempt)
        if attempt is not None and attempt > 1:
            guard += " AND NOT EXISTS (SELECT 1 FROM procsched_runs r WHERE r.key = ? AND r.run = ? AND r.attempt >= ?)"
            bounds += (op.key, fields["run_count"], attempt)
        store._x(
            cur,
            f"UPDATE procsched_tasks SET {sets}, updated_ns = ? WHERE key = ? AND in_flight = 0 AND {guard}",
            (*values, c.now, op.key, *bounds),
        )
        return
    store._x(cur, f"UPDATE procsched_tasks SET {sets}, updated_ns = ? WHERE key = ?", (*values, c.now, op.key))


def _op_delete(store: StoreAccess, cur: Any, c: Commit, op: Delete) -> None:
    delete(store, cur, op.key, op.history)


def delete(store: StoreAccess, cur: Any, key: str, history: bool) -> bool:
    store._x(cur, "DELETE FROM procsched_definitions WHERE key = ?", (key,))
    cur = store._x(cur, "DELETE FROM procsched_tasks WHERE key = ?", (key,))
    gone = bool(cur.rowcount == 1)
    if history:
        store._x(cur, "DELETE FROM procsched_runs WHERE key = ?", (key,))
        store._x(cur, "DELETE FROM procsched_skipped WHERE key = ?", (key,))
    return gone


def _op_unloadable(store: StoreAccess, cur: Any, c: Commit, op: Unloadable) -> None:
    store._x(cur, "UPDATE procsched_tasks SET unloadable = ?, updated_ns = ? WHERE key = ?", (op.why, c.now, op.key))


def _op_skipped(store: StoreAccess, cur: Any, c: Commit, op: Skipped) -> None:
    for part in _unclaimed(store, cur, [op]):
        _skip_one(store, cur, c, part)


def _skip_one(store: StoreAccess, cur: Any, c: Commit, op: Skipped) -> None:
    h = c.holder
    recorded = c.now if op.recorded_ns is None else op.recorded_ns
    cur = store._x(
        cur,
        f"{_INSERT_SKIP} VALUES {_SKIP_VALUES} ON CONFLICT (key, slot_ns) DO NOTHING",
        (op.key, op.slot_ns, op.reason, recorded, None if h is None else h.id, op.period_ns, op.slots),
    )
    if cur.rowcount != 1:
        return  # recorded already: its first reason stands
    column = f"skipped_{op.reason}"
    store._x(cur, f"UPDATE procsched_tasks SET {column} = {column} + ? WHERE key = ?", (op.slots, op.key))
    guard = _skip_guard(op.slot_ns, op.period_ns, op.slots)
    store._x(cur, _GUARD_PAST, (guard, op.key, guard))
    store._x(cur, _TRIM_SKIPPED, (op.key, op.key, store.keep_runs - 1))


def _unclaimed(store: StoreAccess, cur: Any, skips: list[Skipped]) -> list[Skipped]:
    """``skips`` without the slots a scheduled run claimed, nor those after
    the first of them: from there on the slots are that run's scheduler's,
    to run or record (one slot, one end: a scheduler that followed a resume
    late recorded "paused" up to its own now, after another had claimed a
    slot from it - the fault campaign's stores; the slots after it too,
    and their guard made the other lose its catch-up: seed 3910). Only a
    skip that reaches back to its task's slot guard (the last slot claimed,
    ``_GUARD_PAST``) can hold one: the others cost one read of the guards;
    those read their task's runs there (rare) - as do the skips of a key
    whose row is gone (cancelled: its runs stay in the history; a
    scheduler stopped across a pause, a resume and the cancel recorded
    "paused" the slots another had run: the fault campaign, seed 6110). On
    PostgreSQL the guards are read locked (in key order, as ``_lock_keys``):
    read as committed, a claim another scheduler had written but not yet
    committed was missed, and its slot recorded skipped too (SQLite
    serialises writers)."""
    keys = sorted({op.key for op in skips})
    guards: dict[str, int | None] = {}
    for i in range(0, len(keys), _SKIP_ROWS):
        chunk = keys[i : i + _SKIP_ROWS]
        sql = f"SELECT key, last_slot_ns FROM procsched_tasks WHERE key IN ({', '.join('?' * len(chunk))})"
        if store._pg:  # locked: a claim not yet committed is waited for, not missed (seed 4115)
            sql += " ORDER BY key FOR UPDATE"
        guards.update({r[0]: None if r[1] is None else int(r[1]) for r in store._x(cur, sql, chunk).fetchall()})
    out: list[Skipped] = []
    for op in skips:
        tol = _tolerance(op.period_ns)  # (a slot a period after a claimed one is not that one: a 1 ms grid)
        guard = guards.get(op.key, _last_slot(op.slot_ns, op.period_ns, op.slots))  # (no row: any may be)
        if guard is None or op.slot_ns > guard + tol:
            out.append(op)
            continue
        last = min(_last_slot(op.slot_ns, op.period_ns, op.slots), guard)
        claimed = store._x(
            cur,
            "SELECT scheduled_ns FROM procsched_runs WHERE key = ? AND cause = 'schedule' "
            "AND scheduled_ns >= ? AND scheduled_ns <= ?",
            (op.key, op.slot_ns - tol, last + tol),
        ).fetchall()
        if claimed:
            first = min(int(r[0]) for r in claimed) - tol  # (a clock's reading of a slot: microseconds off)
            if first <= op.slot_ns:
                kept = 0
            else:  # the slots before ``first``
                kept = (first - op.slot_ns - 1) // op.period_ns + 1 if op.period_ns else 1
            if kept < op.slots:
                op = op._replace(slots=kept)
        if op.slots:
            out += _unrecorded(store, cur, op)
    return out


def _unrecorded(store: StoreAccess, cur: Any, op: Skipped) -> list[Skipped]:
    """``op`` without the slots recorded skipped already (or dropped by a
    run's end) on its grid, within a clock's reading: two schedulers that
    both recorded a pause's slots wrote them twice, microseconds apart (the
    fault campaign's stores: "first reason stands" held only for the same
    nanosecond), and counted them twice. The rest of ``op``, in pieces."""
    period = op.period_ns
    tol = _tolerance(period)
    last = _last_slot(op.slot_ns, period, op.slots)
    rows = store._x(
        cur,
        "SELECT slot_ns, period_ns, slots FROM procsched_skipped WHERE key = ? AND slot_ns <= ? "
        "AND slot_ns + (slots - 1) * period_ns >= ? UNION ALL "
        "SELECT skip_first_ns, skip_period_ns, skip_slots FROM procsched_runs WHERE key = ? AND skip_slots > 0 "
        "AND skip_first_ns <= ? AND skip_first_ns + (skip_slots - 1) * skip_period_ns >= ?",
        (op.key, last + tol, op.slot_ns - tol) * 2,
    ).fetchall()
    left = [(0, op.slots - 1)]  # the slots of ``op`` not recorded yet, as index ranges
    for first, p, n in rows:
        first, p, n = int(first), int(p), int(n)
        if not period:  # ``op`` is one slot: is it one of the row's?
            t = _tolerance(p)
            a, b = _index_range(first, p, op.slot_ns - t, op.slot_ns + t)
            if a <= b and a < n and b >= 0:
                return []
            continue
        if n > 1 and (p != period or tol < (op.slot_ns - first) % period < period - tol):
            continue  # another grid's (another period, or the same one off by more than a reading)
        lo, hi = _index_range(op.slot_ns, period, first - tol, _last_slot(first, p, n) + tol)
        if lo <= hi:
            left = [(a, b) for a0, b0 in left for a, b in ((a0, min(b0, lo - 1)), (max(a0, hi + 1), b0)) if a <= b]
    return [op._replace(slot_ns=op.slot_ns + a * period, slots=b - a + 1) for a, b in left]


def _tolerance(period: int) -> int:
    """How far two readings of one slot may differ: ``SLOT_GAP_NS``, and
    less than half a period (a neighbour is never the same slot)."""
    return SLOT_GAP_NS if not period else min(SLOT_GAP_NS, (period - 1) // 2)


def _index_range(start: int, period: int, lo: int, hi: int) -> tuple[int, int]:
    """The indexes i of the grid points ``start + i * period`` in [lo, hi]
    (an empty range if none; a single slot's grid has the one point 0)."""
    if not period:
        return (0, 0) if lo <= start <= hi else (1, 0)
    return -((start - lo) // period), (hi - start) // period


#: One slot, one end: a slot recorded skipped is never claimed after (by a
#: scheduler that realigned to it from a row whose due time the skip did not
#: move: a pause one recorded, another that missed the pause caught up - the
#: fault campaign's stores). The claims' slot guard (see "Claims") moves past
#: it (to its ``_skip_guard``); a claim of it is lost, and its
#: claimer goes on from now.
_GUARD_PAST = "UPDATE procsched_tasks SET last_slot_ns = ? WHERE key = ? AND (last_slot_ns IS NULL OR last_slot_ns < ?)"


#: A skipped slot's rows trimmed to the task's last ``keep_runs`` (after its insert).
_TRIM_SKIPPED = (
    "DELETE FROM procsched_skipped WHERE key = ? AND slot_ns < (SELECT s.slot_ns FROM "
    "procsched_skipped s WHERE s.key = ? ORDER BY s.slot_ns DESC LIMIT 1 OFFSET ?)"
)
_INSERT_SKIP = "INSERT INTO procsched_skipped (key, slot_ns, reason, recorded_ns, holder, period_ns, slots)"
_SKIP_VALUES = "(?, ?, ?, ?, ?, ?, ?)"  # (one row's)
#: Skipped rows inserted per statement with RETURNING (7 parameters each).
_SKIP_ROWS = 500


def _misfires_folded(ops: list[Op]) -> list[Op]:
    """``ops`` with each "misfire" skip that follows its task's run end
    (the engine reports the slots a run's end dropped right after it) put
    on that end: written on the run's row, in the statements the end runs
    anyway. A separate row cost a B-tree page per task a commit (a late
    task's every commit: ~20 pages written instead of ~12). A skip whose
    end is not in the batch, or was given one already, stays an op."""
    if not any(isinstance(op, Skipped) and op.reason == "misfire" for op in ops):
        return ops
    out: list[Op] = []
    ends: dict[str, int] = {}  # key -> the index in ``out`` of its last end with nothing folded in
    for op in ops:
        if isinstance(op, Finished):
            ends[op.key] = len(out)
        elif isinstance(op, Skipped) and op.reason == "misfire" and op.recorded_ns is None and op.key in ends:
            i = ends.pop(op.key)
            end = out[i]
            assert isinstance(end, Finished)
            out[i] = end._replace(skip_first_ns=op.slot_ns, skip_period_ns=op.period_ns, skip_slots=op.slots)
            continue
        out.append(op)
    return out


def _skips_gathered(ops: list[Op]) -> list[Op]:
    """``ops`` with each skipped slot moved later, past claims and ends, to
    just before the next op of another kind (or the end), so a batch's skips
    come in long groups. A skip writes its own table, its task's skip
    counters and its slot guard (``_GUARD_PAST``): only a claim of a slot
    the same batch records skipped reads what a skip writes, and no
    scheduler claims a slot it skips - the order among them does not change
    what the batch does."""
    if not any(op[0] == "skipped" for op in ops):
        return ops
    out: list[Op] = []
    skips: list[Op] = []
    for op in ops:
        if op[0] == "skipped":
            skips.append(op)
            continue
        if op[0] not in ("started", "finished"):
            out += skips
            skips.clear()
        out.append(op)
    return out + skips


def _skip_group(store: StoreAccess, cur: Any, c: Commit, group: list[Skipped]) -> None:
    """Skipped rows set-wise: what ``_op_skipped`` does to each, in one
    statement per ``_SKIP_ROWS`` (RETURNING the ones not recorded before: a
    row whose first slot is recorded already keeps its first reason and is
    not counted again), then each task's counters and trim once; of more
    than ``keep_runs`` rows of one task only the newest are written (the
    older would be trimmed at once), the older counted unless recorded
    before. A late fixed-rate task drops slots by the thousand a second:
    one row per run of them (``Batch.skipped``'s ``slots``), and three
    statements for each made recording them the store's bottleneck
    (keyed runs/s fell ~10x, ``python -m benchmarks.durable``)."""
    holder = None if c.holder is None else c.holder.id
    group = _unclaimed(store, cur, group)
    if not group:
        return
    first: dict[str, dict[int, tuple[Any, ...]]] = {}
    for op in group:
        rows_of = first.setdefault(op.key, {})
        if op.slot_ns not in rows_of:
            recorded = c.now if op.recorded_ns is None else op.recorded_ns
            rows_of[op.slot_ns] = (op.key, op.slot_ns, op.reason, recorded, holder, op.period_ns, op.slots)
    rows: list[tuple[Any, ...]] = []
    new: dict[tuple[str, str], int] = {}
    added: dict[str, int] = {}  # rows written per task
    for key, rows_of in first.items():
        kept = sorted(rows_of)
        older, kept = kept[: -store.keep_runs], kept[-store.keep_runs :]
        rows += [rows_of[slot] for slot in kept]
        if older:  # trimmed as soon as written: only counted, unless recorded before
            there = store._x(
                cur,
                "SELECT slot_ns FROM procsched_skipped WHERE key = ? AND slot_ns BETWEEN ? AND ?",
                (key, older[0], older[-1]),
            ).fetchall()
            known = {int(r[0]) for r in there}
            for slot in older:
                if slot not in known:
                    _, _, reason, _, _, _, slots = rows_of[slot]
                    new[key, reason] = new.get((key, reason), 0) + slots
    for key, reason, slots in _insert_skips(store, cur, rows):
        new[key, reason] = new.get((key, reason), 0) + slots
        added[key] = added.get(key, 0) + 1
    lasts: dict[str, int] = {}  # the slot guard past each task's last slot recorded (``_GUARD_PAST``)
    for op in group:
        last = _skip_guard(op.slot_ns, op.period_ns, op.slots)
        lasts[op.key] = max(last, lasts.get(op.key, last))
    cur.executemany(store._q(_GUARD_PAST), [(last, key, last) for key, last in sorted(lasts.items())])
    for reason in sorted({reason for _, reason in new}):
        column = f"skipped_{reason}"  # (one of SKIP_REASONS: Batch.skipped checks)
        cur.executemany(
            store._q(f"UPDATE procsched_tasks SET {column} = {column} + ? WHERE key = ?"),
            [(n, key) for (key, r), n in sorted(new.items()) if r == reason],
        )
    # Trimmed every keep_runs // 2 rows written, not at each batch: the trim
    # walks keep_runs index entries, and a late task writes a row a batch.
    # A task keeps at most 1.5 x keep_runs rows; reads return keep_runs slots.
    untrimmed, every, trim = store._untrimmed, max(1, store.keep_runs // 2), []
    for key in sorted(added):
        untrimmed[key] = untrimmed.get(key, 0) + added[key]
        if untrimmed[key] >= every:
            trim.append((key, key, store.keep_runs - 1))
            untrimmed[key] = 0
    if trim:
        cur.executemany(store._q(_TRIM_SKIPPED), trim)


def _insert_skips(store: StoreAccess, cur: Any, rows: list[tuple[Any, ...]]) -> list[tuple[str, str, int]]:
    """Insert skipped ``rows``, a row whose first slot is recorded already
    left as it is; (key, reason, slots) of each inserted. SQLite: one
    prepared statement for all (``executemany``) when none was recorded
    before - the rule - else rolled back to a savepoint and done with
    RETURNING."""
    if not store._pg:
        cur.execute("SAVEPOINT procsched_skips")
        cur.executemany(f"{_INSERT_SKIP} VALUES {_SKIP_VALUES} ON CONFLICT (key, slot_ns) DO NOTHING", rows)
        if cur.rowcount == len(rows):
            cur.execute("RELEASE SAVEPOINT procsched_skips")
            return [(row[0], row[2], row[6]) for row in rows]
        cur.execute("ROLLBACK TO SAVEPOINT procsched_skips")
        cur.execute("RELEASE SAVEPOINT procsched_skips")
    inserted: list[tuple[str, str, int]] = []
    for i in range(0, len(rows), _SKIP_ROWS):
        chunk = rows[i : i + _SKIP_ROWS]
        if store._pg:
            values, params = _values(chunk, ("text", "bigint", "text", "bigint", "text", "bigint", "bigint"))
        else:
            values, params = "VALUES " + ", ".join([_SKIP_VALUES] * len(chunk)), [x for row in chunk for x in row]
        sql = f"{_INSERT_SKIP} {values} ON CONFLICT (key, slot_ns) DO NOTHING RETURNING key, reason, slots"
        inserted += [(r[0], r[1], int(r[2])) for r in store._x(cur, sql, params).fetchall()]
    return inserted


def _op_moved(store: StoreAccess, cur: Any, c: Commit, op: Moved) -> None:
    h = c.holder
    assert h is not None
    store._x(
        cur,
        "UPDATE procsched_runs SET worker_pid = ? WHERE key = ? AND run = ? AND attempt = ? AND outcome IS NULL "
        "AND holder = ? AND token = ?",
        (op.worker_pid, op.key, op.run, op.attempt, h.id, h.token),
    )


def _op_answer(store: StoreAccess, cur: Any, c: Commit, op: Answer) -> None:
    h = c.holder
    assert h is not None
    store._x(
        cur,
        "UPDATE procsched_requests SET done_ns = ?, result = ?, error = ? WHERE id = ? AND taken_by = ? "
        "AND taken_token = ? AND done_ns IS NULL",
        (c.now, json.dumps(op.result), op.error, op.request_id, h.id, h.token),
    )


def end_runs_of(
    store: StoreAccess,
    cur: Any,
    holder_id: str,
    token: int,
    now: int,
    outcome: str,
    error_type: str | None,
    why: str | None,
) -> list[RunRecord]:
    rows = store._x(
        cur,
        f"SELECT {RUN_COLS} FROM procsched_runs WHERE holder = ? AND token = ? "
        "AND outcome IS NULL ORDER BY key, run, attempt",
        (holder_id, token),
    ).fetchall()
    store._x(
        cur,
        "UPDATE procsched_runs SET outcome = ?, finished_ns = ?, error_type = ?, error_message = ? "
        "WHERE holder = ? AND token = ? AND outcome IS NULL",
        (outcome, now, error_type, why, holder_id, token),
    )
    per_key: dict[str, int] = {}
    for r in rows:
        per_key[r[0]] = per_key.get(r[0], 0) + 1
    # Next claim: the next run (a caller whose Retry covers this outcome
    # sets next_attempt and next_due_ns with Batch.update).
    other = (
        "(SELECT r.{col} FROM procsched_runs r WHERE r.key = procsched_tasks.key AND r.outcome IS NULL "
        "ORDER BY r.run DESC, r.attempt DESC LIMIT 1)"
    )
    for key, n in per_key.items():
        store._x(
            cur,
            f"""UPDATE procsched_tasks SET in_flight = CASE WHEN in_flight > ? THEN in_flight - ? ELSE 0 END,
                holder = {other.format(col="holder")}, token = {other.format(col="token")}, next_attempt = 1,
                last_outcome = ?, {_RUN_COUNTER_SETS}, updated_ns = ? WHERE key = ?""",
            (n, n, outcome, *_outcome_counts(outcome, n), now, key),
        )
    store._x(
        cur,
        "UPDATE procsched_requests SET taken_by = NULL, taken_token = NULL, taken_ns = NULL "
        "WHERE taken_by = ? AND taken_token = ? AND done_ns IS NULL",
        (holder_id, token),
    )
    return [
        dataclasses.replace(RunRecord(*r), finished_ns=now, outcome=outcome, error_type=error_type, error_message=why)
        for r in rows
    ]


def leave_slots(store: StoreAccess, cur: Any, runs: list[RunRecord]) -> None:
    """``runs``, just ended ``cancelled`` by ``end_runs_of``, never started:
    each leaves what it claimed to the next claim, as a cancelled end of a
    run given ahead does (``_LEAVE_SLOT``): a scheduled run its slot, a
    retry its attempt (the next one, at its time). A one-shot whose only run
    a clean shutdown cancelled so kept its slot guard, and every claim of
    its next run was refused: it never ran (the fault campaign, seed 4607)."""
    slots = [_left(r.key, r.run) for r in runs if r.attempt == 1 and r.cause == "schedule"]
    if slots:
        cur.executemany(store._q(_LEAVE_SLOT), slots)
    for r in runs:
        if r.attempt > 1:
            store._x(
                cur,
                "UPDATE procsched_tasks SET next_attempt = ? WHERE key = ? AND run_count = ? AND next_attempt = 1 "
                "AND in_flight = 0",
                (r.attempt + 1, r.key, r.run),
            )
            store._x(
                cur,
                "UPDATE procsched_runs SET retry_due_ns = scheduled_ns WHERE key = ? AND run = ? AND attempt = ?",
                (r.key, r.run, r.attempt),
            )


def _name(options: str) -> str | None:
    """A task's display name: ``options["name"]`` (None: none, or not a str)."""
    try:
        name = json.loads(options).get("name")
    except (ValueError, AttributeError):
        return None
    return name if isinstance(name, str) else None


_OPS: dict[str, Any] = {
    "upsert": _op_upsert,
    "update": op_update,
    "delete": _op_delete,
    "unloadable": _op_unloadable,
    "started": _op_started,
    "finished": _op_finished,
    "skipped": _op_skipped,
    "answer": _op_answer,
    "moved": _op_moved,
}


def _values(rows: list[tuple[Any, ...]], types: tuple[str, ...]) -> tuple[str, list[Any]]:
    """``rows`` as a query (PostgreSQL): ``unnest`` of one typed array per
    column, its parameters. Its text is the same for any number of rows, so
    the driver converts it once and the server prepares it once: a
    ``VALUES`` list of as many rows was a new statement for each count (its
    text parsed by the driver at every commit: 17 % of the writer thread's
    samples in ``benchmarks.durable``, PostgreSQL)."""
    cols = ", ".join(f"?::{t}[]" for t in types)
    return f"SELECT * FROM unnest({cols})", [list(col) for col in zip(*rows, strict=True)]
