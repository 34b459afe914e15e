"""Control requests from outside: run now and backfill, carried out by the instance that holds the task.

    procsched run-now KEY --store S / the console / any program
        store.ask(key, "run_now" | "backfill") ──▶ a request row (``_store._control``)
    Journal.turn ──▶ Requests.turn (every re-read interval: lease/3, at most 1 s)
        open_requests(): one read of the open requests' index (with each one's task row)
            the task is live here, not on standby ──▶ take (once among instances, fenced)
                run_now  ──▶ Engine.run_now ──▶ its claim (cause "manual") ──▶ answered {"run": N}
                                                 in the batch that records that claim
                backfill ──▶ Engine.backfill ──▶ answered {"slots": [...]} (the runs follow, in slot order)
                refused (overlap "skip", the task ended, ...) ──▶ answered with the reason
            no such task in the store any more ──▶ take, answer: refused (cancelled or ended)
            the task is unloadable ──▶ take, answer: refused, with why
            anything else (another instance holds it, or it is on its way here) ──▶ left alone

Pause, resume and cancel from outside are no requests: they are writes of
the task's state row, which every instance follows at its re-read
(``_peers.py``). Run now and backfill are: only the instance that runs the
task can start a run of it, and it must happen once.

Each request ends with an answer (``Batch.answer``, in the turn's batch,
fenced): done with a result, or refused with the reason. A run now's answer
goes in the very batch that claims its run, so a crash leaves both or
neither (the request of an instance that died before answering is given
back at its take-over, and a survivor carries it out). A request taken
whose run never starts here (the task was cancelled or ended first, or
this instance shuts down) is answered refused, with why.

Cost: nothing but one indexed read per re-read interval while no request
is open; the engine is touched only for the requests taken.
"""

from __future__ import annotations

import collections
from typing import Any, Protocol

from ..._core import Run, TaskState
from ..._core._task import MANUAL
from ..._errors import StoreError
from ..._store import Batch, ControlRequest, Holder, SQLStore, StoreBatch
from ..._store import _control as control
from .._engine import Engine

#: A run now the task's engine refused (``Engine.run_now`` False).
NOT_RUN = (
    "not run: its overlap policy ('skip') found max_concurrent runs of it running, or it is not a live periodic task"
)


class Journalled(Protocol):
    """What requests read of the dispatcher's journal (``_journal.Journal``)."""

    store: SQLStore
    holder: Holder
    batch: Batch
    keys: dict[int, str]  # live keyed task id -> key
    dead: bool


class Requests:
    """One dispatcher's side of the store's control requests (see the module docstring)."""

    def __init__(self, journal: Journalled, interval_ns: int, standby: dict[int, Any]) -> None:
        self.journal = journal
        self.interval = interval_ns
        self.standby = standby  # Peers.standby: tasks another instance claims (not taken here)
        self.read_at: int | None = None  # monotonic: the next read (the first turn sets it)
        #: task id -> the run-now requests accepted for it, oldest first: each
        #: is answered with the next manual run of the task claimed here.
        self.waiting: dict[int, collections.deque[int]] = {}

    def turn(self, engine: Engine, now: int) -> int:
        """A turn of the dispatcher: read and carry out the open requests if
        it is time; when the next read is due."""
        if self.read_at is None:
            self.read_at = now + self.interval
        elif now >= self.read_at and not self.journal.dead:
            self.read_at = now + self.interval
            self.read(engine, now)
        if self.waiting:
            self._gone(engine)
        return self.read_at

    def read(self, engine: Engine, now: int) -> None:
        """Take the open requests this instance answers, and carry each out (or refuse it)."""
        journal = self.journal
        try:
            found = control.open_requests(journal.store)
            if not found:
                return
            here = {key: tid for tid, key in journal.keys.items() if tid not in self.standby}
            ids = [r.id for r in found if r.key in here or not r.stored or r.unloadable is not None]
            taken = control.take(journal.store, journal.holder, ids)
        except StoreError as exc:
            engine.log(40, f"the store: reading control requests failed ({exc})")
            return
        for request in taken:
            tid = here.get(request.key)
            if tid is None or engine.state(tid) is None:
                self._refuse(request.id, _why_not(request, found))
            else:
                self._carry_out(engine, tid, request, now)

    def _carry_out(self, engine: Engine, tid: int, request: ControlRequest, now: int) -> None:
        if request.kind == "run_now":
            self._align(engine, tid, request.key)
            if engine.run_now(tid, now):  # answered with its claim (``claimed``)
                self.waiting.setdefault(tid, collections.deque()).append(request.id)
            else:
                self._refuse(request.id, NOT_RUN)
            return
        if request.start_ns is None or request.end_ns is None:  # (the store's ask() requires both)
            self._refuse(request.id, "a backfill needs a start and an end")
            return
        slots = engine.backfill(tid, request.start_ns, request.end_ns, request.dry_run, now)
        if isinstance(slots, str):
            self._refuse(request.id, slots)
        else:  # its runs follow one after another, each claimed like any (cause "backfill")
            self.journal.batch.answer(request.id, result={"slots": slots})

    def _align(self, engine: Engine, tid: int, key: str) -> None:
        """A paused task's run numbers follow the store's before a run now:
        a scheduled run claimed here as the pause came is lost to it (the
        store holds scheduled claims of a paused task), and a paused task is
        not realigned after a lost claim (``Peers.apply``), so its next run
        here would be numbered past the store's next claim and be lost too."""
        if engine.state(tid) is not TaskState.PAUSED:
            return
        try:
            stored = self.journal.store.get(key)
        except StoreError as exc:  # the run is numbered as the engine has it (a claim the store may refuse)
            engine.log(30, f"the store: reading {key!r} before a run now failed ({exc})")
            return
        if stored is not None and stored.holder is None and engine.next_claim(tid) != (stored.state.run_count + 1, 1):
            engine.continue_runs(tid, stored.state.run_count)

    def claimed(self, batch: StoreBatch, run: Run) -> None:
        """A keyed run's claim goes into ``batch``: if it is a manual run
        asked for by a request, its answer goes with it."""
        waiting = self.waiting.get(run.task_id)
        if waiting and run.cause == MANUAL:
            batch.answer(waiting.popleft(), result={"run": run.run})
            if not waiting:
                del self.waiting[run.task_id]

    def _gone(self, engine: Engine) -> None:
        """Requests accepted for tasks that ended before their run started: refused."""
        for tid in [t for t in self.waiting if engine.state(t) is None]:
            for rid in self.waiting.pop(tid):
                self._refuse(rid, "the task was cancelled or ended before the run started")

    def closing(self) -> None:
        """Shutdown: the runs asked for and not started here never start."""
        for rids in self.waiting.values():
            for rid in rids:
                self._refuse(rid, "the instance shut down before the run started")
        self.waiting.clear()

    def _refuse(self, rid: int, why: str) -> None:
        self.journal.batch.answer(rid, error=why)


def _why_not(request: ControlRequest, found: list[control.OpenRequest]) -> str:
    seen = next((r for r in found if r.id == request.id), None)
    if seen is not None and seen.unloadable is not None:
        return f"no instance can run {request.key!r}: {seen.unloadable}"
    return f"no task {request.key!r} in the store any more (cancelled, or it ended)"
