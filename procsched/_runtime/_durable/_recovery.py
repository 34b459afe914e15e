"""The user process's side of a store: a keyed task's definition at the
call, and recovery at start-up (before the dispatcher owns the store).

    Scheduler(store=...) ─ open_store ─▶ recover(store): take over dead schedulers
                                           (their runs in flight -> crashed), and
                                           list the other live ones (Recovered)
                           plan(tasks): per stored task its shape, per
                           shape (function, arguments, schedule, options) one
                           import (bounded: LOAD_TIMEOUT_S), one AdoptShape
                           (the stored arguments as bytes: a worker unpickles)
                        ─▶ _report.resumed: what start-up found, said at INFO
                        ─▶ the facade makes the rows (resume points: Plan.rows)
                           and handles, and sends Adopt chunks, a chunk at a time
    schedule(key=...) ──▶ definition(spec): the stored form ─▶ Define + Add

See ``_journal.py`` for the dispatcher's side.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import timedelta
from typing import Any, NamedTuple

from ... import _tz
from ..._core import Schedule
from ..._core._schedule import upgrade_record
from ..._core._units import NS
from ..._retry import Retry
from ..._store import Holder, RunRecord, StoredTask, TaskDefinition, dead_here, function_ref, resolve_ref
from ..._validate import TaskSpec
from .._messages import AdoptShape, Message
from .._wire import carried_classes, pack_call
from ._stored import crash_fields, regular_slot, resume_point, stored_hash

logger = logging.getLogger("procsched")


def definition(spec: TaskSpec, fn: Any, arg_blob: bytes, wall_now: int) -> TaskDefinition:
    """A keyed task's stored definition (its ``until`` counted from
    ``wall_now``, the call). Raises TypeError (why) for a function that
    cannot be stored by reference (a lambda, a closure...)."""
    assert spec.key is not None
    ref = function_ref(fn)
    retry = None
    if spec.retry is not None:
        r = spec.retry.policy()
        retry = [
            r.attempts,
            r.delay_ns,
            r.backoff,
            r.max_delay_ns,
            r.jitter,
            sorted(r.outcomes),
            [f"{c.__module__}:{c.__qualname__}" for c in spec.retry.classes],
        ]
    options = {"priority": spec.priority, "timeout_ns": spec.timeout_ns, "name": spec.name, "retry": retry}
    return TaskDefinition(spec.key, ref, arg_blob, spec.schedule.to_record(spec.delay_ns, wall_now), options)


def spec_of(d: TaskDefinition, wall_now: int) -> TaskSpec:
    """The request a stored definition was made from, as of ``wall_now``
    (its ``until`` counts from then; a cron task's first slot is the first
    after it)."""
    schedule, delay = Schedule.from_record(d.schedule, d.options, wall_now, _tz.zone)
    o = upgrade_record(d.schedule, d.options)[1]
    retry = None
    if o.get("retry") is not None:
        attempts, delay_ns, backoff, max_delay_ns, jitter, outcomes, classes = o["retry"]
        retry = Retry(
            attempts,
            timedelta(microseconds=delay_ns / 1000),
            backoff,
            timedelta(microseconds=max_delay_ns / 1000),
            jitter,
            (*outcomes, *(resolve_ref(c) for c in classes)),
        )
        retry.delay, retry.max_delay = delay_ns / NS, max_delay_ns / NS
    return TaskSpec(
        schedule, delay, o["priority"], o["timeout_ns"], o["name"], start_wall_ns=wall_now, retry=retry, key=d.key
    )


class Recovered(NamedTuple):
    """What start-up found in the store (see :func:`recover`)."""

    tasks: list[StoredTask]
    crashed: dict[str, RunRecord]
    """Key -> its run recorded ``crashed`` (in flight when its scheduler died)."""
    slots: dict[str, int]
    """Key (its current run a retry) -> that run's regular slot: the grid goes on from it."""
    others: list[Holder]
    """The other schedulers alive on the store (lease renewed, not dead on
    this host): the stored tasks are theirs too, each run claimed once."""


