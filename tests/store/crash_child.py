"""A child for the crash-consistency test: ``python crash_child.py URL KEYS``.

Recovers first (takes over the dead holders of this host: their in-flight
runs become ``crashed``), then writes as a busy dispatcher would, one batch
per turn: finish every key's in-flight run with its reschedule, then claim
every key's next run. After each commit it prints the run number it claimed
(every key claims the same one: a batch is all or nothing). The parent
SIGKILLs it at a random instant.
"""

import sys
import time

from procsched._store import TaskDefinition, TaskState, dead_here, open_store

P = 1_000_000  # the keys' fixed-rate period: 1 ms of (virtual) UTC time
T0 = 1_700_000_000_000_000_000


def main() -> None:
    url, nkeys = sys.argv[1], int(sys.argv[2])
    keys = [f"k{i}" for i in range(nkeys)]
    store = open_store(url, keep_runs=1_000_000)  # keep all: the parent checks every run
    me = store.register(lease_ns=3600 * 10**9)
    for dead in dead_here(store.load().schedulers):
        store.take_over(dead, me, force=True)
    stored = {t.key: t for t in store.load().tasks}
    b = store.batch(me)
    for k in keys:
        if k not in stored:
            schedule = {"kind": "fixed_rate", "period_ns": P, "first_ns": T0}
            b.upsert(TaskDefinition(k, "store_funcs:plain", b"", schedule), TaskState(next_due_ns=T0))
    b.commit()
    runs = {t.key: t.state.run_count for t in store.load().tasks}
    print("ready", flush=True)
    in_flight: dict[str, int] = {}
    while True:
        b = store.batch(me)  # as the dispatcher: every finish, then every claim
        for k, r in in_flight.items():
            b.finished(k, r, 1, "ok", time.time_ns(), T0 + r * P)
        for k in keys:
            nxt = in_flight[k] + 1 if k in in_flight else runs[k] + 1
            b.started(k, nxt, 1, T0 + (nxt - 1) * P, time.time_ns())
            in_flight[k] = nxt
        result = b.commit()
        if not result.ok:
            print(f"unexpected: {result}", flush=True)
            sys.exit(3)
        print(nxt, flush=True)


if __name__ == "__main__":
    main()
