"""What a store holds: records, and functions by import reference.

Times in a store are integers: **UTC wall-clock nanoseconds since the Unix
epoch** (``time.time_ns()`` scale), named ``*_ns``. Integers, not ISO
strings: exact arithmetic (``first + k * period``), small, and indexable; a
64-bit integer holds them until the year 2262. The dispatcher converts its
monotonic times once (``wall = monotonic + offset``) at the boundary.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: ``schedule["kind"]`` values and the parameters each takes (all optional
#: beyond kind: the store does not compute schedules, it keeps them).
SCHEDULE_KINDS = ("once", "fixed_rate", "fixed_delay", "cron")
#: Outcomes a finished run may have (DESIGN.md ``RunInfo.outcome``).
OUTCOMES = ("ok", "error", "crashed", "timeout", "cancelled")
#: Why a run was started (``RunInfo.cause``): its slot came, ``run_now()``, ``backfill()``.
CAUSES = ("schedule", "manual", "backfill")
#: Why a run ended as it did, beyond its outcome (``RunInfo.reason``; None: an ordinary run).
RUN_REASONS = ("replaced",)
#: Why a slot was not run (a skipped slot's ``reason``; DESIGN "Every slot explained").
SKIP_REASONS = ("overlap", "misfire", "late", "paused", "down")
#: What a control request asks of the instance that holds a task (``Store.ask``).
REQUEST_KINDS = ("run_now", "backfill")
#: What a payload's signature check says when it fails (``StoredTask.untrusted``).
BAD_SIGNATURE = "signature does not match"
UNSIGNED = "not signed (the store has a secret; this row was written without it)"


def function_ref(fn: Callable[..., Any]) -> str:
    """``"module:qualname"`` for a function another process can import.

    Keyed (durable) tasks are stored by reference, so a restarted program -
    or another scheduler on another host - finds the very same function.

    Raises:
        TypeError: for a lambda, a nested function or closure, a bound
            method of an instance, a partial or other callable object, a
            function defined only in a ``__main__`` script, or one that does
            not import back to the same object; the message says which and
            what to do instead.
    """
    if inspect.ismethod(fn):
        if not isinstance(fn.__self__, type):
            raise TypeError(
                f"a keyed task's function must be importable: {fn!r} is a method bound to an instance, "
                "which cannot be re-imported; use a module-level function"
            )
    elif not isinstance(fn, (types.FunctionType, types.BuiltinFunctionType, type)):
        raise TypeError(
            f"a keyed task's function must be importable: {type(fn).__name__} objects ({fn!r}) cannot be "
            "stored by reference; use a module-level function"
        )
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname:
        raise TypeError(f"a keyed task's function must be importable: {fn!r} has no module or qualified name")
    if getattr(fn, "__name__", None) == "<lambda>":
        raise TypeError(
            f"a keyed task's function must be importable: a lambda ({module}:{qualname}) has no name to "
            "import it by; use a module-level def"
        )
    if "<locals>" in qualname:
        raise TypeError(
            f"a keyed task's function must be importable: {module}:{qualname} is a nested function or "
            "closure, which another process cannot import; move it to module level"
        )
    if module == "__main__":
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        if spec is None or not spec.name or spec.name == "__main__":
            raise TypeError(
                f"a keyed task's function must be importable: {qualname} is defined in the __main__ script, "
                "which a restarted program or another scheduler cannot import; move it into a module "
                "(or run the program with python -m)"
            )
        module = spec.name  # run as `python -m pkg.mod`: importable under that name
    ref = f"{module}:{qualname}"
    try:
        back = resolve_ref(ref)
    except Exception as exc:
        raise TypeError(
            f"a keyed task's function must be importable: {ref} does not import back ({type(exc).__name__}: {exc})"
        ) from exc
    if back is not fn and not (inspect.ismethod(fn) and back == fn):
        raise TypeError(
            f"a keyed task's function must be importable: {ref} imports a different object "
            "(a decorator replaced it, or the name was rebound); store the function the name refers to"
        )
    return ref


def resolve_ref(ref: str) -> Any:
    """The object that ``"module:qualname"`` names (imports the module).

    Raises:
        ValueError: ``ref`` is not of that form.
        ImportError, AttributeError: it does not resolve (the caller marks
            the task unloadable; see ``Batch.unloadable``).
    """
    module_name, sep, qualname = ref.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"ref must be 'module:qualname', got {ref!r}")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _canonical(value: Any, what: str) -> str:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be a JSON-able dict: {exc}") from exc


def definition_hash(
    fn_ref: str,
    args: bytes,
    schedule: dict[str, Any],
    options: dict[str, Any],
    max_concurrent: int = 1,
    group: str | None = None,
) -> str:
    """A digest of a definition: equal digests mean the same task definition.
    (``max_concurrent`` and ``group`` count only when not their defaults, so
    the digests of definitions stored by schema 1 are unchanged.)"""
    h = hashlib.sha256()
    parts = [fn_ref.encode(), args, _canonical(schedule, "schedule").encode(), _canonical(options, "options").encode()]
    if max_concurrent != 1 or group is not None:
        parts.append(_canonical([max_concurrent, group], "max_concurrent/group").encode())
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class TaskDefinition:
    """What the program asked for. ``args`` is the opaque pickled
    ``(args, kwargs)`` (``_wire.pack_call``'s argument blob, cloudpickle);
    ``schedule`` is ``{"kind": one of SCHEDULE_KINDS, ...parameters}``
    (e.g. ``{"kind": "fixed_rate", "period_ns": ..., "first_ns": ...}``,
    ``{"kind": "cron", "expr": "*/5 * * * *", "tz": "Europe/Paris"}``);
    ``options`` the scheduling options as JSON (priority, timeout, misfire,
    stop_on_error, retry, until, max_runs, name). ``def_hash`` is computed
    when not given. Treat ``schedule`` and ``options`` as read-only: a
    ``load()`` shares equal ones among tasks.

    ``max_concurrent`` (runs of this task in flight at once, on any
    instances) and ``group`` (the shared limit it counts against, or None)
    are what the store's claims enforce: the store keeps them beside the
    task's state (see ``_sql``), so the runtime sets them here, from the
    task's options, whatever else its options say."""

    key: str
    fn_ref: str
    args: bytes
    schedule: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)
    def_hash: str = ""
    max_concurrent: int = 1
    group: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise ValueError(f"key must be a non-empty str, got {self.key!r}")
        if not isinstance(self.args, bytes):
            raise TypeError(f"args must be the pickled (args, kwargs) bytes, got {type(self.args).__name__}")
        if not isinstance(self.schedule, dict) or self.schedule.get("kind") not in SCHEDULE_KINDS:
            raise ValueError(f"schedule must be a dict with kind in {SCHEDULE_KINDS}, got {self.schedule!r}")
        if type(self.max_concurrent) is not int or self.max_concurrent < 1:
            raise ValueError(f"max_concurrent must be an int >= 1, got {self.max_concurrent!r}")
        if self.group is not None and (not isinstance(self.group, str) or not self.group):
            raise ValueError(f"group must be None or a non-empty str, got {self.group!r}")
        if not self.def_hash:
            object.__setattr__(
                self,
                "def_hash",
                definition_hash(self.fn_ref, self.args, self.schedule, self.options, self.max_concurrent, self.group),
            )


