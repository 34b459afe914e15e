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
    "60-second rounds) found four violating rounds of 28 at 118ada4 (two the checker's; seeds 2222 and "
    "2225 fixed since, e065036 and 62dd269), two of 28 at d6f9444 (seed 2417 fixed since, 1c7e1a2; seed "
    "2423 not explained) and two of 28 at 9f1101c (seed 2503, PostgreSQL, a task stalled; seed 2504, "
    "SQLite, a one-shot run twice: not investigated). It runs every time; a violation is reported, not "
    "hidden",
)
@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_a_seeded_fault_campaign_finds_no_violation(store, tmp_path, request) -> None:
    cluster = request.getfixturevalue("pg_server") if store == "postgresql" else None
    report = run_campaign(store, FAULT_PHASE_S, SEEDS[store], workdir=str(tmp_path), cluster=cluster)
    print(report.summary())
    assert report.runs_checked > 50, report.summary()  # the campaign ran: its tasks ran
    assert not report.violations, report.summary()
