"""What crosses a pipe: framing, and the pickling of user code and results.

Messages are tuples whose first item is a tag, pickled with the standard
pickle and sent as one frame with ``Connection.send_bytes``. User code
(functions, arguments, results, exceptions) is pickled with cloudpickle into
opaque ``bytes`` at the edge - the user process for a call, the worker for a
result - so the dispatcher only ever forwards bytes and never runs user code.
"""

from __future__ import annotations

import os
import pickle
import traceback
import types
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import cloudpickle

from .._errors import SchedulerError
from .._handle import RunError
from ._messages import BLOB_ERROR, BLOB_EXC, BLOB_NONE, BLOB_VALUE

if TYPE_CHECKING:
    from .._retry import Retry

PROTOCOL = pickle.HIGHEST_PROTOCOL
#: Frames from this size on are not copied out of the read buffer (see FrameReader.read).
BIG_FRAME = 1 << 20


class FrameReader:
    """Reads ``Connection.send_bytes`` frames from a file descriptor, as many
    as one ``os.read`` brings: a burst of small messages costs one system
    call, not two per message as ``Connection.recv_bytes`` does. Call
    ``read()`` only when the descriptor is readable."""

    __slots__ = ("fd", "buf", "ready")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = bytearray()
        self.ready: list[bytes] = []  # frames read but not yet taken by next()

    def next(self) -> bytes:
        """Block until a whole frame is in; return the oldest one."""
        while not self.ready:
            self.ready = self.read()
        return self.ready.pop(0)

    def read(self) -> list[bytes]:
        """The frames completed by one read (a large one may be a
        bytearray: it reads as bytes); EOFError at end of file."""
        chunk = os.read(self.fd, 1 << 16)  # under malloc's mmap threshold
        if not chunk:
            raise EOFError
        buf = self.buf
        buf += chunk
        frames: list[bytes] = []
        pos, end = 0, len(buf)
        while end - pos >= 4:
            size = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
            head = 4
            if size < -1:  # (no writer of ours says so: the stream is corrupt - read on, it looped forever)
                raise ValueError(f"a corrupt frame header (size {size}) on fd {self.fd}")
            if size == -1:  # Connection's header for frames over 2 GiB
                if end - pos < 12:
                    break
                size = int.from_bytes(buf[pos + 4 : pos + 12], "big")
                head = 12
            if end - pos - head < size:
                break
            if size >= BIG_FRAME and pos + head + size == end:
                # A large frame that ends the buffer: hand over the buffer
                # itself (pickle reads a bytearray) instead of copying it.
                del buf[: pos + head]
                frames.append(buf)  # type: ignore[arg-type]
                self.buf = bytearray()
                return frames
            with memoryview(buf) as view:  # one copy, not two
                frames.append(bytes(view[pos + head : pos + head + size]))
            pos += head + size
        if pos:
            del buf[:pos]
        return frames


def send(conn: Connection, message: Any) -> None:
    conn.send_bytes(pickle.dumps(message, PROTOCOL))


#: Blobs (pickled arguments) from this size on cross the command pipe out of
#: band: as raw frames after their message, so the dispatcher takes them as
#: they were read, without copying them out of a pickle.
OOB_MIN = 1 << 20
#: Frames up to this size are written in one piece, as Connection.send_bytes
#: writes them (larger ones: through it).
SMALL_FRAME = 16384


def frame_head(size: int) -> bytes:
    """``Connection.send_bytes``'s frame header for ``size`` bytes."""
    if size < 2**31 - 1:
        return size.to_bytes(4, "big", signed=True)
    return (-1).to_bytes(4, "big", signed=True) + size.to_bytes(8, "big")


def send_frame(conn: Connection, body: bytes) -> None:
    """``conn.send_bytes(body)`` on a blocking connection; a small frame
    (the usual command, a run's "done") is written here in one piece as it
    writes them, without its checks and slicing - microseconds on a hot path."""
    if len(body) > SMALL_FRAME:
        conn.send_bytes(body)
        return
    data = frame_head(len(body)) + body
    fd = conn.fileno()
    while data:
        data = data[os.write(fd, data) :]