@dataclass(frozen=True, slots=True)
class TaskState:
    """Where a keyed task is. ``run_count``: the number of the last run
    claimed, whatever its cause (0: none yet). ``next_attempt``: 1 when the
    next claim is a new run (``run_count + 1``), k > 1 when it is attempt k
    of run ``run_count`` (a retry). ``next_due_ns``: when the schedule's next
    claim is due (UTC ns; None: no further run); while a scheduled run is
    in flight it is that run's scheduled time. Manual and backfill runs
    never move it (see ``_sql``: "Causes")."""

    run_count: int = 0
    next_due_ns: int | None = None
    next_attempt: int = 1
    paused: bool = False


@dataclass(frozen=True, slots=True)
class StoredTask:
    """A task as the store has it: definition, state, and bookkeeping."""

    definition: TaskDefinition
    state: TaskState
    last_outcome: str | None = None
    unloadable: str | None = None  # why its function failed to import, or None
    holder: str | None = None  # scheduler id holding a run in flight (None: none in flight)
    token: int | None = None  # that holder's fencing token
    updated_ns: int = 0
    in_flight: int = 0  # runs in flight (at most definition.max_concurrent)
    last_holder: str | None = None  # the scheduler that claimed its last run (others keep it on standby)
    #: Why its payload must not be loaded (a store with a secret: the
    #: signature is missing or wrong), or None. Such a task's
    #: ``definition.args`` is empty and ``unloadable`` says the same: it is
    #: listed, never run (see ``_trust``).
    untrusted: str | None = None
    #: The slot guard (UTC ns): the last scheduled slot claimed, or recorded
    #: skipped (a little before it) - a scheduled claim must come after it
    #: (see ``_sql``, "Claims"); None: none yet.
    last_slot_ns: int | None = None

    @property
    def key(self) -> str:
        return self.definition.key


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One attempt of one run. ``outcome`` is None while it is in flight.
    ``host`` and ``pid`` name the scheduler instance that claimed it
    (``holder`` its registration, ``token`` its fencing token);
    ``worker_pid`` the worker process that ran it (None: not known).
    ``cause``: ``"schedule"``, ``"manual"`` or ``"backfill"``; ``reason``:
    None or ``"replaced"``. ``error_*``: the error's type, message and
    traceback text; ``output``: the tail of its captured output.
    ``retry_due_ns``: set on a failed attempt whose retry is due then and
    not claimed yet. ``group``: the shared limit the run counted against."""

    key: str
    run: int
    attempt: int
    scheduled_ns: int
    started_ns: int | None = None
    finished_ns: int | None = None
    host: str | None = None
    pid: int | None = None
    outcome: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    holder: str | None = None
    token: int | None = None
    cause: str = "schedule"
    reason: str | None = None
    error_traceback: str | None = None
    worker_pid: int | None = None
    output: str | None = None
    retry_due_ns: int | None = None
    group: str | None = None

    @property
    def slot_ns(self) -> int:
        """Where it sits among a task's slots (its scheduled time)."""
        return self.scheduled_ns


