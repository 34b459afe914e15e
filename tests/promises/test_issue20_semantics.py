"""Issue 20, "Semantics that leak" (items 11-12, 15-23; 24 is documentation:
its test guards the behaviour the README is to describe).

Each test states the promise it checks in its name; the ones that fail on
main are marked xfail(strict=True) with the item, so the engineer who fixes
an item removes the marker. Real processes; waits on files, handles, pipes.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import pickle
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime

import psutil
import pytest

import procsched
from procsched._store import open_store
from tests.campaign import storesql
from tests.promises import tasks
from tests.promises.helpers import ROOT, log, make_fifo, release, starts, wait_until

pytestmark = pytest.mark.timeout(90)
TASKS = "tests.promises.tasks"
SKEW_DIR = os.path.join(ROOT, "tests", "campaign", "skew")


# -- item 11: pause and runs given ahead ------------------------------------------


@pytest.mark.parametrize("with_store", [False, True], ids=["memory", "sqlite"])
def test_pause_takes_back_the_runs_given_ahead(schedulers, sqlite_url, tmp_path, with_store) -> None:
    out, fifo = str(tmp_path / "runs.log"), make_fifo(str(tmp_path / "hold"))
    s = schedulers(1, **({"store": sqlite_url} if with_store else {}))
    s.schedule(tasks.hold, 0, args=(out, fifo, "blocker"))  # the only worker is busy...
    wait_until(lambda: starts(out), 30, "the blocker to start")
    h = s.schedule_at_fixed_rate(tasks.mark, 0.02, args=(out, "t"), key="t" if with_store else None)
    time.sleep(0.2)  # ... while t comes due: its runs are given ahead to that worker (prefetch)
    assert h.pause()
    paused_at = time.time()
    release(fifo)
    assert s.submit(tasks.add, 1, 1).result(timeout=30) == 2  # the worker went past its queue
    late = [x for x in starts(out) if x.tag == "t" and x.t > paused_at]
    assert not late, f"the paused task started {len(late)} run(s) after pause() returned True: {late}"
    assert h.state is procsched.TaskState.PAUSED


# -- item 12: a store outage and unkeyed tasks ------------------------------------


@pytest.mark.slow
def test_a_store_outage_stops_keyed_runs_only_and_shutdown_still_returns(schedulers, tmp_path) -> None:
    db = str(tmp_path / "store.db")
    out = str(tmp_path / "runs.log")
    s = schedulers(2, store=f"sqlite:///{db}?busy_timeout=0.1")
    for k in ("k1", "k2", "k3"):
        s.schedule_at_fixed_rate(tasks.mark, 0.05, args=(out, k), key=k)
    s.schedule_at_fixed_rate(tasks.mark, 0.05, args=(out, "unkeyed"))
    wait_until(lambda: len({x.tag for x in starts(out)}) == 4, 30, "every task to run")
    lock = sqlite3.connect(db, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")  # another process holds the write lock: the store is out
    try:
        out_at = time.time()
        wait_until(
            lambda: len([x for x in starts(out) if x.tag == "unkeyed" and x.t > out_at + 1.0]) >= 5,
            5,
            "the unkeyed task to go on while the store is out",
        )
        done = threading.Event()

        def shut() -> None:
            s.shutdown(wait=True)
            done.set()

        threading.Thread(target=shut, daemon=True).start()
        assert done.wait(10), "shutdown(wait=True) did not return while the store was out"
    finally:
        lock.execute("ROLLBACK")
        lock.close()


def test_a_store_out_for_everyone_past_the_lease_takes_over_no_one(schedulers, tmp_path) -> None:
    """The store refuses every instance's writes for longer than the lease
    (a lock here; a database restart, a dropped network): every lease
    expires at once. The first instance to write again must not take over
    the others - their runs, done meanwhile and waiting to be recorded,
    would be recorded crashed and run again (the fault campaign, seed 726:
    a one-shot ran to completion twice). Each waits a lease after it can
    write again, and the others renew theirs meanwhile."""
    db = str(tmp_path / "store.db")
    out = str(tmp_path / "runs.log")
    url = f"sqlite:///{db}?busy_timeout=0.1"
    handles = {}
    for name in ("a", "b"):
        s = schedulers(1, store=url, lease=1.0)
        fifo = make_fifo(str(tmp_path / f"hold-{name}"))
        retry = procsched.Retry(attempts=2, delay=0, on=["crashed"])
        handles[name] = (s.schedule(tasks.hold, 0, args=(out, fifo, name), key=name, retry=retry), fifo)
    wait_until(lambda: {x.tag for x in starts(out)} == {"a", "b"}, 30, "both runs to start (they hold)")
    lock = sqlite3.connect(db, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")  # another process holds the write lock: the store is out for both
    try:
        for _, fifo in handles.values():
            release(fifo)  # each run ends while its end cannot be recorded
        wait_until(lambda: len([x for x in log(out) if x.ev == "end"]) == 2, 30, "both runs to end")
        reader = sqlite3.connect(db)  # (WAL: reads go on beside the lock)

        def expired() -> bool:
            rows = reader.execute("SELECT lease_until_ns FROM procsched_schedulers").fetchall()
            return len(rows) == 2 and all(until < time.time_ns() for (until,) in rows)

        wait_until(expired, 30, "both leases to expire")
        reader.close()
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    store = open_store(db)
    try:
        wait_until(
            lambda: all(r.outcome for k in ("a", "b") for r in store.history(k)) and len(store.history(None)) >= 2,
            30,
            "both runs' ends to be recorded",
        )
        for name in ("a", "b"):
            assert [(r.attempt, r.outcome) for r in store.history(name)] == [(1, "ok")], name
    finally:
        store.close()
    assert sorted((x.tag, x.attempt) for x in starts(out)) == [("a", 1), ("b", 1)]
    for h, _ in handles.values():
        assert h.result(timeout=30) is None


def test_a_row_due_at_a_slot_claimed_before_does_not_stall_its_task(schedulers, tmp_path) -> None:
    """A task row whose due time is a slot claimed before (written stale:
    the fault campaign, seed 807, a changed definition stored while that
    slot ran elsewhere) refuses the claim made from it. With another
    scheduler on the store, the loser went on standby for it - as did
    every other, each waiting for another to run the task: it never ran
    again. A claim the row still expects, refused with no run in flight,
    is not another scheduler's: the loser takes the next slot not before now."""
    db = str(tmp_path / "store.db")
    out = str(tmp_path / "runs.log")
    first = schedulers(1, store=db)
    first.schedule_at_fixed_rate(tasks.mark, 0.2, args=(out, "k"), key="k")
    wait_until(lambda: len(starts(out)) >= 2, 30, "two runs")
    first.shutdown(wait=True)
    store = open_store(db)
    try:
        other = store.register(lease_ns=120 * 10**9)  # another scheduler on the store, alive, running nothing
        row = store.get("k")
        assert row is not None and row.state.next_due_ns is not None
        run, slot = row.state.run_count + 1, row.state.next_due_ns
        b = store.batch(other)
        b.started("k", run, 1, slot)
        assert b.commit().ok
        b = store.batch(other)
        b.finished("k", run, 1, "ok", slot + 1, slot)  # its next due time: the slot it just ran (stale)
        assert b.commit().ok
        s = schedulers(1, store=db)
        wait_until(lambda: any(x.run > run for x in starts(out)), 15, "the task to run again")
        s.shutdown(wait=True)
    finally:
        store.close()


