"""Durable schedules: where keyed tasks and their runs are kept.

The dispatcher owns a store (the core stays pure: it says what changed, the
dispatcher persists it). Two stores behind one interface (``Store``, a
Protocol; both derive from ``SQLStore``, the SQL they share):
``SQLiteStore`` (embedded, the default) and ``PostgresStore`` (shared by
several schedulers). ``_sql.py`` holds the theory of operation.

How the dispatcher drives it (the integration seam; times are UTC ns):

    start-up   store = open_store(target); me = store.register(lease_ns=...)
               loaded = store.load()
               for dead in dead_here(loaded.schedulers) (force) + store.expired_holders():
                   crashed = store.take_over(dead, me, force=...)   # runs -> "crashed", once
                   -> per crashed run: retry (batch.update next_attempt/next_due_ns) or reschedule
               stored tasks -> the core (resolve_ref; failing import -> batch.unloadable)
    each turn  b = store.batch(me)
               b.finished(...) for every keyed run that ended (with its reschedule),
               b.delete(key) for an ended one-shot, b.upsert/update/delete for adds,
               cancels, pauses; b.started(...) for every keyed run about to be sent
               result = b.commit()          # ONE transaction, BEFORE the sends
               send the runs not in result.lost; result.fenced_out -> stop keyed work
    idle       store.renew_lease(me) every lease/3 without a commit; expired_holders()
    shutdown   store.unregister(me); store.close()
"""

from ._model import (
    BatchResult as BatchResult,
    ChangeMark as ChangeMark,
    ControlRequest as ControlRequest,
    FailedOp as FailedOp,
    Holder as Holder,
    HolderRef as HolderRef,
    InstanceStatus as InstanceStatus,
    InstanceView as InstanceView,
    JobDetail as JobDetail,
    JobView as JobView,
    Loaded as Loaded,
    RunRecord as RunRecord,
    SkippedSlot as SkippedSlot,
    StoreCounts as StoreCounts,
    StoredTask as StoredTask,
    TaskDefinition as TaskDefinition,
    TaskState as TaskState,
    WorkerStatus as WorkerStatus,
    definition_hash as definition_hash,
    function_ref as function_ref,
    resolve_ref as resolve_ref,
)
from ._model import CAUSES as CAUSES, OUTCOMES as OUTCOMES, RUN_REASONS as RUN_REASONS, SKIP_REASONS as SKIP_REASONS
from ._interface import Store as Store, StoreBatch as StoreBatch
from ._open import open_store as open_store
from ._sql import KEEP_RUNS as KEEP_RUNS, SCHEMA_VERSION as SCHEMA_VERSION, Batch as Batch, SQLStore as SQLStore
from ._sql import dead_here as dead_here
from ._sqlite import SQLiteStore as SQLiteStore
from ._trust import Secret as Secret

__all__ = [
    "CAUSES", "KEEP_RUNS", "OUTCOMES", "RUN_REASONS", "SCHEMA_VERSION", "SKIP_REASONS", "Batch", "BatchResult",
    "ChangeMark", "ControlRequest", "FailedOp", "Holder", "HolderRef", "InstanceStatus", "InstanceView", "JobDetail",
    "JobView", "Loaded", "RunRecord", "SQLStore", "SQLiteStore", "Secret", "SkippedSlot", "Store", "StoreBatch",
    "StoreCounts", "StoredTask", "TaskDefinition", "TaskState", "WorkerStatus", "dead_here", "definition_hash",
    "function_ref", "open_store", "resolve_ref",
]


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    if name == "PostgresStore":  # lazily: psycopg is imported only when used
        from ._postgres import PostgresStore

        return PostgresStore
    raise AttributeError(name)
