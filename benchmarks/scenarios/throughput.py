"""Tiny-task throughput: submit N no-op tasks, collect every result."""

from __future__ import annotations

import time
from typing import Any

from .. import _tasks
from .._harness import Metric, ScenarioResult, Target, bar_plot

NAME = "throughput"
TITLE = "tiny-task throughput"
DESCRIPTION = (
    "Submit N no-op tasks (`submit(noop, i)`, i = 0..N-1) as fast as the API allows, then wait for every "
    "result, each contender called as its documentation shows: multiprocessing.Pool.apply_async then "
    "AsyncResult.get on each, Executor.submit then Future.result on each (procsched, ProcessPoolExecutor, "
    "ThreadPoolExecutor, loky), pebble's ProcessPool.schedule then result, APScheduler's add_job with "
    "its listener. tasks/s = N / (first submit -> last result). This is pure per-task overhead: "
    "pickling, pipes, bookkeeping. The sequential loop calls the function N times (no pool, no futures)."
)
CONTENDERS = [
    "procsched[processes]", "procsched[threads]", "procsched[ray]", "sequential", "ProcessPoolExecutor", "ThreadPoolExecutor",
    "multiprocessing.Pool", "loky", "pebble", "APScheduler3[thread]", "APScheduler3[process]",
]  # fmt: skip
METRICS = [
    Metric("tasks_per_s", "throughput", "tasks/s", "higher", ".4g"),
    Metric("submit_us", "submit call", "µs/task", "lower", ".3g"),
    Metric("seconds", "wall time", "s", "lower", ".3g", ratio=False),
]


def params(mode: str) -> dict[str, Any]:
    # 10,000: issue 25's targets are set on that count (2 workers).
    return {"full": {"tasks": 10_000, "reps": 5}, "quick": {"tasks": 10_000, "reps": 1},
            "tiny": {"tasks": 300, "reps": 1}}[mode]  # fmt: skip


def measure(adapter: Any, p: dict[str, Any]) -> dict[str, Any]:
    n = p["tasks"]
    fn = _tasks.noop
    if adapter.name == "sequential":
        t0 = time.perf_counter()
        results = [fn(i) for i in range(n)]
        t1 = time.perf_counter()
        assert len(results) == n
        return {"tasks_per_s": n / (t1 - t0), "submit_us": (t1 - t0) / n * 1e6, "seconds": t1 - t0}
    submit = adapter.submit
    t0 = time.perf_counter()
    handles = [submit(fn, i) for i in range(n)]
    t1 = time.perf_counter()
    results = adapter.results(handles, 600)
    t2 = time.perf_counter()
    assert len(results) == n
    return {"tasks_per_s": n / (t2 - t0), "submit_us": (t1 - t0) / n * 1e6, "seconds": t2 - t0}


def targets(result: ScenarioResult) -> list[Target]:
    ours = result.median("procsched[processes]", "tasks_per_s")
    out = []
    for peer, need in (("multiprocessing.Pool", 1.0), ("ProcessPoolExecutor", 3.0)):
        theirs = result.median(peer, "tasks_per_s")
        ratio = None if ours is None or not theirs else ours / theirs
        out.append(Target(f"tiny-task throughput vs {peer}", ratio, ">=", need, "x",
                          note=f"called natively; {result.params['tasks']:,} no-op submits, "
                          f"{result.params['workers']} workers"))  # fmt: skip
    return out


def plot(result: ScenarioResult, path: str) -> None:
    bar_plot(result, "tasks_per_s", path, log_scale=True)