# -- item 15: the forkserver's death ----------------------------------------------


def test_a_sigkill_of_the_forkserver_costs_no_run(schedulers, tmp_path) -> None:
    out, fifo = str(tmp_path / "runs.log"), make_fifo(str(tmp_path / "hold"))
    s = schedulers(2)
    runs = [s.submit(tasks.hold, out, fifo, f"r{i}") for i in range(2)]
    wait_until(lambda: len(starts(out)) == 2, 30, "both runs to start (they hold)")
    helper = [p for p in psutil.Process().children(recursive=True) if p.name() == "psc-forkserver"]
    assert len(helper) == 1, helper
    helper[0].kill()
    helper[0].wait(10)
    # The runs hold until now, if their workers still live. A worker's open()
    # of the FIFO is interrupted by the signal of its parent's death (and
    # retried): a release can find one run only, so release until both end.
    deadline = time.monotonic() + 30
    while not all(h.done() for h in runs) and time.monotonic() < deadline:
        try:
            release(fifo, timeout=1)
        except AssertionError:
            pass  # (no reader now: both released, or the workers were killed with the helper)
        concurrent.futures.wait(runs, timeout=1)
    assert [h.result(timeout=30) for h in runs] == [None, None]
    assert [h.runs[-1].outcome for h in runs] == ["ok", "ok"]
    assert s.submit(tasks.add, 2, 2).result(timeout=30) == 4  # and the pool goes on


