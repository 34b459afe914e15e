"""The dispatcher's garbage-collector policy: freeze while the pending count grows.

Every pending task is a long-lived object (its core record, its heap entry,
its payload). CPython's cyclic GC walks every young object once or twice
(generations 0 and 1) and every long-lived one in each full collection,
which comes whenever they have grown by a quarter: scheduling a million
tasks walks each record three to eight times, more than doubling the cost
of ``schedule`` (benchmarks/core_scale.py: 0.57 -> 1.9 us/op). A record
holds no reference cycle, so all those walks find nothing.

The dispatcher runs no user code, so the policy of its collector is ours.
It is called after each batch of commands with the pending count:

    pending >= FREEZE_FLOOR and grown by FREEZE_STEP since the last freeze
        -> gc.freeze()    O(1), a list splice: every object alive moves to
                          the permanent generation, which collections skip.
                          The records of the last batch go there before any
                          collection has walked them, so bulk adds cost the
                          GC next to nothing. For that, a young collection
                          must not come in the middle of a batch: by default
                          it comes every 700 allocations (an add makes 4 or
                          5: some 150 adds, and a 64 KiB read of commands
                          holds ~400), so from the first freeze to the thaw
                          it waits for YOUNG_WHILE_FROZEN.
    pending < FREEZE_FLOOR / 2, something frozen since the last thaw
        -> gc.unfreeze() + gc.collect()   the thaw: one full collection,
                          of fewer than FREEZE_FLOOR / 2 records (~5 ms; at
                          500,000 it would stall the dispatcher ~150 ms);
                          the collector's thresholds are restored.

Frozen objects are still freed by reference counting, so finished tasks
free their records as before. What freezing costs is that cyclic garbage
whose objects were alive at a freeze is collected only at the next thaw,
once the backlog has drained. The dispatcher makes little (measured: ~500
objects over 5,000 runs with errors and crashes, most of it at start-up and
when a worker is replaced), and only what is alive while more than
FREEZE_FLOOR tasks are pending and their count grows can be frozen. Below
the floor nothing is frozen: full collections of that few records are
cheap, and the gap between floor and thaw keeps a count that hovers near
the floor from collecting at every crossing.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

#: Nothing is frozen below this many pending tasks.
FREEZE_FLOOR = 20_000
#: Above the floor, freeze each time the pending count has grown by this
#: much since the last freeze (or since its lowest point after it).
FREEZE_STEP = 64
#: While frozen, a young collection waits for this many allocations (net of
#: deallocations; CPython's default: 700): more than a batch of commands
#: makes, so the records it adds are frozen before any collection walks them.
YOUNG_WHILE_FROZEN = 10_000


class FreezeOnGrowth:
    __slots__ = ("mark", "frozen", "thresholds")

    def __init__(self) -> None:
        self.mark = 0  # pending count at the last freeze (or its lowest point since)
        self.frozen = False  # something was frozen since the last thaw
        self.thresholds = gc.get_threshold()  # the collector's, restored at the thaw

    def __call__(self, pending: int) -> None:
        """Call after each batch of commands (cheap: two comparisons)."""
        if pending - self.mark >= FREEZE_STEP:
            self.mark = pending
            if pending >= FREEZE_FLOOR:
                if not self.frozen:
                    self.thresholds = gc.get_threshold()
                    gc.set_threshold(max(YOUNG_WHILE_FROZEN, self.thresholds[0]), *self.thresholds[1:])
                    self.frozen = True
                gc.freeze()
        elif pending < self.mark:  # growth counts from the lowest point since the last freeze
            self.mark = pending
            if self.frozen and pending < FREEZE_FLOOR // 2:
                self.thaw()

    def thaw(self) -> None:
        """Give the frozen objects back to the collector, collect once, and
        restore its thresholds."""
        gc.unfreeze()
        gc.set_threshold(*self.thresholds)
        gc.collect()
        self.frozen = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic GC off while a restart makes its 100,000s of long-lived
    objects (the user process's stored tasks and handles; the dispatcher's
    records of a chunk of them): each full collection would walk all of
    them again, about half of the adoption's time. Restored after (one
    collection of them follows, once)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
