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
from dataclasses import dataclass, field
from typing import Any, Callable

#: ``schedule["kind"]`` values and the parameters each takes (all optional
#: beyond kind: the store does not compute schedules, it keeps them).
SCHEDULE_KINDS = ("once", "fixed_rate", "fixed_delay", "cron")
#: Outcomes a finished run may have (DESIGN.md ``RunInfo.outcome``).
OUTCOMES = ("ok", "error", "crashed", "timeout", "cancelled")


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
    except Exception as exc:  # noqa: BLE001 - whatever importing it raises
        raise TypeError(
            f"a keyed task's function must be importable: {ref} does not import back "
            f"({type(exc).__name__}: {exc})"
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


def definition_hash(fn_ref: str, args: bytes, schedule: dict[str, Any], options: dict[str, Any]) -> str:
    """A digest of a definition: equal digests mean the same task definition."""
    h = hashlib.sha256()
    for part in (fn_ref.encode(), args, _canonical(schedule, "schedule").encode(),
                 _canonical(options, "options").encode()):  # fmt: skip
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
    ``load()`` shares equal ones among tasks."""

    key: str
    fn_ref: str
    args: bytes
    schedule: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)
    def_hash: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise ValueError(f"key must be a non-empty str, got {self.key!r}")
        if not isinstance(self.args, bytes):
            raise TypeError(f"args must be the pickled (args, kwargs) bytes, got {type(self.args).__name__}")
        if not isinstance(self.schedule, dict) or self.schedule.get("kind") not in SCHEDULE_KINDS:
            raise ValueError(f"schedule must be a dict with kind in {SCHEDULE_KINDS}, got {self.schedule!r}")
        if not self.def_hash:
            object.__setattr__(self, "def_hash", definition_hash(self.fn_ref, self.args, self.schedule, self.options))


@dataclass(frozen=True, slots=True)
class TaskState:
    """Where a keyed task is. ``run_count``: the number of the last run
    claimed (0: none yet). ``next_attempt``: 1 when the next claim is a new
    run (``run_count + 1``), k > 1 when it is attempt k of run
    ``run_count`` (a retry). ``next_due_ns``: when that next claim is due
    (UTC ns; None: no further run); while a run is in flight it is that
    run's scheduled time."""

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
    holder: str | None = None  # scheduler id holding its in-flight run, or None
    token: int | None = None  # that holder's fencing token
    updated_ns: int = 0

    @property
    def key(self) -> str:
        return self.definition.key


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One attempt of one run. ``outcome`` is None while it is in flight."""

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
    """Everything a starting scheduler needs (``Store.load``)."""

    tasks: list[StoredTask]
    in_flight: list[RunRecord]  # started, never finished, whoever holds them
    schedulers: list[Holder]


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

    @property
    def ok(self) -> bool:
        return not (self.lost or self.stale or self.fenced_out)
