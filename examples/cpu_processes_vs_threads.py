"""CPU-heavy periodic jobs: worker processes vs threads.

The story: a handful of pure-Python, CPU-bound jobs, each due every half
second, together need about 80% of the machine. On the threads runner they
share one GIL, so they get at most one core: runs take longer, start later
and later, and the schedule slips. On the processes runner (the default)
each worker process has its own interpreter, so the jobs run in parallel
and stay on time. Same code, same schedule, one argument changed.

    python examples/cpu_processes_vs_threads.py

PROCSCHED_EXAMPLE_FAST=1 runs each half for 2 s instead of 6 s.
"""

from __future__ import annotations

import os
import statistics
import time

import procsched

FAST = os.environ.get("PROCSCHED_EXAMPLE_FAST") == "1"
SECONDS = 2.0 if FAST else 6.0
CPUS = os.cpu_count() or 1
JOBS = 2 * CPUS
PERIOD = 0.5
WORK = 0.2  # seconds of CPU per run, on an idle core: JOBS * WORK / PERIOD = 80% of the cores


def count_primes(limit: int) -> int:
    """Pure Python trial division: holds the GIL the whole time."""
    count = 0
    for n in range(2, limit):
        for d in range(2, int(n**0.5) + 1):
            if n % d == 0:
                break
        else:
            count += 1
    return count


def calibrate(seconds: float) -> int:
    """The limit for which count_primes takes about ``seconds`` here."""
    limit = 20_000
    while True:
        start = time.perf_counter()
        count_primes(limit)
        took = time.perf_counter() - start
        if took > 0.05:
            return max(1000, int(limit * (seconds / took) ** (2 / 3)))  # the work grows about as limit**1.5
        limit *= 2


def measure(runner: str, limit: int) -> dict[str, float]:
    with procsched.Scheduler(CPUS, runner=runner) as scheduler:
        scheduler.submit(int).result()  # the pool is up: start-up is not lateness
        start = time.monotonic()
        handles = [  # staggered over the period, so that they need not queue
            scheduler.schedule_at_fixed_rate(
                count_primes, PERIOD, initial_delay=i * PERIOD / JOBS, args=(limit,), name=f"primes-{i}"
            )
            for i in range(JOBS)
        ]
        time.sleep(SECONDS)  # let the jobs run; leaving the block stops them (running runs finish)
        elapsed = time.monotonic() - start
    runs = [run for handle in handles for run in handle.runs]
    lateness = sorted(run.started_at - run.scheduled_for for run in runs)
    return {
        "runs": len(runs),
        "expected": sum(int((elapsed - i * PERIOD / JOBS) / PERIOD) + 1 for i in range(JOBS)),
        "duration": statistics.mean(run.finished_at - run.started_at for run in runs),  # type: ignore[operator]
        "p50": lateness[len(lateness) // 2],
        "p99": lateness[max(0, round(0.99 * len(lateness)) - 1)],
    }


def main() -> None:
    limit = calibrate(WORK)
    print(f"{JOBS} jobs, each every {PERIOD:g} s doing ~{WORK:g} s of pure-Python CPU work, "
          f"for {SECONDS:g} s on {CPUS} workers ({CPUS} CPUs)\n")  # fmt: skip
    print(f"{'runner':<10} {'runs/expected':>14} {'mean run':>10} {'lateness p50':>13} {'lateness p99':>13}")
    results = {}
    for runner in ("threads", "processes"):
        r = results[runner] = measure(runner, limit)
        print(f"{runner:<10} {r['runs']:>6.0f}/{r['expected']:<7.0f} {r['duration'] * 1e3:>7.0f} ms"
              f" {r['p50'] * 1e3:>10.0f} ms {r['p99'] * 1e3:>10.0f} ms")  # fmt: skip
    speedup = results["threads"]["duration"] / results["processes"]["duration"]
    print(f"\nA run takes {speedup:.1f}x as long on threads: they share one GIL. "
          "On processes the jobs run in parallel and keep their schedule.")  # fmt: skip
    if CPUS == 1:
        print("(This machine has one CPU, so there is nothing to run in parallel.)")


if __name__ == "__main__":
    main()
