"""Fixed rate vs fixed delay, measured on real time.

The experiment of docs/DESIGN.md (Semantics): a 400 ms schedule whose first run, at 200 ms,
takes 1 s (the others are instant). Four tasks run it side by side:

- fixed rate, misfire="catch_up" (the default): the runs missed during the
  overrun are made up back to back, then the grid resumes;
- fixed rate, misfire="skip": the missed slots are dropped;
- fixed rate, misfire="coalesce": one run stands for all the missed slots;
- fixed delay: the next run is 400 ms after the previous one *finishes*.

It prints when each run started, in ms after scheduling.

    python examples/fixed_rate_vs_fixed_delay.py
"""

from __future__ import annotations

import time

import procsched

PERIOD = 0.4
FIRST = 0.2
OVERRUN = 1.0
WATCH = 2.1  # seconds


def job() -> None:
    if procsched.current_run().run == 1:
        time.sleep(OVERRUN)


def main() -> None:
    with procsched.Scheduler(4) as scheduler:
        for done in [scheduler.submit(time.sleep, 0.05) for _ in range(4)]:
            done.result()  # all four workers are up
        start = time.monotonic()
        handles = {
            "fixed rate (catch_up)": scheduler.schedule_at_fixed_rate(job, PERIOD, initial_delay=FIRST),
            "fixed rate (skip)": scheduler.schedule_at_fixed_rate(job, PERIOD, initial_delay=FIRST, misfire="skip"),
            "fixed rate (coalesce)": scheduler.schedule_at_fixed_rate(
                job, PERIOD, initial_delay=FIRST, misfire="coalesce"
            ),
            "fixed delay": scheduler.schedule_with_fixed_delay(job, PERIOD, initial_delay=FIRST),
        }
        time.sleep(WATCH - (time.monotonic() - start))
    # Each task's first run was scheduled for exactly start + 200 ms: measure from there.
    starts = {
        label: [round((run.started_at - (h.runs[0].scheduled_for - FIRST)) * 1000) for run in h.runs]
        for label, h in handles.items()
    }
    width = max(len(label) for label in starts)
    print(f"period {PERIOD * 1000:.0f} ms; the first run, at {FIRST * 1000:.0f} ms, takes {OVERRUN * 1000:.0f} ms."
          f" Run start times (ms), up to {WATCH * 1000:.0f} ms:\n")  # fmt: skip
    for label, times in starts.items():
        print(f"  {label:<{width}}  " + "  ".join(f"{t:>5}" for t in times if t <= WATCH * 1000))
    print("\ndocs/DESIGN.md, the reference: fixed rate 200, ~1200, ~1200, 1400, 1800; fixed delay 200, ~1600, ~2000.")


if __name__ == "__main__":
    main()
