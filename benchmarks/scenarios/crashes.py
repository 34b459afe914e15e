"""Crashes: tasks that kill their worker, among well-behaved ones."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable

from .. import _contenders, _tasks
from .._harness import Metric, ScenarioResult, Target, pyplot, _colour

NAME = "crashes"
TITLE = "worker crashes"
DESCRIPTION = (
    "workers=2, with `cpu_load` other processes spinning on the CPU all along (a second process's "
    "load: issue 25's targets hold under it). (1) Submit 10 normal tasks (sleep `normal_ms`, return "
    "their index), a task that segfaults (ctypes.string_at(0)), 5 normal, one that calls os._exit(1), "
    "5 normal; wait up to `wait_s`. lost = normal tasks without their correct result. (2) On the idle "
    "pool, one more segfault; right after it, `workers` probes that each hold a worker for `hold_ms`. "
    "detect = fault (time.monotonic() written to a file just before the fault) -> the crashed task's "
    "handle fails, as the pool's own completion hook reports it in this process (Future.add_done_callback; "
    "Pool.apply_async's error_callback): the median and the worst of the crashes that ran, per repetition "
    "(in a pool that breaks, later crash tasks never run). pool whole = fault -> the last probe starts, "
    "with the probes on `workers` distinct live processes. (3) later OK = 20 more normal tasks that "
    "succeed. In-process pools (threads) run the mix in a child process, since the fault kills the whole "
    "process."
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
        "full": {"normal_ms": 20, "hold_ms": 300, "wait_s": 5.0, "cpu_load": 1, "reps": 5},
        "quick": {"normal_ms": 20, "hold_ms": 300, "wait_s": 2.0, "cpu_load": 1, "reps": 1},
        "tiny": {"normal_ms": 5, "hold_ms": 100, "wait_s": 2.0, "cpu_load": 1, "reps": 1},
    }[mode]


class Tracked:
    """One submitted task: when and how it ended, from its pool's own
    completion hook (or the refusal its submit raised); ``then(outcome)``,
    if given, is told too."""

    def __init__(self, then: Callable[[_contenders.Outcome], None] | None = None) -> None:
        self.ended = threading.Event()
        self.outcome: _contenders.Outcome | None = None
        self.at: float | None = None
        self.then = then

    def finish(self, outcome: _contenders.Outcome) -> None:
        if self.outcome is None:
            self.at, self.outcome = time.monotonic(), outcome
            self.ended.set()
            if self.then is not None:
                self.then(outcome)

    def ok(self, value: Any) -> bool:
        return self.outcome is not None and self.outcome.error is None and self.outcome.value == value

    def what(self) -> str:
        if self.outcome is None:
            return "never resolves"
        return "ok" if self.outcome.error is None else type(self.outcome.error).__name__


def _wait(tracked: list[Tracked], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for t in tracked:
        t.ended.wait(max(0.0, deadline - time.monotonic()))


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


def _submit(adapter: Any, fn: Any, *args: Any, then: Callable[[_contenders.Outcome], None] | None = None) -> Tracked:
    t = Tracked(then)
    try:
        adapter.submit_then(fn, args, t.finish)
    except BaseException as exc:  # noqa: BLE001 - a broken pool refuses at the call
        t.finish(_contenders.Outcome(None, exc))
    return t


def _detection(t: Tracked, path: str) -> list[float | None]:
    """[] if the crash task never ran (a broken pool failed it first);
    [ms from the fault to its handle failing], or [None] if it never did."""
    fault = _fault_time(path, 0.05)
    if fault is None:
        return []
    if t.outcome is not None and t.outcome.error is not None and t.at is not None:
        return [(t.at - fault) * 1000]
    return [None]


class _CpuLoad:
    """``n`` processes spinning on the CPU (a busy loop each), started and
    spinning before the measurement, killed after it."""

    def __init__(self, n: int) -> None:
        code = "import sys\nprint('spinning', flush=True)\nwhile True:\n    pass\n"
        self.procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE) for _ in range(n)]
        for proc in self.procs:
            proc.stdout.readline()  # type: ignore[union-attr]

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()
            proc.stdout.close()  # type: ignore[union-attr]


def measure(adapter: Any, p: dict[str, Any]) -> dict[str, Any]:
    if _contenders.kind(adapter.name) != "processes":
        return _in_child(adapter.name, p)
    tmp = tempfile.mkdtemp(prefix="bench-crash-")
    load = _CpuLoad(p["cpu_load"])
    try:
        return _measure(adapter, p, tmp)
    finally:
        load.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _mix(
    adapter: Any, p: dict[str, Any], tmp: str, report: Callable[[int, _contenders.Outcome], None] | None = None
) -> dict[str, Tracked]:
    """The mix of (1); ``report(i, outcome)`` is told as each normal task ends."""
    s = p["normal_ms"] / 1000
    tracked: dict[str, Tracked] = {}

    def normal(i: int) -> None:
        then = None if report is None else functools.partial(report, i)
        tracked[f"n{i}"] = _submit(adapter, _tasks.sleeper, s, i, then=then)

    for i in range(10):
        normal(i)
    tracked["segv"] = _submit(adapter, _tasks.segfault, os.path.join(tmp, "segv"))
    for i in range(10, 15):
        normal(i)
    tracked["exit"] = _submit(adapter, _tasks.hard_exit, os.path.join(tmp, "exit"))
    for i in range(15, 20):
        normal(i)
    return tracked


def _measure(adapter: Any, p: dict[str, Any], tmp: str) -> dict[str, Any]:
    wait_s = p["wait_s"]
    # (1) the mix
    mix = _mix(adapter, p, tmp)
    _wait(list(mix.values()), wait_s)
    lost = sum(1 for i in range(20) if not mix[f"n{i}"].ok(i))
    detections: list[float | None] = []  # one per crash that happened; None: never reported
    for key in ("segv", "exit"):
        detections += _detection(mix[key], os.path.join(tmp, key))
    what = {mix["segv"].what(), mix["exit"].what()}
    # (2) one crash on the idle pool, then probes
    time.sleep(0.1)  # let the pool settle (pebble, multiprocessing.Pool replace workers lazily)
    path = os.path.join(tmp, "segv2")
    crash = _submit(adapter, _tasks.segfault, path)
    fault = _fault_time(path, wait_s)
    hold = p["hold_ms"] / 1000
    probes = [_submit(adapter, _tasks.probe, hold) for _ in range(adapter.workers)]
    _wait([crash, *probes], wait_s + hold)
    detections += _detection(crash, path)
    ok_probes = [t.outcome.value for t in probes if t.outcome is not None and t.outcome.error is None]
    if (
        fault is not None
        and len(ok_probes) == adapter.workers
        and len({pid for pid, _ in ok_probes}) == adapter.workers
    ):
        whole: Any = (max(start for _, start in ok_probes) - fault) * 1000
    else:
        whole = "never" if not ok_probes else f"not within {wait_s:g} s"
    # (3) later submissions
    later = [_submit(adapter, _tasks.sleeper, p["normal_ms"] / 1000, i) for i in range(20)]
    _wait(later, wait_s)
    later_ok = sum(1 for i, t in enumerate(later) if t.ok(i))
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
    tmp = tempfile.mkdtemp(prefix="bench-crash-")  # (made and removed here: the child dies with its tasks)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.scenarios.crashes", name, str(p["workers"]), str(p["normal_ms"]), tmp],
            capture_output=True, text=True, timeout=60, env=env, cwd=root,
        )  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
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


def _child(name: str, workers: int, normal_ms: int, tmp: str) -> None:
    adapter = _contenders.make(name, workers)
    adapter.start()

    def report(i: int, outcome: _contenders.Outcome) -> None:
        if outcome.error is None:
            os.write(1, f"ok {i}\n".encode())  # one write() per line: the pool's threads report concurrently

    mix = _mix(adapter, {"normal_ms": normal_ms}, tmp, report)
    _wait(list(mix.values()), 10)
    os.write(1, b"survived\n")
    os._exit(0)


def targets(result: ScenarioResult) -> list[Target]:
    ours = "procsched[processes]"
    reps = result.reps.get(ours, [])
    lost = max((r["lost"] for r in reps), default=None)
    later = min((r["later_ok"] for r in reps), default=None)
    n = result.params.get("cpu_load", 0)
    load = f"under {n} other process{'es' if n != 1 else ''} spinning on the CPU" if n else "no other load"
    return [
        Target("crashes: normal tasks lost (worst repetition)", lost, "<=", 0, "of 20"),
        Target(
            "crashes: time to detect, death -> the handle fails (median)",
            result.median(ours, "detect_p50_ms"),
            "<=",
            5,
            "ms",
            note=load,
        ),
        Target("crashes: pool whole again", result.median(ours, "whole_ms"), "<=", 50, "ms", note=load),
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
    _child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
