"""The store's tables (schema 3) and the migrations from schemas 1 and 2.

    procsched_version      one row: the schema version, who wrote it, the fencing-token
                           counter, the change counter of writers with no registration
    procsched_definitions  a keyed task's definition: written when the program schedules
                           (or replaces) it, never by a run (issue 20 item 18)
    procsched_tasks        its state: what claims, run ends and control change
    procsched_runs         one row per attempt, kept ``keep_runs`` runs per task (with the
                           misfire slots its end dropped, schema 3)
    procsched_skipped      slots not run and why, kept ``keep_runs`` rows per task (a row:
                           ``slots`` slots ``period_ns`` apart from ``slot_ns``, schema 3)
    procsched_schedulers   registered instances: lease, fencing token, change counter,
                           published status (workers, standby)
    procsched_limits       shared limits: at most ``lim`` runs of a group in flight
    procsched_requests     control requests (run now, backfill) to the holding instance

Both dialects share this text; ``blob`` is the binary type (``BLOB`` /
``BYTEA``), ``serial`` an auto-numbered integer primary key, ``runs_suffix``
``WITHOUT ROWID`` on SQLite for the tables of small rows read by their
primary key (state rows, runs, skipped slots; not definitions: a big
argument blob is better in a rowid table).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import StoreError
from ._model import OUTCOMES, SKIP_REASONS

if TYPE_CHECKING:
    from ._access import StoreAccess

#: The schema this procsched writes. A store with a higher version was
#: written by a newer procsched and is refused; a lower one is migrated.
SCHEMA_VERSION = 3
# Column lists, in the order the row readers (RunRecord, Holder) expect;
# _RUN_COLS: schema 1's run columns (the migration and the stores' modules use them).
SCHED_COLS = "id, token, host, pid, lease_ns, lease_until_ns, heartbeat_ns"
_RUN_COLS = (
    "key, run, attempt, scheduled_ns, started_ns, finished_ns, host, pid, outcome, error_type, "
    "error_message, holder, token"
)
#: A run row's columns, in RunRecord's order.
RUN_COLS = _RUN_COLS + ", cause, reason, error_traceback, worker_pid, output, retry_due_ns, grp"

#: Per-task totals (procsched_tasks columns): attempts ended by outcome,
#: skipped slots by reason (``Store.counts``; DESIGN's metrics).
RUN_COUNTERS = tuple(f"runs_{o}" for o in OUTCOMES)
SKIP_COUNTERS = tuple(f"skipped_{r}" for r in SKIP_REASONS)
_COUNTER_DDL = "".join(f", {c} BIGINT NOT NULL DEFAULT 0" for c in RUN_COUNTERS + SKIP_COUNTERS)

# (``args`` last: the columns a listing reads come before a big blob's overflow pages)
_DEFINITIONS = """CREATE TABLE procsched_definitions (
    key TEXT PRIMARY KEY, fn_ref TEXT NOT NULL, schedule TEXT NOT NULL, options TEXT NOT NULL,
    def_hash TEXT NOT NULL, name TEXT, signature {blob}, written_ns BIGINT NOT NULL, args {blob} NOT NULL)"""

_TASKS = """CREATE TABLE {name} (
    key TEXT PRIMARY KEY,
    run_count BIGINT NOT NULL, next_due_ns BIGINT, next_attempt INTEGER NOT NULL, paused INTEGER NOT NULL,
    last_outcome TEXT, unloadable TEXT, holder TEXT, token BIGINT, updated_ns BIGINT NOT NULL,
    in_flight INTEGER NOT NULL DEFAULT 0, max_concurrent INTEGER NOT NULL DEFAULT 1, grp TEXT,
    sched_run BIGINT NOT NULL DEFAULT 0, last_slot_ns BIGINT, last_holder TEXT{counters}){runs_suffix}"""

_RUNS = """CREATE TABLE procsched_runs (
    key TEXT NOT NULL, run BIGINT NOT NULL, attempt INTEGER NOT NULL, scheduled_ns BIGINT NOT NULL,
    started_ns BIGINT, finished_ns BIGINT, host TEXT, pid INTEGER, outcome TEXT,
    error_type TEXT, error_message TEXT, holder TEXT, token BIGINT,
    cause TEXT NOT NULL DEFAULT 'schedule', reason TEXT, error_traceback TEXT, worker_pid INTEGER,
    output TEXT, retry_due_ns BIGINT, grp TEXT,
    PRIMARY KEY (key, run, attempt)){runs_suffix}"""

# New in schema 2 beside the tables: the runs' columns, the counters.
_RUN_COLUMNS_2 = (
    "cause TEXT NOT NULL DEFAULT 'schedule'",
    "reason TEXT",
    "error_traceback TEXT",
    "worker_pid INTEGER",
    "output TEXT",
    "retry_due_ns BIGINT",
    "grp TEXT",
)

_INDEXES = [
    "CREATE INDEX procsched_tasks_updated ON procsched_tasks (updated_ns)",
    "CREATE INDEX procsched_tasks_group ON procsched_tasks (grp) WHERE grp IS NOT NULL",
]
_RUN_INDEXES = [
    "CREATE INDEX procsched_runs_in_flight ON procsched_runs (holder) WHERE outcome IS NULL",
    "CREATE INDEX procsched_runs_group ON procsched_runs (grp) WHERE outcome IS NULL AND grp IS NOT NULL",
    "CREATE INDEX procsched_runs_retry ON procsched_runs (key) WHERE retry_due_ns IS NOT NULL",
]
_NEW_TABLES = [
    """CREATE TABLE procsched_skipped (
        key TEXT NOT NULL, slot_ns BIGINT NOT NULL, reason TEXT NOT NULL, recorded_ns BIGINT NOT NULL,
        holder TEXT, PRIMARY KEY (key, slot_ns)){runs_suffix}""",
    "CREATE TABLE procsched_limits (name TEXT PRIMARY KEY, lim INTEGER NOT NULL, updated_ns BIGINT NOT NULL)",
    """CREATE TABLE procsched_requests (
        id {serial}, key TEXT NOT NULL, kind TEXT NOT NULL, start_ns BIGINT, end_ns BIGINT,
        dry_run INTEGER NOT NULL DEFAULT 0, asked_ns BIGINT NOT NULL, asked_by TEXT,
        taken_by TEXT, taken_token BIGINT, taken_ns BIGINT, done_ns BIGINT, result TEXT, error TEXT)""",
    "CREATE INDEX procsched_requests_open ON procsched_requests (key) WHERE done_ns IS NULL",
]


# New in schema 3: a skipped row stands for a run of a fixed-rate task's grid
# points (one row where schema 2 wrote one per slot: a late task drops them by
# the thousand a second), and the misfire slots a run's end dropped are kept on
# its run's row (no row, no page of their own: a late task's every commit had
# them). A schema-2 writer's rows are single slots still, its runs drop none.
_SKIPPED_COLUMNS_3 = ("period_ns BIGINT NOT NULL DEFAULT 0", "slots BIGINT NOT NULL DEFAULT 1")
_RUN_COLUMNS_3 = (
    "skip_first_ns BIGINT",
    "skip_period_ns BIGINT NOT NULL DEFAULT 0",
    "skip_slots BIGINT NOT NULL DEFAULT 0",
)


def migration_3() -> list[str]:
    """Schema 2 -> 3: the skipped rows' and the runs' new columns (an
    instance of schema 2 still writes and reads them right: its rows get
    the defaults)."""
    return [f"ALTER TABLE procsched_skipped ADD COLUMN {col}" for col in _SKIPPED_COLUMNS_3] + [
        f"ALTER TABLE procsched_runs ADD COLUMN {col}" for col in _RUN_COLUMNS_3
    ]


def schema(blob: str, serial: str, runs_suffix: str) -> list[str]:
    """The statements that create an empty store of schema 3."""
    fmt = {"blob": blob, "serial": serial, "runs_suffix": runs_suffix}
    return [
        (
            "CREATE TABLE procsched_version (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL, "
            "written_by TEXT NOT NULL, fence BIGINT NOT NULL, changes BIGINT NOT NULL DEFAULT 0)"
        ),
        _DEFINITIONS.format(**fmt),
        _TASKS.format(name="procsched_tasks", counters=_COUNTER_DDL, runs_suffix=runs_suffix),
        *_INDEXES,
        _RUNS.format(**fmt),
        *_RUN_INDEXES,
        """CREATE TABLE procsched_schedulers (
            id TEXT PRIMARY KEY, token BIGINT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,
            lease_ns BIGINT NOT NULL, lease_until_ns BIGINT NOT NULL, heartbeat_ns BIGINT NOT NULL,
            changes BIGINT NOT NULL DEFAULT 0, status TEXT)""",
        *(stmt.format(**fmt) for stmt in _NEW_TABLES),
        *migration_3(),
    ]


def migration_2(blob: str, serial: str, runs_suffix: str, now_ns: int) -> list[str]:
    """Schema 1 -> 2, in the transaction that checked the version (see
    ``SQLStore._init_schema``): the definitions move out of the task rows
    into their own table (copied as they are: signatures are left empty;
    the display names are filled in from the options after these statements),
    the state rows gain the columns of schema 2 (a run in flight counts in
    ``in_flight``; the slot guard starts from the history), the runs and
    the schedulers gain theirs, the new tables are created. Nothing is
    lost: every task, state, run (in flight too) and registration is kept."""
    fmt = {"blob": blob, "serial": serial, "runs_suffix": runs_suffix}
    state = "key, run_count, next_due_ns, next_attempt, paused, last_outcome, unloadable, holder, token, updated_ns"
    return [
        _DEFINITIONS.format(**fmt),
        (
            "INSERT INTO procsched_definitions (key, fn_ref, schedule, options, def_hash, name, signature, "
            "written_ns, args) SELECT key, fn_ref, schedule, options, def_hash, NULL, NULL, "
            f"{int(now_ns)}, args FROM procsched_tasks"
        ),
        *(f"ALTER TABLE procsched_runs ADD COLUMN {col}" for col in _RUN_COLUMNS_2),
        _TASKS.format(name="procsched_tasks_2", counters=_COUNTER_DDL, runs_suffix=runs_suffix),
        f"""INSERT INTO procsched_tasks_2 ({state}, in_flight, sched_run, last_slot_ns, last_holder)
            SELECT {state},
                (SELECT count(*) FROM procsched_runs r WHERE r.key = t.key AND r.outcome IS NULL),
                t.run_count,
                (SELECT max(r.scheduled_ns) FROM procsched_runs r WHERE r.key = t.key AND r.attempt = 1),
                (SELECT r.holder FROM procsched_runs r WHERE r.key = t.key ORDER BY r.run DESC, r.attempt DESC
                 LIMIT 1)
            FROM procsched_tasks t""",
        *(
            f"UPDATE procsched_tasks_2 SET {c} = (SELECT count(*) FROM procsched_runs r WHERE r.key = "
            f"procsched_tasks_2.key AND r.outcome = '{c[len('runs_') :]}')"
            for c in RUN_COUNTERS
        ),
        "DROP TABLE procsched_tasks",
        "ALTER TABLE procsched_tasks_2 RENAME TO procsched_tasks",
        *_INDEXES,
        *_RUN_INDEXES[1:],  # (procsched_runs_in_flight is schema 1's already)
        "ALTER TABLE procsched_schedulers ADD COLUMN changes BIGINT NOT NULL DEFAULT 0",
        "ALTER TABLE procsched_schedulers ADD COLUMN status TEXT",
        "ALTER TABLE procsched_version ADD COLUMN changes BIGINT NOT NULL DEFAULT 0",
        *(stmt.format(**fmt) for stmt in _NEW_TABLES),
    ]


def check_schema(store: StoreAccess) -> None:
    """A store opened ``read_only``: its tables exist and this procsched
    reads their schema as it is (a read-only open migrates nothing).

    Raises:
        StoreError: no procsched store there, or one of another schema version.
    """
    with store._tx("opening the store", write=False) as cur:
        if not store._has_schema(cur):
            raise StoreError(f"{store.describe}: no procsched store there (opened read-only: nothing was created)")
        row = store._x(cur, "SELECT version, written_by FROM procsched_version WHERE id = 1").fetchone()
    if row is None:
        raise StoreError(f"{store.describe}: the procsched_version table is empty: not a procsched store")
    version, written_by = row
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{store.describe} has schema version {version} (written by {written_by}); this procsched "
            f"reads up to version {SCHEMA_VERSION}: upgrade procsched"
        )
    if version < SCHEMA_VERSION:
        raise StoreError(
            f"{store.describe} has schema version {version} (written by {written_by}), older than this "
            f"procsched's {SCHEMA_VERSION}: opened read-only, it cannot be migrated; open it once "
            "read-write (a scheduler on it does) to migrate it"
        )
