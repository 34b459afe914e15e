"""One scheduler of the several-schedulers tests: keyed tasks on a shared
store; commands on stdin (``stats``, ``cancel KEY``, ``pause KEY``,
``resume KEY``, ``add-rate KEY PERIOD PATH``, ``quit``), answers on stdout."""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import peer_jobs

import procsched


def main() -> None:
    cfg = json.loads(sys.argv[1])
    os.environ["PEER_ID"] = cfg["name"]  # the workers inherit it: each line names its scheduler
    s = procsched.Scheduler(cfg.get("workers", 2), store=cfg["store"], lease=cfg["lease"])
    if cfg.get("skew_ns"):
        s._backend.send(("wall_step", cfg["skew_ns"]))  # this scheduler's wall clock runs off by that much
    for t in cfg.get("tasks", ()):
        args = (t["out"], t.get("long_runs", 0), t.get("long_s", 0.0))
        if t["kind"] == "rate":
            s.schedule_at_fixed_rate(peer_jobs.mark, t["period"], args=args, key=t["key"])
        else:
            s.schedule_cron(peer_jobs.mark, t["expr"], args=args, key=t["key"])
    print("ready", os.getpid(), flush=True)
    for line in sys.stdin:
        cmd, *rest = line.split()
        if cmd == "quit":
            break
        if cmd == "stats":
            jobs = {h.key: h.state.value for h in s.jobs() if h.key}
            print(json.dumps({"store": s.stats()["store"], "keys": jobs}), flush=True)
        elif cmd in ("cancel", "pause", "resume"):
            handle = s.get(rest[0])
            print(json.dumps(handle is not None and bool(getattr(handle, cmd)())), flush=True)
        elif cmd == "add-rate":
            s.schedule_at_fixed_rate(peer_jobs.mark, float(rest[1]), args=(rest[2], 0, 0.0), key=rest[0])
            print("added", flush=True)
    s.shutdown(wait=True)
    print("closed", flush=True)


if __name__ == "__main__":
    main()
