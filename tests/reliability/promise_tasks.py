"""Task functions for test_promises.py (they run inside worker processes)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from rel_tasks import append

import procsched


class RebuildsAsStr(Exception):
    """An exception whose pickle rebuilds a str, not an exception."""

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (str, ("x",))


class StrRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


class TwoArgs(Exception):
    """Pickles as TwoArgs(a), which its __init__ refuses: it cannot be unpickled."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__(a)


def raise_rebuilds_as_str() -> None:
    raise RebuildsAsStr()


def raise_str_raises() -> None:
    raise StrRaises()


def return_two_args() -> TwoArgs:
    return TwoArgs(1, 2)


def hang(seconds: float = 3600) -> None:
    time.sleep(seconds)


def length(blob: bytes) -> int:
    return len(blob)


def schedule_follow_up_hang() -> int:
    return procsched.current_scheduler().schedule(hang).id


def schedule_from_threads(threads: int, calls: int) -> list[int]:
    """``threads`` threads each schedule ``calls`` far-future tasks through
    this run's current_scheduler(); return every id."""
    sched = procsched.current_scheduler()
    ids: list[int] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(calls):
                ids.append(sched.schedule(hang, 3600).id)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
    return ids


_LATER: dict[str, object] = {}


def leave_a_thread_behind() -> None:
    """Start a thread that schedules work through this run's
    current_scheduler() once released (by release_the_thread, a later run)."""
    sched = procsched.current_scheduler()
    go = threading.Event()
    result: list[str] = []

    def later() -> None:
        go.wait()
        try:
            sched.schedule(hang, 3600)
            result.append("scheduled")
        except procsched.SchedulerError as exc:
            result.append(f"SchedulerError: {exc}")
        except BaseException as exc:  # noqa: BLE001
            result.append(f"{type(exc).__name__}: {exc}")

    thread = threading.Thread(target=later, daemon=True)
    thread.start()
    _LATER.update(go=go, thread=thread, result=result)


def release_the_thread() -> str:
    _LATER["go"].set()  # type: ignore[attr-defined]
    _LATER["thread"].join(30)  # type: ignore[attr-defined]
    return _LATER["result"][0]  # type: ignore[index]


def start_session_child_and_return(pidfile: str) -> int:
    """Start a child in a session of its own (out of the worker's process
    group) and return, leaving it running."""
    child = subprocess.Popen(["sleep", "3600"], start_new_session=True)
    append(pidfile, f"{child.pid}\n")
    return child.pid


def child_and_hang(pidfile: str) -> None:
    """Start a child (in the worker's process group) and hang."""
    child = subprocess.Popen(["sleep", "3600"])
    append(pidfile, f"{child.pid}\n")
    time.sleep(3600)


def chatty() -> str:
    print("from print", flush=True)
    print("to stderr", file=sys.stderr)
    os.write(1, b"from fd 1\n")
    return "ok"


def flood(nbytes: int) -> None:
    line = b"x" * 99 + b"\n"
    for _ in range(nbytes // 100):
        os.write(1, line)
    os.write(1, b"the end\n")


def say_then_segfault() -> None:
    import ctypes

    print("about to crash", flush=True)
    ctypes.string_at(0)
