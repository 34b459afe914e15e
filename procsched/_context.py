"""``current_run()`` and ``current_scheduler()``: what a running task can ask."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ._handle import RunInfo

if TYPE_CHECKING:
    from ._api import SchedulingAPI

_RUN: contextvars.ContextVar[tuple[RunInfo, SchedulingAPI] | None] = contextvars.ContextVar(
    "procsched_run", default=None
)


def current_run() -> RunInfo:
    """The RunInfo of the run in progress (``finished_at``/``outcome`` are None).

    Raises RuntimeError outside a running task.
    """
    entry = _RUN.get()
    if entry is None:
        raise RuntimeError("procsched.current_run() called outside a running task")
    return entry[0]


def current_scheduler() -> SchedulingAPI:
    """The scheduler running this task: its scheduling methods and ``cancel``.

    Raises RuntimeError outside a running task.
    """
    entry = _RUN.get()
    if entry is None:
        raise RuntimeError("procsched.current_scheduler() called outside a running task")
    return entry[1]


@contextlib.contextmanager
def running(info: RunInfo, scheduler: SchedulingAPI) -> Iterator[None]:
    token = _RUN.set((info, scheduler))
    try:
        yield
    finally:
        _RUN.reset(token)
