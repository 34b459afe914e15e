"""An add the core refuses changes nothing: no task, no heap entry, no count."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from procsched._core import Schedule, SchedulerCore
from procsched._core._calendar import CronTrigger

NS = 1_000_000_000


def snapshot(core: SchedulerCore) -> tuple[object, ...]:
    return (core.task_ids(), len(core), len(core._timers), len(core._ready), core._dead, core._buried, core.calendars)


def test_a_calendar_task_without_a_slot_before_its_until() -> None:
    core = SchedulerCore()
    wall0 = int(datetime(2030, 1, 1, tzinfo=UTC).timestamp()) * NS
    core.set_wall_offset(wall0)
    core.add(5, task_id=3)
    cancelled = core.add(5, task_id=4)
    core.cancel(cancelled)  # buried: its id may be chosen again
    before = snapshot(core)
    schedule = Schedule.calendar(CronTrigger("* * * * * *", UTC), until_ns=0)  # until: the call itself
    with pytest.raises(ValueError, match="no slot before its until"):
        core.add(0, schedule=schedule, task_id=cancelled, start_wall_ns=wall0)
    assert snapshot(core) == before


def test_an_id_in_use() -> None:
    core = SchedulerCore()
    tid = core.add(5, task_id=9)
    before = snapshot(core)
    with pytest.raises(ValueError, match="already in use"):
        core.add(1, task_id=tid, payload="other")
    assert snapshot(core) == before
    run = core.claim(5)
    assert run is not None and run.task_id == tid and run.payload is None
