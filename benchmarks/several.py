"""Several schedulers on one store (issue 11): claims per second and failover time.

    python -m benchmarks.several                         # SQLite, and PostgreSQL if its binaries are found
    python -m benchmarks.several --seconds 5 --tasks 50 --leases 1,2,4

Claims per second: 1, 2 and 3 scheduler processes (2 workers each) share
one store and the same K tiny keyed fixed-rate tasks (period P, misfire
"skip": demand far above what the store can claim, never a backlog to catch
up). Counted on the store: the sum of the tasks' run counts over the window
after a warm-up - claims won, each run once whatever the number of
schedulers. SQLite is a file (synchronous FULL); PostgreSQL a throwaway
cluster (fsync on, Unix socket).

Failover: two schedulers; a keyed fixed-rate task (period 0.1 s) whose
first run lasts a minute. The scheduler holding that run is SIGKILLed (its
whole process tree: a host dies); failover is the time from the kill to the
survivor's first run of that task (its ``started_ns`` in the store). Target:
at most lease + 1 s (the survivor sees the lease expire at its next re-read,
lease/3 at most 1 s apart, and the task's next slot is then already due).

The machine matters: on 2 shared cores, three schedulers (3 x (user process
+ dispatcher + 2 workers)) compete for CPU with the store.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import psutil

NS = 1_000_000_000
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def hold(seconds: float) -> None:
    """A task whose first run lasts ``seconds`` (the failover measurement's long run)."""
    import procsched

    run = procsched.current_run()
    if run is not None and run.run == 1:
        time.sleep(seconds)


def child(cfg: dict[str, Any]) -> None:
    """One scheduler: the benchmark's tasks on the shared store, until stdin closes."""
    import procsched
    from benchmarks._tasks import noop

    s = procsched.Scheduler(2, store=cfg["store"], lease=cfg["lease"])
    for i in range(cfg["tasks"]):
        s.schedule_at_fixed_rate(noop, cfg["period"], misfire="skip", key=f"t{i}")
    if cfg.get("hold"):
        from benchmarks.several import hold as importable  # this file runs as __main__: store the module's function

        s.schedule_at_fixed_rate(importable, 0.1, args=(60.0,), key="hold")
    print("ready", flush=True)
    sys.stdin.readline()
    s.shutdown(wait=True)


def _start(cfg: dict[str, Any]) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.Popen([sys.executable, "-m", "benchmarks.several", "--child", json.dumps(cfg)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
    line = p.stdout.readline()  # type: ignore[union-attr]
    if line.strip() != "ready":
        raise RuntimeError(f"a scheduler did not start (exit {p.poll()})")
    return p


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.stdin.write("\n")  # type: ignore[union-attr]
            p.stdin.flush()  # type: ignore[union-attr]
    for p in procs:
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            _kill_tree(p.pid)


def _kill_tree(pid: int) -> None:
    try:
        me = psutil.Process(pid)
        procs = [me, *me.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=10)


def _runs(store: Any) -> int:
    return sum(t.state.run_count for t in store.jobs())


def claims(url: str, schedulers: int, tasks: int, period: float, seconds: float) -> float:
    """Runs claimed per second by ``schedulers`` processes sharing ``url``."""
    from procsched._store import open_store

    cfg = {"store": url, "lease": 10.0, "tasks": tasks, "period": period}
    procs = [_start(cfg) for _ in range(schedulers)]
    try:
        with open_store(url) as store:
            time.sleep(2.0)  # warm-up (a measurement window, not a synchronisation)
            n0, t0 = _runs(store), time.perf_counter()
            time.sleep(seconds)
            n1, t1 = _runs(store), time.perf_counter()
    finally:
        _stop(procs)
    return (n1 - n0) / (t1 - t0)


def failover(url: str, lease: float) -> float:
    """Seconds from SIGKILL of the holder of a long run to the survivor's first run of that task."""
    from procsched._store import open_store

    cfg = {"store": url, "lease": lease, "tasks": 0, "period": 1.0, "hold": True}
    procs = [_start(cfg), _start(cfg)]
    try:
        with open_store(url) as store:
            deadline = time.monotonic() + 30
            while not (held := store.get("hold")) or held.holder is None:  # run 1 claimed
                if time.monotonic() > deadline:
                    raise RuntimeError("run 1 was never claimed")
                time.sleep(0.01)
            pid = int(held.holder.split(":")[1])  # the holder's user process
            victim = next(p for p in procs if p.pid == pid)
            time.sleep(0.3)
            killed = time.time_ns()
            _kill_tree(victim.pid)
            while True:
                after = [r for r in store.history("hold") if r.run >= 2 and r.started_ns and r.started_ns >= killed]
                if after:
                    return (min(r.started_ns for r in after) - killed) / NS
                if time.time_ns() - killed > (lease + 30) * NS:
                    raise RuntimeError("no failover")
                time.sleep(0.01)
    finally:
        _stop(procs)


def _stores(tmp: str, postgres: bool) -> list[tuple[str, Any, Any]]:
    """(name, a fresh-store factory, cleanup)."""
    import itertools

    counter = itertools.count()
    out: list[tuple[str, Any, Any]] = [("sqlite", lambda: os.path.join(tmp, f"s{next(counter)}.db"), None)]
    if postgres:
        from procsched._store._pgcluster import ThrowawayCluster, find_binaries

        if find_binaries() is not None:
            import psycopg

            cluster = ThrowawayCluster(fsync=True).start()

            def fresh() -> str:
                name = f"b{next(counter)}"
                with psycopg.connect(cluster.url, autocommit=True) as conn:
                    conn.execute(f"CREATE DATABASE {name}")
                return cluster.url_for(name)

            out.append(("postgresql", fresh, cluster.stop))
        else:
            print("(PostgreSQL server binaries not found: SQLite only)")
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--tasks", type=int, default=50)
    p.add_argument("--period", type=float, default=0.01)
    p.add_argument("--leases", default="1,2,4")
    p.add_argument("--repeat", type=int, default=3, help="failover measurements per lease")
    p.add_argument("--no-postgres", action="store_true")
    args = p.parse_args(argv)
    if args.child:
        child(json.loads(args.child))
        return
    with tempfile.TemporaryDirectory() as tmp:
        for name, fresh, cleanup in _stores(tmp, not args.no_postgres):
            try:
                base = None
                for n in (1, 2, 3):
                    rate = claims(fresh(), n, args.tasks, args.period, args.seconds)
                    base = base or rate
                    print(
                        f"{name:10} claims/s with {n} scheduler(s): {rate:7.0f}  ({rate / base:.2f}x one)", flush=True
                    )
                for lease in (float(x) for x in args.leases.split(",")):
                    times = [failover(fresh(), lease) for _ in range(args.repeat)]
                    print(f"{name:10} failover, lease {lease:g} s: median {statistics.median(times):.2f} s, "
                          f"max {max(times):.2f} s (target <= {lease + 1:g} s)", flush=True)  # fmt: skip
            finally:
                if cleanup is not None:
                    cleanup()


if __name__ == "__main__":
    main()
