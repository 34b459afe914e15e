"""Issue 22: ``procsched why KEY --store S --json``: the same answer as the
text, machine-readable (the console API's fields, and why)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from cli_helpers import NS, T0, cli_here, fill_store

from procsched._store import open_store


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / NS, UTC).isoformat(timespec="milliseconds")


def test_why_json_lists_the_slots_with_why_and_the_next_ones(tmp_path) -> None:
    url = str(tmp_path / "store.db")
    with open_store(url) as store:
        fill_store(store)
    done = cli_here("why", "report", "--store", url, "-n", "2", "--json")
    assert (done.returncode, done.stderr) == (0, "")
    answer = json.loads(done.stdout)
    assert (answer["key"], answer["name"], answer["state"], answer["paused"]) == ("report", "report", "pending", False)
    assert answer["schedule"] == "every 1 min"
    skipped, run = answer["slots"]  # the last 2 of 3, oldest first
    assert {k: skipped[k] for k in ("run", "outcome", "reason", "scheduled_at", "started_at")} == {
        "run": None,
        "outcome": "skipped",
        "reason": "overlap",
        "scheduled_at": _iso(T0 + 60 * NS),
        "started_at": None,
    }
    assert skipped["why"] == "not run: the task's previous run was still running (overlap='skip')"
    assert (run["run"], run["outcome"], run["cause"], run["error"]) == (2, "error", "manual", "ValueError: bad\nluck")
    assert run["why"].startswith("run now, raised ValueError: bad")
    assert answer["next_slots"] == [_iso(T0 + k * 60 * NS) for k in range(1, 6)]  # (run 1 set the next due)

    paused = json.loads(cli_here("why", "idle", "--store", url, "--json").stdout)
    assert paused["paused"] and paused["slots"] == [] and len(paused["next_slots"]) == 5
    assert cli_here("why", "nope", "--store", url, "--json").returncode == 1
