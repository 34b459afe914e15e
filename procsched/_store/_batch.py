"""A dispatcher turn's changes to a store, written in one transaction (``Batch``).

Building a batch does no I/O: each method appends one op (a named tuple whose
first field is its kind, the second its key - the layout the runtime of
schema 1 reads with ``op[0]`` / ``op[1]``), and ``commit()`` hands them to
the store, which writes them in one transaction, each task's in the order
given (see ``_sql``; claims and ends of several turns gathered: ``_writes._groups``).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

from ._model import (
    CAUSES,
    OUTCOMES,
    RUN_REASONS,
    SKIP_REASONS,
    BatchResult,
    Holder,
    InstanceStatus,
    TaskDefinition,
    TaskState,
)

#: The longest error message, traceback and output tail a run row keeps (characters).
MESSAGE_CHARS = 2000
TRACEBACK_CHARS = 20_000
OUTPUT_CHARS = 8192
#: The state fields ``Batch.update`` may set.
UPDATE_FIELDS = ("next_due_ns", "paused", "run_count", "next_attempt", "unloadable")


class Upsert(NamedTuple):
    kind: str
    definition: TaskDefinition
    state: TaskState | None
    keep_state: bool = False
    """A stored task keeps its state; ``state`` is a new one's."""


class Update(NamedTuple):
    kind: str
    key: str
    fields: dict[str, Any]


class Delete(NamedTuple):
    kind: str
    key: str
    history: bool


class Unloadable(NamedTuple):
    kind: str
    key: str
    why: str


class Started(NamedTuple):
    kind: str
    key: str
    run: int
    attempt: int
    scheduled_ns: int
    started_ns: int | None
    cause: str = "schedule"
    worker_pid: int | None = None


class Finished(NamedTuple):
    kind: str
    key: str
    run: int
    attempt: int
    outcome: str
    finished_ns: int
    next_due_ns: int | None
    retry: bool
    error_type: str | None
    error_message: str | None
    error_traceback: str | None = None
    reason: str | None = None
    worker_pid: int | None = None
    output: str | None = None
    # The misfire slots this end dropped, written on its run's row (the store
    # folds a "misfire" Skipped op that follows its end into it: _writes).
    skip_first_ns: int | None = None
    skip_period_ns: int = 0
    skip_slots: int = 0


class Skipped(NamedTuple):
    kind: str
    key: str
    slot_ns: int
    reason: str
    recorded_ns: int | None
    period_ns: int
    slots: int


class Answer(NamedTuple):
    kind: str
    key: None  # (no task row: requests are not grouped by key)
    request_id: int
    result: Any
    error: str | None


class Moved(NamedTuple):
    kind: str
    key: str
    run: int
    attempt: int
    worker_pid: int | None


Op = Upsert | Update | Delete | Unloadable | Started | Finished | Skipped | Answer | Moved


def op_key(op: Any) -> str | None:
    """The task key an op writes (None: no task row)."""
    key: str | None = op.definition.key if op[0] == "upsert" else op[1]
    return key


class _Committer(Protocol):
    """What a batch needs of its store: ``SQLStore._commit`` writes it."""

    def _commit(self, batch: Batch) -> BatchResult: ...


