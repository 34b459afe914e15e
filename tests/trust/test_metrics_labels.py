"""Metrics never carry a task's arguments or output (issue 24): the label
names of every series are a job's name and fixed words (outcome, state,
reason, lease), whatever the runs took as arguments, printed or raised -
the console's /metrics over a program and over a store, and
``procsched run --metrics-port``'s registry."""

from __future__ import annotations

import re

import httpx
from prometheus_client import generate_latest

from procsched._metrics import Metrics
from procsched._store import open_store
from procsched._web import Console
from procsched._web._program import ProgramSource
from procsched._web._store_source import StoreSource
from tests.trust import tasks
from tests.trust.helpers import wait_until

TOKEN = "trust-metrics-token-0123456789"
#: The label names a series may have.
LABELS = {"job", "outcome", "state", "reason", "lease", "le"}
HIDDEN = ("ARGUMENT-7f3a", "OUTPUT-ARGUMENT-7f3a", "ERROR-ARGUMENT-7f3a")


def check(text: str, jobs: set[str]) -> None:
    labels = set(re.findall(r"[{,]([a-zA-Z_]\w*)=\"", text))
    assert labels and labels <= LABELS, labels - LABELS
    values = set(re.findall(r"job=\"([^\"]*)\"", text))
    assert values and values <= jobs, values - jobs
    assert not any(word in text for word in HIDDEN), [w for w in HIDDEN if w in text]


def test_metrics_label_series_by_job_name_only(schedulers, tmp_path):
    db = str(tmp_path / "store.db")
    s = schedulers(1, store=db, capture_output=True)
    metrics = Metrics()
    s.add_listener(metrics.on_event)
    metrics.stats_source = s.stats
    program = ProgramSource(s, "a program")
    handles = [
        s.schedule_at_fixed_rate(tasks.chatty, 0.02, args=("ARGUMENT-7f3a",), name="chatty", key="chatty-key"),
        s.schedule_at_fixed_rate(tasks.chatty, 0.02, args=("ARGUMENT-7f3a",), name="unkeyed"),
    ]
    for h in handles:
        program.add(h, {"kind": "fixed_rate", "period_ns": 20_000_000})
    wait_until(lambda: len(s.history("chatty-key")) >= 4, 30, "runs, some failed")
    # Listeners hear of a run after the store has it: wait for the registry to count both jobs.
    wait_until(
        lambda: all(f'job="{j}"' in generate_latest(metrics.registry).decode() for j in ("chatty", "unkeyed")),
        30,
        "metrics",
    )
    check(generate_latest(metrics.registry).decode(), {"chatty", "unkeyed"})  # --metrics-port's registry
    for source, jobs in ((program, {"chatty", "unkeyed"}), (StoreSource(open_store(db), db), {"chatty-key"})):
        console = Console(source, host="127.0.0.1", port=0, token=TOKEN)
        console.start()
        try:
            answer = httpx.get(f"{console.url.rstrip('/')}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
            assert answer.status_code == 200
            check(answer.text, jobs)
            assert httpx.get(f"{console.url.rstrip('/')}/metrics").status_code == 401  # and only with the token
        finally:
            console.close()
    s.shutdown()
