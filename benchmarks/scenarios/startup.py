"""Startup: a fresh pool's first result."""

from __future__ import annotations

import time
from typing import Any

from .. import _contenders, _tasks
from .._harness import Metric, ScenarioResult, Target, bar_plot

NAME = "startup"
TITLE = "first result after start"
DESCRIPTION = (
    "A fresh pool is made (Scheduler(), ProcessPoolExecutor(), Pool(), ...), one no-op task is submitted "
    "at once and its result awaited: ms = constructor call -> first result, then the pool is shut down "
    "(not timed). Nothing is imported or started ahead except the library module itself (the harness's "
    "warmed-up pool of the same contender ran before, so the modules are in memory)."
)
CONTENDERS = [
    "procsched[processes]", "procsched[threads]", "ProcessPoolExecutor", "ThreadPoolExecutor",
    "multiprocessing.Pool", "loky", "pebble",
]  # fmt: skip
METRICS = [Metric("first_ms", "first result", "ms", "lower", ".3g")]


def params(mode: str) -> dict[str, Any]:
    return {"full": {"reps": 5}, "quick": {"reps": 3}, "tiny": {"reps": 1}}[mode]


def measure(adapter: Any, p: dict[str, Any]) -> dict[str, Any]:
    fresh = _contenders.make(adapter.name, adapter.workers)
    t0 = time.perf_counter()
    fresh.start()
    try:
        fresh.result(fresh.submit(_tasks.noop), 60)
        t1 = time.perf_counter()
    finally:
        fresh.close()
    return {"first_ms": (t1 - t0) * 1000}


def targets(result: ScenarioResult) -> list[Target]:
    return [
        Target("first result after Scheduler()", result.median("procsched[processes]", "first_ms"), "<=", 50.0, "ms")
    ]


def plot(result: ScenarioResult, path: str) -> None:
    bar_plot(result, "first_ms", path)
