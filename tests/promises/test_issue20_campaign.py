"""What the fault campaign (tests/campaign) found after issue 20's items
were fixed, one deterministic reproduction per root cause.

1. A keyed task deleted and declared again by a scheduler whose run count
   was stale (it kept the task on standby while another scheduler claimed
   its runs, then replaced it: its cancel deleted the key, its new
   definition inserted the row again) numbered its runs from its stale
   count: a claim overwrote the row of a run another scheduler had run,
   the same (key, run) ran twice, and a retry of it was refused forever
   (the task stalled). A row made anew goes on from the key's history,
   and a replacement numbers its runs from the store's, not from what its
   scheduler counted.
2. A task adopted at start-up learnt its definition from its first re-read
   of the store: a changed definition stored before that re-read was taken
   for the one it ran, so it ran the old one for good. An adopted task
   knows the definition it was adopted with.
3. A dispatcher starting while its SQLite store was locked for a moment
   (another process in a write transaction) died of "database is locked"
   at its first transaction: every task of the program failed. It waits
   the lock out (``_writer.patiently``); so does the program's recovery at
   ``Scheduler(store=...)`` (a restart during such a lock raised
   StoreError there), and opening a store of the current schema takes no
   writer's lock at all.
4. A scheduler adopting a paused task at start-up wrote its pause back
   to the store (the adoption's state write, the pause's event): a resume
   made by another scheduler between its read and that write was undone -
   the task stayed paused for good. Adopting never writes a pause.
8. The scheduler holding a keyed task whose definition another scheduler
   changed ends its task and adopts the stored one; when reading it failed
   for a passing reason (a dropped connection) it took the task for
   unloadable and never read it again, while its registration - alive -
   kept the others on standby: the task stalled for good (seed 805,
   pg_drop). It reads the task again at the next re-read.
9. A program replacing an adopted keyed task with a changed definition
   (a deploy) while its dispatcher's re-read followed the same change
   made by another scheduler: the re-read took the task being replaced
   for one whose definition had changed elsewhere and adopted the stored
   one anew, beside the program's replacement - two live tasks of one
   key in one scheduler, whose claims of each run, the same scheduler's,
   both won: every run ran twice (the fault campaign, seed 2503). A task
   being replaced is not followed, and the program's add and an adoption
   of its key never both make a task.
10. A scheduler taking over another rescheduled a fixed-rate task whose
   crashed attempt was a retry from that retry's time: every later slot
   moved by the retry's delay, and the grid's own slots were neither run
   nor recorded (the fault campaign, seed 2503, replayed: 20 slots). The
   grid goes on from the run's regular slot (its first attempt's).
11. A pause that took back a run given ahead whose start was written (it
   waited behind another task's run on the only worker) recorded that run
   cancelled with no next due time: a scheduler adopting the paused task
   (a restart) began a new grid at its own start (the fault campaign, seed
   2716, replayed: 4 slots neither run nor recorded). The task's next slot
   is kept.
12. A scheduler that cancelled a keyed task adopted from another's
   changed definition while its run was in flight: its own re-read, finding
   the key gone, dropped the task from its journal (the task was CANCELLED,
   not RUNNING), and the run's end was never written - the store kept it
   in flight, and the key, re-added later, never ran again (the fault
   campaign, seed 3108, replayed: "stalled"). A task with a run in flight
   keeps its key until the run's end is recorded.
13. A scheduler starting on a store recorded a dead one's run in flight
   crashed in one transaction and wrote its task's reschedule later (with
   the adoption's writes): meanwhile another scheduler alive on the store
   read the row as the crash left it - a crashed retry's task due at the
   retry's time - and claimed the next run there: every later slot of the
   fixed-rate task moved off its grid by the retry's delay, and the grid's
   own were neither run nor recorded (the fault campaign, seed 3220,
   replayed: "slot lost"). A take-over at start-up reschedules in its own
   transaction, as one by a running scheduler does (item 10).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any

import psutil
import pytest

from procsched._errors import StoreError
from procsched._runtime._durable._writer import patiently
from procsched._store import TaskDefinition, TaskState, open_store
from tests.campaign import storesql
from tests.promises.helpers import starts, wait_until

pytestmark = [pytest.mark.timeout(120)]
TASKS = "tests.promises.tasks"
#: Another instance follows a change within the re-read interval (<= 1 s); slack on top (the campaign's checker's).
SETTLE = 2.0
P = 1_000_000_000
T0 = 1_700_000_000 * P


def _definition(tag: str) -> TaskDefinition:
    return TaskDefinition("k", "tests.promises.tasks:mark", tag.encode(), {"kind": "fixed_rate", "period_ns": P}, {})


def test_a_task_row_made_anew_never_numbers_a_run_of_its_history_again(store_url) -> None:
    store = open_store(store_url)
    try:
        b = store.batch()
        b.upsert(_definition("v1"), TaskState(next_due_ns=T0))
        assert b.commit().ok
        a, c = store.register(), store.register()
        for run in (1, 2, 3):  # A runs 1-3; C keeps k on standby, its count still 0
            claim = store.batch(a)
            claim.started("k", run, 1, T0 + (run - 1) * P)
            assert claim.commit().ok
            end = store.batch(a)
            end.finished("k", run, 1, "ok", T0 + run * P, T0 + run * P)
            assert end.commit().ok
        claim = store.batch(a)
        claim.started("k", 4, 1, T0 + 3 * P)  # run 4 in flight on A
        assert claim.commit().ok
        replace = store.batch(c)  # C replaces k: its cancel deletes the key, its new definition comes with its count
        replace.delete("k")
        replace.upsert(_definition("v2"), TaskState(run_count=0, next_due_ns=T0 + 4 * P))
        assert replace.commit().ok
        task = store.get("k")
        assert task is not None
        assert (task.state.run_count, task.state.next_attempt, task.in_flight, task.holder) == (4, 1, 1, a.id)
        stale = store.batch(c)
        stale.started("k", 1, 1, T0 + 5 * P)  # C's stale next run: refused, run 1's row stays A's
        assert stale.commit().lost == [("k", 1, 1)]
        end = store.batch(a)
        end.finished("k", 4, 1, "ok", T0 + 4 * P, T0 + 4 * P)
        assert end.commit().ok  # A's run in flight ends, recorded
        right = store.batch(c)
        right.started("k", 5, 1, T0 + 5 * P)
        assert right.commit().ok
        runs = {(r.run, r.attempt): (r.holder, r.outcome) for r in store.history("k", 10)}
        assert runs == {
            (1, 1): (a.id, "ok"),
            (2, 1): (a.id, "ok"),
            (3, 1): (a.id, "ok"),
            (4, 1): (a.id, "ok"),
            (5, 1): (c.id, None),
        }
    finally:
        store.close()


def _rate(out: str, tag: str, **extra: object) -> dict[str, object]:
    return {"key": "k", "kind": "rate", "period": 0.1, "fn": f"{TASKS}:mark", "args": [out, tag], **extra}


def _twice(out: str) -> list[tuple[int, int]]:
    counted = Counter((x.run, x.attempt) for x in starts(out))
    return sorted(k for k, n in counted.items() if n > 1)


@pytest.mark.slow
def test_a_replacement_made_on_standby_numbers_its_runs_after_the_others(instances, store_url, tmp_path) -> None:
    """A runs k; B adopts it; one of them keeps it on standby while the
    other runs on; then the one on standby replaces k (its count is stale).
    No (run, attempt) may run twice, and the store's history keeps every run."""
    out = str(tmp_path / "runs.log")
    a = instances("A", {"store": store_url, "lease": 2.0, "tasks": [_rate(out, "v1")]}).ready()
    wait_until(lambda: len(starts(out)) >= 3, 30, "A to run k")
    b = instances("B", {"store": store_url, "lease": 2.0}).ready()  # adopts k

    def on_standby() -> list[object]:
        return [i for i in (a, b) if "k" in (i.ask("stats")["stats"] or {}).get("standby", ())]

    standby = wait_until(on_standby, 30, "A or B to keep k on standby")[0]
    ran = len(starts(out))
    wait_until(lambda: len(starts(out)) >= ran + 5, 30, "the other to run k on (the standby's count goes stale)")
    got = standby.ask("add " + json.dumps(_rate(out, "v2", replace=True)))
    assert got.get("added") == "k", got
    wait_until(lambda: len([x for x in starts(out) if x.tag == "v2"]) >= 5, 30, "the replacement to run")
    for inst in (a, b):
        assert inst.quit()["closed"]
    assert not _twice(out), f"(run, attempt) started twice: {_twice(out)}"
    ran_by = {(x.run, x.attempt) for x in starts(out)}
    stored = {(r.run, r.attempt) for r in storesql.runs(store_url) if r.key == "k" and r.outcome == "ok"}
    assert ran_by == stored, (sorted(ran_by ^ stored), "ran but not recorded ok, or the other way round")


