"""Issue 22: skipped slots are kept bounded - the last 100 per task in memory."""

from __future__ import annotations

import procsched


def test_a_handle_keeps_the_last_100_slots_newest_last(
    sched: procsched.InlineScheduler, clock: procsched.ManualClock
) -> None:
    skipped: list[dict[str, object]] = []
    sched.add_listener(skipped.append, "run_skipped")
    handle = sched.schedule_at_fixed_rate(int, 1, misfire="skip")
    sched.run_until(0.5)
    for _ in range(3):  # each pause passes 150 slots: 3 x 100 recorded (the newest of each step)
        handle.pause()
        sched.run_until(clock.now() + 150)
        handle.resume()
        sched.run_until(clock.now() + 0.5)
    assert len(skipped) == 300
    slots = handle.slots(limit=1000)
    assert len(slots) == 100
    assert [s.scheduled_for for s in slots] == sorted(s.scheduled_for for s in slots)
    assert slots[-1].outcome == "ok" and slots[-1].scheduled_for == 452.0  # resumed at 451.5
    assert slots[-2].reason == "paused" and slots[-2].scheduled_for == slots[-1].scheduled_for - 1
    assert len(handle.slots()) == 100 and handle.slots(limit=3) == slots[-3:]
