"""Crashes: tasks that kill their worker, among well-behaved ones."""

from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from .. import _contenders, _tasks
from .._harness import Metric, ScenarioResult, Target, pyplot, _colour

NAME = "crashes"
TITLE = "worker crashes"
DESCRIPTION = (
    "workers=2. (1) Submit 10 normal tasks (sleep `normal_ms`, return their index), a task that "
    "segfaults (ctypes.string_at(0)), 5 normal, one that calls os._exit(1), 5 normal; wait up to "
    "`wait_s`. lost = normal tasks without their correct result. (2) On the idle pool, one more "
    "segfault; right after it, `workers` probes that each hold a worker for `hold_ms`. "
    "detect = fault (time.monotonic() written to a file just before the fault) -> the crashed "
    "task's future fails (done-callback time, in this process): the median and the worst of the crashes that ran, per repetition "
    "(in a pool that breaks, later crash tasks never run). "
    "pool whole = fault -> the last probe starts, with the probes on `workers` distinct live "
    "processes. (3) later OK = 20 more normal tasks that succeed. In-process pools (threads) "
    "run the mix in a child process, since the fault kills the whole process."
)
CONTENDERS = [
    "procsched[processes]", "procsched[threads]", "procsched[ray]", "ProcessPoolExecutor", "ThreadPoolExecutor",
    "multiprocessing.Pool", "loky", "pebble", "APScheduler3[process]",
]  # fmt: skip
METRICS = [
    Metric("lost", "normal lost", "of 20", "lower", "d"),
    Metric("crashes_reported", "crashes reported", "of those run", None, "s", ratio=False),
    Metric("detect_p50_ms", "detect (median)", "ms", "lower", ".3g"),
    Metric("detect_ms", "detect (worst)", "ms", "lower", ".3g"),
    Metric("whole_ms", "pool whole", "ms", "lower", ".3g"),
    Metric("later_ok", "later OK", "of 20", "higher", "d"),
    Metric("what", "what the caller sees", "", None, "s"),
]


def params(mode: str) -> dict[str, Any]:
    return {
        "full": {"normal_ms": 20, "hold_ms": 300, "wait_s": 5.0, "reps": 5},
        "quick": {"normal_ms": 20, "hold_ms": 300, "wait_s": 2.0, "reps": 1},
        "tiny": {"normal_ms": 5, "hold_ms": 100, "wait_s": 2.0, "reps": 1},
    }[mode]


def _when_done(futures: dict[str, concurrent.futures.Future[Any]]) -> dict[str, float]:
    done_at: dict[str, float] = {}
    for key, f in futures.items():

        def note(_f: concurrent.futures.Future[Any], k: str = key) -> None:
            done_at.setdefault(k, time.monotonic())

        f.add_done_callback(note)
    return done_at


def _fault_time(path: str, timeout: float) -> float | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                text = f.read()
            if text:
                return float(text)
        except (OSError, ValueError):
            pass
        time.sleep(0.0005)
    return None


def _submit(adapter: Any, fn: Any, *args: Any) -> concurrent.futures.Future[Any]:
    try:
        return adapter.submit(fn, *args)
    except BaseException as exc:  # noqa: BLE001 - a broken pool refuses at the call
        f: concurrent.futures.Future[Any] = concurrent.futures.Future()
        f.set_exception(exc)
        return f


def _detection(f: concurrent.futures.Future[Any], done_at: float | None, path: str) -> list[float | None]:
    """[] if the crash task never ran (a broken pool failed it first);
    [ms from the fault to the future failing], or [None] if it never did."""
    fault = _fault_time(path, 0.05)
    if fault is None:
        return []
    if f.done() and f.exception() is not None and done_at is not None:
        return [(done_at - fault) * 1000]
    return [None]


def _error_name(f: concurrent.futures.Future[Any]) -> str:
    if not f.done():
        return "never resolves"
    exc = f.exception()
    return "ok" if exc is None else type(exc).__name__


