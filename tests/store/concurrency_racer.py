"""A racer for the concurrency test: ``python concurrency_racer.py URL KEYS RUNS``.

Registers, prints "ready", waits for "go" on stdin, then races the others:
for each key in turn, try to claim its next run; a won run stays in flight
while this racer claims more (up to two of its own), then it ends its
oldest. Right after each won claim it reads the store (a snapshot of its own)
and notes the most runs in flight it saw per task and in the group. Stops
when every key has RUNS runs; prints what it won and saw, as JSON.
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
    mine: list[tuple[str, int]] = []
    seen_task = seen_group = limited = 0
    keys = [f"k{i}" for i in range(nkeys)]
    while keys or mine:
        for key in list(keys):
            run = store.get(key).state.run_count + 1
            if run > total:
                keys.remove(key)
                continue
            b = store.batch(me)
            b.started(key, run, 1, T0 + (run - 1) * P)
            result = b.commit()
            if result.ok:
                won.append((key, run))
                mine.append((key, run))
                flying = [r for r in store.load().in_flight]
                seen_task = max(seen_task, max(sum(1 for r in flying if r.key == k) for k in {r.key for r in flying}))
                seen_group = max(seen_group, sum(1 for r in flying if r.group == "g"))
            limited += len(result.limited)
            if mine and (len(mine) >= 2 or not result.ok):
                k, r = mine.pop(0)
                assert store.finish_run(me, k, r, 1, "ok", T0 + r * P, T0 + r * P)
        if not keys:
            while mine:
                k, r = mine.pop(0)
                assert store.finish_run(me, k, r, 1, "ok", T0 + r * P, T0 + r * P)
    print(json.dumps({"id": me.id, "won": won, "task": seen_task, "group": seen_group, "limited": limited}), flush=True)


if __name__ == "__main__":
    main()
