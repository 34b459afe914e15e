"""The campaign checker's own rules, on made-up evidence (no instances run)."""

from __future__ import annotations

from tests.campaign.campaign import Life
from tests.campaign.checker import Attempt, _overlap
from tests.campaign.storesql import RunRow

LEASE = 1.0


def _case(crash_at: float | None) -> tuple[list, list]:
    """B's run 10 under way (from 100.0) when B is stopped at 100.2 for 0.9 s
    (less than the lease) and killed at 101.1; A runs 11 from 101.0. The store
    recorded run 10 ended at ``crash_at`` (None: still in flight)."""
    b = Life("B", 1, "B.1", started=90.0, ended=101.1, how="kill", stops=[(100.2, 101.1)])
    a = Life("A", 1, "A.1", started=90.0)
    attempts = [
        Attempt("r2", 10, 1, "B.1", 1, None, 111, start=100.0, end=101.1),
        Attempt("r2", 11, 1, "A.1", 1, None, 222, start=101.0, end=101.2, x="ok"),
    ]
    error = None if crash_at is None else "SchedulerDied"
    rows = [
        RunRow("r2", 10, 1, 0, 0, None if crash_at is None else int(crash_at * 1e9), 111, "crashed", error, "B"),
        RunRow("r2", 11, 1, 0, 0, int(101.2e9), 222, "ok", None, "A"),
    ]
    return _overlap(attempts, {"B.1": b, "A.1": a}, LEASE, rows)


def test_a_take_over_while_the_instance_was_stopped_is_the_documented_overlap() -> None:
    found, documented = _case(crash_at=100.95)  # taken over during the stop: the lease ran out then
    assert not found and [v.kind for v in documented] == ["overlap (documented)"]


def test_an_overlap_with_no_take_over_during_a_stop_is_a_violation() -> None:
    found, documented = _case(crash_at=101.15)  # recorded after the kill: not while stopped
    assert [v.kind for v in found] == ["overlap"] and not documented
    found, _ = _case(crash_at=None)
    assert [v.kind for v in found] == ["overlap"]
