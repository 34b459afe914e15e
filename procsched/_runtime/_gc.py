"""The dispatcher's garbage-collector policy: freeze after bulk adds.

Every pending task is a long-lived object (its core record). CPython's
cyclic GC walks all long-lived objects in each full collection, and a full
collection comes whenever they have grown by a quarter: scheduling a million
tasks walks them several times over, more than doubling the cost of
``schedule`` (benchmarks/core_scale.py). The dispatcher runs no user code,
so the policy of its collector is ours: each time the pending count has
grown by FREEZE_STEP since the last freeze (or since its lowest point after
it), a young-generation collection clears the cyclic garbage of the last
moments, then ``gc.freeze()`` (a list splice, O(1)) moves every object alive
into the permanent generation, which collections skip. Frozen objects are
still freed by reference counting (a task record holds no reference cycle),
so nothing is kept alive by this; what freezing costs is that cyclic garbage
old enough to be in the oldest generation at that moment is never collected
(the dispatcher runs no user code and makes little: exceptions it logged).
"""

from __future__ import annotations

import gc

#: Freeze each time the pending count has grown by this much.
FREEZE_STEP = 20_000


class FreezeOnGrowth:
    __slots__ = ("mark",)

    def __init__(self) -> None:
        self.mark = 0  # pending count at the last freeze

    def __call__(self, pending: int) -> None:
        """Call after adding tasks (cheap: a comparison)."""
        if pending - self.mark >= FREEZE_STEP:
            gc.collect(1)  # the young generations' cyclic garbage first (cheap: FREEZE_STEP objects or so)
            gc.freeze()  # O(1): a list splice
            self.mark = pending
        elif pending < self.mark:  # growth counts from the lowest point since the last freeze
            self.mark = pending
