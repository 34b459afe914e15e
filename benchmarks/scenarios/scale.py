"""Scale: many pending tasks - the cost of schedule(), memory, and idleness."""

from __future__ import annotations

import gc
import os
import pickle
import sys
import threading
import time
from typing import Any

import cloudpickle
import psutil

from .. import _contenders, _tasks
from .._harness import Context, Metric, ScenarioResult, Target, log, pyplot, visit, _colour

NAME = "scale"
TITLE = "many pending tasks"
DESCRIPTION = (
    "Schedule N one-shot no-op tasks due an hour out, through the public API. "
    "schedule() = mean µs per call while filling from 0 to N; at N = mean µs of 10,000 more calls "
    "once N are pending. ingest = time until the dispatcher has taken every command (a stats() "
    "round trip, ordered behind them), per task. dispatcher B/task = growth of the dispatcher "
    "process's RSS / N (procsched[processes]: psutil, the child running "
    "procsched._runtime._dispatcher); without the payload = that minus the payload bytes object "
    "the task brings (its call pickled as one bytes object, sys.getsizeof(cloudpickle.dumps((fn, args, kwargs))), "
    "whatever procsched does with it inside). user B/task = growth of this "
    "process's RSS / N (TaskHandles / APScheduler jobs). idle CPU = CPU time (user+system) of this "
    "process and all its descendants over `idle_s` with the N tasks pending, scaled to 10 s: the "
    "processes are found with psutil; their CPU time is read per thread from /proc/PID/task/TID/schedstat "
    "(nanoseconds; the harness's own measuring and load-sampling threads excluded), because psutil's cpu_times() counts in "
    "10 ms clock ticks (also shown)."
)
CONTENDERS = ["procsched[processes]", "procsched[threads]", "APScheduler3[thread]"]
METRICS = [
    Metric("schedule_us", "schedule()", "µs/call", "lower", ".3g", ratio=False),
    Metric("schedule_at_n_us", "schedule() at N", "µs/call", "lower", ".3g", ratio=False),
    Metric("ingest_us", "ingest", "µs/task", "lower", ".3g", ratio=False),
    Metric("disp_bytes", "dispatcher", "B/task", "lower", ".4g", ratio=False),
    Metric("disp_bytes_net", "dispatcher without payload", "B/task", "lower", ".4g", ratio=False),
    Metric("payload_bytes", "payload", "B/task", None, ".4g", ratio=False),
    Metric("user_bytes", "user process", "B/task", "lower", ".4g", ratio=False),
    Metric("idle_cpu_ms", "idle CPU", "ms/10 s", "lower", ".3g", ratio=False),
    Metric("idle_cpu_psutil_ms", "idle CPU (psutil, 10 ms ticks)", "ms/10 s", "lower", ".3g", ratio=False),
    Metric("shutdown_s", "shutdown", "s", "lower", ".3g", ratio=False),
]


def params(mode: str) -> dict[str, Any]:
    return {
        "full": {"sizes": [100_000, 1_000_000], "idle_s": 10.0, "extra": 10_000, "reps": 1,
                 "apscheduler_max": 100_000},
        "quick": {"sizes": [100_000], "idle_s": 3.0, "extra": 10_000, "reps": 1, "apscheduler_max": 100_000},
        "tiny": {"sizes": [2_000], "idle_s": 0.5, "extra": 200, "reps": 1, "apscheduler_max": 2_000},
    }[mode]  # fmt: skip


def label(name: str, size: int) -> str:
    return f"{name} @ {size:,}"


def _tree() -> list[psutil.Process]:
    root = psutil.Process()
    return [root, *root.children(recursive=True)]


