"""Fixed-rate precision: one 20 ms job against its ideal grid."""

from __future__ import annotations

import time
from typing import Any

from .. import _tasks
from .._harness import Metric, ScenarioResult, Target, linear_fit, percentile, pyplot, _colour

NAME = "fixed_rate"
TITLE = "fixed-rate precision"
DESCRIPTION = (
    "One trivial job at a fixed rate of `period_ms` for `seconds`. Error = the run's start "
    "(time.monotonic() in the worker) - its slot on the ideal grid first + k x period. "
    "Drift = the slope of a least-squares line through error vs run index, and that slope "
    "times the expected runs (how far the schedule wanders over the window)."
)
CONTENDERS = [
    "procsched[processes]", "procsched[threads]", "sequential", "ProcessPoolExecutor", "ThreadPoolExecutor",
    "multiprocessing.Pool", "loky", "pebble", "APScheduler3[thread]", "APScheduler3[process]",
]  # fmt: skip
METRICS = [
    Metric("runs", "runs", "", "higher", "d", ratio=False),
    Metric("expected", "expected", "", None, "d"),
    Metric("mean_ms", "mean error", "ms", "lower", ".3g"),
    Metric("p99_ms", "p99 error", "ms", "lower", ".3g"),
    Metric("max_ms", "max error", "ms", "lower", ".3g"),
    Metric("slope_us", "drift slope", "µs/run", None, ".2g"),
    Metric("drift_ms", "drift over window", "ms", None, ".2g"),
]


def params(mode: str) -> dict[str, Any]:
    return {
        "full": {"period_ms": 20, "seconds": 3.0, "reps": 3},
        "quick": {"period_ms": 20, "seconds": 1.5, "reps": 1},
        "tiny": {"period_ms": 20, "seconds": 0.3, "reps": 1},
    }[mode]


def measure(adapter: Any, p: dict[str, Any]) -> dict[str, Any]:
    period = p["period_ms"] / 1000
    expected = round(p["seconds"] / period)
    first = time.monotonic() + 0.2
    job = adapter.fixed_rate(_tasks.stamp_pair, (), period, first)
    time.sleep(max(0.0, first + (expected - 0.5) * period - time.monotonic()))
    records = job.stop()
    by_slot = {}
    for r in records:
        k = round((r.due - first) / period)
        if 0 <= k < expected and k not in by_slot:
            by_slot[k] = (r.start - (first + k * period)) * 1000
    ks = sorted(by_slot)
    errors = [by_slot[k] for k in ks]
    slope, _ = linear_fit(ks, errors) if errors else (float("nan"), 0.0)
    return {
        "runs": len(errors),
        "expected": expected,
        "mean_ms": sum(abs(e) for e in errors) / len(errors) if errors else float("nan"),
        "p99_ms": percentile([abs(e) for e in errors], 99),
        "max_ms": max(abs(e) for e in errors) if errors else float("nan"),
        "slope_us": slope * 1000,
        "drift_ms": slope * expected,
        "_samples": {"k": ks, "error_ms": errors},
    }


def targets(result: ScenarioResult) -> list[Target]:
    ours = "procsched[processes]"
    drift = result.median(ours, "drift_ms")
    runs, expected = result.median(ours, "runs"), result.median(ours, "expected")
    return [
        Target("20 ms fixed rate: runs vs expected", None if runs is None or not expected else runs / expected, ">=", 1.0, "",
               note="every slot ran"),
        Target("20 ms fixed rate: mean error", result.median(ours, "mean_ms"), "<=", 0.5, "ms"),
        Target("20 ms fixed rate: p99 error", result.median(ours, "p99_ms"), "<=", 1.5, "ms"),
        Target("20 ms fixed rate: no drift (|fitted drift over the window|)", None if drift is None else abs(drift),
               "<=", 0.5, "ms"),
    ]  # fmt: skip


def plot(result: ScenarioResult, path: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 5))
    for name, data in result.samples.items():
        bold = name.startswith("procsched")
        ax.plot(data["k"], data["error_ms"], label=name, lw=2 if bold else 0.8,
                color=_colour(name) if bold else None, marker="." if bold else None, ms=3)  # fmt: skip
    ax.set_yscale("symlog", linthresh=0.1)
    ax.set_xlabel("run index k")
    ax.set_ylabel("start - (first + k x period) [ms] (symlog)")
    ax.set_title("fixed_rate: error against the ideal grid (last repetition)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
