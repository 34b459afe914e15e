"""The measuring harness: repetitions, statistics, tables, JSON, plots, targets.

A scenario module (``benchmarks/scenarios/*.py``) provides::

    NAME, TITLE, DESCRIPTION, CONTENDERS (names from _contenders.ALL), METRICS
    params(mode) -> dict           sizes for "full", "quick" or "tiny" (incl. "reps")
    measure(adapter, p) -> dict    one repetition on a started, warmed-up contender
    targets(result) -> [Target]    procsched's targets, checked by --check
    plot(result, path)             optional: one PNG
    run(ctx) -> ScenarioResult     optional: replaces the standard loop

The standard loop runs every contender in this process tree, one at a time,
alternating them: repetition r visits the contenders in an order rotated by
r, so no contender always runs first (cold caches) or last. Each visit starts
a fresh pool, warms it up (every worker runs a task), measures, and closes
the pool. Figures are the median of the repetitions, with min-max.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Callable, Sequence

from . import _contenders


# -- statistics ---------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]."""
    if not values:
        return math.nan
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares (slope, intercept)."""
    n = len(xs)
    if n < 2:
        return 0.0, ys[0] if ys else 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0, my
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return slope, my - slope * mx


def _numeric(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)


def summarize(values: list[Any]) -> dict[str, Any]:
    """median / min / max of the numeric repetitions; text values are kept."""
    nums = [v for v in values if _numeric(v)]
    texts = [v for v in values if isinstance(v, str)]
    out: dict[str, Any] = {"n": len(values)}
    if nums and len(nums) == len(values):
        out.update(median=statistics.median(nums), min=min(nums), max=max(nums))
    elif nums:
        out.update(median=statistics.median(nums), min=min(nums), max=max(nums), text=sorted(set(texts)))
    elif texts:
        out["text"] = sorted(set(texts))
    return out


# -- results --------------------------------------------------------------------------


@dataclass
class Metric:
    key: str
    label: str
    unit: str = ""
    better: str | None = None  # "higher" | "lower" | None
    fmt: str = ".3g"
    ratio: bool = True  # include in the "vs best peer" table


@dataclass
class Target:
    label: str
    measured: float | None
    op: str  # "<=" | ">="
    threshold: float
    unit: str = ""
    note: str = ""

    @property
    def measurable(self) -> bool:
        return _numeric(self.measured)

    @property
    def passed(self) -> bool:
        if not self.measurable:
            return False
        assert self.measured is not None
        return self.measured <= self.threshold if self.op == "<=" else self.measured >= self.threshold

    @property
    def status(self) -> str:
        """ "PASS", "MISS", or "n/a" (not measured in this run, e.g. a contender left out)."""
        return "n/a" if not self.measurable else "PASS" if self.passed else "MISS"


@dataclass
class ScenarioResult:
    name: str
    title: str
    description: str
    params: dict[str, Any]
    metrics: list[Metric]
    reps: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # contender -> per-rep metrics
    samples: dict[str, Any] = field(default_factory=dict)  # contender -> raw data of its last rep (plots)
    notes: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    discarded: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # noisy visits, redone
    targets: list[Target] = field(default_factory=list)
    extra_tables: list[str] = field(default_factory=list)
    seconds: float = 0.0
    load: tuple[float, ...] = ()
    foreign_cpu: float | None = None  # share of the machine's CPU used by processes outside this tree

    def summary(self, contender: str) -> dict[str, dict[str, Any]]:
        reps = self.reps.get(contender, [])
        return {m.key: summarize([r.get(m.key) for r in reps]) for m in self.metrics}

    def median(self, contender: str, key: str) -> float | None:
        nums = [float(v) for r in self.reps.get(contender, []) if _numeric(v := r.get(key))]  # type: ignore[arg-type]
        return statistics.median(nums) if nums else None

    def contenders(self) -> list[str]:
        return list(self.reps)

    def best_peer(self, metric: Metric, processes_only: bool = False) -> tuple[str, float] | None:
        best: tuple[str, float] | None = None
        for name in self.reps:
            if _contenders.family(name) != "peer":
                continue
            if processes_only and _contenders.kind(name) != "processes":
                continue
            value = self.median(name, metric.key)
            if value is None:
                continue
            if best is None or (value > best[1] if metric.better == "higher" else value < best[1]):
                best = (name, value)
        return best

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "description": self.description,
            "params": self.params,
            "seconds": round(self.seconds, 1),
            "loadavg_after": self.load,
            "foreign_cpu_share": self.foreign_cpu,
            "metrics": [asdict(m) for m in self.metrics],
            "contenders": {
                name: {"family": _contenders.family(name), "reps": reps, "summary": self.summary(name)}
                for name, reps in self.reps.items()
            },
            "vs_best_peer": self.ratio_rows(),
            "targets": [dict(asdict(t), passed=t.passed, status=t.status) for t in self.targets],
            "notes": self.notes,
            "errors": self.errors,
            "discarded": self.discarded,
            "samples_last_rep": self.samples,
        }

    def ratio_rows(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        ours = "procsched[processes]"
        if ours not in self.reps:
            return rows
        for m in self.metrics:
            if not m.better or not m.ratio:
                continue
            mine = self.median(ours, m.key)
            seen = None
            for processes_only in (False, True):
                best = self.best_peer(m, processes_only)
                if mine is None or best is None or best[0] == seen:
                    continue
                seen = best[0]
                ratio = mine / best[1] if best[1] else (1.0 if mine == best[1] else math.inf)
                wins = mine >= best[1] if m.better == "higher" else mine <= best[1]
                rows.append({"metric": m.label, "unit": m.unit, "better": m.better, "procsched": mine,
                             "among": "process pools" if processes_only else "all peers",
                             "best_peer": best[0], "peer_value": best[1], "ratio": ratio, "procsched_wins": wins})  # fmt: skip
        return rows


# -- formatting ---------------------------------------------------------------------------


def fmt_value(v: Any, spec: str = ".3g") -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    if isinstance(v, float) and math.isnan(v):
        return "-"
    if isinstance(v, int) and spec == ".3g" and abs(v) < 10**7:
        return str(v)
    if spec in ("d", "s"):
        return str(int(v)) if float(v).is_integer() else format(v, ".3g")
    return format(v, spec)


def fmt_summary(s: dict[str, Any], spec: str) -> str:
    if "median" not in s:
        return ", ".join(s.get("text", ["-"]))
    text = fmt_value(s["median"], spec)
    if s["n"] > 1 and s["min"] != s["max"]:
        text += f" ({fmt_value(s['min'], spec)}–{fmt_value(s['max'], spec)})"
    if s.get("text"):
        text += " / " + ", ".join(s["text"])
    return text


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def render(result: ScenarioResult) -> str:
    out = [f"### {result.name}: {result.title}", "", result.description, ""]
    shown = {k: v for k, v in result.params.items() if not k.startswith("_")}
    out.append("Parameters: " + ", ".join(f"{k}={v}" for k, v in shown.items()) + "  ")
    out.append(
        f"Cells: median of the repetitions (min–max). Took {result.seconds:.0f} s"
        + (
            f"; other processes used {100 * result.foreign_cpu:.1f}% of the machine's CPU meanwhile."
            if result.foreign_cpu is not None
            else "."
        )
    )
    out.append("")
    header = ["contender"] + [f"{m.label}" + (f" [{m.unit}]" if m.unit else "") for m in result.metrics]
    rows = []
    for name in result.reps:
        summary = result.summary(name)
        rows.append([f"**{name}**" if name == "procsched[processes]" else name]
                    + [fmt_summary(summary[m.key], m.fmt) for m in result.metrics])  # fmt: skip
    for name, err in result.errors.items():
        if name not in result.reps:
            rows.append([name] + [f"error: {err}"] + ["-"] * (len(result.metrics) - 1))
    out.append(markdown_table(header, rows))
    ratios = result.ratio_rows()
    if ratios:
        out += ["", "procsched[processes] against the best peer of this run (peers: the other pools and schedulers; "
                "procsched[threads] and the sequential loop are not peers; a second row names the best process pool "
                "when that is a different contender):", ""]  # fmt: skip
        out.append(markdown_table(
            ["metric", "procsched", "among", "best peer", "peer value", "procsched ÷ peer", "better is", "procsched ahead?"],
            [[r["metric"] + (f" [{r['unit']}]" if r["unit"] else ""), fmt_value(r["procsched"]), r["among"], r["best_peer"],
              fmt_value(r["peer_value"]), f"{r['ratio']:.2f}", r["better"], "yes" if r["procsched_wins"] else "no"]
             for r in ratios],
        ))  # fmt: skip
    for table in result.extra_tables:
        out += ["", table]
    if result.targets:
        out += ["", "Targets (procsched[processes]):", ""]
        out.append(markdown_table(
            ["target", "measured", "required", "result"],
            [[t.label, fmt_value(t.measured, ".3g") + (f" {t.unit}" if t.unit else ""),
              f"{t.op} {fmt_value(t.threshold)}" + (f" {t.unit}" if t.unit else ""),
              t.status + (f" ({t.note})" if t.note else "")] for t in result.targets],
        ))  # fmt: skip
    for note in result.notes:
        out += ["", f"Note: {note}"]
    return "\n".join(out) + "\n"


# -- running ------------------------------------------------------------------------------


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Context:
    workers: int
    mode: str  # "full" | "quick" | "tiny"
    contenders: list[str] | None  # restrict to these (None: the scenario's own list)
    reps: int | None  # override
    load: Any = None  # a _load.ForeignLoad, or None
    quiet_wait: float = 0.0  # before each visit, wait up to this long for other processes to go quiet
    retry_noisy: float | None = None  # redo a visit during which others used more than this % of the CPU
    waited: float = 0.0

    def before_visit(self) -> None:
        if self.load is not None and self.quiet_wait > 0:
            waited = self.load.wait_quiet(self.quiet_wait)
            self.waited += waited
            if waited >= self.quiet_wait:
                log(f"other processes still busy after waiting {waited:.0f} s; measuring anyway")

    def foreign_mark(self) -> tuple[float, float]:
        return (0.0 if self.load is None else self.load.sample()), time.monotonic()

    def foreign_share(self, mark: tuple[float, float]) -> float | None:
        return None if self.load is None or not self.load.available else self.load.share_since(*mark)


#: A visit disturbed by other processes is redone at most this many times.
MAX_RETRIES = 2


def visit(
    scenario: str,
    name: str,
    measure: Callable[[Any], dict[str, Any]],
    ctx: Context,
    result: ScenarioResult,
    label: str | None = None,
) -> dict[str, Any]:
    """One measurement of one contender: a fresh pool, a warm-up, ``measure``.

    With ``ctx.retry_noisy``, a measurement during which other processes took
    more than that share of the machine's CPU is thrown away (kept in the
    JSON under "discarded") and redone, at most MAX_RETRIES times; the
    criterion never looks at the figures themselves.
    """
    for attempt in range(MAX_RETRIES + 1):
        ctx.before_visit()
        log(f"{scenario}: {label or name}" + (f" (retry {attempt})" if attempt else ""))
        adapter = _contenders.make(name, ctx.workers)
        adapter.start()
        try:
            adapter.warmup()
            mark = ctx.foreign_mark()
            metrics = measure(adapter)
            metrics["foreign_cpu_pct"] = _pct(ctx.foreign_share(mark))
        finally:
            if not getattr(adapter, "closed_by_measure", False):
                adapter.close()
        noisy = ctx.retry_noisy is not None and (metrics["foreign_cpu_pct"] or 0) > ctx.retry_noisy
        if not noisy or attempt == MAX_RETRIES:
            return metrics
        log(
            f"{scenario}: {label or name}: other processes took {metrics['foreign_cpu_pct']}% of the CPU: measuring again"
        )
        result.discarded.setdefault(name, []).append({k: v for k, v in metrics.items() if k != "_samples"})
    raise AssertionError("unreachable")


def standard_run(module: Any, ctx: Context, p: dict[str, Any]) -> ScenarioResult:
    result = ScenarioResult(module.NAME, module.TITLE, module.DESCRIPTION, p, list(module.METRICS))
    names = [n for n in module.CONTENDERS if ctx.contenders is None or n in ctx.contenders]
    skipped = [n for n in names if not _contenders.available(n)]
    for n in skipped:
        result.errors[n] = "not installed (pip install -e '.[bench]')"
    names = [n for n in names if n not in skipped]
    reps = p["reps"]
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)] if names else []
        for name in order:
            if name in result.errors:
                continue  # failed once: do not retry every repetition
            try:
                metrics = visit(module.NAME, name, lambda adapter: module.measure(adapter, p), ctx, result,
                                label=f"rep {rep + 1}/{reps}: {name}")  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - one contender failing must not sink the run
                log(f"{module.NAME}: {name} failed: {exc!r}")
                traceback.print_exc(file=sys.stderr)
                result.errors[name] = f"{type(exc).__name__}: {exc}"
                continue
            samples = metrics.pop("_samples", None)
            if samples is not None:
                result.samples[name] = samples
            result.reps.setdefault(name, []).append(metrics)
    # keep the declared order in tables
    result.reps = {n: result.reps[n] for n in names if n in result.reps}
    return result


def _pct(share: float | None) -> float | None:
    return None if share is None else round(100 * share, 1)


def run_scenario(module: Any, ctx: Context) -> ScenarioResult:
    p = dict(module.params(ctx.mode))
    if ctx.reps is not None:
        p["reps"] = ctx.reps
    p["workers"] = ctx.workers
    t0 = time.monotonic()
    mark, waited0 = ctx.foreign_mark(), ctx.waited
    runner: Callable[..., ScenarioResult] = getattr(module, "run", None) or standard_run
    try:
        result = runner(module, ctx, p)
    finally:
        _contenders.end_ray()  # (not left running into the next scenario's measurements)
    result.seconds = time.monotonic() - t0
    result.load = tuple(round(x, 2) for x in os.getloadavg())
    # Other processes compete for the same cores and skew every timing: say how much.
    result.foreign_cpu = ctx.foreign_share(mark)
    visits = [r.get("foreign_cpu_pct") for reps in result.reps.values() for r in reps]
    worst = max((v for v in visits if v is not None), default=None)
    if ctx.waited > waited0:
        result.notes.append(
            f"waited {ctx.waited - waited0:.0f} s in all for other processes to go quiet (--quiet-wait)"
        )
    redone = sum(len(v) for v in result.discarded.values())
    if redone:
        result.notes.append(
            f"{redone} measurement(s) redone because other processes took more than {ctx.retry_noisy:g}% of the "
            "CPU meanwhile (--retry-noisy; the discarded figures are in the JSON)"
        )
    if worst is not None and worst > 5:
        result.notes.append(
            f"other processes took up to {worst:.0f}% of the machine's CPU during a measurement "
            f"({100 * (result.foreign_cpu or 0):.0f}% over the whole scenario): those figures are skewed "
            "(per-measurement shares: foreign_cpu_pct in the JSON)"
        )
    try:
        result.targets = list(module.targets(result))
    except Exception as exc:  # noqa: BLE001
        result.notes.append(f"could not evaluate targets: {exc!r}")
    if ctx.mode != "full":
        result.notes.append(f"{ctx.mode} mode: smaller workload than the full suite; figures are indicative only")
    return result


# -- machine, JSON, plots -------------------------------------------------------------------


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "procsched_source": _procsched_source(),
        "nproc": os.cpu_count(),
        "cpu_model": cpu,
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "versions": _contenders.versions(),
        "loadavg_at_start": tuple(round(x, 2) for x in os.getloadavg()),
    }


def _procsched_source() -> str:
    """Which procsched was measured: its directory and git commit (+ "dirty"
    if its files differ from it), or $PROCSCHED_BENCH_COMMIT for an export."""
    import subprocess

    import procsched

    root = os.path.dirname(os.path.dirname(os.path.abspath(procsched.__file__)))
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "procsched"], cwd=root, capture_output=True,
                               text=True, timeout=10).stdout.strip()  # fmt: skip
        return f"{root} @ {commit}{' + uncommitted changes' if dirty else ''}"
    except (OSError, subprocess.SubprocessError):
        return f"{root} @ {os.environ.get('PROCSCHED_BENCH_COMMIT', 'unknown commit')}"


def write_results(
    results_dir: str,
    meta: dict[str, Any],
    results: list[ScenarioResult],
    plots: Mapping[str, ModuleType] | None,
    report: str = "",
) -> dict[str, str]:
    """``bench-<time>.json`` and ``.md`` (also as ``latest.*``) and one PNG per
    scenario whose module in ``plots`` (the scenario registry, or None for no
    plots) draws one: the harness does not import the scenarios, they import it."""
    os.makedirs(results_dir, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    data = dict(meta, scenarios={r.name: r.to_json() for r in results})
    files = {}
    path = os.path.join(results_dir, f"bench-{stamp}.json")
    for target in (path, os.path.join(results_dir, "latest.json")):
        with open(target, "w") as f:
            json.dump(data, f, indent=1, default=_json_default)
    files["json"] = path
    if report:
        md = os.path.join(results_dir, f"bench-{stamp}.md")
        for target in (md, os.path.join(results_dir, "latest.md")):
            with open(target, "w") as f:
                f.write(report + "\n")
        files["markdown"] = md
    if plots is not None:
        for r, module in _plotters(results, plots):
            png = os.path.join(results_dir, f"{r.name}.png")
            try:
                module.plot(r, png)
                files[r.name] = png
            except Exception as exc:  # noqa: BLE001 - a plot is not worth the run
                log(f"plot {r.name} failed: {exc!r}")
    return files


def _plotters(results: list[ScenarioResult], registry: Mapping[str, ModuleType]) -> list[tuple[ScenarioResult, Any]]:
    out = []
    for r in results:
        module = registry.get(r.name)
        if module is not None and hasattr(module, "plot"):
            out.append((r, module))
    return out


def _json_default(o: Any) -> Any:
    if isinstance(o, float) and (math.isnan(o) or math.isinf(o)):
        return str(o)
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return repr(o)


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bar_plot(result: ScenarioResult, key: str, path: str, *, log_scale: bool = False, ylabel: str = "") -> None:
    """One bar per contender: the median, with a min-max whisker."""
    plt = pyplot()
    names = [n for n in result.reps if result.median(n, key) is not None]
    summaries = [result.summary(n)[key] for n in names]
    med = [s["median"] for s in summaries]
    lo = [s["median"] - s["min"] for s in summaries]
    hi = [s["max"] - s["median"] for s in summaries]
    colours = [_colour(n) for n in names]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.bar(range(len(names)), med, yerr=[lo, hi], color=colours, capsize=3)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    metric = next(m for m in result.metrics if m.key == key)
    ax.set_ylabel(ylabel or f"{metric.label} [{metric.unit}]" if metric.unit else metric.label)
    if log_scale:
        ax.set_yscale("log")
    ax.set_title(f"{result.name}: {metric.label} ({metric.better or ''} is better)".replace(" ( is better)", ""))
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _colour(name: str) -> str:
    if name == "procsched[processes]":
        return "#d62728"
    if name == "procsched[threads]":
        return "#ff9896"
    if name == "sequential":
        return "#7f7f7f"
    return "#1f77b4"
