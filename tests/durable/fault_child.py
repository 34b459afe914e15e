"""The user program of the durable fault test: keyed tasks on a store, one
line on stdout per ended run (the parent kills it after a random number)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jobs_mod

import procsched


def start(store: str) -> procsched.Scheduler:
    """The scheduler of a fault test's child: one line on stdout per ended run."""

    def on_event(event: dict) -> None:
        if event["event"] != "run_started":
            os.write(1, f"{event['event']}\n".encode())

    s = procsched.Scheduler(2, store=store)
    s.add_listener(on_event)
    return s


def serve(s: procsched.Scheduler) -> None:
    """Say ready; then run until killed, or (a clean run) until a line on stdin, then shut down."""
    os.write(1, b"ready\n")
    sys.stdin.readline()
    if len(sys.argv) > 3:
        s.shutdown(wait=True)
        os.write(1, b"closed\n")


def main() -> None:
    store, out = sys.argv[1], sys.argv[2]
    s = start(store)
    s.schedule_at_fixed_rate(jobs_mod.record, 0.02, args=(out + ".a",), key="a")
    s.schedule_at_fixed_rate(
        jobs_mod.record, 0.03, args=(out + ".b",), key="b", retry=procsched.Retry(attempts=3, delay=0, on=("crashed",))
    )
    serve(s)


if __name__ == "__main__":
    main()