@pytest.mark.slow
def test_a_changed_definition_stored_before_an_adopters_first_re_read_is_followed(
    instances, store_url, tmp_path
) -> None:
    """B adopts k (v1) at start-up and is stopped before it re-reads the
    store; A replaces k with v2 meanwhile; B continues; A shuts down. From
    the re-read interval on, only v2 runs (B must not take v2's row for the
    definition of the task it runs)."""
    out = str(tmp_path / "runs.log")
    a = instances("A", {"store": store_url, "lease": 3.0, "tasks": [_rate(out, "v1")]}).ready()
    wait_until(lambda: starts(out), 30, "A to run k")
    b = instances("B", {"store": store_url, "lease": 3.0}).ready()  # adopts k (v1)
    b.stop()  # before its first re-read (a second after it registered, at most)
    got = a.ask("add " + json.dumps(_rate(out, "v2", replace=True)))
    assert got.get("added") == "k", got
    wait_until(lambda: [x for x in starts(out) if x.tag == "v2"], 30, "A to run v2 (stored)")
    b.cont()
    settle = time.time() + SETTLE  # (B follows within the re-read interval of going on)
    assert a.quit()["closed"]  # B goes on alone
    wait_until(lambda: len([x for x in starts(out) if x.inst == "B" and x.t > settle]) >= 5, 30, "B to run k")
    assert b.quit()["closed"]
    after = [x for x in starts(out) if x.t > settle]
    old = [x for x in after if x.tag == "v1"]
    assert not old, f"{len(old)} of {len(after)} runs after v2 was stored ran v1, on {sorted({x.inst for x in old})}"


