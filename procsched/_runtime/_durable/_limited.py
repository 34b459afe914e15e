"""Keyed runs waiting for a shared limit held on other instances.

With a store, a group's limit (``Scheduler(limits=...)``, ``group=``) is
counted in the claim transaction, over every instance's runs in flight
(``_store/_writes.py``): a claim over the limit comes back ``limited`` - not
lost (the run is nobody else's), not started. Its run stays claimed here,
held at its worker (never sent), and its claim goes to the store again
after a back-off (20 ms, doubling to 500 ms while claims keep coming back
limited): another instance's run of the group ends without telling this
one, so a bounded wait is the way to hear of it. Its ``run_started`` event
waits with it: the user hears of the start once the store recorded it.

The journal (``_journal.py``) calls ``wait`` when a commit answers, and
``due`` at each turn; ``at`` is when the dispatcher must wake for them.

Known limit of this release: the waiting run keeps its worker (and the runs
given ahead to that worker wait behind it), as a run whose commit failed
does; give an instance more workers than its share of a contended limit.
"""

from __future__ import annotations

from typing import Any

from ..._core._units import NS
from .. import _messages as m

#: The first back-off of a limited claim, and the most it grows to.
FIRST_NS = 20_000_000
MAX_NS = NS // 2

#: A claim, as the journal keys it: (task id, run, attempt).
Claim = tuple[int, int, int]


class Limited:
    """Claims over their group's limit, and their start events."""

    def __init__(self) -> None:
        self.claims: list[Claim] = []
        self.starts: list[m.Message] = []  # their RunStarted events, told once they are recorded
        self.at: int | None = None  # when to claim them again
        self.backoff = 0
        self.last = 0  # when the last claims came back limited

    def wait(
        self,
        limited: list[tuple[str, int, int]],
        mine: list[tuple[Claim, list[Any]]],
        told: list[m.Message],
        now: int,
        queued: int,
    ) -> list[m.Message]:
        """The commit's claims ``limited`` (key, run, attempt) wait: their
        stage goes back to ``queued`` (the journal's stage of a claim whose
        start is still to be written), their start events are kept. Returns
        ``told`` without those events."""
        refused = set(limited)
        ids: set[tuple[int, int]] = set()
        for claim, known in mine:
            if (known[2], claim[1], claim[2]) in refused:
                known[0] = queued
                self.claims.append(claim)
                ids.add((claim[0], claim[1]))
        rest: list[m.Message] = []
        for ev in told:
            if ev[0] == m.RUN_STARTED and ((s := m.view(m.RunStarted, ev)).task_id, s.run) in ids:
                self.starts.append(ev)
            else:
                rest.append(ev)
        fresh = now - self.last > 2 * MAX_NS
        self.backoff = FIRST_NS if fresh or not self.backoff else min(2 * self.backoff, MAX_NS)
        self.last = now
        self.at = now + self.backoff
        return rest

    def due(self, now: int, told: list[m.Message], claims: dict[Claim, list[Any]]) -> list[Claim]:
        """The claims to send again now (still claimed here), their start
        events back in ``told`` (in order, before this turn's)."""
        if self.at is None or now < self.at:
            return []
        waiting = [c for c in self.claims if c in claims]
        live = {(c[0], c[1]) for c in waiting}
        told.extend(
            ev for ev in self.starts if (m.view(m.RunStarted, ev).task_id, m.view(m.RunStarted, ev).run) in live
        )
        self.claims, self.starts, self.at = [], [], None
        return waiting
