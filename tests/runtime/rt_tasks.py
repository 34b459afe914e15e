"""Task functions for the runtime tests (importable by worker processes)."""

from __future__ import annotations

import builtins
import ctypes
import os
import subprocess
import sys
import threading
import time

import procsched


def square(x):
    return x * x


def pid():
    return os.getpid()


def segfault():
    ctypes.string_at(0)


def hard_exit(code):
    os._exit(code)


def sys_exit(code):
    sys.exit(code)


def raise_value_error(msg):
    raise ValueError(msg)


def hang():
    threading.Event().wait()


def report_pid_then_hang(path):
    _write(path, f"{os.getpid()}\n")
    threading.Event().wait()


def child_then_hang(path):
    child = subprocess.Popen([sys.executable, "-c", "import threading; threading.Event().wait()"])
    _write(path, f"{child.pid}\n")
    threading.Event().wait()


def unpicklable_result():
    return threading.Lock()


def big_result(n):
    return b"x" * n


def sleep_for(seconds):
    time.sleep(seconds)
    return seconds


def append_line(path, text):
    _write(path, f"{text}\n")
    return text


def record_run(path):
    info = procsched.current_run()
    _write(path, f"{info.task_id} {info.run}\n")


def wait_for_fifo(path):
    """Block until the test opens ``path`` for writing and writes a line."""
    with open(path) as fifo:
        return fifo.readline().strip()


def first_run_slow(seconds):
    if procsched.current_run().run == 1:
        time.sleep(seconds)


def timed_run(seconds):
    start = time.monotonic()
    time.sleep(seconds)
    return start, time.monotonic()


def schedule_follow_up(x):
    handle = procsched.current_scheduler().schedule(square, 0, args=(x,), name="follow-up")
    return handle.id


def cancel_self():
    info = procsched.current_run()
    return procsched.current_scheduler().cancel(info.task_id)


def _write(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


class Flaky(Exception):
    """Raised by fail_until: a retried exception class."""


def fail_until(path, attempts_before_ok, exc_name="Flaky"):
    """Raise (Flaky, or a builtin by name) until attempt ``attempts_before_ok`` + 1."""
    info = procsched.current_run()
    _write(path, f"{info.run} {info.attempt}\n")
    if info.attempt <= attempts_before_ok:
        if exc_name == "crash":
            os._exit(3)
        raise Flaky(info.attempt) if exc_name == "Flaky" else getattr(builtins, exc_name)(info.attempt)
    return info.attempt


def schedule_cron_inside(expr, fifo):
    # Its run waits on ``fifo``: the task stays live (its handle known) until the test has looked at it.
    handle = procsched.current_scheduler().schedule_cron(
        wait_for_fifo, expr, args=(fifo,), max_runs=1, key="inner-cron"
    )
    return handle.id


def run_info():
    return procsched.current_run(), os.getpid()


def assigned_resources():
    import ray

    return ray.get_runtime_context().get_assigned_resources()


def start_children(path):
    """Start a child, and a grandchild whose parent exits at once (an orphan);
    return without waiting for either."""
    child = subprocess.Popen([sys.executable, "-c", "import threading; threading.Event().wait()"])
    orphan_maker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import subprocess, sys; "
                "p = subprocess.Popen([sys.executable, '-c', 'import threading; threading.Event().wait()']); "
                "print(p.pid, flush=True)"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    orphan = int(orphan_maker.stdout.readline())
    orphan_maker.wait()
    _write(path, f"{child.pid} {orphan}\n")
    return child.pid, orphan


def cause_and_wait(path, fifo):
    """Log why this run ran; run 1 then blocks on ``fifo`` until the test releases it."""
    info = procsched.current_run()
    _write(path, f"{info.run} {info.cause}\n")
    if info.run == 1:
        with open(fifo) as release:
            release.read()


def say(text):
    print(text)
    return text


def control_from_a_run(task_id, start, end):
    """Through ``current_scheduler()``: pause and resume task ``task_id``,
    run it now, list then run its backfill over ``start..end``."""
    sched = procsched.current_scheduler()
    return {
        "paused": sched.pause(task_id),
        "resumed": sched.resume(task_id),
        "run_now": sched.run_now(task_id),
        "planned": sched.backfill(task_id, start, end, dry_run=True),
        "backfill": sched.backfill(task_id, start, end),
    }
