"""Helpers for the reliability tests: real processes, real faults.

Tests synchronise on handles, files and pipes. Where a condition can only be
observed by looking (a process has exited, the pool has respawned after a
backoff), ``wait_until`` looks every few milliseconds under a generous
deadline that only guards against a hang.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import psutil

import procsched

DISPATCHER_MODULE = "procsched._runtime._dispatcher"


def wait_until(predicate: Callable[[], Any], timeout: float, what: str = "", every: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(every)


def read_file(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def wait_for_lines(path: str, n: int, timeout: float = 30.0) -> list[str]:
    """The first ``n`` complete lines of ``path``, once it has them."""
    text = wait_until(lambda: read_file(path).count("\n") >= n and read_file(path), timeout, f"{n} lines in {path}")
    return text.splitlines()[:n]


def dispatcher(scheduler: procsched.Scheduler) -> psutil.Process:
    """The scheduler's dispatcher process."""
    proc = psutil.Process(scheduler._backend.proc.pid)
    wait_until(lambda: DISPATCHER_MODULE in " ".join(proc.cmdline()), 10, "the dispatcher's command line")
    return proc


def descendants(pid: int | None = None) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def alive(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    """The processes that still run (a zombie has exited: it is not alive)."""
    left = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(proc)
        except psutil.NoSuchProcess:
            pass
    return left


def wait_all_gone(procs: Iterable[psutil.Process], timeout: float) -> None:
    procs = list(procs)
    try:
        wait_until(lambda: not alive(procs), timeout, "processes to exit")
    except AssertionError:
        left = alive(procs)
        raise AssertionError(f"still alive after {timeout}s: {[(p.pid, _cmd(p)) for p in left]}") from None


def pool_whole(scheduler: procsched.Scheduler) -> bool:
    """Every slot has a live, idle worker."""
    stats = scheduler.stats()
    for w in stats["workers"]:
        if w["pid"] is None or w["state"] != "idle":
            return False
        try:
            if not alive([psutil.Process(w["pid"])]):
                return False
        except psutil.NoSuchProcess:  # killed since the stats were read (the chaos tests kill at random)
            return False
    return len(stats["workers"]) == scheduler.workers


def _cmd(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())[:100]
    except psutil.Error:
        return "?"


def stop(scheduler: procsched.Scheduler, timeout: float = 20.0) -> None:
    """Shut down without waiting on runs a failed test left hanging:
    cancel everything, interrupt whatever still runs, then join (and as a
    last resort kill the dispatcher, so one failure cannot hang the session)."""
    scheduler.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + timeout
    while scheduler._listener.is_alive() and time.monotonic() < deadline:
        try:
            for w in scheduler.stats()["workers"]:
                if w["task"] is not None:
                    scheduler.cancel(w["task"], interrupt=True)
        except procsched.SchedulerError:
            pass
        scheduler._listener.join(0.2)
    if scheduler._listener.is_alive():
        scheduler._backend.proc.kill()
        raise AssertionError(f"{scheduler} did not shut down within {timeout}s")
    scheduler.shutdown(wait=True)
