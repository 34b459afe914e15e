"""Clocks: where a scheduler reads "now".

The core never reads a clock; the runners do, through this small interface.
Time is integer nanoseconds inside, seconds (float) at the public surface.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, final, runtime_checkable

NS = 1_000_000_000


@runtime_checkable
class Clock(Protocol):
    """What a runner needs from a clock."""

    def now_ns(self) -> int:
        """The current time, in integer nanoseconds."""
        ...

    def sleep_until_ns(self, deadline_ns: int) -> None:
        """Block until ``deadline_ns`` (a manual clock jumps there instead)."""
        ...


@final
class MonotonicClock:
    """The real clock: ``time.monotonic_ns`` (system-wide on Linux, so a
    dispatcher process and its workers read the same time)."""

    __slots__ = ()

    def now_ns(self) -> int:
        return time.monotonic_ns()

    def now(self) -> float:
        return time.monotonic_ns() / NS

    def sleep_until_ns(self, deadline_ns: int) -> None:
        while True:  # a blocking sleep, repeated only if it woke early
            left = deadline_ns - time.monotonic_ns()
            if left <= 0:
                return
            time.sleep(left / NS)

    def __repr__(self) -> str:
        return "MonotonicClock()"


@final
class ManualClock:
    """A clock that moves only when told to: for deterministic tests.

    ``ManualClock(start=0.0)``; ``now()`` in seconds; ``advance(seconds)``.
    ``InlineScheduler.run_until`` moves it from one due time to the next.
    """

    __slots__ = ("_ns", "_lock")

    def __init__(self, start: float = 0.0) -> None:
        from ._validate import duration_ns

        self._ns = duration_ns("start", start)
        self._lock = threading.Lock()

    def now(self) -> float:
        """The current time in seconds."""
        return self._ns / NS

    def now_ns(self) -> int:
        return self._ns

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (≥ 0)."""
        from ._validate import duration_ns

        step = duration_ns("seconds", seconds)
        with self._lock:
            self._ns += step

    def sleep_until_ns(self, deadline_ns: int) -> None:
        with self._lock:
            if deadline_ns > self._ns:
                self._ns = deadline_ns

    def __repr__(self) -> str:
        return f"ManualClock(now={self.now()!r})"
