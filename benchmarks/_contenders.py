"""Contenders: procsched's runners and the peers users would pick instead,
each called the way its own documentation calls it.

An adapter gives the scenarios one vocabulary but never stands between a
peer and its results (issue 25: a Pool whose ``apply_async`` resolved a
``concurrent.futures.Future`` through callbacks, which Pool's one
result-handler thread then had to resolve, ran at a quarter of its speed).
A handle is the library's own - an ``AsyncResult`` from
``multiprocessing.Pool.apply_async``, a ``concurrent.futures.Future`` from
an executor's ``submit`` (ProcessPoolExecutor, ThreadPoolExecutor, loky) or
from procsched, pebble's ``ProcessFuture`` from ``ProcessPool.schedule`` -
and every wait and completion hook is the library's own call:

    start() / close()                      the pool's life (outside the timings)
    submit(fn, *args) -> handle            apply_async(fn, args) / submit(fn, *args) / schedule(fn, args=args)
    result(handle, timeout)                async_result.get(timeout) / future.result(timeout)
    results(handles, timeout) -> [value]   the same, in a plain loop over the handles
    submit_then(fn, args, done) -> handle  with the library's completion hook, done(Outcome):
                                           apply_async(callback=, error_callback=) / add_done_callback
    at(due, fn, *args) -> timed            run once at ``due`` (time.monotonic());
    timed_result(timed, timeout)           ... and its value
    fixed_rate(fn, args, period, first_due) -> job; job.stop() -> [RunRecord]

The one layer in front of the library is the adapter's method call (a
fraction of a microsecond, the same for every contender). No scenario maps
a function over an iterable, so ``Pool.map``/``imap`` do not appear.

Pools that cannot schedule (ProcessPoolExecutor, ThreadPoolExecutor,
multiprocessing.Pool, loky, pebble) get what a user would write around them:
one timer thread (``TimerDriver``) that sleeps until the earliest due time on
a heap and submits then; a periodic job is re-armed at
``previous slot + period`` from the pool's completion hook (fixed rate,
catch-up, never concurrent with itself - procsched's defaults). The
sequential baseline is the same timer loop running each task inline, i.e. a
plain ``sched``-style loop. APScheduler 3 schedules by itself (date and
interval triggers) and reports results only through its event listeners,
the channel its documentation gives: a future per job, set by the listener.

All pools get the same number of workers.
"""

from __future__ import annotations

import concurrent.futures
import heapq
import itertools
import logging
import multiprocessing
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from . import _tasks


@dataclass(frozen=True)
class RunRecord:
    """One run of a periodic job: its slot on the ideal grid and when it ran."""

    due: float
    start: float
    end: float


@dataclass(frozen=True)
class Outcome:
    """How a submitted task ended, as its pool's completion hook told it."""

    value: Any
    error: BaseException | None


@dataclass(frozen=True)
class ContenderInfo:
    name: str
    family: str  # "procsched" | "peer" | "baseline"
    kind: str  # "processes" | "threads" | "inline"
    note: str


def _done_future(value: Any = None, exc: BaseException | None = None) -> concurrent.futures.Future[Any]:
    f: concurrent.futures.Future[Any] = concurrent.futures.Future()
    if exc is not None:
        f.set_exception(exc)
    else:
        f.set_result(value)
    return f


def _outcome(f: concurrent.futures.Future[Any]) -> Outcome:
    if f.cancelled():
        return Outcome(None, concurrent.futures.CancelledError())
    exc = f.exception()
    return Outcome(None, exc) if exc is not None else Outcome(f.result(), None)


# -- the timer thread users put in front of a plain pool ------------------------


