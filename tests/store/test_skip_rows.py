"""A run of skipped grid points is one row (schema 3): read back slot by
slot, counted by its slots, kept and trimmed by rows; schema 2 migrates.
On SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from procsched._store import SkippedSlot, TaskDefinition, TaskState, open_store
from procsched._store._schema import migration_3, schema

P = 1_000_000_000
T0 = 1_700_000_000 * P


def add(store, key="k"):
    b = store.batch()
    b.upsert(
        TaskDefinition(key, "store_funcs:plain", b"", {"kind": "fixed_rate", "period_ns": P}, {}),
        TaskState(next_due_ns=T0),
    )
    assert b.commit().ok


def slots(store, key="k", n=100):
    return [(x.slot_ns - T0) // P for x in store.history(key, n, skipped=True) if isinstance(x, SkippedSlot)]


def test_a_run_of_slots_reads_back_slot_by_slot_and_counts_each(store):
    add(store)
    h = store.register()
    b = store.batch(h)
    b.skipped("k", T0 + 10 * P, "misfire", period_ns=P, slots=5)
    b.skipped("k", T0 + 20 * P, "overlap")
    assert b.commit().ok
    assert slots(store) == [10, 11, 12, 13, 14, 20]
    both = store.history("k", 3, skipped=True)  # the newest 3 slots, oldest first
    assert [(x.slot_ns - T0) // P for x in both] == [13, 14, 20]
    assert {x.holder for x in both} == {h.id} and {x.reason for x in both} == {"misfire", "overlap"}
    assert store.counts().skipped["misfire"] == 5 and store.counts().by_job["k"][1]["overlap"] == 1
    # the same run again (a retried commit): recorded once, counted once
    b = store.batch(h)
    b.skipped("k", T0 + 10 * P, "late", period_ns=P, slots=5)
    assert b.commit().ok
    assert slots(store) == [10, 11, 12, 13, 14, 20]
    assert store.counts().skipped == {"overlap": 1, "misfire": 5, "late": 0, "paused": 0, "down": 0}
    store.close()


@pytest.mark.parametrize("together", [True, False], ids=["one batch", "batch by batch"])
def test_rows_are_kept_keep_runs_per_task_and_read_as_the_newest_slots(store_url, together):
    store = open_store(store_url, keep_runs=3)
    add(store)
    add(store, "other")
    h = store.register()
    b = store.batch(h)
    for i in range(8):  # 8 runs of 4 slots: 32 slots, 8 rows
        if not together:
            b = store.batch(h)
        b.skipped("k", T0 + 10 * i * P, "misfire", period_ns=P, slots=4)
        b.skipped("other", T0 + (10 * i + 5) * P, "overlap")
        if not together:
            assert b.commit().ok
    if together:
        assert b.commit().ok
    # at most keep_runs (3) slots of a task are read, the newest
    assert slots(store) == [71, 72, 73]
    assert slots(store, n=2) == [72, 73]
    assert store.counts().skipped["misfire"] == 32 and store.counts().skipped["overlap"] == 8
    # every task's: the newest slots across rows that overlap in time
    every = [((x.slot_ns - T0) // P, x.key) for x in store.history(None, 5, skipped=True)]
    assert every == [(70, "k"), (71, "k"), (72, "k"), (73, "k"), (75, "other")]
    store.close()


def test_a_run_of_slots_is_checked_at_the_call(store):
    b = store.batch()
    for kw in ({"slots": 0}, {"slots": 2}, {"slots": 2, "period_ns": -P}, {"slots": 1.5, "period_ns": P}):
        with pytest.raises(ValueError, match="slots|period_ns"):
            b.skipped("k", T0, "misfire", **kw)
    assert b.ops == []
    store.close()


def test_a_schema_2_store_migrates_its_skipped_rows(tmp_path):
    """Schema 2 wrote one row per slot, without the new columns: at the
    first open they gain them and read as single slots."""
    path = tmp_path / "two.db"
    con = sqlite3.connect(path)
    three = schema("BLOB", "INTEGER PRIMARY KEY AUTOINCREMENT", " WITHOUT ROWID")
    for stmt in three[: len(three) - len(migration_3())]:
        con.execute(stmt)
    con.execute("INSERT INTO procsched_version (id, version, written_by, fence) VALUES (1, 2, 'procsched 2', 0)")
    con.execute(
        "INSERT INTO procsched_skipped (key, slot_ns, reason, recorded_ns, holder) VALUES (?, ?, ?, ?, NULL)",
        ("k", T0 + 3 * P, "down", T0),
    )
    con.commit()
    con.close()
    store = open_store(str(path))
    assert store.schema_version() == 3
    add(store)
    b = store.batch(store.register())
    b.skipped("k", T0 + 4 * P, "misfire", period_ns=P, slots=2)
    assert b.commit().ok
    assert slots(store) == [3, 4, 5]
    store.close()


def test_the_misfire_slots_a_run_end_dropped_go_on_its_run_row(store):
    """The engine reports the slots a run's end dropped right after the end:
    the store writes them on the run's row, in the end's statements - read
    back, counted and trimmed as any skipped slot; a stale end records neither."""
    add(store)
    add(store, "other")
    h = store.register()
    b = store.batch(h)
    b.started("k", 1, 1, T0)
    b.started("other", 1, 1, T0)
    assert b.commit().ok
    b = store.batch(h)
    b.finished("k", 1, 1, "ok", T0 + P // 2, T0 + 4 * P)
    b.finished("other", 1, 1, "ok", T0 + P // 2, T0 + 2 * P)
    b.skipped("k", T0 + P, "misfire", period_ns=P, slots=3)
    b.skipped("k", T0 + 9 * P, "misfire")  # a second one for that end: a row of its own
    b.skipped("other", T0 + P, "overlap")  # another reason: a row of its own
    b.started("k", 2, 1, T0 + 4 * P)
    assert b.commit().ok
    assert slots(store) == [1, 2, 3, 9] and slots(store, "other") == [1]
    three = store.history("k", 100, skipped=True)[1]
    assert (three.slot_ns, three.reason, three.holder, three.recorded_ns) == (T0 + P, "misfire", h.id, T0 + P // 2)
    assert store.counts().skipped["misfire"] == 4 and store.counts().skipped["overlap"] == 1
    assert _own_rows(store, "k") == 1  # the 3 slots are on run 1's row
    # an end this holder does not hold (run 5 was never claimed): neither it nor its slots are recorded
    b = store.batch(h)
    b.finished("k", 5, 1, "ok", T0 + 5 * P, T0 + 8 * P)
    b.skipped("k", T0 + 5 * P, "misfire", period_ns=P, slots=3)
    assert b.commit().stale == [("k", 5, 1)]
    assert slots(store) == [1, 2, 3, 9] and store.counts().skipped["misfire"] == 4
    store.close()


def _own_rows(store, key):
    with store._tx("counting", write=False) as cur:
        return store._x(cur, "SELECT count(*) FROM procsched_skipped WHERE key = ?", (key,)).fetchone()[0]


@pytest.mark.parametrize("together", [True, False], ids=["with another skip", "alone"])
def test_a_slot_recorded_skipped_is_never_claimed_after(store, together):
    """One slot, one end (the fault campaign's stores): a scheduler that
    recorded slots 10-12 "paused" and another that realigned to the row's
    due time (slot 10: the skips did not move it) and caught up - both
    wrote an end for the same slots. A claim of a slot recorded skipped is
    lost; the next slot is claimed as before."""
    add(store)
    add(store, "other")
    a, other = store.register(), store.register()
    b = store.batch(a)
    b.skipped("k", T0 + 10 * P, "paused", period_ns=P, slots=3)
    if together:
        b.skipped("other", T0 + 5 * P, "paused")  # (two rows: written set-wise)
    assert b.commit().ok
    for slot in (10, 12):
        b = store.batch(other)
        b.started("k", 1, 1, T0 + slot * P + 1000)  # (its clock's reading of the slot: microseconds off)
        assert b.commit().lost == [("k", 1, 1)]
    b = store.batch(other)
    b.started("k", 1, 1, T0 + 13 * P)
    result = b.commit()
    assert result.ok and result.lost == []
    store.close()


@pytest.mark.parametrize("together", [True, False], ids=["with another skip", "alone"])
def test_a_skip_leaves_out_the_slots_a_run_claimed(store, together):
    """One slot, one end, the other order (the fault campaign's stores): a
    scheduler that followed a resume late recorded "paused" every slot up
    to its own now - one another scheduler had claimed and run since. The
    claimed slot is left out of the skip (and of its counts), and so are
    the slots after it (that scheduler's to run - their guard made it lose
    its catch-up: seed 3910); the slots before it are recorded."""
    add(store)
    add(store, "other")
    a, other = store.register(), store.register()
    b = store.batch(other)
    b.started("k", 1, 1, T0 + 12 * P + 1000)  # (its clock's reading of slot 12: microseconds off)
    assert b.commit().ok
    b = store.batch(a)
    b.skipped("k", T0 + 10 * P, "paused", period_ns=P, slots=5)  # 10-14: 12 ran
    if together:
        b.skipped("other", T0 + 5 * P, "paused")  # (two rows: written set-wise)
    assert b.commit().ok
    assert slots(store) == [10, 11]
    assert store.counts().by_job["k"][1]["paused"] == 2
    b = store.batch(other)
    b.finished("k", 1, 1, "ok", T0 + 15 * P, T0 + 13 * P)
    b.started("k", 2, 1, T0 + 13 * P)  # its catch-up goes on
    assert b.commit().lost == []
    store.close()


@pytest.mark.parametrize("together", [True, False], ids=["with another skip", "alone"])
def test_a_skip_of_a_deleted_key_leaves_out_the_slots_its_runs_claimed(store, together):
    """The same once the key is gone (the fault campaign, seed 6110,
    SQLite): a scheduler stopped across a pause, the resume and a cancel
    of the task recorded "paused" two slots that another had run after the
    resume, just after the cancel deleted the row - with no row, no slot
    guard, and the skip was recorded unchecked. The key's runs stay in the
    history, and decide."""
    add(store)
    add(store, "other")
    a, other = store.register(), store.register()
    b = store.batch(other)
    b.started("k", 1, 1, T0 + 12 * P + 1000)
    assert b.commit().ok
    b = store.batch(other)
    b.finished("k", 1, 1, "ok", T0 + 12 * P + P // 10, T0 + 13 * P)
    b.delete("k")  # cancelled
    assert b.commit().ok
    b = store.batch(a)
    b.skipped("k", T0 + 10 * P, "paused", period_ns=P, slots=5)  # 10-14: 12 ran
    if together:
        b.skipped("other", T0 + 5 * P, "paused")
    assert b.commit().ok
    assert slots(store) == [10, 11]
    store.close()


@pytest.mark.parametrize("together", [True, False], ids=["with another end", "alone"])
def test_the_misfire_slots_a_run_end_dropped_are_never_claimed_after(store, together):
    """One slot, one end, for the misfire slots a run's end drops (written
    on its run's row): the fault campaign, seed 3821 (PostgreSQL) - C's run
    16 of r2 crashed late (a crash is not caught up: its end dropped the
    next slot), and A, whose own next slot that was, claimed and ran it
    after. The end moves the slot guard past them too."""
    add(store)
    add(store, "other")
    a, other = store.register(), store.register()
    b = store.batch(a)
    b.started("k", 1, 1, T0 + 10 * P)
    b.started("other", 1, 1, T0 + 10 * P)
    assert b.commit().ok
    b = store.batch(a)
    b.finished("k", 1, 1, "crashed", T0 + 12 * P + P // 2, T0 + 13 * P)
    b.skipped("k", T0 + 11 * P, "misfire", period_ns=P, slots=2)  # (folded on the end: slots 11 and 12)
    if together:
        b.finished("other", 1, 1, "ok", T0 + 10 * P + P // 2, T0 + 11 * P)  # (ends written set-wise)
    assert b.commit().ok
    assert slots(store) == [11, 12]
    for slot in (11, 12):
        b = store.batch(other)
        b.started("k", 2, 1, T0 + slot * P + 1000)
        assert b.commit().lost == [("k", 2, 1)]
    b = store.batch(other)
    b.started("k", 2, 1, T0 + 13 * P)
    assert b.commit().lost == []
    store.close()


def test_a_skip_waits_for_a_claim_in_flight_on_postgresql(pg_url):
    """One slot, one end, when the claim is not yet committed (the fault
    campaign, seed 4115, PostgreSQL): a skip read its task's slot guard
    while another scheduler's claim of slot 12 held the row uncommitted,
    saw no claim, and recorded slot 12 "paused" too. The skip now reads
    the guard locked: it waits for the claim and leaves its slots out.
    The claim is held open by a trigger that waits on a lock the test
    holds (the store's own claim and skip, two connections)."""
    import psycopg

    store, other_store = open_store(pg_url), open_store(pg_url)
    add(store)
    a, other = store.register(), other_store.register()
    gate = psycopg.connect(pg_url, autocommit=True)
    gate.execute("SELECT pg_advisory_lock(20)")
    gate.execute(
        "CREATE FUNCTION held() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN PERFORM pg_advisory_xact_lock_shared(20); RETURN NEW; END $$"
    )
    gate.execute("CREATE TRIGGER held AFTER INSERT ON procsched_runs FOR EACH ROW EXECUTE FUNCTION held()")

    def waiting() -> int:  # the store's connections that wait on a lock
        sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        return gate.execute(sql).fetchone()[0]

    def until(n: int) -> None:  # (a poll of the server's own view, with a deadline)
        deadline = time.monotonic() + 20
        while waiting() < n:
            assert time.monotonic() < deadline, f"timed out waiting for {n} connection(s) to wait on a lock"
            time.sleep(0.005)

    claimed, skipped = [], []
    b = other_store.batch(other)
    b.started("k", 1, 1, T0 + 12 * P)
    claim = threading.Thread(target=lambda: claimed.append(b.commit()))
    claim.start()
    until(1)  # the claim holds k's row, its run row not yet written
    s = store.batch(a)
    s.skipped("k", T0 + 10 * P, "paused", period_ns=P, slots=5)  # 10-14: 12 is being claimed
    skip = threading.Thread(target=lambda: skipped.append(s.commit()))
    skip.start()
    until(2)  # the skip waits on k's row
    gate.execute("SELECT pg_advisory_unlock(20)")
    claim.join(20)
    skip.join(20)
    assert claimed[0].ok and claimed[0].lost == [] and skipped[0].ok
    assert slots(store) == [10, 11]
    assert store.counts().by_job["k"][1]["paused"] == 2
    gate.close()
    store.close()
    other_store.close()


def test_slots_two_schedulers_recorded_microseconds_apart_are_recorded_and_counted_once(store):
    """The fault campaign's stores: two schedulers that both recorded a
    pause's slots wrote each twice, their clocks' readings of it
    microseconds apart ("first reason stands" held for the same nanosecond
    only), and counted them twice. A slot recorded skipped (or dropped by a
    run's end) is recorded once; the new slots of an overlapping skip are
    recorded; another grid's slots (30 ms off) are not the same slots."""
    add(store)
    a, other = store.register(), store.register()
    us = 1000
    b = store.batch(a)
    b.skipped("k", T0 + 10 * P, "paused", period_ns=P, slots=3)  # 10-12
    assert b.commit().ok
    b = store.batch(other)
    b.skipped("k", T0 + 10 * P + 200 * us, "paused", period_ns=P, slots=5)  # 10-14: 13 and 14 are new
    b.skipped("k", T0 + 11 * P - 300 * us, "misfire")  # slot 11, alone
    assert b.commit().ok
    assert slots(store) == [10, 11, 12, 13, 14]
    assert store.counts().by_job["k"][1]["paused"] == 5 and store.counts().by_job["k"][1]["misfire"] == 0
    b = store.batch(a)
    b.started("k", 1, 1, T0 + 20 * P)
    assert b.commit().ok
    b = store.batch(a)
    b.finished("k", 1, 1, "crashed", T0 + 22 * P + P // 2, T0 + 23 * P)
    b.skipped("k", T0 + 21 * P, "misfire", period_ns=P, slots=2)  # (folded on the end: 21, 22)
    assert b.commit().ok
    b = store.batch(other)
    b.skipped("k", T0 + 16 * P + 100 * us, "paused", period_ns=P, slots=8)  # 16-23: 20 ran, the rest is its own
    b.skipped("k", T0 + 14 * P + 30 * P // 1000, "paused")  # another grid's slot, 30 ms after 14
    assert b.commit().ok
    got = [round((x.slot_ns - T0) / P, 3) for x in store.history("k", 100, skipped=True) if isinstance(x, SkippedSlot)]
    assert got == [10, 11, 12, 13, 14, 14.03, 16, 17, 18, 19, 21, 22]
    assert store.counts().by_job["k"][1]["paused"] == 10 and store.counts().by_job["k"][1]["misfire"] == 2
    store.close()


@pytest.mark.parametrize("folded", [True, False], ids=["on its end", "a row"])
def test_the_slot_after_a_skip_on_a_1_ms_grid_is_claimed_though_read_a_microsecond_early(store, folded):
    """A late 1 ms task with misfire "skip" (`python -m benchmarks.durable
    --only throughput`): each end dropped slots, and the slot guard moved
    to the last of them - exactly ``SLOT_GAP_NS`` before the next slot, so
    a claim whose clock read that slot a microsecond early was lost (about
    half of them: keyed runs/s halved). The next slot is claimed; the
    skipped one, read a microsecond late, still is not."""
    ms, us = P // 1000, P // 1_000_000
    add(store)
    h = store.register()
    assert store.claim_run(h, "k", 1, 1, T0)
    b = store.batch(h)
    if folded:
        b.finished("k", 1, 1, "ok", T0 + 4 * ms, T0 + 4 * ms)
    b.skipped("k", T0 + ms, "misfire", period_ns=ms, slots=3)  # 1-3 ms dropped
    assert b.commit().ok
    if not folded:
        b = store.batch(h)
        b.finished("k", 1, 1, "ok", T0 + 4 * ms, T0 + 4 * ms)
        assert b.commit().ok
    b = store.batch(h)
    b.started("k", 2, 1, T0 + 3 * ms + us)  # the last one skipped, read a microsecond late
    assert b.commit().lost == [("k", 2, 1)]
    b = store.batch(h)
    b.started("k", 2, 1, T0 + 4 * ms - us)  # the next one, read a microsecond early
    result = b.commit()
    assert result.ok and result.lost == []
    store.close()
