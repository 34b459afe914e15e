"""What the web console and the CLI cost over a big store: ``procsched web --store`` answering, ``procsched jobs``.

    python -m benchmarks.console                       # 10,000 stored jobs, a job with 100 runs; 100,000 for the CLI
    python -m benchmarks.console --jobs 1000 --repeat 5 --cli-jobs 0  # a quick look

A SQLite store is filled with N keyed jobs (a mix of fixed-rate and cron
schedules in a few zones, as a fleet has them) and one job with R finished
runs (each with its worker pid and --output characters of output, every 7th
failed with a traceback: what an instance records); the console is served over it (``StoreSource``, the real app and
security layer, uvicorn on a loopback port) and timed through HTTP with the
bearer token, as curl or a browser would ask:

    GET /api/jobs           every job as JSON, a job      target <= 200 ms (N = 10,000)
                            paused or resumed before each
                            request (the store changed:
                            the listing is read again)
    GET /api/jobs           the same, the store unchanged (no target: the change mark says so)
    GET /jobs/{key}         one job's page, R runs, HTML  target <= 100 ms (R = 100)
    GET /api/jobs/{key}     the same job as JSON          (no target)

and ``procsched jobs --store S`` is run as a command (its interpreter's
start included) over a store of --cli-jobs jobs, its table read from a
pipe: target <= 1 s (100,000 jobs).

Wall time per request, median and max of --repeat after one warm-up
request. A benchmark, not a test: the machine's load moves the figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

NS = 1_000_000_000
TOKEN = "benchmark-token"
ZONES = ("Europe/Berlin", "America/New_York", "Asia/Tokyo", "UTC")
CRONS = ("0 3 * * *", "*/5 * * * *", "30 2 * * 1-5", "0 */2 * * *")


def fill(path: str, jobs: int, runs: int, output: int = 0) -> str:
    """A store with ``jobs`` keyed jobs and ``runs`` finished runs of the
    first, each with its worker pid and ``output`` characters of output, and
    every 7th failed with its traceback; its key."""
    import cloudpickle

    from procsched._store import TaskDefinition, TaskState, open_store

    store = open_store(path)
    args = cloudpickle.dumps(((), {}))
    now = time.time_ns()
    batch = store.batch()
    for i in range(jobs):
        if i % 2:
            schedule = {
                "kind": "cron",
                "expr": CRONS[i % len(CRONS)],
                "tz": ZONES[i % len(ZONES)],
                "misfire": "coalesce",
            }
        else:
            schedule = {"kind": "fixed_rate", "period_ns": (1 + i % 60) * NS, "initial_delay_ns": 0,
                        "misfire": "catch_up"}  # fmt: skip
        options = {"priority": 0, "timeout_ns": None, "stop_on_error": False, "name": f"job-{i:05d}",
                   "max_runs": None, "retry": None, "until_wall_ns": None}  # fmt: skip
        d = TaskDefinition(f"job-{i:05d}", "benchmarks.console:work", args, schedule, options)
        batch.upsert(d, TaskState(run_count=0, next_due_ns=now + i * NS))
    batch.commit()
    me = store.register(lease_ns=3600 * NS)
    key = "job-00000"
    printed = ("processed 42 rows of batch <7>\n" * (output // 31 + 1))[:output] or None
    tb = "Traceback (most recent call last):\n" + '  File "jobs.py", line 12, in work\n    step()\n' * 20
    for run in range(1, runs + 1):
        slot = now - (runs - run + 1) * NS
        b = store.batch(me)
        failed = run % 7 == 0
        b.started(key, run, 1, slot, slot + 2_000_000, worker_pid=4000 + run % 4)
        b.finished(key, run, 1, "error" if failed else "ok", slot + 50_000_000 + run * 100_000, slot + NS,
                   error_type="ValueError" if failed else None, error_message="bad luck" if failed else None,
                   error_traceback=tb + "ValueError: bad luck\n" if failed else None, worker_pid=4000 + run % 4,
                   output=printed)  # fmt: skip
        b.commit()
    store.unregister(me)
    store.close()
    return key


def work() -> None:
    """The stored jobs' function (never run here)."""