class _FixedRateJob:
    def __init__(self, adapter: Adapter, fn: Callable[..., Any], args: tuple[Any, ...], period: float) -> None:
        self.adapter, self.fn, self.args, self.period = adapter, fn, args, period
        self.records: list[RunRecord] = []
        self.errors: list[BaseException] = []
        self.stopped = False

    def fire(self, due: float) -> None:
        def done(outcome: Outcome) -> None:
            if outcome.error is None:
                start, end = outcome.value
                self.records.append(RunRecord(due, start, end))
            else:
                self.errors.append(outcome.error)
            if not self.stopped:
                self.adapter.driver.push(due + self.period, self.fire)

        try:
            self.adapter.submit_then(self.fn, self.args, done)
        except BaseException as exc:  # noqa: BLE001 - a broken pool: the job is dead
            self.errors.append(exc)

    def stop(self) -> list[RunRecord]:
        self.stopped = True
        return list(self.records)


class Timed:
    """A task the timer thread submits at its due time: the pool's own handle
    once submitted (or the error its submit raised)."""

    def __init__(self) -> None:
        self.fired = threading.Event()
        self.handle: Any = None
        self.error: BaseException | None = None


class TimerDriver:
    """A heap of (due, seq, action) and one thread that waits for the head."""

    def __init__(self, adapter: Adapter) -> None:
        self.adapter = adapter
        self._heap: list[tuple[float, int, Callable[[float], None]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="bench-timer", daemon=True)
        self._thread.start()

    def push(self, due: float, action: Callable[[float], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (due, next(self._seq), action))
            if self._heap[0][2] is action:
                self._cond.notify()

    def at(self, due: float, fn: Callable[..., Any], *args: Any) -> Timed:
        timed = Timed()

        def fire(_due: float) -> None:
            try:
                timed.handle = self.adapter.submit(fn, *args)
            except BaseException as exc:  # noqa: BLE001 - a broken pool refuses at the call
                timed.error = exc
            timed.fired.set()

        self.push(due, fire)
        return timed

    def fixed_rate(
        self, fn: Callable[..., Any], args: tuple[Any, ...], period: float, first_due: float
    ) -> _FixedRateJob:
        job = _FixedRateJob(self.adapter, fn, args, period)
        self.push(first_due, job.fire)
        return job

    def _loop(self) -> None:
        clock = time.monotonic
        cond = self._cond
        while True:
            with cond:
                while True:
                    if self._stopped:
                        return
                    if self._heap:
                        wait = self._heap[0][0] - clock()
                        if wait <= 0:
                            due, _, action = heapq.heappop(self._heap)
                            break
                        cond.wait(wait)
                    else:
                        cond.wait()
            action(due)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(10)


# -- adapters ----------------------------------------------------------------------


class Adapter:
    info: ContenderInfo

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._driver: TimerDriver | None = None

    @property
    def name(self) -> str:
        return self.info.name

    def start(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        if self._driver is not None:
            self._driver.stop()
            self._driver = None

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        """The pool's own call; returns its own handle (a Future, unless said otherwise)."""
        raise NotImplementedError

    def result(self, handle: Any, timeout: float) -> Any:
        return handle.result(timeout)

    def results(self, handles: list[Any], timeout: float) -> list[Any]:
        return [h.result(timeout) for h in handles]

    def submit_then(self, fn: Callable[..., Any], args: tuple[Any, ...], done: Callable[[Outcome], None]) -> Any:
        """Submit, with ``done(Outcome)`` called by the pool's own completion hook."""
        handle = self.submit(fn, *args)
        handle.add_done_callback(lambda f: done(_outcome(f)))
        return handle

    @property
    def driver(self) -> TimerDriver:
        if self._driver is None:
            self._driver = TimerDriver(self)
        return self._driver

    def at(self, due: float, fn: Callable[..., Any], *args: Any) -> Any:
        return self.driver.at(due, fn, *args)

    def timed_result(self, timed: Any, timeout: float) -> Any:
        """The value of a task ``at`` gave: once the timer thread submitted it,
        the pool's own wait on its handle."""
        deadline = time.monotonic() + timeout
        if not timed.fired.wait(timeout):
            raise TimeoutError(f"not submitted within {timeout} s")
        if timed.error is not None:
            raise timed.error
        return self.result(timed.handle, max(0.0, deadline - time.monotonic()))

    def fixed_rate(self, fn: Callable[..., Any], args: tuple[Any, ...], period: float, first_due: float) -> Any:
        return self.driver.fixed_rate(fn, args, period, first_due)

    def warmup(self) -> None:
        """Start every worker and import the task module in it."""
        self.results([self.submit(_tasks.probe, 0.01) for _ in range(2 * self.workers)], 60)

    def worker_pids(self) -> list[int]:
        """Pids of the pool's worker processes (empty for in-process pools)."""
        return []


class ProcschedAdapter(Adapter):
    def __init__(self, workers: int, runner: str) -> None:
        super().__init__(workers)
        self.runner = runner
        self.info = ContenderInfo(
            f"procsched[{runner}]", "procsched", runner,
            "procsched.Scheduler(runner=%r)" % runner,
        )  # fmt: skip

    def start(self) -> None:
        import procsched

        self.s = procsched.Scheduler(workers=self.workers, runner=self.runner)

    def close(self) -> None:
        self.s.shutdown(wait=True, cancel_futures=True)

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        return self.s.submit(fn, *args)

    def at(self, due: float, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        return self.s.schedule(fn, max(0.0, due - time.monotonic()), args=args)

    def timed_result(self, timed: Any, timeout: float) -> Any:
        return timed.result(timeout)

    def fixed_rate(self, fn: Callable[..., Any], args: tuple[Any, ...], period: float, first_due: float) -> Any:
        handle = self.s.schedule_at_fixed_rate(
            fn, period, initial_delay=max(0.0, first_due - time.monotonic()), args=args
        )
        return _ProcschedPeriodic(self.s, handle)

    def dispatcher(self) -> Any:
        """The dispatcher process (psutil): the child of this process that runs
        ``procsched._runtime._dispatcher`` and whose descendants include this
        scheduler's workers. None for the threads runner."""
        if self.runner != "processes":
            return None
        import psutil

        workers = set(self.worker_pids())
        for child in psutil.Process().children(recursive=False):
            try:
                if "procsched._runtime._dispatcher" not in child.cmdline():
                    continue
                if workers <= {p.pid for p in child.children(recursive=True)}:
                    return child
            except psutil.Error:
                continue
        raise RuntimeError("no procsched dispatcher process among this process's children")

    def worker_pids(self) -> list[int]:
        return [w["pid"] for w in self.s.stats()["workers"] if w["pid"] is not None]


class RayAdapter(ProcschedAdapter):
    """procsched on runner="ray", on a local Ray cluster of ``workers`` CPUs,
    started by the first visit (``ray.init(num_cpus=workers)``) and kept for
    the rest of the scenario (a start costs ~10 s; ``end_ray`` after it)."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers, "ray")
        self.info = ContenderInfo(
            "procsched[ray]", "procsched", "processes",
            f"procsched.Scheduler(runner='ray') on a local {workers}-CPU Ray (ray.init(num_cpus={workers}))",
        )  # fmt: skip

    def start(self) -> None:
        import ray

        if not ray.is_initialized():
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            ray.init(num_cpus=self.workers, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
        super().start()

    def worker_pids(self) -> list[int]:
        return []  # Ray's worker processes, not the pool's


def end_ray() -> None:
    """End the local Ray cluster the Ray contender started, if it did (after
    each scenario): its processes are the benchmark process's children, and
    a later scenario counted them as procsched's - idle CPU with 100,000
    pending 563 ms per 10 s instead of 0, a first result of 140 ms instead
    of ~90 (2026-12-07, a full run)."""
    ray = sys.modules.get("ray")  # (never imported here: only if the Ray contender ran)
    if ray is not None and ray.is_initialized():
        ray.shutdown()


class _ProcschedPeriodic:
    def __init__(self, s: Any, handle: Any) -> None:
        self.s, self.handle = s, handle

    def stop(self) -> list[RunRecord]:
        self.handle.cancel()
        return [
            RunRecord(r.scheduled_for, r.started_at, r.finished_at)
            for r in list(self.handle.runs) if r.outcome == "ok"
        ]  # fmt: skip


class ExecutorAdapter(Adapter):
    """A concurrent.futures executor (``submit``, then ``Future.result``)
    plus the timer thread."""

    def __init__(self, workers: int, name: str, kind: str, note: str, make: Callable[[int], Any]) -> None:
        super().__init__(workers)
        self.info = ContenderInfo(name, "peer", kind, note)
        self._make = make

    def start(self) -> None:
        self.pool = self._make(self.workers)

    def close(self) -> None:
        super().close()
        try:
            self.pool.shutdown(wait=True)
        except Exception:  # noqa: BLE001 - a broken pool may refuse; it is dead anyway
            pass

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        return self.pool.submit(fn, *args)

    def worker_pids(self) -> list[int]:
        procs = getattr(self.pool, "_processes", None) or {}
        return list(procs)


class PebbleAdapter(ExecutorAdapter):
    """pebble.ProcessPool as its documentation calls it: ``schedule(fn,
    args=...)``, then ``result()`` on the ``ProcessFuture`` (a Future)."""

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        return self.pool.schedule(fn, args=args)

    def close(self) -> None:
        Adapter.close(self)
        self.pool.close()
        self.pool.join(30)
        if self.pool.active:
            self.pool.stop()
            self.pool.join()

    def worker_pids(self) -> list[int]:
        try:
            return [w.pid for w in self.pool._pool_manager.worker_manager.workers.values()]
        except AttributeError:
            return []


class MpPoolAdapter(Adapter):
    """multiprocessing.Pool as its documentation calls it: ``apply_async``,
    then ``get()`` on each ``AsyncResult``; its ``callback``/``error_callback``
    where a completion hook is needed (re-arming a periodic job, timing a crash)."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.info = ContenderInfo(
            "multiprocessing.Pool", "peer", "processes",
            "multiprocessing.Pool: apply_async, then AsyncResult.get (default context: fork)",
        )  # fmt: skip

    def start(self) -> None:
        self.pool = multiprocessing.Pool(self.workers)

    def close(self) -> None:
        super().close()
        self.pool.terminate()  # a crashed task's result never arrives: close()+join() would hang
        self.pool.join()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self.pool.apply_async(fn, args)

    def result(self, handle: Any, timeout: float) -> Any:
        return handle.get(timeout)

    def results(self, handles: list[Any], timeout: float) -> list[Any]:
        return [r.get(timeout) for r in handles]

    def submit_then(self, fn: Callable[..., Any], args: tuple[Any, ...], done: Callable[[Outcome], None]) -> Any:
        return self.pool.apply_async(
            fn,
            args,
            callback=lambda value: done(Outcome(value, None)),
            error_callback=lambda exc: done(Outcome(None, exc)),
        )

    def worker_pids(self) -> list[int]:
        return [p.pid for p in self.pool._pool]  # type: ignore[attr-defined]


class SequentialAdapter(Adapter):
    """No pool: each task runs inline, in the timer thread (a plain loop)."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.info = ContenderInfo("sequential", "baseline", "inline", "a plain loop in one thread, no pool")

    def start(self) -> None:
        pass

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        try:
            return _done_future(fn(*args))
        except BaseException as exc:  # noqa: BLE001
            return _done_future(exc=exc)


class APSchedulerAdapter(Adapter):
    """APScheduler 3's BackgroundScheduler with one of its pool executors.

    Results come back through its event listener (EVENT_JOB_EXECUTED /
    ERROR / MISSED / MAX_INSTANCES); a future per job id carries them. Jobs
    get ``misfire_grace_time=None`` (never dropped for lateness),
    ``coalesce=False`` and ``max_instances=1`` (never concurrent with
    itself), the closest match to procsched's defaults.
    """

    def __init__(self, workers: int, executor: str) -> None:
        super().__init__(workers)
        self.executor = executor
        self.info = ContenderInfo(
            f"APScheduler3[{executor}]", "peer", "processes" if executor == "process" else "threads",
            f"apscheduler 3 BackgroundScheduler + {'ProcessPoolExecutor (spawn)' if executor == 'process' else 'ThreadPoolExecutor'}",
        )  # fmt: skip
        self._ids = itertools.count()
        self._futures: dict[str, concurrent.futures.Future[Any]] = {}
        self._periodic: dict[str, _APSPeriodic] = {}

    def start(self) -> None:
        from datetime import timezone

        from apscheduler.events import (
            EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED,
        )  # fmt: skip
        from apscheduler.executors.pool import ProcessPoolExecutor, ThreadPoolExecutor
        from apscheduler.schedulers.background import BackgroundScheduler

        logging.getLogger("apscheduler").setLevel(logging.CRITICAL)  # "max instances reached" floods stderr
        executor = (ProcessPoolExecutor if self.executor == "process" else ThreadPoolExecutor)(self.workers)
        self.s = BackgroundScheduler(
            executors={"default": executor},
            job_defaults={"misfire_grace_time": None, "coalesce": False, "max_instances": 1},
            timezone=timezone.utc,
        )
        self.s.add_listener(
            self._on_event, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES
        )
        self._executed = EVENT_JOB_EXECUTED
        self.s.start()
        self._wall0, self._mono0 = time.time(), time.monotonic()

    def close(self) -> None:
        self.s.shutdown(wait=True)

    def _wall(self, mono: float) -> Any:
        from datetime import datetime, timezone

        return datetime.fromtimestamp(self._wall0 + (mono - self._mono0), tz=timezone.utc)

    def _mono(self, dt: Any) -> float:
        return dt.timestamp() - self._wall0 + self._mono0

    def _on_event(self, event: Any) -> None:
        job = self._periodic.get(event.job_id)
        if job is not None:
            job.on_event(event)
            return
        future = self._futures.pop(event.job_id, None)
        if future is None:
            return
        if event.code == self._executed:
            future.set_result(event.retval)
        else:
            future.set_exception(getattr(event, "exception", None) or RuntimeError(f"APScheduler event {event.code}"))

    def _add(self, fn: Callable[..., Any], args: tuple[Any, ...], **trigger: Any) -> concurrent.futures.Future[Any]:
        job_id = f"j{next(self._ids)}"
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._futures[job_id] = future  # before add_job: the job may run at once
        self.s.add_job(fn, args=args, id=job_id, **trigger)
        return future

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        return self._add(fn, args)

    def at(self, due: float, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        return self._add(fn, args, trigger="date", run_date=self._wall(due))

    def timed_result(self, timed: Any, timeout: float) -> Any:
        return timed.result(timeout)

    def fixed_rate(self, fn: Callable[..., Any], args: tuple[Any, ...], period: float, first_due: float) -> Any:
        job_id = f"p{next(self._ids)}"
        job = _APSPeriodic(self, job_id)
        self._periodic[job_id] = job
        self.s.add_job(fn, "interval", args=args, id=job_id, seconds=period, start_date=self._wall(first_due))
        return job

    def worker_pids(self) -> list[int]:
        pool = getattr(self.s._lookup_executor("default"), "_pool", None)
        return list(getattr(pool, "_processes", None) or {})


class _APSPeriodic:
    def __init__(self, owner: APSchedulerAdapter, job_id: str) -> None:
        self.owner, self.job_id = owner, job_id
        self.records: list[RunRecord] = []
        self.skipped = 0

    def on_event(self, event: Any) -> None:
        if event.code == self.owner._executed:
            start, end = event.retval
            self.records.append(RunRecord(self.owner._mono(event.scheduled_run_time), start, end))
        else:
            self.skipped += 1

    def stop(self) -> list[RunRecord]:
        try:
            self.owner.s.remove_job(self.job_id)
        except Exception:  # noqa: BLE001 - already gone
            pass
        return list(self.records)


# -- the registry ----------------------------------------------------------------------


def _ppe(workers: int) -> Any:
    return concurrent.futures.ProcessPoolExecutor(workers)


def _tpe(workers: int) -> Any:
    return concurrent.futures.ThreadPoolExecutor(workers)


def _loky(workers: int) -> Any:
    import loky

    return loky.ProcessPoolExecutor(workers)


def _pebble(workers: int) -> Any:
    import pebble

    return pebble.ProcessPool(max_workers=workers)


def _make(name: str, workers: int) -> Adapter:
    if name == "procsched[processes]":
        return ProcschedAdapter(workers, "processes")
    if name == "procsched[threads]":
        return ProcschedAdapter(workers, "threads")
    if name == "procsched[ray]":
        return RayAdapter(workers)
    if name == "sequential":
        return SequentialAdapter(workers)
    if name == "ProcessPoolExecutor":
        return ExecutorAdapter(
            workers,
            name,
            "processes",
            "concurrent.futures: submit, then Future.result (default context: fork) + timer thread",
            _ppe,
        )
    if name == "ThreadPoolExecutor":
        return ExecutorAdapter(
            workers, name, "threads", "concurrent.futures: submit, then Future.result + timer thread", _tpe
        )
    if name == "multiprocessing.Pool":
        return MpPoolAdapter(workers)
    if name == "loky":
        return ExecutorAdapter(
            workers, name, "processes", "loky.ProcessPoolExecutor: submit, then Future.result + timer thread", _loky
        )
    if name == "pebble":
        return PebbleAdapter(
            workers, name, "processes", "pebble.ProcessPool.schedule, then ProcessFuture.result + timer thread", _pebble
        )
    if name == "APScheduler3[thread]":
        return APSchedulerAdapter(workers, "thread")
    if name == "APScheduler3[process]":
        return APSchedulerAdapter(workers, "process")
    raise KeyError(name)


ALL = (
    "procsched[processes]", "procsched[threads]", "procsched[ray]", "sequential", "ProcessPoolExecutor", "ThreadPoolExecutor",
    "multiprocessing.Pool", "loky", "pebble", "APScheduler3[thread]", "APScheduler3[process]",
)  # fmt: skip

_MODULES = {
    "procsched[ray]": "ray",
    "loky": "loky",
    "pebble": "pebble",
    "APScheduler3[thread]": "apscheduler",
    "APScheduler3[process]": "apscheduler",
}


def available(name: str) -> bool:
    module = _MODULES.get(name)
    if module is None:
        return True
    try:
        __import__(module)
    except ImportError:
        return False
    if module == "apscheduler":
        import apscheduler

        return str(getattr(apscheduler, "__version__", "3")).startswith("3")
    return True


def make(name: str, workers: int) -> Adapter:
    return _make(name, workers)


def versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for dist in ("procsched", "loky", "pebble", "apscheduler", "matplotlib", "psutil", "cloudpickle"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def kind(name: str) -> str:
    """ "processes", "threads" or "inline": where a contender's tasks run."""
    if name == "sequential":
        return "inline"
    if name in ("procsched[threads]", "ThreadPoolExecutor", "APScheduler3[thread]"):
        return "threads"
    return "processes"


def family(name: str) -> str:
    return "procsched" if name.startswith("procsched") else "baseline" if name == "sequential" else "peer"


os.environ.setdefault("LOKY_MAX_CPU_COUNT", str(os.cpu_count() or 1))
