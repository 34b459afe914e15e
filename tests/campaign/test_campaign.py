"""The fault campaign, a seeded short run per store (issue 20, "Beyond the
list"): three instances, a 10-second fault phase, a calm phase, clean
shutdowns, then the checker (tests/campaign/checker.py). About 20 s of
wall time per store: ``slow``.

A failure prints the seed and the fault schedule; replay it with
``python -m benchmarks.campaign --store STORE --seed SEED --seconds 10``
(the same faults in the same order; the runs' timing differs).
"""

from __future__ import annotations

import pytest

from tests.campaign.campaign import run_campaign

FAULT_PHASE_S = 10.0
SEEDS = {"sqlite": 10, "postgresql": 11}

# These seeds (and others) found, on 7945013 and after issue 20's items were fixed, the
# root causes tests/promises/test_issue20_campaign.py reproduces one by one
# (run numbers reused after a delete and re-insert of a key, a changed
# definition missed by an adopter, a dispatcher dying of a locked store, a
# resume undone by an adopter's stale pause); both pass since.


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.xfail(
    strict=False,
    reason="issue 20, open: the issue's own command (python -m benchmarks.campaign --minutes 30, "
    "60-second rounds) found 4, 2, 2 and 3 violating rounds of 27-28 in earlier campaigns (each since fixed "
    "or answered by a corrected checker rule, except seed 2423), and one of 28 at 121e40f (seed 2716, SQLite: 16 slots "
    "of r1 lost around a deploy of a changed definition). It runs every time; a violation is reported, "
    "not hidden",
)
@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_a_seeded_fault_campaign_finds_no_violation(store, tmp_path, request) -> None:
    cluster = request.getfixturevalue("pg_server") if store == "postgresql" else None
    report = run_campaign(store, FAULT_PHASE_S, SEEDS[store], workdir=str(tmp_path), cluster=cluster)
    print(report.summary())
    assert report.runs_checked > 50, report.summary()  # the campaign ran: its tasks ran
    assert not report.violations, report.summary()
