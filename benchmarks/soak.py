"""Soak: periodic CPU jobs plus injected crashes for N minutes.

    python -m benchmarks.soak --minutes 10            (or: python -m benchmarks --only soak --minutes 10)
    python -m benchmarks.soak --minutes 1 --sample 5  # a quick look

The load, on a pool of ``--workers`` processes (default 2):

* CPU jobs: fixed-rate jobs that spin 5-50 ms every 100 ms-1 s and fixed-delay
  jobs that spin 30 ms; together about a third of the pool.
* Injected faults: a "flaky" job (every 500 ms: segfault, ``os._exit``, an
  exception or success, at random), a job that overruns its timeout now and
  then, and a thread that SIGKILLs a random worker every 2-8 s, whatever it
  runs.
* A stream of one-shot tasks (a batch every second), each checked.

Every ``--sample`` seconds it records the dispatcher's RSS, open file
descriptors and CPU, and the lateness (start - scheduled start) of the CPU
jobs' runs in that interval. At the end it checks that nothing was lost:
every one-shot ended the way it should have, and the runs the listener saw
add up to the dispatcher's own counts. A markdown report goes to stdout, a
JSON file to benchmarks/results/soak-<time>.json.

Task functions live at the top of this module, which workers import: keep
its top-level imports light.
"""

from __future__ import annotations

import ctypes
import os
import random
import time


def spin(seconds: float) -> int:
    """A CPU job: burn ``seconds`` of CPU."""
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


def flaky(seed: int) -> str:
    """Crash, fail or succeed, at random (seeded by the run, so reproducible)."""
    import procsched

    roll = random.Random(seed * 1_000_003 + procsched.current_run().run).random()
    if roll < 0.10:
        ctypes.string_at(0)  # SIGSEGV
    if roll < 0.20:
        os._exit(7)
    if roll < 0.30:
        raise RuntimeError("flaky job failed on purpose")
    spin(0.002)
    return "ok"


def sometimes_slow(seed: int) -> None:
    """Overruns a 200 ms timeout one run in four."""
    import procsched

    slow = random.Random(seed + procsched.current_run().run).random() < 0.25
    time.sleep(0.5 if slow else 0.02)


def tiny(i: int) -> int:
    return i * 2


# -- the benchmark (runs in the user process only) -----------------------------------

CPU_JOBS = [  # (name, kind, period or delay in s, spin in s)
    ("cpu-rate-100ms", "rate", 0.1, 0.005),
    ("cpu-rate-200ms", "rate", 0.2, 0.010),
    ("cpu-rate-500ms", "rate", 0.5, 0.020),
    ("cpu-rate-1s", "rate", 1.0, 0.050),
    ("cpu-rate-250ms", "rate", 0.25, 0.015),
    ("cpu-delay-300ms", "delay", 0.3, 0.030),
    ("cpu-delay-150ms", "delay", 0.15, 0.005),
]


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.1f}"


