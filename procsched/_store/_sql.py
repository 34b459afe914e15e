"""The SQL both stores share: schema, migrations, batches, leases, control, reads.

    dispatcher turn ──▶ Batch (ops in memory, no I/O) ──▶ commit(): ONE transaction
                                                           ├─ fence: renew the holder's lease (+ its change counter)
                                                           ├─ started: claim the state row + insert the run row
                                                           ├─ finished: fenced run update + reschedule + trim
                                                           ├─ skipped: a skipped slot + its counter + trim
                                                           ├─ upsert (definition row only if it changed)
                                                           │   / update / delete / unloadable / answer
                                                           └─ an op the database refuses: left out, reported
    start-up ──▶ load() (tasks + in-flight runs + schedulers + retries) ──▶ take_over(dead) per dead holder
    any process ──▶ pause / resume / remove / ask (run now, backfill) ──▶ the holding instance
                    takes the request (take_requests) and answers it in a batch
    console, CLI ──▶ change_mark() (cheap: the counters) ──▶ jobs_view / job_view / instances / counts

Theory of operation. A keyed task is a row of ``procsched_definitions``
(what the program asked for: function reference, pickled arguments,
schedule, options - written when the program schedules or replaces it,
never by a run) and a row of ``procsched_tasks`` (its state: run count,
next due time, pause, runs in flight, holder, per-outcome totals). Its runs
are rows of ``procsched_runs`` keyed by (key, run, attempt), its skipped
slots rows of ``procsched_skipped``; each live scheduler instance is a row
of ``procsched_schedulers`` with a lease and a fencing token (from a counter
in ``procsched_version``, so tokens never repeat). ``_schema.py`` has the
DDL, ``_rows.py`` reads a task's row by name, ``_writes.py`` writes
batches (the rules below are its ops'), ``_control.py`` is control from
outside, ``_views.py`` the read model.

- *Schema versions.* This release writes schema 3 and reads 1 to 3: an
  older store is migrated at its first open, in the transaction that
  read its version (two instances opening it at once: one migrates, the
  other finds schema 3), with nothing lost (``_schema.migration_2``, then
  ``migration_3``) - from schema 1 only when no instance of the older
  release holds a live lease on it (its writes would fail from then on:
  stop it first). A store of a higher version is refused ("upgrade
  procsched"), as the older release refuses a schema-3 store.

- *Claims* (``Batch.started``). A claim names (key, run, attempt) and is won
  only if it is a claim the state row allows, decided on the row itself
  (SQLite: ``BEGIN IMMEDIATE`` serialises writers; PostgreSQL: the claim
  locks the row, so a second claimer waits, re-reads it, and finds it taken):
  the task has fewer than ``max_concurrent`` runs in flight; a new run
  (attempt 1) is exactly ``run_count + 1``; a scheduled one (cause
  ``"schedule"``) only while not paused, not while a retry of the task's
  latest run is due (with ``max_concurrent`` 1), and only for a slot at least
  ``SLOT_GAP_NS`` after the last scheduled slot claimed or recorded
  skipped (a scheduler whose run numbers drifted cannot run a slot twice
  under another number, nor run one recorded skipped: one slot, one end); a
  retry (attempt k > 1) only if it is the one the state says is next
  (``run_count``, ``next_attempt``) or one a failed attempt of an earlier
  run asked for (``retry_due_ns`` on its row), and never twice. The run row
  is inserted in the same transaction, before the worker gets the run. So
  each (key, run, attempt) is won at most once among instances, and run
  numbers are unique. A claim of a task in a *group* with a shared limit
  is also counted against it, in the claim transaction (the group's limit
  row is locked, its runs in flight counted): over the limit it is
  ``limited`` - not lost: the run waits, it is nobody else's.
- *Causes.* Runs asked for by ``run_now`` (``"manual"``) or ``backfill``
  (``"backfill"``) are claimed like any (numbered like the others, each once
  among instances, counted in ``max_concurrent`` and the group's limit) but
  never move the task's next scheduled slot (``next_due_ns``, the slot
  guard) and are not held by a pause. ``sched_run`` remembers the latest
  scheduled run: only its end reschedules the task.
- *Concurrency.* With ``max_concurrent`` > 1 a task may have several runs
  in flight, on any instances (``in_flight`` counts them; ``holder`` names
  one of their holders). A failed attempt that asks for a retry keeps the
  retry's due time on its run row (``retry_due_ns``, cleared by the retry's
  claim): a retry of a run that is not the task's latest any more (a newer
  run was claimed meanwhile) is claimed from there. ``load()`` lists them.
- *Finishing* a run updates its row only if it is still in flight and held
  with the caller's token (fencing), and in the same transaction frees its
  unit of ``in_flight``, sets the task's next due time (the latest scheduled
  run's end only), adds to the outcome's total and trims the history:
  there is no instant at which a kill leaves a run finished but not
  rescheduled, nor a unit of a limit held by a run that ended.
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
  recorded exactly once, and the runs stop counting in ``max_concurrent``
  and in their groups' limits at that instant (a SIGKILL never leaks a unit
  of a limit: it is held by a run row, which the take-over ends). Control
  requests the dead holder took and did not answer are given back.
- *Idempotent retries* (issue 20 item 5): a batch committed whose answer
  was lost (the connection dropped at COMMIT) is sent again by its caller.
  A claim already written by this very holder and token (its run row in
  flight, theirs) is won again, not lost; an end already recorded by them
  with the same outcome and time is not stale. The same makes a claim that
  appears twice in one batch harmless (issue 20 item 9).
- *One bad op never blocks the others* (issue 20 item 7): an op the
  database refuses because of its own data (a key PostgreSQL cannot store,
  a value out of range) makes the batch go again op by op, each in a
  savepoint; the refused ops are left out and reported
  (``BatchResult.failed``, their claims also ``lost``, their ends ``stale``)
  and the rest is written. A fault of the store itself (unreachable,
  locked, full) still fails the whole batch (StoreError, nothing written):
  the caller tries it again.
- *Control from outside* (DESIGN part three). Pause, resume and remove are
  conditional writes of the task's state that every instance already
  follows at its re-read (lease/3, at most 1 s): a pause holds scheduled
  claims at once, in the store. Run now and backfill are requests
  (``procsched_requests``): the instance that runs the task takes one
  (``take_requests``: once, atomically, fenced), carries it out, and answers
  it (``Batch.answer``) in the batch that holds the claims it caused; the
  asker reads the answer (``request``).
- *Change mark*: every write transaction of an instance adds one to its
  own change counter (``procsched_schedulers.changes``: never a row two
  instances write; free in a batch that claims or ends runs, whose fence
  writes that row anyway); other writers add to the store's
  (``procsched_version.changes``), except a batch with no registration
  that only writes task rows (upserts, updates), which the mark sees
  through the tasks' latest write time (an index's last entry).
  ``change_mark()`` reads only those (a row per instance, one index
  entry): no table scan, whatever the store holds.
- *Trust* (``_trust``): with a secret, definitions are signed when written
  and checked when read; a row that fails is returned untrusted, never
  loadable.

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
import os
import secrets
import socket
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, ClassVar, Self

from .._errors import StoreError
from . import _control, _rows, _schema, _views, _writes
from ._batch import Batch, Update
from ._model import (
    BatchResult,
    ChangeMark,
    ControlRequest,
    Holder,
    InstanceStatus,
    InstanceView,
    JobDetail,
    JobView,
    Loaded,
    RunRecord,
    SkippedSlot,
    StoreCounts,
    StoredTask,
)
from ._rows import (
    SHAPE_SELECT,
    TASK_SELECT,
    TASK_SELECT_BARE,
    TASK_SELECT_LIGHT,
    shared_parts,
    stored_task,
    stored_tasks,
)
from ._schema import _RUN_COLS, RUN_COLS, SCHED_COLS, SCHEMA_VERSION
from ._trust import Keyring, Secret
from ._writes import _REPLACE_RUN, SLOT_GAP_NS

__all__ = [
    "DEFAULT_LEASE_NS",
    "KEEP_RUNS",
    "RUN_COLS",
    "SCHEMA_VERSION",
    "SLOT_GAP_NS",
    "_REPLACE_RUN",
    "_RUN_COLS",
    "Batch",
    "SQLStore",
    "dead_here",
]

#: Runs (and skipped slots) kept per task (the oldest finished ones beyond this are trimmed).
KEEP_RUNS = 100
DEFAULT_LEASE_NS = 30_000_000_000


class SQLStore:
    """Base of SQLiteStore and PostgresStore; see the module docstring.

    One owner: a store object is used by one thread (the dispatcher's). Every
    method either does what it says in one transaction or raises
    ``StoreError`` with nothing written.

    ``secret``: None, or the secret(s) that sign and check definitions
    (``_trust``): bytes or str, or a list of them (sign with the first,
    accept any). The stores' constructors pass it here (``secret=``).
    """

    #: schema version -> statements that migrate a store from version - 1,
    #: beyond those of this release (a later release, or a test, adds to it).
    MIGRATIONS: ClassVar[dict[int, list[str]]] = {}
    SCHEMA_VERSION: ClassVar[int] = SCHEMA_VERSION
    BLOB: ClassVar[str] = "BLOB"
    RUNS_SUFFIX: ClassVar[str] = ""
    describe: str = "store"

    def __init__(
        self, *, keep_runs: int = KEEP_RUNS, clock: Callable[[], int] | None = None, secret: Secret = None
    ) -> None:
        if type(keep_runs) is not int or keep_runs < 1:
            raise ValueError(f"keep_runs must be an int >= 1, got {keep_runs!r}")
        self.keep_runs = keep_runs
        self._clock = clock
        self._keyring = Keyring(secret)
        self._untrimmed: dict[str, int] = {}  # skipped slots written per task since its last trim (_writes)

    def _use_secret(self, secret: Secret) -> None:
        """Sign and check with ``secret`` from now on (the constructor's
        ``secret=``, for a store made before it could pass one)."""
        self._keyring = Keyring(secret)

    @property
    def signed(self) -> bool:
        """Whether this store object signs and checks definitions (has a secret)."""
        return bool(self._keyring)

    # -- dialect hooks -------------------------------------------------------

    @property
    def _pg(self) -> bool:
        """PostgreSQL (its binary type names the dialect: the set-wise
        statements and the row locks differ)."""
        return self.BLOB == "BYTEA"

    @property
    def _for_update(self) -> str:
        return " FOR UPDATE" if self._pg else ""  # SQLite: BEGIN IMMEDIATE serialises writers already

    def _cursor(self) -> Any:
        raise NotImplementedError

    def _begin(self, cur: Any, write: bool, pipelined: bool = False) -> None:
        """Open the transaction. ``pipelined``: a write whose first statements
        may go with the BEGIN in one round trip (PostgreSQL: see its ``_now``)."""
        raise NotImplementedError

    def _end(self, cur: Any, how: str) -> None:
        """``COMMIT`` or ``ROLLBACK`` the transaction."""
        cur.execute(how)

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

    def _dropped(self) -> bool:
        """Did the last failure break an established connection (a network
        drop, a server restart), so that a new one may do better? SQLite: never."""
        return False

    def _row_fault(self, exc: BaseException) -> bool:
        """Is ``exc`` a refusal of one op's own data (isolate it), rather
        than a fault of the store (fail the batch)?"""
        if isinstance(exc, (ValueError, TypeError, OverflowError)):  # a value the driver cannot bind (UnicodeError too)
            return True
        if self._pg:
            import psycopg

            return isinstance(exc, (psycopg.DataError, psycopg.IntegrityError, psycopg.errors.ProgramLimitExceeded))
        import sqlite3

        if isinstance(exc, (sqlite3.IntegrityError, sqlite3.DataError)):
            return True
        return isinstance(exc, (sqlite3.InterfaceError, sqlite3.ProgrammingError)) and "binding" in str(exc)

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Abilities only one store has: no-ops here, so that callers need no probes.
    def bound_idle_transactions(self, ms: int) -> None:
        """PostgreSQL: have the server end a session stuck inside a
        transaction for ``ms`` (its locks go with it). Elsewhere nothing."""

    def manual_checkpoints(self) -> Callable[[], None] | None:
        """SQLite: take WAL checkpoints out of commits and return the
        checkpoint for the caller to run. Elsewhere None (nothing to do)."""
        return None

    def gate_writes(self) -> None:
        """SQLite: queue this connection's writers on a file lock. Elsewhere nothing."""

    def size_bytes(self) -> int:
        """Bytes the store's tables take (for the benchmarks)."""
        raise NotImplementedError

    # -- transactions --------------------------------------------------------

    @contextlib.contextmanager
    def _tx(self, what: str, write: bool = True, pipelined: bool = False) -> Iterator[Any]:
        """One transaction; any database error -> StoreError, nothing written.
        A read (``write=False``) reads one snapshot and never blocks writers.
        ``pipelined``: see ``_begin`` (a batch's commit)."""
        errors = self._errors()
        cur = None
        try:
            cur = self._cursor()
            self._begin(cur, write, pipelined)
            yield cur
            self._end(cur, "COMMIT")
        except errors as exc:
            if cur is not None:
                with contextlib.suppress(*errors, OSError):
                    self._end(cur, "ROLLBACK")
            self._after_error()
            raise StoreError(f"{self.describe}: {what} failed: {type(exc).__name__}: {exc}".rstrip()) from exc
        except BaseException:
            if cur is not None:
                with contextlib.suppress(*errors, OSError):
                    self._end(cur, "ROLLBACK")
            raise

    def _x(self, cur: Any, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> Any:
        cur.execute(self._q(sql), params)
        return cur

    @contextlib.contextmanager
    def _together(self) -> Iterator[None]:
        """See ``StoreAccess._together``: here (SQLite) nothing to do."""
        yield

    _RENEW = (
        "UPDATE procsched_schedulers SET heartbeat_ns = ?, lease_until_ns = ? + lease_ns, "
        "changes = changes + 1, status = COALESCE(?, status) WHERE id = ? AND token = ?"
    )

    def _renewed(self, cur: Any, holder: Holder, status: str | None) -> int | None:
        """Renew ``holder``'s lease in this transaction (and publish its
        ``status``, if given); the store clock it was renewed at, or None if
        its token is no longer the store's (fenced out)."""
        now = self._now(cur)
        cur = self._x(cur, self._RENEW, (now, now, status, holder.id, holder.token))
        return now if cur.rowcount == 1 else None

    def _renewal_sent(self, cur: Any, holder: Holder, status: str | None) -> Callable[[], int | None]:
        """See ``StoreAccess._renewal_sent``: here (SQLite) renewed at once."""
        now = self._renewed(cur, holder, status)
        return lambda: now

    def _bump(self, cur: Any, holder: Holder | None) -> None:
        """Count one more write for the change mark (see the module docstring)."""
        if holder is not None:
            cur = self._x(cur, "UPDATE procsched_schedulers SET changes = changes + 1 WHERE id = ?", (holder.id,))
            if cur.rowcount == 1:
                return
        self._x(cur, "UPDATE procsched_version SET changes = changes + 1 WHERE id = 1")

    # -- schema --------------------------------------------------------------

    def _dialect(self) -> dict[str, str]:
        serial = (
            "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY" if self._pg else "INTEGER PRIMARY KEY AUTOINCREMENT"
        )  # ids never reused
        return {"blob": self.BLOB, "serial": serial, "runs_suffix": self.RUNS_SUFFIX}

    def _schema(self) -> list[str]:
        return _schema.schema(**self._dialect())

    def _migration(self, cur: Any, target: int) -> list[str]:
        """The statements that migrate the store to ``target`` from the version before."""
        if target == 2:
            self._refuse_live_instances(cur)
            return _schema.migration_2(**self._dialect(), now_ns=self._now(cur))
        if target == 3:
            return _schema.migration_3()
        return self.MIGRATIONS.get(target, [])

    def _after_migration(self, cur: Any, target: int) -> None:
        """What a migration does beyond its statements (schema 2: the display
        names, from the options - one statement on PostgreSQL, whose JSON
        functions are always there; SQLite's may be left out of a build)."""
        if target != 2:
            return
        if self._pg:
            cur.execute(
                "UPDATE procsched_definitions SET name = CASE WHEN json_typeof(options::json -> 'name') = "
                "'string' THEN options::json ->> 'name' END"
            )
            return
        rows = self._x(cur, "SELECT key, options FROM procsched_definitions").fetchall()
        names = [(name, key) for key, options in rows if (name := _writes._name(options)) is not None]
        cur.executemany("UPDATE procsched_definitions SET name = ? WHERE key = ?", names)

    def _refuse_live_instances(self, cur: Any) -> None:
        """Before changing the tables under them: no instance of the older
        procsched may still be running on this store (its writes would fail
        from then on). One whose lease expired, or whose process is gone on
        this host, is not running."""
        now = self._now(cur)
        rows = self._x(
            cur, f"SELECT {SCHED_COLS} FROM procsched_schedulers WHERE lease_until_ns >= ?", (now,)
        ).fetchall()
        live = [h for h in map(_rows.holder, rows) if h not in dead_here([h])]
        if live:
            who = ", ".join(f"{h.host}/{h.pid}" for h in live)
            raise StoreError(
                f"{self.describe} has schema version 1 and instance(s) of an older procsched hold a live lease on "
                f"it ({who}): stop them (or wait for their leases to expire) before this procsched upgrades it"
            )

    def _init_schema(self) -> None:
        from .. import __name__ as pkg

        # A store of this schema already is opened with a read: no writer's
        # lock to wait for (a SQLite file another process keeps locked for
        # a while opens at once; the writes that follow wait their turn).
        # A connection dropped while it reads (made a moment ago: the server
        # is there) is read again on a new one, twice at most: a drop at the
        # instant a program starts must not stop it (the fault campaign, seed
        # 917: Scheduler() raised StoreError). A store that cannot be reached
        # fails at the connect, at once, as before.
        for tries_left in (2, 1, 0):
            try:
                with self._tx("opening the store", write=False) as cur:
                    row = (
                        self._x(cur, "SELECT version FROM procsched_version WHERE id = 1").fetchone()
                        if (self._has_schema(cur))
                        else None
                    )
                break
            except StoreError:
                if not tries_left or not self._dropped():
                    raise
        if row is not None and row[0] == self.SCHEMA_VERSION:
            self._keyring.told(self.describe)
            return
        with self._tx("opening the store") as cur:
            if not self._has_schema(cur):
                for stmt in self._schema():
                    cur.execute(stmt)
                self._x(
                    cur,
                    "INSERT INTO procsched_version (id, version, written_by, fence) VALUES (1, ?, ?, 0)",
                    (self.SCHEMA_VERSION, f"{pkg} {_version()}"),
                )
            else:
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
                    for stmt in self._migration(cur, target):
                        cur.execute(stmt)
                    self._after_migration(cur, target)
                if version < self.SCHEMA_VERSION:
                    self._x(
                        cur,
                        "UPDATE procsched_version SET version = ?, written_by = ? WHERE id = 1",
                        (self.SCHEMA_VERSION, f"{pkg} {_version()}"),
                    )
        self._keyring.told(self.describe)

    def schema_version(self) -> int:
        with self._tx("reading the schema version", write=False) as cur:
            return int(self._x(cur, "SELECT version FROM procsched_version WHERE id = 1").fetchone()[0])

    # -- reading rows ----------------------------------------------------------

    def resign(self) -> int:
        """Rotation (``secret=[new, old, ...]``): sign again with the first
        secret every definition that only a later one verifies, so that the
        older secrets can then be dropped. One transaction; a row changed
        meanwhile is left to its writer (who signed it). Returns how many
        were signed again (0 at once without several secrets)."""
        if not self._keyring.rotating:
            return 0
        done = 0
        with self._tx("signing definitions again") as cur:
            rows = self._x(
                cur, "SELECT key, fn_ref, args, schedule, options, signature FROM procsched_definitions"
            ).fetchall()
            for key, fn_ref, args, schedule, options, signature in rows:
                fresh = self._keyring.stale(signature, key, fn_ref, args, schedule, options)
                if fresh is not None:
                    self._x(
                        cur,
                        "UPDATE procsched_definitions SET signature = ? WHERE key = ? AND signature = ?",
                        (fresh, key, signature),
                    )
                    done += 1
        return done

    # -- reads ---------------------------------------------------------------

    def load(self) -> Loaded:
        """Every stored task (by key), every in-flight run, every registered scheduler,
        every retry due and not claimed yet.

        The caller records as ``crashed`` the in-flight runs whose holder is
        dead (``take_over``); runs held by live schedulers are theirs. Equal
        ``schedule`` / ``options`` dicts are shared among the tasks: read them,
        never mutate them. A task whose ``untrusted`` is set must not be
        loaded (its arguments are withheld).
        """
        with self._tx("loading", write=False) as cur:
            tasks = self._every_task(cur)
            in_flight = [
                _rows.run(r)
                for r in self._x(
                    cur, f"SELECT {RUN_COLS} FROM procsched_runs WHERE outcome IS NULL ORDER BY key, run, attempt"
                ).fetchall()
            ]
            holders = [
                _rows.holder(r) for r in self._x(cur, f"SELECT {SCHED_COLS} FROM procsched_schedulers").fetchall()
            ]
            retries = [
                _rows.run(r)
                for r in self._x(
                    cur,
                    f"SELECT {RUN_COLS} FROM procsched_runs WHERE retry_due_ns IS NOT NULL ORDER BY key, run, attempt",
                ).fetchall()
            ]
        return Loaded(tasks, in_flight, holders, retries)

    def get(self, key: str) -> StoredTask | None:
        with self._tx("reading a task", write=False) as cur:
            row = self._x(cur, f"{TASK_SELECT} WHERE t.key = ?", (key,)).fetchone()
        return None if row is None else stored_task(row, self._keyring)

    def jobs(self) -> list[StoredTask]:
        """Stored tasks, by key, definitions included (``jobs_view`` lists
        them without their arguments)."""
        with self._tx("listing jobs", write=False) as cur:
            return self._every_task(cur)

    def _every_task(self, cur: Any) -> list[StoredTask]:
        """Every stored task, by key (SQLite: the tasks table's own order,
        its rows read in one pass: without an order it walked an index and
        looked each row up, 0.27 -> 0.24 s for 100,000), read a few hundred
        rows at a time (``_streamed``). Without a secret, what tasks of one
        definition share is read once per definition and shared
        (``_rows.shared_parts``); with one, each row is read whole: its
        signature is checked over its own columns."""
        if not self._keyring:
            parsed: dict[str, Any] = {}
            shared = shared_parts(self._x(cur, SHAPE_SELECT).fetchall(), parsed)
            if shared is not None:
                rows = _streamed(self._x(cur, f"{TASK_SELECT_BARE} ORDER BY t.key"))
                return stored_tasks(rows, self._keyring, parsed, shared=shared)
        return stored_tasks(_streamed(self._x(cur, f"{TASK_SELECT} ORDER BY t.key")), self._keyring)

    def changed_since(self, since_ns: int) -> list[StoredTask]:
        """Tasks written at or after ``since_ns`` (store clock): the bounded
        re-read that shows one scheduler what others changed (issue 11).
        Re-read with an overlap of a few seconds: a transaction may commit a
        little after the time it stamped."""
        with self._tx("reading changes", write=False) as cur:
            rows = self._x(cur, f"{TASK_SELECT} WHERE t.updated_ns >= ?", (since_ns,)).fetchall()
        return [stored_task(r, self._keyring) for r in rows]

    def peers_view(self, since_ns: int, *, arguments: bool = True) -> tuple[list[StoredTask], int, list[Holder], int]:
        """One snapshot for a scheduler sharing the store (issue 11): the
        tasks written at or after ``since_ns`` (store clock), how many tasks
        there are (a drop shows deletions: then ``keys()``), every
        registered scheduler, and the store clock. ``arguments=False``: the
        tasks' definitions come without their pickled arguments (``args``
        empty; not checked against a secret: nothing of them is loadable),
        so a re-read every second does not read (and check) the arguments of
        every task that ran meanwhile - ``get(key)`` reads a whole one."""
        select = TASK_SELECT if arguments else TASK_SELECT_LIGHT
        with self._tx("reading changes", write=False) as cur:
            now = self._now(cur)
            rows = self._x(cur, f"{select} WHERE t.updated_ns >= ?", (since_ns,)).fetchall()
            count = int(self._x(cur, "SELECT count(*) FROM procsched_tasks").fetchone()[0])
            holders = [
                _rows.holder(r) for r in self._x(cur, f"SELECT {SCHED_COLS} FROM procsched_schedulers").fetchall()
            ]
        return [stored_task(r, self._keyring, check=arguments) for r in rows], count, holders, now

    def keys(self) -> set[str]:
        """Every stored task's key."""
        with self._tx("listing keys", write=False) as cur:
            return {r[0] for r in self._x(cur, "SELECT key FROM procsched_tasks").fetchall()}

    def schedulers(self) -> list[Holder]:
        """Every registered scheduler (for ``procsched jobs``)."""
        with self._tx("listing schedulers", write=False) as cur:
            return [_rows.holder(r) for r in self._x(cur, f"SELECT {SCHED_COLS} FROM procsched_schedulers").fetchall()]

    def history(
        self, key: str | None = None, n: int = KEEP_RUNS, *, skipped: bool = False
    ) -> list[RunRecord] | list[RunRecord | SkippedSlot]:
        """The last ``n`` run attempts of ``key`` (of every task if None),
        oldest first. ``skipped=True``: runs and skipped slots together, the
        last ``n`` in slot order (a run's slot is its scheduled time; newest
        last)."""
        if type(n) is not int or n < 1:
            raise ValueError(f"n must be an int >= 1, got {n!r}")
        with self._tx("reading history", write=False) as cur:
            runs = _views.runs(self, cur, key, n)
            if not skipped:
                return runs
            slots = _views.skipped(self, cur, key, n)
        return _views.merge(runs, slots, n)

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

    # -- the read model (console, CLI, metrics; see _views) -------------------

    def jobs_view(self, known: Mapping[str, JobView] | None = None) -> list[JobView]:
        """Every stored task as plain data (never its arguments), by key, in
        one read: schedule, state, last outcome, who holds / keeps it and
        whether that instance's lease is alive. ``known``: an earlier
        listing's views by key, to be listed again where their rows were not
        written since (a re-read after a change reads the changed rows only;
        not on a store with a secret: there every row's signature is checked)."""
        return _views.jobs_view(self, known)

    def job_view(self, key: str, n: int = 20) -> JobDetail | None:
        """One task with its last ``n`` runs and skipped slots (None: no such key)."""
        return _views.job_view(self, key, n)

    def instances(self) -> list[InstanceView]:
        """Every registered instance: lease (alive or not), the keys whose
        runs it holds, how many tasks it keeps, what it published."""
        return _views.instances(self)

    def counts(self) -> StoreCounts:
        """Counts for metrics: jobs, instances, attempts by outcome, skipped slots by reason."""
        return _views.counts(self)

    def change_mark(self) -> ChangeMark:
        """A cheap read (the change counters and the instances' rows, no
        table scan) whose value changes whenever anything a view shows
        changed: read it (at most once a second), and re-read the views only
        when it differs from the last one."""
        return _views.change_mark(self)

    # -- writes --------------------------------------------------------------

    def batch(self, holder: Holder | None = None) -> Batch:
        """A unit of work: collect a dispatcher turn's changes, then
        ``commit()`` them in one transaction. Claims and finishes need the
        ``holder`` (the scheduler's registration) for fencing."""
        return Batch(self, holder)

    def claim_run(
        self,
        holder: Holder,
        key: str,
        run: int,
        attempt: int,
        scheduled_ns: int,
        started_ns: int | None = None,
        **kw: Any,
    ) -> bool:
        """Claim (key, run, attempt) for ``holder`` in one transaction; True
        if this caller won it (see ``Batch.started``; ``kw``: its keywords)."""
        b = self.batch(holder)
        b.started(key, run, attempt, scheduled_ns, started_ns, **kw)
        return b.commit().ok

    def finish_run(
        self,
        holder: Holder,
        key: str,
        run: int,
        attempt: int,
        outcome: str,
        finished_ns: int,
        next_due_ns: int | None,
        **kw: Any,
    ) -> bool:
        """Record a run's end and the reschedule, fenced; False (nothing
        written) if ``holder`` no longer holds it (see ``Batch.finished``)."""
        b = self.batch(holder)
        b.finished(key, run, attempt, outcome, finished_ns, next_due_ns, **kw)
        return b.commit().ok

    def _commit(self, batch: Batch) -> BatchResult:
        return _writes.commit(self, batch)

    # -- schedulers, leases, take-over (issue 11) -----------------------------

    def register(self, *, lease_ns: int = DEFAULT_LEASE_NS, host: str | None = None, pid: int | None = None) -> Holder:
        """Register a scheduler: a new id, a fresh fencing token (never
        reused), a lease of ``lease_ns`` from the store clock."""
        if type(lease_ns) is not int or lease_ns <= 0:
            raise ValueError(f"lease_ns must be a positive int, got {lease_ns!r}")
        host = host or socket.gethostname()
        pid = os.getpid() if pid is None else pid
        ident = f"{host}:{pid}:{secrets.token_hex(4)}"
        with self._tx("registering a scheduler") as cur:
            now = self._now(cur)
            token = self._x(
                cur, "UPDATE procsched_version SET fence = fence + 1 WHERE id = 1 RETURNING fence"
            ).fetchone()[0]
            self._x(
                cur,
                f"INSERT INTO procsched_schedulers ({SCHED_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (ident, token, host, pid, lease_ns, now + lease_ns, now),
            )
        return Holder(ident, int(token), host, pid, lease_ns, now + lease_ns, now)

    def renew_lease(self, holder: Holder, *, status: InstanceStatus | None = None) -> bool:
        """Extend ``holder``'s lease by its length from now (store clock),
        and publish ``status`` (its workers, its standby keys) if given.
        False: it was taken over - it holds nothing any more and must stop
        running stored tasks (and may register again). A committed batch
        with claims or finishes renews the lease too."""
        with self._tx("renewing a lease") as cur:
            now = self._now(cur)
            if status is None:
                cur = self._x(
                    cur,
                    "UPDATE procsched_schedulers SET heartbeat_ns = ?, lease_until_ns = ? + lease_ns "
                    "WHERE id = ? AND token = ?",
                    (now, now, holder.id, holder.token),
                )
            else:
                cur = self._x(
                    cur,
                    "UPDATE procsched_schedulers SET heartbeat_ns = ?, lease_until_ns = ? + lease_ns, "
                    "status = ? WHERE id = ? AND token = ?",
                    (now, now, status.to_json(), holder.id, holder.token),
                )
            return bool(cur.rowcount == 1)

    def unregister(self, holder: Holder, *, ends_written: bool = False) -> bool:
        """A clean shutdown: drop the registration (its in-flight runs, if
        any, are recorded ``cancelled``: it stopped them; the requests it
        took and did not answer are given back). False if it was taken over
        already. ``ends_written``: the caller wrote the end of every run it
        started, so the runs still in flight never started; each leaves its
        slot (or its retry) to the next claim, as a run given ahead and
        cancelled by shutdown does. Otherwise a run whose end was not written
        may have run: its slot stays claimed (never twice)."""
        with self._tx("unregistering a scheduler") as cur:
            now = self._now(cur)
            cur = self._x(cur, "DELETE FROM procsched_schedulers WHERE id = ? AND token = ?", (holder.id, holder.token))
            if cur.rowcount != 1:
                return False
            runs = _writes.end_runs_of(self, cur, holder.id, holder.token, now, "cancelled", None, None)
            if ends_written:
                _writes.leave_slots(self, cur, runs)
            self._bump(cur, None)
            return True

    def expired_holders(self, now_ns: int | None = None) -> list[Holder]:
        """Schedulers whose lease ended before ``now_ns`` (default: the store clock)."""
        with self._tx("reading leases", write=False) as cur:
            now = self._now(cur) if now_ns is None else now_ns
            rows = self._x(
                cur, f"SELECT {SCHED_COLS} FROM procsched_schedulers WHERE lease_until_ns < ?", (now,)
            ).fetchall()
        return [_rows.holder(r) for r in rows]

    def take_over(
        self,
        dead: Holder,
        by: Holder | None = None,
        *,
        force: bool = False,
        reschedule: Callable[[StoredTask, RunRecord, int | None], dict[str, Any] | None] | None = None,
    ) -> list[RunRecord] | None:
        """Record the in-flight runs of ``dead`` as ``crashed`` and free its
        tasks, once: of all callers, exactly one gets the list (possibly
        empty); the others get None. Only if ``dead``'s lease has expired by
        the store clock - or ``force``: the caller proved it dead (same host,
        its pid gone; see ``dead_here``). ``by``, if given, must hold a live
        registration (fenced like a batch), so a taken-over scheduler cannot
        take over others. The runs stop counting in their tasks'
        ``max_concurrent`` and their groups' limits; the requests ``dead``
        took and did not answer are given back. The caller then reschedules
        those tasks (and retries the crashed runs its Retry covers) with a
        batch - or, with ``reschedule(task, crashed_run, slot)`` -> the task's
        new state fields (see ``Batch.update``; None: the task ended, it is
        deleted), in this same transaction, so no other scheduler sees the
        task between the crash and its reschedule (several schedulers, issue
        11). ``slot``: the crashed run's regular slot (its first attempt's
        scheduled time, UTC ns) if the crashed attempt was a retry and the
        store has it, else None - the task's grid goes on from it, not from
        the retry's time (the fault campaign, seed 2503: every later slot of
        a fixed-rate task moved by the retry's delay, the grid's lost).
        """
        with self._tx("taking over a scheduler") as cur:
            if by is not None:
                renewed = self._renewed(cur, by, None)
                if renewed is None:
                    return None
                now = renewed
            else:
                now = self._now(cur)
                self._bump(cur, None)
            cur = self._x(
                cur,
                "DELETE FROM procsched_schedulers WHERE id = ? AND token = ? AND (lease_until_ns < ? OR ?)",
                (dead.id, dead.token, now, bool(force)),
            )
            if cur.rowcount != 1:
                return None
            why = f"its scheduler {dead.id} (host {dead.host}, pid {dead.pid}) died"
            runs = _writes.end_runs_of(self, cur, dead.id, dead.token, now, "crashed", "SchedulerDied", why)
            if reschedule is not None:
                c = _writes.Commit(now, by, BatchResult(), [])
                for record in runs:
                    row = self._x(cur, f"{TASK_SELECT} WHERE t.key = ?", (record.key,)).fetchone()
                    if row is None:
                        continue
                    slot = None
                    if record.attempt > 1:
                        first = self._x(
                            cur,
                            "SELECT scheduled_ns FROM procsched_runs WHERE key = ? AND run = ? AND attempt = 1",
                            (record.key, record.run),
                        ).fetchone()
                        slot = None if first is None else first[0]
                    fields = reschedule(stored_task(row, self._keyring), record, slot)
                    if fields is None:
                        _writes.delete(self, cur, record.key, False)
                    elif fields:
                        _writes.op_update(self, cur, c, Update("update", record.key, fields))
            return runs

    # -- control from outside (DESIGN part three; see _control) ------------------

    def pause(self, key: str) -> bool:
        """Pause the stored task ``key``, from any process: no scheduled run
        of it is claimed from now on (the store refuses the claims), and the
        instance holding it pauses it at its next re-read. True if it was
        running; False if it was paused already. Raises KeyError: no such key."""
        return _control.pause(self, key)

    def resume(self, key: str) -> bool:
        """Resume the stored task ``key`` (the holding instance continues it
        at its next slot from now, at its next re-read). True if it was
        paused. Raises KeyError: no such key."""
        return _control.resume(self, key)

    def remove(self, key: str) -> bool:
        """Remove the stored task ``key`` (its definition and state; its
        history stays): every instance drops it at its next re-read (a run
        in flight finishes and is recorded). True if it was there."""
        return _control.remove(self, key)

    def cancel(self, key: str) -> bool:
        """Cancel the stored task ``key`` from outside: the same write as
        ``remove`` (the instances cancel their live task at the re-read, as
        after a ``cancel()`` made on one of them). True if it was there."""
        return _control.remove(self, key)

    def set_limits(self, limits: Mapping[str, int]) -> None:
        """Set shared limits (``{"db": 2}``: at most 2 runs of tasks of group
        "db" in flight at once, across every instance). Groups not named keep
        theirs (instances sharing a store should agree; the last writer wins).
        Raises ValueError: a bad group name or limit (nothing is set)."""
        _control.set_limits(self, limits)

    def limits(self) -> dict[str, int]:
        """The shared limits set on this store."""
        return _control.limits(self)

    def ask(
        self,
        key: str,
        kind: str,
        *,
        start_ns: int | None = None,
        end_ns: int | None = None,
        dry_run: bool = False,
        asked_by: str | None = None,
    ) -> int:
        """Ask the instance that runs ``key`` to run it now (``kind``
        ``"run_now"``) or to backfill its slots in ``[start_ns, end_ns)``
        (``"backfill"``; ``dry_run``: only list them). Returns the request's
        id; read its answer with ``request(id)``. ``asked_by``: who asks (for
        the record). Raises KeyError: no such key; ValueError, TypeError:
        bad arguments (nothing asked)."""
        return _control.ask(self, key, kind, start_ns=start_ns, end_ns=end_ns, dry_run=dry_run, asked_by=asked_by)

    def request(self, request_id: int) -> ControlRequest | None:
        """A control request as it stands (None: unknown or forgotten)."""
        return _control.request(self, request_id)

    def take_requests(self, holder: Holder, keys: Collection[str]) -> list[ControlRequest]:
        """Take the open requests for tasks this instance runs (``keys``: the
        keys it runs itself, not those on standby): each is taken once among
        instances, atomically, fenced by ``holder``'s registration (a holder
        taken over takes nothing). The taker carries each out and answers
        it (``Batch.answer``). Cheap when there is none (one read of an
        index of open requests)."""
        return _control.take_requests(self, holder, keys)

    def answer(self, holder: Holder, request_id: int, *, result: Any = None, error: str | None = None) -> bool:
        """Answer a request ``holder`` took, in a transaction of its own
        (``Batch.answer`` puts it with the claims it caused). False: not
        taken by ``holder`` (given back after a take-over), or answered."""
        return _control.answer(self, holder, request_id, result=result, error=error)


def _streamed(cur: Any, size: int = 500) -> Iterator[Any]:
    """A cursor's rows, fetched ``size`` at a time: every task's row read at
    once (a restart, ``jobs``) is made into its record while the rows read
    with it are still in the CPU's cache, not after 100,000 rows were made
    (``fetchall``): 100,000 stored tasks, SQLite, 0.46 -> 0.43 s."""
    while rows := cur.fetchmany(size):
        yield from rows


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