def test_a_dispatcher_waits_out_a_store_locked_at_its_start(tmp_path) -> None:
    """What the dispatcher does to register on its store (the program opened
    it a moment before): the file is locked by another process's write
    transaction at the first try; the lock ends; it registers."""
    path = tmp_path / "store.db"
    url = f"sqlite:///{path}?busy_timeout=0.001"
    store = open_store(url)
    lock = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    lock.execute("BEGIN EXCLUSIVE")
    refused = threading.Event()
    got: list[Any] = []

    def register() -> Any:
        try:
            return store.register(lease_ns=P)
        except StoreError:
            refused.set()
            raise

    try:
        registrar = threading.Thread(target=lambda: got.append(patiently(register)), daemon=True)
        registrar.start()
        assert refused.wait(30), "the registration was not refused while the file was locked"
        lock.execute("ROLLBACK")
        registrar.join(30)
        assert got and got[0].token > 0, "no registration once the lock ended"
    finally:
        lock.close()
        store.close()


def test_a_store_of_the_current_schema_opens_while_another_process_holds_its_write_lock(tmp_path) -> None:
    path = tmp_path / "store.db"
    url = f"sqlite:///{path}?busy_timeout=0.001"
    open_store(url).close()
    lock = sqlite3.connect(path, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        store = open_store(url)  # a read: nothing to wait for
        try:
            assert store.jobs() == []
        finally:
            store.close()
    finally:
        lock.execute("ROLLBACK")
        lock.close()


@pytest.mark.slow
def test_a_resume_made_while_another_instance_adopts_the_paused_task_stands(instances, store_url, tmp_path) -> None:
    out = str(tmp_path / "runs.log")
    a = instances("A", {"store": store_url, "lease": 3.0, "tasks": [_rate(out, "v1")]}).ready()
    wait_until(lambda: starts(out), 30, "A to run k")
    assert a.ask("pause k")["ok"]
    b = instances("B", {"store": store_url, "lease": 3.0}).ready()  # has read k paused (its adoption)
    b.stop()  # before its dispatcher writes what it adopted
    assert a.ask("resume k")["ok"]
    wait_until(lambda: not storesql.tasks(store_url)["k"].paused, 30, "the resume to be stored")
    b.cont()
    resumed = time.time()
    wait_until(lambda: len([x for x in starts(out) if x.t > resumed + SETTLE]) >= 5, 30, "k to run on after the resume")
    for inst in (a, b):
        assert inst.quit()["closed"]


def test_a_deploy_that_replaces_a_paused_task_keeps_a_resume_made_since(store_url, tmp_path) -> None:
    """5. A program that adopted a paused task, then scheduled it again with
    a changed definition (a deploy), wrote the pause it had adopted - its
    handle's state - with the new definition, over a resume stored since
    (the replaced task's cancel deletes the row, so the pause travels with
    the definition): the task stayed paused for good (the fault campaign,
    seed 1413). The deploy reads the row: a resume stands."""
    import procsched
    from procsched import TaskState as State
    from tests.promises import tasks

    out = str(tmp_path / "runs.log")
    with procsched.Scheduler(1, store=store_url) as s:
        h = s.schedule_at_fixed_rate(tasks.mark, 0.1, args=(out, "v1"), key="k")
        wait_until(lambda: starts(out), 30, "k to run")
        assert h.pause()
        s.shutdown(wait=True)
    with procsched.Scheduler(1, store=store_url, lease=3.0) as s:
        assert s.get("k").state is State.PAUSED  # adopted paused
        assert open_store(store_url).resume("k")  # an operator's resume, as the deploy starts
        s.schedule_at_fixed_rate(tasks.mark, 0.1, args=(out, "v2"), key="k")  # the changed definition
        wait_until(lambda: len([x for x in starts(out) if x.tag == "v2"]) >= 3, 30, "the new definition to run")
        assert not storesql.tasks(store_url)["k"].paused
        s.shutdown(wait=True)


def test_a_replaced_task_keeps_its_row_for_the_new_definition(store_url, tmp_path) -> None:
    """6. The cancel a replacement makes first (``replace_existing``, a
    deploy's changed definition) deleted the key's row, and the new
    definition wrote it again when its add reached the dispatcher: a resume
    written in between (an operator's, another instance's) found no row and
    was lost - the new task took the pause the program had adopted and
    stayed paused for good (the fault campaign, seed 1413, replayed: the
    resume landed in that window). The row now stays through the replacement."""
    import procsched
    from procsched import TaskState as State
    from tests.promises import tasks

    out = str(tmp_path / "runs.log")
    with procsched.Scheduler(1, store=store_url, lease=0.6) as s:
        h = s.schedule_at_fixed_rate(tasks.mark, 0.1, args=(out, "v1"), key="k")
        wait_until(lambda: starts(out), 30, "k to run")
        assert h.pause()
        assert s._cancel_replaced(h.id)  # what a replacement does first (the window opens)
        # A keyed task scheduled after it: its row is committed with the cancel or after it.
        s.schedule_at_fixed_rate(tasks.mark, 3600, args=(out, "z"), key="z")
        wait_until(lambda: "z" in storesql.tasks(store_url), 30, "z to be stored")
        assert "k" in storesql.tasks(store_url)  # (before: deleted)
        assert open_store(store_url).resume("k")  # an operator's resume, in the window
        # Re-reads follow other writers' changes: three of them, told by z's pause,
        # resume and pause from outside. The row k kept must not be taken for a
        # task another scheduler added: adopted in the window, its old definition
        # ran beside the new one (the fault campaign, seed 1822).
        for pause in (True, False, True):
            store = open_store(store_url)
            assert store.pause("z") if pause else store.resume("z")
            state = State.PAUSED if pause else State.PENDING
            wait_until(lambda state=state: s.get("z").state is state, 30, "the re-read to follow z")
        s.stats()  # (a round trip: every event before its answer is applied)
        assert s.get("k") is None  # (before: adopted anew, with v1)
        s.schedule_at_fixed_rate(tasks.mark, 0.1, args=(out, "v2"), key="k")  # the window closes
        wait_until(lambda: len([x for x in starts(out) if x.tag == "v2"]) >= 3, 30, "the new definition to run")
        assert not storesql.tasks(store_url)["k"].paused
        s.shutdown(wait=True)


def test_a_pause_asked_during_a_run_outlives_a_shutdown_before_the_run_ends(store_url, tmp_path) -> None:
    """7. A pause asked while the task's run runs takes effect when that run
    ends; the store was told only then (the run's end, state PAUSED). A
    shutdown before it cancels the task first: the run ended cancelled, the
    pause was never written, and the next start adopted the task running
    (seen as a flaky test_a_deploy_that_replaces_a_paused_task_keeps_a_resume_made_since
    beside the suite: the pause landed during the task's first run). The
    store has the pause once it is asked."""
    import procsched
    from procsched import TaskState as State
    from tests.promises import tasks
    from tests.promises.helpers import make_fifo, release

    out, fifo = str(tmp_path / "runs.log"), make_fifo(str(tmp_path / "hold"))
    cancelled = threading.Event()
    s = procsched.Scheduler(1, store=store_url)
    s.add_listener(lambda event: cancelled.set(), ["task_cancelled"])
    h = s.schedule_at_fixed_rate(tasks.hold_first, 0.1, args=(out, fifo, "v1"), key="k")
    wait_until(lambda: starts(out), 30, "run 1 to start (it holds)")
    assert h.pause() and h.state is State.RUNNING  # asked: it pauses when run 1 ends
    closing = threading.Thread(target=s.shutdown, kwargs={"wait": True})
    closing.start()
    assert cancelled.wait(30), "the shutdown to stop k"  # stopped before its run ends
    release(fifo)
    closing.join(60)
    assert not closing.is_alive()
    assert storesql.tasks(store_url)["k"].paused
    with procsched.Scheduler(1, store=store_url) as again:
        assert again.get("k").state is State.PAUSED
        again.shutdown(wait=True)


def test_a_pause_taken_back_during_the_run_leaves_the_stored_task_running(store_url, tmp_path) -> None:
    """7b. The pause asked during a run is the store's at once; a resume
    before the run ends takes it back there too."""
    import procsched
    from tests.promises import tasks
    from tests.promises.helpers import make_fifo, release

    out, fifo = str(tmp_path / "runs.log"), make_fifo(str(tmp_path / "hold"))
    with procsched.Scheduler(1, store=store_url) as s:
        h = s.schedule_at_fixed_rate(tasks.hold_first, 0.1, args=(out, fifo, "v1"), key="k")
        wait_until(lambda: starts(out), 30, "run 1 to start (it holds)")
        assert h.pause() and h.resume()  # both while run 1 holds
        release(fifo)
        wait_until(lambda: len(starts(out)) >= 3, 30, "k to go on")
        assert not storesql.tasks(store_url)["k"].paused
        s.shutdown(wait=True)
    assert not storesql.tasks(store_url)["k"].paused


def test_a_read_of_a_changed_definition_that_fails_is_made_again(
    pg_server, pg_db, pg_proxy, instances, tmp_path
) -> None:
    """8. A holds k (run 1 held on a FIFO); B stores a changed definition
    and leaves (a deploy's program that ran once); A's user process is cut
    off the store (its dispatcher is not) before run 1 ends, so A's reads
    of the new definition fail until it is let in again. Promised: the new
    definition runs once the store can be read."""
    from tests.promises.helpers import make_fifo, release

    out, fifo = str(tmp_path / "runs.log"), make_fifo(str(tmp_path / "hold"))
    v1 = {"key": "k", "kind": "rate", "period": 0.1, "fn": f"{TASKS}:hold_first", "args": [out, fifo, "v1"]}
    v2 = {"key": "k", "kind": "rate", "period": 0.1, "fn": f"{TASKS}:mark", "args": [out, "v2"]}
    through_proxy = pg_server.url_for(pg_db, "127.0.0.1", pg_proxy.port)
    a = instances("A", {"store": through_proxy, "lease": 1.0, "tasks": [v1]}, env={"CAMPAIGN_LOG_INFO": "1"})
    a.ready()
    wait_until(lambda: starts(out), 30, "A's run 1 to start (it holds: A holds the task)")
    instances("B", {"store": pg_server.url_for(pg_db), "lease": 1.0, "tasks": [v2]}).ready().quit()
    wait_until(lambda: "stored a changed definition" in a.stderr(), 30, "A to follow the change (after run 1)")
    assert pg_proxy.shut_out(a.pid) == 1  # the user process's connection (its dispatcher's stay)
    release(fifo)
    try:
        failed = "stored task 'k' added by another scheduler"  # (the warning of each read that failed)
        wait_until(lambda: a.stderr().count(failed) >= 3, 30, "A's read to fail, and to be made again, twice")
        pg_proxy.shut_out(None)
        wait_until(lambda: [x for x in starts(out) if x.tag == "v2"], 15, "the new definition to run")
    finally:
        a.quit()


def test_a_task_paused_during_its_run_keeps_its_grid_in_the_store(store_url, tmp_path) -> None:
    """9. A pause asked during a run takes effect as the run ends; that end
    wrote no next due time, so a scheduler adopting the paused task (a
    restart) began a new grid at its own start, and every scheduler
    followed it once resumed: the old grid's slots were neither run nor
    recorded (the fault campaign, seed 2417). The end keeps the next slot."""
    import procsched
    from procsched import TaskState as State
    from tests.promises import tasks
    from tests.promises.helpers import make_fifo, release

    out, fifo = str(tmp_path / "runs.log"), make_fifo(str(tmp_path / "hold"))
    period = 100_000

    def off_grid(slot_us: int) -> int:  # microseconds from the nearest slot of run 1's grid
        off = (slot_us - first.slot_us) % period
        return min(off, period - off)

    with procsched.Scheduler(1, store=store_url) as s:
        h = s.schedule_at_fixed_rate(tasks.hold_first, period / 1e6, args=(out, fifo, "v1"), key="k")
        first = wait_until(lambda: starts(out), 30, "run 1 to start (it holds)")[0]
        assert h.pause()  # asked during run 1: taken when it ends
        release(fifo)
        wait_until(lambda: h.state is State.PAUSED, 30, "the pause to be taken")
        s.shutdown(wait=True)
    row = storesql.tasks(store_url)["k"]
    assert row.paused and row.next_due_ns is not None and off_grid(row.next_due_ns // 1000) < 1000, row
    with procsched.Scheduler(1, store=store_url) as s:  # a restart adopts it paused, then it is resumed
        assert s.get("k").resume()
        later = wait_until(lambda: starts(out)[1:3] if len(starts(out)) >= 3 else None, 30, "two runs after the resume")
        s.shutdown(wait=True)
    assert [off_grid(x.slot_us) < 1000 for x in later] == [True, True], (first, later)


def test_a_replacement_made_while_a_re_read_follows_the_same_change_runs_each_run_once(
    instances, store_url, tmp_path
) -> None:
    """9. A runs k (v1); this program (B) adopts it. B's dispatcher is
    stopped while A stores v2 and while B's program replaces k with v2 (its
    adopted task, v1, is cancelled first: that cancel waits for the
    dispatcher); once the dispatcher goes on, it answers the cancel and its
    overdue re-read sees v2 stored, before the replacement's add comes (the
    program goes on only after that re-read: C, started meanwhile, is then
    among B's peers). Then B runs k alone: one task of k, each run once."""
    import procsched
    from tests.promises import tasks

    out = str(tmp_path / "runs.log")
    a = instances("A", {"store": store_url, "lease": 5.0, "tasks": [_rate(out, "v1")]}).ready()
    wait_until(lambda: starts(out), 30, "A to run k")
    before = {p.pid for p in psutil.Process().children()}
    s = procsched.Scheduler(1, store=store_url, lease=5.0)
    try:
        (dispatcher,) = [p for p in psutil.Process().children() if p.pid not in before]
        wait_until(lambda: s.stats()["store"]["peers"], 30, "B's first re-read (A among its peers)")
        c: list[Any] = []
        asked, reread = threading.Event(), threading.Event()
        cancel = s._cancel_replaced

        def replaced_after_a_re_read(task_id: int) -> bool:
            asked.set()
            done = cancel(task_id)
            pid = c[0].pid
            wait_until(lambda: any(p["pid"] == pid for p in s.stats()["store"]["peers"]), 30, "B to re-read")
            reread.set()
            return done

        s._cancel_replaced = replaced_after_a_re_read  # type: ignore[method-assign]
        stored = storesql.query(store_url, "SELECT def_hash FROM procsched_definitions WHERE key = 'k'")
        dispatcher.suspend()
        stopped = time.monotonic()
        try:
            assert a.ask("add " + json.dumps(_rate(out, "v2", replace=True))).get("added") == "k"
            now = lambda: storesql.query(store_url, "SELECT def_hash FROM procsched_definitions WHERE key = 'k'")  # noqa: E731
            wait_until(lambda: now() != stored, 30, "A to store v2")
            c.append(instances("C", {"store": store_url, "lease": 5.0}).ready())
            deploy = threading.Thread(
                target=s.schedule_at_fixed_rate, args=(tasks.mark, 0.1), kwargs={"args": (out, "v2"), "key": "k"}
            )
            deploy.start()
            assert asked.wait(30), "B's program to cancel its adopted task"
            wait_until(lambda: s._requests, 30, "the cancel to be asked")
            with s._lock:  # (held while a request is sent: the cancel waits in the dispatcher's pipe)
                pass
            # B's re-read falls due while its dispatcher is stopped (every second at most:
            # its last one was before the stop), so it comes in the turn that reads the cancel.
            time.sleep(max(0.0, stopped + 1.2 - time.monotonic()))
        finally:
            dispatcher.resume()
        deploy.join(30)
        assert reread.is_set() and not deploy.is_alive()
        assert a.quit()["closed"] and c[0].quit()["closed"]
        gone = time.time()
        wait_until(lambda: len([x for x in starts(out) if x.t > gone]) >= 10, 30, "B to run k alone")
        live = [h for h in s.jobs() if h.key == "k"]
        assert len(live) == 1, f"{len(live)} live tasks of k in one scheduler"
        s.shutdown(wait=True)
    finally:
        s.shutdown(wait=False)
    assert not _twice(out), f"(run, attempt) started twice: {_twice(out)}"


def test_a_retry_taken_over_leaves_its_task_on_its_grid(instances, sqlite_url, tmp_path) -> None:
    """10. k (every second, catch_up) fails run 1's first attempt; its retry,
    0.3 s later, holds; the instance running it is stopped past its lease
    and the other takes it over (the retry is recorded crashed, its last
    attempt). Every later run is on run 1's grid."""
    from tests.promises.helpers import make_fifo, release

    out, fifo = str(tmp_path / "runs.log"), make_fifo(str(tmp_path / "hold"))
    spec = {
        "key": "k",
        "kind": "rate",
        "period": 1.0,
        "fn": f"{TASKS}:fail_then_hold",
        "args": [out, fifo, "v1"],
        "retry": {"attempts": 2, "delay": 0.3, "on": ["error", "crashed"]},
        "misfire": "catch_up",
    }
    both = {n: instances(n, {"store": sqlite_url, "lease": 1.0, "tasks": [spec]}) for n in "AB"}
    for inst in both.values():
        inst.ready()
    (retry,) = wait_until(lambda: [x for x in starts(out) if x.attempt == 2], 30, "run 1's retry to start (it holds)")
    held, other = both[retry.inst], both["B" if retry.inst == "A" else "A"]
    held.stop()
    try:
        wait_until(lambda: len([x for x in starts(out) if x.run > 1]) >= 3, 30, "the other instance to take k over")
    finally:
        held.cont()
        release(fifo)
    for inst in (held, other):
        assert inst.quit()["closed"]
    first = next(x.slot_us for x in starts(out) if (x.run, x.attempt) == (1, 1))
    off = [(x.run, x.inst, (x.slot_us - first) % 1_000_000) for x in starts(out) if x.run > 1]
    assert all(d < 2_000 or d > 998_000 for *_, d in off), f"runs off run 1's grid (run, instance, µs past it): {off}"


def test_a_pause_that_takes_back_a_run_given_ahead_keeps_the_grid_in_the_store(store_url, tmp_path) -> None:
    """11. x holds the only worker; k's run 1 is claimed and given ahead
    behind it; k is paused (run 1 taken back, recorded cancelled)."""
    import procsched
    from tests.promises import tasks
    from tests.promises.helpers import make_fifo, release

    out, fifo = str(tmp_path / "runs.log"), make_fifo(str(tmp_path / "hold"))
    period = 100_000_000
    with procsched.Scheduler(1, store=store_url) as s:
        s.schedule_at_fixed_rate(tasks.hold, 3600, args=(out, fifo, "x"), key="x")
        wait_until(lambda: starts(out), 30, "x to hold the worker")
        k = s.schedule_at_fixed_rate(tasks.mark, period / 1e9, args=(out, "k"), key="k", initial_delay=0.05)
        wait_until(lambda: storesql.runs(store_url, "k"), 30, "k's run 1 to be claimed")
        assert k.pause()
        wait_until(lambda: [r for r in storesql.runs(store_url, "k") if r.outcome], 30, "run 1 to be recorded")
        release(fifo)
        s.shutdown(wait=True)
    (run1,) = storesql.runs(store_url, "k")
    row = storesql.tasks(store_url)["k"]
    assert run1.outcome == "cancelled" and row.paused and row.next_due_ns is not None, (run1, row)
    off = (row.next_due_ns - run1.scheduled_ns) % period
    assert min(off, period - off) < 1_000_000, (run1, row)  # on run 1's grid


def test_a_task_cancelled_while_its_run_is_in_flight_has_that_run_s_end_recorded(store_url, tmp_path) -> None:
    """12. b runs k; a deploys a changed definition (a run of it holds b's
    only worker on a FIFO); b cancels k while that run is in flight, and its
    re-read finds the key gone before the run ends."""
    import procsched
    from tests.promises import tasks
    from tests.promises.helpers import log, make_fifo, release

    out, fifo, flag = str(tmp_path / "runs.log"), make_fifo(str(tmp_path / "hold")), str(tmp_path / "flag")
    with procsched.Scheduler(1, store=store_url, lease=1.0) as b:
        b.schedule_at_fixed_rate(tasks.mark, 0.2, args=(out, "v1"), key="k")
        wait_until(lambda: [x for x in starts(out) if x.tag == "v1"], 30, "b to run k")
        with procsched.Scheduler(1, store=store_url, lease=1.0) as a:  # b, the holder, follows the stored change
            a.schedule_at_fixed_rate(tasks.hold_once_flagged, 0.2, args=(out, fifo, flag, "v2"), key="k")
        n = len(starts(out))
        wait_until(lambda: [x for x in starts(out)[n:] if x.tag == "v2"], 30, "b to run the changed k")
        open(flag, "w").close()  # its next run holds b's worker

        def holding() -> bool:
            v2 = Counter(x.ev for x in log(out) if x.tag == "v2")
            return v2["start"] > v2["end"]

        wait_until(holding, 30, "a run of it to hold")
        k = b.get("k")
        assert k is not None and k.cancel()
        wait_until(lambda: "k" not in storesql.tasks(store_url), 30, "the cancel to delete k from the store")
        read = b.stats()["store"]["rereads"]
        # b's next re-read but one began after the delete: it found the key gone, the run still held
        wait_until(lambda: b.stats()["store"]["rereads"] >= read + 2, 30, "b to re-read the store")
        release(fifo)
        wait_until(
            lambda: (runs := storesql.runs(store_url, "k")) and all(r.outcome for r in runs),
            10,
            "every run of k to be recorded ended (the held one too)",
        )


@pytest.mark.parametrize("retried", [False, True], ids=["no retry left", "retried"])
def test_a_crash_recorded_at_start_up_is_rescheduled_in_the_same_transaction(store_url, retried) -> None:
    """13. Run 1's first attempt failed and its retry (0.3 s later) was in
    flight when its scheduler (of this host: its process gone) died.
    Right after start-up's recovery - what any other scheduler reads from
    then on - the row is where the task goes on: the run's next attempt
    now, or the slot after run 1's regular one; never the retry's time."""
    from procsched._runtime._durable._recovery import recover

    period = P
    first = (time.time_ns() // P - 10) * P  # (slots in the past: catch_up makes them up)
    options = {"retry": [3, 300_000_000, 1.0, 300_000_000, 0.0, ["error", "crashed"], []]} if retried else {}
    schedule = {"kind": "fixed_rate", "period_ns": period, "initial_delay_ns": 0, "misfire": "catch_up"}
    store = open_store(store_url)
    try:
        b = store.batch()
        b.upsert(TaskDefinition("k", f"{TASKS}:mark", b"x", schedule, options), TaskState(0, first))
        b.commit()
        gone = subprocess.Popen([sys.executable, "-c", ""])
        gone.wait()  # (its pid: a process of this host that is gone)
        dead = store.register(lease_ns=1, pid=gone.pid)
        assert store.claim_run(dead, "k", 1, 1, first)
        assert store.finish_run(dead, "k", 1, 1, "error", first + 5, first + 300_000_000, retry=True)
        assert store.claim_run(dead, "k", 1, 2, first + 300_000_000)
        found = recover(store)
        assert found.crashed["k"].attempt == 2
        st = store.get("k").state
        if retried:  # its third attempt, now
            assert (st.run_count, st.next_attempt) == (1, 3) and st.next_due_ns >= first + 300_000_000
        else:  # the slot after run 1's, on its grid (before: run 2 due at the retry's time)
            assert (st.run_count, st.next_attempt, st.next_due_ns) == (1, 1, first + period)
    finally:
        store.close()


def test_a_start_up_takes_over_no_scheduler_whose_lease_ran_out_but_that_may_be_alive(store_url) -> None:
    """The fault campaign, seed 3920 (SQLite): a lock held the store for
    1.6 s, longer than the lease; A's one-shot o3 ended meanwhile and its
    end waited for the store. B started during the lock; its start-up
    recovery took A over as soon as the store let it - A's lease had run
    out, as every lease had - recorded o3's run crashed and ran it again,
    though A was alive and recorded its end 0.1 s later. A start-up takes
    over only schedulers dead for certain (of this host, their process
    gone); one whose lease ran out is left to the dispatcher, which takes
    it over once it has itself written for a whole lease."""
    from procsched._runtime._durable._recovery import recover

    once = {"kind": "once"}
    store = open_store(store_url)
    try:
        b = store.batch()
        b.upsert(TaskDefinition("o3", f"{TASKS}:mark", b"x", once, {}), TaskState(0, time.time_ns()))
        b.commit()
        a = store.register(lease_ns=1, host="elsewhere", pid=4242)  # its lease ran out: alive or not, who knows
        assert store.claim_run(a, "o3", 1, 1, time.time_ns())
        found = recover(store)
        assert found.crashed == {} and [h.id for h in found.others] == [a.id]
        assert [(r.run, r.outcome) for r in store.history("o3")] == [(1, None)]  # still A's, in flight
    finally:
        store.close()
