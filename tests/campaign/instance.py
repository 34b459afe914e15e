"""One instance (a user program) for the promise tests and the campaign:
a Scheduler on a store, keyed tasks from a JSON config, commands on stdin.

    python -m tests.campaign.instance '{"name": "A", "store": URL, "lease": 1.0,
                                        "workers": 2, "tasks": [SPEC, ...]}'

A SPEC: ``{"key", "kind": "rate"|"delay"|"cron"|"once", "fn": "module:name",
"args": [...], "period"|"expr"|"delay", "misfire", "retry": {Retry kwargs},
"max_runs", "replace": bool}``. Commands, one a line, each answered by one
JSON line on stdout: ``add SPEC``, ``pause KEY``, ``resume KEY``, ``cancel
KEY``, ``jobs``, ``stats``, ``quit`` (``{"quitting": true}``, a clean
``shutdown(wait=True)``, then ``{"closed": true}``). Only the public API is used. The instance's name is
in ``CAMPAIGN_INSTANCE`` for its workers (so a run's log line names it).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from typing import Any

import procsched

if os.environ.get("CAMPAIGN_LOG_INFO"):  # (a replay's diagnosis: the procsched logger at INFO on stderr)
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")


def resolve(ref: str) -> Any:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def add(s: procsched.Scheduler, spec: dict[str, Any]) -> procsched.TaskHandle:
    fn = resolve(spec["fn"])
    opts: dict[str, Any] = {"args": tuple(spec.get("args", ())), "key": spec["key"]}
    if spec.get("retry"):
        retry = dict(spec["retry"])
        if "on" in retry:
            retry["on"] = tuple(retry["on"])
        opts["retry"] = procsched.Retry(**retry)
    if spec.get("replace"):
        opts["replace_existing"] = True
    kind = spec["kind"]
    if kind in ("rate", "cron") and spec.get("misfire"):
        opts["misfire"] = spec["misfire"]
    if kind in ("rate", "cron", "delay") and spec.get("max_runs"):
        opts["max_runs"] = spec["max_runs"]
    if kind == "rate":
        return s.schedule_at_fixed_rate(fn, spec["period"], initial_delay=spec.get("initial_delay", 0), **opts)
    if kind == "delay":
        return s.schedule_with_fixed_delay(fn, spec["period"], initial_delay=spec.get("initial_delay", 0), **opts)
    if kind == "cron":
        return s.schedule_cron(fn, spec["expr"], tz=spec.get("tz", "UTC"), **opts)
    if kind == "once":
        return s.schedule(fn, spec.get("delay", 0), **opts)
    raise ValueError(f"unknown kind {kind!r}")


def answer(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> None:
    cfg = json.loads(sys.argv[1])
    os.environ["CAMPAIGN_INSTANCE"] = cfg["name"]  # the workers inherit it
    s = procsched.Scheduler(cfg.get("workers", 2), store=cfg["store"], lease=cfg.get("lease", 30.0))
    for spec in cfg.get("tasks", ()):
        add(s, spec)
    answer({"ready": os.getpid(), "t": time.time()})
    for line in sys.stdin:
        cmd, _, rest = line.strip().partition(" ")
        try:
            if cmd == "quit":
                break
            if cmd == "add":
                added = add(s, json.loads(rest))
                answer({"added": added.key, "t": time.time()})
            elif cmd in ("pause", "resume", "cancel"):
                h = s.get(rest)
                ok = h is not None and {"pause": h.pause, "resume": h.resume, "cancel": h.cancel}[cmd]()
                answer({cmd: rest, "ok": bool(ok), "t": time.time()})
            elif cmd == "jobs":
                answer({"jobs": {h.key: h.state.value for h in s.jobs() if h.key}})
            elif cmd == "stats":
                answer({"stats": s.stats().get("store"), "unloadable": sorted(s.stats().get("unloadable", ()))})
            else:
                answer({"error": f"unknown command {cmd!r}"})
        except Exception as exc:  # noqa: BLE001 - a refused call: say so, go on
            answer({"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(limit=3)})
    t = time.time()
    answer({"quitting": True, "t": t})
    s.shutdown(wait=True)
    answer({"closed": True, "t": t, "took": time.time() - t})


if __name__ == "__main__":
    main()
