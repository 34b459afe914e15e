"""``python -m benchmarks``: procsched against its threads runner and its peers.

    python -m benchmarks                     # the full suite (several minutes)
    python -m benchmarks --quick             # smaller workloads, ~3 minutes
    python -m benchmarks --only throughput --only crashes   (or --only throughput,crashes)
    python -m benchmarks --check             # exit 1 if procsched misses a target: every scenario's
                                             # (issue 25's are in throughput, crashes, startup, stores,
                                             # restart) and, in a full run, core_scale's
    python -m benchmarks --workers 4
    python -m benchmarks --only soak --minutes 10      # benchmarks/soak.py, if present
    python -m benchmarks --only core_scale             # benchmarks/core_scale.py, if present

Tables go to stdout (markdown), progress to stderr, and a JSON file plus PNG
plots to benchmarks/results/ (or --results-dir).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import time
from typing import Any

from . import _contenders, _harness

#: Entries that hand over to another script's ``main(argv)``; run only when
#: named, except core_scale's target check, which the whole suite runs too.
EXTERNAL = {"soak": "benchmarks.soak", "core_scale": "benchmarks.core_scale"}
#: core_scale's arguments in a whole-suite run: the rows its targets are checked on.
CORE_TARGETS = ["--policies", "priority", "--gc", "on", "--repeat", "3"]


def _parser() -> argparse.ArgumentParser:
    from .scenarios import REGISTRY

    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        allow_abbrev=False,  # unknown options go on to soak/core_scale intact
        description="Benchmarks: procsched against its threads runner and the peers users would pick instead.",
        epilog="Scenarios: "
        + ", ".join(REGISTRY)
        + "; also (only when named): "
        + ", ".join(EXTERNAL)
        + " (a full run without --only runs core_scale's target check too). "
        + "Unrecognised options are passed on to soak/core_scale.",
    )
    p.add_argument("--quick", action="store_true", help="smaller workloads and fewer repetitions (~3 min)")
    p.add_argument("--tiny", action="store_true", help="minimal sizes, for the smoke test only (figures meaningless)")
    p.add_argument(
        "--only", action="append", default=[], metavar="NAME", help="run only these (repeatable, or a comma list)"
    )
    p.add_argument("--contenders", default=None, metavar="LIST", help="comma list of contenders to keep")
    p.add_argument("--check", action="store_true", help="exit non-zero when procsched misses a target")
    p.add_argument("--workers", type=int, default=2, help="workers for every pool (default 2)")
    p.add_argument("--reps", type=int, default=None, help="override the number of repetitions")
    p.add_argument("--results-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument(
        "--quiet-wait",
        type=float,
        default=0.0,
        metavar="S",
        help="before each measurement, wait up to S seconds for other processes to use < 10%% of the CPU",
    )
    p.add_argument(
        "--retry-noisy",
        type=float,
        default=None,
        metavar="PCT",
        help="redo (up to twice) a measurement during which other processes used > PCT%% of the CPU",
    )
    p.add_argument("--list", action="store_true", help="list scenarios and contenders, then exit")
    return p


def main(argv: list[str] | None = None) -> int:
    from .scenarios import REGISTRY

    args, extra = _parser().parse_known_args(argv)
    if args.list:
        for name, module in REGISTRY.items():
            print(f"{name:15} {module.TITLE}")
        for name, target in EXTERNAL.items():
            print(f"{name:15} -> {target}.main(argv) (only when named)")
        print(
            "contenders:",
            ", ".join(f"{n}{'' if _contenders.available(n) else ' (not installed)'}" for n in _contenders.ALL),
        )
        return 0
    if args.workers < 1:
        print("--workers must be >= 1", file=sys.stderr)
        return 2
    only = [n.strip() for item in args.only for n in item.split(",") if n.strip()]
    unknown = [n for n in only if n not in REGISTRY and n not in EXTERNAL]
    if unknown:
        print(f"unknown scenario(s): {', '.join(unknown)}; known: {', '.join([*REGISTRY, *EXTERNAL])}", file=sys.stderr)
        return 2
    if extra and not any(n in EXTERNAL for n in only):
        print(f"unrecognised arguments: {' '.join(extra)}", file=sys.stderr)
        return 2

    status = 0
    given = argv if argv is not None else sys.argv[1:]
    for name in only:
        if name in EXTERNAL:
            forwarded = list(extra)
            if name == "core_scale" and args.check:
                forwarded.append("--check")
            if name == "soak":  # options soak.py shares with this parser, when given explicitly
                if any(a == "--workers" or a.startswith("--workers=") for a in given):
                    forwarded += ["--workers", str(args.workers)]
                if any(a == "--results-dir" or a.startswith("--results-dir=") for a in given):
                    forwarded += ["--results-dir", args.results_dir]
            status = max(status, _run_external(name, forwarded))
    names = [n for n in (only or list(REGISTRY)) if n in REGISTRY]
    if not only and not args.tiny and not args.quick:
        # The whole suite: the core's targets too (issue 13), as core_scale checks them.
        status = max(status, _run_external("core_scale", CORE_TARGETS + (["--check"] if args.check else [])))
    if not names:
        return status

    logging.getLogger("procsched").setLevel(logging.ERROR)  # crash warnings are expected here
    compiled = _byte_compile_procsched()
    mode = "tiny" if args.tiny else "quick" if args.quick else "full"
    contenders = None if args.contenders is None else [c.strip() for c in args.contenders.split(",") if c.strip()]
    from ._load import ForeignLoad

    ctx = _harness.Context(workers=args.workers, mode=mode, contenders=contenders, reps=args.reps,
                           load=ForeignLoad(), quiet_wait=args.quiet_wait, retry_noisy=args.retry_noisy)  # fmt: skip
    meta: dict[str, Any] = {
        "command": " ".join(["python -m benchmarks", *(argv if argv is not None else sys.argv[1:])]),
        "mode": mode,
        "workers": args.workers,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": _harness.machine(),
    }
    m = meta["machine"]
    report: list[str] = []

    def emit(text: str) -> None:
        report.append(text)
        print(text, flush=True)

    emit(f"# procsched benchmarks ({mode})\n")
    emit(f"Command: `{meta['command']}`  ")
    emit(f"procsched: {m['procsched_source']}  ")
    emit(f"Machine: {m['nproc']} CPUs, {m['cpu_model']}, Python {m['python']}, {m['platform']}  ")
    emit(f"Workers per pool: {args.workers}; load average at start: {m['loadavg_at_start']}  ")
    emit(f"procsched's modules byte-compiled before the run, as an install does: {compiled}  ")
    emit("Versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()) + "\n")
    results = []
    for name in names:
        _harness.log(f"scenario {name} ({mode})")
        result = _harness.run_scenario(REGISTRY[name], ctx)
        results.append(result)
        emit(_harness.render(result))
    meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    files = _harness.write_results(
        args.results_dir, meta, results, plots=None if args.no_plots else REGISTRY, report="\n".join(report)
    )
    print("Results: " + ", ".join(f"{k}: {_short(v)}" for k, v in files.items()))

    misses = [(r.name, t) for r in results for t in r.targets if t.status == "MISS"]
    total = sum(1 for r in results for t in r.targets if t.status != "n/a")
    unmeasured = sum(1 for r in results for t in r.targets if t.status == "n/a")
    if total or unmeasured:
        print(f"\nTargets: {total - len(misses)}/{total} met" + (f" ({unmeasured} not measured in this run)" if unmeasured else "")
              + (":" if misses else "."))  # fmt: skip
        for scenario, t in misses:
            print(f"  MISS {scenario}: {t.label}: measured {_harness.fmt_value(t.measured)} {t.unit}, "
                  f"required {t.op} {t.threshold} {t.unit}")  # fmt: skip
    if args.check and misses:
        status = max(status, 1)
    return status


def _short(path: str) -> str:
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _run_external(name: str, argv: list[str]) -> int:
    try:
        module = importlib.import_module(EXTERNAL[name])
    except ModuleNotFoundError as exc:
        if exc.name != EXTERNAL[name]:
            raise
        print(f"{name}: {EXTERNAL[name].replace('.', '/')}.py is not in this checkout", file=sys.stderr)
        return 2
    _harness.log(f"handing over to {EXTERNAL[name]}.main({argv!r})")
    code = module.main(argv)
    return int(code or 0)


def _byte_compile_procsched() -> bool:
    """Write procsched's bytecode caches now, as ``pip install`` does: a
    checkout run with PYTHONDONTWRITEBYTECODE (or never imported before)
    would otherwise compile every module again in every new process - the
    dispatcher, the forkserver - and time that in the start-up figures."""
    import compileall

    import procsched

    return bool(compileall.compile_dir(os.path.dirname(procsched.__file__), quiet=1))


if __name__ == "__main__":
    raise SystemExit(main())
