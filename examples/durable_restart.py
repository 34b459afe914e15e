"""Durable schedules: kill -9 the program, start it again, nothing is lost.

A program schedules two keyed tasks on a SQLite store: `tick`, every 0.1 s
on a fixed grid, and `report`, a one-shot that takes a while and is retried
if it crashes. We SIGKILL the whole program while `report` is running -
no shutdown, no atexit - and start the very same program again:

- `tick` goes on: its run numbers continue and the slots it missed while
  the program was down are caught up (misfire "catch_up");
- `report`'s run that was in flight is recorded `crashed`, and because its
  `Retry` covers crashes, run 1 is tried again (attempt 2) and succeeds;
- the history of both is read back from the store.

The functions live in this module, which the program imports by name
(keyed tasks are stored by import reference, `module:qualname`).

    python examples/durable_restart.py
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time

import procsched
from procsched import Retry, current_run

HERE = os.path.dirname(os.path.abspath(__file__))


def tick() -> None:
    pass


def report() -> str:
    if current_run().attempt == 1:
        time.sleep(60)  # the first attempt is still running when the program is killed
    return "report written"


def program(store: str) -> None:
    """The user program: run as `python -c 'import durable_restart; ...'`."""

    def say(event: dict) -> None:
        if event["event"] == "run_started" and event["name"] == "report":
            print("report started", flush=True)
        elif event["event"].startswith("run_") and event["event"] != "run_started":
            print(f"{event['name']} run {event['run']} attempt {event.get('attempt', 1)}: {event['outcome']}",
                  flush=True)

    with procsched.Scheduler(2, store=store) as s:
        s.add_listener(say)
        s.schedule_at_fixed_rate(tick, 0.1, key="tick", name="tick")
        s.schedule(report, 0.3, key="report", name="report", retry=Retry(attempts=2, delay=0, on=("crashed",)))
        sys.stdin.readline()  # until told to stop (or killed)


def start(store: str) -> subprocess.Popen[str]:
    code = f"import sys; sys.path.insert(0, {HERE!r}); import durable_restart; durable_restart.program({store!r})"
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def wait_for(proc: subprocess.Popen[str], text: str) -> list[str]:
    seen = []
    for line in proc.stdout:  # type: ignore[union-attr]
        seen.append(line.rstrip())
        if text in line:
            return seen
    raise SystemExit(f"the program ended before printing {text!r}: {seen}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "schedules.db")
        first = start(store)
        lines = wait_for(first, "report started")
        lines += wait_for(first, "tick run 5 ")
        os.kill(first.pid, signal.SIGKILL)  # kill -9: no shutdown, no atexit, nothing flushed
        first.wait()
        print(f"1st program: {len([x for x in lines if x.startswith('tick')])} tick runs, report running; "
              f"killed -9 (exit {first.returncode})")
        second = start(store)
        lines = wait_for(second, "report run 1 attempt 2: ok")
        lines += wait_for(second, "tick run 12 ")
        second.stdin.write("stop\n")  # type: ignore[union-attr]
        second.stdin.close()  # type: ignore[union-attr]
        second.wait(30)
        resumed = next(x for x in lines if x.startswith("tick"))
        print(f"2nd program: its first tick is {resumed.split(' attempt')[0]!r} (run numbers go on), "
              f"then {lines[-1]!r}")
        with procsched.Scheduler(1, store=store) as s:  # a third start, just to read the history
            s.shutdown(cancel_futures=True)
            ticks = s.history("tick", 1000)
            reports = s.history("report")
        print(f"tick: runs {ticks[0].run}..{ticks[-1].run}, none missing: "
              f"{[r.run for r in ticks] == list(range(1, ticks[-1].run + 1))}")
        for r in reports:
            print(f"report run {r.run} attempt {r.attempt}: {r.outcome}")


if __name__ == "__main__":
    main()