@dataclass(frozen=True, slots=True)
class SkippedSlot:
    """A slot of a keyed task that was not run, and why (``SKIP_REASONS``).
    ``holder``: the scheduler that decided (None: not known)."""

    key: str
    slot_ns: int
    reason: str
    recorded_ns: int
    holder: str | None = None

    @property
    def outcome(self) -> str:
        return "skipped"


@dataclass(frozen=True, slots=True)
class Holder:
    """A scheduler registered on a store: its id, fencing token and lease.
    ``lease_until_ns`` is as of the last registration or renewal (store clock)."""

    id: str
    token: int
    host: str
    pid: int
    lease_ns: int
    lease_until_ns: int = 0
    heartbeat_ns: int = 0


@dataclass(frozen=True, slots=True)
class Loaded:
    """Everything a starting scheduler needs (``Store.load``). ``retries``:
    failed attempts whose retry was asked for and not claimed yet, beyond
    what the tasks' states say (a retry of a run that is not the task's
    latest: see ``_sql``, "Concurrency")."""

    tasks: list[StoredTask]
    in_flight: list[RunRecord]  # started, never finished, whoever holds them
    schedulers: list[Holder]
    retries: list[RunRecord] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class FailedOp:
    """A batch op the store could not write because of its own data (a key
    the database refuses, a value out of range): the rest of the batch was
    written without it (``BatchResult.failed``). ``error``: the database's
    words."""

    kind: str
    key: str | None
    run: int | None
    attempt: int | None
    error: str


@dataclass(slots=True)
class BatchResult:
    """What a committed batch could not do. In one scheduler on its own
    store both lists stay empty; with several, a lost claim means another
    scheduler won that run, a stale finish means the run was taken over
    (recorded ``crashed`` by a survivor) and this outcome was not recorded.
    ``fenced_out``: the batch's holder was taken over: nothing in the batch
    was written; the scheduler must stop running stored tasks and register
    again."""

    lost: list[tuple[str, int, int]] = field(default_factory=list)  # (key, run, attempt) claims lost
    stale: list[tuple[str, int, int]] = field(default_factory=list)  # finishes refused
    fenced_out: bool = False
    #: Claims refused because their group's shared limit is reached: the run
    #: waits (it is nobody else's: claim it again when a run of the group ends).
    limited: list[tuple[str, int, int]] = field(default_factory=list)
    #: Ops that could not be written at all (their claims are in ``lost``,
    #: their finishes in ``stale`` too, so a caller that reads only those
    #: never starts or forgets them); everything else was written.
    failed: list[FailedOp] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.stale or self.fenced_out or self.limited or self.failed)


@dataclass(frozen=True, slots=True)
class ControlRequest:
    """A request to the instance that holds a task (``Store.ask``): run it
    now, or backfill ``[start_ns, end_ns)`` (``dry_run``: only list the
    slots). Taken once (``taken_by``: the registration that took it),
    answered once (``done_ns``, with ``result`` - any JSON value the
    instance gives, e.g. the slots - or ``error``, why it was refused)."""

    id: int
    key: str
    kind: str
    asked_ns: int
    start_ns: int | None = None
    end_ns: int | None = None
    dry_run: bool = False
    asked_by: str | None = None
    taken_by: str | None = None
    taken_ns: int | None = None
    done_ns: int | None = None
    result: Any = None
    error: str | None = None

    @property
    def done(self) -> bool:
        return self.done_ns is not None


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """One worker process of an instance, as it published it."""

    pid: int
    rss: int | None = None  # bytes
    runs: int = 0
    restarts: int = 0