def main(argv: list[str] | None = None) -> int:
    import argparse
    import importlib
    import json
    import logging
    import signal
    import sys
    import threading

    import psutil

    import procsched

    p = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0, help="how long to run (default 10)")
    p.add_argument("--workers", type=int, default=2, help="pool size (default 2)")
    p.add_argument("--sample", type=float, default=None, help="seconds between samples (default: 20 samples)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-kill", action="store_true", help="no external SIGKILLs")
    p.add_argument("--results-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = p.parse_args(argv)
    duration = args.minutes * 60
    sample_every = args.sample or max(1.0, duration / 20)
    logging.getLogger("procsched").setLevel(logging.ERROR)  # the crashes are on purpose
    # Tasks by reference to this module, also when it runs as __main__.
    tasks = importlib.import_module("benchmarks.soak")
    rng = random.Random(args.seed)

    def log(msg: str) -> None:
        print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    lock = threading.Lock()
    window: list[float] = []  # lateness of CPU-job runs ended since the last sample
    all_lateness: list[float] = []
    seen = dict.fromkeys(["ok", "error", "crashed", "timeout", "cancelled"], 0)

    def on_run_end(event: dict) -> None:
        with lock:
            seen[event["outcome"]] += 1
            if (event["name"] or "").startswith("cpu-"):
                window.append(event["lateness"])
                all_lateness.append(event["lateness"])

    s = procsched.Scheduler(args.workers)
    s.add_listener(on_run_end, ["run_finished", "run_failed", "run_crashed", "run_timeout", "run_cancelled"])
    dispatcher = psutil.Process(s._backend.proc.pid)
    handles = []
    for name, kind, every, work in CPU_JOBS:
        if kind == "rate":
            handles.append(s.schedule_at_fixed_rate(tasks.spin, every, args=(work,), name=name))
        else:
            handles.append(s.schedule_with_fixed_delay(tasks.spin, every, args=(work,), name=name))
    handles.append(s.schedule_at_fixed_rate(tasks.flaky, 0.5, args=(args.seed,), name="flaky"))
    handles.append(s.schedule_at_fixed_rate(tasks.sometimes_slow, 2.0, args=(args.seed,), name="slow", timeout=0.2))

    stop = threading.Event()
    kills: list[tuple[float, int]] = []

    def killer() -> None:
        krng = random.Random(args.seed + 1)
        while not stop.wait(krng.uniform(2, 8)):
            try:
                pids = [w["pid"] for w in s.stats()["workers"] if w["pid"] is not None]
            except procsched.SchedulerError:
                return
            if pids:
                pid = krng.choice(pids)
                try:
                    os.kill(pid, signal.SIGKILL)
                    kills.append((time.monotonic(), pid))
                except ProcessLookupError:
                    pass

    if not args.no_kill:
        threading.Thread(target=killer, name="soak-killer", daemon=True).start()

    one_shots = {"submitted": 0, "ok": 0, "crashed": 0, "wrong": 0}
    pending_batches: list[list[tuple[int, procsched.TaskHandle]]] = []

    def settle(batch) -> None:
        for i, h in batch:
            exc = h.exception(timeout=120)
            if exc is None and h.result() == i * 2:
                one_shots["ok"] += 1
            elif isinstance(exc, procsched.WorkerCrashedError):
                one_shots["crashed"] += 1  # a kill landed on it
            else:
                one_shots["wrong"] += 1

    samples = []
    cpu0 = dispatcher.cpu_times()
    t0 = time.monotonic()
    next_sample = t0 + sample_every
    next_batch = t0
    log(f"{args.minutes:g} min on {args.workers} workers; a sample every {sample_every:g}s")
    prev_cpu, prev_t = cpu0, t0
    try:
        while True:
            now = time.monotonic()
            if now >= next_batch:
                batch = [
                    (i, s.submit(tasks.tiny, i)) for i in range(one_shots["submitted"], one_shots["submitted"] + 20)
                ]
                one_shots["submitted"] += len(batch)
                pending_batches.append(batch)
                if len(pending_batches) > 2:
                    settle(pending_batches.pop(0))
                next_batch += 1.0
            if now >= next_sample:
                stats = s.stats()
                cpu = dispatcher.cpu_times()
                mem = dispatcher.memory_info().rss
                with lock:
                    lat, window[:] = list(window), []
                sample = {
                    "t": round(now - t0, 1),
                    "dispatcher_rss": mem,
                    "dispatcher_fds": dispatcher.num_fds(),
                    "dispatcher_cpu": (cpu.user + cpu.system - prev_cpu.user - prev_cpu.system) / (now - prev_t),
                    "runs": len(lat),
                    "lateness_p50": _percentile(lat, 0.5),
                    "lateness_p99": _percentile(lat, 0.99),
                    "lateness_max": max(lat, default=None),
                    "outcomes": dict(stats["outcomes"]),
                    "kills": len(kills),
                    "spawned": stats["spawned"],
                }
                samples.append(sample)
                prev_cpu, prev_t = cpu, now
                log(f"t={sample['t']:.0f}s rss={mem / 2**20:.1f} MiB fds={sample['dispatcher_fds']} "
                    f"cpu={sample['dispatcher_cpu']:.1%} p99={_ms(sample['lateness_p99'])} ms "
                    f"outcomes={sample['outcomes']} kills={len(kills)}")  # fmt: skip
                next_sample += sample_every
                if now - t0 >= duration:
                    break
            time.sleep(max(0.0, min(next_batch, next_sample) - time.monotonic()))
    finally:
        stop.set()
        for batch in pending_batches:
            settle(batch)
        final = s.stats()
        for h in handles:
            h.cancel()
        s.shutdown(wait=True)
    elapsed = time.monotonic() - t0

    # -- integrity: nothing lost ---------------------------------------------------
    counted = final["outcomes"]
    with lock:
        listened = dict(seen)
    problems = []
    if one_shots["wrong"]:
        problems.append(f"{one_shots['wrong']} one-shot task(s) ended wrongly")
    if one_shots["ok"] + one_shots["crashed"] != one_shots["submitted"]:
        problems.append("one-shot tasks lost")
    for outcome in ("ok", "error", "crashed", "timeout"):
        if listened[outcome] < counted[outcome]:
            problems.append(f"{outcome}: dispatcher counted {counted[outcome]}, handles saw {listened[outcome]}")
    for h in handles:
        runs = [r.run for r in h.runs]
        if runs != list(range(1, len(runs) + 1)):
            problems.append(f"{h.name}: runs lost or repeated")

    rss = [x["dispatcher_rss"] for x in samples]
    first_half = [x for x in samples if x["t"] <= elapsed / 2]
    result = {
        "command": "python -m benchmarks.soak " + " ".join(argv if argv is not None else sys.argv[1:]),
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() - elapsed)),
        "minutes": round(elapsed / 60, 2),
        "workers": args.workers,
        "cpus": os.cpu_count(),
        "jobs": [{"name": n, "kind": k, "every_s": e, "spin_s": w} for n, k, e, w in CPU_JOBS],
        "outcomes": counted,
        "one_shots": one_shots,
        "kills": len(kills),
        "spawned": final["spawned"],
        "dispatcher_rss_start": rss[0] if rss else None,
        "dispatcher_rss_end": rss[-1] if rss else None,
        "dispatcher_rss_max": max(rss, default=None),
        "dispatcher_rss_growth_second_half": (rss[-1] - first_half[-1]["dispatcher_rss"])
        if first_half and rss
        else None,
        "lateness_p50": _percentile(all_lateness, 0.5),
        "lateness_p99": _percentile(all_lateness, 0.99),
        "lateness_max": max(all_lateness, default=None),
        "cpu_job_runs": len(all_lateness),
        "problems": problems,
        "samples": samples,
    }
    os.makedirs(args.results_dir, exist_ok=True)
    path = os.path.join(args.results_dir, f"soak-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)

    mib = 2**20
    out = [
        f"## Soak: {elapsed / 60:.1f} min, {args.workers} workers, {os.cpu_count()} CPUs",
        "",
        f"`{result['command']}`",
        "",
        "| runs ok | error | crashed | timeout | cancelled | SIGKILLs injected | workers started | one-shots ok / crashed / wrong |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
        f"| {counted['ok']} | {counted['error']} | {counted['crashed']} | {counted['timeout']} | {counted['cancelled']} "
        f"| {len(kills)} | {final['spawned']} | {one_shots['ok']} / {one_shots['crashed']} / {one_shots['wrong']} |",
        "",
        f"CPU-job lateness over {len(all_lateness)} runs: p50 {_ms(result['lateness_p50'])} ms, "
        f"p99 {_ms(result['lateness_p99'])} ms, max {_ms(result['lateness_max'])} ms. "
        f"Dispatcher RSS {rss[0] / mib:.1f} -> {rss[-1] / mib:.1f} MiB (max {max(rss) / mib:.1f})."
        if rss else "no samples",
        "",
        "| t (s) | dispatcher RSS (MiB) | fds | dispatcher CPU | CPU-job runs | lateness p50 (ms) | p99 (ms) | max (ms) | crashed | timeout | kills |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for x in samples:
        out.append(
            f"| {x['t']:.0f} | {x['dispatcher_rss'] / mib:.1f} | {x['dispatcher_fds']} | {x['dispatcher_cpu']:.1%} "
            f"| {x['runs']} | {_ms(x['lateness_p50'])} | {_ms(x['lateness_p99'])} | {_ms(x['lateness_max'])} "
            f"| {x['outcomes']['crashed']} | {x['outcomes']['timeout']} | {x['kills']} |"
        )
    out += ["", "Integrity: " + ("nothing lost, nothing run twice." if not problems else "; ".join(problems)), ""]
    out.append(f"JSON: {os.path.relpath(path)}")
    print("\n".join(out))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
