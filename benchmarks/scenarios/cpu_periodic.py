"""CPU-heavy periodic jobs: pure-Python work on a fixed-rate schedule."""

from __future__ import annotations

import time
from typing import Any

from .. import _tasks
from .._harness import Metric, ScenarioResult, Target, bar_plot, fmt_value, markdown_table, percentile

NAME = "cpu_periodic"
TITLE = "CPU-heavy fixed-rate jobs"
DESCRIPTION = (
    "2 x workers fixed-rate jobs, each a pure-Python loop of ~work_ms, every period_ms, for `seconds`. "
    "The period is chosen so the jobs ask for exactly the pool's capacity (workers x 100% CPU): "
    "a pool that loses nothing to overhead completes every run on time; one bound by the GIL "
    "completes about half and falls behind. runs = runs finished inside the window; "
    "capacity = runs / (workers x seconds / work). Lateness = start - the run's slot on the grid "
    "(it grows when a contender cannot keep up: fixed rate catches up, it never skips - except "
    "APScheduler, which skips a run while the previous one is still running (max_instances=1), so "
    "its lateness stays low while its run count drops)."
)
CONTENDERS = [
    "procsched[processes]", "procsched[threads]", "procsched[ray]", "sequential", "ProcessPoolExecutor", "ThreadPoolExecutor",
    "multiprocessing.Pool", "loky", "pebble", "APScheduler3[thread]", "APScheduler3[process]",
]  # fmt: skip
METRICS = [
    Metric("runs", "runs completed", "", "higher", ".4g"),
    Metric("capacity_pct", "of capacity", "%", "higher", ".3g"),
    Metric("late_p50_ms", "lateness p50", "ms", "lower", ".3g"),
    Metric("late_p99_ms", "lateness p99", "ms", "lower", ".3g"),
]

_SPIN: dict[float, int] = {}


def params(mode: str) -> dict[str, Any]:
    return {
        "full": {"work_ms": 20, "seconds": 5.0, "reps": 3},
        "quick": {"work_ms": 20, "seconds": 1.0, "reps": 1},
        "tiny": {"work_ms": 5, "seconds": 0.3, "reps": 1},
    }[mode]


def _spin_for(work_ms: float) -> int:
    if work_ms not in _SPIN:
        _SPIN[work_ms] = _tasks.calibrate_spin(work_ms / 1000)
    return _SPIN[work_ms]


def measure(adapter: Any, p: dict[str, Any]) -> dict[str, Any]:
    workers = p["workers"]
    jobs_n = 2 * workers
    work = p["work_ms"] / 1000
    period = work * jobs_n / workers  # demand == capacity
    n = _spin_for(p["work_ms"])
    p["_spin"] = n
    first = time.monotonic() + 0.3
    end = first + p["seconds"]
    jobs = [adapter.fixed_rate(_tasks.cpu, (n,), period, first) for _ in range(jobs_n)]
    time.sleep(max(0.0, end - time.monotonic()))
    records = [r for job in jobs for r in job.stop() if r.end <= end]
    lateness = [(r.start - r.due) * 1000 for r in records]
    capacity = workers * p["seconds"] / work
    return {
        "runs": len(records),
        "capacity_pct": 100 * len(records) / capacity,
        "late_p50_ms": percentile(lateness, 50),
        "late_p99_ms": percentile(lateness, 99),
        "_samples": {"lateness_ms": sorted(lateness)},
    }


def _speedup(result: ScenarioResult, name: str, base: str) -> float | None:
    mine, theirs = result.median(name, "runs"), result.median(base, "runs")
    return None if mine is None or not theirs else mine / theirs


def targets(result: ScenarioResult) -> list[Target]:
    rows = [
        [name, fmt_value(_speedup(result, name, "sequential"), ".3g"), fmt_value(_speedup(result, name, "procsched[threads]"), ".3g")]
        for name in result.reps
    ]  # fmt: skip
    result.extra_tables.append(
        "Speedup (median runs completed ÷ the baseline's):\n\n"
        + markdown_table(["contender", "vs sequential", "vs procsched[threads]"], rows)
    )
    return [
        Target(
            "CPU-heavy speedup over sequential", _speedup(result, "procsched[processes]", "sequential"), ">=", 1.95, "x"
        ),
        Target(
            "CPU-heavy speedup over the threads runner",
            _speedup(result, "procsched[processes]", "procsched[threads]"),
            ">=",
            1.9,
            "x",
        ),
    ]


def plot(result: ScenarioResult, path: str) -> None:
    bar_plot(result, "capacity_pct", path)
