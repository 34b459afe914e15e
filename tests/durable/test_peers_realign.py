"""A scheduler follows the store's next claim of a task another scheduler
holds - also when only its due time changed (the fault campaign, seed 2225,
PostgreSQL): while A held run 20 of a catch-up task (given ahead to a busy
worker), C's re-read moved its own next claim, run 21, past A's run, to
the first slot not before now (A's to catch up when its run ends). A then
shut down cleanly and gave run 20 up before it started: the row went back
to run 20's slot, so run 21 is due there. C's next re-read saw the same
claim (run 21) and kept its later due time: four slots were neither run
nor recorded. A real journal on a real SQLite store; the engine's carrier
is a recorder (the engine's tests')."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from procsched._core import Policy
from procsched._core import TaskState as LocalState
from procsched._core._schedule import Schedule
from procsched._errors import StoreError
from procsched._runtime import _messages as m
from procsched._runtime._durable._journal import Journal
from procsched._runtime._durable._stored import stored_hash
from procsched._runtime._engine import Engine
from procsched._store import SkippedSlot, TaskDefinition, TaskState, open_store
from tests.runtime.test_engine import FakeCarrier

NS = 1_000_000_000
PAYLOAD = ("fn", "args")
RATE = {"kind": "fixed_rate", "period_ns": NS, "initial_delay_ns": 0, "misfire": "catch_up"}
RATE_DEFINITION = TaskDefinition("k", "m:f", b"", RATE)


def _this_scheduler(path: str, grid: int, runs: int, attempt: int, due: int) -> tuple[Journal, Engine, int]:
    """This scheduler on the store at ``path``: a real journal, its engine
    (the engine's tests' recorder for a carrier) and its wall offset, with
    task 1, key "k" (a fixed rate of 1 s on ``grid``), adopted where the
    store had it: ``runs`` claimed, next ``attempt``, due at ``due``."""
    journal = Journal(path, os.getpid(), emit=lambda events: None)
    engine = Engine(FakeCarrier(prefetch=2), workers=1, policy=Policy.PRIORITY, durable=journal)
    offset = time.time_ns() - time.monotonic_ns()
    engine.set_wall_offset(offset, time.monotonic_ns())
    shape = m.AdoptShape.wire(Schedule.fixed_rate(NS).to_wire(), grid, 0, None, "k", b"", None, None)
    journal.adopt(engine, [shape], [m.AdoptRow.wire("k", 0, runs, attempt, due, grid, False, False, 1, "h")], offset)
    return journal, engine, offset


def _turn(journal: Journal, engine: Engine, offset: int, now: int) -> None:
    """A dispatcher turn, its commit collected."""
    journal.turn(engine, engine.carrier, offset, now)
    if journal.writer.busy:
        journal.writer.wait(None)
        journal.committed(engine, engine.carrier, now)


def _paused_from_the_store(path: str, grid: int) -> tuple[Any, Journal, Engine, int]:
    """The store at ``path`` holds "k" with run 11 due at ``grid``; this
    scheduler ran runs 1-10 and has followed a pause of it from the store.
    (store, journal, engine, offset): see ``_this_scheduler``."""
    store = open_store(path)
    batch = store.batch()
    batch.upsert(TaskDefinition("k", "m:f", b"", RATE), TaskState(10, grid))
    batch.commit()
    journal, engine, offset = _this_scheduler(path, grid, 10, 1, grid)
    assert store.pause("k")
    journal.peers.apply(engine, 1, store.get("k"), time.monotonic_ns(), offset)  # the pause, followed
    assert engine.state(1) is LocalState.PAUSED
    return store, journal, engine, offset


def test_a_claim_moved_past_a_holders_run_goes_back_to_the_slot_the_holder_gave_up(tmp_path) -> None:
    path = str(tmp_path / "s.db")
    store = open_store(path)
    slot20 = time.time_ns() - 3 * NS  # run 20's slot: three periods ago
    batch = store.batch()
    batch.upsert(TaskDefinition("k", "m:f", b"", RATE), TaskState(19, slot20))
    batch.commit()
    a = store.register(lease_ns=30 * NS, pid=1)  # another scheduler, A
    batch = store.batch(a)
    batch.started("k", 20, 1, slot20)  # A holds run 20 (given ahead to its busy worker)
    batch.commit()

    journal, engine, offset = _this_scheduler(path, slot20, 19, 1, slot20)  # this scheduler, C
    try:
        peers = journal.peers

        peers.apply(engine, 1, store.get("k"), time.monotonic_ns(), offset)  # A's run 20 in flight
        assert engine.next_claim(1) == (21, 1)
        moved = engine.next_wall(1)
        assert moved is not None and moved > slot20 + 3 * NS - NS // 2  # past A's run: not before now

        batch = store.batch(a)
        batch.finished("k", 20, 1, "cancelled", time.time_ns(), slot20)  # A shut down: run 20's slot is kept
        batch.commit()
        peers.apply(engine, 1, store.get("k"), time.monotonic_ns(), offset)
        assert engine.next_claim(1) == (21, 1)
        assert engine.next_wall(1) == slot20  # the slot A gave up: run 21 is due there (catch_up: then the rest)
    finally:
        journal.close(clean=True)
        store.close()


def test_a_task_resumed_from_the_store_goes_on_at_the_stored_grid_s_next_slot(tmp_path) -> None:
    """The fault campaign, seed 3302 (SQLite), replayed: this scheduler's
    task still waited for a retry of run 77 (another scheduler won that
    retry's claim, ran it and the runs after it), then was paused and
    resumed from the store. The core resumes a pending retry "as soon as it
    may" - now -, and the run after the store's last was claimed at this
    scheduler's re-read, not at a slot: every later slot moved off the
    task's grid, and the grid's own were neither run nor recorded. A task
    resumed from the store goes on at the stored grid's next slot from now."""
    path = str(tmp_path / "s.db")
    store = open_store(path)
    now = time.time_ns()
    grid = now - 5 * NS - NS // 2  # run 77's slot; the grid's next slot from now is half a period ahead
    batch = store.batch()
    batch.upsert(TaskDefinition("k", "m:f", b"", RATE), TaskState(80, grid + 3 * NS, 1, True))  # B ran 77-80, paused
    batch.commit()

    retry = grid + NS // 20  # run 77's second attempt, as this scheduler had it
    journal, engine, offset = _this_scheduler(path, grid, 77, 2, retry)  # this scheduler
    try:
        peers = journal.peers

        peers.apply(engine, 1, store.get("k"), time.monotonic_ns(), offset)  # the store's pause, followed
        assert store.resume("k")
        peers.apply(engine, 1, store.get("k"), time.monotonic_ns(), offset)  # the resume, followed
        assert engine.next_claim(1) == (81, 1)
        assert engine.next_wall(1) == grid + 6 * NS  # the grid's next slot from now (before: now)
    finally:
        journal.close(clean=True)
        store.close()


def test_a_task_whose_retry_another_scheduler_runs_stays_on_its_run_s_grid(tmp_path) -> None:
    """The fault campaign, seed 3404 (SQLite), replayed: this scheduler ran
    run 191, which failed, and was stopped before its retry; another one
    took its lease over and claimed the retry. Back, this scheduler found
    itself fenced out and followed the row: while a retry is in flight the
    row's due time is the retry's, and the next claim was counted a period
    from it - a grid of the retry's time, not the task's. On standby it
    kept that grid; woken, it ran every later slot off the task's grid,
    and the grid's own slots were neither run nor recorded. The next claim
    goes on from the retried run's regular slot."""
    path = str(tmp_path / "s.db")
    store = open_store(path)
    now = time.time_ns()
    grid = now - 2 * NS - NS // 2  # run 191's regular slot; the grid's next slot from now is half a period ahead
    retry = grid + NS // 5  # its second attempt
    batch = store.batch()
    batch.upsert(TaskDefinition("k", "m:f", b"", RATE), TaskState(190, grid))
    batch.commit()
    b = store.register(lease_ns=30 * NS, pid=1)  # the other scheduler, B
    batch = store.batch(b)
    batch.started("k", 191, 1, grid)
    batch.commit()
    batch = store.batch(b)
    batch.finished("k", 191, 1, "error", grid + NS // 10, retry, retry=True)
    batch.commit()
    batch = store.batch(b)
    batch.started("k", 191, 2, retry)  # B holds the retry
    batch.commit()

    journal, engine, offset = _this_scheduler(path, grid, 191, 2, retry)  # this scheduler
    try:
        peers = journal.peers

        peers.apply(engine, 1, store.get("k"), time.monotonic_ns(), offset, force=True)  # fenced out: the row, as it is
        assert engine.next_claim(1) == (192, 1)
        assert engine.next_wall(1) == grid + 3 * NS  # the grid's next slot from now, not the retry's (retry + 3 s)
    finally:
        journal.close(clean=True)
        store.close()


def test_a_runner_late_to_a_resume_records_paused_only_the_slots_before_another_ran_them(tmp_path) -> None:
    """The fault campaign, seed 3404 (SQLite), replayed: the scheduler that
    ran a task followed its pause, then was stopped across its resume;
    another scheduler followed the resume first and ran the task's slots
    from it. Back, the runner recorded every slot from the pause to its own
    late re-read "paused" - those the other one had run too: one slot, two
    ends. It records only the slots before the first run claimed since."""
    grid = time.time_ns() - 6 * NS  # run 11's slot: the first the pause holds back
    store, journal, engine, offset = _paused_from_the_store(str(tmp_path / "s.db"), grid)
    try:
        peers = journal.peers
        assert store.resume("k")  # 3 s later (slots grid .. grid + 2 s were paused over) ...
        a = store.register(lease_ns=30 * NS, pid=1)  # ... another scheduler, A, follows it first
        for run, slot in ((11, grid + 3 * NS), (12, grid + 4 * NS)):
            batch = store.batch(a)
            batch.started("k", run, 1, slot)
            batch.commit()
            batch = store.batch(a)
            batch.finished("k", run, 1, "ok", slot + NS // 10, slot + NS)
            batch.commit()

        mark = len(engine.events)
        peers.apply(engine, 1, store.get("k"), time.monotonic_ns(), offset)  # this one, back: the resume
        skipped = [m.view(m.RunSkipped, e) for e in engine.events[mark:] if e[0] == m.RUN_SKIPPED]
        slots = [s.wall_ns + i * s.period_ns for s in skipped for i in range(s.slots)]
        assert slots == [grid, grid + NS, grid + 2 * NS]  # before: through grid + 5 s, runs 11 and 12's slots too
        assert all(s.reason == "paused" for s in skipped)
        assert engine.next_claim(1) == (13, 1)
    finally:
        journal.close(clean=True)
        store.close()


def test_a_runner_late_to_a_resume_runs_the_slots_since_the_resume(tmp_path) -> None:
    """A resume written to the store is followed by the task's runner at its
    next re-read - late by seconds when the store was locked meanwhile. It
    went on at its next slot from that re-read and recorded the slots before
    it "paused", those after the resume too (the fault campaign, seed 4622,
    SQLite: a slot a third of a second after the store's resume recorded
    "paused"). On resume a task goes on at its next slot from the resume
    (the row's write; catch_up runs the slots since, late); only the slots
    before it were paused over."""
    grid = time.time_ns() - 2 * NS + NS // 2  # the first slot the pause holds back; it and the next pass
    store, journal, engine, offset = _paused_from_the_store(str(tmp_path / "s.db"), grid)
    try:
        peers = journal.peers
        assert store.resume("k")  # half a period before the third slot, grid + 2 s

        late = time.monotonic_ns() + 3 * NS  # this scheduler's re-read, 3 s late (three more slots passed)
        mark = len(engine.events)
        peers.apply(engine, 1, store.get("k"), late, offset)
        skipped = [m.view(m.RunSkipped, e) for e in engine.events[mark:] if e[0] == m.RUN_SKIPPED]
        slots = [s.wall_ns + i * s.period_ns for s in skipped for i in range(s.slots)]
        assert slots == [grid, grid + NS]  # before: through grid + 4 s, recorded "paused" after the resume
        assert engine.next_claim(1) == (11, 1)
        assert engine.next_wall(1) == grid + 2 * NS  # before: grid + 5 s (the next slot from the re-read)
    finally:
        journal.close(clean=True)
        store.close()


def test_a_resume_asked_here_goes_on_on_the_stored_grid_not_at_a_stale_retry(tmp_path) -> None:
    """The fault campaign, seed 4605 (PostgreSQL): this scheduler followed
    the task from the store while another one ran it - last while that one
    retried run 14 - then the task was paused from outside, and the user
    resumed it here. Its local next claim was still run 14's retry, which
    the core resumes "as soon as it may": now, off the grid; that due time,
    written with the resume, became every instance's, and the grid moved
    (20 slots lost). A resume asked here goes on at the stored grid's next
    slot from now."""
    path = str(tmp_path / "s.db")
    store = open_store(path)
    now = time.time_ns()
    grid = now - 3 * NS + NS // 3  # run 16's slot; the grid's next slot from now is a third of a period ahead
    batch = store.batch()
    batch.upsert(TaskDefinition("k", "m:f", b"", RATE), TaskState(15, grid, 1, True))  # another ran 14-15; paused
    batch.commit()

    retry = grid - 2 * NS + NS // 20  # run 14's second attempt, as this scheduler had it
    journal, engine, offset = _this_scheduler(path, grid - 2 * NS, 14, 2, retry)
    journal.offset = offset  # (the dispatcher's, at its last turn)
    try:
        peers = journal.peers
        peers.apply(engine, 1, store.get("k"), time.monotonic_ns(), offset)  # the store's pause, followed
        assert engine.state(1) is LocalState.PAUSED

        now_mono = time.monotonic_ns()
        peers.controlled(engine, 1, now_mono)  # the user's resume, here
        assert peers.resume(engine, 1, now_mono)
        assert engine.next_claim(1) == (16, 1)  # before: (14, 2), run 14's retry
        assert engine.next_wall(1) == grid + 3 * NS  # before: now, off the grid
    finally:
        journal.close(clean=True)
        store.close()


def _deploy(journal: Journal, engine: Engine, offset: int, period: int) -> None:
    """The program schedules "k" here again with a changed definition (its
    arguments): task 2, a fixed rate of ``period``, due a period from now
    on a grid of its own (as the facade adds it); the dispatcher's
    definition, add and store write."""
    schedule = Schedule.fixed_rate(period)
    now = time.monotonic_ns()
    options = {"priority": 0, "timeout_ns": None, "name": "k", "retry": None}
    record = schedule.to_record(period, now + offset)
    define = m.Define.wire(2, "k", "m:f", b"changed", record, options, f"changed {period}", False)
    journal.expect(m.view(m.Define, define))
    add = m.Add.wire(
        2, now + period, period, now + offset, None, schedule.to_wire(), 0, None, "k", PAYLOAD, None, None, None
    )
    assert engine.add(m.view(m.Add, add), 2, PAYLOAD) is None
    journal.added(engine, 2)


def test_a_deploy_that_changes_a_task_but_not_its_grid_goes_on_on_the_stored_grid(tmp_path) -> None:
    """The fault campaign, seed 4008 (SQLite): an instance that deployed a
    changed definition of a task (its arguments; the same period) added it
    on a grid counted from its own add, 30 ms off the stored one the other
    instances went on with: for a moment two grids ran one task, and a
    slot of one was recorded paused while the other's ran. A changed
    definition on the same grid goes on from the stored next slot (and
    the row keeps its state); a changed period starts a grid of its own."""
    path = str(tmp_path / "s.db")
    store = open_store(path)
    due = time.time_ns() + NS // 3  # the stored grid's next slot: a third of a period from now
    batch = store.batch()
    batch.upsert(TaskDefinition("k", "m:f", b"", RATE), TaskState(19, due))
    batch.commit()
    for period, expected in ((NS, due), (2 * NS, None)):
        journal = Journal(path, os.getpid(), emit=lambda events: None)
        engine = Engine(FakeCarrier(prefetch=2), workers=1, policy=Policy.PRIORITY, durable=journal)
        offset = time.time_ns() - time.monotonic_ns()
        engine.set_wall_offset(offset, time.monotonic_ns())
        try:
            _deploy(journal, engine, offset, period)
            wall = engine.next_wall(2)
            assert wall is not None
            if expected is not None:
                assert engine.next_claim(2) == (20, 1)
                assert abs(wall - expected) < NS // 1000  # (clock readings: microseconds off; before: 2/3 s later)
                assert journal.batch.commit().ok  # (what the dispatcher's next turn commits)
                assert store.get("k").state.next_due_ns == due and store.get("k").definition.args == b"changed"
            else:
                assert wall > due + NS // 2  # a new grid: two periods from the add
        finally:
            journal.close(clean=True)
    store.close()


@pytest.mark.parametrize("next_held", [False, True])
def test_a_claim_refused_for_a_pause_is_recorded_paused_when_its_row_is_read_only_later(
    tmp_path, monkeypatch, next_held: bool
) -> None:
    """The fault campaign, seed 5715 (PostgreSQL), replayed: a claim was
    refused because another instance had paused the task, and the read of
    its row after the refusal failed (a dropped connection). The task went
    on to its next slot, whose claim was refused too and recorded "paused";
    the first slot was neither run nor recorded. The row is read again at
    the next re-read, and the slot recorded then - also while the next
    slot's claim is on its way (``next_held``: the task is not paused here
    until that claim is refused too; seed 5915: the first slot went
    unrecorded)."""
    path = str(tmp_path / "s.db")
    store = open_store(path)
    grid = time.time_ns() - 2 * NS - NS // 2  # run 11's slot: due, and run 12's after it
    batch = store.batch()
    batch.upsert(RATE_DEFINITION, TaskState(10, grid))
    batch.commit()
    journal, engine, offset = _this_scheduler(path, grid, 10, 1, grid)
    journal.hashes[1] = stored_hash(RATE_DEFINITION)  # (adopted with this very definition: no redefinition)
    try:
        now = time.monotonic_ns()
        engine.start(now)
        assert store.pause("k")  # another instance's pause (not read here yet)
        engine.tick(now)  # run 11 claimed: held for the store
        real_get, failed = journal.store.get, []

        def dropped(key: str) -> Any:  # the read after the refusal fails, as on a dropped connection
            if not failed:
                failed.append(key)
                raise StoreError("reading a task failed: the connection dropped")
            return real_get(key)

        monkeypatch.setattr(journal.store, "get", dropped)
        _turn(journal, engine, offset, now)  # the claim: refused (paused)
        assert failed == ["k"]
        assert engine.next_claim(1) == (12, 1)  # run 11 skipped here
        if next_held:
            engine.tick(time.monotonic_ns())  # run 12 claimed: held for the store

        journal.peers.sync(engine, time.monotonic_ns(), offset)  # the next re-read
        assert engine.state(1) is (LocalState.RUNNING if next_held else LocalState.PAUSED)
        _turn(journal, engine, offset, time.monotonic_ns())  # (next_held: run 12's claim, refused)
        _turn(journal, engine, offset, time.monotonic_ns())  # (next_held: the skip its refusal recorded)
        assert engine.state(1) is LocalState.PAUSED
        skipped = [r for r in store.history("k", 10, skipped=True) if isinstance(r, SkippedSlot)]
        expected = [(grid + i * NS, "paused") for i in range(2 if next_held else 1)]
        assert sorted((r.slot_ns, r.reason) for r in skipped) == expected
    finally:
        journal.close(clean=True)
        store.close()


def test_a_resume_asked_here_is_not_undone_by_a_re_read_of_the_row_from_before_it(tmp_path) -> None:
    """The fault campaign, seed 5915 (PostgreSQL), replayed: the user
    resumed a task here; before the commit carrying the resume, a re-read
    read the row as it was - paused, due at the first slot the pause held
    back. The resume stood, but the task was realigned to that due time:
    catch_up made up the pause's slots after the resume, while the other
    instances followed the resume and recorded them "paused". A re-read
    from before a pause or resume asked here leaves the task as it is."""
    grid = time.time_ns() - 3 * NS - NS // 2  # run 11's slot, the first the pause held back
    store, journal, engine, offset = _paused_from_the_store(str(tmp_path / "s.db"), grid)
    journal.offset = offset  # (the dispatcher's, at its last turn)
    journal.hashes[1] = stored_hash(RATE_DEFINITION)  # (adopted with this very definition: no redefinition)
    try:
        peers = journal.peers
        now = time.monotonic_ns()
        peers.controlled(engine, 1, now)  # the user's resume, here
        assert peers.resume(engine, 1, now)
        assert engine.next_wall(1) == grid + 4 * NS  # the grid's next slot from now
        journal.sync(engine.events)  # the turn journals it: on its way to the store

        peers.apply(engine, 1, store.get("k"), time.monotonic_ns(), offset)  # a re-read from before its commit
        assert engine.next_claim(1) == (11, 1)
        assert engine.next_wall(1) == grid + 4 * NS  # before: grid, the pause's first slot

        _turn(journal, engine, offset, time.monotonic_ns())  # its commit
        row = store.get("k")
        assert not row.state.paused and row.state.next_due_ns == grid + 4 * NS
        peers.apply(engine, 1, row, time.monotonic_ns(), offset)  # the re-read after it
        assert engine.next_wall(1) == grid + 4 * NS
    finally:
        journal.close(clean=True)
        store.close()


def test_a_claim_refused_by_a_slot_recorded_skipped_goes_on_from_the_slot_after_it(tmp_path) -> None:
    """The fault campaign, seed 5915 (PostgreSQL), replayed: a runner late
    to a resume ran the slots of the pause (the row due at the next of
    them), while another instance had recorded them "paused" - the store
    kept those it had not claimed, the last of them after the row's due
    time. Every instance's claim at that due time was refused (the slot
    guard) and went on "not before now": the slots between were neither
    run nor recorded. The claim goes on from the first slot after the
    guard (catch_up: they run)."""
    path = str(tmp_path / "s.db")
    store = open_store(path)
    slot13 = time.time_ns() - 4 * NS - NS // 2  # the row's due time (run 5's slot), recorded "paused" ...
    batch = store.batch()
    batch.upsert(RATE_DEFINITION, TaskState(4, slot13))
    batch.skipped("k", slot13, "paused", period_ns=NS, slots=2)  # ... with the next one, by another instance
    batch.commit()
    journal, engine, offset = _this_scheduler(path, slot13, 4, 1, slot13)
    journal.hashes[1] = stored_hash(RATE_DEFINITION)
    try:
        now = time.monotonic_ns()
        engine.start(now)
        engine.tick(now)  # run 5 claimed at slot13: held for the store
        _turn(journal, engine, offset, now)  # refused: the slot guard
        assert engine.next_claim(1) == (5, 1)
        assert engine.next_wall(1) == slot13 + 2 * NS  # before: slot13 + 5 s, the next slot from now
    finally:
        journal.close(clean=True)
        store.close()


@pytest.mark.parametrize("standby", [False, True])
def test_a_pause_recorded_for_a_runner_gone_counts_from_the_store_s_last_slot_not_the_local_grid(
    tmp_path, standby: bool
) -> None:
    """The fault campaign, seed 6208 (SQLite), replayed: another scheduler,
    A, ran a catch_up task and fell behind (the store locked); this one
    followed A's run in flight, its next claim moved past it to the next
    slot from now (``standby``: that claim lost to A's run too, it went on
    standby). The task was paused from the command line, A recorded its
    next slot "paused" and was gone (its lease run out) before the resume,
    so this scheduler recorded the pause's slots in its place - from where
    its own grid stood: the slots between A's last and this one's "now"
    were neither run nor recorded. They count from the store's last slot
    (a run, or a skip)."""
    path = str(tmp_path / "s.db")
    store = open_store(path)
    grid = time.time_ns() - 4 * NS - NS // 10  # run 11's slot; the grid's next slot from now is grid + 5 s
    batch = store.batch()
    batch.upsert(RATE_DEFINITION, TaskState(10, grid))
    batch.commit()
    a = store.register(lease_ns=30 * NS, pid=1)  # the runner, A
    batch = store.batch(a)
    batch.started("k", 11, 1, grid)  # A holds run 11
    batch.commit()
    journal, engine, offset = _this_scheduler(path, grid, 10, 1, grid)
    journal.hashes[1] = stored_hash(RATE_DEFINITION)
    try:
        peers = journal.peers
        now = time.monotonic_ns()
        peers.sync(engine, now, offset)  # A's run in flight: this one's next claim goes past it
        assert engine.next_claim(1) == (12, 1) and engine.next_wall(1) == grid + 5 * NS
        if standby:
            at = grid + 5 * NS - offset  # (the engine's clock at that slot, given: no real time passes)
            engine.start(at)
            engine.tick(at)  # run 12 claimed: held for the store
            _turn(journal, engine, offset, at)  # refused: A's run 11 is in flight
            assert engine.state(1) is LocalState.PAUSED and 1 in peers.standby

        batch = store.batch(a)
        batch.finished("k", 11, 1, "ok", grid + NS // 10, grid + NS)
        batch.commit()
        assert store.pause("k")  # from the command line
        batch = store.batch(a)
        batch.skipped("k", grid + NS, "paused")  # A's claim of run 12, refused: its slot recorded
        batch.commit()
        peers.apply(engine, 1, store.get("k"), time.monotonic_ns(), offset)  # the pause, followed here
        assert store.unregister(a)  # A is gone ...
        assert store.resume("k")  # ... before the resume

        peers.apply(engine, 1, store.get("k"), time.monotonic_ns(), offset)  # the resume, followed
        _turn(journal, engine, offset, time.monotonic_ns())  # (the slots it recorded, written)
        skipped = [(r.slot_ns, r.reason) for r in store.history("k", 10, skipped=True) if isinstance(r, SkippedSlot)]
        assert skipped == [(grid + i * NS, "paused") for i in range(1, 5)]  # before: grid + 1 s only
        assert engine.next_claim(1) == (12, 1)
        assert engine.next_wall(1) == grid + 5 * NS
    finally:
        journal.close(clean=True)
        store.close()
