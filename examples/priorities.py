"""Priorities when the workers are saturated.

Priority decides only one thing: which due task gets the next free worker.
It does not pre-empt a run in progress, so it matters exactly when there is
more due work than workers.

Part 1, the rule: one worker is kept busy while nine tasks of three
priorities become due; when it frees up they run HIGH first, then NORMAL,
then LOW, and in submission order within a level (FIFO).

Part 2, why it matters: CPU-heavy LOW-priority batch jobs ask for more than
the machine has, so they fall behind; a HIGH-priority alert check keeps its
schedule anyway - it only ever waits for the end of one run.

    python examples/priorities.py
"""

from __future__ import annotations

import os
import tempfile
import time

import procsched
from procsched import Priority

FAST = os.environ.get("PROCSCHED_EXAMPLE_FAST") == "1"
SECONDS = 2.0 if FAST else 6.0
CPUS = os.cpu_count() or 1


def wait_for_file(path: str) -> None:
    """Hold the only worker until the main process says every task is queued."""
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.005)


def label(text: str) -> str:
    return text


def burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def alert_check() -> None:
    pass


def part1() -> None:
    print("Part 1: nine tasks become due while the only worker is busy; they run in this order:")
    with tempfile.TemporaryDirectory() as tmp, procsched.Scheduler(1) as scheduler:
        gate = os.path.join(tmp, "all-queued")
        blocker = scheduler.submit(wait_for_file, gate)
        order = []
        scheduler.add_listener(lambda e: order.append(e["name"]), events="run_started")
        handles = []
        for i in range(3):
            for prio in (Priority.LOW, Priority.NORMAL, Priority.HIGH):
                name = f"{prio.name}-{i}"
                handles.append(scheduler.schedule(label, args=(name,), priority=prio, name=name))
        open(gate, "w").close()  # every task is queued: release the worker
        blocker.result()
        for handle in handles:
            handle.result()
    print("  " + " ".join(name for name in order if name))


def part2() -> None:
    jobs = 2 * CPUS
    print(f"\nPart 2: {jobs} LOW batch jobs each want 0.15 s of CPU every 0.25 s ({jobs * 0.6:.1f} cores of work"
          f" for {CPUS} workers), next to a HIGH alert check every 0.2 s, for {SECONDS:g} s:")  # fmt: skip
    with procsched.Scheduler(CPUS) as scheduler:
        scheduler.submit(int).result()
        batch = [scheduler.schedule_at_fixed_rate(burn, 0.25, args=(0.15,), priority=Priority.LOW, name=f"batch-{i}")
                 for i in range(jobs)]  # fmt: skip
        alert = scheduler.schedule_at_fixed_rate(alert_check, 0.2, priority=Priority.HIGH, name="alert")
        time.sleep(SECONDS)
    for name, handles in (("alert (HIGH)", [alert]), ("batch (LOW)", batch)):
        runs = [run for h in handles for run in h.runs]
        late = sorted(run.started_at - run.scheduled_for for run in runs)
        p99 = late[max(0, round(0.99 * len(late)) - 1)]
        print(f"  {name:<13} {len(runs):>3} runs   lateness median {late[len(late) // 2] * 1e3:6.0f} ms"
              f"   p99 {p99 * 1e3:6.0f} ms")  # fmt: skip


def main() -> None:
    part1()
    part2()


if __name__ == "__main__":
    main()
