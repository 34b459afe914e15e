"""Restart over many stored keyed tasks, and listing them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from .. import durable
from .._harness import Context, Metric, ScenarioResult, Target, log

NAME = "restart"
TITLE = "restart with many stored keyed tasks"
DESCRIPTION = (
    "A SQLite store holding `tasks` keyed fixed-rate tasks (due in an hour), built once. restart = "
    "`Scheduler(2, store=...)` called -> the dispatcher has adopted every task (a stats() round trip after "
    "the constructor: the dispatcher answers in command order); constructor = the constructor's own wall "
    "time (open, recover, a handle per task). jobs = `python -m procsched jobs --store PATH` run as a "
    "command, start to exit, its output read from a pipe (what a user waits for, interpreter start "
    "included)."
)
ROW = "procsched[processes]"
METRICS = [
    Metric("restart_s", "restart (all adopted)", "s", "lower", ".3g", ratio=False),
    Metric("ctor_s", "Scheduler()", "s", "lower", ".3g", ratio=False),
    Metric("ctor_cpu_s", "Scheduler() CPU here", "s", "lower", ".3g", ratio=False),
    Metric("jobs_s", "procsched jobs --store", "s", "lower", ".3g", ratio=False),
]


def params(mode: str) -> dict[str, Any]:
    return {
        "full": {"tasks": 100_000, "reps": 3},
        "quick": {"tasks": 100_000, "reps": 1},
        "tiny": {"tasks": 2_000, "reps": 1},
    }[mode]


def run(module: Any, ctx: Context, p: dict[str, Any]) -> ScenarioResult:
    result = ScenarioResult(NAME, TITLE, DESCRIPTION, p, list(METRICS))
    tmp = tempfile.mkdtemp(prefix="bench-restart-")
    path = os.path.join(tmp, "restart.db")
    try:
        log(f"{NAME}: storing {p['tasks']:,} keyed tasks")
        durable.restart(path, p["tasks"])  # builds the store, then a first restart (not counted: cold caches)
        for rep in range(p["reps"]):
            ctx.before_visit()
            log(f"{NAME}: rep {rep + 1}/{p['reps']}")
            mark = ctx.foreign_mark()
            ctor, adopted, cpu = durable.restart(path, p["tasks"])
            t0 = time.perf_counter()
            listing = subprocess.run([sys.executable, "-m", "procsched", "jobs", "--store", path],
                                     capture_output=True, timeout=600)  # fmt: skip
            jobs = time.perf_counter() - t0
            if listing.returncode != 0:
                raise RuntimeError(f"procsched jobs exited {listing.returncode}: {listing.stderr[-2000:]!r}")
            share = ctx.foreign_share(mark)
            result.reps.setdefault(ROW, []).append({
                "restart_s": adopted, "ctor_s": ctor, "ctor_cpu_s": cpu, "jobs_s": jobs,
                "foreign_cpu_pct": None if share is None else round(100 * share, 1),
            })  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def targets(result: ScenarioResult) -> list[Target]:
    n = f"{result.params['tasks']:,} stored keyed tasks"
    return [
        Target(f"restart with {n}, until every task is adopted", result.median(ROW, "restart_s"), "<=", 1.0, "s"),
        Target(f"`procsched jobs --store` over {n}", result.median(ROW, "jobs_s"), "<=", 1.0, "s"),
    ]
