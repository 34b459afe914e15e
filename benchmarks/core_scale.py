"""How SchedulerCore scales, next to a bare heapq doing the least possible.

    python -m benchmarks.core_scale                 # 1,000,000 one-shot tasks
    python -m benchmarks.core_scale --pairs 10000000  # schedule/cancel pairs: RSS stays flat?

Main mode: schedule N one-shot tasks at pseudo-random due times (integer ns,
a manual "now"), cancel every 10th, then run the rest as a runner would:
jump to ``next_deadline()``, ``claim`` everything due, ``complete`` each run.
Two baselines, each a bare ``heapq`` of ``(due, seq, id)`` int tuples, with
the same due times, the same cancels and the same process settings:

- ``bare heapq``: push; cancel = ``cancelled.add(id)`` (a set that only ever
  holds the cancelled ids, 100,000 here); pop, skipping ids in that set. Its
  cancel cannot say whether the id was pending (unknown, already run and
  already cancelled ids are all "cancelled"), so it never looks at the
  million pending entries.
- ``bare heapq+live`` (shown beside, not the target's peer): the same
  heap plus the set of pending ids, the least a lazy-deletion heap needs for
  a cancel that answers as ``SchedulerCore.cancel`` does (True only for a
  pending task): push = heappush + ``live.add(id)``; cancel = ``if id in
  live: live.remove(id)`` (one lookup among the million pending ids: the
  state check); pop skips ids not in ``live`` and removes the ones it runs.
  The core's cancel does that lookup too, in its dict of a million task
  records, then reads and writes the record's state and frees it.

Each contender runs in a fresh interpreter, so its RSS delta (psutil, after
``gc.collect()``) is its own: bytes per pending task = RSS growth while
scheduling / N. The due times and the id list are allocated before the
baseline RSS is read, so neither side is charged for them. ``--repeat`` runs
each contender that many times, interleaved (bare, core, core, ...,
bare, core, ...) so that a change in machine load hits every side, and
reports the median. Times are CPU time (``time.process_time_ns``).

The first table runs with the cyclic GC on, as in real use, for both sides;
it is the one the targets are checked against. The second (``--gc on,off``,
the default) runs with the GC off, for both sides: the difference is what
CPython's collector costs for a million long-lived task records, which a
bare heap of int tuples never pays (the GC untracks tuples of atoms).
With the GC on, ``core[...]+freeze`` is the core as the processes runner's
dispatcher runs it: with its GC policy (``procsched/_runtime/_gc.py``:
from 20,000 pending tasks up, ``gc.freeze()`` after each 64 of growth),
called every 64 adds as the dispatcher calls it after each batch of commands.

Pairs mode: N x (add one task, cancel it) on one core, sampling RSS 20
times; with lazy deletion plus compaction the heap and the RSS stay flat.

Targets (issue 13): each op within 3x the bare heap (``bare heapq``, the
issue's "bare heapq of int tuples"), and at most 400 bytes per pending task.
They are checked on the ``core[...]+freeze`` rows, the core as the
dispatcher runs it (every task of a ``Scheduler`` lives in its dispatcher
process); the plain ``core[...]`` rows (the collector as CPython sets it,
as in an in-process runner, whose process is the user's) are shown beside,
marked "not checked". The ``+live`` column says how much of the gap is the
membership check that a cancel answering True/False needs; it does not move
the bar. ``--check`` exits 1 when a checked target is missed.

The machine's other processes are measured while each child runs
(``benchmarks/_load.py``): a busy machine slows the sides unequally (the
core's bigger working set suffers more from a neighbour's cache traffic),
so the table gives their CPU share, and each row its range over the
repeats; re-run when it is high.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import itertools
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
TARGET_RATIO = 3.0
TARGET_BYTES = 400
HORIZON_NS = 1_000 * 1_000_000_000  # due times spread over 1000 s
CANCEL_EVERY = 10  # cancel 10%
BATCH = 64  # adds between two calls of the dispatcher's GC policy (core+freeze)
LIVE = "bare heapq+live"  # shown beside the target's peer (see above)


def cpu_ns() -> int:
    """CPU time of this process: steadier than wall time on a shared machine,
    and the same thing for this single-threaded, CPU-bound code."""
    return time.process_time_ns()


def rss() -> int:
    gc.collect()
    return int(psutil.Process().memory_info().rss)


def due_times(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(HORIZON_NS) for _ in range(n)]


# -- children: one measurement each, in a fresh interpreter -------------------------


def _bare_figures(n: int, cancelled: int, runs: int, t: tuple[int, ...], grown: int) -> dict[str, Any]:
    """A bare heap child's figures from its six clock readings (schedule,
    cancel and run phases) and its RSS growth while scheduling."""
    return {
        "schedule_us": (t[1] - t[0]) / n / 1e3,
        "cancel_us": (t[3] - t[2]) / cancelled / 1e3,
        "run_us": (t[5] - t[4]) / runs / 1e3,
        "bytes": grown / n,
        "runs": runs,
        "cancelled": cancelled,
    }


def child_bare_live(n: int, seed: int) -> dict[str, Any]:
    """The bare heap plus the set of pending ids: a cancel that answers."""
    dues = due_times(n, seed)
    ids = [0] * n
    heappush, heappop = heapq.heappush, heapq.heappop
    counter = itertools.count(1)
    rss0 = rss()

    heap: list[tuple[int, int, int]] = []
    live: set[int] = set()
    add = live.add
    t0 = cpu_ns()
    for i in range(n):
        tid = next(counter)
        heappush(heap, (dues[i], tid, tid))
        add(tid)
        ids[i] = tid
    t1 = cpu_ns()
    rss1 = rss()

    victims = ids[::CANCEL_EVERY]
    accepted = 0
    remove = live.remove
    t2 = cpu_ns()
    for tid in victims:
        if tid in live:
            remove(tid)
            accepted += 1
    t3 = cpu_ns()
    assert accepted == len(victims)

    runs = 0
    t4 = cpu_ns()
    while heap:
        _due, _seq, tid = heappop(heap)
        if tid not in live:
            continue
        remove(tid)
        runs += 1
    t5 = cpu_ns()
    return _bare_figures(n, len(victims), runs, (t0, t1, t2, t3, t4, t5), rss1 - rss0)


def child_bare(n: int, seed: int) -> dict[str, Any]:
    dues = due_times(n, seed)
    ids = [0] * n
    heappush, heappop = heapq.heappush, heapq.heappop
    counter = itertools.count(1)
    rss0 = rss()

    heap: list[tuple[int, int, int]] = []
    t0 = cpu_ns()
    for i in range(n):
        tid = next(counter)
        heappush(heap, (dues[i], tid, tid))
        ids[i] = tid
    t1 = cpu_ns()
    rss1 = rss()

    victims = ids[::CANCEL_EVERY]
    cancelled: set[int] = set()
    t2 = cpu_ns()
    for tid in victims:
        cancelled.add(tid)
    t3 = cpu_ns()

    runs = 0
    t4 = cpu_ns()
    while heap:
        _due, _seq, tid = heappop(heap)
        if tid in cancelled:
            continue
        runs += 1
    t5 = cpu_ns()
    return _bare_figures(n, len(victims), runs, (t0, t1, t2, t3, t4, t5), rss1 - rss0)


def child_core(n: int, seed: int, policy: str, freeze: bool = False) -> dict[str, Any]:
    """The core alone; with ``freeze``, plus the dispatcher's GC policy
    (``_runtime/_gc.py``), applied as the dispatcher does: after each batch
    of adds (here every BATCH adds; the dispatcher reads ~50 per batch)."""
    from procsched._core import SchedulerCore
    from procsched._runtime._gc import FreezeOnGrowth

    dues = due_times(n, seed)
    ids = [0] * n
    rss0 = rss()

    core = SchedulerCore(policy)
    add = core.add
    policy_hook = FreezeOnGrowth() if freeze else None
    t0 = cpu_ns()
    if policy_hook is None:
        for i in range(n):
            ids[i] = add(dues[i])
    else:
        for start in range(0, n, BATCH):
            for i in range(start, min(n, start + BATCH)):
                ids[i] = add(dues[i])
            policy_hook(len(core))
    t1 = cpu_ns()
    rss1 = rss()
    assert len(core) == n

    victims = ids[::CANCEL_EVERY]
    cancel = core.cancel
    t2 = cpu_ns()
    for tid in victims:
        cancel(tid)
    t3 = cpu_ns()
    heap_after_cancel = len(core._timers) + len(core._ready)

    runs = 0
    next_deadline, claim, complete = core.next_deadline, core.claim, core.complete
    t4 = cpu_ns()
    while (now := next_deadline()) is not None:
        while (run := claim(now)) is not None:
            complete(run.task_id, run.run, "ok", now)
            runs += 1
    t5 = cpu_ns()
    assert runs == n - len(victims) and len(core) == 0
    return {
        "schedule_us": (t1 - t0) / n / 1e3,
        "cancel_us": (t3 - t2) / len(victims) / 1e3,
        "run_us": (t5 - t4) / runs / 1e3,
        "bytes": (rss1 - rss0) / n,
        "runs": runs,
        "cancelled": len(victims),
        "heap_after_cancel": heap_after_cancel,
    }


def child_pairs(n: int, policy: str, samples: int = 20) -> dict[str, Any]:
    from procsched._core import SchedulerCore

    core = SchedulerCore(policy)
    add, cancel = core.add, core.cancel
    # a few live tasks, so the heap is never trivially empty
    for i in range(1000):
        add(HORIZON_NS + i)
    rss_samples = [rss()]
    heap_max = 0
    chunk = max(1, n // samples)
    done = 0
    elapsed = 0
    while done < n:
        step = min(chunk, n - done)
        t0 = cpu_ns()
        for i in range(done, done + step):
            cancel(add(i % 1_000_000))
        elapsed += cpu_ns() - t0
        done += step
        heap_max = max(heap_max, len(core._timers) + len(core._ready))
        rss_samples.append(rss())
    return {
        "pairs": n,
        "pair_us": elapsed / n / 1e3,
        "rss_start": rss_samples[0],
        "rss_min": min(rss_samples),
        "rss_max": max(rss_samples),
        "rss_end": rss_samples[-1],
        "heap_max_sampled": heap_max,
        "live": len(core),
    }


# -- parent: run the children, print the table ----------------------------------------


def run_child(*args: str, gc_mode: str = "on", load: Any = None) -> dict[str, Any]:
    """One child's figures, plus ``foreign``: the CPU share of the machine
    that other processes took while it ran (None where not measurable)."""
    cmd = [sys.executable, "-m", "benchmarks.core_scale", "--gc", gc_mode, "--child", *args]
    s0, t0 = (load.sample(), time.monotonic()) if load is not None else (0.0, 0.0)
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    foreign = load.share_since(s0, t0) if load is not None else None
    if out.returncode != 0:
        raise SystemExit(f"child {args} failed:\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    result["foreign"] = foreign
    return result


KEYS = ("schedule_us", "cancel_us", "run_us", "bytes")


def median_of(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each figure, and its range (``<key>_range``: min, max)."""
    merged = dict(results[0])
    for key in KEYS:
        values = [r[key] for r in results]
        merged[key] = statistics.median(values)
        merged[key + "_range"] = (min(values), max(values))
    return merged


