"""Helpers for the runtime tests: wait on scheduler events, release a FIFO."""

from __future__ import annotations

import threading
import time

import procsched


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


def release(fifo_path: str, text: str = "go") -> None:
    with open(fifo_path, "w") as fifo:
        fifo.write(text + "\n")