def recover(store: Any) -> Recovered:
    """Start-up: record the runs of dead schedulers ``crashed`` (once) and
    return what the store holds (see ``Recovered``). Dead for certain only:
    those of this host whose process is gone. One whose lease ran out is
    taken over by this scheduler's dispatcher once it has itself written to
    the store for a whole lease (``Journal.may_take_over``), as any running
    scheduler does: a lease runs out alike when its holder died and when the
    store refused everyone's writes (a lock, a restart), and a scheduler
    that started then took over every one alive, recording their runs
    crashed to run them again (the fault campaign, seed 3920: a one-shot
    ran to completion twice)."""
    loaded = store.load()
    dead = dead_here(loaded.schedulers)
    gone = {h.id for h in dead}
    me = (socket.gethostname(), os.getpid())  # (this scheduler registers itself meanwhile: never "another")
    others = [h for h in loaded.schedulers if h.id not in gone and (h.host, h.pid) != me]
    crashed: dict[str, RunRecord] = {}
    wall = time.time_ns()

    def reschedule(task: StoredTask, record: RunRecord, slot: int | None) -> dict[str, int | None]:
        # In the take-over's transaction: the others alive on the store never see a crashed
        # task before its reschedule. Left to the plan: a one-shot that ended (it says so),
        # and a definition that does not decode (the plan lists it unloadable, with why).
        try:
            return crash_fields(task, record, wall, slot) or {}
        except Exception:  # noqa: BLE001 - whatever a bad stored record raises
            return {}

    for holder in dead:
        runs = store.take_over(holder, None, force=True, reschedule=reschedule)
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
            if (
                last
                and last[0].outcome == "crashed"
                and last[0].error_type == "SchedulerDied"
                and last[0].run == st.run_count
                and last[0].scheduled_ns == st.next_due_ns
            ):
                crashed[task.key] = last[0]
    return Recovered(tasks, crashed, retry_slots(store, tasks, crashed), others)


def retry_slots(store: Any, tasks: list[StoredTask], crashed: dict[str, RunRecord]) -> dict[str, int]:
    """key -> the regular slot (UTC ns, from the history) of the run whose
    next attempt is a retry, for the tasks that have one: the grid goes on
    from it (from the retry's time it shifted, and its slots were never run:
    the fault campaign, seed 600, a task adopted from another scheduler)."""
    slots: dict[str, int] = {}
    for task in tasks:
        if not crashed and task.state.next_attempt == 1:
            continue  # (no crash, no retry: a restart's usual case, cheaply)
        record = crashed.get(task.key)
        run = (
            record.run
            if record is not None and record.attempt > 1
            else (task.state.run_count if task.state.next_attempt > 1 else None)
        )
        if run is not None:
            slot = regular_slot(store, task.key, run)
            if slot is not None:
                slots[task.key] = slot
    return slots


class Row(NamedTuple):
    """One stored task of a plan (an ``AdoptRow`` once it has an id)."""

    key: str
    shape: int
    """An index into the plan's shapes."""
    runs: int
    attempt: int
    due_wall_ns: int
    slot_wall_ns: int
    paused: bool
    write: bool
    name: str | None


# The adoption loop unpacks a Row in this order (``Scheduler._adopt``: 100,000
# rows read through their fields' properties cost ~30 ms more).
assert Row._fields == ("key", "shape", "runs", "attempt", "due_wall_ns", "slot_wall_ns", "paused", "write", "name")


class Plan(NamedTuple):
    """How to adopt stored tasks (see :func:`plan`)."""

    shapes: list[Message]
    """``AdoptShape`` messages."""
    tasks: list[Adoptee]
    """The stored tasks to adopt, in the store's order: a ``Row`` each (``rows``)."""
    ended: list[str]
    """Keys of one-shots that ended (their only run crashed): to delete."""
    adopted: dict[str, str]
    """Key -> its definition's hash (``stored_hash``): the same task scheduled again goes on."""
    unloadable: dict[str, str]
    """Key -> why its function or arguments did not load here (logged; kept in the store)."""
    crashed: dict[str, RunRecord]
    slots: dict[str, int]
    wall: int
    """What the rows are made from (``recover``'s, and the plan's time)."""

    def rows(self, lo: int = 0, hi: int | None = None) -> list[Row]:
        """The ``Row`` of each of ``tasks[lo:hi]``: where it goes on. Made
        when asked (pure: no store read), so that the facade hands a chunk
        to the dispatcher while it makes the next one - the dispatcher's
        adoption of the first chunks overlaps the rest of the planning."""
        crashed, slots, wall = self.crashed, self.slots, self.wall
        new = tuple.__new__  # (a Row made from its fields in one C call: its __new__ takes 3 times as long)
        out: list[Row] = []
        append = out.append
        for task, shape, name in self.tasks[lo:hi]:
            key = task.definition.key
            resume = resume_point(task, crashed.get(key) if crashed else None, wall, slots.get(key) if slots else None)
            assert resume is not None  # (a one-shot it ends is in ``ended``, not here)
            runs, attempt, due, slot, paused = resume
            st = task.state
            write = (  # adopted unchanged: nothing to write
                task.unloadable is not None
                or runs != st.run_count
                or due != st.next_due_ns
                or attempt != st.next_attempt
                or paused != st.paused
            )
            append(new(Row, (key, shape, runs, attempt, due or 0, slot, paused, write, name)))
        return out


class Adoptee(NamedTuple):
    """A stored task of a plan, before its ``Row`` is made (``Plan.rows``)."""

    task: StoredTask
    shape: int
    """An index into the plan's shapes."""
    name: str | None


#: How long start-up waits for the stored tasks' functions to load (their
#: modules to import): a module that hangs at import (or is still importing
#: then) leaves its tasks unloadable, listed with the reason, not run.
LOAD_TIMEOUT_S = 5.0


