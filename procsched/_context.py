"""``current_run()`` and ``current_scheduler()``: what a running task can ask."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ._handle import RunInfo

if TYPE_CHECKING:
    from ._api import SchedulingAPI

#: (the run's RunInfo, or a function that makes it; its scheduler), while a task runs.
_RUN: contextvars.ContextVar[tuple[RunInfo | Callable[[], RunInfo], SchedulingAPI] | None] = contextvars.ContextVar(
    "procsched_run", default=None
)


def current_run() -> RunInfo:
    """The RunInfo of the run in progress (``finished_at``/``outcome`` are None).

    Raises RuntimeError outside a running task.
    """
    entry = _RUN.get()
    if entry is None:
        raise RuntimeError("procsched.current_run() called outside a running task")
    info = entry[0]
    return info if isinstance(info, RunInfo) else info()  # a worker makes it only when asked


def current_scheduler() -> SchedulingAPI:
    """The scheduler running this task: its scheduling methods and ``cancel``.

    Raises RuntimeError outside a running task.
    """
    entry = _RUN.get()
    if entry is None:
        raise RuntimeError("procsched.current_scheduler() called outside a running task")
    return entry[1]


def begin_run(info: RunInfo | Callable[[], RunInfo], scheduler: SchedulingAPI) -> contextvars.Token[Any]:
    """``running`` without a context manager, for a worker's hot loop: end
    it with ``end_run(token)``. ``info`` may be a function that makes the
    RunInfo, called only if the task asks for it."""
    return _RUN.set((info, scheduler))


def end_run(token: contextvars.Token[Any]) -> None:
    _RUN.reset(token)


@contextlib.contextmanager
def running(info: RunInfo, scheduler: SchedulingAPI) -> Iterator[None]:
    token = _RUN.set((info, scheduler))
    try:
        yield
    finally:
        _RUN.reset(token)
