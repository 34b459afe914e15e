"""Bad ``lease=``: a clear ValueError at the call, nothing started."""

from __future__ import annotations

import pytest

import procsched


@pytest.mark.parametrize("lease", [0, -1.0, 0.05, 1e9, float("nan"), True, "30"])
def test_a_bad_lease_is_refused_at_the_call(lease, tmp_path) -> None:
    with pytest.raises(ValueError, match="lease must be seconds"):
        procsched.Scheduler(1, store=str(tmp_path / "s.db"), lease=lease)
    assert not (tmp_path / "s.db").exists()  # nothing opened


def test_a_task_held_elsewhere_is_next_claimed_at_a_slot_not_before_now() -> None:
    from procsched._runtime._durable._peers import store_next
    from procsched._runtime._durable._stored import schedule_of
    from procsched._store import StoredTask, TaskDefinition, TaskState

    def not_before(schedule: dict, slot: int, floor: int) -> int | None:  # (the stored schedule's answer)
        return schedule_of(TaskDefinition("k", "m:f", b"", schedule)).not_before(slot, floor)

    NS = 1_000_000_000
    rate = {"kind": "fixed_rate", "period_ns": NS, "initial_delay_ns": 0, "misfire": "catch_up"}
    assert not_before(rate, 10 * NS, 13 * NS + 1) == 14 * NS
    assert not_before(rate, 10 * NS, 5 * NS) == 10 * NS
    cron = {"kind": "cron", "expr": "*/5 * * * * *", "tz": "UTC", "misfire": "coalesce"}
    assert not_before(cron, 10 * NS, 11 * NS) == 15 * NS
    d = TaskDefinition("k", "m:f", b"", rate)
    held = StoredTask(d, TaskState(7, 10 * NS), holder="other", token=1)
    assert store_next(held, 20 * NS + 1) == (7, 1, 21 * NS)  # its run overlaps 11..20 s: the holder's to catch up
    free = StoredTask(d, TaskState(7, 10 * NS, 2))
    assert store_next(free, 20 * NS) == (7, 2, 10 * NS)  # free: the store's next claim as it is (a retry here)