def _tree_cpu_psutil() -> float:
    """CPU seconds (user + system) of this process and its descendants, by
    psutil (resolution: one clock tick, usually 10 ms, per process)."""
    total = 0.0
    for proc in _tree():
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def _tree_cpu_ns(procs: list[psutil.Process], harness_threads: set[int]) -> int | None:
    """The same, to the nanosecond: the sum of every thread's on-CPU time from
    /proc/PID/task/TID/schedstat (Linux), except the harness's own threads in
    this process (the measuring thread, which sleeps in between, and the
    load sampler). None where that is unavailable."""
    me = os.getpid()
    total = 0
    for proc in procs:
        try:
            for tid in os.listdir(f"/proc/{proc.pid}/task"):
                if proc.pid == me and int(tid) in harness_threads:
                    continue
                with open(f"/proc/{proc.pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # exited meanwhile
        except OSError:
            return None
    return total


def _payload_bytes(fn: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> int:
    """The task's payload: its call pickled as one bytes object
    (sys.getsizeof of cloudpickle.dumps((fn, args, kwargs))). Deliberately
    independent of how procsched represents it inside the dispatcher (split,
    shared or cached): that representation is part of what is measured."""
    return sys.getsizeof(cloudpickle.dumps((fn, args, kwargs or {}), pickle.HIGHEST_PROTOCOL))


def _rss(proc: Any) -> int:
    return int(proc.memory_info().rss)


def run(module: Any, ctx: Context, p: dict[str, Any]) -> ScenarioResult:
    result = ScenarioResult(NAME, TITLE, DESCRIPTION, p, list(METRICS))
    names = [n for n in CONTENDERS if ctx.contenders is None or n in ctx.contenders]
    for size in p["sizes"]:
        for name in names:
            row = label(name, size)
            if not _contenders.available(name):
                result.errors[row] = "not installed"
                continue
            if name.startswith("APScheduler") and size > p["apscheduler_max"]:
                result.notes.append(
                    f"{name} is measured up to {p['apscheduler_max']:,} pending jobs only: its MemoryJobStore "
                    "keeps a sorted Python list (add_job is a list.insert, O(n) per job)."
                )
                continue
            for rep in range(p["reps"]):
                try:
                    metrics = visit(NAME, name, lambda adapter: _measure(adapter, size, p, ctx), ctx, result,
                                    label=f"{size:,} pending: {name} (rep {rep + 1}/{p['reps']})")  # fmt: skip
                except Exception as exc:  # noqa: BLE001
                    log(f"scale: {row} failed: {exc!r}")
                    result.errors[row] = f"{type(exc).__name__}: {exc}"
                    continue
                gc.collect()
                result.reps.setdefault(row, []).append(metrics)
    return result


def _measure(adapter: Any, size: int, p: dict[str, Any], ctx: Context) -> dict[str, Any]:
    me = psutil.Process()
    fn = _tasks.noop
    hour = 3600.0
    gc.collect()
    dispatcher = adapter.dispatcher() if hasattr(adapter, "dispatcher") else None
    disp_before = None if dispatcher is None else _rss(dispatcher)
    user_before = _rss(me)
    if isinstance(adapter, _contenders.ProcschedAdapter):
        s = adapter.s
        schedule = s.schedule
        t0 = time.perf_counter()
        for _ in range(size):
            schedule(fn, hour)
        t1 = time.perf_counter()
        stats = s.stats()  # ordered behind every "add": the dispatcher has them all
        t2 = time.perf_counter()
        if stats["pending"] != size:
            raise RuntimeError(f"dispatcher reports {stats['pending']} pending, expected {size}")
    else:
        due = time.monotonic() + hour
        at = adapter.at
        t0 = time.perf_counter()
        for _ in range(size):
            at(due, fn)
        t1 = time.perf_counter()
        t2 = t1
    gc.collect()
    time.sleep(0.5)  # let the allocator settle
    out: dict[str, Any] = {
        "schedule_us": (t1 - t0) / size * 1e6,
        "ingest_us": (t2 - t0) / size * 1e6 if dispatcher is not None else None,
        "user_bytes": (_rss(me) - user_before) / size,
    }
    if dispatcher is not None:
        payload = _payload_bytes(fn)
        assert disp_before is not None
        per_task = (_rss(dispatcher) - disp_before) / size
        out.update(disp_bytes=per_task, payload_bytes=payload, disp_bytes_net=per_task - payload)
    # idle: nothing is due for an hour
    procs = _tree()
    harness = {threading.get_native_id()}
    if ctx.load is not None and ctx.load.thread_id is not None:
        harness.add(ctx.load.thread_id)
    if ctx.load is not None:
        ctx.load.pause()  # the harness's own /proc sampler is not procsched's idle cost
    try:
        c0 = _tree_cpu_psutil()
        n0 = _tree_cpu_ns(procs, harness)
        time.sleep(p["idle_s"])
        n1 = _tree_cpu_ns(procs, harness)
        c1 = _tree_cpu_psutil()
    finally:
        if ctx.load is not None:
            ctx.load.resume()
    scale = 10 / p["idle_s"]
    out["idle_cpu_psutil_ms"] = (c1 - c0) * 1000 * scale
    out["idle_cpu_ms"] = (n1 - n0) / 1e6 * scale if n0 is not None and n1 is not None else out["idle_cpu_psutil_ms"]
    # schedule() with N pending
    extra = p["extra"]
    if isinstance(adapter, _contenders.ProcschedAdapter):
        schedule = adapter.s.schedule
        t0 = time.perf_counter()
        for _ in range(extra):
            schedule(fn, hour)
        t1 = time.perf_counter()
    else:
        due = time.monotonic() + hour
        t0 = time.perf_counter()
        for _ in range(extra):
            adapter.at(due, fn)
        t1 = time.perf_counter()
    out["schedule_at_n_us"] = (t1 - t0) / extra * 1e6
    t0 = time.perf_counter()
    adapter.close()
    out["shutdown_s"] = time.perf_counter() - t0
    adapter.closed_by_measure = True
    return out


def targets(result: ScenarioResult) -> list[Target]:
    sizes = result.params["sizes"]
    n = 100_000 if 100_000 in sizes else sizes[0]
    row = label("procsched[processes]", n)
    return [
        Target(f"idle CPU with {n:,} pending (whole process tree)", result.median(row, "idle_cpu_ms"), "<=", 1.0, "ms/10 s"),
        Target(f"dispatcher bytes per pending task, without its payload ({n:,} pending)",
               result.median(row, "disp_bytes_net"), "<=", 400, "B"),
        Target(f"schedule() with {n:,} pending", result.median(row, "schedule_at_n_us"), "<=", 20, "µs"),
    ]  # fmt: skip


def plot(result: ScenarioResult, path: str) -> None:
    plt = pyplot()
    rows = list(result.reps)
    payload = max((result.median(r, "payload_bytes") or 0 for r in rows), default=0)
    panels = [
        ("schedule_at_n_us", "schedule() at N pending [µs/call]", 20, "target 20 µs"),
        (
            "disp_bytes",
            "dispatcher memory [B/pending task]",
            400 + payload,
            f"target 400 B + payload ({payload:.0f} B)",
        ),
        ("idle_cpu_ms", "idle CPU, whole process tree [ms per 10 s]", 1, "target 1 ms"),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.8))
    for ax, (key, title, target, target_label) in zip(axes, panels):
        names = [r for r in rows if result.median(r, key) is not None]
        values = [float(result.median(r, key) or 0) for r in names]
        bars = ax.bar(range(len(names)), values, color=[_colour(r.split(" @ ")[0]) for r in names])
        for bar, value in zip(bars, values):
            ax.annotate(f"{value:.3g}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                        va="bottom", fontsize=8)  # fmt: skip
        ax.axhline(target, color="#d62728", ls="--", lw=1, label=target_label)
        ax.set_ylim(0, max([target, *values]) * 1.25)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("scale: N one-shot tasks pending (lower is better; dashed: procsched's target)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
