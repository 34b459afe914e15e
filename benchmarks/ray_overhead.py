"""What a run costs on runner="ray": round-trip latency of one no-op run,
one at a time, on a local Ray of 2 CPUs, next to a bare Ray task (what Ray
itself costs) and procsched's processes runner.

    python -m benchmarks.ray_overhead [--runs 300] [--blocks 5]

The three are measured in interleaved blocks, so that load from other
processes falls on all of them alike. Latency = submit -> result in this
process (time.perf_counter), one run in flight.

Then the ceiling of the dispatcher thread and the Ray driver in this
process: N no-op runs submitted at once, with ``workers`` (runs in flight)
2 and 16 (Ray queues what its 2 CPUs cannot start), runs/s = N / wall time;
and what a run costs the machine in CPU: its busy time (/proc/stat, every
process: the driver, Ray's daemons, the workers) over those N runs, per
run. On a machine shared with other work that figure includes theirs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any, Callable

from . import _tasks


def _block(call: Callable[[], Any], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        call()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ray_overhead")
    p.add_argument("--runs", type=int, default=300, help="runs per block")
    p.add_argument("--blocks", type=int, default=5)
    args = p.parse_args(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    import procsched

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    bare = ray.remote(max_retries=0, retry_exceptions=False)(_tasks.noop)
    on_ray = procsched.Scheduler(1, runner="ray")
    on_processes = procsched.Scheduler(1)
    contenders: dict[str, Callable[[], Any]] = {
        "bare Ray task (ray.get(f.remote()))": lambda: ray.get(bare.remote()),
        'procsched runner="ray"': lambda: on_ray.submit(_tasks.noop).result(60),
        'procsched runner="processes"': lambda: on_processes.submit(_tasks.noop).result(60),
    }
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for call in contenders.values():  # warm up: workers started, functions exported
        _block(call, 20)
    for _ in range(args.blocks):
        for name, call in contenders.items():
            samples[name] += _block(call, args.runs)
    on_ray.shutdown()
    on_processes.shutdown()
    ceiling = {}
    n = args.runs * args.blocks
    for runner, workers in (("ray", 2), ("ray", 16), ("processes", 2)):
        with procsched.Scheduler(workers, runner=runner) as s:
            s.submit(_tasks.noop).result(60)
            busy0, t0 = _busy_seconds(), time.perf_counter()
            for f in [s.submit(_tasks.noop) for _ in range(n)]:
                f.result(600)
            wall, busy = time.perf_counter() - t0, _busy_seconds() - busy0
            ceiling[(runner, workers)] = (n / wall, busy / n * 1000)
    ray.shutdown()
    print(f"one no-op run at a time, {args.blocks} x {args.runs} runs each, interleaved; "
          f"load average after: {tuple(round(x, 2) for x in os.getloadavg())}\n")  # fmt: skip
    print("| | latency p50 [ms] | p99 [ms] | runs/s, one in flight |")
    print("|---|---|---|---|")
    for name, values in samples.items():
        values.sort()
        p50 = statistics.median(values)
        p99 = values[min(len(values) - 1, int(0.99 * len(values)))]
        print(f"| {name} | {p50:.3g} | {p99:.3g} | {1000 / statistics.fmean(values):.4g} |")
    print()
    print(f"{n} no-op runs submitted at once:\n")
    print("| runner | workers | runs/s | machine CPU per run [ms] |")
    print("|---|---|---|---|")
    for (runner, workers), (rate, cpu_ms) in ceiling.items():
        print(f"| {runner} | {workers} | {rate:.4g} | {cpu_ms:.3g} |")
    return 0


def _busy_seconds() -> float:
    """CPU time the whole machine spent busy (all CPUs), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    raise SystemExit(main())
