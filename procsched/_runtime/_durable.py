"""Durable keyed tasks: the facade's recovery and the dispatcher's journal.

    user process (facade)                          dispatcher (Journal)
    Scheduler(store=...) ─ open_store ───────────┐ config["store"]: the dispatcher starts
      recover: take over dead schedulers          │
        (their runs -> crashed)                   │
      stored tasks -> resume points, handles ─────┼─▶ "adopt" (5,000 a command) ─▶ adopt: due, run numbers
    schedule(key=...) ─ definition ───────────────┴─▶ "durable" + "add" ─▶ added: upsert
                                                  tick: keyed runs held (Engine.hold), queued
                                                        ones too (prefetch)
                                                  turn: events -> finished / delete / update,
                                                        held runs -> started; the batch -> writer
                                                  committed (writer thread done, _commit.py): send,
                                                        each worker's runs in the order given

The facade opens the store first (a bad store is a StoreError at the call),
starts the dispatcher, and meanwhile recovers the store (the dispatcher
touches no stored task until the facade hands them over: start-up has one
owner) and adopts every stored task as a live task - in bulk: tasks of one
function, arguments, schedule and options share one import, one pickled
call and one add message; a row per task carries only its key, run
numbers and due time, and its handle is made in the facade, with no round
trip. Then the dispatcher owns the store: each turn's changes go to the
writer thread as one transaction (``_commit.py``), and a keyed run reaches
its worker only after the transaction that records it started committed;
the user hears of a turn's events once it has committed (``history()``
after ``result()`` finds the run). A run's end is recorded with the
task's reschedule in one statement group (``Batch.finished``), so a
SIGKILL at any instant leaves a store from which recovery is exact.

Prefetch with a store: runs given ahead to a busy worker are claimed like
any other (their starts go with the turn's transaction) and held in the
worker's ``fifo`` until recorded; the fifo sends a worker's runs in the
order the engine gave them, so a run that needs no commit (unkeyed, or
recorded already) waits behind a held one. A held run was never sent:
the engine takes it back with ``withdraw`` (always True), and what the store
knows of it follows the stage its claim reached (``claims``): not written
yet - dropped from the batch, nothing recorded; committed or in flight - it
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
import logging
import os
import time
from typing import Any

from .._core import KIND_OF, MISFIRE_OF, Kind, Misfire
from .._core import TaskState as RunState
from .._core._scheduler import SchedulerCore
from .._errors import StoreError
from .._store import RunRecord, StoredTask, TaskDefinition, TaskState, dead_here, function_ref, open_store
from ._commit import Writer
from ._engine import EV_CANCELLED, EV_RUN, EV_STARTED, EV_STATE, BLOB_EXC

NS = 1_000_000_000
# The stages of a claim (Journal.claims): its start is to be written, in the
# batch being built, in the transaction in flight, committed.
QUEUED, BATCHED, FLIGHT, RECORDED = range(4)
logger = logging.getLogger("procsched")
#: The dispatcher renews its registration this often (a third of the lease).
LEASE_NS = 30 * NS
#: A turn waits this long for its commit before going on (see Journal.turn).
COMMIT_WAIT_S = 0.0002
#: After a failed commit, the next try waits this long, doubling up to RETRY_MAX_NS.
RETRY_FIRST_NS = 50_000_000
RETRY_MAX_NS = 2_000_000_000
#: With a store, a busy worker may hold this many runs given ahead (if the
#: carrier gives runs ahead at all): a run given ahead waits for the commit
#: recording its start (and for the one in flight before it), so a worker
#: whose queue is as short as without a store idles for that wait. 4 hides a
#: SQLite commit; PostgreSQL's (an fsync and a round trip per statement)
#: would need more (2 -> 4: SQLite ~1.4x, PostgreSQL ~1.5x keyed runs/s; 8: no
#: more for SQLite). PROCSCHED_STORE_PREFETCH overrides it, for measurements.
STORE_PREFETCH = int(os.environ.get("PROCSCHED_STORE_PREFETCH", "4"))

# -- the facade's side ---------------------------------------------------------


def definition(spec: Any, fn: Any, arg_blob: bytes, wall_now: int) -> TaskDefinition:
    """A keyed task's stored definition. Raises TypeError (why) for a
    function that cannot be stored by reference (a lambda, a closure...)."""
    ref = function_ref(fn)
    kind = spec.kind
    schedule: dict[str, Any]
    if kind is Kind.ONCE:
        schedule = {"kind": "once", "delay_ns": spec.delay_ns}
    elif kind is Kind.FIXED_RATE:
        schedule = {"kind": "fixed_rate", "period_ns": spec.period_ns, "initial_delay_ns": spec.delay_ns,
                    "misfire": spec.misfire.value}  # fmt: skip
    elif kind is Kind.FIXED_DELAY:
        schedule = {"kind": "fixed_delay", "period_ns": spec.period_ns, "initial_delay_ns": spec.delay_ns}
    else:
        from .._tz import to_wire

        tz = spec.tz if isinstance(spec.tz, str) or spec.tz is None else to_wire(spec.tz)
        if tz is not None and not isinstance(tz, str):
            tz = tz.utcoffset(None).total_seconds()  # a fixed-offset datetime.timezone
        schedule = {"kind": "cron", "expr": spec.trigger.expr, "tz": tz, "misfire": spec.misfire.value}
    retry = None
    if spec.retry is not None:
        r = spec.retry.policy()
        retry = [r.attempts, r.delay_ns, r.backoff, r.max_delay_ns, r.jitter, sorted(r.outcomes),
                 [f"{c.__module__}:{c.__qualname__}" for c in spec.retry.classes]]  # fmt: skip
    options = {
        "priority": spec.priority, "timeout_ns": spec.timeout_ns, "stop_on_error": spec.stop_on_error,
        "name": spec.name, "max_runs": spec.max_runs, "retry": retry,
        "until_wall_ns": None if spec.until_ns is None else wall_now + spec.until_ns,
    }  # fmt: skip
    return TaskDefinition(spec.key, ref, arg_blob, schedule, options)


def spec_of(d: TaskDefinition, wall_now: int) -> Any:
    """The TaskSpec that a stored definition was made from (for adoption)."""
    from datetime import timedelta, timezone

    from .. import _validate as v
    from .._retry import Retry
    from .._store import resolve_ref

    s, o = d.schedule, d.options
    kind = {"once": Kind.ONCE, "fixed_rate": Kind.FIXED_RATE, "fixed_delay": Kind.FIXED_DELAY,
            "cron": Kind.CALENDAR}[s["kind"]]  # fmt: skip
    trigger = tz = None
    if kind is Kind.CALENDAR:
        tz = s["tz"]
        if isinstance(tz, (int, float)):
            tz = timezone(timedelta(seconds=tz))
        trigger, _ = v.cron(s["expr"], tz, wall_now)
    retry = None
    if o.get("retry") is not None:
        attempts, delay_ns, backoff, max_delay_ns, jitter, outcomes, classes = o["retry"]
        retry = Retry(attempts, timedelta(microseconds=delay_ns / 1000), backoff,
                      timedelta(microseconds=max_delay_ns / 1000), jitter,
                      (*outcomes, *(resolve_ref(c) for c in classes)))  # fmt: skip
        retry.delay, retry.max_delay = delay_ns / NS, max_delay_ns / NS
    until = o.get("until_wall_ns")
    return v.TaskSpec(
        kind, s.get("delay_ns", s.get("initial_delay_ns", 0)), s.get("period_ns", 0), o["priority"],
        Misfire(s.get("misfire", "catch_up")), o["stop_on_error"], o["timeout_ns"], o["name"],
        trigger=trigger, tz=tz, after_wall_ns=wall_now, until_ns=None if until is None else until - wall_now,
        max_runs=o["max_runs"], retry=retry, key=d.key,
    )  # fmt: skip


def recover(store: Any) -> tuple[list[StoredTask], dict[str, RunRecord], dict[str, int]]:
    """Start-up: record the runs of dead schedulers ``crashed`` (once) and
    return the stored tasks, per key its crashed run, and per key whose
    current run is a retry, that run's regular slot (its first attempt's
    scheduled time: the grid goes on from it)."""
    loaded = store.load()
    dead = dead_here(loaded.schedulers)
    crashed: dict[str, RunRecord] = {}
    for holder in dead + [h for h in store.expired_holders() if h not in dead]:
        runs = store.take_over(holder, None, force=holder in dead)
        for record in runs or ():
            crashed[record.key] = record
    tasks = store.load().tasks if crashed else loaded.tasks
    # A crash recorded by an earlier start that died before it wrote the
    # task's reschedule (its state still points at the crashed run): the
    # same crash again, so recovery does not depend on surviving itself.
    for task in tasks:
        st = task.state
        if task.last_outcome == "crashed" and task.key not in crashed and st.next_attempt == 1 and st.run_count:
            last = store.history(task.key, 1)
            if (last and last[0].outcome == "crashed" and last[0].error_type == "SchedulerDied"
                    and last[0].run == st.run_count and last[0].scheduled_ns == st.next_due_ns):  # fmt: skip
                crashed[task.key] = last[0]
    slots: dict[str, int] = {}
    for task in tasks:
        record = crashed.get(task.key)
        run = record.run if record is not None and record.attempt > 1 else (
            task.state.run_count if task.state.next_attempt > 1 else None)
        if run is not None:
            first = [r for r in store.history(task.key, 50) if r.run == run and r.attempt == 1]
            if first:
                slots[task.key] = first[0].scheduled_ns
    return tasks, crashed, slots


def resume_point(task: StoredTask, crashed: RunRecord | None, now_wall: int, slot: int | None = None
                 ) -> tuple[int, int, int | None, int, bool] | None:  # fmt: skip
    """Where a stored task goes on: (runs claimed so far, next attempt, its
    due time (UTC ns), the regular slot of a retried run, paused), or None if
    it has ended (a one-shot whose only run crashed with no retry left).
    Missed slots follow the task's misfire policy."""
    d, st = task.definition, task.state
    sched = d.schedule
    kind = sched["kind"]
    runs, attempt, due = st.run_count, st.next_attempt, st.next_due_ns
    if crashed is None and task.holder is not None and attempt == 1 and due is not None and kind != "once":
        from ._peers import next_after

        due = next_after(sched, due, now_wall)  # its run in flight is another scheduler's: the slot after it
    retry = d.options.get("retry")
    if crashed is not None:
        base = crashed.scheduled_ns if slot is None else slot
        if retry is not None and "crashed" in retry[5] and crashed.attempt < retry[0]:
            return crashed.run, crashed.attempt + 1, now_wall, base, st.paused
        runs, attempt = crashed.run, 1
        if kind == "once":
            return None
        if kind == "fixed_rate":
            due = base + sched["period_ns"]
        elif kind == "fixed_delay":
            due = now_wall
        else:
            due = _cron(d, now_wall).next_ns(base)
    if attempt > 1:
        due = now_wall if due is None else due
        return runs, attempt, due, due if slot is None else slot, st.paused
    if due is None:  # paused with no slot yet, or stopped at shutdown: from now
        due = now_wall if kind != "cron" else _cron(d, now_wall).next_ns(now_wall)
    elif due < now_wall:
        misfire = sched.get("misfire", "catch_up")
        if kind == "fixed_rate" and misfire != "catch_up":
            period = sched["period_ns"]
            k = -(-(now_wall - due) // period) if misfire == "skip" else (now_wall - due) // period
            due += k * period
        elif kind == "cron" and misfire != "catch_up":
            trigger = _cron(d, now_wall)
            if misfire == "skip":
                due = trigger.next_ns(now_wall - 1)
            else:
                last = SchedulerCore._last_slot_by_window(trigger, now_wall)
                due = due if last is None or last < due else last
    return runs, 1, due, due or 0, st.paused


def _cron(d: TaskDefinition, wall_now: int) -> Any:
    return spec_of(d, wall_now).trigger


# -- the dispatcher's side -----------------------------------------------------


class Journal:
    """The dispatcher's store: keyed tasks' changes, one transaction a turn."""

    def __init__(self, target: str, owner_pid: int, log: Any, emit: Any, lease_ns: int = LEASE_NS) -> None:
        from ._peers import Peers

        self.store = open_store(target)
        if hasattr(self.store, "bound_idle_transactions"):  # PostgreSQL: a stopped scheduler's locks go with its lease
            self.store.bound_idle_transactions(max(1, lease_ns // 2_000_000))
        self.lease_ns = lease_ns
        self.owner_pid = owner_pid
        self.holder = self.store.register(lease_ns=lease_ns, pid=owner_pid)
        self.peers = Peers(self, lease_ns)
        self.log = log  # engine._log
        self.emit = emit  # the dispatcher's: an event batch to the user
        self.keys: dict[int, str] = {}  # live keyed task id -> key
        self.expected: dict[int, tuple[Any, ...]] = {}  # task id -> its definition, awaiting its add
        self.shapes: list[tuple[Any, ...]] = []  # what adopted tasks share (see adopt)
        self.runs: dict[str, int] = {}  # key -> the last run number claimed (a replacement goes on from it)
        self.held: list[tuple[int, int, int]] = []  # claims whose start goes into the next batch
        # (task id, run, attempt) -> [stage, run, key] of every keyed run claimed
        # here whose end is not recorded yet and whose start is (or will be)
        self.claims: dict[tuple[int, int, int], list[Any]] = {}
        # worker -> its held runs [(run, claim or None)], in the order given: sent from the front
        # as their claims are recorded (see the module docstring)
        self.fifo: dict[Any, collections.deque[tuple[Any, Any]]] = {}
        self.engine: Any = None
        self.cancelled: list[int] = []
        self.rate: dict[int, int] = {}  # fixed-rate keyed task id -> period (its next slot at shutdown)
        # Commits run in the writer thread (see _commit.py), on its own connection.
        self.writer = Writer(target)
        if hasattr(self.writer.store, "bound_idle_transactions"):  # its row locks too (PostgreSQL)
            self.writer.store.bound_idle_transactions(max(1, lease_ns // 2_000_000))
        self.waiting: list[tuple[int, int, int]] = []  # claims whose start is in self.batch
        self.offset = 0
        self.batch = self.writer.store.batch(self.holder)
        self.seen = 0  # engine events already journalled this turn
        self.synced: list[Any] = []  # the engine.events list ``seen`` counts in
        self.told: list[Any] = []  # journalled events for the user, sent once the commit recording them is done
        self.closing = False  # shutdown: cancels stop tasks, they stay stored
        self.dead = False
        self.renew_at = 0
        self.retry_ns = 0  # the back-off after a failed commit (0: the last one committed)
        self.retry_at: int | None = None  # not before: the next try of a failed commit

    # commands
    def expecting(self, key: str) -> bool:
        """A keyed task of this key is on its way to the engine."""
        return any(fields[0] == key for fields in self.expected.values())

    def expect(self, task_id: int, fields: tuple[Any, ...]) -> None:
        self.expected[task_id] = fields

    def adopt(self, engine: Any, shapes: list[tuple[Any, ...]], rows: list[list[Any]], offset: int) -> None:
        """A restart's stored tasks (the facade's ``_recover`` / ``_adopt``):
        ``shapes`` extend the add messages tasks share, each row is one task
        ``[key, shape, runs, attempt, due, slot, paused, write, task_id]``
        (due and slot UTC ns; slot is the regular slot of a retried run).
        Nothing is written for a task whose stored state is already this
        (``write`` False), and no event goes back: its handle was made with
        the due time (a paused task's pause does send one)."""
        self.sync(engine)
        default_timeout = engine.default_timeout_ns
        for priority, kind, period, misfire, stop_on_error, timeout, name, payload, extra, period_ns in shapes:
            # A plain shape's tasks go to the core directly, its enums made
            # once (Engine.add would make them per task); a calendar, retry
            # or limits take Engine.add (per task: its trigger, its errors).
            plain = None if extra is not None else (priority, KIND_OF[kind], period, MISFIRE_OF[misfire], stop_on_error,
                                                    default_timeout if timeout is None else timeout, payload, name)
            self.shapes.append((plain, (priority, kind, period, misfire, stop_on_error, timeout, name, payload),
                                extra, period_ns))  # fmt: skip
        shapes, add, core = self.shapes, engine.add, engine.core
        keys, runs_of, rate = self.keys, self.runs, self.rate
        for key, shape, runs, attempt, due, slot, paused, write, task_id in rows:
            plain, fields, extra, period_ns = shapes[shape]
            first = slot if attempt > 1 else due  # a retry: the core goes on from its regular slot
            if plain is not None:
                core.add(first - offset, *plain, task_id)
            else:
                if extra[0] is not None:  # cron: the first slot is the one after after_wall
                    until = extra[2]
                    if until is not None:
                        until += extra[1] - (first - 1)  # until counts from after_wall
                    extra = (extra[0], first - 1, until, *extra[3:])
                add(task_id, first - offset, *fields, extra)
            if core.state(task_id) is None:
                continue  # refused (Engine.add said why)
            runs = max(runs_of.get(key, 0), runs)
            if attempt > 1:
                core.continue_runs(task_id, runs, attempt, due - offset, slot - offset)
            elif runs:
                core.continue_runs(task_id, runs)
            keys[task_id] = key
            runs_of[key] = runs
            if period_ns:
                rate[task_id] = period_ns
            if paused:
                engine.pause(task_id)
            if write:
                self.batch.update(key, run_count=runs, next_due_ns=due, next_attempt=attempt, paused=paused,
                                  unloadable=None)  # fmt: skip

    def added(self, engine: Any, task_id: int) -> None:
        """After Engine.add of a keyed task scheduled by the program: store it."""
        key, fn_ref, args, schedule, options, def_hash = self.expected.pop(task_id)
        core = engine.core
        if core.state(task_id) is None:
            return  # refused (Engine.add said why)
        runs = self.runs.get(key)
        stored = None
        if runs is None:  # the key's first task here: it may be stored already, or have a history
            try:
                stored = self.store.get(key)
                runs = self.store.last_run(key)
            except StoreError as exc:
                engine._log(40, f"the store: reading {key!r} failed ({exc}); its runs start at 1")
                runs = 0
        if runs:
            core.continue_runs(task_id, runs)
        self.keys[task_id] = key
        self.runs[key] = runs
        if schedule["kind"] == "fixed_rate":
            self.rate[task_id] = schedule["period_ns"]
        if stored is not None and stored.definition.def_hash == def_hash and stored.unloadable is None:
            # The same task, stored after this scheduler started (another
            # scheduler sharing the store added it meanwhile): this one goes
            # on from the stored state - the same grid, the same run numbers -
            # and writes none of its own.
            now = time.monotonic_ns()
            self.peers.apply(engine, task_id, stored, now, time.time_ns() - now, force=True)
            return
        d = TaskDefinition(key, fn_ref, bytes(args), schedule, options, def_hash)
        self.batch.upsert(d, TaskState(runs, core.next_wall(task_id)))

    def unloadable(self, key: str, why: str) -> None:
        self.batch.unloadable(key, why)

    def attach(self, engine: Any) -> None:
        """Become ``engine``'s durable store (its hooks: see _engine.py)."""
        self.engine = engine
        engine.hold, engine.withdraw, engine.unstarted = self.hold, self.withdraw, self.unstarted
        if engine.prefetch:  # (fewer than without a store: a kill -9 records every run given ahead crashed)
            engine.prefetch = STORE_PREFETCH

    def hold(self, worker: Any, run: Any) -> bool:
        """Engine.hold: keep a keyed run until its start is committed - and
        any run given after a run still held to the same worker."""
        if self.dead:
            return False
        claim = None
        if run.task_id in self.keys:
            claim = (run.task_id, run.run, run.attempt)
            known = self.claims.get(claim)
            if known is None:
                self.claims[claim] = [QUEUED, run, self.keys[run.task_id]]
                self.held.append(claim)
            elif known[0] == RECORDED:  # given ahead before, taken back: recorded already
                claim = None
        fifo = self.fifo.get(worker)
        if claim is None and not fifo:
            return False
        if fifo is None:
            fifo = self.fifo[worker] = collections.deque()
        fifo.append((run, claim))
        return True

    def withdraw(self, worker: Any, run: Any, peek: bool = False) -> bool:
        """Engine.withdraw: take back ``run`` if it is the last run held for
        ``worker`` (True: it was never sent). Its claim, if not written
        yet, is dropped; if written (in flight or committed), it stays."""
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

    def unstarted(self, run: Any, now: int) -> None:
        """Engine.unstarted: a claimed run, taken back before it started,
        ends cancelled. Recorded so if its start was written (see the
        module docstring); stopped by shutdown, its slot stays its task's next."""
        claim = (run.task_id, run.run, run.attempt)
        known = self.claims.pop(claim, None)
        if known is None:
            return
        stage, _, key = known
        if stage == BATCHED:
            self._unbatch(claim, key)
        if stage in (QUEUED, BATCHED):
            return
        self.sync(self.engine)  # what happened before it is journalled first
        wall = run.wall_ns if run.wall_ns is not None else run.scheduled_ns + self.offset
        self.batch.finished(key, run.run, run.attempt, "cancelled", now + self.offset, wall if self.closing else None,
                            error_message="given ahead to a worker and cancelled before it started")  # fmt: skip

    def _release(self, carrier: Any) -> None:
        """Send each worker's held runs from the front while their starts are recorded."""
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
    def may_flush(self, engine: Any) -> bool:
        """Between turns (a worker died): journal what happened; True if
        its events may go to the user now (no earlier ones wait for a commit)."""
        self.sync(engine)
        return not (self.writer.busy or self.told)

    def sync(self, engine: Any) -> None:
        """Journal the engine's events since the last call, in order."""
        events = engine.events
        if events is not self.synced:  # flushed since (a new list): all of it is new
            self.synced, self.seen = events, 0
        for i in range(self.seen, len(events)):
            ev = events[i]
            tag = ev[0]
            if tag == EV_RUN:
                key = self.keys.get(ev[1])
                if key is not None:
                    self._run_ended(ev, key, engine)
            elif tag == EV_CANCELLED:
                key = self.keys.get(ev[1])
                if key is not None:
                    if not self.closing:
                        self.batch.delete(key)
                    self.cancelled.append(ev[1])
            elif tag == EV_STATE:
                key = self.keys.get(ev[1])
                if key is not None and ev[2] == "paused":
                    self.batch.update(key, paused=True)
                elif key is not None:
                    self.batch.update(key, paused=False, next_due_ns=ev[4])
        self.seen = len(events)

    def _run_ended(self, ev: tuple[Any, ...], key: str, engine: Any) -> None:
        (_, tid, run, _sched, _started, finished, _w, outcome, state, _nd, _m, _ended, blob_kind, blob,
         _out, attempt, sched_wall, next_wall, retrying) = ev  # fmt: skip
        if self.claims:
            self.claims.pop((tid, run, attempt), None)
        offset = self.offset
        error_type = error_message = None
        if blob_kind == BLOB_EXC and blob is not None:
            error_type, error_message = type(blob).__name__, str(blob)
        pending = state in ("pending", "paused")
        next_due = next_wall if state == "pending" else None
        if not pending and self.closing and state == "cancelled":
            # stopped by shutdown: it stays stored; a fixed-rate task keeps its grid
            period = self.rate.get(tid)
            next_due = None if period is None else sched_wall + period
        self.batch.finished(key, run, attempt, outcome, finished + offset, next_due, retry=bool(retrying),
                            error_type=error_type, error_message=error_message)  # fmt: skip
        if state == "paused":
            self.batch.update(key, paused=True)
        elif not pending:
            if not (self.closing and state == "cancelled"):
                self.batch.delete(key)
            self.keys.pop(tid, None)
            self.rate.pop(tid, None)

    def turn(self, engine: Any, carrier: Any, offset: int, now: int) -> int | None:
        """End of a dispatcher turn: hand the turn's changes to the writer,
        whose commit sends the keyed runs whose start it records (see
        ``committed``). While a commit is in flight, the changes wait for the
        next one. Returns when to renew the lease."""
        self.offset = offset
        peers = self.peers
        if peers.sync_at is None:
            peers.sync_at = now + peers.interval
        elif now >= peers.sync_at and not self.dead:
            peers.sync(engine, now, offset)
        self.sync(engine)
        self.seen = 0  # the dispatcher flushes the events next
        held, self.held = self.held, []
        claims, batch, waiting = self.claims, self.batch, self.waiting
        for claim in held:
            known = claims.get(claim)
            if known is None or known[0] != QUEUED:
                continue  # withdrawn before its start was written
            known[0] = BATCHED
            run, key = known[1], known[2]
            wall = run.wall_ns if run.wall_ns is not None else run.scheduled_ns + offset
            batch.started(key, run.run, run.attempt, wall, now + offset)
            self.runs[key] = run.run
            waiting.append(claim)
        if self.dead:
            return None
        if self.writer.busy or len(self.batch):
            # The user hears of this turn's events (a keyed run's end among
            # them) once the commit recording them is done: history() after
            # result() finds the run. Later events wait behind them, in order.
            self.told.extend(engine.events)
            engine.events.clear()
        if self.writer.busy:  # pipelined: this turn's changes go with the next commit (group commit)
            pass
        elif len(self.batch) and (self.retry_at is None or now >= self.retry_at):
            batch, self.batch = self.batch, self.writer.store.batch(self.holder)
            waiting, self.waiting = self.waiting, []
            for claim in waiting:
                known = self.claims.get(claim)
                if known is not None and known[0] == BATCHED:
                    known[0] = FLIGHT
            told, self.told = self.told, []
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
            try:
                if not self.store.renew_lease(self.holder):
                    self._fenced_out(engine)
            except StoreError as exc:
                engine._log(40, f"the store: renewing the lease failed ({exc})")
            self.renew_at = now + self.lease_ns // 3
        if self.cancelled:
            self.cancelled = [t for t in self.cancelled if engine.core.state(t) is not None]
            for tid in list(self.keys):
                if engine.core.state(tid) is None and tid not in self.expected:
                    self.keys.pop(tid)
        if self.retry_at is not None and not self.writer.busy:
            return min(self.renew_at, peers.sync_at, self.retry_at)
        return min(self.renew_at, peers.sync_at)

    def _fenced_out(self, engine: Any) -> None:
        """Our registration was taken over (our lease expired: we were
        stopped or cut off): what we held is recorded crashed by another
        scheduler, and nothing of ours was written since. Register again and
        realign every keyed task with the store at once."""
        engine._log(40, f"this scheduler's store registration {self.holder.id} was taken over (its lease expired): "
                        "its runs in flight were recorded crashed by another scheduler and their ends are not "
                        "recorded; registering again")  # fmt: skip
        try:
            self.holder = self.store.register(lease_ns=self.lease_ns, pid=self.owner_pid)
        except StoreError as exc:  # the old registration stays: fenced again next turn, registered again then
            engine._log(40, f"the store: registering again failed ({exc})")
            return
        self.batch.holder = self.holder
        self.peers.sync_at = 0  # a re-read at the next turn

    def stats(self, engine: Any) -> dict[str, Any]:
        """Who this scheduler is on the store, what it holds, who else is there."""
        h = self.holder
        running = engine.core.state
        return {
            "scheduler": {"id": h.id, "host": h.host, "pid": h.pid, "lease": self.lease_ns / NS},
            "holding": sorted(k for t, k in self.keys.items() if running(t) is RunState.RUNNING),
            "peers": [{"id": p.id, "host": p.host, "pid": p.pid} for p in self.peers.holders if p.id != h.id],
            "taken_over": self.peers.takeovers,
            "standby": sorted(self.keys[t] for t in self.peers.standby if t in self.keys),
        }

    def committed(self, engine: Any, carrier: Any, now: int) -> None:
        """The writer's commit ended (its pipe was readable): send the runs
        whose start it recorded - or, if the store says another scheduler
        holds them, skip them here (``Peers.lost``: the task goes on to its
        next slot) - and emit the events it recorded to the user."""
        if not self.writer.busy:
            return  # collected already (Journal.turn waited for it)
        (done, told, batch), result = self.writer.collect()
        claims = self.claims
        mine = [(c, known) for c in done if (known := claims.get(c)) is not None and known[0] == FLIGHT]
        lost: set[tuple[str | None, int, int]] = set()
        if isinstance(result, StoreError):
            self._retry(engine, batch, mine, told, result, now)
            return
        elif isinstance(result, BaseException):
            raise result  # a bug in the store layer: the dispatcher's crash handling takes it
        else:
            if self.retry_ns:
                engine._log(30, "the store records again; the keyed runs that waited for it go on")
                self.retry_ns = 0
                self.retry_at = None
            if batch.fenced:  # a batch with claims or finishes renewed the lease
                self.renew_at = now + self.lease_ns // 3
            lost = set(result.lost)
            if result.fenced_out:  # another scheduler recorded our runs crashed: run none of these
                lost = {(known[2], c[1], c[2]) for c, known in mine}
                self._fenced_out(engine)
                # what the user asked (adds, cancels, pauses) is still to be written; runs are not ours
                self.batch.ops[:0] = [op for op in batch.ops if op[0] not in ("started", "finished")]
        gone = []
        for claim, known in mine:
            if (known[2], claim[1], claim[2]) in lost:
                del claims[claim]
                gone.append(known)
            else:
                known[0] = RECORDED
        if gone:  # a run another scheduler holds never started here: the user hears nothing of it
            ids = {(known[1].task_id, known[1].run) for known in gone}
            told = _split_started(told, ids)[0]
            self.told = _split_started(self.told, ids)[0]
        if told:
            self.emit(told)
        for _, run, key in gone:  # another scheduler has it: the next slot
            self.peers.lost(engine, self._unhold(run), run, key, now, self.offset)
        self._release(carrier)

    def _unhold(self, run: Any) -> Any:
        """Take ``run`` out of its worker's held runs; that worker, or None."""
        for worker, fifo in self.fifo.items():
            for i, (held, _) in enumerate(fifo):
                if held is run:
                    del fifo[i]
                    return worker
        return None

    def _retry(self, engine: Any, batch: Any, mine: list[tuple[Any, list[Any]]], told: list[Any],
               error: StoreError, now: int) -> None:  # fmt: skip
        """The commit failed (store unreachable, locked, full): nothing of it
        was written. Its keyed runs have not started and do not start
        unrecorded (another scheduler may claim the same slot, and a restart
        must find the store exact): they wait, their workers reserved, and
        the batch is tried again with the next one, after a back-off (50 ms,
        doubling to 2 s). The user hears the rest of what happened (unkeyed
        tasks and the ends of runs go on; their records follow the store)."""
        if not self.retry_ns:
            engine._log(40, f"the store could not record a turn ({error}); keyed runs wait until it can "
                            "(trying again, at most every 2 s)")  # fmt: skip
        self.retry_ns = min(2 * self.retry_ns or RETRY_FIRST_NS, RETRY_MAX_NS)
        self.retry_at = now + self.retry_ns
        others, starts = _split_started(told, {(known[1].task_id, known[1].run) for _c, known in mine})
        self.emit(others)
        self.told[:0] = starts
        # The batch goes again, before what came since (a run withdrawn
        # meanwhile has its end there, after its start).
        self.batch.ops[:0] = batch.ops
        self.batch.fenced = self.batch.fenced or batch.fenced  # its claims and ends are fenced again
        for _c, known in mine:
            known[0] = BATCHED
        self.waiting[:0] = [c for c, _known in mine]

    def drain(self, engine: Any, carrier: Any, offset: int, now: int) -> None:
        """A clean end: every change committed (and its events emitted) before this returns."""
        self.turn(engine, carrier, offset, now)
        while self.writer.busy:
            self.writer.wait(None)
            self.committed(engine, carrier, now)
            self.turn(engine, carrier, offset, now)

    def close(self, clean: bool) -> None:
        """Shutdown (clean: unregister) or the user process died (leave the
        registration: the next start records the runs in flight crashed)."""
        self.dead = True
        try:
            self.writer.close()  # after the commit in flight, if any
            if clean:
                self.store.unregister(self.holder)
        except StoreError:
            pass
        finally:
            self.store.close()


def _split_started(events: list[Any], runs: set[tuple[int, int]]) -> tuple[list[Any], list[Any]]:
    """(the events but the run_started of ``runs`` (task id, run), those run_started)."""
    rest: list[Any] = []
    started: list[Any] = []
    for ev in events:
        (started if ev[0] == EV_STARTED and (ev[1], ev[2]) in runs else rest).append(ev)
    return rest, started
