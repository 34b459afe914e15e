"""Retries with backoff, decided where the exception lives.

`fetch` fails twice with a ConnectionError and then succeeds: with
`Retry(attempts=4, delay=0.1, backoff=2)` it is tried again 0.1 s, then
0.2 s after each failure - each attempt a RunInfo with the same `run` and
the next `attempt`. `Retry.on` names outcomes ("error", "crashed",
"timeout") or exception classes; the class check happens in the worker
process, where the exception exists (the dispatcher never unpickles user
objects). A ValueError is a bug, not a hiccup: it is not retried. And a
worker that crashes (os._exit) is retried too: "crashed" is in `on`.

    python examples/retries_and_backoff.py
"""

from __future__ import annotations

import os

import procsched
from procsched import Retry, current_run


def fetch() -> str:
    info = current_run()
    if info.attempt <= 2:
        raise ConnectionError(f"upstream not ready (attempt {info.attempt})")
    return f"fetched on attempt {info.attempt}"


def buggy() -> None:
    raise ValueError("a bug: retrying will not help")


def crashy() -> str:
    if current_run().attempt == 1:
        os._exit(3)  # the worker process dies
    return "survived on attempt 2"


def show(handle: procsched.TaskHandle) -> None:
    first = handle.runs[0].finished_at
    for r in handle.runs:
        print(f"    run {r.run} attempt {r.attempt}: {r.outcome:8} started {r.started_at - first:+.2f} s")  # type: ignore[operator]


def main() -> None:
    network = Retry(attempts=4, delay=0.1, backoff=2.0, on=(ConnectionError, "crashed"))
    with procsched.Scheduler(workers=2) as s:
        ok = s.schedule(fetch, retry=network)
        print("fetch ->", ok.result(30))
        show(ok)
        bad = s.schedule(buggy, retry=network)
        try:
            bad.result(30)
        except ValueError as exc:
            print(f"buggy -> raised {exc!r} after {len(bad.runs)} attempt (ValueError is not in `on`)")
        crash = s.schedule(crashy, retry=network)
        print("crashy ->", crash.result(30), [r.outcome for r in crash.runs])


if __name__ == "__main__":
    main()
