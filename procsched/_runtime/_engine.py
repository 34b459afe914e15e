"""The dispatch engine: the core plus the pool's bookkeeping, for any carrier.

    commands (Add, Cancel, ...) ──▶ Engine.add / cancel / shutdown ─┐
    reports (Done, Started, ...) ──▶ Engine.finished / started ─────┤──▶ SchedulerCore (decisions)
    deaths                       ──▶ Engine.worker_exited ──────────┘
                                     Engine.tick(now) ──▶ Carrier: spawn / send_run / kill / revoke
                                                      ──▶ Durable: hold / withdraw / unstarted (a store)
                                                      ──▶ Engine.events: RunStarted, RunEnded, ... (the user's)

The engine owns the core and every piece of pool state (which worker runs
which run, deadlines, restarts, counters). It neither blocks nor reads a
clock: a *carrier* (processes: ``_process_carrier.py`` on the loop of
``_dispatcher.py``; threads: ``_threads.py``; Ray: ``_ray.py``) waits for
input, feeds it here with the time, carries out what the engine asks
through the ``Carrier`` interface (``_carrier.py``), and ships ``events``
(the records of ``_messages.py``) to the user process. So the process and
thread runners share the decisions, not just the core. A durable store
comes in through the constructor as ``Durable`` hooks (``NO_STORE``: none),
and asks the engine what it needs through its methods (never its core).

Every run is known by (task id, run number). A result or a death is matched
against the run its worker holds, so a late report can never land on a later
run, and a run that ends is reported exactly once.

Runs given ahead of need - prefetch queues behind a busy worker's run,
early hand-off to an idle worker, a durable store holding keyed runs until
their start is recorded - and taking them back are in ``_handoff.py``,
whose ``Handoff`` this class extends; the pool's slots are there too. Which
run starts next, and the tasks held back meanwhile (crash loops, a store
outage), are in ``_holds.py`` (``Holds``, between the two).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from .. import _tz
from .._core import ONCE, CancelResult, Kind, Policy, RetryPolicy, Run, Schedule, SchedulerCore, TaskState
from .._core._state import OUTCOMES
from .._core._task import SkipRecord
from .._core._units import NS
from .._errors import TaskTimeoutError, WorkerCrashedError
from .._events import signal_name
from .._handle import RunError
from ._carrier import Carrier
from ._handoff import Slot
from ._holds import BACKOFF_AFTER, BACKOFF_FIRST_NS, BACKOFF_MAX_NS, Holds, label
from ._messages import (
    BLOB_EXC,
    BLOB_NONE,
    Add,
    Done,
    Log,
    Message,
    RunEnded,
    RunSkipped,
    TaskCancelled,
    TaskChanged,
    WorkerChanged,
)
from ._store_hooks import NO_STORE, Durable

#: Time a killed worker gets between SIGTERM and SIGKILL.
KILL_GRACE_NS = 500_000_000
#: While runs are in flight, workers' liveness is checked with psutil this often.
HEALTH_EVERY_NS = NS
#: A run's timeout counts from the moment its code starts (the carrier's
#: ``started``). Before that - a fresh worker starting, the task's module
#: being imported, its arguments unpickled - a run with a timeout gets this
#: long on top of it; one that has not started by then is a timeout too, so a
#: worker stuck importing cannot hang a run forever.
LOAD_GRACE_NS = 30 * NS
#: While a calendar task is pending, a carrier's loop wakes at least this
#: often to compare the wall clock with the monotonic one (a step, a
#: suspend): a bounded wait, not a poll. Every other wake-up compares them too.
WALL_CHECK_S = 2.0
#: Distinct schedules kept decoded (``Engine._schedule``): a cron expression
#: is parsed once per process, not once per task.
SCHEDULES_KEPT = 1024

INFO, WARNING = 20, 30
PAUSED, PENDING = TaskState.PAUSED.value, TaskState.PENDING.value


class Engine(Holds):
    """See the module docstring. Driven by one thread; never blocks."""

    def __init__(
        self,
        carrier: Carrier,
        *,
        workers: int,
        policy: Policy,
        max_tasks_per_worker: int | None = None,
        max_worker_memory: int | None = None,
        kill_grace_ns: int = KILL_GRACE_NS,
        default_timeout_ns: int | None = None,
        load_grace_ns: int = LOAD_GRACE_NS,
        durable: Durable = NO_STORE,
        limits: Mapping[str, int] | None = None,
    ) -> None:
        self.carrier = carrier
        self.durable = durable  # a store's hooks (NO_STORE: none)
        self.default_timeout_ns = default_timeout_ns  # for tasks added without one (from inside tasks)
        # Carriers that report the real start of a run get the load grace.
        self.load_grace_ns = load_grace_ns if carrier.reports_start else None
        self.core = SchedulerCore(policy, limits)  # limits: shared by group (_core/_limits.py)
        self.slots = [Slot(i) for i in range(workers)]
        self.max_tasks_per_worker = max_tasks_per_worker
        self.max_worker_memory = max_worker_memory
        self.kill_grace_ns = kill_grace_ns
        self.dying: dict[Any, int] = {}  # worker -> time to kill it hard
        self.counts = dict.fromkeys(OUTCOMES, 0)
        self.spawned = 0
        #: The outbox: events for the user process, in order (``_messages.py``);
        #: the carrier's loop takes them each turn (``take_events``) - through
        #: the durable journal, which holds back what waits for a commit.
        self.events: list[Message] = []
        self.closing = False  # shutdown asked: run out the one-shots, then stop
        self.closed = False  # every worker stopped: the carrier may exit
        self._health_at: int | None = None
        # Crash loops (see _track_crash_loop): a periodic task whose runs keep
        # killing their workers is held back, not the pool.
        self.task_crashes: dict[int, int] = {}  # task id -> runs crashed in a row
        self.held: dict[int, int] = {}  # task id -> when its next run may start
        self.parked: list[Run] = []  # runs claimed while their task was held (or yielding: see _claim)
        self.behind: set[int] = set()  # periodic tasks whose next run was due before their last one ended
        # Prefetch (see the module docstring).
        self.prefetch = carrier.prefetch
        if self.prefetch and durable.prefetch is not None:
            self.prefetch = durable.prefetch
        self.policy = Policy(policy)
        self.ranked = self.policy is not Policy.FIFO
        self.prio: dict[int, int] = {}  # live tasks whose priority is not 0 (priority policies only)
        self.staged: list[tuple[Any, int, Run]] = []  # heap (rank, n, run): claimed runs taken back, not started
        #: Staged runs whose run_started the user has heard already (a run
        #: handed over early, taken back after the events were flushed):
        #: given again, they are not announced twice.
        self.announced: set[tuple[int, int, int]] = set()
        self._staged_n = itertools.count()
        self.interrupting: set[tuple[int, int]] = set()  # queued runs cancelled with interrupt after they started
        self.early_ns = carrier.early_ns if self.prefetch else 0
        self._schedules: dict[object, Schedule] = {}  # see _schedule

    # -- questions (what the durable layer and the carriers ask) ------------------

    def state(self, task_id: int) -> TaskState | None:
        """A task's state; None once it has ended (or was never added)."""
        return self.core.state(task_id)

    def running(self, task_id: int) -> int:
        """How many runs of the task are in flight (also of a task cancelled
        or paused while they run: its state says CANCELLED or PAUSED)."""
        return self.core.running(task_id)

    def due(self, task_id: int) -> int | None:
        """A PENDING task's due time (monotonic ns), or None."""
        return self.core.due(task_id)

    def next_wall(self, task_id: int) -> int | None:
        """A PENDING task's next run on the wall clock (ns since the epoch), or None."""
        return self.core.next_wall(task_id)

    def schedule_of(self, task_id: int) -> Schedule | None:
        return self.core.schedule(task_id)

    def next_claim(self, task_id: int) -> tuple[int, int] | None:
        """(run, attempt) of the task's next claim, or None if it has none queued."""
        return self.core.next_claim(task_id)

    @property
    def pending(self) -> int:
        """Tasks not yet finished or cancelled."""
        return len(self.core)

    @property
    def watches_wall(self) -> bool:
        """A calendar task is pending: the carrier's loop must compare the
        wall clock with the monotonic one at least every WALL_CHECK_S."""
        return bool(self.core.calendars)

    def emit(self, event: Message) -> None:
        """An event from elsewhere in the dispatcher (the durable layer), in
        order with the engine's own."""
        self.events.append(event)

    def take_events(self) -> list[Message]:
        """The events since the last take, in order (the outbox is emptied)."""
        if self.core.skips:
            self._skipped_out()
        events, self.events = self.events, []
        return events

    def _skipped_out(self, task_id: int | None = None, after: int | None = None, before: int | None = None) -> None:
        """The core's skipped slots, as RunSkipped events (in order); of
        task ``task_id``'s paused slots, those at or before ``after`` and at
        or after ``before`` (wall ns) are left out (see ``resume``)."""
        for skip in self.core.take_skips():
            if task_id is not None and skip.task_id == task_id and skip.reason == "paused":
                kept: SkipRecord | None = skip
                if after is not None:
                    kept = _slots_after(skip, after)
                if kept is not None and before is not None:
                    kept = _slots_before(kept, before)
                if kept is None:
                    continue
                skip = kept
            state = None if skip.state is None else skip.state.value
            if skip.state is not None:
                self.prio.pop(skip.task_id, None)
                self._forget_crash_loop(skip.task_id)
            self.events.append(
                RunSkipped.wire(
                    skip.task_id, skip.scheduled_ns, skip.wall_ns, skip.reason, state, skip.period_ns, skip.slots
                )
            )

    def _replace_runs(self, now: int) -> None:
        """End the runs the core asked to end for a newer slot ("replace"), as
        ``cancel(interrupt=True)`` ends a run: its worker killed, the run
        reported "cancelled" (its reason "replaced")."""
        for task_id, run_no in self.core.take_replaced():
            slot = next(
                (s for s in self.slots if s.run is not None and s.run.task_id == task_id and s.run.run == run_no),
                None,
            )
            if slot is not None:
                self.log(INFO, f"task {task_id} run {run_no} replaced by a newer slot (overlap='replace')")
                self._abort_run(slot, "cancelled", now)
            else:  # queued behind a worker's run: ended when it becomes the head
                self.interrupting.add((task_id, run_no))

    def run_now(self, task_id: int, now: int) -> bool:
        """One extra run of a task now (see ``SchedulerCore.run_now``)."""
        return self.core.run_now(task_id, now)

    def backfill(self, task_id: int, start_wall_ns: int, end_wall_ns: int, dry_run: bool, now: int) -> list[int] | str:
        """The task's slots in [start, end) up to now (wall ns), run one after
        another unless ``dry_run``; or why not (a ValueError's message)."""
        try:
            slots = self.core.backfill_slots(task_id, start_wall_ns, end_wall_ns, now)
        except ValueError as exc:
            return str(exc)
        if not dry_run:
            self.core.backfill(task_id, slots, now)
        return [wall for _, wall in slots]

    # -- what a durable store changes (see _durable/_journal.py, _durable/_peers.py) ------

    def continue_runs(self, task_id: int, runs: int, attempt: int = 1, retry_due: int = 0, base: int = 0) -> None:
        """A task restored from the store goes on from there (see ``SchedulerCore.continue_runs``)."""
        self.core.continue_runs(task_id, runs, attempt, retry_due, base)

    def realign(
        self, task_id: int, runs: int, attempt: int, due: int, slot_wall: int | None, base: int | None = None
    ) -> bool:
        """Bring a PENDING task to the store's next claim (see
        ``SchedulerCore.realign``); its handle hears its new next run."""
        if not self.core.realign(task_id, runs, attempt, due, slot_wall, base):
            return False
        self.events.append(TaskChanged.wire(task_id, PENDING, self.core.due(task_id), self.core.next_wall(task_id)))
        return True

    def stand_by(self, task_id: int) -> bool:
        """Hold a PENDING task back quietly (its handle is not told): another
        scheduler on the store runs it. True if it is held now."""
        return self.core.pause(task_id)

    def wake(self, task_id: int, now: int) -> bool:
        """End ``stand_by`` quietly (the slots another scheduler ran are no
        skips here); True if it was held."""
        return self.core.resume(task_id, now, record=False)

    # -- inputs ------------------------------------------------------------

    def start(self, now: int) -> None:
        for slot in self.slots:
            self._spawn(slot, now)

    def add(
        self, add: Add, task_id: int, payload: Any, now: int | None = None, schedule: Schedule | None = None
    ) -> str | None:
        """Add the task ``add`` describes as ``task_id``, with ``payload``
        (``add.payload``, or the carrier's copy of it); ``now``: when it was
        received, for an add without a due time (a Ray run's); ``schedule``:
        ``add.schedule`` decoded, if the caller has it (a restart's tasks of
        one shape: ``schedule_of`` an earlier one). Returns None,
        or why it cannot be scheduled here (a zone or an expression this
        process reads differently: logged, and its cancellation said)."""
        delay = add.delay_ns
        due = add.due_ns
        if due is None:
            assert now is not None, "an add without a due time counts from its receipt"
            due = now + delay
        timeout = self.default_timeout_ns if add.timeout_ns is None else add.timeout_ns
        priority = add.priority
        if priority and self.ranked and self.prefetch:
            if not self.prio:  # from now on a later run may rank ahead of a queued one
                self._take_back_all(None)
            self.prio[task_id] = priority
        try:
            if add.schedule is None and add.retry is None and add.retry_on is None:  # a plain one-shot: the usual case
                self.core.add(due, priority, ONCE, timeout, payload, add.name, task_id)
                return None
            retry = None if add.retry is None else RetryPolicy.from_wire(add.retry)
            self.core.add(
                due,
                priority,
                self._schedule(add.schedule) if schedule is None else schedule,
                timeout,
                payload,
                add.name,
                task_id,
                retry=retry,
                retry_on=add.retry_on,
                start_wall_ns=add.start_wall_ns,
                first_slot_ns=add.first_slot_wall_ns,
                now=due - delay,
            )
        except Exception as exc:  # noqa: BLE001 - validated at the call; a zone this process reads differently
            why = f"{type(exc).__name__}: {exc}"
            self.log(WARNING, f"task {task_id} ({add.name}) cannot be scheduled here: {why}")
            self.prio.pop(task_id, None)
            self.events.append(TaskCancelled.wire(task_id))
            return why
        return None

    def _schedule(self, wire: object) -> Schedule:
        """A schedule from its wire form, decoded once per distinct form."""
        schedule = self._schedules.get(wire)
        if schedule is None:
            if len(self._schedules) >= SCHEDULES_KEPT:
                self._schedules.clear()
            schedule = self._schedules[wire] = Schedule.from_wire(wire, _tz.zone)  # type: ignore[arg-type]
        return schedule

    def set_wall_offset(self, offset: int, now: int) -> None:
        """The carrier's wall clock minus its monotonic clock, at ``now``;
        calendar tasks follow a step (see SchedulerCore.set_wall_offset)."""
        before = self.core.wall_offset
        if self.core.set_wall_offset(offset, now) and self.core.calendars:
            self.log(INFO, f"the wall clock moved by {(offset - before) / NS:+.3f} s: calendar tasks rescheduled")

    def pause(self, task_id: int, now: int | None = None) -> bool:
        accepted = self.core.pause(task_id)
        if accepted and self.core.state(task_id) is TaskState.RUNNING:
            self.durable.pause_asked(task_id, self.events, True)
            taken = None if now is None else self._take_back_given(task_id, now)
            if taken is not None and now is not None:  # given ahead, never started: it does not start (item 11)
                self.core.skip(task_id, taken.run, now)  # (paused: the pause asked is taken now)
                paused_at = self.core.paused_wall(task_id)  # (its grid goes on from there on resume)
                if not self.durable.unstarted(taken, now, self.events, paused_at):  # (else recorded cancelled)
                    self.events.append(self._paused_over(taken))  # its slot, recorded (the resume's start after it)
        if accepted and self.core.state(task_id) is TaskState.PAUSED:
            self.events.append(TaskChanged.wire(task_id, PAUSED, None, None))
        return accepted

    def resume(
        self,
        task_id: int,
        now: int,
        record: bool = True,
        after_wall: int | None = None,
        before_wall: int | None = None,
    ) -> bool:
        """``record``: the slots passed while paused are recorded skipped
        (False: another scheduler ran the task's grid - see ``Peers.resume``);
        ``after_wall``: only those after it (the store accounts for the rest)
        - all of them, also where the task's grid here stood later (see
        ``SchedulerCore.resume``'s ``since_wall``);
        ``before_wall``: only those before it (another scheduler ran it and
        the slots after: the resume reached it first)."""
        accepted = self.core.resume(task_id, now, record=record, since_wall=after_wall)
        if accepted and self.core.state(task_id) is TaskState.RUNNING:  # the pause asked of its run, taken back
            self.durable.pause_asked(task_id, self.events, False)
        if self.core.skips:  # the slots it was paused over: out now, with the resume (a store journals them)
            self._skipped_out(task_id, after_wall, before_wall)
        if accepted and self.core.state(task_id) is TaskState.PENDING:
            self.events.append(TaskChanged.wire(task_id, PENDING, self.core.due(task_id), self.core.next_wall(task_id)))
        return accepted

    def _paused_over(self, run: Run) -> Message:
        """``run``'s slot, skipped: its task was paused before it started."""
        wall = run.wall_ns if run.wall_ns is not None else run.scheduled_ns + self.core.wall_offset
        return RunSkipped.wire(run.task_id, run.scheduled_ns, wall, "paused", None)

    def paused_over(self, run: Run) -> None:
        """A durable store refused ``run``'s claim because its task is paused
        there (``Peers.lost``): its slot is recorded skipped, "paused"."""
        self.events.append(self._paused_over(run))

    def _take_back_given(self, task_id: int, now: int) -> Run | None:
        """The task's run if it was given ahead (early, held for its claim,
        or queued) or parked (claimed while its task was held back: a store
        outage, a crash loop) and is now taken back, never started; else None."""
        for i, run in enumerate(self.parked):
            if run.task_id == task_id:
                # (a pause asked of it waited for a run that had not started: the shutdown
                # that followed dropped the pause - the fault campaign, seed 316)
                del self.parked[i]
                return run
        if self.early_ns:
            for slot in self.slots:
                if slot.run is not None and slot.run.task_id == task_id and self._is_early(slot, now):
                    self._take_back(slot, head=True)  # given before its due time: still revocable
        if self.durable.active:
            for slot in self.slots:
                if (
                    slot.run is not None
                    and slot.run.task_id == task_id
                    and self.durable.withdraw(slot.worker, slot.run, True)
                ):
                    self._take_back(slot, head=True)  # held, never sent: it never starts
        if self.staged or self.prefetch:
            return self._take_back_task(task_id)
        return None

    def take_back_given(self) -> list[Run]:
        """Take back every run given ahead that no worker has started (a
        stalled or fenced scheduler must not start them unchecked); the
        runs taken back so far (``staged``: given again unless skipped)."""
        for slot in self.slots:
            self._take_back(slot, head=True)
        return [entry[2] for entry in self.staged]

    def cancel(self, task_id: int, interrupt: bool, now: int) -> bool:
        taken = self._take_back_given(task_id, now)
        if taken is not None:  # its run was given ahead and never started: as if it were pending
            self._silent_cancel(taken, now)
            self.events.append(TaskCancelled.wire(task_id))
            return True
        decision = self.core.cancel(task_id, interrupt)
        if decision.accepted:
            self.events.append(TaskCancelled.wire(task_id, decision is not CancelResult.CANCELLED))
        if decision is CancelResult.CANCELLED:
            self._forget_crash_loop(task_id)
        if decision is CancelResult.INTERRUPT:
            running = [s for s in self.slots if s.run is not None and s.run.task_id == task_id]
            for slot in running:  # (several: a task whose runs may overlap)
                self._abort_run(slot, "cancelled", now)
            if not running:  # its run is parked (tick() ends it) or queued and started:
                for s in self.slots:
                    for run in s.queue:
                        if run.task_id == task_id:  # the worker got to it first: ended when it becomes the head
                            self.interrupting.add((task_id, run.run))
        if decision is CancelResult.CANCELLED or decision.accepted and interrupt:
            self.prio.pop(task_id, None)
        return decision.accepted

    def skipped(self, worker: Any) -> None:
        """The worker passed over a revoked run (see ``Slot.unskipped``)."""
        slot = self._slot_of(worker)
        if slot is not None and slot.unskipped:
            slot.unskipped -= 1

    def started(self, worker: Any, task_id: int, run_no: int, at: int) -> None:
        """The worker is about to run the run's code (it is up, the function
        and arguments are loaded): its timeout counts from ``at``."""
        slot = self._slot_of(worker)
        if slot is None or slot.run is None or slot.run.task_id != task_id or slot.run.run != run_no:
            return  # stale
        slot.given_at = at
        slot.loading = False
        if slot.run.timeout_ns is not None:
            slot.deadline = at + slot.run.timeout_ns

    def finished(self, worker: Any, done: Done) -> None:
        """``worker`` reports the end of a run (see ``Done``). A worker no
        longer fit to run tasks (``done.unfit``) is replaced."""
        slot = self._slot_of(worker)
        if slot is None or slot.run is None or slot.run.task_id != done.task_id or slot.run.run != done.run:
            return  # stale: that run was already ended (timed out, interrupted)
        finished = done.finished_ns
        run = slot.run
        slot.run = slot.deadline = None
        slot.loading = False
        slot.runs += 1
        slot.streak = 0
        output = self.carrier.output(worker) if done.output is None else done.output
        self._record(
            run,
            done.outcome,
            done.started_ns,
            finished,
            worker.ident,
            done.blob_kind,
            done.blob,
            output,
            done.matched,
            done.error,
        )
        if self.max_tasks_per_worker is not None and slot.runs >= self.max_tasks_per_worker:
            self._replace(slot, finished, f"recycled after {slot.runs} runs")  # (its queue is empty: see _fill)
        elif self.max_worker_memory is not None:
            rss = self.carrier.rss(worker)
            if rss is not None and rss > self.max_worker_memory:
                self._replace(slot, finished, f"recycled: RSS {rss >> 20} MiB over max_worker_memory")
        elif slot.queue:  # the worker goes on with its next queued run by itself
            head = slot.queue.popleft()
            self._assign(slot, head, finished)
            if (head.task_id, head.run) in self.interrupting:
                self.interrupting.discard((head.task_id, head.run))
                self._abort_run(slot, "cancelled", finished)
        if done.unfit is not None:  # whatever the task did to its process must not reach the next run
            self.replace_worker(worker, finished, done.unfit)

    def skip(self, worker: Any, run: Run, now: int) -> None:
        """A held run (``hold``) that the durable store gave to another
        scheduler (issue 11): it never happened here. The worker is free
        again, nothing is counted, its started event is taken back (the turn
        has not flushed it), and the task goes on to its next slot. A held
        run given ahead (queued, or taken back: ``staged``; ``worker`` None)
        leaves its place."""
        slot = None if worker is None else self._slot_of(worker)
        if slot is not None and slot.run is not None and slot.run is run:
            slot.run = slot.deadline = None
            slot.loading = False
            if slot.queue:  # held behind it, never sent either: the next one is the worker's next run
                self._assign(slot, slot.queue.popleft(), now)
        elif slot is not None and any(q is run for q in slot.queue):
            del slot.queue[next(i for i, q in enumerate(slot.queue) if q is run)]
        elif any(p is run for p in self.parked):  # held back (``hold_back``)
            self.parked = [p for p in self.parked if p is not run]
        else:
            for i, entry in enumerate(self.staged):  # taken back after it was claimed
                if entry[2] is run:
                    self._unstage(i)
                    break
        self._drop_started(run)
        done = self.core.skip(run.task_id, run.run, now)
        if done is None or (done.state is TaskState.CANCELLED and not done.ended):
            return  # cancelled during the claim: its cancellation was said already
        if done.ended:
            self.events.append(TaskCancelled.wire(run.task_id))  # it ended here: another scheduler ran its last run
        elif done.state is TaskState.PAUSED:
            self.events.append(TaskChanged.wire(run.task_id, PAUSED, None, None))
        else:
            wall = done.next_wall_ns if done.next_wall_ns is not None else done.next_due_ns + self.core.wall_offset  # type: ignore[operator]
            self.events.append(TaskChanged.wire(run.task_id, PENDING, done.next_due_ns, wall))

    def replace_worker(self, worker: Any, now: int, why: str) -> None:
        """An idle worker asked to go (e.g. after a MemoryError: whatever the
        task did to its process - a lowered rlimit, a wrecked heap - must not
        reach the next run): retire it and start a fresh one."""
        slot = self._slot_of(worker)
        if slot is not None and (slot.run is None or not self._take_back(slot, head=True)):
            self._replace(slot, now, why)

    def worker_exited(self, worker: Any, exitcode: int | None, now: int, detail: str | None = None) -> None:
        """A worker process (or thread) is gone; ``detail`` says how, where a
        carrier knows better than an exit code (e.g. Ray's error)."""
        if worker in self.dying:
            del self.dying[worker]
            self.events.append(WorkerChanged.wire("exited", None, worker.ident, exitcode))
            return
        slot = self._slot_of(worker)
        if slot is None:
            return
        signame = signal_name(exitcode)
        how = detail or (f"signal {signame}" if signame else f"exit code {exitcode}")
        self.carrier.kill(worker, hard=True)  # whatever it left behind
        self.events.append(WorkerChanged.wire("crashed", slot.index, worker.ident, exitcode))
        # Runs given ahead that it never started go back, untouched; its
        # current run (the head, as without prefetch: given = running) and a
        # queued run it had started (its result lost) crashed with it.
        head = slot.run is not None and self.durable.withdraw(worker, slot.run, True)
        started = self._take_back(slot, head=head)  # a held head was never sent: it goes back too
        slot.queue.clear()
        self._crash_started(started[1:], worker, f"died ({how})", now, exitcode, signame)
        slot.worker = None
        slot.restarts += 1
        if slot.run is not None:
            run, dispatched = slot.run, slot.given_at
            slot.run = slot.deadline = None
            slot.loading = False
            slot.streak += 1
            err = WorkerCrashedError(
                f"worker {worker.ident} died ({how}) while running task {run.task_id} run {run.run}",
                task_id=run.task_id,
                run=run.run,
                pid=worker.ident if isinstance(worker.ident, int) else None,
                exitcode=exitcode,
                signal=signame,
            )
            self.log(WARNING, f"task {label(run)} run {run.run} crashed its worker ({how}); replacing the worker")
            output = self.carrier.output(worker)
            self._record(run, "crashed", dispatched, now, worker.ident, BLOB_EXC, err, output)
        else:
            self.log(WARNING, f"idle worker {worker.ident} died ({how}); replacing it")
        if self.closing and not len(self.core):
            return
        if slot.streak >= BACKOFF_AFTER:
            delay = min(BACKOFF_FIRST_NS << (slot.streak - BACKOFF_AFTER), BACKOFF_MAX_NS)
            slot.respawn_at = now + delay
            slot.note = "backoff"
            self.log(WARNING, f"slot {slot.index}: {slot.streak} crashes in a row; respawn in {delay / 1e6:.0f} ms")
        else:
            # Respawned by the next tick, not here: the carrier can hand the
            # crash to the user first (starting a process takes milliseconds).
            slot.respawn_at = now

    def shutdown(self, cancel_futures: bool, now: int) -> None:
        """No more work: cancel periodic tasks (all pending ones with
        ``cancel_futures``), let running runs and remaining one-shots finish,
        then stop the workers."""
        self.closing = True
        # Runs given ahead are not started: cancelled like pending ones.
        self._take_back_all(None)
        for _, _, run in list(self.staged):
            if cancel_futures or self.core.kind(run.task_id) is not Kind.ONCE:
                self._take_back_task(run.task_id)
                self._silent_cancel(run, now)
                self.events.append(TaskCancelled.wire(run.task_id))
        for task_id, decision in self.core.cancel_all(periodic_only=not cancel_futures):
            if decision.accepted:
                self.events.append(TaskCancelled.wire(task_id, decision is not CancelResult.CANCELLED))
            if decision is CancelResult.CANCELLED:
                self._forget_crash_loop(task_id)

    def abort(self, now: int) -> None:
        """The user process is gone: kill everything now."""
        self.closing = True
        for slot in self.slots:
            if slot.worker is not None:
                self.carrier.kill(slot.worker, hard=True)
                slot.worker = None
        for worker in self.dying:
            self.carrier.kill(worker, hard=True)
        self.dying.clear()
        self.closed = True

    def stats(self, now: int) -> dict[str, Any]:
        workers = []
        for slot in self.slots:
            w = slot.worker
            state = slot.note or ("idle" if slot.run is None else "busy") if w is not None else (slot.note or "down")
            workers.append(
                {
                    "slot": slot.index,
                    "pid": None if w is None else w.ident,
                    "state": state,
                    "rss": None if w is None else self.carrier.rss(w),
                    "runs": slot.runs,
                    "restarts": slot.restarts,
                    "crash_streak": slot.streak,
                    "task": None if slot.run is None else slot.run.task_id,
                    "queued": len(slot.queue),  # runs given ahead (prefetch), not started
                }
            )
        return {
            "pending": len(self.core),
            "running": sum(s.run is not None for s in self.slots),
            "outcomes": dict(self.counts),
            "workers": workers,
            "spawned": self.spawned,
            "closing": self.closing,
            # periodic tasks in a crash loop: task id -> runs crashed in a row
            "crash_loops": {tid: n for tid, n in self.task_crashes.items() if n >= BACKOFF_AFTER},
        }

    # -- the clock ticks -----------------------------------------------------

    def tick(self, now: int) -> int | None:
        """Carry out everything due at ``now``; return when to be called next
        (ns), or None if only an input can change anything."""
        wake: int | None = None
        for worker, kill_at in list(self.dying.items()):
            if kill_at is not None and kill_at <= now:
                self.log(
                    WARNING, f"worker {worker.ident} ignored SIGTERM for {self.kill_grace_ns / 1e6:.0f} ms: SIGKILL"
                )
                self.carrier.kill(worker, hard=True)
                self.dying[worker] = None  # type: ignore[assignment]  # now only waiting for its exit
            elif kill_at is not None:
                wake = _earliest(wake, kill_at)
        for gone in [r for r in self.parked if self.core.state(r.task_id) is not TaskState.RUNNING]:
            # Cancelled while held: the run never started, so it is not reported
            # (the task's cancellation was); the core only needs to let it go.
            self.parked.remove(gone)
            self._forget_crash_loop(gone.task_id)
            self.core.complete(gone.task_id, gone.run, "cancelled", now)
        if self.staged and any(self.core.state(r.task_id) is not TaskState.RUNNING for _, _, r in self.staged):
            for _, _, gone in [e for e in self.staged if self.core.state(e[2].task_id) is not TaskState.RUNNING]:
                self._take_back_task(gone.task_id)  # (cancelled by a path that did not know it was staged)
                self.core.complete(gone.task_id, gone.run, "cancelled", now)
                self._forget_crash_loop(gone.task_id)
                self.durable.unstarted(gone, now, self.events)
        if self.early_ns and any(self._is_early(s, now) for s in self.slots):
            due = self.core.next_deadline()
            if self.staged or self.parked or (due is not None and due <= now):
                for slot in self.slots:  # another run is due now: it must not wait behind one due later
                    if self._is_early(slot, now):
                        self._take_back(slot, head=True)
        busy = False
        for slot in self.slots:
            if slot.worker is None:
                if slot.respawn_at is not None and slot.respawn_at <= now and not self._idle_closing():
                    self._spawn(slot, now)
                if slot.worker is None:  # waiting to respawn (or the respawn just failed)
                    wake = _earliest(wake, slot.respawn_at)
                    continue
            if slot.run is not None:
                if slot.deadline is not None and slot.deadline <= now:
                    self._abort_run(slot, "timeout", now)
                else:
                    busy = True
                    wake = _earliest(wake, slot.deadline)
                    continue
            if slot.unskipped:
                continue  # it has not passed over its revoked runs yet: it says so soon
            run = self._claim(now)
            if run is None and self.prefetch:
                run = self._steal(now)
            if run is None:
                continue
            self._assign(slot, run, now)
            busy = True
            wake = _earliest(wake, slot.deadline)
            if not self.durable.hold(slot.worker, run):
                self.carrier.send_run(slot.worker, run)
        if self.prefetch and busy:
            self._fill(now)
        if any(s.worker is not None and s.run is None for s in self.slots):
            due = self.core.next_deadline()
            if due is not None and self._early_ok():
                if due - self.early_ns <= now:
                    busy = self._give_early(due, now) or busy
                    due = self.core.next_deadline()
                if due is not None and due - self.early_ns > now:
                    due -= self.early_ns
            wake = _earliest(wake, due)
        elif self.early_ns and any(self._is_early(s, now) for s in self.slots):
            wake = _earliest(wake, self.core.next_deadline())  # a run due before it takes it back (above)
        if busy:  # a stopped (SIGSTOP) worker has no sentinel to show it: look
            if self._health_at is not None and self._health_at <= now:
                self._check_health()
                self._health_at = None
            if self._health_at is None:
                self._health_at = now + HEALTH_EVERY_NS
            wake = _earliest(wake, self._health_at)
        else:
            self._health_at = None
        if self._idle_closing() and not busy:
            self._stop_all(now)
            if not self.dying:
                self.closed = True
        for kill_at in self.dying.values():  # including workers killed in this very tick
            wake = _earliest(wake, kill_at)
        for parked in self.parked:
            wake = _earliest(wake, self.held.get(parked.task_id))
        if self.core.skips:  # slots skipped at their due time: out now, not with the next other event
            self._skipped_out()
        return wake

    def _silent_cancel(self, run: Run, now: int) -> None:
        """Cancel the task of a claimed run that never started: the task's
        cancellation is reported, not the run (as for a parked run)."""
        self.core.cancel(run.task_id, True)
        self.core.complete(run.task_id, run.run, "cancelled", now)
        self._forget_crash_loop(run.task_id)
        self.prio.pop(run.task_id, None)
        self.durable.unstarted(run, now, self.events)

    def _idle_closing(self) -> bool:
        return self.closing and not len(self.core)

    # -- internals -------------------------------------------------------------

    def _spawn(self, slot: Slot, now: int) -> None:
        slot.respawn_at = None
        slot.note = ""
        slot.runs = 0
        slot.unskipped = 0
        try:
            slot.worker = self.carrier.spawn(slot.index)
        except Exception as exc:  # noqa: BLE001 - fork failed (EAGAIN, ENOMEM), the forkserver died, ...
            slot.worker = None
            slot.streak += 1
            delay = min(BACKOFF_FIRST_NS << max(0, slot.streak - BACKOFF_AFTER), BACKOFF_MAX_NS)
            slot.respawn_at = now + delay
            slot.note = "backoff"
            self.log(
                WARNING,
                f"slot {slot.index}: could not start a worker ({type(exc).__name__}: {exc}); "
                f"retrying in {delay / 1e6:.0f} ms",
            )
            return
        self.spawned += 1
        self.events.append(WorkerChanged.wire("started", slot.index, slot.worker.ident, None))

    def _replace(self, slot: Slot, now: int, why: str) -> None:
        """Retire the slot's idle worker cleanly and start a fresh one."""
        worker = slot.worker
        self.log(INFO, f"worker {worker.ident} {why}")
        self.carrier.retire(worker)
        self.dying[worker] = now + self.kill_grace_ns
        slot.restarts += 1
        self._spawn(slot, now)

    def _abort_run(self, slot: Slot, outcome: str, now: int) -> None:
        """End the slot's run now (timeout or interrupt): kill its worker's whole
        tree and give the slot a fresh worker."""
        started = self._take_back(slot, head=False)
        slot.queue.clear()
        run, dispatched = slot.run, slot.given_at
        assert run is not None
        worker = slot.worker
        loading = slot.loading
        # it had finished the run that timed out, its result unread: killed too
        self._crash_started(started[1:], worker, f"was killed ({outcome} of task {run.task_id})", now)
        slot.run = slot.deadline = None
        slot.loading = False
        self.carrier.kill(worker, hard=False)
        self.dying[worker] = now + self.kill_grace_ns
        slot.restarts += 1
        if outcome == "timeout" and loading:
            secs = (run.timeout_ns + self.load_grace_ns) / NS  # type: ignore[operator]
            self.log(
                WARNING,
                f"task {label(run)} run {run.run} did not start within {secs:g}s (its worker "
                f"starting, or importing the task); its worker {worker.ident} is replaced",
            )
            err: BaseException | None = TaskTimeoutError(
                f"task {run.task_id} run {run.run} did not start within {secs:g}s of being handed to worker "
                f"{worker.ident} (loading the function or its arguments); worker killed"
            )
        elif outcome == "timeout":
            secs = run.timeout_ns / NS  # type: ignore[operator]
            self.log(
                WARNING,
                f"task {label(run)} run {run.run} timed out after {secs:g}s; its worker {worker.ident} is replaced",
            )
            err = TaskTimeoutError(
                f"task {run.task_id} run {run.run} timed out after {secs:g}s (worker {worker.ident} killed)"
            )
        else:
            self.log(INFO, f"task {label(run)} run {run.run} interrupted by cancel; worker {worker.ident} killed")
            err = None
        output = self.carrier.output(worker)
        self._record(run, outcome, dispatched, now, worker.ident, BLOB_NONE if err is None else BLOB_EXC, err, output)
        self._spawn(slot, now)

    def _crash_started(
        self, runs: list[Run], worker: Any, how: str, now: int, exitcode: int | None = None, signame: str | None = None
    ) -> None:
        """Runs queued behind the current one that the worker had started
        when it died or was killed: they crashed with it."""
        for run in runs:
            error = WorkerCrashedError(
                f"worker {worker.ident} {how} while running task {run.task_id} run {run.run}",
                task_id=run.task_id,
                run=run.run,
                exitcode=exitcode,
                signal=signame,
            )
            self._record(run, "crashed", now, now, worker.ident, BLOB_EXC, error)

    def _record(
        self,
        run: Run,
        outcome: str,
        started: int,
        finished: int,
        worker_id: Any,
        blob_kind: int,
        blob: Any,
        output: str | None = None,
        matched: bool = False,
        error: RunError | None = None,
    ) -> None:
        self.counts[outcome] += 1
        done = self.core.complete(run.task_id, run.run, outcome, finished, matched)  # type: ignore[arg-type]
        if done is None:
            return
        self._track_crash_loop(run, outcome, finished, done.state.terminal)
        if done.state.terminal and self.prio:
            self.prio.pop(run.task_id, None)
        if done.next_due_ns is not None and done.next_due_ns < finished:
            self.behind.add(run.task_id)
        elif self.behind:
            self.behind.discard(run.task_id)
        if done.missed:
            self.log(INFO, f"task {label(run)} missed {done.missed} fixed-rate slot(s); skipped")
        if error is None and blob_kind == BLOB_EXC and blob is not None:
            error = RunError.of(blob)  # a crash, a timeout: the engine's own exception
        if not done.ended or (outcome == "ok" and done.periodic):
            # Only the run that ends its task needs its blob (the handle's
            # result; a periodic task that reaches its limit ends with None):
            # the listeners and the store read the error as text (``error``).
            blob_kind, blob = BLOB_NONE, None
        offset = self.core.wall_offset
        next_wall = done.next_wall_ns
        if next_wall is None and done.next_due_ns is not None:
            next_wall = done.next_due_ns + offset
        elif next_wall is None and done.state is TaskState.PAUSED:  # (not due: where its grid stands, for a store)
            next_wall = self.core.paused_wall(run.task_id)
        self.events.append(
            RunEnded.wire(
                run.task_id,
                run.run,
                run.scheduled_ns,
                started,
                finished,
                worker_id,
                outcome,
                done.state.value,
                done.next_due_ns,
                done.missed,
                done.ended,
                blob_kind,
                blob,
                output,
                run.attempt,
                run.wall_ns if run.wall_ns is not None else run.scheduled_ns + offset,
                next_wall,
                done.retrying,
                run.cause,
                done.reason,
                error,
            )
        )
        if self.core.skips:
            self._skipped_out()  # (misfire: right after the run that dropped them)

    def _stop_all(self, now: int) -> None:
        for slot in self.slots:
            if slot.worker is not None:
                self.carrier.retire(slot.worker)
                self.dying[slot.worker] = now + self.kill_grace_ns
                slot.worker = None
            slot.respawn_at = None

    def _check_health(self) -> None:
        for slot in self.slots:
            if slot.worker is not None and slot.run is not None:
                health = self.carrier.health(slot.worker)
                if health == "stopped" and slot.note != "stopped":
                    self.log(WARNING, f"worker {slot.worker.ident} is stopped (SIGSTOP?) mid-run")
                slot.note = "stopped" if health == "stopped" else ""

    def _slot_of(self, worker: Any) -> Slot | None:
        for slot in self.slots:
            if slot.worker is worker:
                return slot
        return None

    def log(self, level: int, message: str) -> None:
        """A line for the user process's "procsched" logger, in event order."""
        self.events.append(Log.wire(level, message))


def _earliest(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a < b else b


def _slots_before(skip: SkipRecord, wall: int) -> SkipRecord | None:
    """``skip`` without its slots at or after ``wall`` (None if none is
    left; a grid point within half a period of ``wall`` is that slot)."""
    period = skip.period_ns
    bound = wall - period // 2
    if skip.wall_ns >= bound:
        return None
    keep = 1 if not period else (bound - skip.wall_ns - 1) // period + 1
    return skip if keep >= skip.slots else skip._replace(slots=keep)


def _slots_after(skip: SkipRecord, wall: int) -> SkipRecord | None:
    """``skip`` without its slots at or before ``wall`` (None if none is
    left). A grid point within half a period of ``wall`` is that slot: two
    schedulers' wall readings of one slot differ by microseconds."""
    period = skip.period_ns
    bound = wall + period // 2
    if skip.wall_ns > bound:
        return skip
    drop = 1 if not period else (bound - skip.wall_ns) // period + 1
    if drop >= skip.slots:
        return None
    shift = drop * period
    return skip._replace(scheduled_ns=skip.scheduled_ns + shift, wall_ns=skip.wall_ns + shift, slots=skip.slots - drop)
