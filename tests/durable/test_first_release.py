"""A store written by the first release loads and goes on.

The first release stored a keyed task's schedule and options as JSON of its
own shape (no version; "initial_delay_ns"; stop_on_error, max_runs and
until in the options). ``Schedule.from_record`` reads it, and the hash of a
stored definition is taken over its current form (``stored_hash``), so the
same task scheduled again is the stored one, not a replacement.

Two stores: ``fixtures/first_release.db``, written by a real program of the
first release (``fixtures/write_first_release.py``: schema 1, a registration
left by a SIGKILL), and rows of that shape written through the store API,
on SQLite and PostgreSQL.
"""

from __future__ import annotations

import os
import shutil
import sys
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

import procsched
from procsched import _tz
from procsched._core import Kind, Misfire, Schedule
from procsched._runtime._durable._stored import stored_hash
from procsched._store import TaskDefinition, TaskState, open_store

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import jobs_mod  # noqa: E402

from tests.durable.killing import any_store as any_store  # noqa: E402  (sqlite and postgresql)
from tests.durable.killing import lines  # noqa: E402
from tests.runtime.rt_helpers import Waiter  # noqa: E402

FIXTURE = os.path.join(HERE, "fixtures", "first_release.db")
NS = 1_000_000_000
PARIS = ZoneInfo("Europe/Paris")


def test_the_first_releases_store_file_loads_and_goes_on(tmp_path, monkeypatch):
    db = tmp_path / "first_release.db"
    shutil.copy(FIXTURE, db)
    monkeypatch.chdir(tmp_path)  # its fixed-rate task appends to first_release.runs, here
    s = procsched.Scheduler(1, store=str(db))
    try:
        assert sorted(h.key for h in s.jobs()) == ["cron", "delay", "once", "rate", "retried"]
        rate = s.get("rate")
        # the same definition, scheduled again as the first release's program did: the stored task goes on
        again = s.schedule_at_fixed_rate(
            jobs_mod.record, 0.2, args=("first_release.runs",), misfire="skip", max_runs=1000, key="rate"
        )
        assert again is rate
        Waiter(s).until(lambda: len(lines("first_release.runs")) >= 2)
        cron = s.get("cron")
        assert cron is not None and cron.next_run_at is not None
        assert cron.next_run_at.astimezone(PARIS).hour == 3  # "0 3 * * *" in Europe/Paris
        assert [r.run for r in s.history("rate")][:3] == [1, 2, 3]
    finally:
        s.shutdown(wait=True, cancel_futures=True)  # (its one-shot is due in a day: not waited for)
    runs = [run for run, _attempt, _slot in lines("first_release.runs")]
    assert runs[0] == 4 and runs == list(range(4, 4 + len(runs)))  # run numbers go on from the stored 3


