"""The console's read model: named records in, named records out.

Both sources (the running program, a store) answer with these records; the
HTML pages and the JSON API are two views of them (``_app``). Times are
aware UTC datetimes; durations are seconds.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

#: Outcomes a run or a slot may show (DESIGN: RunInfo.outcome, and "skipped").
OUTCOMES = ("ok", "error", "crashed", "timeout", "cancelled", "skipped")
#: The actions a job offers (DESIGN "The console"), by URL segment.
ACTIONS = ("pause", "resume", "cancel", "run-now", "backfill")
#: The prefix of an unkeyed task's reference (``~12``: task id 12).
UNKEYED = "~"
#: Runs kept per task by the program source (the store keeps its own ``keep_runs``).
RUNS_KEPT = 100
#: Where the console listens unless told otherwise (loopback: this machine only).
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
#: The environment variable that sets the access token.
TOKEN_ENV = "PROCSCHED_WEB_TOKEN"
#: What a run-now or backfill request is, as it stands (``Request.state``).
REQUEST_STATES = ("asked", "taken", "done", "refused")


class ConsoleError(Exception):
    """A request the console refuses; ``status`` is the HTTP status to answer."""

    status = 409

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(ConsoleError):
    status = 404


class BadRequest(ConsoleError):
    status = 400


class Refused(ConsoleError):
    """The source cannot do this action (the task's state, or the feature is missing)."""

    status = 409


@dataclass(frozen=True, slots=True)
class Job:
    """One task, as the jobs page and ``GET /api/jobs`` show it.

    ``ref`` addresses it in URLs: the key, or ``~ID`` for an unkeyed task.
    ``held_by`` is who runs it now: ``"host/pid"`` (``None``: nobody), with
    `` (lease expired)`` or `` (gone)`` when that instance is not alive;
    ``kept_by`` is the instance that claimed its last run (over a store: the
    one that keeps it, the others have it on standby), said the same way.
    """

    ref: str
    key: str | None
    name: str
    state: str
    paused: bool
    schedule: str
    zone: str | None
    next_run_at: datetime | None
    last_outcome: str | None
    held_by: str | None
    runs: int
    unloadable: str | None = None
    kept_by: str | None = None

    def api(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "ref": self.ref,
            "name": self.name,
            "state": self.state,
            "paused": self.paused,
            "schedule": self.schedule,
            "zone": self.zone,
            "next_run_at": iso(self.next_run_at),
            "last_outcome": self.last_outcome,
            "held_by": self.held_by,
            "kept_by": self.kept_by,
            "runs": self.runs,
            "unloadable": self.unloadable,
        }


@dataclass(frozen=True, slots=True)
class Slot:
    """One run (attempt) or one skipped slot of a task.

    ``run`` is None for a skipped slot (``outcome == "skipped"``, ``reason``
    says why); ``outcome`` is None while a run is in flight. ``cause``:
    ``"schedule"``, ``"manual"`` (run now) or ``"backfill"``; ``reason``: a
    skipped slot's (``"overlap"``, ``"misfire"``, ``"late"``, ``"paused"``,
    ``"down"``) or a replaced run's (``"replaced"``). ``worker`` is the
    worker process's pid, ``instance`` the scheduler instance that ran it
    (``"host/pid"``). ``error``, ``traceback`` and ``output`` are the run's
    failure and captured output where the source has them (shown to
    authenticated sessions only: every view of the console is).
    """

    run: int | None
    attempt: int
    outcome: str | None
    reason: str | None
    cause: str | None
    scheduled_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    worker: str | None = None
    error: str | None = None
    traceback: str | None = None
    output: str | None = None
    instance: str | None = None

    @property
    def duration(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()

    @property
    def lateness(self) -> float | None:
        if self.started_at is None or self.scheduled_at is None:
            return None
        return (self.started_at - self.scheduled_at).total_seconds()

    def api(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "attempt": self.attempt,
            "outcome": self.outcome,
            "reason": self.reason,
            "cause": self.cause,
            "scheduled_at": iso(self.scheduled_at),
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "duration": self.duration,
            "lateness": self.lateness,
            "worker": self.worker,
            "instance": self.instance,
            "error": self.error,
            "traceback": self.traceback,
            "output": self.output,
        }


@dataclass(frozen=True, slots=True)
class JobDetail:
    """One job's page (``GET /api/jobs/{key}``): the job, its next slots,
    its last runs and its last slots (runs and skipped slots, newest last).
    ``totals``: over the job's life, attempts by outcome and skipped slots
    by reason (``{"runs": {...}, "skipped": {...}}``; None: the source does
    not keep them)."""

    job: Job
    next_slots: list[datetime]
    runs: list[Slot]
    slots: list[Slot]
    function: str | None = None
    totals: dict[str, dict[str, int]] | None = None

    def api(self) -> dict[str, Any]:
        return {
            **self.job.api(),
            "function": self.function,
            "next_slots": [iso(t) for t in self.next_slots],
            "totals": self.totals,
            "runs": [s.api() for s in self.runs],
            "slots": [s.api() for s in self.slots],
        }


@dataclass(frozen=True, slots=True)
class Worker:
    """One worker of one instance (``pid``/``rss`` None where the runner has none)."""

    instance: str
    slot: int | str
    pid: int | None
    state: str
    rss: int | None
    runs: int
    restarts: int
    task: str | None = None

    def api(self) -> dict[str, Any]:
        return {
            "instance": self.instance,
            "slot": self.slot,
            "pid": self.pid,
            "state": self.state,
            "rss": self.rss,
            "runs": self.runs,
            "restarts": self.restarts,
            "task": self.task,
        }


@dataclass(frozen=True, slots=True)
class Instance:
    """One scheduler process: the running program, or one registered on the store.

    ``holding``: the jobs it runs now; ``keeping``: how many it keeps (claimed
    their last run; None: not known); ``standby``: the jobs it leaves to
    another instance (at most the first 1000 listed; ``standby_count`` is how
    many); ``runner``: where its runs happen; ``workers``: None when the
    instance does not publish them.
    """

    id: str
    host: str
    pid: int
    lease: float | None
    lease_until: datetime | None
    alive: bool
    holding: list[str] = field(default_factory=list)
    standby: list[str] = field(default_factory=list)
    workers: list[Worker] | None = None  # None: the source does not know them
    keeping: int | None = None
    standby_count: int = 0
    runner: str | None = None

    def api(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "lease": self.lease,
            "lease_until": iso(self.lease_until),
            "alive": self.alive,
            "holding": self.holding,
            "keeping": self.keeping,
            "standby": self.standby,
            "standby_count": self.standby_count,
            "runner": self.runner,
            "workers": None if self.workers is None else [w.api() for w in self.workers],
        }


@dataclass(frozen=True, slots=True)
class Request:
    """A run now or a backfill, as it stands.

    Over a store it is a request to the instance that runs the task
    (``id``: the store's request id), carried out at that instance's next
    re-read of the store: ``state`` goes ``"asked"`` -> ``"taken"`` (by
    ``taken_by``, ``"host/pid"``) -> ``"done"`` or ``"refused"`` (``error``
    says why). In the running program it is carried out at once (``id``
    None, ``state`` ``"done"``). ``kind`` is ``"run_now"`` or
    ``"backfill"``; a backfill's ``slots`` are the slots it listed
    (``dry_run``) or runs, known once done; ``run`` is the run a run now
    started, where the source says.
    """

    id: int | None
    ref: str
    kind: str
    state: str
    asked_at: datetime | None = None
    taken_by: str | None = None
    done_at: datetime | None = None
    start: datetime | None = None
    end: datetime | None = None
    dry_run: bool = False
    slots: list[datetime] | None = None
    run: int | None = None
    error: str | None = None

    @property
    def pending(self) -> bool:
        """Not answered yet: its page keeps following it."""
        return self.state in ("asked", "taken")

    def api(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "key": self.ref,
            "kind": self.kind,
            "state": self.state,
            "asked_at": iso(self.asked_at),
            "taken_by": self.taken_by,
            "done_at": iso(self.done_at),
            "start": iso(self.start),
            "end": iso(self.end),
            "dry_run": self.dry_run,
            "slots": None if self.slots is None else [iso(t) for t in self.slots],
            "count": None if self.slots is None else len(self.slots),
            "run": self.run,
            "error": self.error,
        }


class ConsoleSource(abc.ABC):
    """Where the console's data comes from, and where its actions go.

    Methods block (a store read, a request to the dispatcher): the app calls
    them on a worker thread. Each answers records of this module or raises
    a ``ConsoleError`` (``NotFound`` for an unknown ``ref``).
    """

    #: Shown in the page title: what this console watches.
    title: str = "procsched"

    @abc.abstractmethod
    def jobs(self) -> list[Job]:
        """Every task, in a stable order."""

    @abc.abstractmethod
    def job(self, ref: str, limit: int = 50) -> JobDetail:
        """One task with its next 10 slots and its last ``limit`` runs and slots."""

    @abc.abstractmethod
    def instances(self) -> list[Instance]:
        """The scheduler instances (with their workers where known)."""

    @abc.abstractmethod
    def change_mark(self) -> object:
        """A cheap value that differs whenever what the pages show changed
        (a run started or ended, a task added, paused, cancelled...)."""

    @abc.abstractmethod
    def metrics(self) -> bytes:
        """The Prometheus text exposition of this source."""

    def pause(self, ref: str) -> bool:
        raise Refused("this console cannot pause tasks")

    def resume(self, ref: str) -> bool:
        raise Refused("this console cannot resume tasks")

    def cancel(self, ref: str) -> bool:
        raise Refused("this console cannot cancel tasks")

    def run_now(self, ref: str) -> Request:
        """Run the task once now, outside its schedule (or ask for it)."""
        raise Refused("this console cannot run tasks now")

    def backfill(self, ref: str, start: datetime, end: datetime, dry_run: bool) -> Request:
        """Run (or, ``dry_run``, list) the task's slots in ``[start, end)`` (or ask for it)."""
        raise Refused("this console cannot backfill tasks")

    def request(self, ident: int) -> Request:
        """A run now or backfill asked earlier, as it stands (``NotFound``: unknown or forgotten)."""
        raise NotFound(f"no request {ident}: this console carries out its requests at once")

    def close(self) -> None:  # noqa: B027 - optional: a source that holds nothing keeps this default
        """Release what the source holds (a store connection)."""


def iso(when: datetime | None) -> str | None:
    """An aware datetime -> ISO 8601 UTC (``...Z``-free, ``+00:00``), or None."""
    if when is None:
        return None

    return when.astimezone(UTC).isoformat(timespec="milliseconds")