def send_command(conn: Connection, message: tuple[Any, ...]) -> None:
    """Send a command; a message that carries large blobs goes as a 1-byte
    frame (how many raw frames follow it), the pickled message, then each
    blob as a frame of its own (see ``CommandReader``)."""
    if not _has_big(message):
        send_frame(conn, pickle.dumps(message, PROTOCOL))
        return
    buffers: list[pickle.PickleBuffer] = []
    body = pickle.dumps(_out_of_band(message), PROTOCOL, buffer_callback=buffers.append)
    conn.send_bytes(bytes([len(buffers)]))
    conn.send_bytes(body)
    for buffer in buffers:
        conn.send_bytes(buffer.raw())


def _has_big(message: tuple[Any, ...]) -> bool:
    """A large blob in the message or in a tuple in it? (On every command: kept flat and cheap.)"""
    for item in message:
        kind = type(item)
        if kind is tuple:
            for inner in item:
                if type(inner) is bytes and len(inner) >= OOB_MIN:
                    return True
        elif kind is bytes and len(item) >= OOB_MIN:
            return True
    return False


def _out_of_band(obj: Any) -> Any:
    if type(obj) is tuple:  # (as deep as _has_big looks, and deeper: harmless)
        return tuple(_out_of_band(x) for x in obj)
    if type(obj) is bytes and len(obj) >= OOB_MIN:
        return pickle.PickleBuffer(obj)
    return obj


class CommandReader:
    """The dispatcher's side of :func:`send_command`: whole messages from
    the frames of a ``FrameReader``; a large blob arrives as a read-only
    view of the frame it came in (never copied)."""

    __slots__ = ("frames", "expect")

    def __init__(self) -> None:
        self.frames: list[Any] = []  # the frames of a message still coming in
        self.expect = 0  # how many more

    def messages(self, frames: list[Any]) -> list[Any]:
        out = []
        for frame in frames:
            if self.expect:
                self.frames.append(frame)
                self.expect -= 1
                if not self.expect:
                    body, *buffers = self.frames
                    self.frames = []
                    out.append(pickle.loads(body, buffers=buffers))
            elif len(frame) == 1:  # never a pickle: n raw frames follow the message
                self.expect = frame[0] + 1
            else:
                out.append(pickle.loads(frame))
        return out


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


#: Pickled functions, by function, for functions pickled by reference (a
#: module and a name): the same call pattern costs one dict lookup, not a
#: pickling. Functions pickled by value (``__main__``, lambdas, closures) are
#: pickled afresh every time, as their globals may change.
_FN_CACHE: dict[Any, bytes] = {}
_FN_CACHE_MAX = 1024
_NO_ARGS = pickle.dumps(((), {}), PROTOCOL)
#: Argument types both picklers write alike (nothing by reference or by
#: value): positional arguments of only these are pickled without making a
#: cloudpickle Pickler (~1.7 µs a call).
_PLAIN = frozenset({int, float, str, bytes, bool, type(None)})


def pack_call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bytes, bytes]:
    """Pickle a call as (function, arguments); an unpicklable part raises
    TypeError naming it."""
    try:
        fn_blob = _FN_CACHE.get(fn) if isinstance(fn, types.FunctionType) else None
        if fn_blob is None:
            fn_blob = _pack_fn(fn)
        return fn_blob, _pack_args(args, kwargs) if args or kwargs else _NO_ARGS
    except Exception as exc:
        parts: list[tuple[str, object]] = [("fn", fn)]
        parts += [(f"args[{i}]", a) for i, a in enumerate(args)]
        parts += [(f"kwargs[{k!r}]", a) for k, a in kwargs.items()]
        culprit = "the task"
        for label, part in parts:
            try:
                cloudpickle.dumps(part, PROTOCOL)
            except Exception:  # noqa: BLE001 - whatever pickling it raises: this is the culprit
                culprit = f"{label} ({type(part).__name__})"
                break
        raise TypeError(f"{culprit} cannot be pickled for a worker process: {type(exc).__name__}: {exc}") from exc


def _pack_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    if not kwargs:
        for arg in args:
            if type(arg) not in _PLAIN:
                break
        else:
            return pickle.dumps((args, kwargs), PROTOCOL)
    return cloudpickle.dumps((args, kwargs), PROTOCOL)  # type: ignore[no-any-return]


def _pack_fn(fn: Callable[..., Any]) -> bytes:
    blob: bytes = cloudpickle.dumps(fn, PROTOCOL)
    if (
        isinstance(fn, types.FunctionType)
        and fn.__module__ != "__main__"
        and "<" not in fn.__qualname__  # not a lambda or a local function
        and len(blob) < 512  # by reference: a module and a name
    ):
        if len(_FN_CACHE) >= _FN_CACHE_MAX:
            _FN_CACHE.clear()
        _FN_CACHE[fn] = blob
    return blob