@dataclass(frozen=True, slots=True)
class InstanceStatus:
    """What an instance publishes with its lease renewal (a small JSON
    document, ``Store.renew_lease(holder, status=...)``): its workers and the
    keys it keeps on standby (at most ``STANDBY_LISTED`` of them, and how many)."""

    workers: tuple[WorkerStatus, ...] = ()
    standby: tuple[str, ...] = ()
    standby_count: int = 0
    runner: str | None = None

    STANDBY_LISTED = 1000

    def to_json(self) -> str:
        return json.dumps(
            {
                "workers": [[w.pid, w.rss, w.runs, w.restarts] for w in self.workers],
                "standby": list(self.standby[: self.STANDBY_LISTED]),
                "standby_count": max(self.standby_count, len(self.standby)),
                "runner": self.runner,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | None) -> InstanceStatus:
        """The status a text says; an empty status for None or a text this
        release cannot read (a status is information, never a reason to fail)."""
        if not text:
            return cls()
        try:
            doc = json.loads(text)
            return cls(
                tuple(
                    WorkerStatus(int(p), None if r is None else int(r), int(n), int(k))
                    for p, r, n, k in doc.get("workers", ())
                ),
                tuple(str(k) for k in doc.get("standby", ())),
                int(doc.get("standby_count", 0)),
                doc.get("runner"),
            )
        except (ValueError, TypeError, AttributeError):
            return cls()


@dataclass(frozen=True, slots=True)
class HolderRef:
    """A scheduler instance named by a task (its holder): who and whether
    its lease is alive (``registered``: its registration is still in the
    store - an expired one nobody took over yet is registered, not alive)."""

    id: str
    host: str | None
    pid: int | None
    alive: bool
    registered: bool


@dataclass(frozen=True, slots=True)
class JobView:
    """One stored task for a listing (``Store.jobs_view``): plain data only,
    never its pickled arguments. ``held_by``: the instance holding a run in
    flight; ``claimed_by``: the one that claimed its last run (the instance
    keeping it; the others have it on standby). ``name``:
    ``options["name"]``; ``options`` is parsed from ``options_text`` when
    asked (a listing of 10,000 jobs needs few). Totals by outcome: in
    ``JobDetail`` and ``StoreCounts``."""

    key: str
    name: str | None
    fn_ref: str
    schedule: dict[str, Any]
    options_text: str
    def_hash: str
    state: TaskState
    last_outcome: str | None
    unloadable: str | None
    in_flight: int
    max_concurrent: int
    group: str | None
    held_by: HolderRef | None
    claimed_by: HolderRef | None
    updated_ns: int

    @property
    def options(self) -> dict[str, Any]:
        value = json.loads(self.options_text)
        return value if isinstance(value, dict) else {}

    @property
    def paused(self) -> bool:
        return self.state.paused

    @property
    def next_due_ns(self) -> int | None:
        return self.state.next_due_ns


@dataclass(frozen=True, slots=True)
class JobDetail:
    """One job with its recent history (``Store.job_view``): ``runs``, the
    last attempts (oldest first), ``skipped``, the last skipped slots, and
    ``slots``: both merged in slot order (newest last, at most ``n``).
    ``runs_total``: attempts ended by outcome, ``skipped_total``: skipped
    slots by reason (kept by the store for the task's life, not only what
    the history still holds)."""

    job: JobView
    runs: list[RunRecord]
    skipped: list[SkippedSlot]
    slots: list[RunRecord | SkippedSlot]
    runs_total: dict[str, int]
    skipped_total: dict[str, int]


@dataclass(frozen=True, slots=True)
class InstanceView:
    """A registered scheduler instance (``Store.instances``): its lease
    (``alive``: not expired by the store clock), the keys whose runs it
    holds in flight, how many tasks it keeps (claimed their last run), and
    what it published with its lease (workers, standby)."""

    id: str
    host: str
    pid: int
    token: int
    lease_ns: int
    lease_until_ns: int
    heartbeat_ns: int
    alive: bool
    holding: list[str]
    keeping: int
    status: InstanceStatus


@dataclass(frozen=True, slots=True)
class StoreCounts:
    """Counts for metrics (``Store.counts``): jobs, instances (and how many
    have a live lease), attempts ended by outcome and skipped slots by
    reason - in total and per job (``by_job[key]``: (runs, skipped))."""

    jobs: int
    instances: int
    alive: int
    runs: dict[str, int]
    skipped: dict[str, int]
    by_job: dict[str, tuple[dict[str, int], dict[str, int]]]


@dataclass(frozen=True, slots=True)
class ChangeMark:
    """What ``Store.change_mark()`` read: equal marks mean nothing changed
    between the two reads. ``jobs`` changes with every write to tasks, runs,
    skipped slots or requests, ``instances`` when an instance registers,
    leaves, publishes a new status or its lease expires. Stable text digests:
    comparable across processes, usable as an ETag."""

    jobs: str
    instances: str
