"""Crash isolation: a task that kills its worker process costs one run.

The story: a heartbeat job ticks every 100 ms while three one-shot tasks
take their workers down - a segfault in C code, ``os._exit(3)``, and a
SIGKILL (what the OOM killer sends). Each of those tasks fails with
``WorkerCrashedError`` carrying the exit code or signal; the dead worker is
replaced; the heartbeat never misses a beat; and a task that raises an
ordinary exception just fails, with the remote traceback attached.

    python examples/crash_isolation.py
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import time

import procsched

FAST = os.environ.get("PROCSCHED_EXAMPLE_FAST") == "1"
SECONDS = 1.0 if FAST else 3.0


def heartbeat() -> int:
    return os.getpid()


def segfault() -> None:
    faulthandler.disable()  # the worker has faulthandler on: keep its C-level dump off this screen
    ctypes.string_at(0)  # read address 0: SIGSEGV


def exit_hard() -> None:
    os._exit(3)  # no cleanup, no exception: the process is just gone


def oom_killed() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def raises() -> None:
    raise ValueError("an ordinary bug")


def main() -> None:
    with procsched.Scheduler(2) as scheduler:
        scheduler.submit(int).result()  # the pool is up
        beat = scheduler.schedule_at_fixed_rate(heartbeat, 0.1, name="heartbeat")
        pids_before = {w["pid"] for w in scheduler.stats()["workers"]}
        victims = {fn.__name__: scheduler.schedule(fn, 0.2 * (i + 1)) for i, fn in enumerate(
            (segfault, exit_hard, oom_killed, raises))}  # fmt: skip
        for name, handle in victims.items():
            try:
                handle.result(timeout=30)
            except procsched.WorkerCrashedError as exc:
                how = exc.signal or f"exit code {exc.exitcode}"
                print(f"{name:<11} crashed worker {exc.pid} ({how}): WorkerCrashedError, run outcome "
                      f"{handle.runs[-1].outcome!r}")  # fmt: skip
            except ValueError as exc:
                print(f"{name:<11} raised {exc!r} in worker {handle.runs[-1].worker}; its traceback is attached "
                      f"as __cause__ ({type(exc.__cause__).__name__})")  # fmt: skip
        time.sleep(SECONDS)  # let the heartbeat keep going a little
        stats = scheduler.stats()
        pids_after = {w["pid"] for w in stats["workers"]}
    runs = beat.runs
    outcomes = {run.outcome for run in runs}
    late = max(run.started_at - run.scheduled_for for run in runs)
    span = runs[-1].scheduled_for - runs[0].scheduled_for
    print(f"\nheartbeat: {len(runs)} runs over {span:.1f} s, every one {outcomes}, worst lateness {late * 1e3:.1f} ms")
    restarts = sum(w["restarts"] for w in stats["workers"])
    print(f"worker pids before: {sorted(pids_before)}, after: {sorted(pids_after)} ({restarts} replacements)")
    print(f"outcome counts over all runs: {stats['outcomes']}")


if __name__ == "__main__":
    main()
