"""Clocks: where a scheduler reads "now".

The core never reads a clock; the runners do, through this small interface.
Time is integer nanoseconds inside, seconds (float) at the public surface.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Protocol, final, runtime_checkable

from ._core._units import NS, wall_datetime
from ._core._units import wall_ns as _wall_ns
from ._validate import duration_ns


@runtime_checkable
class Clock(Protocol):
    """What a runner needs from a clock."""

    def now_ns(self) -> int:
        """The current time, in integer nanoseconds."""
        ...

    def wall_ns(self) -> int:
        """The wall-clock time that goes with it, ns since the epoch (UTC)."""
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

    def wall_ns(self) -> int:
        return time.time_ns()

    def wall_now(self) -> datetime:
        return datetime.now(UTC)

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

    ``ManualClock(start=0.0, *, wall=None)``; ``now()`` in seconds;
    ``advance(seconds)`` moves the monotonic and the wall clock together;
    ``set_wall(when)`` steps the wall clock alone (an NTP step, a suspend).
    ``wall`` is the aware datetime that ``start`` corresponds to (None: the
    real wall time when the clock is made). ``InlineScheduler.run_until``
    moves it from one due time to the next.
    """

    __slots__ = ("_ns", "_lock", "_offset")

    def __init__(self, start: float = 0.0, *, wall: datetime | None = None) -> None:
        self._ns = duration_ns("start", start)
        self._lock = threading.Lock()
        wall_ns = time.time_ns() if wall is None else _wall_ns(_aware("wall", wall))
        self._offset = wall_ns - self._ns  # wall = monotonic + offset

    def wall_ns(self) -> int:
        """The wall-clock time, in ns since the epoch."""
        return self._ns + self._offset

    def wall_now(self) -> datetime:
        """The wall-clock time, an aware UTC datetime."""
        return wall_datetime(self._ns + self._offset)

    def set_wall(self, when: datetime) -> None:
        """Step the wall clock alone to ``when`` (an aware datetime), as an
        NTP step or a resume from suspend does; ``now()`` does not move."""
        target = _wall_ns(_aware("when", when))
        with self._lock:
            self._offset = target - self._ns

    def now(self) -> float:
        """The current time in seconds."""
        return self._ns / NS

    def now_ns(self) -> int:
        return self._ns

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (≥ 0)."""
        step = duration_ns("seconds", seconds)
        with self._lock:
            self._ns += step

    def sleep_until_ns(self, deadline_ns: int) -> None:
        with self._lock:
            if deadline_ns > self._ns:
                self._ns = deadline_ns

    def __repr__(self) -> str:
        return f"ManualClock(now={self.now()!r}, wall={self.wall_now().isoformat()!r})"


def _aware(arg: str, value: object) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"{arg} must be an aware datetime, not {type(value).__name__} {value!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{arg} must be an aware datetime (with tzinfo), not naive {value!r}")
    return value
