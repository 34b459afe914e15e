"""What the durable stores cost: write turns, restart load, bytes on disk.

    python -m benchmarks.store                  # SQLite (FULL and NORMAL) and PostgreSQL
    python -m benchmarks.store --tasks 20000    # a smaller load() measurement
    python -m benchmarks.store --no-postgres

Write turns: K keyed tasks each with a run in flight; one turn is one batch
that, for each of B keys, records the run finished with its reschedule and
claims the next run (2 ops per run), committed in one transaction - what
the dispatcher does once per loop turn. Reported: turns (commits) per
second and runs recorded per second, for B = 100 (a busy turn) and B = 1
(a turn per run: the unbatched cost). Wall time, median of --repeat.

Restart: ``load()`` of N stored tasks (definition + state; 10% of them
with a run in flight), in a fresh store object, median of --repeat: wall
time and this process's CPU time (steadier on a shared machine; for
PostgreSQL the server's share is not in it). Target: <= 2 s for 100,000.

Size: store bytes per task (a small definition: a function reference,
empty arguments, a fixed-rate schedule, a few options) and per history
row, from the database's own accounting (SQLite pages in use;
PostgreSQL ``pg_total_relation_size``, tables and indexes).

PostgreSQL runs in a throwaway cluster (``_pgcluster``) with fsync on, on a
Unix socket on this machine: a network round trip would add per statement.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any

from procsched._store import SQLStore, TaskDefinition, TaskState, open_store

P = 1_000_000_000
T0 = 1_700_000_000 * P
OPTIONS = {"priority": 0, "timeout": None, "misfire": "catch_up", "stop_on_error": False, "name": None}


def define(store: SQLStore, n: int, prefix: str = "k", chunk: int = 5000) -> None:
    for start in range(0, n, chunk):
        b = store.batch()
        for i in range(start, min(n, start + chunk)):
            key = f"{prefix}{i}"
            d = TaskDefinition(key, "benchmarks.store:define", b"\x80\x05\x95\x00", {"kind": "fixed_rate",
                               "period_ns": P, "first_ns": T0}, OPTIONS)  # fmt: skip
            b.upsert(d, TaskState(next_due_ns=T0))
        b.commit()


def turns(store: SQLStore, keys: int, per_turn: int, seconds: float) -> dict[str, float]:
    """Run turns of `per_turn` finish+claim pairs for `seconds`; rates."""
    h = store.register()
    names = [f"t{per_turn}_{i}" for i in range(keys)]
    define(store, keys, prefix=f"t{per_turn}_")
    run = dict.fromkeys(names, 1)
    for start in range(0, keys, 500):
        b = store.batch(h)
        for k in names[start : start + 500]:
            b.started(k, 1, 1, T0)
        b.commit()
    done = commits = 0
    t0 = time.perf_counter()
    i = 0
    while (elapsed := time.perf_counter() - t0) < seconds:
        b = store.batch(h)  # as the dispatcher: every finish, then every claim
        chosen = [names[(i + j) % keys] for j in range(per_turn)]
        i += per_turn
        for k in chosen:
            b.finished(k, run[k], 1, "ok", T0 + run[k] * P, T0 + run[k] * P)
        for k in chosen:
            b.started(k, run[k] + 1, 1, T0 + run[k] * P)
            run[k] += 1
        result = b.commit()
        assert result.ok, result
        commits += 1
        done += per_turn
    return {"commits_per_s": commits / elapsed, "runs_per_s": done / elapsed}


def measure_turns(url_for: Any, repeat: int, seconds: float, **opts: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for per_turn in (100, 1):
        samples = []
        for i in range(repeat):
            store = open_store(url_for(f"turns{per_turn}_{i}"), **opts)
            samples.append(turns(store, 1000, per_turn, seconds))
            store.close()
        out[per_turn] = {k: statistics.median(s[k] for s in samples) for k in samples[0]}
    return out


def measure_load(url: str, n: int, repeat: int, **opts: Any) -> dict[str, float]:
    store = open_store(url, **opts)
    empty = settled_size(store)
    t = time.perf_counter()
    define(store, n)
    define_s = time.perf_counter() - t
    h = store.register()
    b = store.batch(h)
    for i in range(0, n, 10):
        b.started(f"k{i}", 1, 1, T0)
    b.commit()
    size_tasks = settled_size(store) - empty
    store.close()
    samples: list[float] = []
    cpu: list[float] = []
    for _ in range(repeat):
        store = open_store(url, **opts)
        t, c = time.perf_counter(), time.process_time()
        loaded = store.load()
        samples.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
        assert len(loaded.tasks) == n and len(loaded.in_flight) == (n + 9) // 10
        store.close()
    return {
        "load_s": statistics.median(samples),
        "load_cpu_s": statistics.median(cpu),
        "define_s": define_s,
        "bytes_per_task": size_tasks / n,
    }


def settled_size(store: SQLStore) -> int:
    """Store bytes once PostgreSQL's dead row versions are vacuumed (as
    autovacuum would): a finished run row was an insert plus an update."""
    if hasattr(store, "url"):
        store.conn.execute("VACUUM FULL")  # compact: live rows only (autocommit, outside a transaction)
    return store.size_bytes()  # type: ignore[attr-defined, no-any-return]


def measure_history_row(url: str, rows: int, **opts: Any) -> float:
    store = open_store(url, keep_runs=rows + 10, **opts)
    define(store, 1, prefix="h")
    h = store.register()
    before = settled_size(store)
    for start in range(1, rows + 1, 500):
        b = store.batch(h)
        for r in range(start, min(rows + 1, start + 500)):
            b.started("h0", r, 1, T0 + (r - 1) * P, T0 + (r - 1) * P + 1000)
            b.finished("h0", r, 1, "ok", T0 + (r - 1) * P + 5000, T0 + r * P)
        assert b.commit().ok
    size = (settled_size(store) - before) / rows
    store.close()
    return size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--history-rows", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=2.0, help="per write-turn measurement")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args(argv)
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally: stop the cluster
    tmp = tempfile.mkdtemp(prefix="procsched-bench-")
    stores: list[tuple[str, Any, dict[str, Any]]] = [
        ("SQLite, synchronous=FULL", lambda name: os.path.join(tmp, name + ".db"), {"synchronous": "FULL"}),
        ("SQLite, synchronous=NORMAL (default)", lambda name: os.path.join(tmp, name + "-n.db"), {}),
    ]
    cluster = None
    if not args.no_postgres:
        from procsched._store._pgcluster import ThrowawayCluster

        cluster = ThrowawayCluster(fsync=True).start()
        import psycopg

        def pg(name: str, c: Any = cluster) -> str:
            with psycopg.connect(c.url, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {name.replace('-', '_')}")
            return c.url_for(name.replace("-", "_"))

        stores.append(("PostgreSQL 15 (fsync on, Unix socket)", pg, {}))
    try:
        print(f"# store benchmarks ({os.cpu_count()} CPUs, python {sys.version.split()[0]})\n")
        print(
            "| store | turn of 100 runs: commits/s | runs/s | turn of 1 run: commits/s | "
            f"load() {args.tasks:,} tasks: wall (our CPU) | define them | bytes/task | bytes/history row |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for label, url_for, opts in stores:
            print(f"measuring {label} ...", file=sys.stderr)
            t = measure_turns(url_for, args.repeat, args.seconds, **opts)
            ld = measure_load(url_for("load"), args.tasks, args.repeat, **opts)
            hist = measure_history_row(url_for("hist"), args.history_rows, **opts)
            print(
                f"| {label} | {t[100]['commits_per_s']:,.0f} | {t[100]['runs_per_s']:,.0f} | "
                f"{t[1]['commits_per_s']:,.0f} | {ld['load_s']:.2f} s ({ld['load_cpu_s']:.2f} s) | {ld['define_s']:.1f} s | "
                f"{ld['bytes_per_task']:.0f} | {hist:.0f} |",
                flush=True,
            )
    finally:
        if cluster is not None:
            cluster.stop()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
