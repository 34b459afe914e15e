"""Every message that crosses a seam of the runtime, as a named record.

    user process ──commands──▶ dispatcher ──orders──▶ worker
                 ◀──events───            ◀─reports──
    (threads, Ray: the same commands and events through queues; carriers
    report to their dispatcher thread with in-process records; Ray's own:
    ``_ray_messages.py``)

Each message is a ``NamedTuple`` whose first field is its tag (a short
string); its fields are documented under the class. Records travel as
*plain tuples* of the same layout (``Record.wire(...)`` builds one,
``view(Record, message)`` reads one as the record, without copying a field):
the standard pickle writes and reads a plain tuple several times faster
than a tuple subclass, and a message crosses a pipe for every run. So
positions are known in this file alone: the encoders (``wire``) and the
records the views read them as (``view``). What an untrusted worker sends is
checked against its record's layout (``_checks.check_report``) before the engine sees a
report, so a forged one cannot leave it half-updated. ``tests/runtime/test_messages.py``
round-trips every record through the real framing and checks that each
encoder's parameters are its record's fields.

Times are integer ns (``*_ns``: monotonic, ``*_wall_ns``: since the epoch,
UTC). User code (functions, arguments, results, exceptions) is opaque
bytes here (``_wire.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol, TypeVar

if TYPE_CHECKING:
    from .._handle import RunError
    from .._validate import TaskSpec

#: A message as it travels: a plain tuple, its tag first.
Message = tuple[Any, ...]
#: A call's pickled function and pickled (args, kwargs) (``_wire.pack_call``);
#: on Ray, with the run's Ray options after them; in-process, (fn, args, kwargs).
Payload = tuple[Any, ...]

# What a run's result blob holds (``RunEnded.blob_kind``, ``Done.blob_kind``).
BLOB_NONE: Final = 0
"""No value (a periodic run, a cancelled run)."""
BLOB_VALUE: Final = 1
"""The return value (pickled bytes, or the object itself in-process)."""
BLOB_ERROR: Final = 2
"""(exception, traceback text) (pickled bytes, or the tuple in-process)."""
BLOB_EXC: Final = 3
"""An exception object the engine made (a crash, a timeout)."""

_R = TypeVar("_R", bound=tuple[Any, ...])


class _View(Protocol):
    def __call__(self, record: type[_R], message: Message, /) -> _R: ...


#: ``view(Record, message)``: ``message`` read as ``record``, its fields by
#: name (``tuple.__new__`` itself: one C call; the tuple is copied, no field is).
view: _View = tuple.__new__


# -- commands: the user process (and the worker, for ``Add``/``Cancel``) to the dispatcher --


class Add(NamedTuple):
    """Schedule a task: the one add record of every sender (the user
    process, a task's follow-up from a worker, a Ray run's)."""

    tag: str
    task_id: int | None
    """The task's id; None: the dispatcher numbers it (a task's follow-up) and answers it."""
    due_ns: int | None
    """The first due time on the dispatcher's monotonic clock; None from a
    sender on another clock (a Ray node): ``delay_ns`` after receipt."""
    delay_ns: int
    """How long after the call the first run is due (the call was at ``due_ns - delay_ns``:
    the schedule's ``until`` counts from then)."""
    start_wall_ns: int
    """The call's wall-clock time (a calendar schedule's ``until`` counts from it)."""
    first_slot_wall_ns: int | None
    """A calendar task's first slot (None: the first after ``start_wall_ns``)."""
    schedule: Any
    """``Schedule.to_wire()``: None for a plain one-shot."""
    priority: int
    timeout_ns: int | None
    name: str | None
    payload: Payload
    retry: tuple[Any, ...] | None
    """``RetryPolicy.to_wire()``, or None."""
    retry_on: Any
    """``Retry.on``'s exception classes: cloudpickled bytes that only a worker
    unpickles (the classes themselves in-process), or None."""
    key: str | None
    """A follow-up's key, registered by the user process when it hears of the task."""

    @staticmethod
    def wire(
        task_id: int | None,
        due_ns: int | None,
        delay_ns: int,
        start_wall_ns: int,
        first_slot_wall_ns: int | None,
        schedule: Any,
        priority: int,
        timeout_ns: int | None,
        name: str | None,
        payload: Payload,
        retry: tuple[Any, ...] | None,
        retry_on: Any,
        key: str | None,
    ) -> Message:
        return (
            ADD,
            task_id,
            due_ns,
            delay_ns,
            start_wall_ns,
            first_slot_wall_ns,
            schedule,
            priority,
            timeout_ns,
            name,
            payload,
            retry,
            retry_on,
            key,
        )

    @staticmethod
    def of_spec(
        spec: TaskSpec,
        task_id: int | None,
        due_ns: int | None,
        first_slot_wall_ns: int | None,
        payload: Payload,
        retry_on: Any,
    ) -> Message:
        """The add of a validated request (``retry_on``: its ``Retry.on``
        classes as this sender carries them)."""
        retry = spec.retry
        return (
            ADD,
            task_id,
            due_ns,
            spec.delay_ns,
            spec.start_wall_ns,
            first_slot_wall_ns,
            spec.schedule.to_wire(),
            spec.priority,
            spec.timeout_ns,
            spec.name,
            payload,
            None if retry is None else retry.policy().to_wire(),
            retry_on,
            spec.key,
        )


class Define(NamedTuple):
    """The stored definition of the keyed task the next ``Add`` of
    ``task_id`` adds (the dispatcher stores it with the add)."""

    tag: str
    task_id: int
    key: str
    fn_ref: str
    args: bytes
    schedule: dict[str, Any]
    """``Schedule.to_record()``."""
    options: dict[str, Any]
    def_hash: str
    paused: bool
    """It replaces a paused stored task (a deploy that changed it): it starts paused."""

    @staticmethod
    def wire(
        task_id: int,
        key: str,
        fn_ref: str,
        args: bytes,
        schedule: dict[str, Any],
        options: dict[str, Any],
        def_hash: str,
        paused: bool = False,
    ) -> Message:
        return (DEFINE, task_id, key, fn_ref, args, schedule, options, def_hash, paused)


class AdoptShape(NamedTuple):
    """What stored tasks of one function, arguments, schedule and options
    share (made once per shape at a restart, not once per task)."""

    tag: str
    schedule: Any
    """``Schedule.to_wire()``, read at ``start_wall_ns`` (its ``until`` counts from then)."""
    start_wall_ns: int
    priority: int
    timeout_ns: int | None
    name: str | None
    payload: Payload
    retry: tuple[Any, ...] | None
    retry_on: Any

    @staticmethod
    def wire(
        schedule: Any,
        start_wall_ns: int,
        priority: int,
        timeout_ns: int | None,
        name: str | None,
        payload: Payload,
        retry: tuple[Any, ...] | None,
        retry_on: Any,
    ) -> Message:
        return (ADOPT_SHAPE, schedule, start_wall_ns, priority, timeout_ns, name, payload, retry, retry_on)


class AdoptRow(NamedTuple):
    """One stored task to adopt: where it goes on."""

    tag: str
    key: str
    shape: int
    """Its shape: an index into every shape sent so far, in order."""
    runs: int
    """Runs claimed so far (the next is ``runs + 1``, unless a retry)."""
    attempt: int
    """1: the next claim is a new run; k > 1: attempt k of run ``runs``."""
    due_wall_ns: int
    """When that next claim is due."""
    slot_wall_ns: int
    """The regular slot of the run a retry retries (its grid goes on from it)."""
    paused: bool
    write: bool
    """The store's state is not this yet: write it."""
    task_id: int
    def_hash: str
    """The hash of the definition adopted (``_stored.stored_hash``)."""
    down: tuple[int, ...]
    """The slots (UTC ns) this start recorded skipped "down" (stored already): told as ``RunSkipped``."""

    @staticmethod
    def wire(
        key: str,
        shape: int,
        runs: int,
        attempt: int,
        due_wall_ns: int,
        slot_wall_ns: int,
        paused: bool,
        write: bool,
        task_id: int,
        def_hash: str,
        down: tuple[int, ...] = (),
    ) -> Message:
        return (ADOPT_ROW, key, shape, runs, attempt, due_wall_ns, slot_wall_ns, paused, write, task_id, def_hash, down)


class Adopt(NamedTuple):
    """A chunk of a restart's stored tasks, handed to the dispatcher."""

    tag: str
    shapes: list[Message]
    """``AdoptShape`` messages not sent before."""
    rows: list[Message]
    """``AdoptRow`` messages."""
    last: bool
    """The adoption's last chunk: the rows of every chunk were read at once, so
    one re-read of the store after this one follows what changed since."""

    @staticmethod
    def wire(shapes: list[Message], rows: list[Message], last: bool = True) -> Message:
        return (ADOPT, shapes, rows, last)


class Unloadable(NamedTuple):
    """A stored task whose function or arguments did not load here: keep it, marked."""

    tag: str
    key: str
    why: str

    @staticmethod
    def wire(key: str, why: str) -> Message:
        return (UNLOADABLE, key, why)


class AdoptAgain(NamedTuple):
    """Adopting another scheduler's stored task ``key`` failed for a passing
    reason (the store could not be read): ask again at the next re-read."""

    tag: str
    key: str

    @staticmethod
    def wire(key: str) -> Message:
        return (ADOPT_AGAIN, key)


class Pause(NamedTuple):
    """Pause a task (answered with ``Answer``: True if it is, or will be, paused)."""

    tag: str
    request: int
    task_id: int

    @staticmethod
    def wire(request: int, task_id: int) -> Message:
        return (PAUSE, request, task_id)


class Resume(NamedTuple):
    """Resume a paused task at its next slot from now (answered: True if it was paused)."""

    tag: str
    request: int
    task_id: int

    @staticmethod
    def wire(request: int, task_id: int) -> Message:
        return (RESUME, request, task_id)


class Cancel(NamedTuple):
    """Cancel a task (answered: ``cancel()``'s bool); from a worker, ``request`` is 0
    and the answer is a ``Reply`` on its pipe."""

    tag: str
    request: int
    task_id: int
    interrupt: bool
    #: A task of its key replaces it (``replace_existing``, a deploy's
    #: changed definition): with a store its row stays for the new one.
    replaced: bool = False

    @staticmethod
    def wire(request: int, task_id: int, interrupt: bool, replaced: bool = False) -> Message:
        return (CANCEL, request, task_id, interrupt, replaced)


class RunNow(NamedTuple):
    """One extra run of a task now (answered with ``Answer``: True if it
    will run, False if ``overlap="skip"`` found it full or it is not a live
    periodic task)."""

    tag: str
    request: int
    task_id: int

    @staticmethod
    def wire(request: int, task_id: int) -> Message:
        return (RUN_NOW, request, task_id)


class Backfill(NamedTuple):
    """Run a task's slots in ``[start_wall_ns, end_wall_ns)`` (not after
    now), or only list them (``dry_run``). Answered with ``Answer``: the
    slots' wall-clock ns (a list), or why it is refused (a str: the
    caller's ValueError)."""

    tag: str
    request: int
    task_id: int
    start_wall_ns: int
    end_wall_ns: int
    dry_run: bool

    @staticmethod
    def wire(request: int, task_id: int, start_wall_ns: int, end_wall_ns: int, dry_run: bool) -> Message:
        return (BACKFILL, request, task_id, start_wall_ns, end_wall_ns, dry_run)


class Stats(NamedTuple):
    """Ask for ``Scheduler.stats()`` (answered with the dict)."""

    tag: str
    request: int

    @staticmethod
    def wire(request: int) -> Message:
        return (STATS, request)


class Shutdown(NamedTuple):
    """No more work: see ``Engine.shutdown``."""

    tag: str
    cancel_futures: bool

    @staticmethod
    def wire(cancel_futures: bool) -> Message:
        return (SHUTDOWN, cancel_futures)


class WallStep(NamedTuple):
    """Tests: step the dispatcher's wall clock by ``ns`` (as an NTP step would)."""

    tag: str
    ns: int

    @staticmethod
    def wire(ns: int) -> Message:
        return (WALL_STEP, ns)


# -- orders: the dispatcher to a worker ------------------------------------------------


class RunOrder(NamedTuple):
    """Run this run (when its ticket is still there: see ``ProcessCarrier``).
    A large payload travels as ``RunHeader`` and two raw frames instead."""

    tag: str
    task_id: int
    run: int
    scheduled_ns: int
    report_start: bool
    """Send ``Started`` (the run has a timeout, which counts from there)."""
    attempt: int
    wall_ns: int | None
    """The slot's wall-clock time (calendar); None: ``scheduled_ns`` on the wall clock."""
    retry_on: bytes | None
    fn_blob: bytes
    arg_blob: bytes
    cause: str | None
    """Why it runs ("manual", "backfill"); None: "schedule" (the usual case)."""
    start_by: int
    """A keyed run with a store: the worker's clock (monotonic ns) after which
    it starts only once the dispatcher has checked its lease (``Stalled``);
    0: any time."""

    @staticmethod
    def wire(
        task_id: int,
        run: int,
        scheduled_ns: int,
        report_start: bool,
        attempt: int,
        wall_ns: int | None,
        retry_on: bytes | None,
        fn_blob: bytes,
        arg_blob: bytes,
        cause: str | None,
        start_by: int,
    ) -> Message:
        return (
            RUN,
            task_id,
            run,
            scheduled_ns,
            report_start,
            attempt,
            wall_ns,
            retry_on,
            fn_blob,
            arg_blob,
            cause,
            start_by,
        )


class RunHeader(NamedTuple):
    """``RunOrder`` without its blobs, which follow as two raw frames
    (written from the task's own bytes, never copied by the dispatcher)."""

    tag: str
    task_id: int
    run: int
    scheduled_ns: int
    report_start: bool
    attempt: int
    wall_ns: int | None
    retry_on: bytes | None
    cause: str | None
    start_by: int

    @staticmethod
    def wire(
        task_id: int,
        run: int,
        scheduled_ns: int,
        report_start: bool,
        attempt: int,
        wall_ns: int | None,
        retry_on: bytes | None,
        cause: str | None,
        start_by: int,
    ) -> Message:
        return (RUN_HEADER, task_id, run, scheduled_ns, report_start, attempt, wall_ns, retry_on, cause, start_by)


class Reply(NamedTuple):
    """The answer to a worker's (or a Ray run's) request (``current_scheduler()``)."""

    tag: str
    value: Any
    """``Add``: (task id, due time or None); ``Cancel``, ``Pause``, ``Resume``,
    ``RunNow``: the bool; ``Backfill``: the slots (wall ns) or why not (a str)."""

    @staticmethod
    def wire(value: Any) -> Message:
        return (REPLY, value)


class Checked(NamedTuple):
    """The dispatcher's answer to ``Stalled``: its claims are checked (the
    runs given ahead that are not the worker's any more are revoked)."""

    tag: str

    @staticmethod
    def wire() -> Message:
        return (CHECKED,)


class Refusal(NamedTuple):
    """A worker's (or a Ray run's) request refused: the exception to raise there."""

    tag: str
    error: BaseException

    @staticmethod
    def wire(error: BaseException) -> Message:
        return (REFUSAL, error)


# -- reports: a worker to the dispatcher -----------------------------------------------------


class Started(NamedTuple):
    """The run's code starts now (sent only with ``report_start``)."""

    tag: str
    task_id: int
    run: int
    at_ns: int

    @staticmethod
    def wire(task_id: int, run: int, at_ns: int) -> Message:
        return (STARTED, task_id, run, at_ns)


class Skipped(NamedTuple):
    """The worker passed over a revoked run (its ticket was taken back)."""

    tag: str

    @staticmethod
    def wire() -> Message:
        return (SKIPPED,)


class Stalled(NamedTuple):
    """The worker was stopped and continued (SIGCONT): it starts none of
    the runs given ahead before the dispatcher has checked them (``Checked``)."""

    tag: str

    @staticmethod
    def wire() -> Message:
        return (STALLED,)


#: Captured output kept per run (the tail).
OUTPUT_TAIL: Final = 64 * 1024


class Done(NamedTuple):
    """A run ended in the worker (or a thread, or a Ray task)."""

    tag: str
    task_id: int
    run: int
    outcome: str
    """"ok" or "error" (a worker cannot report its own crash)."""
    started_ns: int
    finished_ns: int
    blob_kind: int
    """``BLOB_VALUE`` or ``BLOB_ERROR``."""
    blob: Any
    matched: bool
    """An "error" whose exception is one of the classes ``Retry.on`` names (decided in the worker)."""
    unfit: str | None
    """Why the worker must be replaced before another run (a MemoryError), or None."""
    error: RunError | None
    """An "error"'s exception as text (``_wire.pack_error``), or None."""
    output: str | None = None
    """The run's captured output (its last ``OUTPUT_TAIL`` bytes), read by the
    worker itself before it reports: a run given ahead empties the file as it
    starts, possibly before the dispatcher reads this report. None without
    capture (and from the thread and Ray carriers: the carrier has it)."""

    @staticmethod
    def wire(
        task_id: int,
        run: int,
        outcome: str,
        started_ns: int,
        finished_ns: int,
        blob_kind: int,
        blob: Any,
        matched: bool,
        unfit: str | None,
        error: RunError | None,
        output: str | None = None,
    ) -> Message:
        return (DONE, task_id, run, outcome, started_ns, finished_ns, blob_kind, blob, matched, unfit, error, output)


# -- in-process reports: a thread or Ray carrier to its dispatcher thread -------------------------


class Finished(NamedTuple):
    """``worker`` reports ``done`` (a ``Done`` message)."""

    tag: str
    worker: Any
    done: Message

    @staticmethod
    def wire(worker: Any, done: Message) -> Message:
        return (FINISHED, worker, done)


class Exited(NamedTuple):
    """``worker`` (a thread, a virtual Ray worker) is gone."""

    tag: str
    worker: Any
    exitcode: int | None
    detail: str | None
    """How it went, where the carrier knows better than an exit code (Ray's error)."""

    @staticmethod
    def wire(worker: Any, exitcode: int | None, detail: str | None) -> Message:
        return (EXITED, worker, exitcode, detail)


# (Ray's own in-process reports - Landed, Mail, Abort, RayLost - and what a
# run's Ray task returns, RayOutcome: ``_ray_messages.py``)


# -- events: the engine to the user process --------------------------------------------------------


class RunStarted(NamedTuple):
    """A run was handed to a worker."""

    tag: str
    task_id: int
    run: int
    worker: Any
    """The worker's pid (processes), thread name, or Ray slot."""
    cause: str
    """"schedule", "manual" or "backfill"."""

    @staticmethod
    def wire(task_id: int, run: int, worker: Any, cause: str) -> Message:
        return (RUN_STARTED, task_id, run, worker, cause)


class RunEnded(NamedTuple):
    """A run ended, and what its task does next."""

    tag: str
    task_id: int
    run: int
    scheduled_ns: int
    started_ns: int
    finished_ns: int
    worker: Any
    outcome: str
    """"ok", "error", "crashed", "timeout" or "cancelled"."""
    state: str
    """The task's state after the run (a ``TaskState`` value)."""
    next_due_ns: int | None
    missed: int
    """Slots the misfire policy dropped."""
    ended: bool
    """The task ended with this run (``blob`` is its result)."""
    blob_kind: int
    blob: Any
    output: str | None
    """The run's captured output (its tail), or None."""
    attempt: int
    scheduled_wall_ns: int
    next_wall_ns: int | None
    retrying: bool
    """The next run is a retry of this one."""
    cause: str
    """"schedule", "manual" or "backfill"."""
    reason: str | None
    """None, or "replaced" (ended for a newer slot by ``overlap="replace"``)."""
    error: RunError | None
    """Why it did not end "ok", as text (None: "ok", "cancelled")."""

    @staticmethod
    def wire(
        task_id: int,
        run: int,
        scheduled_ns: int,
        started_ns: int,
        finished_ns: int,
        worker: Any,
        outcome: str,
        state: str,
        next_due_ns: int | None,
        missed: int,
        ended: bool,
        blob_kind: int,
        blob: Any,
        output: str | None,
        attempt: int,
        scheduled_wall_ns: int,
        next_wall_ns: int | None,
        retrying: bool,
        cause: str,
        reason: str | None,
        error: RunError | None,
    ) -> Message:
        return (
            RUN_ENDED,
            task_id,
            run,
            scheduled_ns,
            started_ns,
            finished_ns,
            worker,
            outcome,
            state,
            next_due_ns,
            missed,
            ended,
            blob_kind,
            blob,
            output,
            attempt,
            scheduled_wall_ns,
            next_wall_ns,
            retrying,
            cause,
            reason,
            error,
        )


class RunSkipped(NamedTuple):
    """Slots of a task did not run (``_core/_control.py``: ``SkipRecord``):
    ``slots`` slots ``period_ns`` apart, from the first one's times."""

    tag: str
    task_id: int
    scheduled_ns: int
    wall_ns: int
    reason: str
    """"overlap", "misfire", "late", "paused" (or "down", with a store)."""
    state: str | None
    """The state the task ended in at its last slot (a ``TaskState`` value), or None."""
    period_ns: int
    slots: int

    @staticmethod
    def wire(
        task_id: int,
        scheduled_ns: int,
        wall_ns: int,
        reason: str,
        state: str | None,
        period_ns: int = 0,
        slots: int = 1,
    ) -> Message:
        return (RUN_SKIPPED, task_id, scheduled_ns, wall_ns, reason, state, period_ns, slots)


class TaskCancelled(NamedTuple):
    """The task was cancelled; ``running``: its last run is still in
    flight (its end comes later). A run given ahead and taken back was
    told started but never began: not running."""

    tag: str
    task_id: int
    running: bool

    @staticmethod
    def wire(task_id: int, running: bool = False) -> Message:
        return (TASK_CANCELLED, task_id, running)


class TaskAdded(NamedTuple):
    """A task was added from inside a task (the user process makes its handle)."""

    tag: str
    task_id: int
    name: str | None
    due_ns: int
    key: str | None
    next_wall_ns: int | None

    @staticmethod
    def wire(task_id: int, name: str | None, due_ns: int, key: str | None, next_wall_ns: int | None) -> Message:
        return (TASK_ADDED, task_id, name, due_ns, key, next_wall_ns)


class TaskChanged(NamedTuple):
    """A task was paused, resumed or realigned (not by a run's end)."""

    tag: str
    task_id: int
    state: str
    """"paused" or "pending"."""
    next_due_ns: int | None
    next_wall_ns: int | None

    @staticmethod
    def wire(task_id: int, state: str, next_due_ns: int | None, next_wall_ns: int | None) -> Message:
        return (TASK_CHANGED, task_id, state, next_due_ns, next_wall_ns)


class Answer(NamedTuple):
    """The answer to a request (``Pause``, ``Resume``, ``Cancel``, ``Stats``)."""

    tag: str
    request: int
    value: Any

    @staticmethod
    def wire(request: int, value: Any) -> Message:
        return (ANSWER, request, value)


class WorkerChanged(NamedTuple):
    """A worker started, exited (retired or killed by the engine) or crashed."""

    tag: str
    what: str
    """"started", "exited" or "crashed"."""
    slot: int | None
    worker: Any
    exitcode: int | None

    @staticmethod
    def wire(what: str, slot: int | None, worker: Any, exitcode: int | None) -> Message:
        return (WORKER_CHANGED, what, slot, worker, exitcode)


class Log(NamedTuple):
    """A line for the user process's ``procsched`` logger."""

    tag: str
    level: int
    message: str

    @staticmethod
    def wire(level: int, message: str) -> Message:
        return (LOG, level, message)


class AdoptKey(NamedTuple):
    """Another scheduler on the store added the keyed task ``key``: adopt it."""

    tag: str
    key: str

    @staticmethod
    def wire(key: str) -> Message:
        return (ADOPT_KEY, key)


class Closed(NamedTuple):
    """The last event: the dispatcher has stopped."""

    tag: str

    @staticmethod
    def wire() -> Message:
        return (CLOSED,)


# Tags. Each channel's are distinct; a message's tag is its first item.
# commands
ADD: Final = "add"
DEFINE: Final = "define"
ADOPT: Final = "adopt"
ADOPT_SHAPE: Final = "shape"
ADOPT_ROW: Final = "row"
UNLOADABLE: Final = "unloadable"
ADOPT_AGAIN: Final = "adopt_again"
PAUSE: Final = "pause"
RESUME: Final = "resume"
CANCEL: Final = "cancel"
RUN_NOW: Final = "run_now"
BACKFILL: Final = "backfill"
STATS: Final = "stats"
SHUTDOWN: Final = "shutdown"
WALL_STEP: Final = "wall_step"
# orders
RUN: Final = "run"
RUN_HEADER: Final = "run+"
REPLY: Final = "reply"
REFUSAL: Final = "error"
CHECKED: Final = "checked"
# reports (and ADD, CANCEL)
STARTED: Final = "started"
SKIPPED: Final = "skipped"
STALLED: Final = "stalled"
DONE: Final = "done"
# in-process reports
FINISHED: Final = "finished"
EXITED: Final = "exited"
# events
RUN_STARTED: Final = "started"
RUN_ENDED: Final = "run"
RUN_SKIPPED: Final = "skip"
TASK_CANCELLED: Final = "cancelled"
TASK_ADDED: Final = "added"
TASK_CHANGED: Final = "state"
ANSWER: Final = "answer"
WORKER_CHANGED: Final = "worker"
LOG: Final = "log"
ADOPT_KEY: Final = "adopt_key"
CLOSED: Final = "closed"

#: Every record by channel, for the tests' round trip (and the reader's map).
COMMANDS: Final = (
    Add,
    Define,
    Adopt,
    AdoptShape,
    AdoptRow,
    Unloadable,
    AdoptAgain,
    Pause,
    Resume,
    Cancel,
    RunNow,
    Backfill,
    Stats,
    Shutdown,
    WallStep,
)
ORDERS: Final = (RunOrder, RunHeader, Reply, Refusal, Checked)
REPORTS: Final = (Started, Skipped, Stalled, Done, Add, Cancel)
IN_PROCESS: Final = (Finished, Exited)  # (and _ray_messages.RAY, on a Ray carrier's queue)
EVENTS: Final = (
    RunStarted,
    RunEnded,
    RunSkipped,
    TaskCancelled,
    TaskAdded,
    TaskChanged,
    Answer,
    WorkerChanged,
    Log,
    AdoptKey,
    Closed,
)


def tag_of(record: type[Any]) -> str:
    """A record's tag: the first item of the message its encoder makes."""
    sample = record.wire(*[None] * (len(record._fields) - 1))
    return str(sample[0])