# -- item 16: handle.runs ----------------------------------------------------------


def test_a_handle_keeps_a_bounded_number_of_runs_and_exact_counts(schedulers) -> None:
    s = schedulers(2)
    finished = threading.Semaphore(0)
    started: list[int] = [0]  # the runs started and finished, as the listeners hear them
    ended: list[int] = [0]
    s.add_listener(lambda e: started.append(e["run"]), events=["run_started"])
    s.add_listener(lambda e: (ended.append(e["run"]), finished.release()), events=["run_finished"])
    h = s.schedule_at_fixed_rate(tasks.noop, 0.0001)
    total = 5_000  # (a bound of the kept RunInfo, default or configured, is expected well below this)
    for _ in range(total):
        assert finished.acquire(timeout=60)
    h.cancel()
    with pytest.raises(Exception):  # noqa: B017 - cancelled or failed: either ends it
        h.result(timeout=30)
    while max(ended) < max(started):  # a run in flight at the cancel goes on to its end (seen: 5001 vs 5000)
        assert finished.acquire(timeout=30)
    done = s.stats()["outcomes"]["ok"]
    assert done >= total
    assert h.runs[-1].run == done, "the newest run is kept"
    assert len(h.runs) < total, f"{len(h.runs)} RunInfo kept for {done} runs: unbounded"
    assert h.run_count == done, "every run counted"
    assert [r.run for r in h.runs] == list(range(done - len(h.runs) + 1, done + 1)), "the newest kept, in order"


def test_handle_runs_sets_how_many_runs_a_handle_keeps() -> None:
    s = procsched.InlineScheduler(procsched.ManualClock(), handle_runs=3)
    h = s.schedule_at_fixed_rate(tasks.noop, 1, max_runs=10)
    assert s.run_until(20) == 10
    assert [r.run for r in h.runs] == [8, 9, 10]
    assert h.run_count == 10 and "runs=10" in repr(h)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10"])
def test_a_bad_handle_runs_is_refused_at_the_call(bad) -> None:
    with pytest.raises((TypeError, ValueError), match="handle_runs must"):
        procsched.InlineScheduler(handle_runs=bad)
    with pytest.raises((TypeError, ValueError), match="handle_runs must"):
        procsched.Scheduler(1, runner="threads", handle_runs=bad)


# -- item 17: nothing from the store unpickled outside a worker; private files ---------


