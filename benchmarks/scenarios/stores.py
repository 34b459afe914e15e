"""Durable stores: keyed runs per second with SQLite and PostgreSQL against none."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from .. import durable
from .._harness import Context, Metric, ScenarioResult, Target, bar_plot, log

NAME = "stores"
TITLE = "keyed runs per second, with a durable store and without"
DESCRIPTION = (
    "A Scheduler with `workers` workers and `keyed` keyed fixed-rate no-op tasks every `period_ms` "
    "(misfire skip: demand above what the pool does, never a backlog to catch up), with no store "
    "(in memory), a SQLite store (the default: synchronous=NORMAL) and a PostgreSQL store (a throwaway "
    "cluster started here: fsync on, synchronous_commit at its default, a Unix socket); a fresh file or "
    "database per trial. runs/s = run_finished events over `seconds`, after `warmup` seconds. "
    "Repetitions alternate the stores. of in-memory = runs/s / the median of 'no store'."
)
KINDS = ["no store", "SQLite", "PostgreSQL"]
METRICS = [
    Metric("runs_per_s", "runs", "runs/s", "higher", ".4g", ratio=False),
    Metric("of_memory_pct", "of in-memory", "%", "higher", ".3g", ratio=False),
]
#: issue 25: a store's keyed runs/s as a share of the in-memory scheduler's.
NEEDED = {"SQLite": 70.0, "PostgreSQL": 50.0}


def params(mode: str) -> dict[str, Any]:
    base = {"keyed": 20, "period_ms": 1.0}
    return (
        base
        | {
            "full": {"seconds": 3.0, "warmup": 1.0, "reps": 3},
            "quick": {"seconds": 2.0, "warmup": 1.0, "reps": 1},
            "tiny": {"seconds": 0.5, "warmup": 0.3, "reps": 1},
        }[mode]
    )


def run(module: Any, ctx: Context, p: dict[str, Any]) -> ScenarioResult:
    from procsched._store._pgcluster import ThrowawayCluster, find_binaries

    result = ScenarioResult(NAME, TITLE, DESCRIPTION, p, list(METRICS))
    kinds = list(KINDS)  # stores, not pools: --contenders does not apply
    cluster = None
    if "PostgreSQL" in kinds and find_binaries() is None:
        result.errors["PostgreSQL"] = "no PostgreSQL server binaries (initdb, pg_ctl) on this machine"
        kinds.remove("PostgreSQL")
    tmp = tempfile.mkdtemp(prefix="bench-stores-")
    trial = 0
    try:
        if "PostgreSQL" in kinds:
            cluster = ThrowawayCluster(fsync=True).start()
        for rep in range(p["reps"]):
            for kind in kinds[rep % len(kinds) :] + kinds[: rep % len(kinds)]:
                trial += 1
                ctx.before_visit()
                log(f"{NAME}: rep {rep + 1}/{p['reps']}: {kind}")
                url = _fresh(kind, tmp, trial, cluster)
                mark = ctx.foreign_mark()
                try:
                    rate = durable.throughput(url, p["keyed"], p["period_ms"] / 1000, p["seconds"], p["workers"],
                                              warmup=p["warmup"])  # fmt: skip
                except Exception as exc:  # noqa: BLE001 - one store failing must not sink the run
                    log(f"{NAME}: {kind} failed: {exc!r}")
                    result.errors[kind] = f"{type(exc).__name__}: {exc}"
                    continue
                share = ctx.foreign_share(mark)
                result.reps.setdefault(kind, []).append(
                    {"runs_per_s": rate, "foreign_cpu_pct": None if share is None else round(100 * share, 1)}
                )
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    result.reps = {k: result.reps[k] for k in kinds if k in result.reps}
    memory = result.median("no store", "runs_per_s")
    for reps in result.reps.values():
        for r in reps:
            r["of_memory_pct"] = 100 * r["runs_per_s"] / memory if memory else None
    return result


def _fresh(kind: str, tmp: str, trial: int, cluster: Any) -> str | None:
    if kind == "no store":
        return None
    if kind == "SQLite":
        return os.path.join(tmp, f"t{trial}.db")
    import psycopg

    with psycopg.connect(cluster.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE bench{trial}")
    return str(cluster.url_for(f"bench{trial}"))


def targets(result: ScenarioResult) -> list[Target]:
    memory = result.median("no store", "runs_per_s")
    out = []
    for kind, need in NEEDED.items():
        mine = result.median(kind, "runs_per_s")
        share = None if mine is None or not memory else 100 * mine / memory
        out.append(Target(f"{kind} store: keyed runs/s, share of in-memory", share, ">=", need, "%",
                          note=f"{result.params['keyed']} keyed fixed-rate tasks at {result.params['period_ms']:g} ms, "
                          f"{result.params['workers']} workers"))  # fmt: skip
    return out


def plot(result: ScenarioResult, path: str) -> None:
    bar_plot(result, "runs_per_s", path)
