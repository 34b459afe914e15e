"""``procsched demo``: the demo jobs file on a process pool (its verdict: ``_verdict.py``).

The demo needs at least two workers: its hanging job holds one worker for a
second at a time, and the point is that the healthy jobs keep their schedule
on the other ones.
"""

from __future__ import annotations

import argparse
import importlib
import os

from .._jobs import declared_jobs

DEMO_MODULE = "procsched._demo_jobs"
DEMO_SECONDS = 20.0
MIN_WORKERS = 2


def run_demo(args: argparse.Namespace) -> int:
    from ._session import Session

    importlib.import_module(DEMO_MODULE)
    args.runner = "processes"  # a segfault in a thread would take everything down: that is the point
    args.workers = args.workers or max(MIN_WORKERS, os.cpu_count() or 1)
    return Session(declared_jobs(DEMO_MODULE), "the demo jobs", args, demo=True).run()
