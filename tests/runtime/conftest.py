from __future__ import annotations

import os
import threading
import time

import psutil
import pytest

import procsched

RUNNERS = ["processes", "threads"]


class Waiter:
    """Wakes on every scheduler event, so tests wait on events, not sleeps."""

    def __init__(self, scheduler: procsched.Scheduler) -> None:
        self._cond = threading.Condition()
        scheduler.add_listener(self._on_event)

    def _on_event(self, event) -> None:
        with self._cond:
            self._cond.notify_all()

    def until(self, predicate, timeout: float = 30.0):
        deadline = time.monotonic() + timeout
        with self._cond:
            while not (result := predicate()):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout}s waiting for {predicate}")
                self._cond.wait(min(left, 0.5))
        return result


def _descendants() -> set[int]:
    try:
        return {p.pid for p in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return set()


@pytest.fixture(params=RUNNERS)
def runner(request) -> str:
    return request.param


@pytest.fixture
def make_scheduler():
    """Start schedulers; at teardown shut them down and check nothing is left."""
    made: list[procsched.Scheduler] = []
    before = _descendants()

    def make(*args, **kwargs) -> procsched.Scheduler:
        scheduler = procsched.Scheduler(*args, **kwargs)
        made.append(scheduler)
        return scheduler

    yield make
    for scheduler in made:
        scheduler.shutdown(wait=True, cancel_futures=True)
    left = [psutil.Process(p) for p in _descendants() - before if psutil.pid_exists(p)]
    gone, alive = psutil.wait_procs(left, timeout=5)
    assert not alive, f"processes left behind: {alive}"


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return str(path)


def release(fifo_path: str, text: str = "go") -> None:
    with open(fifo_path, "w") as fifo:
        fifo.write(text + "\n")


def read_lines(path, n: int, timeout: float = 30.0) -> list[str]:
    """Wait (via the scheduler's events, see Waiter) is preferred; this reads a file."""
    with open(path) as f:
        return f.read().splitlines()[:n]
