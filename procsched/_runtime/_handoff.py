"""Handing runs to workers: the pool's slots, runs given ahead of need, and taking them back.

    Engine.tick ──▶ _assign (a slot's run) ──▶ Durable.hold? ──▶ carrier.send_run
               ──▶ _fill (prefetch: runs queued behind a busy worker's run)
               ──▶ _give_early (an idle worker, a run due within early_ns)
    cancel / a crash / a run due meanwhile ──▶ _take_back ──▶ carrier.revoke ──▶ staged (given again later)

Prefetch (a carrier with ``prefetch > 0``): when more runs are due than
workers are idle, a busy worker is given up to ``prefetch`` runs ahead
(``Slot.queue``), which it starts in order as soon as its current run ends,
with no round trip through here. What keeps that exact is the carrier's
atomic hand-off: ``revoke(worker, run)`` takes back the *last* run given to
a worker and answers True only if the worker will never start it (for
processes, a ticket byte that either the worker or the dispatcher reads
first). So:

- a cancel of a queued run revokes it (and the runs queued behind it, which
  go back to ``staged``): True means it never starts; if the worker got to
  it first it was running, and the cancel is decided as for a running run;
- a crash costs only the run the worker had started; the runs queued behind
  it are revoked from the dead worker and go back to ``staged`` untouched;
- a timeout counts from the run's real start (the head of the queue gets its
  deadline when it becomes the head, refined by the carrier's ``started``);
- priority order: prefetch only runs while no live task has a priority
  other than 0 (``prio``), so a run that becomes due later can never rank
  ahead of a queued one (equal priority: it is due later, so it ranks behind
  it). The first task with another priority revokes every queued run back to
  ``staged``, and ``_claim`` merges ``staged`` with the core by rank, so no
  run passes another it should not. (Revoking on each injection instead
  would need a peek at the core's best due run, which the core does not
  offer; and the decision is simple to test.)
- ``max_worker_memory`` turns prefetch off; ``max_tasks_per_worker`` bounds
  the queue so a worker's last run is never followed by one it will not run.

With a durable store (``Durable.hold``, ``_durable/_journal.py``) keyed runs are held
until the transaction recording their start has committed, queued ones
too: a worker's runs are sent in the order given, so one held run holds
the runs given after it. A held run was never sent, so taking it back
(``Durable.withdraw``) always succeeds and the worker has nothing to pass over; a
claimed run taken back that then ends unstarted (cancelled) is reported to
the store (``Durable.unstarted``), which records it so.

Early hand-off (a carrier with ``early_ns > 0``, which must also revoke):
an idle worker is given the next run up to ``early_ns`` before it is due;
the worker waits for the due time itself and then takes the run's ticket,
so the run starts on time without the dispatcher's wake-up and a pipe in
between. Until then it is revocable like a queued run: a cancel takes it
back (True: it never starts), and so does any other run becoming due
meanwhile (it would otherwise wait behind a run due later). The worker
passes over a taken-back run when its wait ends, so a run due meanwhile
that finds no other idle worker starts up to ``early_ns`` late (3 ms by
default), never after the run taken back.
"""

from __future__ import annotations

import collections
import heapq
import itertools
from typing import Any

from .._core import Policy, Run, SchedulerCore
from ._carrier import Carrier
from ._messages import RUN_STARTED, Message, RunStarted, view
from ._store_hooks import Durable