def measure(adapter: Any, p: dict[str, Any]) -> dict[str, Any]:
    if _contenders.kind(adapter.name) != "processes":
        return _in_child(adapter.name, p)
    tmp = tempfile.mkdtemp(prefix="bench-crash-")
    try:
        return _measure(adapter, p, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _mix(adapter: Any, p: dict[str, Any], tmp: str) -> tuple[dict[str, concurrent.futures.Future[Any]], dict[str, float]]:
    s = p["normal_ms"] / 1000
    futures: dict[str, concurrent.futures.Future[Any]] = {}
    for i in range(10):
        futures[f"n{i}"] = _submit(adapter, _tasks.sleeper, s, i)
    futures["segv"] = _submit(adapter, _tasks.segfault, os.path.join(tmp, "segv"))
    for i in range(10, 15):
        futures[f"n{i}"] = _submit(adapter, _tasks.sleeper, s, i)
    futures["exit"] = _submit(adapter, _tasks.hard_exit, os.path.join(tmp, "exit"))
    for i in range(15, 20):
        futures[f"n{i}"] = _submit(adapter, _tasks.sleeper, s, i)
    return futures, _when_done(futures)


def _measure(adapter: Any, p: dict[str, Any], tmp: str) -> dict[str, Any]:
    wait_s = p["wait_s"]
    # (1) the mix
    futures, done_at = _mix(adapter, p, tmp)
    concurrent.futures.wait(list(futures.values()), timeout=wait_s)
    lost = 0
    for i in range(20):
        f = futures[f"n{i}"]
        if not f.done() or f.exception() is not None or f.result() != i:
            lost += 1
    detections: list[float | None] = []  # one per crash that happened; None: never reported
    for key in ("segv", "exit"):
        detections += _detection(futures[key], done_at.get(key), os.path.join(tmp, key))
    what = {_error_name(futures["segv"]), _error_name(futures["exit"])}
    # (2) one crash on the idle pool, then probes
    time.sleep(0.1)  # let the pool settle (pebble, multiprocessing.Pool replace workers lazily)
    path = os.path.join(tmp, "segv2")
    crash = _submit(adapter, _tasks.segfault, path)
    crash_done = _when_done({"c": crash})
    fault = _fault_time(path, wait_s)
    hold = p["hold_ms"] / 1000
    probes = [_submit(adapter, _tasks.probe, hold) for _ in range(adapter.workers)]
    concurrent.futures.wait([crash, *probes], timeout=wait_s + hold)
    detections += _detection(crash, crash_done.get("c"), path)
    ok_probes = [f.result() for f in probes if f.done() and f.exception() is None]
    if fault is not None and len(ok_probes) == adapter.workers and len({pid for pid, _ in ok_probes}) == adapter.workers:
        whole: Any = (max(start for _, start in ok_probes) - fault) * 1000
    else:
        whole = "never" if not ok_probes else f"not within {wait_s:g} s"
    # (3) later submissions
    later = [_submit(adapter, _tasks.sleeper, p["normal_ms"] / 1000, i) for i in range(20)]
    concurrent.futures.wait(later, timeout=wait_s)
    later_ok = sum(1 for i, f in enumerate(later) if f.done() and f.exception() is None and f.result() == i)
    never = sum(d is None for d in detections)
    if never:
        detect: Any = "never" if never == len(detections) else f"{never} of {len(detections)} never"
    else:
        detect = max(detections)  # type: ignore[type-var]
    seen = sorted(d for d in detections if d is not None)
    detect_p50: Any = seen[len(seen) // 2] if seen else "never"
    return {
        "lost": lost,
        "crashes_reported": f"{len(detections) - never} of {len(detections)}",
        "detect_p50_ms": detect_p50,
        "detect_ms": detect,
        "whole_ms": whole,
        "later_ok": later_ok,
        "what": " / ".join(sorted(what)),
        "_samples": {"detections_ms": detections},
    }


# -- in-process pools: the fault takes the process down; watch it from outside -------------


def _in_child(name: str, p: dict[str, Any]) -> dict[str, Any]:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.scenarios.crashes", name, str(p["workers"]), str(p["normal_ms"])],
        capture_output=True, text=True, timeout=60, env=env, cwd=root,
    )  # fmt: skip
    ok = {int(i) for i in re.findall(r"ok (\d+)\n", proc.stdout)}
    code = proc.returncode
    how = f"signal {-code}" if code < 0 else f"exit code {code}"
    return {
        "lost": 20 - len(ok),
        "crashes_reported": "0 of 1",
        "detect_p50_ms": "process died",
        "detect_ms": "process died",
        "whole_ms": "never",
        "later_ok": 0,
        "what": f"the whole process dies ({how})",
    }


def _child(name: str, workers: int, normal_ms: int) -> None:
    adapter = _contenders.make(name, workers)
    adapter.start()
    tmp = tempfile.mkdtemp(prefix="bench-crash-")
    futures, _ = _mix(adapter, {"normal_ms": normal_ms}, tmp)
    for i in range(20):
        def report(f: concurrent.futures.Future[Any], i: int = i) -> None:
            if f.exception() is None:
                os.write(1, f"ok {i}\n".encode())  # one write() per line: the pool's threads report concurrently

        futures[f"n{i}"].add_done_callback(report)
    concurrent.futures.wait(list(futures.values()), timeout=10)
    os.write(1, b"survived\n")
    os._exit(0)


def targets(result: ScenarioResult) -> list[Target]:
    ours = "procsched[processes]"
    reps = result.reps.get(ours, [])
    lost = max((r["lost"] for r in reps), default=None)
    later = min((r["later_ok"] for r in reps), default=None)
    return [
        Target("crashes: normal tasks lost (worst repetition)", lost, "<=", 0, "of 20"),
        Target("crashes: time to detect, death -> the handle fails (median)", result.median(ours, "detect_p50_ms"), "<=", 5, "ms"),
        Target("crashes: pool whole again", result.median(ours, "whole_ms"), "<=", 50, "ms"),
        Target("crashes: later submissions OK (worst repetition)", later, ">=", 20, "of 20"),
    ]


def plot(result: ScenarioResult, path: str) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, key, title in ((axes[0], "detect_ms", "crash -> future failed [ms] (worst per rep)"),
                           (axes[1], "whole_ms", "crash -> pool whole again [ms]")):  # fmt: skip
        names, values, labels = [], [], []
        for name in result.reps:
            s = result.summary(name)[key]
            names.append(name)
            if "median" in s:
                values.append(s["median"])
                labels.append(f"{s['median']:.3g}")
            else:
                values.append(0)
                labels.append(", ".join(s.get("text", ["-"])))
        bars = ax.bar(range(len(names)), values, color=[_colour(n) for n in names])
        for bar, text in zip(bars, labels):
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                        fontsize=7, rotation=90 if len(text) > 6 else 0)  # fmt: skip
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=7)
        ax.set_yscale("symlog", linthresh=1)
        ax.set_title(title, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("crashes (lower is better; labels: median, or what happened instead)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
