"""A racer for the multi-writer test: ``python claim_racer.py URL KEYS RUNS``.

Registers, prints "ready", waits for "go" on stdin (so the racers start
together), then races the others: for each key in turn, read the task and
try to claim its next run (even while another holds it: the claim must
say no); a won claim is finished at once (rescheduled
one period on). Stops when every key has RUNS runs; prints the (key, run)
pairs it won, as JSON.
"""

import json
import sys

from procsched._store import open_store

P = 1_000_000
T0 = 1_700_000_000_000_000_000


def main() -> None:
    url, nkeys, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    store = open_store(url, keep_runs=1_000_000)
    me = store.register()
    print("ready", flush=True)
    sys.stdin.readline()
    won: list[tuple[str, int]] = []
    lost = 0
    keys = [f"k{i}" for i in range(nkeys)]
    while keys:
        for key in list(keys):
            task = store.get(key)
            run = task.state.run_count + 1
            if run > total:
                keys.remove(key)
                continue
            if store.claim_run(me, key, run, 1, T0 + (run - 1) * P):
                won.append((key, run))
                assert store.finish_run(me, key, run, 1, "ok", T0 + run * P, T0 + run * P)
            else:
                lost += 1
    print(json.dumps({"id": me.id, "won": won, "lost": lost}), flush=True)


if __name__ == "__main__":
    main()
