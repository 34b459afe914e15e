"""The store interface its callers program against (both stores implement it).

Everything the runtime, the CLI, the console and the benchmarks use of a
store, and nothing of SQL: a caller needs no ``hasattr``/``getattr`` probe
(an ability only one store has - PostgreSQL's bound on idle transactions,
SQLite's manual checkpoints and write gate - is a no-op on the other). A new
kind of store (another database, an in-memory one for the sans-IO tests)
implements these members with the semantics their docstrings in ``_sql.py``
(``SQLStore``) and ``_batch.py`` (``Batch``) give. Every record returned is
a named record of ``_model.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol, Self

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
    TaskDefinition,
    TaskState,
)


class StoreBatch(Protocol):
    """One dispatcher turn's changes; ``commit()`` writes them in one transaction."""

    #: The registration the batch's claims and ends are fenced by (settable:
    #: after a fenced-out commit the caller registers again and says so here).
    holder: Holder | None
    #: The ops, in order (named tuples: ``op[0]`` the kind, ``op[1]`` the key).
    #: Prefer ``carry`` and ``drop_claim`` to editing it.
    ops: list[Any]
    #: Holds claims or ends: the commit renews (and checks) the holder's lease.
    fenced: bool
    #: What the commit publishes of the holder (``publish``), or None.
    status: InstanceStatus | None

    def upsert(
        self, definition: TaskDefinition, state: TaskState | None = None, *, keep_state: bool = False
    ) -> None: ...
    def update(self, key: str, **fields: Any) -> None: ...
    def delete(self, key: str, *, history: bool = False) -> None: ...
    def unloadable(self, key: str, why: str) -> None: ...
    def moved(self, key: str, run: int, attempt: int, worker_pid: int | None) -> None: ...
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
    ) -> None: ...
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
    ) -> None: ...
    def skipped(
        self,
        key: str,
        slot_ns: int,
        reason: str,
        *,
        recorded_ns: int | None = None,
        period_ns: int = 0,
        slots: int = 1,
    ) -> None: ...
    def answer(self, request_id: int, *, result: Any = None, error: str | None = None) -> None: ...
    def publish(self, status: InstanceStatus) -> None: ...
    def carry(self, earlier: Any, *, runs: bool = True) -> None: ...
    def drop_claim(self, key: str, run: int, attempt: int) -> bool: ...
    def commit(self) -> BatchResult: ...
    def __len__(self) -> int: ...


class Store(Protocol):
    """A durable store of keyed tasks, their runs, and the schedulers sharing it."""

    keep_runs: int
    describe: str  # the store, for messages ("SQLite store /path", a URL without its password)

    @property
    def signed(self) -> bool: ...  # it has a secret: definitions are signed and checked

    def resign(self) -> int: ...  # rotation: sign again with the first secret what only a later one verifies

    # start-up and the runtime's reads
    def load(self) -> Loaded: ...
    def get(self, key: str) -> StoredTask | None: ...
    def jobs(self) -> list[StoredTask]: ...
    def keys(self) -> set[str]: ...
    def schedulers(self) -> list[Holder]: ...
    def history(
        self, key: str | None = None, n: int = ..., *, skipped: bool = False
    ) -> list[RunRecord] | list[RunRecord | SkippedSlot]: ...
    def changed_since(self, since_ns: int) -> list[StoredTask]: ...
    def peers_view(
        self, since_ns: int, *, arguments: bool = True
    ) -> tuple[list[StoredTask], int, list[Holder], int]: ...
    def last_run(self, key: str) -> int: ...
    def now_ns(self) -> int: ...
    def schema_version(self) -> int: ...
    # the read model (console, CLI, metrics)
    def jobs_view(self, known: Mapping[str, JobView] | None = None) -> list[JobView]: ...
    def job_view(self, key: str, n: int = 20) -> JobDetail | None: ...
    def instances(self) -> list[InstanceView]: ...
    def counts(self) -> StoreCounts: ...
    def change_mark(self) -> ChangeMark: ...
    # writes: one batch per dispatcher turn
    def batch(self, holder: Holder | None = None) -> StoreBatch: ...
    def claim_run(
        self,
        holder: Holder,
        key: str,
        run: int,
        attempt: int,
        scheduled_ns: int,
        started_ns: int | None = None,
        **kw: Any,
    ) -> bool: ...
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
    ) -> bool: ...
    # schedulers, leases, take-over
    def register(self, *, lease_ns: int = ..., host: str | None = None, pid: int | None = None) -> Holder: ...
    def renew_lease(self, holder: Holder, *, status: InstanceStatus | None = None) -> bool: ...
    def unregister(self, holder: Holder, *, ends_written: bool = False) -> bool: ...
    def expired_holders(self, now_ns: int | None = None) -> list[Holder]: ...
    def take_over(
        self,
        dead: Holder,
        by: Holder | None = None,
        *,
        force: bool = False,
        reschedule: Callable[[StoredTask, RunRecord, int | None], dict[str, Any] | None] | None = None,
    ) -> list[RunRecord] | None: ...
    # control from outside
    def pause(self, key: str) -> bool: ...
    def resume(self, key: str) -> bool: ...
    def remove(self, key: str) -> bool: ...
    def cancel(self, key: str) -> bool: ...
    def set_limits(self, limits: Mapping[str, int]) -> None: ...
    def limits(self) -> dict[str, int]: ...
    def ask(
        self,
        key: str,
        kind: str,
        *,
        start_ns: int | None = None,
        end_ns: int | None = None,
        dry_run: bool = False,
        asked_by: str | None = None,
    ) -> int: ...
    def request(self, request_id: int) -> ControlRequest | None: ...
    def take_requests(self, holder: Holder, keys: Collection[str]) -> list[ControlRequest]: ...
    def answer(self, holder: Holder, request_id: int, *, result: Any = None, error: str | None = None) -> bool: ...
    # abilities of one store (no-ops on the other)
    def bound_idle_transactions(self, ms: int) -> None: ...
    def manual_checkpoints(self) -> Callable[[], None] | None: ...
    def gate_writes(self) -> None: ...
    def size_bytes(self) -> int: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> None: ...
