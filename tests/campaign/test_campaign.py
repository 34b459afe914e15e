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
# resume undone by an adopter's stale pause); both pass since. An expected
# failure (not strict) while issue 20's 30-minute campaigns still found
# violations; strict since the session whose campaigns' last violations
# were explained (tests/promises/test_issue20_campaign.py, items 10-12).


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_a_seeded_fault_campaign_finds_no_violation(store, tmp_path, request) -> None:
    cluster = request.getfixturevalue("pg_server") if store == "postgresql" else None
    report = run_campaign(store, FAULT_PHASE_S, SEEDS[store], workdir=str(tmp_path), cluster=cluster)
    print(report.summary())
    assert report.runs_checked > 50, report.summary()  # the campaign ran: its tasks ran
    assert not report.violations, report.summary()
