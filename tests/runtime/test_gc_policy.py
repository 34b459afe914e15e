"""The dispatcher's GC policy (procsched/_runtime/_gc.py): from FREEZE_FLOOR
pending tasks up, freeze once per FREEZE_STEP of growth of the pending count
(never per call); once the count is back under half the floor, thaw and collect."""

from __future__ import annotations

import gc
import weakref

import pytest

from procsched._runtime._gc import FREEZE_FLOOR, FREEZE_STEP, YOUNG_WHILE_FROZEN, FreezeOnGrowth


@pytest.fixture(autouse=True)
def _thawed() -> object:
    thresholds = gc.get_threshold()
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_nothing_frozen_below_the_floor() -> None:
    keep = [[i] for i in range(100)]  # some tracked objects to freeze
    policy = FreezeOnGrowth()
    for pending in range(0, FREEZE_FLOOR, FREEZE_STEP):
        policy(pending)
    assert gc.get_freeze_count() == 0 and not policy.frozen
    del keep


def test_freezes_once_per_step_of_growth_above_the_floor() -> None:
    keep = [[i] for i in range(100)]
    policy = FreezeOnGrowth()
    policy(FREEZE_FLOOR)
    assert gc.get_freeze_count() > 0 and policy.frozen and policy.mark == FREEZE_FLOOR
    gc.unfreeze()
    policy(FREEZE_FLOOR + FREEZE_STEP - 1)
    assert gc.get_freeze_count() == 0 and policy.mark == FREEZE_FLOOR  # one freeze per step, not per call
    policy(FREEZE_FLOOR + FREEZE_STEP)
    assert gc.get_freeze_count() > 0 and policy.mark == FREEZE_FLOOR + FREEZE_STEP
    gc.unfreeze()
    policy(FREEZE_FLOOR + 10)  # shrank: the next growth counts from here
    assert policy.mark == FREEZE_FLOOR + 10 and gc.get_freeze_count() == 0
    policy(FREEZE_FLOOR + 10 + FREEZE_STEP)
    assert gc.get_freeze_count() > 0
    del keep


def test_thaws_and_collects_once_the_backlog_has_drained() -> None:
    before = gc.get_threshold()
    policy = FreezeOnGrowth()
    peak = FREEZE_FLOOR + 1000 * FREEZE_STEP
    for pending in range(FREEZE_FLOOR, peak + 1, FREEZE_STEP):
        policy(pending)

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a  # type: ignore[attr-defined]  # a cycle, frozen while alive
    ref = weakref.ref(a)
    policy(peak + FREEZE_STEP)
    assert policy.frozen
    del a, b
    gc.collect()
    assert ref() is not None  # frozen: the collector does not see it
    policy(FREEZE_FLOOR // 2)
    assert policy.frozen and ref() is not None  # not drained below the thaw point yet
    assert gc.get_threshold()[0] == YOUNG_WHILE_FROZEN  # young collections wait longer while frozen
    policy(FREEZE_FLOOR // 2 - 1)  # drained: thaw, collect
    assert not policy.frozen and gc.get_freeze_count() == 0 and ref() is None
    assert gc.get_threshold() == before  # restored
    policy(0)
    assert not policy.frozen  # nothing frozen since: no second collection
    policy(FREEZE_FLOOR - 1)
    assert gc.get_freeze_count() == 0  # below the floor: nothing frozen


def test_frozen_objects_are_still_freed_by_reference_counting() -> None:
    class Record:
        pass

    record = Record()
    ref = weakref.ref(record)
    policy = FreezeOnGrowth()
    policy(FREEZE_FLOOR)
    assert policy.frozen
    del record
    assert ref() is None