def carried_classes(retry: Retry | None, pickled: bool) -> Any:
    """``retry``'s exception classes (``Retry.on``) as they travel to the
    dispatcher: None for none; with ``pickled`` (another process),
    cloudpickled bytes that only a worker unpickles; else the classes."""
    classes = () if retry is None else retry.classes
    if not classes:
        return None
    return cloudpickle.dumps(classes, PROTOCOL) if pickled else classes


class CallLoader:
    """The worker side of :func:`pack_call`, with its own cache of functions."""

    def __init__(self) -> None:
        self._fns: dict[bytes, Callable[..., Any]] = {}

    def load(self, payload: tuple[bytes, bytes]) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        fn_blob, arg_blob = payload
        fn = self._fns.get(fn_blob) if len(fn_blob) < 512 else None  # (a big frame may be a bytearray)
        if fn is None:
            fn = pickle.loads(fn_blob)
            if len(fn_blob) < 512 and isinstance(fn, types.FunctionType) and "<" not in fn.__qualname__:
                if len(self._fns) >= _FN_CACHE_MAX:
                    self._fns.clear()
                self._fns[fn_blob] = fn
        args, kwargs = pickle.loads(arg_blob)
        return fn, args, kwargs


#: Return values of these types pickle the same with pickle as with
#: cloudpickle, without making a CloudPickler (~2 µs a run).
_PLAIN = frozenset({type(None), bool, int, float, str, bytes})


def pack_value(value: Any) -> tuple[int, bytes, RunError | None]:
    """A run's return value as a blob; an unpicklable one becomes an error
    (its ``RunError`` third, else None)."""
    if type(value) in _PLAIN:
        return BLOB_VALUE, pickle.dumps(value, PROTOCOL), None
    try:
        return BLOB_VALUE, cloudpickle.dumps(value, PROTOCOL), None
    except Exception as exc:  # noqa: BLE001 - whatever pickling a user's object raises
        err = pickle.PicklingError(
            f"the task returned a {type(value).__name__} that cannot be pickled: {type(exc).__name__}: {exc}"
        )
        return (BLOB_ERROR, *pack_error(err))


def pack_error(exc: BaseException) -> tuple[bytes, RunError]:
    """A run's exception as a blob (``(exception, traceback text)``
    pickled), and as plain text (a ``RunError``: what the dispatcher, the
    store and the listeners read without unpickling user code)."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    blob: bytes
    try:
        blob = cloudpickle.dumps((exc, tb), PROTOCOL)
    except Exception:  # noqa: BLE001 - whatever pickling a user's exception raises
        stand_in = SchedulerError(f"the task raised {type(exc).__qualname__}: {exc} (which cannot be pickled)")
        blob = cloudpickle.dumps((stand_in, tb), PROTOCOL)
    return blob, RunError.of(exc, tb)


def unpack(kind: int, blob: Any, pickled: bool = True) -> tuple[Any, BaseException | None]:
    """A blob from the engine -> (value, exception)."""
    if kind == BLOB_NONE:
        return None, None
    if pickled and isinstance(blob, bytes):
        try:
            blob = pickle.loads(blob)
        except Exception as exc:  # noqa: BLE001 - whatever unpickling a user's object raises
            what = "result" if kind == BLOB_VALUE else "exception"
            err = SchedulerError(f"the task's {what} could not be unpickled here: {type(exc).__name__}: {exc}")
            err.__cause__ = exc
            return None, err
    if kind == BLOB_VALUE:
        return blob, None
    if kind == BLOB_ERROR:
        try:
            error, tb = blob
        except (TypeError, ValueError):
            error, tb = blob, ""
        if not isinstance(error, BaseException):
            # An exception whose __reduce__ rebuilds something else.
            error = SchedulerError(
                f"the task raised an exception that unpickled as {type(error).__name__}, "
                f"not an exception: {_safe_repr(error)}"
            )
        if pickled and tb:
            error.__cause__ = RemoteTraceback(tb)
        return None, error
    assert kind == BLOB_EXC
    return None, blob


def _safe_repr(obj: object) -> str:
    try:
        return repr(obj)[:200]
    except BaseException:  # noqa: BLE001
        return f"<{type(obj).__name__}>"
