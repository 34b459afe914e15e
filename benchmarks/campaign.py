"""The fault campaign for the durable layer, for long runs (issue 20).

    python -m benchmarks.campaign --minutes 30                       # both stores, a random seed
    python -m benchmarks.campaign --minutes 5 --store postgresql --seed 7
    python -m benchmarks.campaign --seconds 20 --store sqlite --seed 3   # replay a failure of the suite's run

Runs tests/campaign/campaign.py round after round (each round: 2-3
instances on one store, a fault phase of ``--round`` seconds, a calm
phase, clean shutdowns, the checker) until the time is up, alternating the
stores, each round with its own seed (the first is ``--seed``, then seed+1,
...). At the end it prints the faults injected (by kind), the runs checked
and every violation found with its evidence and the seed of its round (to
replay: ``--seed S --rounds 1 --store STORE --round SECONDS``), and keeps a
violating round's evidence (``--keep``). Exit status: 0 if no violation was
found, 1 otherwise.

It starts its own throwaway PostgreSQL server (tests/campaign/pg.py) and
removes it, and every process it started, at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.campaign", description=__doc__.split("\n\n")[0])
    how_long = parser.add_mutually_exclusive_group()
    how_long.add_argument("--minutes", type=float, help="run rounds for this long (default 30)")
    how_long.add_argument("--seconds", type=float, help="one round with a fault phase this long")
    parser.add_argument("--rounds", type=int, default=None, help="stop after this many rounds")
    parser.add_argument("--round", type=float, default=60.0, help="each round's fault phase, seconds (default 60)")
    parser.add_argument("--store", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--seed", type=int, default=None, help="the first round's seed (default: random)")
    parser.add_argument("--instances", type=int, default=3, choices=[2, 3])
    parser.add_argument("--lease", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--faults", default=None, metavar="K1,K2",
                        help="only these fault kinds (kill, kill_user, stop, restart, pause, cancel, replace, "
                             "oneshot, pg_drop, pg_stall, pg_lose_commit, sqlite_lock; default: all)")  # fmt: skip
    parser.add_argument("-v", "--verbose", action="store_true", help="print each fault as it is injected")
    parser.add_argument("--keep", metavar="DIR", default=os.path.join(tempfile.gettempdir(), "procsched-campaign"),
                        help="keep each round with a violation here (its runs.log, the instances' stderr, a SQLite "
                             "store; CAMPAIGN_LOG_INFO=1 logs the instances at INFO); default %(default)s")  # fmt: skip
    args = parser.parse_args(argv)
    if args.seconds is not None:
        budget, fault_phase, rounds = args.seconds, args.seconds, args.rounds or 1
    else:
        budget, fault_phase, rounds = (args.minutes or 30.0) * 60, args.round, args.rounds
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    stores = ["sqlite", "postgresql"] if args.store == "both" else [args.store]
    sys.path.insert(0, ROOT)
    from tests.campaign.campaign import run_campaign
    from tests.campaign.pg import Cluster, binaries

    cluster = Cluster().start() if "postgresql" in stores and binaries() is not None else None
    if "postgresql" in stores and cluster is None:
        print("PostgreSQL server binaries not found: SQLite only", file=sys.stderr)
        stores = ["sqlite"]
    faults: Counter[str] = Counter()
    checked = 0
    found: list[tuple[int, str, object]] = []
    documented = 0
    done = 0
    deadline = time.monotonic() + budget
    try:
        while (rounds is None or done < rounds) and (done == 0 or time.monotonic() < deadline):
            store = stores[done % len(stores)]
            phase = (
                min(fault_phase, max(5.0, deadline - time.monotonic() - 15)) if args.seconds is None else fault_phase
            )
            say = print if args.verbose else None
            print(f"round {done + 1}: store={store} seed={seed} fault phase {phase:.0f} s", flush=True)
            workdir = os.path.join(args.keep, f"{store}-{seed}")
            shutil.rmtree(workdir, ignore_errors=True)
            os.makedirs(workdir)
            report = run_campaign(store, phase, seed, workdir=workdir,
                                  cluster=cluster if store == "postgresql" else None,
                                  instances=args.instances, lease=args.lease, workers=args.workers, say=say,
                                  kinds=args.faults.split(",") if args.faults else None)  # fmt: skip
            if report.violations:
                print(f"  kept: {workdir}", flush=True)
            else:
                shutil.rmtree(workdir, ignore_errors=True)
            faults.update(report.faults_by_kind())
            checked += report.runs_checked
            documented += len(report.documented)
            found += [(seed, store, v) for v in report.violations]
            print(f"  {report.runs_checked} runs checked, {sum(report.faults_by_kind().values())} faults, "
                  f"{len(report.violations)} violation(s), {report.wall:.0f} s", flush=True)  # fmt: skip
            for v in report.violations:  # (at once, too: a replay can start while the campaign goes on)
                print("  " + v.render().replace("\n", "\n  "), flush=True)
            if report.violations:
                print("  " + report.replay().replace("\n", "\n  "), flush=True)
            done += 1
            seed += 1
    finally:
        if cluster is not None:
            cluster.stop()
    print()
    print(f"rounds: {done}")
    print(f"faults injected: {sum(faults.values())} ({', '.join(f'{k} {n}' for k, n in sorted(faults.items()))})")
    print(f"runs checked: {checked}")
    print(f"documented limits seen (not violations): {documented}")
    print(f"violations found: {len(found)}")
    for s, store, v in found:
        print(f"  seed {s} ({store}): {v.render()}")  # type: ignore[attr-defined]
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
