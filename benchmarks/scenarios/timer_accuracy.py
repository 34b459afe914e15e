"""Timer accuracy: many one-shot tasks due at known times."""

from __future__ import annotations

import time
from typing import Any

from .. import _tasks
from .._harness import Metric, ScenarioResult, Target, percentile, pyplot, _colour

NAME = "timer_accuracy"
TITLE = "one-shot timer accuracy"
DESCRIPTION = (
    "N one-shot tasks due evenly over `window` seconds, all scheduled `lead` seconds ahead. "
    "Lateness = the task's own time.monotonic() at its start - the due time computed here "
    "(Linux's monotonic clock is system-wide, so it compares across processes). "
    "Pools without a scheduler get a timer thread that sleeps until each due time and submits then."
)
CONTENDERS = [
    "procsched[processes]", "procsched[threads]", "sequential", "ProcessPoolExecutor", "ThreadPoolExecutor",
    "multiprocessing.Pool", "loky", "pebble", "APScheduler3[thread]", "APScheduler3[process]",
]  # fmt: skip
METRICS = [
    Metric("p50_ms", "lateness p50", "ms", "lower", ".3g"),
    Metric("p99_ms", "lateness p99", "ms", "lower", ".3g"),
    Metric("max_ms", "lateness max", "ms", "lower", ".3g"),
    Metric("early", "early starts", "", "lower", "d", ratio=False),
    Metric("schedule_us", "schedule call", "µs", "lower", ".3g"),
]


def params(mode: str) -> dict[str, Any]:
    return {
        "full": {"tasks": 2000, "window": 2.0, "lead": 1.0, "reps": 3},
        "quick": {"tasks": 2000, "window": 1.0, "lead": 0.5, "reps": 1},
        "tiny": {"tasks": 100, "window": 0.2, "lead": 0.3, "reps": 1},
    }[mode]


def measure(adapter: Any, p: dict[str, Any]) -> dict[str, Any]:
    n, window = p["tasks"], p["window"]
    base = time.monotonic() + p["lead"]
    dues = [base + i * window / n for i in range(n)]
    at, fn = adapter.at, _tasks.stamp
    t0 = time.perf_counter()
    timed = [at(due, fn) for due in dues]
    t1 = time.perf_counter()
    if time.monotonic() > base:
        raise RuntimeError(f"scheduling {n} tasks took longer than the {p['lead']} s lead")
    lateness = [(adapter.timed_result(t, window + 60) - due) * 1000 for t, due in zip(timed, dues)]
    return {
        "p50_ms": percentile(lateness, 50),
        "p99_ms": percentile(lateness, 99),
        "max_ms": max(lateness),
        "early": sum(1 for x in lateness if x < 0),
        "schedule_us": (t1 - t0) / n * 1e6,
        "_samples": {"lateness_ms": sorted(lateness)},
    }


def targets(result: ScenarioResult) -> list[Target]:
    ours = "procsched[processes]"
    return [
        Target("one-shot lateness p50", result.median(ours, "p50_ms"), "<=", 0.3, "ms"),
        Target("one-shot lateness p99", result.median(ours, "p99_ms"), "<=", 1.0, "ms"),
    ]


def plot(result: ScenarioResult, path: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 5))
    for name, data in result.samples.items():
        xs = [max(x, 1e-3) for x in data["lateness_ms"]]
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        bold = name.startswith("procsched")
        ax.step(xs, ys, where="post", label=name, lw=2.5 if bold else 1.2, color=_colour(name) if bold else None)
    ax.set_xscale("log")
    ax.set_xlabel("lateness [ms] (log)")
    ax.set_ylabel("fraction of tasks started")
    ax.set_title("timer_accuracy: lateness CDF (last repetition; left is better)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
