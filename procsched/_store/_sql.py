"""The SQL both stores share: schema, migrations, batches, leases.

    dispatcher turn ──▶ Batch (ops in memory, no I/O) ──▶ commit(): ONE transaction
                                                           ├─ fence: renew the holder's lease
                                                           ├─ started: claim task row + insert run row
                                                           ├─ finished: fenced run update + reschedule + trim
                                                           └─ upsert / update / delete / unloadable
    start-up ──▶ load() (tasks + in-flight runs + schedulers) ──▶ take_over(dead) per dead holder

Theory of operation. A keyed task is one row of ``procsched_tasks`` (its
definition and its state), its runs rows of ``procsched_runs`` keyed by
(key, run, attempt), and each live scheduler a row of
``procsched_schedulers`` with a lease and a fencing token (from a counter
in ``procsched_version``, so tokens never repeat).

- *Claiming* a run (``Batch.started``) is a conditional update of the task
  row - only if nobody holds it, it is not paused, and (run, attempt) is
  exactly its next claim, and for a slot at least ``SLOT_GAP_NS`` after the
  previous run's (a scheduler whose run numbers drifted cannot run a slot
  twice under another number) - followed by the insert of the run row, whose
  primary key is a second guard. Both in one transaction: SQLite's ``BEGIN
  IMMEDIATE`` serialises writers; PostgreSQL's row lock on the task row
  makes a second claimer wait, re-check and find the row taken. So each
  (key, run, attempt) is won at most once, and the state is written with
  the claim, before the worker gets the run.
- *Finishing* a run updates its row only if it is still in flight and held
  with the caller's token (fencing), and in the same transaction sets the
  task's next due time, frees the holder and trims the history: there is
  no instant at which a kill leaves a run finished but not rescheduled.
- *Fencing*: every batch that claims or finishes first renews its holder's
  lease, conditioned on the holder's row still carrying its token; a
  holder that was taken over (its row deleted by a survivor) gets
  ``fenced_out`` and nothing of its batch is written. Lateness alone does
  not fence: a holder past its lease whom nobody took over yet still holds
  its runs and may renew; the take-over re-checks expiry in its own
  transaction, so exactly one of the two wins.
- *Taking over* a dead holder deletes its row (only if its lease expired,
  judged by the store clock, or the caller proved it dead) and records its
  in-flight runs ``crashed``: the delete succeeds once, so the crash is
  recorded exactly once.

Clocks and skew: run timestamps (scheduled, started, finished, next due)
come from the caller (the dispatcher's wall clock). Lease times come from
the *store clock*: PostgreSQL's ``clock_timestamp()`` (one clock for every
host: skew between schedulers does not matter), SQLite's caller clock (a
SQLite file is shared only by processes of one host - WAL needs shared
memory, so never a network filesystem - hence one clock; a clock injected
with a skew of s makes leases expire up to s early or late, so leases must
exceed the renewal interval plus the worst skew). Due times need no
clock agreement for correctness: a slot runs where its claim is won, and
a (key, run) is won once, so a skewed host can only start a slot early or
late by its skew, never run it twice or drop it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
from collections.abc import Iterator
from typing import Any, Callable, ClassVar

from .._errors import StoreError
from ._model import (
    OUTCOMES,
    BatchResult,
    Holder,
    Loaded,
    RunRecord,
    StoredTask,
    TaskDefinition,
    TaskState,
)

#: The schema this procsched writes. A store with a higher version was
#: written by a newer procsched and is refused; a lower one is migrated.
SCHEMA_VERSION = 1
#: Runs kept per task (the oldest finished ones beyond this are trimmed).
KEEP_RUNS = 100
DEFAULT_LEASE_NS = 30_000_000_000
#: A new run's slot must come at least this long after the previous run's
#: (a scheduler whose run numbers drifted from the store's cannot run a slot
#: twice under another number; two schedulers' wall times of one slot differ
#: by microseconds of clock reading, far below this).
SLOT_GAP_NS = 1_000_000

# Column lists, in the order the row readers below expect.
_TASK_COLS = ("key, fn_ref, args, schedule, options, def_hash, run_count, next_due_ns, next_attempt, paused, "
              "last_outcome, unloadable, holder, token, updated_ns")  # fmt: skip
_RUN_COLS = ("key, run, attempt, scheduled_ns, started_ns, finished_ns, host, pid, outcome, error_type, "
             "error_message, holder, token")  # fmt: skip
_SCHED_COLS = "id, token, host, pid, lease_ns, lease_until_ns, heartbeat_ns"
#: A claimed run's row replaces one left by an earlier task of the same key
#: (deleted, then scheduled again): the claim on the task row decided.
_REPLACE_RUN = ("ON CONFLICT (key, run, attempt) DO UPDATE SET scheduled_ns = excluded.scheduled_ns, "
                "started_ns = excluded.started_ns, finished_ns = NULL, host = excluded.host, pid = excluded.pid, "
                "outcome = NULL, error_type = NULL, error_message = NULL, holder = excluded.holder, "
                "token = excluded.token")  # fmt: skip


def _task(row: Any, parsed: dict[str, Any] | None = None) -> StoredTask:
    """A task from its row. ``parsed`` memoizes JSON texts within one read:
    a load() of 100,000 tasks parses each distinct schedule and options text
    once (JSON decoding was 60% of load()), so equal dicts are shared."""
    if parsed is None:
        schedule, options = json.loads(row[3]), json.loads(row[4])
    else:
        schedule = parsed.get(row[3])
        if schedule is None:
            schedule = parsed[row[3]] = json.loads(row[3])
        options = parsed.get(row[4])
        if options is None:
            options = parsed[row[4]] = json.loads(row[4])
    return StoredTask(
        TaskDefinition(row[0], row[1], bytes(row[2]), schedule, options, row[5]),
        TaskState(row[6], row[7], row[8], bool(row[9])),
        row[10], row[11], row[12], row[13], row[14],
    )  # fmt: skip


def _run(row: Any) -> RunRecord:
    return RunRecord(*row)


def _holder(row: Any) -> Holder:
    return Holder(*row)


class SQLStore:
    """Base of SQLiteStore and PostgresStore; see the module docstring.

    One owner: a store object is used by one thread (the dispatcher's). Every
    method either does what it says in one transaction or raises
    ``StoreError`` with nothing written.
    """

    #: schema version -> statements that migrate a store from version - 1.
    #: (Empty in the first release; a later release appends to it.)
    MIGRATIONS: ClassVar[dict[int, list[str]]] = {}
    SCHEMA_VERSION: ClassVar[int] = SCHEMA_VERSION
    BLOB: ClassVar[str] = "BLOB"
    RUNS_SUFFIX: ClassVar[str] = ""
    #: Op kinds a store writes as one statement per group of consecutive
    #: ops (``_set_<kind>``) instead of one per op (``_op_<kind>``).
    SET_OPS: ClassVar[frozenset[str]] = frozenset()
    describe: str = "store"

    def __init__(self, *, keep_runs: int = KEEP_RUNS, clock: Callable[[], int] | None = None,
                 secret: Any = None) -> None:  # fmt: skip
        # secret: the key(s) that sign stored payloads (issue 24; the signing is the store2 branch's)
        if type(keep_runs) is not int or keep_runs < 1:
            raise ValueError(f"keep_runs must be an int >= 1, got {keep_runs!r}")
        self.keep_runs = keep_runs
        self._clock = clock

    # -- dialect hooks -------------------------------------------------------

    def _cursor(self) -> Any:
        raise NotImplementedError

    def _begin(self, cur: Any, write: bool) -> None:
        raise NotImplementedError

    def _has_schema(self, cur: Any) -> bool:
        raise NotImplementedError

    def _now(self, cur: Any) -> int:
        """The store clock (UTC ns); see the module docstring."""
        raise NotImplementedError

    def _q(self, sql: str) -> str:
        return sql

    def _errors(self) -> tuple[type[BaseException], ...]:
        raise NotImplementedError

    def _after_error(self) -> None:
        """Called after a failed transaction was rolled back."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> SQLStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transactions --------------------------------------------------------

    @contextlib.contextmanager
    def _tx(self, what: str, write: bool = True) -> Iterator[Any]:
        """One transaction; any database error -> StoreError, nothing written.
        A read (``write=False``) reads one snapshot and never blocks writers."""
        errors = self._errors()
        cur = None
        try:
            cur = self._cursor()
            self._begin(cur, write)
            yield cur
            cur.execute("COMMIT")
        except errors as exc:
            if cur is not None:
                with contextlib.suppress(*errors, OSError):
                    cur.execute("ROLLBACK")
            self._after_error()
            raise StoreError(f"{self.describe}: {what} failed: {type(exc).__name__}: {exc}".rstrip()) from exc
        except BaseException:
            if cur is not None:
                with contextlib.suppress(*errors, OSError):
                    cur.execute("ROLLBACK")
            raise

    def _x(self, cur: Any, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> Any:
        cur.execute(self._q(sql), params)
        return cur

    # -- schema --------------------------------------------------------------

    def _schema(self) -> list[str]:
        b = self.BLOB
        return [
            "CREATE TABLE procsched_version (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL, "
            "written_by TEXT NOT NULL, fence BIGINT NOT NULL)",
            f"""CREATE TABLE procsched_tasks (
                key TEXT PRIMARY KEY, fn_ref TEXT NOT NULL, args {b} NOT NULL, schedule TEXT NOT NULL,
                options TEXT NOT NULL, def_hash TEXT NOT NULL,
                run_count BIGINT NOT NULL, next_due_ns BIGINT, next_attempt INTEGER NOT NULL,
                paused INTEGER NOT NULL, last_outcome TEXT, unloadable TEXT,
                holder TEXT, token BIGINT, updated_ns BIGINT NOT NULL)""",
            "CREATE INDEX procsched_tasks_updated ON procsched_tasks (updated_ns)",
            f"""CREATE TABLE procsched_runs (
                key TEXT NOT NULL, run BIGINT NOT NULL, attempt INTEGER NOT NULL, scheduled_ns BIGINT NOT NULL,
                started_ns BIGINT, finished_ns BIGINT, host TEXT, pid INTEGER, outcome TEXT,
                error_type TEXT, error_message TEXT, holder TEXT, token BIGINT,
                PRIMARY KEY (key, run, attempt)){self.RUNS_SUFFIX}""",
            "CREATE INDEX procsched_runs_in_flight ON procsched_runs (holder) WHERE outcome IS NULL",
            """CREATE TABLE procsched_schedulers (
                id TEXT PRIMARY KEY, token BIGINT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,
                lease_ns BIGINT NOT NULL, lease_until_ns BIGINT NOT NULL, heartbeat_ns BIGINT NOT NULL)""",
        ]

    def _init_schema(self) -> None:
        from .. import __name__ as pkg

        with self._tx("opening the store") as cur:
            if not self._has_schema(cur):
                for stmt in self._schema():
                    cur.execute(stmt)
                self._x(cur, "INSERT INTO procsched_version VALUES (1, ?, ?, 0)",
                        (self.SCHEMA_VERSION, f"{pkg} {_version()}"))  # fmt: skip
                return
            row = self._x(cur, "SELECT version, written_by FROM procsched_version WHERE id = 1").fetchone()
            if row is None:
                raise StoreError(f"{self.describe}: the procsched_version table is empty: not a procsched store")
            version, written_by = row
            if version > self.SCHEMA_VERSION:
                raise StoreError(
                    f"{self.describe} has schema version {version} (written by {written_by}); this procsched "
                    f"reads up to version {self.SCHEMA_VERSION}: upgrade procsched"
                )
            for target in range(version + 1, self.SCHEMA_VERSION + 1):
                for stmt in self.MIGRATIONS.get(target, []):
                    cur.execute(stmt)
            if version < self.SCHEMA_VERSION:
                self._x(cur, "UPDATE procsched_version SET version = ?, written_by = ? WHERE id = 1",
                        (self.SCHEMA_VERSION, f"{pkg} {_version()}"))  # fmt: skip

    def schema_version(self) -> int:
        with self._tx("reading the schema version", write=False) as cur:
            return int(self._x(cur, "SELECT version FROM procsched_version WHERE id = 1").fetchone()[0])

    # -- reads ---------------------------------------------------------------

    def load(self) -> Loaded:
        """Every stored task, every in-flight run, every registered scheduler.

        The caller records as ``crashed`` the in-flight runs whose holder is
        dead (``take_over``); runs held by live schedulers are theirs. Equal
        ``schedule`` / ``options`` dicts are shared among the tasks: read them,
        never mutate them.
        """
        with self._tx("loading", write=False) as cur:
            parsed: dict[str, Any] = {}
            tasks = [_task(r, parsed) for r in self._x(cur, f"SELECT {_TASK_COLS} FROM procsched_tasks").fetchall()]
            in_flight = [_run(r) for r in self._x(
                cur, f"SELECT {_RUN_COLS} FROM procsched_runs WHERE outcome IS NULL ORDER BY key, run, attempt"
            ).fetchall()]  # fmt: skip
            holders = [_holder(r) for r in self._x(cur, f"SELECT {_SCHED_COLS} FROM procsched_schedulers").fetchall()]
        return Loaded(tasks, in_flight, holders)

    def get(self, key: str) -> StoredTask | None:
        with self._tx("reading a task", write=False) as cur:
            row = self._x(cur, f"SELECT {_TASK_COLS} FROM procsched_tasks WHERE key = ?", (key,)).fetchone()
        return None if row is None else _task(row)

    def jobs(self) -> list[StoredTask]:
        """Stored tasks, by key (for ``procsched jobs``)."""
        with self._tx("listing jobs", write=False) as cur:
            rows = self._x(cur, f"SELECT {_TASK_COLS} FROM procsched_tasks ORDER BY key").fetchall()
        return [_task(r) for r in rows]

    def changed_since(self, since_ns: int) -> list[StoredTask]:
        """Tasks written at or after ``since_ns`` (store clock): the bounded
        re-read that shows one scheduler what others changed (issue 11).
        Re-read with an overlap of a few seconds: a transaction may commit a
        little after the time it stamped."""
        with self._tx("reading changes", write=False) as cur:
            rows = self._x(cur, f"SELECT {_TASK_COLS} FROM procsched_tasks WHERE updated_ns >= ?",
                           (since_ns,)).fetchall()  # fmt: skip
        return [_task(r) for r in rows]

    def peers_view(self, since_ns: int) -> tuple[list[StoredTask], int, list[Holder], int]:
        """One snapshot for a scheduler sharing the store (issue 11): the
        tasks written at or after ``since_ns`` (store clock), how many tasks
        there are (a drop shows deletions: then ``keys()``), every
        registered scheduler, and the store clock."""
        with self._tx("reading changes", write=False) as cur:
            now = self._now(cur)
            rows = self._x(cur, f"SELECT {_TASK_COLS} FROM procsched_tasks WHERE updated_ns >= ?",
                           (since_ns,)).fetchall()  # fmt: skip
            count = int(self._x(cur, "SELECT count(*) FROM procsched_tasks").fetchone()[0])
            holders = [_holder(r) for r in self._x(cur, f"SELECT {_SCHED_COLS} FROM procsched_schedulers").fetchall()]
        return [_task(r) for r in rows], count, holders, now

    def keys(self) -> set[str]:
        """Every stored task's key."""
        with self._tx("listing keys", write=False) as cur:
            return {r[0] for r in self._x(cur, "SELECT key FROM procsched_tasks").fetchall()}

    def schedulers(self) -> list[Holder]:
        """Every registered scheduler (for ``procsched jobs``)."""
        with self._tx("listing schedulers", write=False) as cur:
            return [_holder(r) for r in self._x(cur, f"SELECT {_SCHED_COLS} FROM procsched_schedulers").fetchall()]

    def history(self, key: str | None = None, n: int = KEEP_RUNS) -> list[RunRecord]:
        """The last ``n`` run attempts of ``key`` (of every task if None), oldest first."""
        if type(n) is not int or n < 1:
            raise ValueError(f"n must be an int >= 1, got {n!r}")
        with self._tx("reading history", write=False) as cur:
            if key is None:
                sql = (f"SELECT {_RUN_COLS} FROM procsched_runs "
                       "ORDER BY COALESCE(started_ns, scheduled_ns) DESC, key DESC, run DESC, attempt DESC LIMIT ?")
                rows = self._x(cur, sql, (n,)).fetchall()
            else:
                sql = f"SELECT {_RUN_COLS} FROM procsched_runs WHERE key = ? ORDER BY run DESC, attempt DESC LIMIT ?"
                rows = self._x(cur, sql, (key, n)).fetchall()
        return [_run(r) for r in reversed(rows)]

    def last_run(self, key: str) -> int:
        """The highest run number in ``key``'s history (0: none). A new task
        with the key of one that ended (a one-shot, a cancelled task) goes
        on from it, so its runs never overwrite that history."""
        with self._tx("reading history", write=False) as cur:
            row = self._x(cur, "SELECT MAX(run) FROM procsched_runs WHERE key = ?", (key,)).fetchone()
        return int(row[0] or 0)

    def now_ns(self) -> int:
        """The store clock, UTC ns."""
        with self._tx("reading the clock", write=False) as cur:
            return self._now(cur)

    # -- writes --------------------------------------------------------------

    def batch(self, holder: Holder | None = None) -> Batch:
        """A unit of work: collect a dispatcher turn's changes, then
        ``commit()`` them in one transaction. Claims and finishes need the
        ``holder`` (the scheduler's registration) for fencing."""
        return Batch(self, holder)

    def claim_run(self, holder: Holder, key: str, run: int, attempt: int, scheduled_ns: int,
                  started_ns: int | None = None) -> bool:  # fmt: skip
        """Claim (key, run, attempt) for ``holder`` in one transaction; True
        if this caller won it (see ``Batch.started``)."""
        b = self.batch(holder)
        b.started(key, run, attempt, scheduled_ns, started_ns)
        return b.commit().ok

    def finish_run(self, holder: Holder, key: str, run: int, attempt: int, outcome: str, finished_ns: int,
                   next_due_ns: int | None, **kw: Any) -> bool:  # fmt: skip
        """Record a run's end and the reschedule, fenced; False (nothing
        written) if ``holder`` no longer holds it (see ``Batch.finished``)."""
        b = self.batch(holder)
        b.finished(key, run, attempt, outcome, finished_ns, next_due_ns, **kw)
        return b.commit().ok

    def _commit(self, batch: Batch) -> BatchResult:
        result = BatchResult()
        if not batch.ops:
            return result
        with self._tx(f"writing a batch of {len(batch.ops)} change(s)") as cur:
            now = self._now(cur)
            holder = batch.holder
            if holder is not None and batch.fenced:
                cur = self._x(cur, "UPDATE procsched_schedulers SET heartbeat_ns = ?, lease_until_ns = ? + lease_ns "
                                   "WHERE id = ? AND token = ?", (now, now, holder.id, holder.token))  # fmt: skip
                if cur.rowcount != 1:
                    result.fenced_out = True
                    return result  # nothing written: the transaction commits no change
            self._lock_tasks(cur, batch.ops)
            for kind, group in _groups(batch.ops):
                if len(group) > 1 and kind in self.SET_OPS:
                    getattr(self, "_set_" + kind)(cur, now, holder, result, group)
                else:
                    for op in group:
                        getattr(self, "_op_" + kind)(cur, now, holder, result, *op[1:])
        return result

    def _lock_tasks(self, cur: Any, ops: list[tuple[Any, ...]]) -> None:
        """Lock the task rows ``ops`` write, in one order for every writer
        (a store whose transactions lock rows one by one: see PostgreSQL's)."""

    # one method per batch op; each runs inside _commit's transaction
    def _op_upsert(self, cur: Any, now: int, holder: Any, result: BatchResult, d: TaskDefinition,
                   s: TaskState | None) -> None:  # fmt: skip
        sched, opts = json.dumps(d.schedule, sort_keys=True), json.dumps(d.options, sort_keys=True)
        st = s or TaskState()
        # A stored state is replaced only by a writer that saw every claim
        # (several schedulers: one that adopted the task before another
        # claimed a run must not set the run count back).
        state_update = ("" if s is None else "".join(
            f", {c} = CASE WHEN procsched_tasks.holder IS NULL AND procsched_tasks.run_count <= excluded.run_count "
            f"THEN excluded.{c} ELSE procsched_tasks.{c} END"
            for c in ("next_due_ns", "next_attempt", "paused", "run_count")))  # fmt: skip
        self._x(cur, f"""INSERT INTO procsched_tasks ({_TASK_COLS})
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL, NULL, ?)
                ON CONFLICT (key) DO UPDATE SET fn_ref = excluded.fn_ref, args = excluded.args,
                schedule = excluded.schedule, options = excluded.options, def_hash = excluded.def_hash,
                unloadable = NULL, updated_ns = excluded.updated_ns{state_update}""",
                (d.key, d.fn_ref, d.args, sched, opts, d.def_hash, st.run_count, st.next_due_ns, st.next_attempt,
                 int(st.paused), now))  # fmt: skip

    def _op_update(self, cur: Any, now: int, holder: Any, result: BatchResult, key: str,
                   fields: dict[str, Any]) -> None:  # fmt: skip
        sets = ", ".join(f"{name} = ?" for name in fields)
        values = [int(v) if name == "paused" else v for name, v in fields.items()]
        if "run_count" in fields:
            # Run numbers are set only by a writer that saw every claim (as
            # in _op_upsert): several schedulers, one that adopted the task
            # before another claimed a run must not set the count back.
            self._x(cur, f"UPDATE procsched_tasks SET {sets}, updated_ns = ? WHERE key = ? AND holder IS NULL "
                         "AND run_count <= ?", (*values, now, key, fields["run_count"]))  # fmt: skip
            return
        self._x(cur, f"UPDATE procsched_tasks SET {sets}, updated_ns = ? WHERE key = ?", (*values, now, key))

    def _op_delete(self, cur: Any, now: int, holder: Any, result: BatchResult, key: str, history: bool) -> None:
        self._x(cur, "DELETE FROM procsched_tasks WHERE key = ?", (key,))
        if history:
            self._x(cur, "DELETE FROM procsched_runs WHERE key = ?", (key,))

    def _op_unloadable(self, cur: Any, now: int, holder: Any, result: BatchResult, key: str, why: str) -> None:
        self._x(cur, "UPDATE procsched_tasks SET unloadable = ?, updated_ns = ? WHERE key = ?", (why, now, key))

    def _op_started(self, cur: Any, now: int, h: Holder, result: BatchResult, key: str, run: int, attempt: int,
                    scheduled_ns: int, started_ns: int | None) -> None:  # fmt: skip
        # The claim: only the task's exact next (run, attempt), only if free and not paused - or
        # this very claim, already ours: a batch retried after its COMMIT's answer was lost
        # (the connection dropped) finds what it wrote (issue 20 item 5).
        cur = self._x(cur, """UPDATE procsched_tasks SET run_count = ?, next_attempt = ?, next_due_ns = ?,
                holder = ?, token = ?, updated_ns = ?
                WHERE key = ? AND ((holder IS NULL AND paused = 0 AND next_attempt = ?
                AND run_count + (CASE WHEN next_attempt = 1 THEN 1 ELSE 0 END) = ?
                AND NOT EXISTS (SELECT 1 FROM procsched_runs r WHERE r.key = ? AND r.run = ? AND r.attempt = 1
                    AND r.scheduled_ns > ?))
                OR (holder = ? AND token = ? AND run_count = ? AND next_attempt = ?))""",
                (run, attempt, scheduled_ns, h.id, h.token, now, key, attempt, run,
                 key, run - 1 if attempt == 1 else 0, scheduled_ns - SLOT_GAP_NS, h.id, h.token, run, attempt))  # fmt: skip
        if cur.rowcount != 1:
            result.lost.append((key, run, attempt))
            return
        self._x(cur, f"INSERT INTO procsched_runs ({_RUN_COLS}) VALUES (?, ?, ?, ?, ?, NULL, ?, ?, NULL, NULL, NULL, "
                     f"?, ?) {_REPLACE_RUN}", (key, run, attempt, scheduled_ns, started_ns, h.host, h.pid, h.id,
                                               h.token))  # fmt: skip

    def _op_finished(self, cur: Any, now: int, h: Holder, result: BatchResult, key: str, run: int, attempt: int,
                     outcome: str, finished_ns: int, next_due_ns: int | None, retry: bool,
                     error_type: str | None, error_message: str | None) -> None:  # fmt: skip
        cur = self._x(cur, """UPDATE procsched_runs SET finished_ns = ?, outcome = ?, error_type = ?,
                error_message = ? WHERE key = ? AND run = ? AND attempt = ? AND outcome IS NULL
                AND holder = ? AND token = ?""",
                (finished_ns, outcome, error_type, error_message, key, run, attempt, h.id, h.token))  # fmt: skip
        if cur.rowcount != 1:
            result.stale.append((key, run, attempt))
            return
        self._x(cur, """UPDATE procsched_tasks SET next_due_ns = ?, next_attempt = ?, last_outcome = ?,
                holder = NULL, token = NULL, updated_ns = ? WHERE key = ? AND holder = ? AND token = ?""",
                (next_due_ns, attempt + 1 if retry else 1, outcome, now, key, h.id, h.token))  # fmt: skip
        if run > self.keep_runs:
            self._x(cur, "DELETE FROM procsched_runs WHERE key = ? AND run <= ? AND outcome IS NOT NULL",
                    (key, run - self.keep_runs))  # fmt: skip

    # -- schedulers, leases, take-over (issue 11) -----------------------------

    def register(self, *, lease_ns: int = DEFAULT_LEASE_NS, host: str | None = None,
                 pid: int | None = None) -> Holder:  # fmt: skip
        """Register a scheduler: a new id, a fresh fencing token (never
        reused), a lease of ``lease_ns`` from the store clock."""
        if type(lease_ns) is not int or lease_ns <= 0:
            raise ValueError(f"lease_ns must be a positive int, got {lease_ns!r}")
        host = host or socket.gethostname()
        pid = os.getpid() if pid is None else pid
        ident = f"{host}:{pid}:{secrets.token_hex(4)}"
        with self._tx("registering a scheduler") as cur:
            now = self._now(cur)
            token = self._x(cur, "UPDATE procsched_version SET fence = fence + 1 WHERE id = 1 RETURNING fence").fetchone()[0]
            self._x(cur, f"INSERT INTO procsched_schedulers ({_SCHED_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (ident, token, host, pid, lease_ns, now + lease_ns, now))  # fmt: skip
        return Holder(ident, int(token), host, pid, lease_ns, now + lease_ns, now)

    def renew_lease(self, holder: Holder) -> bool:
        """Extend ``holder``'s lease by its length from now (store clock).
        False: it was taken over - it holds nothing any more and must stop
        running stored tasks (and may register again). A committed batch
        with claims or finishes renews the lease too."""
        with self._tx("renewing a lease") as cur:
            now = self._now(cur)
            cur = self._x(cur, "UPDATE procsched_schedulers SET heartbeat_ns = ?, lease_until_ns = ? + lease_ns "
                               "WHERE id = ? AND token = ?", (now, now, holder.id, holder.token))  # fmt: skip
            return bool(cur.rowcount == 1)

    def unregister(self, holder: Holder) -> bool:
        """A clean shutdown: drop the registration (its in-flight runs, if
        any, are recorded ``cancelled``: it stopped them). False if it was
        taken over already."""
        with self._tx("unregistering a scheduler") as cur:
            now = self._now(cur)
            cur = self._x(cur, "DELETE FROM procsched_schedulers WHERE id = ? AND token = ?", (holder.id, holder.token))
            if cur.rowcount != 1:
                return False
            self._end_runs_of(cur, holder.id, holder.token, now, "cancelled", None, None)
            return True

    def expired_holders(self, now_ns: int | None = None) -> list[Holder]:
        """Schedulers whose lease ended before ``now_ns`` (default: the store clock)."""
        with self._tx("reading leases", write=False) as cur:
            now = self._now(cur) if now_ns is None else now_ns
            rows = self._x(cur, f"SELECT {_SCHED_COLS} FROM procsched_schedulers WHERE lease_until_ns < ?",
                           (now,)).fetchall()  # fmt: skip
        return [_holder(r) for r in rows]

    def take_over(self, dead: Holder, by: Holder | None = None, *, force: bool = False,
                  reschedule: Callable[[StoredTask, RunRecord], dict[str, Any] | None] | None = None
                  ) -> list[RunRecord] | None:  # fmt: skip
        """Record the in-flight runs of ``dead`` as ``crashed`` and free its
        tasks, once: of all callers, exactly one gets the list (possibly
        empty); the others get None. Only if ``dead``'s lease has expired by
        the store clock - or ``force``: the caller proved it dead (same host,
        its pid gone; see ``dead_here``). ``by``, if given, must hold a live
        registration (fenced like a batch), so a taken-over scheduler cannot
        take over others. The caller then reschedules those tasks (and
        retries the crashed runs its Retry covers) with a batch - or, with
        ``reschedule(task, crashed_run)`` -> the task's new state fields (see
        ``Batch.update``; None: the task ended, it is deleted), in this same
        transaction, so no other scheduler sees the task between the crash
        and its reschedule (several schedulers, issue 11).
        """
        with self._tx("taking over a scheduler") as cur:
            now = self._now(cur)
            if by is not None:
                cur = self._x(cur, "UPDATE procsched_schedulers SET heartbeat_ns = ?, lease_until_ns = ? + lease_ns "
                                   "WHERE id = ? AND token = ?", (now, now, by.id, by.token))  # fmt: skip
                if cur.rowcount != 1:
                    return None
            cur = self._x(cur, "DELETE FROM procsched_schedulers WHERE id = ? AND token = ? AND (lease_until_ns < ? OR ?)",
                          (dead.id, dead.token, now, bool(force)))  # fmt: skip
            if cur.rowcount != 1:
                return None
            why = f"its scheduler {dead.id} (host {dead.host}, pid {dead.pid}) died"
            runs = self._end_runs_of(cur, dead.id, dead.token, now, "crashed", "SchedulerDied", why)
            if reschedule is not None:
                for record in runs:
                    row = self._x(cur, f"SELECT {_TASK_COLS} FROM procsched_tasks WHERE key = ?",
                                  (record.key,)).fetchone()  # fmt: skip
                    if row is None:
                        continue
                    fields = reschedule(_task(row), record)
                    if fields is None:
                        self._op_delete(cur, now, None, BatchResult(), record.key, False)
                    elif fields:
                        self._op_update(cur, now, None, BatchResult(), record.key, fields)
            return runs

    def _end_runs_of(self, cur: Any, holder_id: str, token: int, now: int, outcome: str,
                     error_type: str | None, why: str | None) -> list[RunRecord]:  # fmt: skip
        rows = self._x(cur, f"SELECT {_RUN_COLS} FROM procsched_runs WHERE holder = ? AND token = ? "
                            "AND outcome IS NULL", (holder_id, token)).fetchall()  # fmt: skip
        self._x(cur, "UPDATE procsched_runs SET outcome = ?, finished_ns = ?, error_type = ?, error_message = ? "
                     "WHERE holder = ? AND token = ? AND outcome IS NULL",
                (outcome, now, error_type, why, holder_id, token))  # fmt: skip
        # Next claim: the next run (a caller whose Retry covers this outcome
        # sets next_attempt and next_due_ns with Batch.update).
        self._x(cur, "UPDATE procsched_tasks SET holder = NULL, token = NULL, next_attempt = 1, last_outcome = ?, "
                     "updated_ns = ? WHERE holder = ? AND token = ?", (outcome, now, holder_id, token))  # fmt: skip
        return [RunRecord(*r[:5], now, r[6], r[7], outcome, error_type, why, r[11], r[12]) for r in rows]


def _groups(ops: list[tuple[Any, ...]]) -> Iterator[tuple[str, list[tuple[Any, ...]]]]:
    """Consecutive ops of one kind, each key at most once per group (so a
    set-wise statement does exactly what the ops one by one would)."""
    kind: str | None = None
    group: list[tuple[Any, ...]] = []
    keys: set[str] = set()
    for op in ops:
        key = op[1] if isinstance(op[1], str) else op[1].key  # upsert carries a TaskDefinition
        if op[0] != kind or key in keys:
            if group:
                yield kind, group  # type: ignore[misc]
            kind, group, keys = op[0], [], set()
        group.append(op)
        keys.add(key)
    if group:
        yield kind, group  # type: ignore[misc]


class Batch:
    """The changes of one dispatcher turn, written by ``commit()`` in one
    transaction (see the module docstring). Ops apply in the order given.
    Building a batch does no I/O; a batch commits once."""

    __slots__ = ("store", "holder", "ops", "fenced", "done")

    def __init__(self, store: SQLStore, holder: Holder | None) -> None:
        self.store = store
        self.holder = holder
        self.ops: list[tuple[Any, ...]] = []
        self.fenced = False
        self.done = False

    def __len__(self) -> int:
        return len(self.ops)

    def _need_holder(self, what: str) -> None:
        if self.holder is None:
            raise ValueError(f"{what} needs a batch made with the scheduler's holder: store.batch(holder)")
        self.fenced = True

    def upsert(self, definition: TaskDefinition, state: TaskState | None = None) -> None:
        """Store ``definition`` (insert or replace; clears ``unloadable``).
        ``state``: None keeps a stored task's state (a new one starts at
        ``TaskState()``). Never touches the holder of an in-flight run."""
        self.ops.append(("upsert", definition, state))

    def update(self, key: str, **fields: Any) -> None:
        """Set state fields of ``key``: ``next_due_ns``, ``paused``,
        ``run_count``, ``next_attempt`` (pause/resume, a reschedule), and
        ``unloadable`` (None: a restart loaded it again)."""
        bad = set(fields) - {"next_due_ns", "paused", "run_count", "next_attempt", "unloadable"}
        if bad or not fields:
            raise ValueError(f"update takes next_due_ns, paused, run_count, next_attempt, unloadable; "
                             f"got {sorted(fields)}")  # fmt: skip
        self.ops.append(("update", key, fields))

    def delete(self, key: str, *, history: bool = False) -> None:
        """Remove ``key`` from the stored tasks (an ended one-shot, a
        cancel); its runs stay in history unless ``history=True``."""
        self.ops.append(("delete", key, history))

    def unloadable(self, key: str, why: str) -> None:
        """Mark ``key`` unloadable (its function failed to import): kept,
        listed, never run, never deleted by this. A later upsert clears it."""
        self.ops.append(("unloadable", key, why))

    def started(self, key: str, run: int, attempt: int, scheduled_ns: int, started_ns: int | None = None) -> None:
        """Claim (key, run, attempt) and record it in flight, with the
        task's new state (``run_count = run``, ``next_due_ns = scheduled_ns``,
        held by this batch's holder). Lost (``BatchResult.lost``) unless it
        is exactly the task's next claim, unheld and not paused."""
        self._need_holder("started")
        self.ops.append(("started", key, run, attempt, scheduled_ns, started_ns))

    def finished(self, key: str, run: int, attempt: int, outcome: str, finished_ns: int, next_due_ns: int | None,
                 *, retry: bool = False, error_type: str | None = None, error_message: str | None = None) -> None:  # fmt: skip
        """Record the end of an in-flight run and the reschedule together:
        ``next_due_ns`` (None: no further run), ``retry`` (the next claim is
        attempt + 1 of this run, else run + 1). Fenced: refused
        (``BatchResult.stale``) unless this holder still holds the run."""
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {outcome!r}")
        self._need_holder("finished")
        self.ops.append(("finished", key, run, attempt, outcome, finished_ns, next_due_ns, retry,
                         error_type, None if error_message is None else error_message[:2000]))  # fmt: skip

    def commit(self) -> BatchResult:
        """Write every op in one transaction. Raises StoreError (nothing
        written) on a database fault."""
        if self.done:
            raise RuntimeError("this batch was committed already")
        self.done = True
        return self.store._commit(self)


def dead_here(holders: list[Holder], host: str | None = None) -> list[Holder]:
    """The holders registered from this host whose process is gone: dead for
    certain, so a restarted scheduler need not wait out their lease
    (``take_over(..., force=True)``). A reused pid looks alive: then the
    lease decides, which is only slower."""
    import psutil

    host = host or socket.gethostname()
    me = os.getpid()
    return [h for h in holders if h.host == host and h.pid != me and not psutil.pid_exists(h.pid)]


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("procsched")
    except Exception:  # noqa: BLE001 - not installed (a source tree)
        return "(source)"