def timed(client: object, path: str, repeat: int, between: object = None) -> list[float]:
    """Wall times of ``GET path``; ``between()`` (untimed) before each: a change in the store."""
    get = client.get  # type: ignore[attr-defined]
    answer = get(path)  # warm-up (and a check)
    if answer.status_code != 200:
        raise SystemExit(f"GET {path}: {answer.status_code} {answer.text[:200]}")
    times = []
    for _ in range(repeat):
        if between is not None:
            between()  # type: ignore[operator]
        started = time.perf_counter()
        get(path).read()
        times.append(time.perf_counter() - started)
    return times


def listing(path: str, jobs: int, repeat: int) -> list[float]:
    """Wall times of ``procsched jobs --store PATH`` as a command, its output read from a pipe."""
    import subprocess

    command = [sys.executable, "-m", "procsched", "jobs", "--store", path]
    times = []
    for i in range(1 + max(1, repeat // 4)):  # (a warm-up first: the file's pages in the OS cache)
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - started
        if done.returncode != 0 or done.stdout.count("\n") != jobs + 1:
            raise SystemExit(f"procsched jobs: exit {done.returncode}: {done.stderr[-500:]}")
        if i:
            times.append(elapsed)
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=10_000, help="stored jobs (default 10000)")
    p.add_argument("--runs", type=int, default=100, help="finished runs of the job whose page is timed (default 100)")
    p.add_argument("--output", type=int, default=2048,
                   help="characters of output each of those runs printed (default 2048)")  # fmt: skip
    p.add_argument("--repeat", type=int, default=20, help="timed requests per path (default 20)")
    p.add_argument("--cli-jobs", type=int, default=100_000,
                   help="stored jobs for timing procsched jobs (default 100000; 0: not timed)")  # fmt: skip
    args = p.parse_args(argv)

    import httpx

    from procsched._store import open_store
    from procsched._web import Console
    from procsched._web._store_source import StoreSource

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "console.db")
        started = time.perf_counter()
        key = fill(path, args.jobs, args.runs, args.output)
        filled = time.perf_counter() - started
        print(f"store: {args.jobs} jobs, {args.runs} runs of {key}, output {args.output} chars a run ({filled:.1f} s)")
        console = Console(StoreSource(open_store(path), path), port=0, token=TOKEN)
        console.start()
        try:
            with httpx.Client(base_url=console.url.rstrip("/"), headers={"Authorization": f"Bearer {TOKEN}"},
                              timeout=60) as client:  # fmt: skip
                other = open_store(path)  # another process's writes, as an instance's
                flips = iter(range(10**9))

                def change() -> None:
                    (other.pause if next(flips) % 2 == 0 else other.resume)("job-00001")

                try:
                    changed = timed(client, "/api/jobs", args.repeat, change)
                finally:
                    other.close()
                rows = [
                    (f"GET /api/jobs ({args.jobs} jobs, after a change)", changed, 0.200),
                    (f"GET /api/jobs ({args.jobs} jobs, unchanged)", timed(client, "/api/jobs", args.repeat), None),
                    (f"GET /jobs/{key} ({args.runs} runs, HTML)", timed(client, f"/jobs/{key}", args.repeat), 0.100),
                    (f"GET /api/jobs/{key} (JSON)", timed(client, f"/api/jobs/{key}", args.repeat), None),
                ]
        finally:
            console.close()
        if args.cli_jobs:
            many = os.path.join(tmp, "cli.db")
            started = time.perf_counter()
            fill(many, args.cli_jobs, 0)
            print(f"store: {args.cli_jobs} jobs for the CLI (filled in {time.perf_counter() - started:.1f} s)")
            rows.append((f"procsched jobs ({args.cli_jobs} jobs, to a pipe)", listing(many, args.cli_jobs, args.repeat),
                         1.0))  # fmt: skip
    print("\n| request | median [ms] | max [ms] | target [ms] | verdict |\n|---|---:|---:|---:|---|")
    for name, times, target in rows:
        median = statistics.median(times)
        verdict = "-" if target is None else ("PASS" if median <= target else "MISS")
        shown = "-" if target is None else f"{target * 1e3:.0f}"
        print(f"| {name} | {median * 1e3:.1f} | {max(times) * 1e3:.1f} | {shown} | {verdict} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
