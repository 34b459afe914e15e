"""The dispatcher's journal: keyed tasks' changes, one transaction a turn.

    user process (facade, _recovery.py)            dispatcher (Journal)
    Scheduler(store=...) ─ open_store ───────────┐ config["store"]: the dispatcher starts
      recover: take over dead schedulers          │
        (their runs -> crashed)                   │
      stored tasks -> resume points, handles ─────┼─▶ Adopt (5,000 rows a command) ─▶ adopt: due, run numbers
    schedule(key=...) ─ definition ───────────────┴─▶ Define + Add ─▶ added: upsert
                                                  tick: keyed runs held (Engine.hold), queued
                                                        ones too (prefetch)
                                                  turn: events -> finished / delete / update,
                                                        held runs -> started; the batch -> writer
                                                  committed (writer thread done, _writer.py): send,
                                                        each worker's runs in the order given

The facade opens the store first (a bad store is a StoreError at the call),
starts the dispatcher, and meanwhile recovers the store (the dispatcher
touches no stored task until the facade hands them over: start-up has one
owner) and adopts every stored task as a live task - in bulk: tasks of one
function, arguments, schedule and options share one import, one pickled
call and one add message; a row per task carries only its key, run
numbers and due time, and its handle is made in the facade, with no round
trip. Then the dispatcher owns the store: each turn's changes go to the
writer thread as one transaction (``_writer.py``; after a commit computed
in this process, the next waits a little for the ends of the runs it sent:
``holding``), and a keyed run reaches
its worker only after the transaction that records it started committed;
the user hears of a turn's events once it has committed (``history()``
after ``result()`` finds the run; a pause, resume or cancel of a keyed
task is answered so, also across a commit that failed and goes again:
when it returns, the store has it). A run's end is recorded with the
task's reschedule in one statement group (``Batch.finished``), so a
SIGKILL at any instant leaves a store from which recovery is exact.

Prefetch with a store: runs given ahead to a busy worker are claimed like
any other (their starts go with the turn's transaction) and held in the
worker's ``fifo`` until recorded; the fifo sends a worker's runs in the
order the engine gave them, so a run that needs no commit (unkeyed, or
recorded already) waits behind a held one. A held run was never sent:
the engine takes it back with ``withdraw`` (always True), and what the store
knows of it follows the stage its claim reached (``claims``): not written
yet - dropped from the batch, nothing recorded; committed, in flight, or in
a commit that failed (which may have written it: a lost COMMIT answer) - it
stays recorded started (a run given ahead and taken back is the same run
when it is given again: no second claim), and if it then ends without
starting (``unstarted``: cancelled, or stopped by shutdown) its end is
recorded ``cancelled`` with its reschedule, so a restart finds no run in
flight that never was (shutdown keeps its slot: it runs after the restart).
A SIGKILL leaves runs given ahead recorded started, like the run a worker
was about to start: recovery records them crashed, as it records any run
in flight (none of them ran twice, none unrecorded).

Several schedulers on one store (issue 11): a claim the store refuses is
another scheduler's run - the task skips to its next slot (Engine.skip) and
realigns with the store; the bounded re-read, take-over of expired
schedulers and adoption of others' tasks are in ``_peers.py``; a fenced-out
commit (our lease was taken over) registers again.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import time
from collections.abc import Callable, Collection, Iterator
from typing import Any

from ..._core import Kind, Run, Schedule, TaskState
from ..._core._units import NS
from ..._errors import StoreError
from ..._store import InstanceStatus, SQLStore, TaskDefinition, WorkerStatus
from ..._store import TaskState as StoredState
from .. import _messages as m
from .._engine import Engine
from .._store_hooks import Durable
from ._limited import Limited
from ._peers import DELETED, REPLACING, Peers
from ._requests import Requests
from ._stored import regular_slot, schedule_of, stored_hash
from ._writer import Writer, open_patiently, patiently

# The stages of a claim (Journal.claims): its start is to be written, in the
# batch being built, in it again after a commit that failed (which may have
# written it: a COMMIT whose answer was lost), in the transaction in flight,
# committed.
QUEUED, BATCHED, RESENT, FLIGHT, RECORDED = range(5)
logger = logging.getLogger("procsched")
PENDING, PAUSED, CANCELLED = TaskState.PENDING.value, TaskState.PAUSED.value, TaskState.CANCELLED.value
#: The dispatcher renews its registration this often (a third of the lease).
LEASE_NS = 30 * NS
#: A turn waits this long for its commit before going on (see Journal.turn).
COMMIT_WAIT_S = 0.0002
#: The next commit waits for the ends of the runs the last one sent, for as
#: long as that commit took, at most this long - if that commit was computed
#: in this process (see Journal.holding).
HOLD_MAX_NS = 2_000_000
#: After a failed commit, the next try waits this long, doubling up to RETRY_MAX_NS.
RETRY_FIRST_NS = 50_000_000
RETRY_MAX_NS = 2_000_000_000
#: A clean shutdown tries a refused commit again (at its back-off) for this
#: long before it gives up on what the commit carried (logged): long enough
#: for a lock just released, short enough that shutdown returns while the
#: store is out (issue 20).
DRAIN_PATIENCE_NS = 3 * NS
#: With a store, a busy worker may hold this many runs given ahead (if the
#: carrier gives runs ahead at all): a run given ahead waits for the commit
#: recording its start (and for the one in flight before it), so a worker
#: whose queue is as short as without a store idles for that wait: the runs a
#: pool can have on their way are its workers' queues, each run in one for a
#: commit and a half (20 keyed tasks at 1 ms, 2 workers, a due run waited 4.4
#: ms for a place on PostgreSQL). 2 -> 4: SQLite ~1.4x, PostgreSQL ~1.5x keyed
#: runs/s; 4 -> 16: SQLite 6.1k -> 7.3-7.5k, PostgreSQL 2.0k -> 3.2k (8: 7.2k,
#: 2.9k). The price: after a kill -9, every run given ahead whose start was
#: recorded is recorded crashed. PROCSCHED_STORE_PREFETCH overrides it, for measurements.
STORE_PREFETCH = int(os.environ.get("PROCSCHED_STORE_PREFETCH", "16"))


class Journal(Durable):
    """The dispatcher's store: keyed tasks' changes, one transaction a turn.
    The engine's durable hooks (``hold``, ``withdraw``, ``unstarted``: see
    ``_engine.Durable``) are its methods; the dispatcher drives the rest."""

    active = True
    prefetch = STORE_PREFETCH

    def __init__(
        self,
        target: str,
        owner_pid: int,
        emit: Callable[[list[m.Message]], None],
        lease_ns: int = LEASE_NS,
        secret: list[bytes] | None = None,
    ) -> None:
        self.store = open_patiently(target, secret)  # (secret: the facade's, through the configuration frame)
        bound_idle_transactions(self.store, lease_ns)
        self.lease_ns = lease_ns
        self.owner_pid = owner_pid
        #: Until when (the dispatcher's clock) the lease is known to be this
        #: scheduler's: a lease from the start of the last write that renewed it
        #: (the store dates it no earlier). See ``lease_known``.
        self.lease_until = time.monotonic_ns() + lease_ns
        self.holder = patiently(lambda: self.store.register(lease_ns=lease_ns, pid=owner_pid))
        self.emit = emit  # the dispatcher's: an event batch to the user
        self.keys: dict[int, str] = {}  # live keyed task id -> key
        #: key -> the id of its latest task here: a task replaced while its
        #: run was in flight ends without deleting its key (the new task's).
        self.owner: dict[str, int] = {}
        #: task id -> the hash of the definition it runs (scheduled here, or
        #: as first read back): another scheduler's change of it is followed
        #: (``Peers.redefined``).
        self.hashes: dict[int, str] = {}
        self.expected: dict[int, m.Define] = {}  # task id -> its definition, awaiting its add
        self.shapes: list[m.AdoptShape] = []  # what adopted tasks share (see adopt)
        self.runs: dict[str, int] = {}  # key -> the last run number claimed (a replacement goes on from it)
        self.held: list[tuple[int, int, int]] = []  # claims whose start goes into the next batch
        # (task id, run, attempt) -> [stage, run, key, worker pid] of every keyed run
        # claimed here whose end is not recorded yet and whose start is (or will be)
        self.claims: dict[tuple[int, int, int], list[Any]] = {}
        # worker -> its held runs [(run, claim or None)], in the order given: sent from the front
        # as their claims are recorded (see the module docstring)
        self.fifo: dict[Any, collections.deque[tuple[Any, Any]]] = {}
        self.cancelled: list[int] = []
        self.schedules: dict[int, Schedule] = {}  # live keyed task id -> its schedule (its next slot at shutdown)
        # Commits run in the writer thread (see _writer.py), on its own connection.
        self.writer = Writer(target, secret)
        bound_idle_transactions(self.writer.store, lease_ns)  # its row locks too
        self.waiting: list[tuple[int, int, int]] = []  # claims whose start is in self.batch
        #: key -> its pauses and resumes journalled here and not yet committed:
        #: a re-read meanwhile (of the row without them) leaves its pause as
        #: asked here (``Peers.apply``; the fault campaign: a take-over read
        #: the row while the store was locked, and resumed a task just paused).
        self.pausing: dict[str, int] = {}
        #: The requests (ids) of the user's pauses, resumes and cancels of
        #: keyed tasks whose answers wait for the commit writing them: also
        #: across a commit that failed or was fenced out (see ``answer``).
        self.answers: set[int] = set()
        self.offset = 0
        self.batch = self.writer.store.batch(self.holder)
        self.seen = 0  # engine events already journalled this turn
        self.quiet = 0  # inside ``unwritten`` (nested): nothing the engine does is journalled
        self.synced: list[Any] = []  # the engine.events list ``seen`` counts in
        self.told: list[Any] = []  # journalled events for the user, sent once the commit recording them is done
        self.closing = False  # shutdown: cancels stop tasks, they stay stored
        self.dead = False
        self.drained = False  # a clean end's drain wrote every change (see drain, close)
        self.renew_at = 0
        self.submitted_at = 0  # when the commit in flight (or the last one) was handed to the writer
        #: The runs the last commit sent whose ends have not come, and until
        #: when the next commit waits for them (see ``holding``).
        self.going: set[tuple[int, int, int]] = set()
        self.hold_until = 0
        self.hold_max_ns = HOLD_MAX_NS  # 0 once draining: every change goes at once
        self.lapsed = False  # the lease ran short without a renewal: the runs given ahead were taken back
        self.status_at = 0  # when to publish this instance's status next (its workers, its standby)
        self.retry_ns = 0  # the back-off after a failed commit (0: the last one committed)
        self.retry_at: int | None = None  # not before: the next try of a failed commit
        #: Since when (the dispatcher's clock) this scheduler can write to
        #: the store: its start, or its first write after one that failed.
        #: None while its writes fail. See ``may_take_over``.
        self.writable_since: int | None = time.monotonic_ns()
        self.peers = Peers(self, lease_ns)
        self.limited = Limited()  # claims the store found over their group's shared limit: they wait
        self.requests = Requests(self, self.peers.interval, self.peers.standby)  # run now, backfill from outside

    # commands
    def expecting(self, key: str) -> bool:
        """A keyed task of this key is on its way to the engine."""
        return any(define.key == key for define in self.expected.values())

    def expect(self, define: m.Define) -> None:
        self.expected[define.task_id] = define

    def replaced(self, task_id: int, cancel: Callable[[], bool]) -> bool:
        """``cancel`` the keyed task ``task_id``, which a task of its key on
        its way replaces: its row is not deleted - the new definition is
        written over it. Deleted (by the cancel, or by the end of the old
        task's run in flight), the key had no row until the new task's add
        arrived, and a resume written meanwhile (an operator's, another
        instance's) was lost: the new task took the pause the program had
        adopted and stayed paused for good (the fault campaign, seed 1413)."""
        key = self.keys.get(task_id)
        if key is None:
            return cancel()
        before = self.owner.get(key)
        self.owner[key] = REPLACING
        accepted = cancel()
        if not accepted:  # refused (a one-shot's only run is running): nothing is replaced
            if before is None:
                self.owner.pop(key, None)
            else:
                self.owner[key] = before
        return accepted

    def adopt(
        self, engine: Engine, shapes: list[m.Message], rows: list[m.Message], offset: int, last: bool = True
    ) -> None:
        """A restart's stored tasks (the facade's ``_recover`` / ``_adopt``):
        ``shapes`` extend the shapes tasks share (``AdoptShape``), each row is
        one task (``AdoptRow``; due and slot UTC ns; slot is the regular slot
        of a retried run). Nothing is written for a task whose stored state
        is already this (``write`` False), and no event goes back: its handle
        was made with the due time (a paused task's pause does send one).
        ``last``: the adoption's last chunk - the store is re-read soon after
        it (once: a re-read after each of a restart's 20 chunks rebuilt the
        map of every key adopted so far, 0.1 s of the dispatcher's 0.6 s)."""
        self.sync(engine.events)
        self.shapes.extend(m.view(m.AdoptShape, shape) for shape in shapes)
        known, keys, runs_of = self.shapes, self.keys, self.runs
        hashes, owner, schedules, adopted = self.hashes, self.owner, self.schedules, self.peers.adopted
        view, AdoptRow, Add, ADD, add_task = m.view, m.AdoptRow, m.Add, m.ADD, engine.add
        decoded: dict[int, Schedule] = {}  # shape -> its tasks' schedule, decoded once (by the engine's first add)
        for message in rows:
            row = view(AdoptRow, message)
            shape, task_id = known[row.shape], row.task_id
            first = row.slot_wall_ns if row.attempt > 1 else row.due_wall_ns  # a retry: the grid goes on from its slot
            start = shape.start_wall_ns  # the shape's schedule was read then: its until counts from then
            add = view(  # (an Add, made as the wire makes it: one C call, not its 14-argument __new__)
                Add,
                (
                    ADD,
                    task_id,
                    first - offset,
                    first - start,
                    start,
                    first,
                    shape.schedule,
                    shape.priority,
                    shape.timeout_ns,
                    shape.name,
                    shape.payload,
                    shape.retry,
                    shape.retry_on,
                    None,
                ),
            )
            schedule = decoded.get(row.shape)
            if add_task(add, task_id, shape.payload, schedule=schedule) is not None:
                continue  # refused (Engine.add said why)
            if schedule is None:
                schedule = engine.schedule_of(task_id)
                if schedule is not None:
                    decoded[row.shape] = schedule
            key = row.key
            hashes[task_id] = row.def_hash  # (a change another scheduler stores is followed: Peers.redefined)
            adopted(key, row.def_hash)
            runs = row.runs
            seen = runs_of.get(key)
            if seen is not None and seen > runs:
                runs = seen
            if row.attempt > 1:
                engine.continue_runs(task_id, runs, row.attempt, row.due_wall_ns - offset, row.slot_wall_ns - offset)
            elif runs:
                engine.continue_runs(task_id, runs)
            keys[task_id] = key
            owner[key] = task_id
            runs_of[key] = runs
            if schedule is not None:  # (_remember, with the shape's schedule)
                schedules[task_id] = schedule
            if row.down:  # slots missed while down, stored by the start-up: told, not stored again
                with self.unwritten(engine.events):
                    engine.events.extend(m.RunSkipped.wire(task_id, w - offset, w, "down", None) for w in row.down)
            if row.paused:
                with self.unwritten(engine.events):  # (its pause is the store's - a resume since stands)
                    engine.pause(task_id)
            if row.write:
                self.batch.update(
                    key,
                    run_count=runs,
                    next_due_ns=row.due_wall_ns,
                    next_attempt=row.attempt,
                    unloadable=None,
                )  # (never its pause: the store's, read a moment ago - a resume since must stand)
        if rows and last:  # what they were read from may be stale already (another scheduler's change): re-read soon
            self.peers.sync_soon()
        elif rows:
            self.peers.adopting()

    def added(self, engine: Engine, task_id: int) -> None:
        """After Engine.add of a keyed task scheduled by the program: store it."""
        define = self.expected.pop(task_id)
        key = define.key
        if engine.state(task_id) is None:
            return  # refused (Engine.add said why)
        known = self.runs.get(key)
        runs = known or 0
        stored = None
        row = None  # (read: it says whether the task is paused - an operator's, another instance's pause stands)
        try:
            row = self.store.get(key)
            if known is None:  # the key's first task here: it may be stored already
                stored = row
            # A replacement goes on from the store's runs too: what this
            # scheduler counted is stale if another one claimed the task's
            # runs meanwhile (it was on standby here).
            runs = max(runs, self.store.last_run(key))
        except StoreError as exc:
            engine.log(40, f"the store: reading {key!r} failed ({exc}); its runs go on from {runs + 1}")
        if runs:
            engine.continue_runs(task_id, runs)
        self.keys[task_id] = key
        self.owner[key] = task_id
        self.hashes[task_id] = define.def_hash
        self.runs[key] = runs
        self._remember(engine, task_id)
        if stored is not None and stored_hash(stored.definition) == define.def_hash and stored.unloadable is None:
            # The same task, stored after this scheduler started (another
            # scheduler sharing the store added it meanwhile): this one goes
            # on from the stored state - the same grid, the same run numbers -
            # and writes none of its own (the realignment's "not paused, next
            # due" written back, late, undid a pause asked meanwhile: the fault
            # campaign, seed 239).
            now = time.monotonic_ns()
            with self.unwritten(engine.events):
                self.peers.apply(engine, task_id, stored, now, time.time_ns() - now, force=True)
            return
        # A changed definition on the same grid (a deploy: new code, the same period) goes on from
        # the stored task's state, as the same definition would: its next slot, its pause (the row
        # keeps them). On a grid of its own from this add, two grids ran one task for a moment, and
        # a slot of one was recorded paused while the other's ran (the fault campaign, seed 4008).
        keep = False
        if row is not None and self._same_grid(engine, task_id, row.definition):
            keep = True
            now = time.monotonic_ns()
            with self.unwritten(engine.events):
                self.peers.apply(engine, task_id, row, now, time.time_ns() - now, force=True, fresh=True)
            runs = self.runs[key]
        d = TaskDefinition(
            key,
            define.fn_ref,
            bytes(define.args),
            define.schedule,
            define.options,
            define.def_hash,
            group=define.schedule.get("group"),  # the store counts its claims against the group's limit
        )
        # (never the pause of a stored row; with ``keep`` none of its state - a new row, or one gone since, starts here)
        self.batch.upsert(d, StoredState(runs, engine.next_wall(task_id)), keep_state=keep)
        if row is not None and row.state.paused:  # the stored row is paused: so is the task
            with self.unwritten(engine.events):
                engine.pause(task_id)
        elif define.paused and row is None:  # it replaces a paused task whose row is gone: the pause is written
            # (a row that is there says it itself: the pause the program adopted may be older
            # than a resume written since - the fault campaign, seed 1413, replayed: this
            # "paused = 1" was written 14 ms after another instance's resume)
            engine.pause(task_id)

    @staticmethod
    def _same_grid(engine: Engine, task_id: int, stored: TaskDefinition) -> bool:
        schedule = engine.schedule_of(task_id)
        try:
            return schedule is not None and schedule.same_grid(schedule_of(stored))
        except ValueError:  # a stored schedule this process cannot read (an unknown zone): a grid of its own
            return False

    def _remember(self, engine: Engine, task_id: int) -> None:
        """Keep a keyed task's schedule: its slot after a run stopped by
        shutdown is written once the task is gone from the engine."""
        schedule = engine.schedule_of(task_id)
        if schedule is not None:
            self.schedules[task_id] = schedule

    def unloadable(self, key: str, why: str) -> None:
        self.batch.unloadable(key, why)

    def hold(self, worker: Any, run: Run) -> bool:
        """Keep a keyed run until its start is committed - and any run given
        after a run still held to the same worker."""
        if self.dead:
            return False
        claim = None
        if run.task_id in self.keys:
            claim = (run.task_id, run.run, run.attempt)
            known = self.claims.get(claim)
            pid = worker.ident if isinstance(worker.ident, int) else None
            if known is None:
                self.claims[claim] = [QUEUED, run, self.keys[run.task_id], pid]
                self.held.append(claim)
            elif known[3] != pid:  # given to another worker, taken back before it started: this one runs it
                if known[0] != QUEUED:  # (its start is written, or on its way: its row names the first)
                    self.batch.moved(known[2], run.run, run.attempt, pid)
                known[3] = pid
            if known is not None and known[0] == RECORDED and self.lease_known(time.monotonic_ns()):
                claim = None  # given ahead, taken back
            # (else recorded, but the lease is not known to be ours: taken back after a stall whose lease
            # renewal failed, it waits for a write to succeed - fenced out meanwhile, it never starts here:
            # sent at once, it started beside another scheduler's retry of it - the fault campaign, seed 1919)
        fifo = self.fifo.get(worker)
        if claim is None and not fifo:
            return False
        if fifo is None:
            fifo = self.fifo[worker] = collections.deque()
        fifo.append((run, claim))
        return True

    def withdraw(self, worker: Any, run: Run, peek: bool = False) -> bool:
        """Take back ``run`` if it is the last run held for ``worker`` (True:
        it was never sent). Its claim, if not written yet, is dropped; if
        written (in flight or committed) or maybe written (``RESENT``), it
        stays - dropped, the start a failed commit had written all the same
        stayed in flight in the store, under this scheduler, with no end."""
        fifo = self.fifo.get(worker)
        if not fifo:
            return False
        if peek:
            return any(r is run for r, _ in fifo)
        if fifo[-1][0] is not run:
            return False
        _, claim = fifo.pop()
        if claim is not None:
            known = self.claims[claim]
            if known[0] == QUEUED:
                del self.claims[claim]  # (turn passes over it)
            elif known[0] == BATCHED:
                del self.claims[claim]
                self._unbatch(claim, known[2])
        return True

    def _unbatch(self, claim: tuple[int, int, int], key: str) -> None:
        """Drop a claim's start from the batch being built (never written)."""
        ops = self.batch.ops
        for i in range(len(ops) - 1, -1, -1):
            op = ops[i]
            if op[0] == "started" and op[1] == key and op[2] == claim[1] and op[3] == claim[2]:
                del ops[i]
                break
        self.runs[key] = claim[1] - (claim[2] == 1)  # the run count the store keeps

    def unstarted(self, run: Run, now: int, events: list[m.Message], paused_at: int | None = None) -> bool:
        """A claimed run, taken back before it started, ends cancelled.
        Recorded so if its start was (or may have been) written (see the
        module docstring);
        stopped by shutdown, its slot stays its task's next (a retry's: the
        next attempt of its run); taken back by a pause, the task's next slot
        is ``paused_at`` (a scheduler that adopts the paused task goes on on
        its grid: none, it began a new grid at its own start - the fault
        campaign, seed 2716). ``events``: the engine's, journalled first
        (what happened before it)."""
        claim = (run.task_id, run.run, run.attempt)
        known = self.claims.pop(claim, None)
        if known is None:
            return False
        stage, key = known[0], known[2]
        if stage == BATCHED:
            self._unbatch(claim, key)
        if stage in (QUEUED, BATCHED):
            return False
        self.sync(events)  # what happened before it is journalled first
        wall = run.wall_ns if run.wall_ns is not None else run.scheduled_ns + self.offset
        self.batch.finished(
            key,
            run.run,
            run.attempt,
            "cancelled",
            now + self.offset,
            wall if self.closing else paused_at,
            # a retry stopped by shutdown stays a retry (the next attempt, at its time), its run's grid
            # kept: as a new run at the retry's time, the grid shifted and its slots were never run
            retry=self.closing and run.attempt > 1,
            error_message="given ahead to a worker and cancelled before it started",
        )
        return True

    def lease_known(self, now: int) -> bool:
        """Whether the lease is known to be ours for a third of it yet: a
        keyed run goes to its worker only then (it starts there a moment
        later, or after the worker's current run). A commit whose answer came
        late (the store stalled, the dispatcher starved) renewed a lease that
        may have run out meanwhile, and the runs it recorded must not go out
        on that answer (the fault campaign, seed 2807, PostgreSQL: a run
        started 16 ms after another scheduler had taken this one over and
        recorded it crashed; this is the hole found that fits it - not
        reproduced)."""
        return self.writable_since is not None and now < self._start_by

    @property
    def _start_by(self) -> int:
        """Until when the lease is known for a third of it yet."""
        return self.lease_until - self.lease_ns // 3

    def start_by(self, run: Run) -> int:
        """When a run sent now must have started by, or its worker asks for a
        check first (``RunOrder.start_by``): a keyed run, while the lease is
        known for a third of it. The dispatcher blocked in a store call (a
        stalled connection) cannot take back the runs given ahead: the
        worker holds its own."""
        return self._start_by if run.task_id in self.keys else 0

    def _renewed(self, since: int) -> None:
        """A write begun at ``since`` renewed the lease."""
        self.lease_until = max(self.lease_until, since + self.lease_ns)
        self.lapsed = False

    def _release(self, carrier: Any, now: int) -> None:
        """Send each worker's held runs from the front while their starts are
        recorded - none while the lease is not known to be ours (see ``hold``
        and ``lease_known``: then the lease is renewed at the next turn)."""
        if not self.lease_known(now):
            if self.writable_since is not None:
                self.renew_at = min(self.renew_at, now)
            return
        claims = self.claims
        for worker in list(self.fifo):
            fifo = self.fifo[worker]
            while fifo:
                run, claim = fifo[0]
                if claim is not None:
                    known = claims.get(claim)
                    if known is not None and known[0] != RECORDED:
                        break
                fifo.popleft()
                carrier.send_run(worker, run)
            if not fifo:
                del self.fifo[worker]

    # the turn
    def may_flush(self, engine: Engine) -> bool:
        """Between turns (a worker died): journal what happened; True if
        its events may go to the user now (no earlier ones wait for a commit)."""
        self.sync(engine.events)
        return not (self.writer.busy or self.told)

    def sync(self, events: list[m.Message]) -> None:
        """Journal the engine's events (its outbox, ``events``) since the last
        call, in order - inside ``unwritten``, none (they are the store's)."""
        if self.quiet:
            self.pass_over(events)
            return
        if events is not self.synced:  # flushed since (a new list): all of it is new
            self.synced, self.seen = events, 0
        keys = self.keys
        for i in range(self.seen, len(events)):
            ev = events[i]
            tag = ev[0]
            if tag == m.RUN_ENDED:
                ended = m.view(m.RunEnded, ev)
                key = keys.get(ended.task_id)
                if key is not None:
                    self._run_ended(ended, key)
            elif tag == m.TASK_CANCELLED:
                task_id = m.view(m.TaskCancelled, ev).task_id
                key = keys.get(task_id)
                if key is not None:
                    if not self.closing and self.owner.get(key, task_id) == task_id and not self.expecting(key):
                        self.batch.delete(key)
                        self.owner[key] = DELETED  # its run in flight, if any, ends without deleting it again
                    self.cancelled.append(task_id)
            elif tag == m.RUN_SKIPPED:
                skipped = m.view(m.RunSkipped, ev)
                key = keys.get(skipped.task_id)
                if key is not None:
                    self._skipped(skipped, key)
            elif tag == m.TASK_CHANGED:
                changed = m.view(m.TaskChanged, ev)
                key = keys.get(changed.task_id)
                if key is not None and changed.state == PAUSED:
                    self._pause_written(key, paused=True)
                elif key is not None:
                    self._pause_written(key, paused=False, next_due_ns=changed.next_wall_ns)
        self.seen = len(events)

    @contextlib.contextmanager
    def unwritten(self, events: list[m.Message]) -> Iterator[None]:
        """What the engine does inside is the store's already (read from
        it): not journalled, even by a ``sync`` made inside (a take-over in a
        re-read pass journalled the pauses and resumes that pass had followed
        from the store - read before a pause from outside landed, its
        "paused = 0" written after it undid it: the fault campaign, seed
        1201). The engine's events before it are journalled."""
        self.sync(events)
        self.quiet += 1
        try:
            yield
        finally:
            self.quiet -= 1
            self.pass_over(events)

    def record_skips(self, events: list[m.Message], start: int) -> None:
        """Journal the skipped slots among ``events[start:]`` - even inside
        ``unwritten``: what the engine skipped there is not in the store."""
        keys = self.keys
        for ev in events[start:]:
            if ev[0] == m.RUN_SKIPPED:
                skipped = m.view(m.RunSkipped, ev)
                key = keys.get(skipped.task_id)
                if key is not None:
                    self._skipped(skipped, key)

    def pause_asked(self, task_id: int, events: list[m.Message], paused: bool) -> None:
        """A keyed task's pause asked while its run runs, or taken back
        (``Durable``): written now - the run's end would write it, but a
        shutdown cancels the task first (a test saw the pause lost at the
        next start), and a kill loses it. Not inside ``unwritten``: a pause
        followed from the store is the store's already."""
        key = self.keys.get(task_id)
        if key is not None and not self.quiet:
            self.sync(events)  # (what came before it first)
            self._pause_written(key, paused=paused)

    def _pause_written(self, key: str, **fields: Any) -> None:
        """Journal a pause or resume of ``key`` (counted in ``pausing``
        until its commit)."""
        self.batch.update(key, **fields)
        self.pausing[key] = self.pausing.get(key, 0) + 1

    def answer(self, engine: Engine, task_id: int, request: int, done: bool) -> None:
        """Answer the user's pause, resume or cancel of ``task_id``: for a
        keyed task, once the commit that writes it is done - the answer is
        among the events the user hears after that commit, and a commit that
        fails or is fenced out keeps it for the one that goes again. Answered
        before it was written (the commit failed on a dropped connection and
        went again 70 ms later), a resume reached the store after a pause
        that another instance acknowledged after it, and undid it: the task
        ran on, paused for the user (the fault campaign, seed 5715)."""
        if task_id in self.keys:
            self.answers.add(request)
        engine.emit(m.Answer.wire(request, done))

    def pass_over(self, events: list[m.Message]) -> None:
        """The engine's events since the last ``sync`` are the store's
        already (``Peers`` made them from what it read): not journalled."""
        self.synced, self.seen = events, len(events)

    def _skipped(self, ev: m.RunSkipped, key: str) -> None:
        """Slots that did not run: recorded with their reason (as one row); a
        task that ended there (its last slot) is deleted, as after its last run."""
        self.batch.skipped(key, ev.wall_ns, ev.reason, period_ns=ev.period_ns, slots=ev.slots)
        if ev.state is not None and not self.closing:
            self.batch.delete(key)
            self.keys.pop(ev.task_id, None)
            self.schedules.pop(ev.task_id, None)

    def _run_ended(self, ev: m.RunEnded, key: str) -> None:
        tid, state = ev.task_id, ev.state
        if self.claims:
            self.claims.pop((tid, ev.run, ev.attempt), None)
        if self.going:
            self.going.discard((tid, ev.run, ev.attempt))
        error = ev.error
        pending = state in (PENDING, PAUSED)
        # (paused by a pause asked during the run: its next slot is kept, so that whoever
        # resumes it goes on on its grid - the fault campaign, seed 2417: a restart that
        # found no due time began a new grid at its start, 88 ms off the old one)
        next_due = ev.next_wall_ns if pending else None
        owner = self.owner.get(key, tid)
        if not pending and (self.closing or owner != tid) and state == CANCELLED:
            # stopped by shutdown, or replaced (here, or by another scheduler's
            # changed definition): it stays stored; a fixed-rate task keeps its grid
            schedule = self.schedules.get(tid)
            if schedule is not None and schedule.kind is Kind.FIXED_RATE:
                next_due = schedule.next_after(self._regular_slot(ev, key))
        self.batch.finished(
            key,
            ev.run,
            ev.attempt,
            ev.outcome,
            ev.finished_ns + self.offset,
            next_due,
            retry=ev.retrying,
            error_type=None if error is None else error.type,
            error_message=None if error is None else error.message,
            error_traceback=None if error is None else error.traceback,
            reason=ev.reason,
            worker_pid=ev.worker if isinstance(ev.worker, int) else None,  # a pid (processes), not a name
            output=ev.output or None,  # (nothing printed: nothing kept)
        )
        if state == PAUSED:
            self._pause_written(key, paused=True)
        elif not pending:
            if not (self.closing and state == CANCELLED) and owner == tid:  # (else replaced: the key is another's)
                self.batch.delete(key)
            if owner == tid:
                self.owner.pop(key, None)
            self.keys.pop(tid, None)
            self.schedules.pop(tid, None)
            self.hashes.pop(tid, None)

    def _regular_slot(self, ev: m.RunEnded, key: str) -> int:
        """The regular slot (UTC ns) of the run ``ev`` ended: a retry's is its
        first attempt's (the grid goes on from it: from the retry's time it
        shifted, and the slots between were never run - the fault campaign,
        seed 316); the retry's own time if the store cannot say."""
        if ev.attempt == 1:
            return ev.scheduled_wall_ns
        try:
            slot = regular_slot(self.store, key, ev.run)
        except StoreError:
            slot = None
        return ev.scheduled_wall_ns if slot is None else slot

    def turn(self, engine: Engine, carrier: Any, offset: int, now: int) -> int | None:
        """End of a dispatcher turn: hand the turn's changes to the writer,
        whose commit sends the keyed runs whose start it records (see
        ``committed``). While a commit is in flight, the changes wait for the
        next one. Returns when to renew the lease."""
        self.offset = offset
        peers_at = self.peers.turn(engine, now, offset, self.dead)
        peers_at = min(peers_at, self.requests.turn(engine, now))
        self.sync(engine.events)
        self.seen = 0  # the dispatcher flushes the events next
        held, self.held = self.held, []
        held += self.limited.due(now, self.told, self.claims)  # their group's turn may have come: claimed again
        claims, batch, waiting = self.claims, self.batch, self.waiting
        for claim in held:
            known = claims.get(claim)
            if known is None or known[0] != QUEUED:
                continue  # withdrawn before its start was written
            known[0] = BATCHED
            run, key = known[1], known[2]
            wall = run.wall_ns if run.wall_ns is not None else run.scheduled_ns + offset
            batch.started(key, run.run, run.attempt, wall, now + offset, cause=run.cause, worker_pid=known[3])
            if self.requests.waiting:
                self.requests.claimed(batch, run)
            self.runs[key] = run.run
            waiting.append(claim)
        if self.dead:
            return None
        if self.writer.busy or len(self.batch):
            # The user hears of this turn's events (a keyed run's end among
            # them) once the commit recording them is done: history() after
            # result() finds the run. Later events wait behind them, in order.
            self.told.extend(engine.take_events())
        if self.writer.busy:  # pipelined: this turn's changes go with the next commit (group commit)
            pass
        elif self.holding(now):  # and with the ends of the runs the last commit sent, if they come soon
            pass
        elif len(self.batch) and (self.retry_at is None or now >= self.retry_at):
            batch, self.batch = self.batch, self.writer.store.batch(self.holder)
            if batch.fenced and now >= self.status_at:  # with the lease this commit renews
                batch.publish(self.status(engine, now))
            waiting, self.waiting = self.waiting, []
            for claim in waiting:
                known = self.claims.get(claim)
                if known is not None and known[0] in (BATCHED, RESENT):
                    known[0] = FLIGHT
            told, self.told = self.told, []
            self.submitted_at = now
            self.writer.submit(batch, (waiting, told, batch))
            # A quick commit is waited for here: cheaper than a turn of the
            # loop for it, and the runs that end meanwhile go with the next
            # commit (two workers: 6-7k -> 8-9k keyed runs/s). A slow one (an
            # fsync, a network round trip) is not: select wakes us for it.
            # (Waiting only while a worker's next run is held was tried with
            # prefetch: no better, slightly worse in benchmarks.durable.)
            if self.writer.wait(COMMIT_WAIT_S):
                self.committed(engine, carrier, now)
        elif self.told and not len(self.batch):
            # Events that waited for a commit while the batch after it ended
            # up empty (nothing written since, or a claim taken back before
            # it was written): nothing is left to write before them, so they
            # go now, before this turn's.
            told, self.told = self.told, []
            self.emit(told)
        if now >= self.renew_at and not self.dead:  # on the dispatcher's own connection
            if now > self.renew_at + self.lease_ns // 3:
                # A turn late by a third of the lease (this process was stopped,
                # or starved): nothing handed over before may start until the
                # lease is known to be ours (issue 20 item 1); what other
                # schedulers changed meanwhile is read at once.
                engine.take_back_given()
                if self.renew_at:  # (not the first turn: nothing was read yet)
                    self.peers.sync_soon()
                    self.writable_since = None  # (stopped with the others, e.g. a whole VM: see may_take_over)
            try:
                if self.store.renew_lease(self.holder, status=self.status(engine, now)):
                    self._wrote(now)
                    self._renewed(now)
                else:
                    self._fenced_out(engine, now)
            except StoreError as exc:
                self.writable_since = None
                engine.log(40, f"the store: renewing the lease failed ({exc})")
            self.renew_at = now + self.lease_ns // 3
            if self.fifo:  # a renewal that succeeded sends what waited for it (see hold)
                self._release(carrier, now)
        if not self.lapsed and now >= self._start_by and not self.dead:
            # Not renewed in time (the store slow or out): a run given ahead
            # that no worker has started may start only once it is again.
            self.lapsed = True
            engine.take_back_given()
        if self.cancelled:
            self.cancelled = [t for t in self.cancelled if engine.state(t) is not None]
            for tid in list(self.keys):
                if engine.state(tid) is None and tid not in self.expected:
                    key = self.keys.pop(tid)
                    if self.owner.get(key) in (tid, DELETED):
                        self.owner.pop(key)
        wake = min(self.renew_at, peers_at, self.limited.at or self.renew_at)
        if self.retry_at is not None and not self.writer.busy:
            return min(wake, self.retry_at)
        if not self.writer.busy and self.holding(now):
            return min(wake, self.hold_until)
        return wake

    def holding(self, now: int) -> bool:
        """The batch waits for the ends of the runs the last commit sent
        (``going``), until ``hold_until``: as long again as that commit took,
        at most HOLD_MAX_NS - when that commit was computed in this process
        (SQLite: ``Spent.computed``; see ``committed``). Sent the moment
        the writer is free, a commit carries the few ends that came during
        the last one, and each run sent by the last one ends during it: its
        end and its task's next claim wait for the commit after, so a keyed
        task runs once in two commits. Waiting, one commit carries each
        task's end and next claim. A commit that waits for a server (a
        network round trip, an fsync) is better sent at once: the runs go
        on meanwhile. ``benchmarks.durable --only throughput`` (20 keyed
        tasks at 1 ms, 2 workers), alternated: SQLite 6.3k -> 8.2-8.4k
        runs/s; PostgreSQL with a hold 2.5-2.7k against 2.7-3.3k without.
        What it costs a keyed start: at most the last commit's time more."""
        return bool(self.going) and now < self.hold_until and len(self.batch) > 0

    def may_take_over(self, now: int) -> bool:
        """Whether this scheduler may take over another whose lease expired:
        only once it has itself been able to write for a whole lease. A
        store that refused every instance's writes (a lock, a database
        restart, a dropped network) let every lease expire at once; the
        first to write again would take over all the others and record
        their runs crashed - runs still going, or done and waiting to be
        recorded - to run them again (the fault campaign, seed 726: a
        one-shot ran to completion twice). The same after a turn late by a
        third of the lease (stopped, maybe with the others: a whole VM).
        Within the lease the others renew theirs, if they are alive."""
        since = self.writable_since
        return since is not None and now - since >= self.lease_ns

    def _wrote(self, now: int) -> None:
        """A write to the store succeeded (a commit, a lease renewal)."""
        if self.writable_since is None:
            self.writable_since = now

    def recheck(self, engine: Engine, now: int) -> None:
        """A worker was stopped and continued (this scheduler too, likely):
        take back the runs given ahead that no worker has started and renew
        the lease now - fenced out, the keyed ones never start here."""
        if self.dead:
            return
        engine.take_back_given()
        self.peers.sync_soon()  # what other schedulers changed meanwhile is followed before more runs start
        try:
            if self.store.renew_lease(self.holder):
                self._wrote(now)
                self._renewed(now)
                self.renew_at = now + self.lease_ns // 3
            else:
                self._fenced_out(engine, now)
        except StoreError as exc:
            self.writable_since = None
            engine.log(40, f"the store: renewing the lease failed ({exc})")

    def _fenced_out(self, engine: Engine, now: int) -> None:
        """Our registration was taken over (our lease expired: we were
        stopped or cut off): what we held is recorded crashed by another
        scheduler, and nothing of ours was written since. The keyed runs
        given ahead that no worker has started never start here (another
        scheduler retries them: issue 20 item 1). Register again and
        realign every keyed task with the store at once."""
        for run in engine.take_back_given():
            claim = (run.task_id, run.run, run.attempt)
            known = self.claims.pop(claim, None)
            if known is not None:  # (not recorded: the store never saw it, the task goes on from its row)
                self.peers.lost(engine, None, run, known[2], now, self.offset, refused=known[0] == RECORDED)
        # The starts recorded under the registration taken over are another
        # scheduler's now: none of those runs may start here. One taken back
        # before (a late turn, a worker's stall check) and given again after
        # this re-registration went out at once as "recorded" and started
        # beside the other scheduler's retry of it (the fault campaign, seed
        # 1919). Forgotten, such a run is claimed anew if given again, and
        # the store refuses it; a run under way ends unrecorded, as said.
        held = {claim for fifo in self.fifo.values() for _, claim in fifo}  # (taken back above: none, normally)
        for claim in [c for c, known in self.claims.items() if known[0] == RECORDED and c not in held]:
            del self.claims[claim]
        engine.log(
            40,
            f"this scheduler's store registration {self.holder.id} was taken over (its lease expired): "
            "its runs in flight were recorded crashed by another scheduler and their ends are not "
            "recorded; registering again",
        )
        try:
            self.holder = self.store.register(lease_ns=self.lease_ns, pid=self.owner_pid)
            self._renewed(now)
        except StoreError as exc:  # the old registration stays: fenced again next turn, registered again then
            engine.log(40, f"the store: registering again failed ({exc})")
            return
        self.batch.holder = self.holder
        self.writable_since = now  # (away for a lease or more: the others get one to renew theirs)
        self.peers.sync_soon()

    def status(self, engine: Engine, now: int) -> InstanceStatus:
        """What this instance publishes with its lease (every third of it,
        with the renewal - a commit's or its own): its workers as the
        engine counts them (``Engine.stats``) and the keys it keeps on
        standby. The console over the store shows them."""
        self.status_at = now + self.lease_ns // 3
        workers = tuple(
            WorkerStatus(w["pid"], w["rss"], w["runs"], w["restarts"])
            for w in engine.stats(now)["workers"]
            if isinstance(w["pid"], int)
        )
        standby = sorted(self.keys[t] for t in self.peers.standby if t in self.keys)
        return InstanceStatus(workers, tuple(standby), len(standby), "processes")

    def stats(self, engine: Engine) -> dict[str, Any]:
        """Who this scheduler is on the store, what it holds, who else is there."""
        h = self.holder
        running = engine.state
        return {
            "scheduler": {"id": h.id, "host": h.host, "pid": h.pid, "lease": self.lease_ns / NS},
            "holding": sorted(k for t, k in self.keys.items() if running(t) is TaskState.RUNNING),
            "peers": [{"id": p.id, "host": p.host, "pid": p.pid} for p in self.peers.holders if p.id != h.id],
            "taken_over": self.peers.takeovers,
            "rereads": self.peers.rereads,  # of what other schedulers changed: done so far
            "standby": sorted(self.keys[t] for t in self.peers.standby if t in self.keys),
        }

    def committed(self, engine: Engine, carrier: Any, now: int) -> None:
        """The writer's commit ended (its pipe was readable): send the runs
        whose start it recorded - or, if the store says another scheduler
        holds them, skip them here (``Peers.lost``: the task goes on to its
        next slot) - and emit the events it recorded to the user."""
        if not self.writer.busy:
            return  # collected already (Journal.turn waited for it)
        (done, told, batch), result = self.writer.collect()
        claims = self.claims
        # (each claim once: one withdrawn from a worker and held for another is in ``done`` twice: issue 20 item 9)
        mine = [(c, known) for c in dict.fromkeys(done) if (known := claims.get(c)) is not None and known[0] == FLIGHT]
        lost: set[tuple[str | None, int, int]] = set()
        if isinstance(result, StoreError):
            self._retry(engine, batch, mine, told, result, now)
            return
        elif isinstance(result, BaseException):  # a store layer bug: logged, tried again (issue 20 item 9)
            engine.log(40, f"the store writer failed ({type(result).__name__}: {result}); trying again")
            self._retry(engine, batch, mine, told, StoreError(f"{type(result).__name__}: {result}"), now)
            return
        else:
            self._wrote(now)
            if self.retry_ns:
                engine.log(30, "the store records again; the keyed runs that waited for it go on")
                self.retry_ns = 0
                self.retry_at = None
            if batch.fenced:  # a batch with claims or finishes renewed the lease
                self._renewed(self.submitted_at)
                self.renew_at = now + self.lease_ns // 3
            lost = set(result.lost)
            if result.fenced_out:  # another scheduler recorded our runs crashed: run none of these
                lost = {(known[2], c[1], c[2]) for c, known in mine}
                if batch.holder is not None and batch.holder.id == self.holder.id:
                    # (else found out since, by a lease renewal, and registered again: a second
                    # registration left the first to expire and be taken over - the fault campaign,
                    # seed 5715)
                    self._fenced_out(engine, now)
                # what the user asked (adds, cancels, pauses) is still to be written; runs are not ours
                self.batch.ops[:0] = [op for op in batch.ops if op[0] not in ("started", "finished")]
                told, self.told[:0] = _split_held(told, set(), self.answers)  # (answered when they are written)
            elif self.pausing:
                self._pauses_written(batch)
        if result is not None and not isinstance(result, BaseException) and result.limited:
            told = self.limited.wait(result.limited, mine, told, now, QUEUED)  # they wait: not started, not lost
        fenced = result is not None and not isinstance(result, BaseException) and result.fenced_out
        gone, realign = [], []
        for claim, known in mine:
            if known[0] == QUEUED:
                continue  # limited: claimed again later
            if (known[2], claim[1], claim[2]) in lost:
                if claims.pop(claim, None) is not None:  # (else taken back and realigned by _fenced_out)
                    realign.append(known)
                gone.append(known)
            else:
                known[0] = RECORDED
        spent = self.writer.spent
        self.going = {claim for claim, known in mine if known[0] == RECORDED} if spent.computed else set()
        self.hold_until = now + min(spent.wall_ns, self.hold_max_ns)
        if gone:  # a run another scheduler holds never started here: the user hears nothing of it
            ids = {(known[1].task_id, known[1].run) for known in gone}
            told = _split_held(told, ids)[0]
            self.told = _split_held(self.told, ids)[0]
        if told:
            self.emit(told)
            if self.answers:
                self.answers.difference_update(m.view(m.Answer, ev).request for ev in told if ev[0] == m.ANSWER)
        for known in realign:  # another scheduler has it: the next slot (fenced out: the store never saw it)
            run, key = known[1], known[2]
            self.peers.lost(engine, self._unhold(run), run, key, now, self.offset, refused=not fenced)
        self._release(carrier, now)

    def _pauses_written(self, batch: Any) -> None:
        """``batch`` committed: its pauses and resumes are the store's now."""
        pausing = self.pausing
        for op in batch.ops:
            if op[0] == "update" and "paused" in op.fields and op.key in pausing:
                left = pausing[op.key] - 1
                if left > 0:
                    pausing[op.key] = left
                else:
                    del pausing[op.key]

    def _unhold(self, run: Any) -> Any:
        """Take ``run`` out of its worker's held runs; that worker, or None."""
        for worker, fifo in self.fifo.items():
            for i, (held, _) in enumerate(fifo):
                if held is run:
                    del fifo[i]
                    return worker
        return None

    def _retry(
        self,
        engine: Engine,
        batch: Any,
        mine: list[tuple[Any, list[Any]]],
        told: list[Any],
        error: StoreError,
        now: int,
    ) -> None:
        """The commit failed (store unreachable, locked, full): nothing of it
        was written. Its keyed runs have not started and do not start
        unrecorded (another scheduler may claim the same slot, and a restart
        must find the store exact): they wait, their workers reserved, and
        the batch is tried again with the next one, after a back-off (50 ms,
        doubling to 2 s). The user hears the rest of what happened (unkeyed
        tasks and the ends of runs go on; their records follow the store)."""
        self.writable_since = None
        if not self.retry_ns:
            engine.log(
                40,
                f"the store could not record a turn ({error}); keyed runs wait until it can "
                "(trying again, at most every 2 s)",
            )
        self.retry_ns = min(2 * self.retry_ns or RETRY_FIRST_NS, RETRY_MAX_NS)
        self.retry_at = now + self.retry_ns
        others, held = _split_held(told, {(known[1].task_id, known[1].run) for _c, known in mine}, self.answers)
        self.emit(others)
        self.told[:0] = held  # (and the answers to the pauses, resumes and cancels the batch writes)
        # The batch goes again, before what came since (a run withdrawn
        # meanwhile has its end there, after its start).
        self.batch.ops[:0] = batch.ops
        self.batch.fenced = self.batch.fenced or batch.fenced  # its claims and ends are fenced again
        for _c, known in mine:
            known[0] = RESENT  # (written, maybe: as in flight, it is never dropped - see withdraw, unstarted)
        self.waiting[:0] = [c for c, _known in mine]
        # Keyed runs wait for the store, not on the workers: the unkeyed ones
        # go on meanwhile (their claims, dropped, are made again at the retry).
        engine.hold_back(set(self.keys), self.retry_at)

    def drain(self, engine: Engine, carrier: Any, offset: int, now: int) -> None:
        """A clean end: every change committed (and its events emitted)
        before this returns. A commit the store refused is tried again, at
        its back-off, for up to DRAIN_PATIENCE_NS: a pause acknowledged while
        the store was locked, then a restart, lost that pause (the fault
        campaign, seed 316). ``drained`` says whether all of it was written."""
        self.requests.closing()
        self.hold_max_ns = self.hold_until = 0  # nothing waits for a run's end now
        deadline = now + DRAIN_PATIENCE_NS
        while True:
            self.turn(engine, carrier, offset, now)
            while self.writer.busy:
                self.writer.wait(None)
                now = time.monotonic_ns()
                self.committed(engine, carrier, now)
                self.turn(engine, carrier, offset, now)
            if self.dead or not len(self.batch) or self.retry_at is None:
                self.drained = not self.dead and not len(self.batch)
                return
            now = time.monotonic_ns()
            if now >= deadline:
                engine.log(40, f"the store: shutting down with {len(self.batch)} change(s) it did not take")
                return
            time.sleep((min(self.retry_at, deadline) - now) / NS)  # (the last thing this process does)
            now = max(time.monotonic_ns(), self.retry_at)

    def close(self, clean: bool) -> None:
        """Shutdown (clean: unregister) or the user process died (leave the
        registration: the next start records the runs in flight crashed)."""
        self.dead = True
        try:
            self.writer.close()  # after the commit in flight, if any
            if clean:
                # every end written: a run still recorded in flight here never
                # started, and leaves its slot to the next claim
                self.store.unregister(self.holder, ends_written=self.drained)
        except StoreError:
            pass
        finally:
            self.store.close()


def _split_held(
    events: list[m.Message], runs: set[tuple[int, int]], answers: Collection[int] = ()
) -> tuple[list[m.Message], list[m.Message]]:
    """(the events but those held, those held): the RunStarted of ``runs``
    (task id, run) and the Answers to ``answers`` (request ids)."""
    rest: list[m.Message] = []
    held: list[m.Message] = []
    for ev in events:
        tag = ev[0]
        if (tag == m.RUN_STARTED and ((s := m.view(m.RunStarted, ev)).task_id, s.run) in runs) or (
            tag == m.ANSWER and m.view(m.Answer, ev).request in answers
        ):
            held.append(ev)
        else:
            rest.append(ev)
    return rest, held


def bound_idle_transactions(store: SQLStore, lease_ns: int) -> None:
    """PostgreSQL: a stopped scheduler's transactions (its row locks) end
    with half its lease. (SQLite holds no lock between transactions.)
    Patiently: a connection dropped as the dispatcher starts must not end it
    (a traceback and a dead dispatcher in the fault campaign, pg_drop)."""
    patiently(lambda: store.bound_idle_transactions(max(1, lease_ns // 2_000_000)))  # (a no-op on SQLite)