def _load_shape(d: TaskDefinition, wall: int, fns: dict[str, Any]) -> tuple[Message, str | None]:
    """One shape's ``AdoptShape`` (and its task name): the function imported
    and pickled by reference, the stored arguments handed through as the
    bytes they are (only a worker unpickles them: issue 20 item 17)."""
    fn = fns.get(d.fn_ref)
    if fn is None:
        fn = fns[d.fn_ref] = resolve_ref(d.fn_ref)
    spec = spec_of(d, wall)
    payload = (pack_call(fn, (), {})[0], bytes(d.args))  # the processes runner's (the only one with a store)
    retry = None if spec.retry is None else spec.retry.policy().to_wire()
    shape = AdoptShape.wire(
        spec.schedule.to_wire(),
        wall,
        spec.priority,
        spec.timeout_ns,
        spec.name,
        payload,
        retry,
        carried_classes(spec.retry, True),
    )
    return shape, spec.name


def _load_shapes(defs: list[TaskDefinition], wall: int, timeout: float) -> list[tuple[Message, str | None] | str]:
    """Each definition's loaded shape, or why it did not load: loaded in a
    thread of its own, bounded by ``timeout`` (a module that exits at import
    is contained: SystemExit is a reason like any other; one that hangs
    leaves the rest unloaded, its thread behind: a daemon)."""
    out: list[tuple[Message, str | None] | str] = []
    done = threading.Event()
    lock = threading.Lock()
    given_up = False

    def load() -> None:
        fns: dict[str, Any] = {}
        for d in defs:
            try:
                got: tuple[Message, str | None] | str = _load_shape(d, wall, fns)
            except BaseException as exc:  # noqa: BLE001 - whatever importing a user's module raises, SystemExit too
                got = f"{type(exc).__name__}: {exc}"
            with lock:
                if given_up:
                    return
                out.append(got)
        done.set()

    threading.Thread(target=load, name="procsched-load-stored", daemon=True).start()
    done.wait(timeout)
    with lock:
        given_up = True
        late = f"TimeoutError: its function did not load within {timeout:g} s (does its module hang at import?)"
        return out + [late] * (len(defs) - len(out))


def plan(tasks: list[StoredTask], crashed: dict[str, RunRecord], slots: dict[str, int], wall: int) -> Plan:
    """What to adopt stored tasks with, as of ``wall``.

    A *shape* is what tasks of one function, arguments, schedule and
    options share - the import, the pickled call, the schedule and the
    dispatcher's add are made once per shape, not once per task (100,000
    stored tasks are typically of a few shapes; ``load()`` shares equal
    schedule and options dicts, so a shape is found by identity). Nothing
    stored is unpickled here: the arguments go to the workers as bytes.
    Each task's resume point (its ``Row``) is made later, a chunk at a
    time (``Plan.rows``); only a crashed task's is asked here (a one-shot
    whose only run crashed ends)."""
    result = Plan([], [], [], {}, {}, crashed, slots, wall)
    by_shape: dict[tuple[Any, ...], int] = {}  # -> index into defs
    defs: list[TaskDefinition] = []
    wanted: list[tuple[StoredTask, int]] = []
    want = wanted.append
    for task in tasks:
        d = task.definition
        if task.untrusted is not None:  # its signature failed (issue 24): never imported nor unpickled
            logger.warning("stored task %r is not loaded: %s; it is kept in the store, not run", d.key, task.untrusted)
            result.unloadable[d.key] = task.untrusted
            continue
        if task.holder is not None and d.schedule["kind"] == "once":  # (a store's word for it, in every version)
            continue  # its only run is another live scheduler's
        shape = (d.fn_ref, d.args, id(d.schedule), id(d.options))
        index = by_shape.get(shape)
        if index is None:
            index = by_shape[shape] = len(defs)
            defs.append(d)
        want((task, index))
    loaded = _load_shapes(defs, wall, LOAD_TIMEOUT_S) if defs else []
    shape_of: dict[int, int] = {}  # index into defs -> index into result.shapes
    names: list[str | None] = []
    adoptees, adopted, new = result.tasks, result.adopted, tuple.__new__
    for task, index in wanted:
        d = task.definition
        key = d.key
        got = loaded[index]
        if isinstance(got, str):
            logger.warning("stored task %r cannot be loaded (%s); it is kept in the store, not run", key, got)
            result.unloadable[key] = got
            continue
        at = shape_of.get(index)
        if at is None:
            at = shape_of[index] = len(result.shapes)
            result.shapes.append(got[0])
            names.append(got[1])
        record = crashed.get(key) if crashed else None  # (only a crash ends a task: its row is made in Plan.rows)
        if record is not None and resume_point(task, record, wall, slots.get(key)) is None:
            logger.warning(
                "stored one-shot task %r: its run was in flight when its scheduler died (recorded crashed); it ends",
                key,
            )
            result.ended.append(key)
            continue
        adoptees.append(new(Adoptee, (task, at, names[at])))  # (one C call, as in Plan.rows)
        adopted[key] = stored_hash(d)
    return result