class Slot:
    """One place in the pool, filled by successive workers."""

    __slots__ = (
        "index",
        "worker",
        "run",
        "given_at",
        "deadline",
        "loading",
        "runs",
        "restarts",
        "streak",
        "respawn_at",
        "note",
        "queue",
        "unskipped",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.worker: Any = None  # None while waiting to respawn
        self.run: Run | None = None  # the run it holds (started or about to be), queued runs apart
        self.given_at = 0  # when ``run`` became its run (given, or its start reported)
        self.deadline: int | None = None  # the run's timeout deadline
        self.loading = False  # the deadline is the load grace's: the run has not started yet
        self.runs = 0  # runs by the current worker
        self.restarts = 0
        self.streak = 0  # crashes in a row
        self.respawn_at: int | None = None
        self.note = ""  # "stopped", "backoff", ... for stats
        self.queue: collections.deque[Run] = collections.deque()  # prefetched: runs given after ``run``
        # Revoked runs the worker has not passed over yet: until it has, it
        # gets nothing new (a new run's ticket could be taken for a revoked one).
        self.unskipped = 0


class Handoff:
    """What ``Engine`` does to hand runs over and take them back (see the
    module docstring); the engine's state it works on is declared here."""

    core: SchedulerCore
    carrier: Carrier
    durable: Durable
    slots: list[Slot]
    events: list[Message]
    policy: Policy
    prefetch: int
    early_ns: int
    prio: dict[int, int]  # live tasks whose priority is not 0 (priority policies only)
    staged: list[tuple[Any, int, Run]]  # heap (rank, n, run): claimed runs taken back, not started
    announced: set[tuple[int, int, int]]  # staged runs whose RunStarted the user has heard
    _staged_n: itertools.count[int]
    parked: list[Run]
    held: dict[int, int]
    closing: bool
    max_tasks_per_worker: int | None
    max_worker_memory: int | None
    load_grace_ns: int | None

    def _claim(self, now: int) -> Run | None:
        """The next run to start (``Engine._claim``)."""
        raise NotImplementedError

    def _fill(self, now: int) -> None:
        """Prefetch: give busy workers runs ahead, one level of queue at a
        time across the pool, while runs are due (see the module docstring)."""
        if self.prio or self.max_worker_memory is not None or self.closing:
            return
        limit = self.max_tasks_per_worker
        for depth in range(self.prefetch):
            for slot in self.slots:
                if slot.run is None or slot.unskipped or len(slot.queue) != depth or slot.note:
                    continue
                if limit is not None and slot.runs + 2 + depth > limit:
                    continue  # its last run must not be followed by one it will not run
                run = self._claim(now)
                if run is None:
                    return
                slot.queue.append(run)
                if not self.durable.hold(slot.worker, run):
                    self.carrier.send_run(slot.worker, run)

    def _steal(self, now: int) -> Run | None:
        """An idle worker while runs wait queued behind busy ones (a long
        run, a hang): take them back, so no run waits while a worker idles."""
        victim = max(self.slots, key=lambda s: len(s.queue))
        if not victim.queue or not self._revoke_tail(victim, len(victim.queue)):
            return None
        return self._claim(now)

    def _early_ok(self) -> bool:
        return bool(self.early_ns) and not (
            self.prio or self.parked or self.staged or self.held or self.closing or self.durable.active
        )

    def _is_early(self, slot: Slot, now: int) -> bool:
        """The slot's run was given before its due time, which has not come."""
        return slot.run is not None and slot.given_at < slot.run.scheduled_ns and now < slot.run.scheduled_ns

    def _give_early(self, due: int, now: int) -> bool:
        """Give idle workers the runs due by ``due`` (within ``early_ns``)."""
        given = False
        for slot in self.slots:
            if slot.worker is None or slot.run is not None or slot.unskipped or slot.note:
                continue
            run = self.core.claim(due)
            if run is None:
                break
            self._assign(slot, run, now)
            self.carrier.send_run(slot.worker, run)
            given = True
            nxt = self.core.next_deadline()
            if nxt is None or nxt - self.early_ns > now:
                break
            due = nxt
        return given

    def _assign(self, slot: Slot, run: Run, now: int) -> None:
        """``run`` is the slot's run from now (sent now, or queued and next)."""
        slot.run, slot.given_at = run, now
        slot.deadline = None
        slot.loading = False
        if run.timeout_ns is not None:
            slot.loading = self.load_grace_ns is not None
            slot.deadline = now + run.timeout_ns + (self.load_grace_ns or 0)
        if self.announced and (run.task_id, run.run, run.attempt) in self.announced:
            self.announced.discard((run.task_id, run.run, run.attempt))
            return  # given early, taken back, given again: the user heard of it the first time
        self.events.append(RunStarted.wire(run.task_id, run.run, slot.worker.ident, run.cause))

    def _revoke_tail(self, slot: Slot, count: int) -> int:
        """Take back up to ``count`` of the slot's queued runs, last first,
        into ``staged``; stop at the first one its worker has started."""
        done = 0
        while done < count and slot.queue:
            if not self._revoke(slot, slot.queue[-1]):
                break
            self._stage(slot.queue.pop())
            done += 1
        return done

    def _revoke(self, slot: Slot, run: Run) -> bool:
        """Take back ``run``, the last run given to the slot's worker: held
        (never sent) or, through the carrier, not started (the worker then
        passes over it: ``unskipped``)."""
        if self.durable.withdraw(slot.worker, run):
            return True
        if self.carrier.revoke(slot.worker, run):
            slot.unskipped += 1
            return True
        return False

    def _take_back(self, slot: Slot, head: bool) -> list[Run]:
        """Take back all the slot's queued runs (and its current run, with
        ``head``) that its worker has not started; return the ones it has,
        current run first (they stay where they are)."""
        if slot.run is None:
            return []
        self._revoke_tail(slot, len(slot.queue))
        if head and not slot.queue and self.prefetch and self._revoke(slot, slot.run):
            self._unannounce(slot.run)
            self._stage(slot.run)
            slot.run = slot.deadline = None
            slot.loading = False
            return []
        return [slot.run, *slot.queue]

    def _take_back_all(self, _reason: Any) -> None:
        for slot in self.slots:
            if slot.queue:
                self._revoke_tail(slot, len(slot.queue))

    def _take_back_task(self, task_id: int) -> Run | None:
        """The task's run if it was given ahead and is now taken back (never
        started), removed from ``staged``; else None."""
        for slot in self.slots:
            for i, run in enumerate(slot.queue):
                if run.task_id == task_id:
                    self._revoke_tail(slot, len(slot.queue) - i)
                    break
        for i, (_, _, run) in enumerate(self.staged):
            if run.task_id == task_id:
                return self._unstage(i)
        return None

    def _unstage(self, i: int) -> Run:
        """Remove and return ``staged[i]`` (no longer to be given again)."""
        run = self.staged[i][2]
        self.staged[i] = self.staged[-1]
        self.staged.pop()
        heapq.heapify(self.staged)
        self.announced.discard((run.task_id, run.run, run.attempt))
        return run

    def _unannounce(self, run: Run) -> None:
        """``run`` (the slot's current run, so announced by ``_assign``) is
        taken back: take its run_started back if the user has not heard it,
        else remember that it was heard."""
        if not self._drop_started(run):
            self.announced.add((run.task_id, run.run, run.attempt))

    def _drop_started(self, run: Run) -> bool:
        """Take ``run``'s run_started out of the turn's events; False if it
        is not there (flushed to the user already)."""
        for i in range(len(self.events) - 1, -1, -1):
            ev = self.events[i]
            if (
                ev[0] == RUN_STARTED
                and (started := view(RunStarted, ev)).task_id == run.task_id
                and started.run == run.run
            ):
                del self.events[i]
                return True
        return False

    def _stage(self, run: Run) -> None:
        heapq.heappush(self.staged, (self._rank(run), next(self._staged_n), run))

    def _rank(self, run: Run) -> tuple[int, ...]:
        """Where ``run`` stands among due runs under the policy (lower first)."""
        if self.policy is Policy.PRIORITY:
            return (-self.prio.get(run.task_id, 0), run.scheduled_ns)
        if self.policy is Policy.DUE:
            return (run.scheduled_ns, -self.prio.get(run.task_id, 0))
        return (run.scheduled_ns,)