class _Planted:
    """Unpickled, it writes the unpickling process's pid to a file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, ...]:
        code = f"import os; open({self.path!r}, 'a').write(str(os.getpid()) + '\\n')"
        return (exec, (code,))


def test_a_planted_row_is_never_unpickled_in_the_program_that_opens_the_store(programs, sqlite_url, tmp_path) -> None:
    marker = str(tmp_path / "unpickled")
    first = programs(f"""
        import procsched
        from tests.promises import tasks
        with procsched.Scheduler(1, store={sqlite_url!r}) as s:
            s.schedule_at_fixed_rate(tasks.mark, 3600, initial_delay=3600, args=("/dev/null",), key="k")
        print("stored", flush=True)
    """)
    assert first.expect("stored") == "stored" and first.wait(60) == 0
    # whoever can write the store plants a row (a plain SQL UPDATE)
    conn = sqlite3.connect(storesql.sqlite_path(sqlite_url), isolation_level=None)
    conn.execute("UPDATE procsched_definitions SET args = ? WHERE key = 'k'", (pickle.dumps(_Planted(marker)),))
    conn.close()
    second = programs(f"""
        import procsched
        s = procsched.Scheduler(1, store={sqlite_url!r})
        print("pid", os.getpid(), flush=True)
        print("result", s.submit(sum, [1, 2]).result(timeout=30), flush=True)
        s.shutdown(wait=True)
        print("closed", flush=True)
    """)
    pid = int(second.expect("pid").split()[1])
    assert second.expect("closed", timeout=60) == "closed"
    second.wait(30)
    ran_in = open(marker).read().split() if os.path.exists(marker) else []
    assert str(pid) not in ran_in, "the stored pickle ran in the program that opened the store"


def test_the_sqlite_files_procsched_creates_are_private(schedulers, tmp_path) -> None:
    db = str(tmp_path / "private.db")
    s = schedulers(1, store=db)
    s.schedule_at_fixed_rate(tasks.noop, 0.05, key="k")
    wait_until(lambda: storesql.query(db, "SELECT count(*) FROM procsched_runs")[0][0] >= 2, 30, "runs recorded")
    made = [p for p in (db, db + "-wal", db + "-shm", db + "-procsched.lock") if os.path.exists(p)]
    modes = {os.path.basename(p): oct(os.stat(p).st_mode & 0o777) for p in made}
    assert all(int(m, 8) & 0o077 == 0 for m in modes.values()), f"readable by others: {modes}"


# -- item 18: a large argument and the WAL -----------------------------------------


@pytest.mark.slow
def test_a_large_argument_is_written_once_not_at_every_run(schedulers, tmp_path) -> None:
    db = str(tmp_path / "big.db")
    out = str(tmp_path / "runs.log")
    s = schedulers(2, store=db)
    big = b"x" * (5 * 2**20)  # 5 MiB
    s.schedule_at_fixed_rate(tasks.mark_blob, 0.05, args=(out, big), key="big")
    wait_until(lambda: len(starts(out)) >= 10, 60, "10 runs")
    wal = os.path.getsize(db + "-wal")
    assert wal < 5 * len(big), f"the WAL is {wal / 2**20:.0f} MiB after 10 runs of a task with a 5 MiB argument"


# -- item 19: options and secrets in messages --------------------------------------


def test_a_password_in_the_store_url_is_never_printed(tmp_path) -> None:
    with pytest.raises(procsched.StoreError) as err:
        procsched.Scheduler(1, store="postgresql://postgres@127.0.0.1:1/db?password=sekrit&connect_timeout=2")
    assert "sekrit" not in str(err.value), str(err.value)


@pytest.mark.slow
def test_a_password_in_the_store_url_is_not_in_the_retry_log_lines(
    pg_server, pg_db, pg_proxy, schedulers, tmp_path, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="procsched")
    out = str(tmp_path / "runs.log")
    url = pg_server.url_for(pg_db, "127.0.0.1", pg_proxy.port) + "&password=sekrit"  # trust auth: ignored
    s = schedulers(2, store=url)
    s.schedule_at_fixed_rate(tasks.mark, 0.05, args=(out, "k"), key="k")
    wait_until(lambda: starts(out), 30, "the task to run")
    pg_proxy.refuse(True)
    pg_proxy.drop()  # the store is out: turns fail and are retried (logged)
    try:
        wait_until(lambda: [r for r in caplog.records if "store" in r.getMessage()], 15, "a store error logged")
    finally:
        pg_proxy.refuse(False)
    leaked = [r.getMessage() for r in caplog.records if "sekrit" in r.getMessage()]
    assert not leaked, leaked[:2]


@pytest.mark.parametrize(
    "option",
    [
        "busy_timeout=inf",
        "keep_runs=\u00b2",
        "busy_timeout=nan",
        "keep_runs=0",  # pass on main: guards
    ],
)
def test_a_bad_store_option_is_a_value_error_naming_it(tmp_path, option) -> None:
    name = option.split("=")[0]
    with pytest.raises(ValueError, match=name):
        procsched.Scheduler(1, store=f"sqlite:///{tmp_path}/o.db?{option}")


# -- item 20: a clean shutdown prints nothing ---------------------------------------


@pytest.mark.slow
def test_a_clean_shutdown_with_a_store_prints_no_traceback(programs, sqlite_url, tmp_path) -> None:
    """Passes on 7945013: not reproduced here (the issue saw it 4 times in 4);
    kept as the guard of item 20. Shut down with runs in flight and runs
    given ahead (one worker, ten keys), and with two workers."""
    out = str(tmp_path / "runs.log")
    prog = programs(f"""
        import procsched
        from tests.promises import tasks
        for workers in (1, 2, 1, 2):
            s = procsched.Scheduler(workers, store={sqlite_url!r})
            for k in "abcdefghij":
                s.schedule_at_fixed_rate(tasks.mark, 0.005, args=({out!r}, k, 0.01), key=k)
            time.sleep(0.4)
            s.shutdown(wait=True)
        print("closed", flush=True)
    """)
    assert prog.expect("closed", timeout=60) == "closed"
    assert prog.wait(30) == 0
    err = prog.stderr()
    assert "Traceback" not in err and "BrokenPipeError" not in err, err[-3000:]


# -- item 21: procsched next ------------------------------------------------------------


def _next(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "procsched", "next", *args], capture_output=True, text=True, timeout=60, cwd=ROOT
    )


@pytest.mark.parametrize(
    "args",
    [
        ("0 0 * * *", "--tz", "UTC", "--after", "9999-12-30T00:00:00+00:00", "-n", "3"),
        ("0 0 * * *", "--tz", "America/New_York", "--after", "0001-01-01T00:00:00+00:00", "-n", "2"),
    ],
    ids=["year-9999", "year-1"],
)
def test_procsched_next_at_the_ends_of_the_calendar_says_so_without_a_traceback(args) -> None:
    done = _next(*args)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode in (0, 2), (done.returncode, done.stderr)


def test_procsched_next_shows_a_seconds_offset_as_hh_mm_ss() -> None:
    done = _next("0 0 * * *", "--tz", "Europe/Amsterdam", "--after", "1920-01-01T00:00:00+00:00", "-n", "1")
    assert done.returncode == 0, done.stderr
    assert "(+00:19:32)" in done.stdout, done.stdout


def test_procsched_next_notes_a_dst_gap_only_where_the_named_time_moved() -> None:
    moved = _next("30 2 * * *", "--tz", "America/New_York", "--after", "2026-03-07T12:00:00+00:00", "-n", "1")
    assert "gap" in moved.stdout, moved.stdout  # 02:30 does not exist that night: it runs at 03:00
    named = _next("0 3 * * *", "--tz", "America/New_York", "--after", "2026-03-07T12:00:00+00:00", "-n", "1")
    assert named.stdout.startswith("2026-03-08 03:00:00 EDT"), named.stdout
    assert "gap" not in named.stdout, f"03:00 is the time the expression names, not a moved one: {named.stdout}"


# -- item 22: clock skew larger than the period -------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_clock_skew_larger_than_the_period_skips_no_slot_silently(instances, pg_url, tmp_path) -> None:
    out = str(tmp_path / "runs.log")
    period = 0.5
    spec = {"key": "k", "kind": "rate", "period": period, "fn": f"{TASKS}:mark", "args": [out, "k"]}
    cfg = {"store": pg_url, "lease": 1.0, "tasks": [spec]}
    a = instances("A", cfg).ready()
    b = instances("B", cfg, env={"PYTHONPATH": f"{ROOT}{os.pathsep}{SKEW_DIR}", "CAMPAIGN_SKEW_S": "3.0"}).ready()
    wait_until(lambda: len(starts(out)) >= 14, 60, "seven seconds of slots")
    for inst in (a, b):
        assert inst.quit()["closed"]
    ran = sorted({x.slot_us for x in starts(out) if x.attempt == 1 and x.slot_us is not None})
    step = round(period * 1e6)
    grid = range(ran[0], ran[-1] + 1, step)
    missing = [t for t in grid if not any(abs(t - r) < step // 4 for r in ran)]
    reader = procsched.Scheduler(1, store=pg_url)  # the store's own account of every slot (part three)
    try:
        slots = reader.history("k", 1000, skipped=True)  # type: ignore[call-arg]
    finally:
        reader.shutdown(wait=True, cancel_futures=True)
    skipped = [r for r in slots if r.outcome == "skipped"]
    unexplained = [
        t
        for t in missing
        if not any(
            r.scheduled_at is not None and abs(r.scheduled_at.timestamp() * 1e6 - t) < step // 4 for r in skipped
        )
    ]
    assert not unexplained, f"{len(unexplained)} slots never ran and are not recorded skipped (of {len(grid)})"


# -- item 23: until equal to now ------------------------------------------------------


@pytest.mark.parametrize("until", ["now", "zero"])
def test_until_equal_to_now_runs_the_slot_due_now(until) -> None:
    clock = procsched.ManualClock(wall=datetime(2026, 1, 1, tzinfo=UTC))
    s = procsched.InlineScheduler(clock)
    calls: list[float] = []
    h = s.schedule_at_fixed_rate(lambda: calls.append(clock.now()), 10, until=clock.wall_now() if until == "now" else 0)
    assert s.run_until(100) == 1
    assert calls == [0.0]
    assert h.state is procsched.TaskState.DONE


# -- item 24 (documentation): the cron rules the README is to state -------------------------


def _fires(expr: str, after: str, n: int) -> list[str]:
    done = _next(expr, "--tz", "UTC", "--after", after, "-n", str(n), "--json")
    assert done.returncode == 0, done.stderr
    return [json.loads(x)["local"][:19] for x in done.stdout.splitlines()]


@pytest.mark.parametrize(
    "expr, after, expected",
    [
        # day-of-month and day-of-week together: either (cron's OR), not both (APScheduler's AND)
        (
            "0 0 13 * 5",
            "2026-02-01T00:00:00+00:00",
            ["2026-02-06T00:00:00", "2026-02-13T00:00:00", "2026-02-20T00:00:00"],
        ),
        ("0 0 L * *", "2026-02-01T00:00:00+00:00", ["2026-02-28T00:00:00", "2026-03-31T00:00:00"]),  # last day
        ("0 0 LW * *", "2026-05-01T00:00:00+00:00", ["2026-05-29T00:00:00", "2026-06-30T00:00:00"]),  # last weekday
        ("0 0 * * 5L", "2026-02-01T00:00:00+00:00", ["2026-02-27T00:00:00", "2026-03-27T00:00:00"]),  # last Friday
        ("0 0 * * 5#2", "2026-02-01T00:00:00+00:00", ["2026-02-13T00:00:00", "2026-03-13T00:00:00"]),  # 2nd Friday
        # six fields are seconds first: 0 0 1 1 * * is 01:00:00 on the 1st of every month, not yearly
        ("0 0 1 1 * *", "2026-01-02T00:00:00+00:00", ["2026-02-01T01:00:00", "2026-03-01T01:00:00"]),
    ],
    ids=["dom-or-dow", "L", "LW", "5L", "5#2", "six-fields"],
)
def test_the_cron_rules_the_readme_states(expr, after, expected) -> None:
    """Passes on main: it guards the behaviour item 24 asks the README to document."""
    assert _fires(expr, after, len(expected)) == expected