class Batch:
    """The changes of one dispatcher turn, written by ``commit()`` in one
    transaction (see ``_sql``). Each task's ops apply in the order given, and
    every op but a claim or an end in its place among all (``_writes._groups``). Building a
    batch does no I/O; a batch commits once."""

    __slots__ = ("done", "fenced", "holder", "ops", "status", "store")

    def __init__(self, store: _Committer, holder: Holder | None) -> None:
        self.store = store
        self.holder = holder
        self.ops: list[Any] = []
        self.fenced = False  # holds claims or ends: the commit renews (and checks) the holder's lease first
        self.status: InstanceStatus | None = None  # published with the commit (``publish``)
        self.done = False

    def __len__(self) -> int:
        return len(self.ops)

    def __repr__(self) -> str:
        return f"<Batch of {len(self.ops)} op(s){' committed' if self.done else ''}>"

    def _need_holder(self, what: str, fenced: bool = True) -> None:
        if self.holder is None:
            raise ValueError(f"{what} needs a batch made with the scheduler's holder: store.batch(holder)")
        self.fenced = self.fenced or fenced

    def upsert(self, definition: TaskDefinition, state: TaskState | None = None, *, keep_state: bool = False) -> None:
        """Store ``definition`` (insert or replace; clears ``unloadable``;
        signed if the store has a secret). ``state``: None keeps a stored
        task's state (a new one starts at ``TaskState()``); with
        ``keep_state`` a stored task keeps its state, a new one starts at
        ``state``. Never touches
        the runs in flight. The definition's row is written only if it
        changed (an unchanged one, declared again at a restart, costs no
        write of its arguments)."""
        if not isinstance(definition, TaskDefinition):
            raise TypeError(f"definition must be a TaskDefinition, got {type(definition).__name__}")
        self.ops.append(Upsert("upsert", definition, state, bool(keep_state)))

    def update(self, key: str, **fields: Any) -> None:
        """Set state fields of ``key``: ``next_due_ns``, ``paused``,
        ``run_count``, ``next_attempt`` (pause/resume, a reschedule), and
        ``unloadable`` (None: a restart loaded it again)."""
        bad = set(fields) - set(UPDATE_FIELDS)
        if bad or not fields:
            raise ValueError(f"update takes {', '.join(UPDATE_FIELDS)}; got {sorted(fields)}")
        self.ops.append(Update("update", key, fields))

    def delete(self, key: str, *, history: bool = False) -> None:
        """Remove ``key``'s definition and state (an ended one-shot, a
        cancel); its runs and skipped slots stay in history unless
        ``history=True``."""
        self.ops.append(Delete("delete", key, history))

    def unloadable(self, key: str, why: str) -> None:
        """Mark ``key`` unloadable (its function failed to import, its
        signature did not verify): kept, listed, never run, never deleted by
        this. A later upsert clears it."""
        self.ops.append(Unloadable("unloadable", key, why))

    def started(
        self,
        key: str,
        run: int,
        attempt: int,
        scheduled_ns: int,
        started_ns: int | None = None,
        *,
        cause: str = "schedule",
        worker_pid: int | None = None,
    ) -> None:
        """Claim (key, run, attempt) and record it in flight, with the
        task's new state. Won, or in ``BatchResult.lost`` (another instance
        has it, or it is not a claim the task's state allows: see ``_sql``,
        "Claims"), or in ``BatchResult.limited`` (its group's shared limit is
        reached: it waits). ``cause``: ``"schedule"`` (its slot came; held by
        a pause), ``"manual"`` or ``"backfill"`` (never move the task's next
        slot; not held by a pause). ``worker_pid``: the worker it goes to, if
        known."""
        if cause not in CAUSES:
            raise ValueError(f"cause must be one of {CAUSES}, got {cause!r}")
        self._need_holder("started")
        self.ops.append(Started("started", key, run, attempt, scheduled_ns, started_ns, cause, worker_pid))

    def moved(self, key: str, run: int, attempt: int, worker_pid: int | None) -> None:
        """(key, run, attempt), in flight here, was taken back from the
        worker it was given to before it started and given to another: its
        row names that one (``worker_pid``). Nothing if it has ended, or is
        not this holder's."""
        self._need_holder("moved", fenced=False)
        self.ops.append(Moved("moved", key, run, attempt, worker_pid))

    def finished(
        self,
        key: str,
        run: int,
        attempt: int,
        outcome: str,
        finished_ns: int,
        next_due_ns: int | None,
        *,
        retry: bool = False,
        error_type: str | None = None,
        error_message: str | None = None,
        error_traceback: str | None = None,
        reason: str | None = None,
        worker_pid: int | None = None,
        output: str | None = None,
    ) -> None:
        """Record the end of an in-flight run and the reschedule together:
        ``next_due_ns`` (None: no further run), ``retry`` (attempt + 1 of
        this run is due at ``next_due_ns``; else the next claim is a new
        run). Fenced: refused (``BatchResult.stale``) unless this holder
        still holds the run. ``error_*``: the error's type, message and
        traceback text; ``reason``: None or ``"replaced"``; ``output``: its
        captured output (the tail is kept)."""
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {outcome!r}")
        if reason is not None and reason not in RUN_REASONS:
            raise ValueError(f"reason must be None or one of {RUN_REASONS}, got {reason!r}")
        self._need_holder("finished")
        self.ops.append(
            Finished(
                "finished",
                key,
                run,
                attempt,
                outcome,
                finished_ns,
                next_due_ns,
                bool(retry),
                error_type,
                None if error_message is None else error_message[:MESSAGE_CHARS],
                None if error_traceback is None else error_traceback[-TRACEBACK_CHARS:],
                reason,
                worker_pid,
                None if output is None else output[-OUTPUT_CHARS:],
            )
        )

    def skipped(
        self,
        key: str,
        slot_ns: int,
        reason: str,
        *,
        recorded_ns: int | None = None,
        period_ns: int = 0,
        slots: int = 1,
    ) -> None:
        """Record that ``key``'s slot ``slot_ns`` was not run, and why
        (``SKIP_REASONS``) - or ``slots`` slots ``period_ns`` apart from it,
        as one row (a fixed-rate task's grid points dropped at once);
        ``recorded_ns`` defaults to the commit's store clock. Kept
        ``keep_runs`` rows per task, like runs; a row whose first slot is
        recorded already is left out (its first reason stands)."""
        if reason not in SKIP_REASONS:
            raise ValueError(f"reason must be one of {SKIP_REASONS}, got {reason!r}")
        if type(slot_ns) is not int:
            raise TypeError(f"slot_ns must be an int (UTC ns), got {slot_ns!r}")
        if type(slots) is not int or slots < 1:
            raise ValueError(f"slots must be an int >= 1, got {slots!r}")
        if type(period_ns) is not int or period_ns < 0 or (slots > 1 and period_ns == 0):
            raise ValueError(f"period_ns must be an int >= 0 (> 0 when slots > 1), got {period_ns!r}")
        self.ops.append(Skipped("skipped", key, slot_ns, reason, recorded_ns, period_ns, slots))

    def answer(self, request_id: int, *, result: Any = None, error: str | None = None) -> None:
        """Answer a control request this holder took (``Store.take_requests``):
        ``result`` (any JSON value) or ``error`` (why it was refused). Put it
        in the batch that carries what it caused (a run now's claim), so a
        crash leaves both or neither: a request taken by an instance that died
        before answering is given back at its take-over."""
        self._need_holder("answer", fenced=False)
        self.ops.append(Answer("answer", None, int(request_id), result, error))

    def publish(self, status: InstanceStatus) -> None:
        """Publish ``status`` (the holder's workers, its standby keys) with
        this batch, as ``Store.renew_lease(holder, status=...)`` does: in
        the statement that renews the lease of a batch with claims or ends,
        else in one of its own in the same transaction. A batch with nothing
        else to write writes nothing (publish with ``renew_lease`` then)."""
        if not isinstance(status, InstanceStatus):
            raise TypeError(f"status must be an InstanceStatus, got {type(status).__name__}")
        self._need_holder("publish", fenced=False)
        self.status = status

    def carry(self, earlier: Batch, *, runs: bool = True) -> None:
        """Put ``earlier``'s ops in front of this batch's (a commit that
        failed is tried again with the next one); ``runs=False`` leaves its
        claims and ends out (they were another holder's: after a fenced-out
        commit)."""
        ops = earlier.ops if runs else [op for op in earlier.ops if op[0] not in ("started", "finished")]
        self.ops[:0] = ops
        self.fenced = self.fenced or (runs and earlier.fenced)
        if self.status is None:
            self.status = earlier.status

    def drop_claim(self, key: str, run: int, attempt: int) -> bool:
        """Take the claim of (key, run, attempt) out of this batch (a run
        taken back before its start was written). False if it is not here."""
        for i in range(len(self.ops) - 1, -1, -1):
            op = self.ops[i]
            if op[0] == "started" and op[1] == key and op[2] == run and op[3] == attempt:
                del self.ops[i]
                return True
        return False

    def commit(self) -> BatchResult:
        """Write every op in one transaction. Raises StoreError (nothing
        written) on a fault of the store (unreachable, locked, full); an op
        the database refuses for its own data is left out and reported
        (``BatchResult.failed``), the others are written."""
        if self.done:
            raise RuntimeError("this batch was committed already")
        self.done = True
        return self.store._commit(self)
