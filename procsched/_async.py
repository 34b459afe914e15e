"""``async def`` tasks: run a coroutine function to completion in the worker.

    schedule(fn) ── _validate.call ── as_sync(fn) ──▶ AsyncCall(fn)   (picklable: holds fn)
    worker / thread / inline: AsyncCall(*args) ── asyncio.run(fn(*args)) ──▶ the result

Why ``asyncio.run`` per run, not one event loop per worker: a run gets a
fresh loop and leaves nothing behind (tasks it spawned and forgot are
cancelled when it ends, its loop is closed), so one run cannot disturb the
next - the same isolation a sync task gets. It needs no per-worker state, so
it works the same in every runner: in a worker process, in a pool thread
(including a thread the threads runner abandoned after a timeout) and in the
calling thread of ``InlineScheduler``. A loop costs well under a millisecond
to set up, which matters little for scheduled jobs. Timeouts and
``cancel(interrupt=True)`` act as for sync tasks: the processes runner kills
the worker, the threads runner abandons the thread.

``current_run()`` works inside the coroutine: ``asyncio.run`` copies the
calling context into its main task, and the context variable is set there.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any


class AsyncCall:
    """A sync callable that runs ``fn(*args, **kwargs)`` - a coroutine
    function - to completion with ``asyncio.run``. Pickles as ``fn`` does."""

    __slots__ = ("fn", "__dict__")

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)  # __name__, __qualname__, __module__, __doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import asyncio  # here, not at the top: workers and the dispatcher import this module, few need asyncio

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.fn(*args, **kwargs))
        # A loop runs in this thread already (InlineScheduler.run_due() called
        # from async code): asyncio.run cannot nest, so run in a thread of its own.
        return _in_thread(self.fn, args, kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        return (AsyncCall, (self.fn,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AsyncCall) and other.fn == self.fn

    def __hash__(self) -> int:
        return hash((AsyncCall, self.fn))

    def __repr__(self) -> str:
        return f"<async {self.fn!r}>"


def as_sync(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` wrapped in :class:`AsyncCall` if it is a coroutine function, else ``fn``."""
    if isinstance(fn, AsyncCall) or not _is_async(fn):
        return fn
    return AsyncCall(fn)


def _is_async(fn: Any) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    # an object with an async __call__ (every callable's type has a __call__)
    return not inspect.isfunction(fn) and inspect.iscoroutinefunction(type(fn).__call__)


def _in_thread(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    import asyncio
    import contextvars

    box: dict[str, Any] = {}
    context = contextvars.copy_context()  # current_run() inside, as without the thread

    def target() -> None:
        try:
            box["value"] = context.run(asyncio.run, fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="procsched-async")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
