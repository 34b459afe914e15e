"""The store wired in, end to end: runs per second with and without a store, and restart time.

    python -m benchmarks.durable                        # both measurements
    python -m benchmarks.durable --tasks 20000 --seconds 3
    python -m benchmarks.durable --only restart --tasks 100000
    python -m benchmarks.durable --secret                # each store also with a secret, side by side

Throughput: a Scheduler with 2 workers and K tiny keyed fixed-rate tasks
(``noop``, period P, misfire "skip": the pool is saturated, never a backlog
to catch up); runs finished per second (``run_finished`` events; before
issue 25 the count took every event but ``run_started``, so the slots that
"skip" drops, ``run_missed``, counted as runs) over --seconds, after a warm-up, with
no store, with a SQLite store (the default, synchronous=NORMAL: no fsync,
survives any process crash, not a power cut), SQLite with
``?synchronous=FULL`` (an fsync per commit) and, with --postgres, a
PostgreSQL store (a throwaway cluster, fsync on, Unix socket). Median of
--repeat.

With --secret, each store is measured twice, side by side: without a
secret and with one (``Scheduler(secret=...)``: every definition signed and
checked, issue 24; the target is a cost of at most 5 % of keyed runs/s),
the two alternated repeat by repeat; the ratio is given of the medians and
pair by pair. ``--stores postgresql`` (a comma list) measures only those.

Restart: a SQLite store holding N keyed tasks (due in an hour) is opened by
``Scheduler(2, store=...)``; reported: the constructor's wall time (open,
recover, adopt every task: a handle each, its definition to the dispatcher)
and the time until the dispatcher has adopted them all (a ``stats()`` round
trip after the constructor: the dispatcher answers in command order).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

import procsched
from benchmarks._tasks import noop
from procsched._store import TaskDefinition, TaskState, open_store
from procsched._runtime._wire import _NO_ARGS

NS = 1_000_000_000


#: The secret of the --secret measurements.
SECRET = b"a benchmark's secret, 32 bytes.."


def throughput(
    store: str | None,
    tasks: int,
    period: float,
    seconds: float,
    workers: int = 2,
    warmup: float | None = None,
    secret: bytes | None = None,
) -> float:
    """Runs finished per second (``run_finished`` events: a slot that misfire
    "skip" drops is a ``run_missed``, not a run) over ``seconds``, after
    ``warmup`` seconds (default: a third of ``seconds``, at most 1).
    ``secret``: the store's (its definitions signed and checked)."""
    ended = 0
    lock = threading.Lock()

    def count(event: dict[str, Any]) -> None:
        nonlocal ended
        with lock:
            ended += 1

    with procsched.Scheduler(workers, store=store, secret=secret) as s:
        s.submit(int).result(60)  # workers up
        s.add_listener(count, ["run_finished"])
        for i in range(tasks):
            s.schedule_at_fixed_rate(noop, period, misfire="skip", key=f"t{i}")
        time.sleep(min(1.0, seconds / 3) if warmup is None else warmup)  # a measurement window, not a synchronisation
        with lock:
            start_n, start_t = ended, time.perf_counter()
        time.sleep(seconds)
        with lock:
            n, t = ended - start_n, time.perf_counter() - start_t
        s.shutdown(wait=True, cancel_futures=True)
    return n / t


