"""``Retry``: how a failed run is tried again (DESIGN.md, "Retries")."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from datetime import timedelta
from typing import final

from ._core import RetryPolicy
from ._validate import describe, duration_ns

RETRYABLE = ("error", "crashed", "timeout")


@final
class Retry:
    """Try a failed run again, up to ``attempts`` tries in all (the first included).

    After failed attempt n, the next starts ``min(delay * backoff**(n-1),
    max_delay)`` seconds (± ``jitter`` as a fraction) after it finished, if
    its outcome is in ``on``: outcome names ("error", "crashed", "timeout")
    and/or exception classes (an "error" whose exception is an instance of
    one; decided in the worker, where the exception exists). Each attempt is
    a ``RunInfo`` with the same ``run`` and the next ``attempt``.

    Raises:
        ValueError, TypeError: a bad argument (named, with its value).
    """

    __slots__ = ("attempts", "delay", "backoff", "max_delay", "jitter", "on")

    def __init__(
        self,
        attempts: int = 3,
        delay: float | timedelta = 1.0,
        backoff: float = 2.0,
        max_delay: float | timedelta = 60.0,
        jitter: float = 0.0,
        on: Iterable[str | type[BaseException]] | str | type[BaseException] = RETRYABLE,
    ) -> None:
        if isinstance(attempts, bool) or not isinstance(attempts, int):
            raise TypeError(f"attempts must be an int, not {type(attempts).__name__} {attempts!r}")
        if attempts < 1:
            raise ValueError(f"attempts must be >= 1 (it counts the first try), not {attempts!r}")
        duration_ns("delay", delay)
        duration_ns("max_delay", max_delay)
        _real("backoff", backoff)
        if backoff < 1:
            raise ValueError(f"backoff must be >= 1, not {backoff!r}")
        _real("jitter", jitter)
        if not 0 <= jitter <= 1:
            raise ValueError(f"jitter must be a fraction between 0 and 1, not {jitter!r}")
        entries = [on] if isinstance(on, (str, type)) else on
        try:
            entries = tuple(entries)
        except TypeError:
            raise TypeError(
                f"on must be outcome names and/or exception classes, not {type(on).__name__} {on!r}"
            ) from None
        for entry in entries:
            if isinstance(entry, str):
                if entry not in RETRYABLE:
                    raise ValueError(f"on: {entry!r} is not an outcome that can be retried (one of {RETRYABLE})")
            elif not (isinstance(entry, type) and issubclass(entry, BaseException)):
                raise TypeError(f"on: {entry!r} is neither an outcome name nor an exception class")
        self.attempts = attempts
        self.delay = delay
        self.backoff = backoff
        self.max_delay = max_delay
        self.jitter = jitter
        self.on: tuple[str | type[BaseException], ...] = entries

    def __repr__(self) -> str:
        on = ", ".join(e if isinstance(e, str) else e.__name__ for e in self.on)
        return (
            f"Retry(attempts={self.attempts}, delay={self.delay!r}, backoff={self.backoff!r}, "
            f"max_delay={self.max_delay!r}, jitter={self.jitter!r}, on=({on}))"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Retry):
            return NotImplemented
        return all(getattr(self, a) == getattr(other, a) for a in self.__slots__)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, a) for a in self.__slots__))

    def describe(self) -> str:
        """``"retry 3x"``, for the live view."""
        return f"retry {self.attempts}x"

    @property
    def classes(self) -> tuple[type[BaseException], ...]:
        """The exception classes in ``on`` (checked in the worker)."""
        return tuple(e for e in self.on if isinstance(e, type))

    def policy(self) -> RetryPolicy:
        return RetryPolicy(
            self.attempts,
            duration_ns("delay", self.delay),
            float(self.backoff),
            duration_ns("max_delay", self.max_delay),
            float(self.jitter),
            frozenset(e for e in self.on if isinstance(e, str)),
        )


def checked_retry(value: object) -> Retry | None:
    """``retry=``: a Retry or None (TypeError naming the value otherwise)."""
    if value is not None and not isinstance(value, Retry):
        raise TypeError(f"retry must be a procsched.Retry or None, not {describe(value)}")
    return value


def _real(arg: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{arg} must be a number, not {type(value).__name__} {value!r}")
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{arg} must be finite, not {value!r}")
