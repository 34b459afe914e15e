"""The campaign's task: every run writes where and when it ran to one
O_APPEND log (a line is one ``write``, far below PIPE_BUF: atomic), as JSON:

    {"ev": "start"|"end", "i": instance, "k": key, "r": run, "a": attempt,
     "c": cause, "v": definition version, "slot": scheduled_at (us),
     "t": wall time (s), "pid": worker pid, "x": "ok"|"fail"|"crash" (end)}

What a run does is decided by a hash of (key, run, attempt), so a replay
makes the same runs fail, crash or take the same time: it works for up to
``max_ms`` milliseconds, raises ``fail_pct`` % of the time and kills its
worker (``os._exit``: a real crash) ``crash_pct`` % of the time.
"""

from __future__ import annotations

import json
import os
import time
import zlib

import procsched


def _line(path: str, **fields: object) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(fields, separators=(",", ":")) + "\n").encode())
    finally:
        os.close(fd)


def work(log: str, key: str, version: int, max_ms: int = 50, fail_pct: int = 0, crash_pct: int = 0) -> None:
    run = procsched.current_run()
    assert run is not None
    me = {"i": os.environ.get("CAMPAIGN_INSTANCE", "?"), "k": key, "r": run.run, "a": run.attempt,
          # RunInfo.cause comes with issue 22 (schedule control); "schedule" until then
          "c": getattr(run, "cause", "schedule"), "v": version,
          "slot": None if run.scheduled_at is None else round(run.scheduled_at.timestamp() * 1e6),
          "pid": os.getpid()}  # fmt: skip
    _line(log, ev="start", t=time.time(), **me)
    h = zlib.crc32(f"{key}:{run.run}:{run.attempt}".encode())
    if max_ms:
        time.sleep((h % (max_ms + 1)) / 1000)
    roll = (h >> 12) % 100
    if roll < crash_pct:
        _line(log, ev="end", t=time.time(), x="crash", **me)
        os._exit(7)
    if roll < crash_pct + fail_pct:
        _line(log, ev="end", t=time.time(), x="fail", **me)
        raise RuntimeError(f"{key} run {run.run} attempt {run.attempt} fails on purpose")
    _line(log, ev="end", t=time.time(), x="ok", **me)