def main_mode(n: int, seed: int, policies: list[str], repeat: int, gc_modes: list[str]) -> dict[str, Any]:
    from benchmarks._load import ForeignLoad

    print(f"# SchedulerCore vs bare heapq: {n:,} one-shot tasks, cancel {100 // CANCEL_EVERY}%, "
          f"median of {repeat}, Python {sys.version.split()[0]}", flush=True)  # fmt: skip
    report: dict[str, Any] = {"n": n, "repeat": repeat}
    load = ForeignLoad()
    try:
        for gc_mode in gc_modes:
            print(f"\n## cyclic GC {gc_mode}" + (" (targets checked here)" if gc_mode == "on" else "") + "\n")
            report[f"gc_{gc_mode}"] = one_table(n, seed, policies, repeat, gc_mode, load if load.available else None)
    finally:
        load.stop()
    report["missed"] = report.get("gc_on", {}).get("missed")
    return report


def checked(name: str) -> bool:
    """Whether the targets are checked on this contender's row: the core as
    the dispatcher runs it (see the module docstring)."""
    return name.endswith("+freeze")


def one_table(n: int, seed: int, policies: list[str], repeat: int, gc_mode: str, load: Any) -> dict[str, Any]:
    contenders = [("bare heapq", ["bare"]), (LIVE, ["bare+live"])]
    contenders += [(f"core[{p}]", ["core", "--policy", p]) for p in policies]
    if gc_mode == "on":  # the core as the dispatcher runs it: with its GC policy (procsched/_runtime/_gc.py)
        contenders += [(f"core[{p}]+freeze", ["core+freeze", "--policy", p]) for p in policies]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in contenders}
    for _ in range(repeat):
        for name, args in contenders:
            runs[name].append(run_child(*args, "-n", str(n), "--seed", str(seed), gc_mode=gc_mode, load=load))
            print(f"  gc {gc_mode} {name}: {runs[name][-1]}", file=sys.stderr, flush=True)
    results = {name: median_of(r) for name, r in runs.items()}
    bare, live = results["bare heapq"], results[LIVE]
    cores = [name for name in results if name not in ("bare heapq", LIVE)]
    rows = [
        ("schedule", "µs/op", "schedule_us"),
        ("cancel", "µs/op", "cancel_us"),
        ("run (claim + complete)", "µs/op", "run_us"),
        ("memory", "bytes/pending task", "bytes"),
    ]
    header = ["measure", "unit", "bare heapq", LIVE]
    for name in cores:
        header += [name, "ratio", "vs +live"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, unit, key in rows:
        cells = [label, unit, f"{bare[key]:.3g}", f"{live[key]:.3g}"]
        for name in cores:
            res = results[name]
            cells += [f"{res[key]:.3g}", f"{res[key] / bare[key]:.2f}x", f"{res[key] / live[key]:.2f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    print("\n".join(lines), flush=True)

    # The spread: each figure's range over the repeats, and each round's
    # ratio (a core run against the bare run of the same round, which ran
    # just before it: a change of load between rounds hits both).
    print(f"\nRange over the {repeat} repeats (min - max):\n")
    print("| measure | " + " | ".join(["bare heapq", LIVE, *cores]) + " |")
    print("|" + "---|" * (len(cores) + 3))
    for label, _unit, key in rows:
        spans = [results[name][key + "_range"] for name in ("bare heapq", LIVE, *cores)]
        print(f"| {label} | " + " | ".join(f"{lo:.3g} - {hi:.3g}" for lo, hi in spans) + " |")
    round_ratios = {
        (name, key): [c[key] / b[key] for c, b in zip(runs[name], runs["bare heapq"], strict=True)]
        for name in cores
        for _label, _unit, key in rows
    }
    shares = [r["foreign"] for rs in runs.values() for r in rs if r.get("foreign") is not None]
    if shares:
        print(f"\nOther processes' CPU share of the machine while the children ran: median "
              f"{statistics.median(shares):.0%}, range {min(shares):.0%} - {max(shares):.0%}"
              + (" (busy: re-run for figures to quote)" if statistics.median(shares) > 0.10 else ""))  # fmt: skip

    if gc_mode != "on":
        return {"results": results, "missed": None}
    # The verdict, one line per target and core row.
    print(f"\nTargets: each op <= {TARGET_RATIO:g}x bare heapq (ratio of the medians), <= {TARGET_BYTES} bytes "
          f"per pending task; checked on the +freeze rows (the dispatcher's GC policy, see the module docstring).\n")  # fmt: skip
    print("| row | measure | measured | per round | bar | verdict |\n|---|---|---|---|---|---|")
    misses = []
    for name in cores:
        for label, _unit, key in rows:
            res = results[name]
            if key == "bytes":
                value, bar, ok = f"{res[key]:.0f} B", f"<= {TARGET_BYTES} B", res[key] <= TARGET_BYTES
            else:
                ratio = res[key] / bare[key]
                value, bar, ok = f"{ratio:.2f}x", f"<= {TARGET_RATIO:g}x", ratio <= TARGET_RATIO
            if key == "bytes":
                lo, hi = res[key + "_range"]
                spread = f"{lo:.0f} - {hi:.0f} B"
            else:
                per_round = round_ratios[(name, key)]
                spread = f"{min(per_round):.2f}x - {max(per_round):.2f}x"
            verdict = ("PASS" if ok else "MISS") if checked(name) else "not checked" + ("" if ok else " (over)")
            print(f"| {name} | {label} | {value} | {spread} | {bar} | {verdict} |")
            if checked(name) and not ok:
                misses.append(f"{name} {label}: {value}, bar {bar}")
    print(
        "\nAll checked targets met." if not misses else "\nMISSED:\n" + "\n".join(f"- {m}" for m in misses), flush=True
    )
    return {"results": results, "missed": misses}


def pairs_mode(n: int, policy: str) -> dict[str, Any]:  # always with the GC on
    print(f"# SchedulerCore[{policy}]: {n:,} schedule/cancel pairs, 1,000 live tasks\n", flush=True)
    res = run_child("pairs", "--policy", policy, "-n", str(n))
    mib = 1024 * 1024
    growth = res["rss_end"] - res["rss_start"]
    print("| measure | value |\n|---|---|")
    print(f"| µs per pair (add + cancel) | {res['pair_us']:.3g} |")
    print(f"| RSS at start | {res['rss_start'] / mib:.1f} MiB |")
    print(f"| RSS min / max over 20 samples | {res['rss_min'] / mib:.1f} / {res['rss_max'] / mib:.1f} MiB |")
    print(f"| RSS growth start -> end | {growth / mib:+.2f} MiB ({growth / n:.3f} bytes/pair) |")
    print(f"| heap entries, max sampled | {res['heap_max_sampled']:,} |")
    print(f"| live tasks at the end | {res['live']:,} |")
    flat = growth < 16 * mib
    print("\nRSS stays flat." if flat else "\nRSS GREW: lazy deletion is leaking.")
    return res


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=1_000_000, help="tasks (main mode) or pairs (child)")
    parser.add_argument("--pairs", type=int, default=None, metavar="N", help="run N schedule/cancel pairs instead")
    parser.add_argument("--policies", default="priority,due,fifo", help="core policies to measure")
    parser.add_argument("--policy", default="priority", help="policy for --pairs and children")
    parser.add_argument("--repeat", type=int, default=3, help="runs per contender (median reported)")
    parser.add_argument("--gc", default="on,off", help="cyclic GC modes to measure: on, off or on,off")
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--json", type=Path, default=None, help="also write the raw results here")
    parser.add_argument("--check", action="store_true", help="exit 1 when a checked target is missed (GC on)")
    parser.add_argument(
        "--child", choices=["bare", "bare+live", "core", "core+freeze", "pairs"], help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    gc_modes = args.gc.split(",")
    if not set(gc_modes) <= {"on", "off"}:
        parser.error(f"--gc must be on, off or on,off, not {args.gc!r}")
    if args.child and gc_modes == ["off"]:
        gc.disable()

    if args.child == "bare":
        print(json.dumps(child_bare(args.n, args.seed)))
    elif args.child == "bare+live":
        print(json.dumps(child_bare_live(args.n, args.seed)))
    elif args.child in ("core", "core+freeze"):
        print(json.dumps(child_core(args.n, args.seed, args.policy, freeze=args.child == "core+freeze")))
    elif args.child == "pairs":
        print(json.dumps(child_pairs(args.n, args.policy)))
    else:
        if args.pairs is not None:
            report = pairs_mode(args.pairs, args.policy)
        else:
            report = main_mode(args.n, args.seed, args.policies.split(","), args.repeat, gc_modes)
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))
        if args.check and report.get("missed"):
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
