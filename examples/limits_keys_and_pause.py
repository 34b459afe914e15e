"""Limits, keys and job management: max_runs, until, get/jobs, pause/resume.

A fixed-rate job with `max_runs=3` ends DONE after its third run; one with
`until=` ends when its next run would be later. Keys name tasks stably:
scheduling a key that a live task holds is an error unless
`replace_existing=True`. `jobs()` lists the live tasks, `get(key)` finds
one, and a paused task runs no slot until it is resumed - then it continues
at its next slot from now. Told on a ManualClock (same API on `Scheduler`).

    python examples/limits_keys_and_pause.py
"""

from __future__ import annotations

from procsched import InlineScheduler, ManualClock


def main() -> None:
    clock = ManualClock()
    s = InlineScheduler(clock)
    three = s.schedule_at_fixed_rate(lambda: "tick", 10, max_runs=3, key="three-ticks")
    until = s.schedule_at_fixed_rate(lambda: "tock", 15, until=40, key="until-40s")
    poll = s.schedule_at_fixed_rate(lambda: "poll", 5, key="poll")
    print("jobs():", [h.key for h in s.jobs()])
    try:
        s.schedule_at_fixed_rate(lambda: "dup", 5, key="poll")
    except ValueError as exc:
        print("duplicate key ->", exc)
    poll2 = s.schedule_at_fixed_rate(lambda: "poll v2", 5, key="poll", replace_existing=True)
    print(f"replace_existing=True -> the old 'poll' is {poll.state.name}, get('poll') is the new one: {s.get('poll') is poll2}")

    s.run_until(12)
    print(f"t=12: pause 'poll' (it ran at {[r.scheduled_for for r in poll2.runs]})")
    poll2.pause()
    s.run_until(33)
    print(f"t=33: 'poll' is {poll2.state.name}, still {len(poll2.runs)} runs; resume")
    poll2.resume()
    print(f"      next run at {poll2.next_run} s (its next slot from now), at {poll2.next_run_at:%H:%M:%S} UTC")
    s.run_until(60)
    print(f"three-ticks: runs at {[r.scheduled_for for r in three.runs]} -> {three.state.name}, result {three.result()}")
    print(f"until-40s:   runs at {[r.scheduled_for for r in until.runs]} -> {until.state.name}")
    print(f"poll:        runs at {[r.scheduled_for for r in poll2.runs]}")
    print("jobs():", [h.key for h in s.jobs()])
    s.shutdown()


if __name__ == "__main__":
    main()
