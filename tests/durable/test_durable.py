"""Durable keyed tasks end to end: Scheduler(store=...), restarts, crashes.

Real processes and a real SQLite file; every wait is on a pipe (the child
program prints a line per event) or on scheduler events, never a sleep.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import pickle
import sqlite3
import sys
import threading
import time

import pytest

import procsched
from procsched._store import StoredTask, open_store

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import jobs_mod  # noqa: E402

from tests.durable.killing import any_store as any_store  # noqa: E402  (sqlite and postgresql)
from tests.durable.killing import check_exact, kill_and_restart  # noqa: E402
from tests.durable.killing import lines as _lines  # noqa: E402
from tests.runtime.rt_helpers import Waiter  # noqa: E402

# -- bad input -------------------------------------------------------------------


def test_keyed_lambda_or_closure_refused_at_the_call(tmp_path):
    def nested() -> None:
        pass

    with procsched.Scheduler(1, store=str(tmp_path / "s.db")) as s:
        with pytest.raises(TypeError, match="lambda"):
            s.schedule(lambda: None, 10, key="l")
        with pytest.raises(TypeError, match="nested function or closure"):
            s.schedule_at_fixed_rate(nested, 10, key="n")
        assert s.jobs() == []
        h = s.schedule(lambda: 3)  # unkeyed tasks stay in memory: anything picklable
        assert h.result(30) == 3
    assert open_store(str(tmp_path / "s.db")).jobs() == []


def test_bad_store_is_a_store_error_at_the_call(tmp_path):
    with pytest.raises(procsched.StoreError, match="does not exist"):
        procsched.Scheduler(1, store=str(tmp_path / "missing" / "s.db"))
    bad = tmp_path / "not.db"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(procsched.StoreError):
        procsched.Scheduler(1, store=str(bad))
    with pytest.raises(ValueError, match="runner='processes'"):
        procsched.Scheduler(1, runner="threads", store=str(tmp_path / "s.db"))


# -- restarts --------------------------------------------------------------------


def test_restart_continues_run_numbers_and_resumes_unscheduled_tasks(tmp_path):
    db, out = str(tmp_path / "s.db"), str(tmp_path / "out")
    with procsched.Scheduler(2, store=db) as s:
        w = Waiter(s)
        s.schedule_at_fixed_rate(jobs_mod.record, 0.02, args=(out,), key="tick")
        w.until(lambda: len(_lines(out)) >= 5)
    runs_before = max(r for r, _a, _s in _lines(out))
    # The program does not schedule "tick" again: it is resumed from the store.
    with procsched.Scheduler(2, store=f"sqlite:///{db}") as s:
        w = Waiter(s)
        handle = s.get("tick")
        assert handle is not None and handle.key == "tick"
        w.until(lambda: max(r for r, _a, _s in _lines(out)) >= runs_before + 5)
        history = s.history("tick")
    lines = _lines(out)
    runs = [r for r, _a, _s in lines]
    assert len(runs) == len(set(runs)), "a run ran twice"
    assert sorted(runs) == list(range(1, len(runs) + 1)), "run numbers did not go on"
    # fixed rate, catch_up: every slot of the grid ran, across the restart
    slots = sorted(s for _r, _a, s in lines)
    period_us = 20_000
    assert all(abs((b - slots[0]) - i * period_us) <= 1000 for i, b in enumerate(slots))
    assert [h.run for h in history] == list(range(history[0].run, history[-1].run + 1))
    assert all(h.outcome in ("ok", None) for h in history)


def test_same_definition_continues_changed_definition_replaces(tmp_path, caplog):
    db, out = str(tmp_path / "s.db"), str(tmp_path / "out")
    with procsched.Scheduler(1, store=db) as s:
        w = Waiter(s)
        h = s.schedule_at_fixed_rate(jobs_mod.record, 0.05, args=(out,), key="k")
        w.until(lambda: len(_lines(out)) >= 2)
    with procsched.Scheduler(1, store=db) as s:
        w = Waiter(s)
        adopted = s.get("k")
        h = s.schedule_at_fixed_rate(jobs_mod.record, 0.05, args=(out,), key="k")
        assert h is adopted  # the same definition: the stored task goes on
        with pytest.raises(ValueError, match="held by live task"):
            s.schedule_at_fixed_rate(jobs_mod.record, 0.05, args=(out,), key="k")
        w.until(lambda: len(_lines(out)) >= 4)
    n = max(r for r, _a, _s in _lines(out))
    with caplog.at_level(logging.WARNING, logger="procsched"):
        with procsched.Scheduler(1, store=db) as s:
            w = Waiter(s)
            h = s.schedule_at_fixed_rate(jobs_mod.record, 0.07, args=(out,), key="k")  # changed period
            w.until(lambda: max(r for r, _a, _s in _lines(out)) >= n + 2)
    assert "definition changed" in caplog.text
    runs = [r for r, _a, _s in _lines(out)]
    assert sorted(runs) == list(range(1, len(runs) + 1))  # run numbers go on across the replacement
    stored = open_store(db).get("k")
    assert stored is not None and stored.definition.schedule["period_ns"] == 70_000_000


def test_one_shot_keyed_task_leaves_the_live_set_its_runs_stay(tmp_path):
    db = str(tmp_path / "s.db")
    with procsched.Scheduler(1, store=db) as s:
        h = s.schedule(jobs_mod.add, 0, args=(2, 3), key="once")
        assert h.result(30) == 5
        Waiter(s).until(lambda: s.get("once") is None)
    store = open_store(db)
    assert store.get("once") is None
    assert [(r.run, r.outcome) for r in store.history("once")] == [(1, "ok")]
    with procsched.Scheduler(1, store=db) as s:  # not run again
        assert s.jobs() == [] and [r.outcome for r in s.history("once")] == ["ok"]


def test_a_one_shot_due_later_survives_a_restart(tmp_path):
    db = str(tmp_path / "s.db")
    with procsched.Scheduler(1, store=db) as s:
        h = s.schedule(jobs_mod.add, 3600, args=(1, 1), key="later")
        s.shutdown(cancel_futures=True)
    assert h.cancelled()
    stored = open_store(db).get("later")
    assert stored is not None and stored.state.next_due_ns > time.time_ns() + 3500 * 10**9
    with procsched.Scheduler(1, store=db) as s:
        h = s.get("later")
        assert h is not None and h.next_run_at is not None
        assert abs(h.next_run_at.timestamp() * 1e9 - stored.state.next_due_ns) < 10**9
        s.shutdown(cancel_futures=True)


def test_unloadable_task_is_kept_and_visible(tmp_path):
    db = str(tmp_path / "s.db")
    store = open_store(db)
    from procsched._store import TaskDefinition

    b = store.batch()
    b.upsert(
        TaskDefinition(
            "ghost",
            "no_such_module_xyz:fn",
            pickle.dumps(((), {})),
            {"kind": "once", "delay_ns": 0},
            {
                "priority": 0,
                "timeout_ns": None,
                "stop_on_error": False,
                "name": None,
                "max_runs": None,
                "retry": None,
                "until_wall_ns": None,
            },
        )
    )
    b.commit()
    with procsched.Scheduler(1, store=db) as s:
        stats = s.stats()
        assert "ghost" in stats["unloadable"] and "ModuleNotFoundError" in stats["unloadable"]["ghost"]
        assert s.jobs() == []
    kept = open_store(db).get("ghost")
    assert kept is not None and kept.unloadable and "ModuleNotFoundError" in kept.unloadable


# -- crashes: the user process SIGKILLed -------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_sigkill_at_random_instants_loses_nothing_runs_nothing_twice(tmp_path, any_store):
    out = str(tmp_path / "out")
    kill_and_restart("fault_child.py", any_store, out, most_lines=12, last_lines=6)
    assert check_exact(any_store, out, "a", 20_000, retried=False)  # the kills hit runs in flight
    check_exact(any_store, out, "b", 30_000, retried=True)


def _run_then_pause(db: str, out: str, runs: int) -> None:
    """A scheduler on ``db`` runs keyed task "p" (its runs logged in ``out``)
    ``runs`` times, pauses it and shuts down."""
    with procsched.Scheduler(1, store=db) as s:
        w = Waiter(s)
        h = s.schedule_at_fixed_rate(jobs_mod.record, 0.05, args=(out,), key="p")
        w.until(lambda: len(_lines(out)) >= runs)
        assert h.pause()
        w.until(lambda: h.state is procsched.TaskState.PAUSED)


def test_a_paused_keyed_task_stays_paused_across_a_restart(tmp_path):
    db, out = str(tmp_path / "s.db"), str(tmp_path / "out")
    _run_then_pause(db, out, 2)
    assert open_store(db).get("p").state.paused
    n = len(_lines(out))
    with procsched.Scheduler(1, store=db) as s:
        w = Waiter(s)
        h = s.get("p")
        w.until(lambda: h.state is procsched.TaskState.PAUSED)
        assert len(_lines(out)) == n
        assert h.resume()
        w.until(lambda: len(_lines(out)) >= n + 2)
    runs = [r for r, _a, _s in _lines(out)]
    assert len(set(runs)) == len(runs), f"a run ran twice: {runs}"
    # every run number up to the last is a run that ran, or one given ahead and taken back by the
    # pause before it started (recorded cancelled: a loaded machine gives the next run ahead sooner)
    taken_back = {r.run for r in open_store(db).history("p", 1000) if r.outcome == "cancelled"}
    assert sorted(set(runs) | taken_back) == list(range(1, max(runs) + 1)), (runs, taken_back)


def test_a_paused_keyed_task_stays_paused_across_a_deploy_that_changes_it(tmp_path):
    """A restart that schedules a paused key again with a changed definition
    (a deploy) keeps the store's pause: the new definition runs once resumed
    (it wrote "not paused" over the pause: the fault campaign, issue 20)."""
    db, out, out2 = str(tmp_path / "s.db"), str(tmp_path / "out"), str(tmp_path / "out2")
    _run_then_pause(db, out, 1)
    first = open_store(db).get("p").definition.def_hash

    def stored() -> StoredTask | None:
        task = open_store(db).get("p")
        return task if task is not None and task.definition.def_hash != first else None

    with procsched.Scheduler(1, store=db) as s:
        w = Waiter(s)
        h = s.schedule_at_fixed_rate(jobs_mod.record, 0.05, args=(out2,), key="p")  # changed: another file
        w.until(lambda: h.state is procsched.TaskState.PAUSED)
        assert w.until(stored).state.paused  # the new definition written, the pause kept
        assert not os.path.exists(out2)
        assert h.resume()
        w.until(lambda: len(_lines(out2)) >= 2)
    assert not open_store(db).get("p").state.paused


def test_a_key_another_instance_stored_meanwhile_is_taken_up_without_writing(tmp_path):
    """A program schedules a key that another instance stored after this one
    started, with the same definition: it goes on from the stored state and
    writes nothing for it (it wrote "not paused, next due" back, late, and
    undid a pause made meanwhile: the fault campaign, issue 20)."""
    db = str(tmp_path / "s.db")

    def stored(key: str) -> StoredTask | None:
        return open_store(db).get(key)

    b = procsched.Scheduler(1, store=db)
    a = procsched.Scheduler(1, store=db)
    try:
        a.schedule_at_fixed_rate(jobs_mod.add, 3600.0, initial_delay=3600.0, args=(1, 2), key="k")
        a.schedule(jobs_mod.add, 3600.0, args=(5, 6), key="a-barrier")  # written after whatever k's add wrote
        Waiter(a).until(lambda: stored("a-barrier") is not None)
        before = stored("k")
        w = Waiter(b)
        h = b.schedule_at_fixed_rate(jobs_mod.add, 3600.0, initial_delay=3600.0, args=(1, 2), key="k")  # the same
        b.schedule(jobs_mod.add, 3600.0, args=(3, 4), key="b-barrier")
        w.until(lambda: stored("b-barrier") is not None)
        assert h.state is procsched.TaskState.PENDING
        after = stored("k")
        assert after is not None and before is not None
        assert (after.updated_ns, after.state) == (before.updated_ns, before.state)
    finally:
        for s in (a, b):
            s.shutdown(wait=True, cancel_futures=True)


def test_a_retry_running_at_shutdown_leaves_the_grid_of_its_run(tmp_path):
    """A fixed-rate task stopped by shutdown while a retry of its run runs
    is stored due at the regular slot after that run's, not a period after
    the retry (the grid shifted, and the slots between were never run: the
    fault campaign, seed 316)."""
    db, out, fifo = str(tmp_path / "s.db"), str(tmp_path / "out"), str(tmp_path / "go")
    os.mkfifo(fifo)
    s = procsched.Scheduler(1, store=db)
    w = Waiter(s)
    h = s.schedule_at_fixed_rate(
        jobs_mod.fail_then_wait, 5, args=(out, fifo), key="r", retry=procsched.Retry(attempts=2, delay=0.3)
    )
    w.until(lambda: _lines(out))  # attempt 2 runs, waiting on the FIFO
    closer = threading.Thread(target=s.shutdown)  # cancels the task; the run in progress finishes
    closer.start()
    w.until(lambda: h.state is procsched.TaskState.CANCELLED)
    with open(fifo, "w") as f:
        f.write("go\n")
    closer.join(60)
    assert not closer.is_alive()
    with open_store(db) as store:
        (first,) = [r for r in store.history("r") if (r.run, r.attempt) == (1, 1)]
        retry = [r for r in store.history("r") if (r.run, r.attempt) == (1, 2)]
        assert retry and retry[0].scheduled_ns > first.scheduled_ns
        assert store.get("r").state.next_due_ns == first.scheduled_ns + 5 * 10**9


def test_a_pause_asked_while_the_store_is_locked_returns_once_written(tmp_path):
    """A pause asked while the store cannot record it (its commits refused,
    tried again after a back-off) is not answered until a commit has
    written it; then it is the store's, whatever comes next - here a clean
    shutdown at once. (Answered before, it was lost when the back-off
    outlasted the scheduler: the fault campaign, seed 316; and another
    instance's pause, acknowledged after it, was undone by it: seed 5715.)"""
    db, out = str(tmp_path / "s.db"), str(tmp_path / "out")
    failing = _Logged("could not record")
    log = logging.getLogger("procsched")
    log.addHandler(failing)
    try:
        with procsched.Scheduler(1, store=f"sqlite:///{db}?busy_timeout=0.1") as s:
            w = Waiter(s)
            h = s.schedule_at_fixed_rate(jobs_mod.record, 0.05, args=(out,), key="k")
            w.until(lambda: len(_lines(out)) >= 2)
            lock = sqlite3.connect(db, isolation_level=None, timeout=30)
            lock.execute("BEGIN IMMEDIATE")  # the scheduler's commits fail after 0.1 s
            assert failing.seen.wait(30)
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                paused = pool.submit(lambda: (h.pause(), open_store(db).get("k").state.paused))  # (read at its return)
                with pytest.raises(concurrent.futures.TimeoutError):
                    paused.result(timeout=1.0)  # the store is locked: it cannot be written, so not answered
                lock.execute("ROLLBACK")  # and at once the shutdown, within the back-off
                assert paused.result(timeout=30) == (True, True)
    finally:
        log.removeHandler(failing)
    assert open_store(db).get("k").state.paused


def test_sqlite_is_normal_by_default_full_on_request(tmp_path):
    store = open_store(f"{tmp_path}/n.db")
    assert store.conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    store.close()
    full = open_store(f"sqlite:///{tmp_path}/f.db?synchronous=FULL")
    assert full.conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    full.close()
    with pytest.raises(ValueError, match="synchronous"):
        open_store(f"sqlite:///{tmp_path}/x.db?journal=off")
    with procsched.Scheduler(1, store=f"sqlite:///{tmp_path}/f.db?synchronous=FULL") as s:
        assert s.schedule(jobs_mod.add, 0, args=(1, 2), key="k").result(30) == 3


def test_keep_runs_is_a_store_url_option(tmp_path):
    from procsched._store._url import url_options

    options: dict[str, object] = {}
    assert (
        url_options("postgresql://u@h/db?sslmode=disable&keep_runs=7", options) == "postgresql://u@h/db?sslmode=disable"
    )
    assert options == {"keep_runs": 7}
    for bad in ("0", "x", "-1"):
        with pytest.raises(ValueError, match="keep_runs"):
            open_store(f"sqlite:///{tmp_path}/b.db?keep_runs={bad}")
    url = f"sqlite:///{tmp_path}/k.db?keep_runs=2&synchronous=NORMAL"
    with procsched.Scheduler(1, store=url) as s:
        h = s.schedule_at_fixed_rate(jobs_mod.add, 0.01, args=(1, 1), key="k", max_runs=5)
        h.result(30)
        assert [r.run for r in s.history("k")] == [4, 5]  # the last 2 of 5


def test_a_key_reused_after_its_one_shot_ended_goes_on_with_its_run_numbers(tmp_path):
    db = str(tmp_path / "s.db")
    with procsched.Scheduler(1, store=db) as s:
        assert s.schedule(jobs_mod.add, 0, args=(1, 2), key="k").result(30) == 3
        h = s.schedule(jobs_mod.add, 0, args=(2, 2), key="k")  # same scheduler
        assert h.result(30) == 4 and h.runs[0].run == 2
    with procsched.Scheduler(1, store=db) as s:  # after a restart: from the history
        h = s.schedule(jobs_mod.add, 0, args=(3, 2), key="k")
        assert h.result(30) == 5 and h.runs[0].run == 3
        assert [(r.run, r.outcome) for r in s.history("k")] == [(1, "ok"), (2, "ok"), (3, "ok")]


def test_adopted_tasks_answer_get_jobs_stats_and_cancel(tmp_path):
    db = str(tmp_path / "s.db")
    with procsched.Scheduler(1, store=db) as s:
        for i in range(5):
            s.schedule_at_fixed_rate(jobs_mod.add, 3600, args=(i, 0), key=f"k{i}", initial_delay=3600)
        s.get("k3").pause()
        s.schedule_cron(
            jobs_mod.add,
            "0 3 * * *",
            tz="Europe/Berlin",
            args=(1, 1),
            key="cron",
            name="nightly",
            retry=procsched.Retry(attempts=3),
        )
        s.shutdown(cancel_futures=True)
    stored = {t.key: t for t in open_store(db).jobs()}
    with procsched.Scheduler(1, store=db) as s:
        cron = s.get("cron")
        assert cron is not None and cron.name == "nightly"
        assert cron.next_run_at is not None and cron.next_run_at.timestamp() * 1e9 == stored["cron"].state.next_due_ns
        assert cron.cancel()
        assert sorted(h.key for h in s.jobs()) == [f"k{i}" for i in range(5)]
        assert s.stats()["pending"] == 5
        h = s.get("k1")
        assert h is not None and not h.done()
        assert abs(h.next_run_at.timestamp() * 1e9 - stored["k1"].state.next_due_ns) < 10**9
        Waiter(s).until(lambda: s.get("k3").state is procsched.TaskState.PAUSED)
        assert h.cancel() and h.cancelled() and s.get("k1") is None
        assert len(s.jobs()) == 4
        s.shutdown(cancel_futures=True)
    assert sorted(t.key for t in open_store(db).jobs()) == ["k0", "k2", "k3", "k4"]  # the cancel was stored
    assert open_store(db).get("k3").state.paused


def test_a_keyed_run_that_kills_its_worker_is_recorded_crashed_and_the_task_goes_on(tmp_path):
    db, out = str(tmp_path / "s.db"), str(tmp_path / "out")
    with procsched.Scheduler(1, store=db) as s:
        h = s.schedule_at_fixed_rate(jobs_mod.crash_on_first_run, 0.02, args=(out,), key="k", max_runs=3)
        h.result(30)  # its third run ends it
    runs = [(r.run, r.outcome) for r in open_store(db).history("k")]
    assert runs == [(1, "crashed"), (2, "ok"), (3, "ok")]


class _Logged(logging.Handler):
    """Sets ``seen`` when procsched logs a message containing ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text, self.seen = text, threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.seen.set()


@pytest.mark.timeout(90)
def test_a_store_that_cannot_record_holds_keyed_runs_until_it_can(tmp_path):
    """A commit that fails (here: another writer holds SQLite's lock past
    busy_timeout) writes nothing, so its keyed runs must not start
    unrecorded: they wait, logged, while unkeyed work goes on; when the store
    records again they run, and every run that ran is in the history once."""
    db, out = str(tmp_path / "s.db"), str(tmp_path / "out")
    failing, back = _Logged("could not record"), _Logged("records again")
    log = logging.getLogger("procsched")
    for handler in (failing, back):
        log.addHandler(handler)
    try:
        with procsched.Scheduler(2, store=f"sqlite:///{db}?busy_timeout=0.1&keep_runs=100000") as s:
            w = Waiter(s)
            s.schedule_at_fixed_rate(jobs_mod.record, 0.05, args=(out,), key="k")
            w.until(lambda: len(_lines(out)) >= 3)
            lock = sqlite3.connect(db, isolation_level=None, timeout=30)
            lock.execute("BEGIN IMMEDIATE")  # the scheduler's next commit fails after 0.1 s
            assert failing.seen.wait(30)
            n = len(_lines(out))
            assert s.submit(jobs_mod.add, 2, 3).result(30) == 5  # unkeyed work goes on meanwhile
            time.sleep(0.5)  # an absence: no keyed run starts while its start cannot be recorded
            assert len(_lines(out)) <= n + 1  # (one sent before the failing commit may still start)
            assert not back.seen.is_set()
            lock.execute("ROLLBACK")
            assert back.seen.wait(30)
            w.until(lambda: len(_lines(out)) >= n + 4)
    finally:
        for handler in (failing, back):
            log.removeHandler(handler)
    ran = [(r, a) for r, a, _s in _lines(out)]
    assert len(ran) == len(set(ran)), "a run ran twice"
    with open_store(db) as store:
        recorded = {(h.run, h.attempt): h.outcome for h in store.history("k", 100_000)}
    assert all(recorded.get(run) == "ok" for run in ran), "a run ran unrecorded"
