"""What crosses a pipe: framing, and the pickling of user code and results.

Messages are tuples whose first item is a tag, pickled with the standard
pickle and sent as one frame with ``Connection.send_bytes``. User code
(functions, arguments, results, exceptions) is pickled with cloudpickle into
opaque ``bytes`` at the edge - the user process for a call, the worker for a
result - so the dispatcher only ever forwards bytes and never runs user code.
"""

from __future__ import annotations

import pickle
import traceback
from multiprocessing.connection import Connection
from typing import Any, Callable

import cloudpickle

from .._errors import SchedulerError
from ._engine import BLOB_ERROR, BLOB_EXC, BLOB_NONE, BLOB_VALUE

PROTOCOL = pickle.HIGHEST_PROTOCOL


def send(conn: Connection, message: tuple[Any, ...] | list[Any]) -> None:
    conn.send_bytes(pickle.dumps(message, PROTOCOL))


def recv(conn: Connection) -> Any:
    return pickle.loads(conn.recv_bytes())


class RemoteTraceback(Exception):
    """Carries a worker's formatted traceback; set as ``__cause__`` of the
    exception that ``result()`` re-raises."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return self.tb


def pack_call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """Pickle a call; an unpicklable part raises TypeError naming it."""
    try:
        return cloudpickle.dumps((fn, args, kwargs), PROTOCOL)
    except Exception as exc:
        parts: list[tuple[str, object]] = [("fn", fn)]
        parts += [(f"args[{i}]", a) for i, a in enumerate(args)]
        parts += [(f"kwargs[{k!r}]", a) for k, a in kwargs.items()]
        culprit = "the task"
        for label, part in parts:
            try:
                cloudpickle.dumps(part, PROTOCOL)
            except Exception:
                culprit = f"{label} ({type(part).__name__})"
                break
        raise TypeError(f"{culprit} cannot be pickled for a worker process: {type(exc).__name__}: {exc}") from exc


def pack_value(value: Any) -> tuple[int, bytes]:
    """A run's return value as a blob; an unpicklable one becomes an error."""
    try:
        return BLOB_VALUE, cloudpickle.dumps(value, PROTOCOL)
    except Exception as exc:
        err = pickle.PicklingError(
            f"the task returned a {type(value).__name__} that cannot be pickled: {type(exc).__name__}: {exc}"
        )
        return BLOB_ERROR, pack_error(err)


def pack_error(exc: BaseException) -> bytes:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        return cloudpickle.dumps((exc, tb), PROTOCOL)
    except Exception:
        stand_in = SchedulerError(f"the task raised {type(exc).__qualname__}: {exc} (which cannot be pickled)")
        return cloudpickle.dumps((stand_in, tb), PROTOCOL)


def unpack(kind: int, blob: Any, pickled: bool = True) -> tuple[Any, BaseException | None]:
    """A blob from the engine -> (value, exception)."""
    if kind == BLOB_NONE:
        return None, None
    if pickled and isinstance(blob, bytes):
        try:
            blob = pickle.loads(blob)
        except Exception as exc:
            what = "result" if kind == BLOB_VALUE else "exception"
            err = SchedulerError(f"the task's {what} could not be unpickled here: {type(exc).__name__}: {exc}")
            err.__cause__ = exc
            return None, err
    if kind == BLOB_VALUE:
        return blob, None
    if kind == BLOB_ERROR:
        exc, tb = blob
        if pickled:
            exc.__cause__ = RemoteTraceback(tb)
        return None, exc
    assert kind == BLOB_EXC
    return None, blob
