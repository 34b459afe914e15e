"""The user program of the busy fault test: more keyed runs due at once than
workers, so runs are given ahead (prefetch) with their starts recorded; one
line on stdout per ended run (the parent kills it after a random number)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import prefetch_jobs
from fault_child import serve, start

import procsched

TASKS = 6
PERIOD = 0.012
WORK = 0.002


def main() -> None:
    store, out = sys.argv[1], sys.argv[2]
    s = start(store)
    for i in range(TASKS):  # all due at the same instants: 6 runs for 2 workers, 4 of them given ahead
        retry = procsched.Retry(attempts=3, delay=0, on=("crashed",)) if i % 2 else None
        s.schedule_at_fixed_rate(
            prefetch_jobs.record_busy, PERIOD, args=(f"{out}.t{i}", WORK), key=f"t{i}", retry=retry
        )
    serve(s)


if __name__ == "__main__":
    main()