def _first_release_rows(url: str, out: str) -> None:
    """Definitions and states as the first release wrote them."""
    from procsched._runtime._wire import pack_call

    store = open_store(url)
    batch = store.batch()
    args = pack_call(jobs_mod.record, (out,), {})[1]  # (the arguments' blob, as the program makes it)
    plain = {"priority": 0, "timeout_ns": None, "name": None, "retry": None}
    limits = {"stop_on_error": False, "max_runs": None, "until_wall_ns": None}
    rate = {"kind": "fixed_rate", "period_ns": NS // 10, "initial_delay_ns": 0, "misfire": "coalesce"}
    cron = {"kind": "cron", "expr": "0 3 * * *", "tz": "Europe/Paris", "misfire": "coalesce"}
    retry = [3, NS, 2.0, 60 * NS, 0.0, ["crashed", "error"], ["builtins:ValueError"]]
    options = {**plain, **limits, "retry": retry, "stop_on_error": True, "max_runs": 50}
    batch.upsert(TaskDefinition("rate", "jobs_mod:record", args, rate, {**plain, **limits}), TaskState(7, 0))
    batch.upsert(TaskDefinition("cron", "jobs_mod:record", args, cron, options), TaskState(2, None))
    batch.commit()
    store.close()


def test_first_release_rows_load_and_go_on(any_store, tmp_path):
    out = str(tmp_path / "out")
    _first_release_rows(any_store, out)
    with procsched.Scheduler(1, store=any_store) as s:
        rate, cron = s.get("rate"), s.get("cron")
        assert rate is not None and cron is not None
        # Scheduled again with the same definition: the stored task, not a replacement.
        assert s.schedule_at_fixed_rate(jobs_mod.record, 0.1, args=(out,), misfire="coalesce", key="rate") is rate
        Waiter(s).until(lambda: len(lines(out)) >= 2)
    runs = [run for run, _attempt, _slot in lines(out)]
    assert runs[0] == 8  # after the stored 7; its slot long past: coalesced into one run, then the grid
    stored = open_store(any_store)
    assert stored.get("rate").state.run_count >= 9  # type: ignore[union-attr]
    stored.close()


def test_a_first_release_record_reads_as_the_schedule_it_was_written_from():
    wall = 1_700_000_000 * NS
    old_schedule = {"kind": "cron", "expr": "0 3 * * *", "tz": "Europe/Paris", "misfire": "skip"}
    old_options = {
        "priority": 5,
        "timeout_ns": None,
        "name": "n",
        "retry": None,
        "stop_on_error": True,
        "max_runs": 4,
        "until_wall_ns": wall + 3600 * NS,
    }
    schedule, delay = Schedule.from_record(old_schedule, old_options, wall, _tz.zone)
    assert (schedule.kind, schedule.misfire, schedule.stop_on_error, schedule.max_runs) == (
        Kind.CALENDAR,
        Misfire.SKIP,
        True,
        4,
    )
    assert schedule.until_ns == 3600 * NS and delay == 0
    assert schedule.trigger is not None and schedule.trigger.expr == "0 3 * * *" and schedule.trigger.tz == PARIS
    # Written again, it is this version's record of the same schedule: the same hash as the old one's.
    record = schedule.to_record(delay, wall)
    assert record["v"] == 2 and record["kind"] == "cron" and record["until_wall_ns"] == wall + 3600 * NS
    new = {"priority": 5, "timeout_ns": None, "name": "n", "retry": None}
    old_def = TaskDefinition("k", "m:f", b"args", old_schedule, old_options)
    new_def = TaskDefinition("k", "m:f", b"args", record, new)
    assert stored_hash(old_def) == stored_hash(new_def) == new_def.def_hash != old_def.def_hash


@pytest.mark.parametrize(
    "old",
    [
        {"kind": "once", "delay_ns": 5 * NS},
        {"kind": "fixed_rate", "period_ns": NS, "initial_delay_ns": 2 * NS, "misfire": "catch_up"},
        {"kind": "fixed_delay", "period_ns": NS, "initial_delay_ns": 0},
        {"kind": "cron", "expr": "*/5 * * * *", "tz": 19800.0, "misfire": "coalesce"},
        {"kind": "cron", "expr": "@daily", "tz": None, "misfire": "coalesce"},
    ],
)
def test_every_kind_of_first_release_record_round_trips(old):
    options = {
        "priority": 0,
        "timeout_ns": None,
        "name": None,
        "retry": None,
        "stop_on_error": False,
        "max_runs": None,
        "until_wall_ns": None,
    }
    schedule, delay = Schedule.from_record(old, options, 0, _tz.zone)
    assert delay == old.get("delay_ns", old.get("initial_delay_ns", 0))
    again, delay_again = Schedule.from_record(schedule.to_record(delay, 0), {}, 0, _tz.zone)
    assert (again, delay_again) == (schedule, delay)
    if schedule.kind is Kind.ONCE:
        assert schedule is Schedule.once()
    stored = TaskDefinition("k", "m:f", b"", old, options)
    assert (
        stored_hash(stored)
        == TaskDefinition(
            "k",
            "m:f",
            b"",
            schedule.to_record(delay, 0),
            {"priority": 0, "timeout_ns": None, "name": None, "retry": None},
        ).def_hash
    )


def test_a_stored_zone_of_a_fixed_offset_travels_as_seconds():
    trigger_zone = Schedule.from_record({"kind": "cron", "expr": "0 0 * * *", "tz": 19800.0}, {}, 0, _tz.zone)[0]
    assert trigger_zone.trigger is not None
    assert trigger_zone.trigger.tz.utcoffset(datetime(2026, 1, 1)).total_seconds() == 19800  # type: ignore[union-attr]
    assert trigger_zone.to_record(0, 0)["tz"] == 19800.0