def restart(path: str, n: int, secret: bytes | None = None) -> tuple[float, float, float]:
    if not os.path.exists(path):
        store = open_store(path, secret=secret)
        due = time.time_ns() + 3600 * NS
        opts = {"priority": 0, "timeout_ns": None, "stop_on_error": False, "name": None, "max_runs": None,
                "retry": None, "until_wall_ns": None}  # fmt: skip
        for lo in range(0, n, 5000):
            b = store.batch()
            for i in range(lo, min(n, lo + 5000)):
                sched = {"kind": "fixed_rate", "period_ns": 3600 * NS, "initial_delay_ns": 0, "misfire": "catch_up"}
                b.upsert(TaskDefinition(f"k{i}", "benchmarks._tasks:noop", _NO_ARGS, sched, opts), TaskState(0, due))
            b.commit()
        store.close()
    t0, c0 = time.perf_counter(), time.process_time()
    s = procsched.Scheduler(2, store=path, secret=secret)
    t1, c1 = time.perf_counter(), time.process_time()
    s.stats()
    t2 = time.perf_counter()
    assert len(s.jobs()) == n, len(s.jobs())
    s.shutdown(wait=True, cancel_futures=True)
    return t1 - t0, t2 - t0, c1 - c0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keyed", type=int, default=20, help="keyed tasks in the throughput run")
    parser.add_argument("--period", type=float, default=0.001)
    parser.add_argument("--workers", type=int, default=2, help="workers in the throughput run")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=100_000, help="stored tasks in the restart run")
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--only", choices=("throughput", "restart"), help="one of the two measurements")
    parser.add_argument("--secret", action="store_true", help="each store also with a secret, side by side")
    parser.add_argument("--stores", type=lambda text: text.lower().split(","), default=None,
                        help="only these of: no store, sqlite, sqlite full, postgresql (a comma list)")  # fmt: skip
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        kinds: list[tuple[str, Any]] = [("no store", lambda i: None),
                                        ("SQLite", lambda i: os.path.join(tmp, f"t{i}.db")),
                                        ("SQLite FULL", lambda i: f"sqlite:///{tmp}/f{i}.db?synchronous=FULL")]  # fmt: skip
        cluster = None
        if args.postgres:
            from procsched._store._pgcluster import ThrowawayCluster

            cluster = ThrowawayCluster(fsync=True).start()
            import psycopg

            def pg(i: int) -> str:
                with psycopg.connect(cluster.url, autocommit=True) as conn:  # type: ignore[union-attr]
                    conn.execute(f"CREATE DATABASE bench{i}")
                return cluster.url_for(f"bench{i}")  # type: ignore[union-attr]

            kinds.append(("PostgreSQL", pg))
        if args.only == "restart":
            kinds = []
        try:
            base = None
            serial = 0
            for name, target in kinds:
                if args.stores and name.lower() not in args.stores:
                    continue
                secrets = (None, SECRET) if args.secret and name != "no store" else (None,)
                rates: dict[bytes | None, list[float]] = {secret: [] for secret in secrets}
                for _ in range(args.repeat):  # unsigned and signed alternated: a change of load hits both
                    for secret in secrets:
                        serial += 1
                        rates[secret].append(throughput(target(serial), args.keyed, args.period, args.seconds,
                                                        args.workers, secret=secret))  # fmt: skip
                unsigned = statistics.median(rates[None])
                base = base or unsigned
                for secret, measured in rates.items():
                    rate = statistics.median(measured)
                    signed = ""
                    if secret:
                        pairs = sorted(s / u for s, u in zip(measured, rates[None], strict=True))
                        signed = (f", {rate / unsigned:.1%} of unsigned; signed/unsigned pair by pair: median "
                                  f"{statistics.median(pairs):.1%}, {pairs[0]:.0%}-{pairs[-1]:.0%}")  # fmt: skip
                    print(f"{name + (' + secret' if secret else ''):22s}  {rate:8.0f} runs/s  ({rate / base:.0%} of "
                          f"no store{signed})  [{', '.join(f'{r:.0f}' for r in measured)}]", flush=True)  # fmt: skip
        finally:
            if cluster is not None:
                cluster.stop()
        for secret in (None, SECRET) if args.secret else (None,):
            path = os.path.join(tmp, "restart-signed.db" if secret else "restart.db")
            signed = " (signed)" if secret else ""
            for _ in range(0 if args.only == "throughput" else args.repeat):
                ctor, adopted, cpu = restart(path, args.tasks, secret)
                print(f"restart with {args.tasks} stored tasks{signed}: Scheduler() {ctor:.2f} s ({cpu:.2f} s CPU in "
                      f"this process), all adopted by the dispatcher {adopted:.2f} s", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
