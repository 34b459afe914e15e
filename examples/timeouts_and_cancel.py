"""Timeouts, and cancelling work that is already running.

The story, in four steps:

1. A task that hangs has ``timeout=``: when it overruns, its worker process
   is killed and replaced, and ``result()`` raises ``TaskTimeoutError``.
2. A running one-shot task cannot be cancelled politely - ``cancel()``
   returns False, as ``concurrent.futures`` does - but ``cancel(interrupt=True)``
   kills its worker (which is replaced) and the task ends CANCELLED.
3. A periodic task is cancelled between runs, or during one: the run in
   progress finishes, and no further run starts.
4. A scheduler-wide default: ``Scheduler(timeout=...)`` applies to every task
   that does not set its own.

    python examples/timeouts_and_cancel.py
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time

import procsched

FAST = os.environ.get("PROCSCHED_EXAMPLE_FAST") == "1"
TIMEOUT = 0.3 if FAST else 1.0


def hang() -> None:
    time.sleep(3600)


def tick() -> int:
    return procsched.current_run().run


def main() -> None:
    with procsched.Scheduler(2) as scheduler:
        started = threading.Event()
        ticks = threading.Semaphore(0)
        scheduler.add_listener(lambda e: started.set() if e["name"] == "long job" else None, events="run_started")
        scheduler.add_listener(lambda e: ticks.release() if e["name"] == "tick" else None, events="run_finished")
        pids = sorted(w["pid"] for w in scheduler.stats()["workers"])

        print(f"1. timeout: a task that hangs, with timeout={TIMEOUT:g}")
        hung = scheduler.schedule(hang, timeout=TIMEOUT, name="hangs")
        t0 = time.monotonic()
        try:
            hung.result(timeout=60)
        except procsched.TaskTimeoutError as exc:
            print(f"   after {time.monotonic() - t0:.2f} s: {type(exc).__name__}: {exc}")
        print(f"   state {hung.state.name}, run outcome {hung.runs[-1].outcome!r}")

        print("2. cancel a running one-shot task")
        long = scheduler.schedule(hang, name="long job")
        started.wait(timeout=60)
        print(f"   cancel()               -> {long.cancel()}   (it is running: left alone)")
        print(f"   cancel(interrupt=True) -> {long.cancel(interrupt=True)}    (its worker is killed)")
        try:
            long.result(timeout=60)
        except concurrent.futures.CancelledError:
            print(f"   result() raises CancelledError; state {long.state.name}, run outcome {long.runs[-1].outcome!r}")

        print("3. cancel a periodic task")
        periodic = scheduler.schedule_at_fixed_rate(tick, 0.05, name="tick")
        for _ in range(3):
            ticks.acquire(timeout=60)
        print(f"   after {len(periodic.runs)} runs: cancel() -> {periodic.cancel()}; state {periodic.state.name}")
        print(f"   runs {[r.run for r in periodic.runs]}; no further run starts")

        stats = scheduler.stats()
        print(f"   worker pids at start {pids}, now {sorted(w['pid'] for w in stats['workers'])}: "
              f"{sum(w['restarts'] for w in stats['workers'])} workers were replaced")  # fmt: skip

    print("4. a default timeout for every task")
    with procsched.Scheduler(1, timeout=TIMEOUT) as scheduler:
        fine = scheduler.submit(sum, [1, 2, 3])
        stuck = scheduler.submit(hang)
        print(f"   sum -> {fine.result(timeout=60)}; hang -> {type(stuck.exception(timeout=60)).__name__}")


if __name__ == "__main__":
    main()
