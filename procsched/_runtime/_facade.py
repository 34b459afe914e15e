"""Scheduler: the user-process facade over the processes, threads or Ray runtime.

    caller threads ── schedule() / cancel() / stats() ──▶ backend.send(command)   (_messages.py)
                                                           │  processes: pipe to the dispatcher process
                                                           │  threads, ray: queue to the dispatcher thread
    listener thread ◀── event batches ── backend.next_batch()   (_listener.py)
       └─▶ resolves TaskHandles, answers requests, logs, calls listeners
    Scheduler(store=...) ── recovery (_durable/_recovery.py) ──▶ Adopt commands

The facade owns the handles; only the listener thread writes them. Task ids
are numbered here, so ``schedule()`` never waits for the dispatcher; calls
that need an answer (``cancel``, ``stats``) send a request and wait for its
answer, which comes on the same ordered event stream as everything else, so
a cancel's effect on the handle is visible by the time ``cancel()`` returns.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import itertools
import logging
import os
import sys
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import _validate as v
from .._api import LiveTasks, SchedulingAPI
from .._clock import MonotonicClock
from .._core import TaskState
from .._core._limits import checked_limits
from .._core._units import NS, wall_datetime
from .._errors import SchedulerBrokenError, SchedulerClosedError, SchedulerError, StoreError
from .._events import Listeners
from .._handle import HANDLE_RUNS, RunInfo, TaskHandle, skipped_slot, stored_error
from .._handle import handle_runs as checked_handle_runs
from . import _messages as m
from ._gc import gc_paused
from ._listener import EventApplier, listen
from ._wire import carried_classes

if TYPE_CHECKING:
    from ._durable._recovery import Plan, Row

logger = logging.getLogger("procsched")
#: How long a request (cancel, stats) waits for its answer before the
#: dispatcher is taken as wedged (a SchedulerBrokenError, never a bare TimeoutError).
REQUEST_TIMEOUT = 60.0
#: How long exiting a ``with Scheduler()`` block waits before saying (INFO) what it waits for.
QUIET_WAIT = 1.0

_live: weakref.WeakSet[Scheduler] = weakref.WeakSet()


def _default_start_method() -> str:
    import multiprocessing

    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


class Scheduler(LiveTasks, SchedulingAPI, concurrent.futures.Executor):
    """Runs scheduled work on a pool of worker processes (or threads).

    Args:
        workers: pool size; defaults to the CPU count.
        runner: ``"processes"`` (default: a dispatcher process and worker
            processes; a crash costs one run), ``"threads"`` (same API and
            semantics, in this process; no crash isolation, and a timed-out
            or interrupted run cannot be killed: it is abandoned, its result
            discarded, and a fresh thread takes its place) or ``"ray"``
            (every run a Ray task on the cluster ``ray.init()`` reaches;
            ``workers`` bounds the runs in flight, default the cluster's
            CPUs; the scheduling methods take ``ray_options=``).
        policy: ``"priority"``, ``"due"`` or ``"fifo"`` (see README).
        max_tasks_per_worker: replace a worker after this many runs.
        timeout: default per-run timeout in seconds (per-task ``timeout=`` wins).
        mp_context: multiprocessing start method (name or context) for the
            workers; default forkserver where available, else spawn.
        clock: only the real monotonic clock (``None``); use
            ``InlineScheduler`` with a ``ManualClock`` for virtual time.
        max_worker_memory: bytes; a worker whose RSS is above this after a
            run is replaced.
        capture_output: capture each run's stdout and stderr (file
            descriptors 1 and 2, so C-level writes and a crash's
            faulthandler trace are caught), keep the last 64 KiB, and attach
            it to the run (``RunInfo.output``, the ``output`` field of run
            end events). False (default): runs write to this process's
            stdout/stderr. The threads runner cannot capture (``output`` is
            None); on Ray, the output also goes on to the Ray worker's own.
        store: a durable store for keyed tasks (processes runner): a file
            path or ``"sqlite:///path"`` (SQLite) or ``"postgresql://..."``.
            Opened here (a bad store is a ``StoreError`` now); keyed tasks'
            definitions, state and runs live in it, stored tasks are resumed
            at once, runs in flight when a previous scheduler died are
            recorded ``crashed`` (see README, "Durable schedules"). A store
            holds code (functions by reference, pickled arguments): whoever
            can write it can make its workers run code, unless ``secret``.
        lease: seconds (default 30) a scheduler sharing its store with
            others holds its runs without renewing: when it dies, the others
            record its runs in flight ``crashed`` and carry its schedules on
            within about this long (see README, "Running several instances").
        secret: with ``store=``: the secret that signs the stored tasks'
            definitions (HMAC-SHA256; bytes or str), or a list of them
            (sign with the first, accept any: rotation). A stored task whose
            signature does not verify is never unpickled nor imported: it is
            unloadable ("signature does not match", ``stats()["unloadable"]``).
            None: ``PROCSCHED_SECRET`` if set (comma-separated for several),
            else no secret - every stored row is trusted as code (see
            README, "Security").
        limits: shared limits, ``{"db": 2}``: at most 2 runs of tasks
            scheduled with ``group="db"`` run at once (a due run whose group
            is full waits, in priority order). With ``store=``, the limit
            holds across every instance on the store.
        handle_runs: how many ``RunInfo`` each ``TaskHandle`` keeps in
            ``runs``, the newest (default 1000); ``run_count`` counts all.
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        runner: str = "processes",
        policy: str = "priority",
        max_tasks_per_worker: int | None = None,
        timeout: float | None = None,
        mp_context: Any = None,
        clock: Any = None,
        max_worker_memory: int | None = None,
        capture_output: bool = False,
        store: str | os.PathLike[str] | None = None,
        lease: float = 30.0,
        secret: bytes | str | Sequence[bytes | str] | None = None,
        limits: Mapping[str, int] | None = None,
        handle_runs: int = HANDLE_RUNS,
    ) -> None:
        self.handle_runs = checked_handle_runs(handle_runs)
        if runner not in ("processes", "threads", "ray"):
            raise ValueError(f"runner must be 'processes', 'threads' or 'ray', not {runner!r}")
        if runner == "ray":
            _ray_unsupported(max_tasks_per_worker=max_tasks_per_worker, max_worker_memory=max_worker_memory)
            if workers is None:
                from ._ray import cluster_cpus

                workers = cluster_cpus()  # connects to Ray (SchedulerError if it cannot)
        workers = _positive_int("workers", (os.cpu_count() or 1) if workers is None else workers)
        config: dict[str, Any] = {
            "workers": workers,
            "policy": v.policy(policy).value,
            "max_tasks_per_worker": None
            if max_tasks_per_worker is None
            else _positive_int("max_tasks_per_worker", max_tasks_per_worker),
            "max_worker_memory": None
            if max_worker_memory is None
            else _positive_int("max_worker_memory", max_worker_memory),
            "start_method": _start_method(mp_context),
            "sys_path": list(sys.path),
            "capture_output": v.flag("capture_output", capture_output),
        }
        self._limits = config["limits"] = checked_limits(limits)
        self._default_timeout = v.optional_timeout_ns(timeout)
        config["default_timeout"] = self._default_timeout  # for tasks scheduled from inside tasks
        if clock is not None and not isinstance(clock, MonotonicClock):
            raise TypeError(
                f"clock must be None (the monotonic clock) for Scheduler, not {clock!r}; "
                "use InlineScheduler(clock=ManualClock()) for virtual time"
            )
        self._store: Any = None
        self._adopted: dict[str, str] = {}  # stored key -> its definition's hash (stored_hash), until scheduled again
        self._unloadable: dict[str, str] = {}  # stored key -> why its function or arguments did not load
        self._down: dict[str, tuple[int, ...]] = {}  # stored key -> slots its start recorded "down" (told once)
        self._adopt_lock = threading.Lock()  # adoptions (start-up, then other schedulers' tasks) one at a time
        #: keys the program is adding (``_add``; under ``_adopt_lock``): not adopted meanwhile (``_adopt``)
        self._adding: Counter[str] = Counter()
        self._shapes_sent = 0  # adoption shapes the dispatcher has (see _adopt)
        if isinstance(lease, bool) or not isinstance(lease, (int, float)) or not 0.1 <= lease <= 86_400:
            raise ValueError(f"lease must be seconds between 0.1 and 86400, got {lease!r}")
        lease_ns = int(lease * NS)
        if secret is not None and store is None:
            raise ValueError("secret= signs a store's rows: it needs store=")
        if store is not None:
            if runner != "processes":
                raise ValueError(f"store= is supported with runner='processes' only, not runner={runner!r}")
            from .._secret import resolve
            from .._store import open_store
            from ._durable._writer import patiently

            keys = resolve(secret)  # ValueError, TypeError: a bad secret, at the call
            self._store = open_store(store, secret=keys)  # StoreError now, at the call
            if self._limits:  # shared by every instance on the store (counted in its claims)
                limits = self._limits
                patiently(lambda: self._store.set_limits(limits))  # (a store locked for a moment: waited out)
            config["secret"] = keys  # (the configuration frame: never a command line or an environment)
            self._store_lock = threading.Lock()  # one thread at a time on the facade's connection
            target = os.fspath(store)  # the dispatcher opens it again (a URL as given: its options count)
            config["store"] = target if "://" in target else self._store.path
            config["owner_pid"] = os.getpid()
            config["lease_ns"] = lease_ns
        self.runner = runner
        self._ray_runner = runner == "ray"
        self._zones_travel = runner != "threads"
        self.workers = workers
        self._handles: dict[int, TaskHandle] = {}
        self._keys: dict[str, TaskHandle] = {}
        self._requests: dict[int, concurrent.futures.Future[Any]] = {}
        self._ids = itertools.count(1)
        self._request_ids = itertools.count(1)
        self._lock = threading.Lock()  # orders commands against shutdown
        self._closed = False
        self._stream_closed = False  # the event stream ended: no request can be answered any more
        self._broken: str | None = None
        self._fork = _forks  # a forked child must not use this Scheduler (see _after_fork_in_child)
        self._listeners = Listeners()
        self._backend: Any
        if runner == "processes":
            from ._process_backend import ProcessBackend

            self._backend = ProcessBackend(config)
        elif runner == "ray":
            from ._ray import RayBackend

            self._backend = RayBackend(config, self)
        else:
            from ._threads import ThreadBackend

            self._backend = ThreadBackend(config, weakref.ref(self))
        # The listener holds this Scheduler only weakly, so one dropped without
        # shutdown() is collected; then its backend shuts down (see _dropped).
        # Waits for the stream's end wait on this event, never on
        # Thread.join: on Python 3.11 a Ctrl-C landing in join() marks the
        # thread stopped while it still runs (its tstate lock is released).
        self._events = EventApplier(
            self, self._handles, self._keys, self._requests, self._listeners, self._backend, self._adopt_stored
        )
        self._listener_done = threading.Event()
        self._listener = threading.Thread(
            target=listen,
            args=(weakref.ref(self), self._backend, self._listener_done),
            name="procsched-listener",
            daemon=True,
        )
        weakref.finalize(self, _dropped, self._backend).atexit = False  # at exit, _at_exit decides
        self._listener.start()
        _live.add(self)
        if self._store is not None:
            # Recovery runs while the dispatcher starts (its imports, its
            # workers): it waits for the stored tasks in its command pipe.
            from ._durable._writer import patiently

            try:
                with gc_paused():
                    # (a store busy for a moment - locked, a connection dropped
                    # - is waited out: recovery is exact however often it is begun)
                    self._adopt(patiently(self._recover))
            except BaseException:
                self._abort(quiet=True)
                self._store.close()
                raise
        for key, why in self._unloadable.items():
            self._backend.send(m.Unloadable.wire(key, why))

    def _recover(self) -> Plan:
        """Start-up on a store (before the dispatcher owns it): take over dead
        schedulers (their runs in flight -> crashed), and plan the adoption
        of every stored task; one-shots that ended are dropped."""
        from ._durable import _recovery, _report
        from ._durable._down import record_down

        self._store.resign()  # secret=[new, old]: what only an older secret signed is signed with the new one
        found = _recovery.recover(self._store)
        tasks, crashed, slots = found.tasks, found.crashed, found.slots
        wall = time.time_ns()
        plan = _recovery.plan(tasks, crashed, slots, wall)
        _report.resumed(found, plan, wall)
        self._down = record_down(self._store, tasks, crashed, slots, plan.adopted, wall)  # missed while down: skipped
        if plan.ended:
            batch = self._store.batch()
            for key in plan.ended:
                batch.delete(key)
            batch.commit()
        return plan

    def _adopt(self, plan: Plan, stored: bool = False) -> bool:
        """Give each stored task of ``plan`` a handle and hand them all to the
        dispatcher in ``Adopt`` commands of ADOPT_CHUNK rows (see
        ``Journal.adopt``). A handle is registered before its command goes,
        since its events may come at once. A paused task's handle learns it
        from the dispatcher. The dispatcher keeps every shape it was sent: a
        row's shape counts from the first shape of the first adoption.

        ``stored``: another scheduler's task (``_adopt_stored``), which the
        program may be adding itself at this very moment - its add and this
        adoption both made a live task of the key, and both ran its every
        run (the fault campaign, seed 2503). Under the lock ``_add`` marks
        its key with, such a key is left to the program's add (and asked
        again: the dispatcher adopts it then only if no task of it came)."""
        self._unloadable.update(plan.unloadable)
        offset = time.time_ns() - time.monotonic_ns()
        handles, keys, ids = self._handles, self._keys, self._ids
        with self._adopt_lock:
            rows: list[Row] | None = None  # (start-up: each chunk's rows made as it goes - see Plan.rows)
            count = len(plan.tasks)
            if stored:
                # Its stored state is the other scheduler's: adopting writes nothing.
                rows = [row._replace(write=False) for row in plan.rows()]
                taken = [r for r in rows if r.key in self._adding or not _free(keys.get(r.key))]
                for row in taken:
                    self._backend.send(m.AdoptAgain.wire(row.key))
                rows = [r for r in rows if r not in taken]
                if not rows:
                    return False
                count = len(rows)
                self._adopted.update((r.key, plan.adopted[r.key]) for r in rows)
            else:
                self._adopted.update(plan.adopted)  # (a key per task of the plan)
            base = sent_shapes = self._shapes_sent
            hashes, down, wire = plan.adopted, self._down, m.AdoptRow.wire
            for lo in range(0, count, ADOPT_CHUNK):
                chunk: list[m.Message] = []
                append = chunk.append
                for row in plan.rows(lo, lo + ADOPT_CHUNK) if rows is None else rows[lo : lo + ADOPT_CHUNK]:
                    key, shape, runs, attempt, due, slot, paused, write, name = row  # (Row's fields: see _recovery)
                    task_id = next(ids)
                    handle = TaskHandle(self, task_id, name, (due - offset) / NS, key, due)
                    if paused:
                        handle._on_paused()  # (as the dispatcher will say: known from the call on)
                    handles[task_id] = handle
                    keys[key] = handle
                    append(
                        wire(
                            key,
                            shape + base,
                            runs,
                            attempt,
                            due,
                            slot,
                            paused,
                            write,
                            task_id,
                            hashes[key],
                            down.pop(key, ()) if down else (),  # (told once: at this start)
                        )
                    )
                last = lo + ADOPT_CHUNK >= count
                self._backend.send(m.Adopt.wire(plan.shapes[sent_shapes - base :], chunk, last))
                sent_shapes = base + len(plan.shapes)
            self._shapes_sent = base + len(plan.shapes)
        return True

    def _adopt_stored(self, key: str) -> None:
        """Another scheduler on the store added the keyed task ``key``: run it
        here too (its runs are claimed like ours; issue 11). Listener thread.
        Its stored state is the other scheduler's: adopting writes nothing."""
        holder = self._keys.get(key)
        if (
            self._closed
            or key in self._unloadable
            or (holder is not None and not holder.done())
            or (holder is None and key in self._adopted)  # its adoption is on its way (start-up, in chunks)
        ):
            return  # (an adopted key whose task ended here - its definition changed elsewhere - is adopted again)
        from ._durable import _recovery

        try:
            with self._store_lock:
                task = self._store.get(key)
                slots = {} if task is None else _recovery.retry_slots(self._store, [task], {})
            if task is not None and task.untrusted is not None:  # listed, never imported nor unpickled
                logger.warning("stored task %r added by another scheduler is not loaded: %s", key, task.untrusted)
                self._unloadable[key] = task.untrusted
                self._backend.send(m.Unloadable.wire(key, task.untrusted))
                return
            if task is None or task.unloadable is not None:
                return
            plan = _recovery.plan([task], {}, slots, time.time_ns())
            if plan.unloadable:  # it did not load here: logged, not run
                return
            if plan.tasks and not self._closed and self._adopt(plan, stored=True):
                logger.info(
                    "keyed task %r, stored by another scheduler, is run here too (each run once among them)", key
                )
        except StoreError as exc:  # a passing failure (a dropped connection): not the task's fault
            logger.warning("reading stored task %r added by another scheduler failed (%s); trying again", key, exc)
            if not self._closed:
                with contextlib.suppress(OSError):  # (a dispatcher gone meanwhile: nothing to ask again)
                    self._backend.send(m.AdoptAgain.wire(key))
        except Exception as exc:  # noqa: BLE001 - whatever importing, unpickling or a closed scheduler raises
            logger.warning(
                "stored task %r added by another scheduler cannot be run here (%s: %s)", key, type(exc).__name__, exc
            )

    def history(self, key: str, n: int = 100, *, skipped: bool = False) -> list[RunInfo]:
        """The last ``n`` runs (attempts) of the keyed task ``key``, oldest
        first, read from the store (``store=``). Times are wall-clock
        seconds since the epoch; ``worker`` is the pid of the scheduler (user) process that ran it; an
        ``outcome`` of None is a run in flight (or one whose scheduler died
        and has not been restarted yet). ``skipped=True``: its skipped slots
        too, in slot order (``outcome="skipped"``, ``run=None``, ``reason``
        why: overlap, misfire, late, paused or down), the last ``n`` of both."""
        from .._store import SkippedSlot

        if self._store is None:
            raise SchedulerError("history() needs a store: Scheduler(store=...)")
        checked = v.key(key)
        with self._store_lock:
            records = self._store.history(checked, n, skipped=skipped)
        handle = None if checked is None else self._keys.get(checked)
        task_id = handle.id if handle is not None else 0
        return [
            skipped_slot(task_id, r.slot_ns, r.slot_ns, r.reason)
            if isinstance(r, SkippedSlot)
            else RunInfo(
                task_id,
                r.run,
                r.scheduled_ns / NS,
                (r.started_ns or r.scheduled_ns) / NS,
                None if r.finished_ns is None else r.finished_ns / NS,
                r.pid or 0,
                r.outcome,
                r.attempt,
                wall_datetime(r.scheduled_ns),
                r.output,
                r.cause,
                r.reason,
                stored_error(r.outcome, r.error_type, r.error_message, r.error_traceback),
            )
            for r in records
        ]

    def __repr__(self) -> str:
        state = "broken" if self._broken else "closed" if self._closed else "open"
        return f"<Scheduler runner={self.runner} workers={self.workers} {state} pending={self.pending()}>"

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        """Shut down and wait. A first Ctrl-C (in the block, or while exit
        waits) says what exit waits for; a second one kills the runs."""
        interrupts = int(exc_type is KeyboardInterrupt)
        while interrupts < 2:
            try:
                if interrupts == 1:
                    logger.warning("interrupted: waiting for %s; press Ctrl-C again to kill them", self._waiting_for())
                self.shutdown(wait=False)
                if interrupts == 0 and not self._join(QUIET_WAIT):
                    logger.info("exiting the Scheduler's with block: waiting for %s", self._waiting_for())
                self.shutdown(wait=True)
                return
            except KeyboardInterrupt:
                interrupts += 1
        logger.warning("interrupted again: killing %s", self._waiting_for())
        self._abort(quiet=True)
        if exc_type is not KeyboardInterrupt:  # else the interrupt from the block goes on
            raise KeyboardInterrupt

    def _waiting_for(self) -> str:
        """What shutting down waits for, in words (from the handles: no request)."""
        handles = list(self._handles.values())
        running = [h for h in handles if h.state is TaskState.RUNNING]
        queued = [h for h in handles if h.state is not TaskState.RUNNING]
        parts = []
        if running:
            parts.append(f"{len(running)} running task(s) ({_names(running)})")
        if queued:
            due = [h.next_run for h in queued if h.next_run is not None]
            when = f", the next due in {max(0.0, min(due) - time.monotonic()):.1f} s" if due else ""
            parts.append(f"{len(queued)} pending task(s) ({_names(queued)}{when})")
        return " and ".join(parts) or "the workers to exit"

    def _join(self, timeout: float | None) -> bool:
        """Wait for the event stream to end; True if it did."""
        if threading.current_thread() is self._listener:
            return False
        return self._listener_done.wait(timeout)

    # -- SchedulingAPI -------------------------------------------------------

    def _check_open(self) -> None:
        if self._fork != _forks:
            raise SchedulerError(_FORKED)
        if self._broken:
            raise SchedulerBrokenError(self._broken)
        if self._closed:
            raise SchedulerClosedError("this Scheduler was shut down; it accepts no new tasks")

    def _add(
        self, spec: v.TaskSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> TaskHandle:
        if self._store is None or spec.key is None:
            return self._add_marked(spec, fn, args, kwargs)
        key = spec.key
        with self._adopt_lock:  # (from its adopted definition's pop to its handle: see _adopt)
            self._adding[key] += 1
        try:
            return self._add_marked(spec, fn, args, kwargs)
        finally:
            with self._adopt_lock:
                self._adding[key] -= 1
                if not self._adding[key]:
                    del self._adding[key]

    def _add_marked(
        self, spec: v.TaskSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> TaskHandle:
        payload = self._backend.pack(fn, args, kwargs)
        define: m.Message | None = None
        if self._store is not None and spec.key is not None:
            from ._durable._recovery import definition

            d = definition(spec, fn, payload[1], time.time_ns())  # TypeError: not importable
            known = self._adopted.pop(spec.key, None)
            holder = self._keys.get(spec.key)
            paused = False
            if known is not None and holder is not None and not holder.done():
                if known == d.def_hash:
                    return holder  # the same definition: the stored task goes on
                logger.warning("keyed task %r: its definition changed; the new one replaces the stored one", spec.key)
                spec = spec._replace(replace_existing=True)
                # A deploy leaves a paused task paused: the row says so (it stays for the new
                # definition); the adopted handle's pause counts only if the row is gone.
                paused = holder.state is TaskState.PAUSED
            define = m.Define.wire(0, d.key, d.fn_ref, d.args, d.schedule, d.options, d.def_hash, paused)
        if spec.ray_options is not None:  # validated: only a Ray scheduler gets here with them
            payload = self._backend.with_options(payload, spec.ray_options)
        retry_on = carried_classes(spec.retry, self._backend.pickled)
        if spec.key is not None:
            self._claim_key(self._keys, spec)
        schedule = spec.schedule
        with self._lock:
            self._check_open()
            task_id = next(self._ids)
            now = time.monotonic_ns()
            wall = time.time_ns()  # (read right after ``now``: one pair, one offset)
            first = None
            if schedule.trigger is None:
                due, next_wall = now + spec.delay_ns, wall + spec.delay_ns
            else:  # due at its first slot (the dispatcher is told it)
                first = schedule.first(spec.start_wall_ns)
                assert first is not None  # (validated: it fires after the call)
                due, next_wall = first - (wall - now), first
            handle = TaskHandle(self, task_id, spec.name, due / NS, spec.key, next_wall)
            self._handles[task_id] = handle  # before the command: its events may come at once
            if spec.key is not None:
                self._keys[spec.key] = handle
            send = self._backend.send
            if define is not None:  # the definition first: the dispatcher adopts the add with it
                send(m.view(m.Define, define)._replace(task_id=task_id))
            send(m.Add.of_spec(spec, task_id, due, first, payload, retry_on))
        return handle

    def pause(self, task_id: int) -> bool:
        """Pause a task (see ``TaskHandle.pause``)."""
        task_id = v.task_id(task_id)
        if task_id not in self._handles:
            return False
        return bool(self._request(m.Pause, task_id))

    def resume(self, task_id: int) -> bool:
        """Resume a paused task at its next slot from now (see ``TaskHandle.resume``)."""
        task_id = v.task_id(task_id)
        if task_id not in self._handles:
            return False
        return bool(self._request(m.Resume, task_id))

    def _run_now(self, task_id: int) -> bool:
        if task_id not in self._handles:
            return False
        return bool(self._request(m.RunNow, task_id))

    def _backfill(self, task_id: int, start_ns: int, end_ns: int, dry_run: bool) -> list[int]:
        if task_id not in self._handles:
            raise ValueError(f"no live task {task_id!r}")
        answer = self._request(m.Backfill, task_id, start_ns, end_ns, dry_run)
        if isinstance(answer, str):
            raise ValueError(answer)
        return list(answer)

    def cancel(self, task_id: int, *, interrupt: bool = False) -> bool:
        v.flag("interrupt", interrupt)
        if isinstance(task_id, bool) or not isinstance(task_id, int):
            raise TypeError(f"task_id must be an int, not {type(task_id).__name__} {task_id!r}")
        if task_id not in self._handles:
            return False  # finished, cancelled, or never ours: nothing to ask
        return self._cancel(task_id, interrupt, False)

    def _cancel_replaced(self, task_id: int) -> bool:
        return self._cancel(task_id, False, True)

    def _cancel(self, task_id: int, interrupt: bool, replaced: bool) -> bool:
        try:
            return bool(self._request(m.Cancel, task_id, interrupt, replaced))
        except SchedulerError:
            return False  # the dispatcher is gone: the handle has been failed

    # -- the rest of the public API --------------------------------------------

    def pending(self) -> int:
        """Tasks not yet finished or cancelled."""
        return len(self._handles)

    def handle(self, task_id: int) -> TaskHandle | None:
        """The handle of an unfinished task, including tasks scheduled from
        inside a running task; None once it has finished."""
        return self._handles.get(task_id)

    def stats(self) -> dict[str, Any]:
        """pending, running, counts per run outcome, and per worker its pid,
        state, RSS, runs and restarts."""
        stats = dict(self._request(m.Stats))
        if self._store is not None:
            stats["unloadable"] = dict(self._unloadable)  # stored tasks whose function or arguments failed to load
        return stats

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Accept no new tasks. Periodic tasks are cancelled (a run in
        progress finishes); one-shot tasks still run when due, unless
        ``cancel_futures`` cancels every task not yet running. With ``wait``,
        return once every task has ended and every worker has exited (a
        worker that does not exit is killed)."""
        if self._fork != _forks:
            raise SchedulerError(_FORKED)
        with self._lock:
            self._closed = True
            if not self._broken and not self._stream_closed:
                try:
                    self._backend.send(m.Shutdown.wire(bool(cancel_futures)))
                except OSError:
                    pass  # already gone: the listener fails the handles
        if wait and self._join(None):
            self._backend.join()

    def _abort(self, quiet: bool = False) -> None:
        """Stop at once: cancel what is pending, kill what runs, end every process."""
        with self._lock:
            if self._stream_closed or self._listener_done.is_set():
                return
            pending = len(self._handles)
            self._closed = True
        if pending and not quiet:
            logger.warning(
                "a Scheduler was not shut down before exit; stopping its %d unfinished task(s). "
                "Use `with Scheduler() as s:` or call shutdown().",
                pending,
            )
        self._backend.abort()
        if self.runner != "threads":  # threads cannot be stopped: don't wait for them
            self._listener_done.wait(10)

    def add_listener(self, callback: Callable[[dict[str, Any]], object], events: Any = None) -> None:
        """Call ``callback(event)`` for each scheduler event, or for those named in ``events``.

        ``event`` is a dict: ``{"event": "run_finished", "task_id": 3, "name":
        "poll", "run": 7, ...}``. The events and their fields are listed in
        ``procsched/_events.py`` (and the README): run_started, run_finished,
        run_failed, run_crashed, run_timeout, run_cancelled, run_missed,
        task_cancelled, worker_started, worker_exited. Callbacks run in this
        process, on the scheduler's listener thread, in the order added; one
        that raises is logged and skipped. Waiting on this scheduler
        (``result()``, ``cancel()``, ``stats()``) inside a callback is an error.

        Raises:
            TypeError: ``callback`` is not callable.
            ValueError: ``events`` names an unknown event.
        """
        self._listeners.add(callback, events)

    def remove_listener(self, callback: Callable[[dict[str, Any]], object]) -> bool:
        """Stop calling ``callback``; True if it was a listener."""
        return self._listeners.remove(callback)

    def _step_wall(self, seconds: float) -> None:
        """Tests only: step the dispatcher's wall clock (as an NTP step would)."""
        self._backend.send(m.WallStep.wire(round(seconds * NS)))

    # -- requests ----------------------------------------------------------------

    def _request(self, record: Any, *fields: Any) -> Any:
        """Send ``record`` (a request: its fields after ``request``) and wait for the answer."""
        if threading.current_thread() is self._listener:
            raise SchedulerError(
                "cannot wait for the dispatcher inside a done-callback (it runs on the listener thread); "
                "call it from another thread"
            )
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._fork != _forks:
                raise SchedulerError(_FORKED)
            if self._broken:
                raise SchedulerBrokenError(self._broken)
            if self._stream_closed:  # the listener answers no request any more
                raise SchedulerClosedError("this Scheduler has shut down")
            request = next(self._request_ids)
            self._requests[request] = future
            try:
                self._backend.send(record.wire(request, *fields))
            except OSError:
                del self._requests[request]
                if self._closed:  # shut down: it exited before the listener saw it close
                    raise SchedulerClosedError("this Scheduler has shut down") from None
                raise SchedulerBrokenError("the dispatcher is gone") from None
        try:
            return future.result(REQUEST_TIMEOUT)
        except concurrent.futures.TimeoutError:
            raise SchedulerBrokenError(
                f"the dispatcher did not answer a {m.tag_of(record)} request in {REQUEST_TIMEOUT:g} s"
            ) from None

    # -- the listener thread ----------------------------------------------------

    def _stream_ended(self, closed: bool) -> None:
        """The event stream is over (closed by the dispatcher, or broken):
        no request will be answered, so none may wait for one."""
        with self._lock:
            self._stream_closed = True
            self._closed = True
            requests, self._requests = self._requests, {}
        if not closed:
            self._fail_all(self._backend.death_reason())
        for future in requests.values():
            if not future.done():
                future.set_exception(SchedulerClosedError("this Scheduler has shut down"))

    def _fail_all(self, reason: str) -> None:
        with self._lock:
            self._broken = reason
            self._closed = True
        if not self._backend.aborted:  # an abort at exit has said so already
            logger.error("%s; failing %d unfinished task(s)", reason, len(self._handles))
        for task_id in list(self._handles):
            handle = self._handles.pop(task_id, None)
            if handle is not None and not handle.done():
                handle._on_result(
                    TaskState.FAILED, exc=SchedulerBrokenError(f"{reason}; task {task_id} never finished")
                )
        for request in list(self._requests):
            future = self._requests.pop(request, None)
            if future is not None:
                future.set_exception(SchedulerBrokenError(reason))


_FORKED = (
    "this Scheduler belongs to the process that made it; a forked child cannot use it "
    "(make a new Scheduler in the child)"
)


#: Adopted tasks per "adopt" command (one pipe write per chunk, not two per
#: task; the dispatcher adopts a chunk while the next is being made).
ADOPT_CHUNK = 5000


def _dropped(backend: Any) -> None:
    """A Scheduler was collected without shutdown(): nobody holds a handle of
    it (a handle holds its scheduler), so nothing it would run can be seen:
    cancel everything; running runs finish; its processes then exit."""
    try:
        backend.send(m.Shutdown.wire(True))
    except (OSError, ValueError):
        pass


def _free(holder: TaskHandle | None) -> bool:
    """Is a key whose latest handle is ``holder`` free (no live task of it here)?"""
    return holder is None or holder.done()


def _names(handles: list[TaskHandle]) -> str:
    names = [h.name or f"task {h.id}" for h in handles[:3]]
    return ", ".join(names) + (", ..." if len(handles) > 3 else "")


def _positive_int(arg: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{arg} must be a positive int, not {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{arg} must be >= 1, not {value!r}")
    return value


def _ray_unsupported(**options: Any) -> None:
    for arg, value in options.items():
        if value is not None:
            raise ValueError(f"{arg} is not supported with runner='ray' (Ray owns its worker processes), not {value!r}")


def _start_method(mp_context: Any) -> str:
    import multiprocessing
    from multiprocessing.context import BaseContext

    if mp_context is None:
        return _default_start_method()
    method = mp_context.get_start_method() if isinstance(mp_context, BaseContext) else mp_context
    if method not in multiprocessing.get_all_start_methods():
        raise ValueError(
            f"mp_context must be one of {multiprocessing.get_all_start_methods()} or a multiprocessing "
            f"context, not {mp_context!r}"
        )
    return str(method)


@atexit.register
def _at_exit() -> None:
    """The interpreter is exiting (normally or on an unhandled exception).

    A Scheduler that was shut down (``shutdown(wait=False)``) is waited for,
    as ``ProcessPoolExecutor`` is: its one-shots still run. One never shut
    down is stopped: nothing may outlive this process, and a hung task must
    not hang the exit, so its work is stopped now (with a warning).
    """
    for scheduler in list(_live):
        try:
            if scheduler._fork != _forks:
                continue
            if scheduler._closed:
                scheduler.shutdown(wait=True)
            else:
                scheduler._abort()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


#: Forks between this process and the one that imported this module: a
#: Scheduler made before a fork belongs to the parent (its ``_fork`` differs),
#: told without a getpid() system call on every command.
_forks = 0


def _after_fork_in_child() -> None:
    """A forked child inherits every Scheduler of its parent but none of its
    threads. Close the child's copies of the pipe ends, so that the parent's
    death is still seen by its dispatcher while the child lives (the
    dispatcher reads EOF on the command pipe only once every write end is
    closed); the Scheduler then refuses every call in the child."""
    global _forks
    _forks += 1
    for scheduler in list(_live):
        try:
            scheduler._backend.forked()
        except Exception:  # noqa: BLE001 - best effort in a fresh child
            pass
    _live.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
