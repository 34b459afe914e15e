"""The dispatcher's GC policy (procsched/_runtime/_gc.py): freeze once per
FREEZE_STEP of growth of the pending count, never per call."""

from __future__ import annotations

import gc

from procsched._runtime._gc import FREEZE_STEP, FreezeOnGrowth


def test_freezes_once_per_step_of_growth() -> None:
    before = gc.get_freeze_count()
    keep = [[i] for i in range(100)]  # some tracked objects to freeze
    policy = FreezeOnGrowth()
    try:
        for pending in range(0, FREEZE_STEP, 1000):
            policy(pending)
        assert gc.get_freeze_count() == before  # not grown enough yet
        policy(FREEZE_STEP)
        frozen = gc.get_freeze_count()
        assert frozen > before and policy.mark == FREEZE_STEP
        policy(FREEZE_STEP + 10)
        assert policy.mark == FREEZE_STEP  # one freeze per step, not per call
        policy(0)  # drained: the next growth counts from 0
        assert policy.mark == 0
        policy(FREEZE_STEP)
        assert policy.mark == FREEZE_STEP
    finally:
        gc.unfreeze()
    del keep


def test_frozen_objects_are_still_freed_by_reference_counting() -> None:
    import weakref

    class Record:
        pass

    record = Record()
    ref = weakref.ref(record)
    policy = FreezeOnGrowth()
    try:
        policy(FREEZE_STEP)
        del record
        assert ref() is None
    finally:
        gc.unfreeze()
