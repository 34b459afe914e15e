"""Durable schedules: where keyed tasks and their runs are kept.

The dispatcher owns a store (the core stays pure: it says what changed, the
dispatcher persists it). Two stores behind one interface (``Store``, a
Protocol listing every member; both derive from ``SQLStore``, the SQL they
share): ``SQLiteStore`` (embedded, the default) and ``PostgresStore``
(shared by several schedulers). ``_sql.py`` holds the theory of operation,
``_schema.py`` the tables (schema 2; a schema-1 store is migrated at its
first open), ``_writes.py`` how a batch is written, ``_control.py`` control
from outside, ``_views.py`` the read model, ``_rows.py`` a task's row
read by name (its columns listed once), ``_trust.py`` signing;
``_open.py`` opens a store from a path or URL (``_url.py``: the URL's own
options, and its passwords redacted). The statement modules take the store
as ``_access.StoreAccess`` (what they call of it): nothing imports ``_sql``
but the stores and ``_open``, so no import runs in a circle.

How the runtime drives it (the integration seam; times are UTC ns; every
record returned is a named record of ``_model``):

    start-up   store = open_store(target, secret=...)      # secret: None | bytes | str | [new, old, ...]
               store.resign()                              # secret=[new, old]: sign again with new
               me = store.register(lease_ns=...)
               store.set_limits(limits)                    # Scheduler(limits=...): shared by every instance
               loaded = store.load()                       # tasks, runs in flight, schedulers, retries
               for dead in dead_here(loaded.schedulers) (force) + store.expired_holders():
                   crashed = store.take_over(dead, me, force=...)   # runs -> "crashed", once
                   -> per crashed run: retry (batch.update next_attempt/next_due_ns) or reschedule
               task.untrusted -> never load it: batch.unloadable(key, task.untrusted) (listed, not run)
               stored tasks -> the core (resolve_ref; failing import -> batch.unloadable)
               loaded.retries -> retries due of runs that are not their task's latest (max_concurrent > 1)
    each turn  b = store.batch(me)
               b.finished(key, run, attempt, outcome, finished_ns, next_due_ns, retry=,
                          error_type=, error_message=, error_traceback=, reason=None | "replaced",
                          worker_pid=, output=)       # the run's end and the reschedule, one op
               b.skipped(key, slot_ns, reason)         # "overlap" | "misfire" | "late" | "paused" | "down"
               b.delete(key) for an ended one-shot, b.upsert/update/delete for adds, cancels, pauses
               b.started(key, run, attempt, slot_ns, started_ns, cause="schedule" | "manual" | "backfill",
                         worker_pid=)                  # every keyed run about to be sent
               b.answer(request_id, result=...)       # with the claims the request caused
               result = b.commit()          # ONE transaction, BEFORE the sends
               send the runs not in result.lost / result.limited;
               result.lost: another instance's (skip to the next slot); result.limited: its group is
               full (the run waits: claim it again when a run of the group ends); result.failed: ops
               the database refused (a bad key: log them; the rest was written); result.fenced_out:
               stop keyed work, register again
               a failed commit (StoreError): b2.carry(b) and commit again later (a batch sent again is
               harmless: the store knows this holder's own claims and ends)
    re-read    (every lease/3, at most 1 s) store.peers_view(since) as before: pauses, resumes and
               removals made from outside arrive there (state rows); then
               store.take_requests(me, keys_run_here) -> run now / backfill requests, once each
    lease      store.renew_lease(me, status=InstanceStatus(workers, standby, ...)) every lease/3, or
               b.publish(InstanceStatus(...)) in a batch that renews it (claims or ends)
    shutdown   store.unregister(me); store.close()

From outside (the CLI, the console, any program):

    control    store.pause(key) / resume(key) / remove(key) (= cancel(key)): conditional writes
               the instances follow at their re-read; KeyError: no such key
               rid = store.ask(key, "run_now" | "backfill", start_ns=, end_ns=, dry_run=)
               store.request(rid) -> ControlRequest (taken_by, done, result, error)
    read       store.change_mark() (cheap: read it at most once a second; re-read the views when it
               changes); store.jobs_view(), job_view(key, n), instances(), counts(),
               history(key, n, skipped=True)
"""

from ._interface import Store as Store
from ._interface import StoreBatch as StoreBatch
from ._model import CAUSES as CAUSES
from ._model import OUTCOMES as OUTCOMES
from ._model import RUN_REASONS as RUN_REASONS
from ._model import SKIP_REASONS as SKIP_REASONS
from ._model import (
    BatchResult as BatchResult,
)
from ._model import (
    ChangeMark as ChangeMark,
)
from ._model import (
    ControlRequest as ControlRequest,
)
from ._model import (
    FailedOp as FailedOp,
)
from ._model import (
    Holder as Holder,
)
from ._model import (
    HolderRef as HolderRef,
)
from ._model import (
    InstanceStatus as InstanceStatus,
)
from ._model import (
    InstanceView as InstanceView,
)
from ._model import (
    JobDetail as JobDetail,
)
from ._model import (
    JobView as JobView,
)
from ._model import (
    Loaded as Loaded,
)
from ._model import (
    RunRecord as RunRecord,
)
from ._model import (
    SkippedSlot as SkippedSlot,
)
from ._model import (
    StoreCounts as StoreCounts,
)
from ._model import (
    StoredTask as StoredTask,
)
from ._model import (
    TaskDefinition as TaskDefinition,
)
from ._model import (
    TaskState as TaskState,
)
from ._model import (
    WorkerStatus as WorkerStatus,
)
from ._model import (
    definition_hash as definition_hash,
)
from ._model import (
    function_ref as function_ref,
)
from ._model import (
    resolve_ref as resolve_ref,
)
from ._open import open_store as open_store
from ._sql import KEEP_RUNS as KEEP_RUNS
from ._sql import SCHEMA_VERSION as SCHEMA_VERSION
from ._sql import Batch as Batch
from ._sql import SQLStore as SQLStore
from ._sql import dead_here as dead_here
from ._sqlite import SQLiteStore as SQLiteStore
from ._trust import Secret as Secret

__all__ = [
    "CAUSES",
    "KEEP_RUNS",
    "OUTCOMES",
    "RUN_REASONS",
    "SCHEMA_VERSION",
    "SKIP_REASONS",
    "Batch",
    "BatchResult",
    "ChangeMark",
    "ControlRequest",
    "FailedOp",
    "Holder",
    "HolderRef",
    "InstanceStatus",
    "InstanceView",
    "JobDetail",
    "JobView",
    "Loaded",
    "RunRecord",
    "SQLStore",
    "SQLiteStore",
    "Secret",
    "SkippedSlot",
    "Store",
    "StoreBatch",
    "StoreCounts",
    "StoredTask",
    "TaskDefinition",
    "TaskState",
    "WorkerStatus",
    "dead_here",
    "definition_hash",
    "function_ref",
    "open_store",
    "resolve_ref",
]


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    if name == "PostgresStore":  # lazily: psycopg is imported only when used
        from ._postgres import PostgresStore

        return PostgresStore
    raise AttributeError(name)
