"""Several schedulers on one store (issue 11): the dispatcher's view of its peers.

    Journal.turn ──▶ Peers.turn(now) ──▶ store.peers_view(since - overlap)   (one read snapshot)
                        │                  ├─ changed rows ──▶ realign / pause / resume local keyed tasks
                        │                  │                   unknown key ──▶ AdoptKey ──▶ facade adopts it
                        │                  │                   (read failed: AdoptAgain ──▶ asked at the next re-read)
                        │                  ├─ fewer rows than known ──▶ keys() ──▶ drop tasks others deleted
                        │                  └─ expired leases ──▶ take_over(dead, me, reschedule) ──▶ realign
                        ├─ a lost claim ──▶ Engine.skip (next slot, nothing counted) ──▶ store.get ──▶ realign
                        │                   ├─▶ refused for a pause: its slot recorded "paused"
                        │                   ├─▶ (the read failed: done at the next re-read)
                        │                   └─▶ standby: paused here while the store shows another keeping it up
                        └─ standby tasks late in the store (or their claimer taken over) ──▶ wake ──▶ realign

Theory of operation. The store decides who runs what: a claim names the
task's exact next (run, attempt), and its slot must come after the previous
run's (``_sql``), so each slot is won once whatever the schedulers' cores
believe. What this module adds is keeping each core *near* the store, so
that its claims are the right ones: after a lost claim the loser reads the
task row and realigns (run numbers and next due time: the next slot after
the run in flight, or the store's next due time); every ``sync`` interval
(a third of the lease, at most 1 s: one more deadline of the dispatcher's
select, no polling) it re-reads what changed - tasks others added (adopted
through the facade, which owns task ids and handles), cancelled (dropped
here), paused or resumed (followed here), rescheduled after a crash - and
takes over schedulers whose lease expired (their runs in flight ->
``crashed``, each task rescheduled in that same transaction: retried if its
Retry covers crashes, else its next slot by its misfire policy).

Changes this module makes to local tasks are the store's already: the
Journal does not write them back (``quiet``).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, NamedTuple, Protocol

from ..._core import Kind, TaskState
from ..._core._units import NS
from ..._errors import StoreError
from ..._store import Batch, Holder, RunRecord, SkippedSlot, SQLStore, StoredTask
from ..._store._sql import SLOT_GAP_NS
from .._engine import Engine
from .._messages import AdoptKey, Message, RunSkipped
from ._stored import HISTORY_BACK, crash_fields, down_slots, regular_slot, schedule_of, stored_hash
from ._writer import patiently

#: ``Journalled.owner``'s mark of a key whose definition another scheduler
#: changed. The old task's cancel and its run's end delete nothing.
REDEFINED = -1
#: ``Journalled.owner``'s mark of a key whose row is deleted (cancelled here,
#: or by another scheduler): the end of a run of its task in flight deletes
#: nothing - the key may be declared again meanwhile, here or elsewhere.
DELETED = -2
#: ``Journalled.owner``'s mark of a key whose task is being replaced here: the
#: new one is on its way (``Journal.replaced``). As ``REDEFINED``, and the key
#: is never asked of the facade to adopt meanwhile: the row, kept for the new
#: definition, still holds the old one (the fault campaign, seed 1822: it was
#: adopted in that window, and the old definition ran beside the new one).
REPLACING = -3

#: The longest interval between two re-reads of the store.
SYNC_MAX_NS = NS
#: Re-read rows written this long before the last read too: a transaction
#: may commit a little after the store-clock time it stamped.
OVERLAP_NS = 2 * NS
#: Keys seen stored before their local task was adopted, kept at most (``Peers.unknown``).
UNKNOWN_KEPT = 10_000
#: Tasks said at INFO one by one as they go on standby.
TOLD_STANDBY = 10


def store_next(task: StoredTask, now_wall: int, regular: int | None = None) -> tuple[int, int, int] | None:
    """Where the store says a task's next claim is: (runs claimed, attempt,
    due UTC ns); None if it says nothing usable (no next due time). While
    another scheduler holds a run, the next claim is not before now: the
    slots its run overlaps are that holder's to catch up when it ends (its
    misfire policy), and a claim of a past slot would only lose again and
    again until then. ``regular``: the regular slot of the run in flight
    when it is a retry (``retried``): the grid goes on from it, not from the
    retry's time, which the row holds then."""
    st = task.state
    if st.next_due_ns is None:
        return None
    if task.holder is not None:  # a run in flight: next_due_ns is its slot (a retry's: its own time)
        schedule = schedule_of(task.definition)
        due = schedule.next_after(st.next_due_ns if regular is None else regular)
        if due is None:
            return None
        following = schedule.not_before(due, now_wall)
        return st.run_count, 1, now_wall if following is None else following
    return st.run_count, st.next_attempt, st.next_due_ns


#: Two readings of one due time (UTC ns) on two schedulers' clocks differ by less than this.
SAME_TIME_NS = 1_000_000


def retried(task: StoredTask) -> bool:
    """Is the run another scheduler holds of ``task`` a retry (attempt > 1)?"""
    return task.holder is not None and task.state.next_attempt > 1


def _same_time(local_wall: int | None, stored_wall: int) -> bool:
    return local_wall is not None and abs(local_wall - stored_wall) < SAME_TIME_NS


class Unread(NamedTuple):
    """A claim the store refused (``refused``; False: taken back unseen) whose
    task's row could not be read after it (``Peers.lost``)."""

    run: Any  # the claimed Run
    key: str
    refused: bool


def next_claim(task: StoredTask) -> tuple[int, int]:
    """The (run, attempt) the store's row of ``task`` allows next."""
    st = task.state
    return (st.run_count + 1, 1) if st.next_attempt == 1 else (st.run_count, st.next_attempt)


class Journalled(Protocol):
    """What peers read and change of the dispatcher's journal (``_journal.Journal``)."""

    store: SQLStore
    holder: Holder
    batch: Batch  # the turn's changes (a take-over's skipped slots go there)
    keys: dict[int, str]  # live keyed task id -> key
    runs: dict[str, int]  # key -> the last run number claimed
    owner: dict[str, int]  # key -> its latest task's id here
    hashes: dict[int, str]  # task id -> the hash of the definition it runs
    cancelled: list[int]
    pausing: dict[str, int]  # key -> pauses and resumes journalled, not yet committed
    offset: int  # the dispatcher's wall offset (UTC ns - monotonic ns), at its last turn

    def expecting(self, key: str) -> bool: ...

    def may_take_over(self, now: int) -> bool: ...

    def sync(self, events: list[Message]) -> None: ...

    def pass_over(self, events: list[Message]) -> None: ...

    def unwritten(self, events: list[Message]) -> AbstractContextManager[None]: ...

    def record_skips(self, events: list[Message], start: int) -> None: ...


class Peers:
    """One dispatcher's dealings with the other schedulers on its store."""

    def __init__(self, journal: Journalled, lease_ns: int) -> None:
        self.journal = journal
        self.interval = max(1, min(SYNC_MAX_NS, lease_ns // 3))
        self.sync_at: int | None = None  # monotonic: the next re-read (the first turn sets it)
        self.since = journal.holder.heartbeat_ns  # store clock of the last re-read
        # keys in the store as of the last re-read (patiently: a connection dropped as the
        # dispatcher starts must not end it - the fault campaign, seed 427, pg_drop)
        self.known: set[str] = patiently(journal.store.keys)
        self.asked: set[str] = set()  # keys whose adoption was asked of the facade
        self.again: set[str] = set()  # keys whose adoption failed on a store error: asked again at the next re-read
        self.holders: list[Any] = []  # the registered schedulers as of the last re-read
        self.takeovers = 0
        self.rereads = 0  # re-reads of the store done (stats()["store"]["rereads"])
        self.standby_told = 0  # standby entries said at INFO (see _tell_standby)
        #: Tasks on standby (see ``stand_by``): task id -> the store's next due
        #: time as last read (UTC ns), None while another scheduler holds a run.
        self.standby: dict[int, int | None] = {}
        #: How late (store clock) a task on standby may be before this
        #: scheduler claims it again: its claimer stopped claiming it.
        self.grace = self.interval
        #: Keys whose definition another scheduler changed -> the local task
        #: that ran the old one: once it has ended, the facade adopts the key anew.
        self.following: dict[str, int] = {}
        #: Keys a re-read found stored but not (yet) a local task -> the hash
        #: of the definition read: a task adopted from an older read (its
        #: adoption was on its way) is checked against it (``adopted``).
        self.unknown: dict[str, str] = {}
        #: Keys whose adopted definition is older than one a re-read saw: read again at the next re-read.
        self.recheck: set[str] = set()
        #: Tasks paused here while another scheduler ran them (on standby):
        #: their grid is not this one's, so their resume here records none of
        #: the slots the pause left behind - the scheduler that ran them does,
        #: as it follows the resume (``resume``, ``apply``).
        self.paused_elsewhere: set[int] = set()
        #: Claims refused (run, key, refused) whose row could not be read
        #: after them (``lost``): read at the next re-read, which does the
        #: rest - a slot refused for a pause is recorded then (the fault
        #: campaign, seed 5715: a dropped connection failed that read, and
        #: the slot was neither run nor recorded).
        self.unread: list[Unread] = []
        #: Tasks paused here following the store -> the row's run count then:
        #: runs numbered past it were claimed after the resume (``_run_since``).
        self.paused_at_run: dict[int, int] = {}

    def turn(self, engine: Engine, now: int, offset: int, dead: bool) -> int:
        """A turn of the dispatcher: re-read the store if it is time (not
        once the store is closing); when the next re-read is due."""
        if self.sync_at is None:
            # (not at once: the facade's adoption of the stored tasks comes
            # first - a take-over before it would find no local task to move)
            self.sync_at = now + self.interval
        elif now >= self.sync_at and not dead:
            self.sync(engine, now, offset)
        return self.sync_at

    def sync_soon(self) -> None:
        """Re-read at the next turn."""
        self.sync_at = 0

    def adopting(self) -> None:
        """A restart's adoption is coming in chunks: no re-read before its
        last chunk (which asks for one: ``sync_soon``). A re-read between
        two chunks finds the stored tasks of the chunks to come not adopted
        yet, and those written in its overlap (a restart right after they
        were written: every one) were asked of the facade one by one."""
        self.sync_at = None

    # -- a lost claim ------------------------------------------------------------

    def lost(
        self, engine: Engine, worker: Any, run: Any, key: str, now: int, offset: int, refused: bool = True
    ) -> None:
        """The store refused this run's claim: skip it, then realign the
        task from its row. What that changes here is the store's already: not
        written back (the skip's next due time, "not paused", written by the
        loser, undid a pause the holder had stored: the fault campaign).
        Standby follows only if another scheduler won it: a row that still
        expects this very claim, with no run in flight, refused its slot (a
        slot claimed before: the row's due time was written stale, e.g. by a
        definition stored while that slot ran elsewhere) - every scheduler
        realigned to that due time lost it, and all of them on standby
        waited for each other forever (the fault campaign, seed 807). The
        realignment takes the next slot not before now instead.
        ``refused`` False: the store never saw the claim (taken back here
        when this scheduler found itself fenced out): the task goes on from
        the row as it is, its slot included (catch_up runs the slots missed
        meanwhile; the fault campaign, seed 913: they were dropped)."""
        with self.journal.unwritten(engine.events):
            engine.skip(worker, run, now)
            try:
                task = self.journal.store.get(key)
            except StoreError as exc:
                engine.log(30, f"keyed task {key}: realigning with the store failed ({exc}); again at the next re-read")
                self.unread.append(Unread(run, key, refused))
                self.sync_soon()
                return
            try:
                if task is not None:
                    self._lost_read(engine, run, task, now, offset, refused)
            except Exception as exc:  # noqa: BLE001 - the next re-read tries again
                engine.log(30, f"keyed task {key}: realigning with the store failed ({type(exc).__name__}: {exc})")

    def _lost_read(
        self, engine: Engine, run: Any, task: StoredTask, now: int, offset: int, refused: bool, later: bool = False
    ) -> None:
        """The rest of ``lost``, with the task's row read after it (``later``:
        at a re-read after it - realigned, not put on standby: that is for the
        claims of now)."""
        if not refused:
            self.apply(engine, run.task_id, task, now, offset, force=True)
            return
        self.apply(engine, run.task_id, task, now, offset, (run.run, run.attempt))
        if (
            not self._paused_over(engine, run, task)
            and not later
            and (task.holder is not None or next_claim(task) != (run.run, run.attempt))
        ):
            self.stand_by(engine, run.task_id, task)

    def _paused_over(self, engine: Engine, run: Any, task: StoredTask) -> bool:
        """Was ``run``'s claim refused for its task's pause (the row ``task``,
        read after the refusal, is paused, and no resume asked here is on its
        way: that resume's slots are not the pause's)? Then its slot is the
        pause's: recorded so (one another scheduler claimed before the pause
        is dropped by the store). Also while the task is not paused here yet
        - its next claim on its way (seed 5915: that slot went unrecorded)."""
        state = engine.state(run.task_id)
        if not task.state.paused or state not in _LIVE:
            return False
        if state is not TaskState.PAUSED and self.journal.pausing.get(task.key):
            return False
        mark = len(engine.events)
        engine.paused_over(run)
        self.journal.record_skips(engine.events, mark)
        return True

    # -- standby: one claimer per task -----------------------------------------------

    def stand_by(self, engine: Engine, tid: int, task: StoredTask) -> None:
        """Another scheduler claims this task: stop claiming it here.

        Without this, every scheduler tries every slot of every shared task
        and all but one lose - a write transaction each: three schedulers
        made fewer runs per second than one. On standby the local task is
        paused in the core (quietly: the user paused nothing, the handle
        is not told), so it costs nothing per slot; each re-read checks that
        the store shows the task kept up (a run in flight, or its next due
        time not more than ``grace`` past), and otherwise claims it again
        (``wake``): its claimer stopped, died between runs, or shut down.
        A claimer that dies holding a run is taken over by its lease, which
        wakes the task too. Claims still decide who runs each slot."""
        me = self.journal.holder.id
        if tid in self.standby or task.state.paused or engine.state(tid) is not TaskState.PENDING:
            return
        if task.holder == me or not any(h.id != me for h in self.holders):
            return  # lost to its own run in flight (a run given ahead), not to another scheduler
        if engine.stand_by(tid):
            self._note(tid, task)
            self._tell_standby(engine, task)

    def _tell_standby(self, engine: Engine, task: StoredTask) -> None:
        """Say at INFO that ``task`` is on standby and for whom (the first
        ``TOLD_STANDBY`` of them one by one, then that the others are not)."""
        self.standby_told += 1
        if self.standby_told > TOLD_STANDBY + 1:
            return
        if self.standby_told > TOLD_STANDBY:
            engine.log(20, "more keyed tasks go on standby: not said one by one (stats()['store'] lists them)")
            return
        me = self.journal.holder.id
        others = [h for h in self.holders if h.id != me]
        # the one whose run is in flight, or, between its runs, the only other scheduler on the store
        holder = next((h for h in others if h.id == task.holder), others[0] if len(others) == 1 else None)
        whom = "another scheduler" if holder is None else f"scheduler {holder.host}/{holder.pid}"
        engine.log(20, f"keyed task {task.key}: on standby while {whom} runs it (this one takes over if it stops)")

    def _note(self, tid: int, task: StoredTask) -> None:
        """What the re-read checks for a task on standby: its next due time, None while a run is in flight."""
        self.standby[tid] = None if task.holder is not None else task.state.next_due_ns

    def controlled(self, engine: Engine, tid: int, now: int) -> None:
        """The user pauses or resumes ``tid`` here: off standby (a task it
        was on standby for is paused with a grid another scheduler kept)."""
        if self.wake(engine, tid, now):
            self.paused_elsewhere.add(tid)

    def resume(
        self, engine: Engine, tid: int, now: int, stored: StoredTask | None = None, resumed_wall: int | None = None
    ) -> bool:
        """Resume ``tid`` (the user's here, or followed from the store: its
        row ``stored``): the slots its pause left behind are recorded
        skipped ("paused") by the scheduler whose grid it was - this one,
        unless it was paused here while another one ran it and that one is
        still there to follow the resume. (Recorded by whoever resumed it,
        they were either missing - a resume from the command line or the
        console records nothing - or counted from a grid that was not the
        task's.) Only those before the first slot another scheduler ran
        since: it followed the resume first. ``resumed_wall``: the first
        slot (UTC ns) from the store's resume: it and the slots after it are
        not the pause's. Where the one that ran it is gone, they are this
        one's to record, all of them from the store's last slot: this one's
        own grid may stand later (it went on "not before now" past that
        one's runs: the fault campaign, seed 6208). See ``_left_by_runner``."""
        elsewhere = tid in self.paused_elsewhere
        self.paused_elsewhere.discard(tid)
        record, after = self._left_by_runner(tid, elsewhere)
        paused_at_run = self.paused_at_run.pop(tid, None)
        before = None
        if stored is not None and record and paused_at_run is not None:
            before = self._run_since(stored, paused_at_run)
        if resumed_wall is not None and record:  # the slots after the resume are not the pause's
            before = resumed_wall if before is None else min(before, resumed_wall)
        done = engine.resume(tid, now, record=record, after_wall=after, before_wall=before)
        if done and stored is None and engine.state(tid) is TaskState.PENDING:
            self._resumed_here(engine, tid, now)
        return done

    def _resumed_here(self, engine: Engine, tid: int, now: int) -> None:
        """The user resumed the keyed task ``tid`` here: it goes on at the
        stored grid's next slot from now. Its local next claim may be stale
        - followed from the store while it was paused or on standby here: a
        retry another scheduler has run since resumed "now", off the grid,
        and that due time, written with the resume, moved every instance's
        grid (the fault campaign, seed 4605: 20 slots lost)."""
        journal = self.journal
        key = journal.keys.get(tid)
        if key is None:
            return
        try:
            task = journal.store.get(key)
        except StoreError:
            return  # (as the core resumed it; the next re-read realigns it)
        if task is not None:
            self._realign(engine, tid, task, now, journal.offset, None, False, now + journal.offset)

    def _run_since(self, stored: StoredTask, paused_at_run: int) -> int | None:
        """The slot (UTC ns) of the first scheduled run of ``stored``
        numbered past ``paused_at_run`` (its run count while paused: so,
        claimed after the resume), or None (none, or not in the store's
        newest ``HISTORY_BACK`` attempts). A runner stopped across a resume
        followed it after another scheduler had run slots from it: it
        recorded them "paused" too (the fault campaign, seed 3404, replayed)
        - one slot, two ends. Read only when the row counts runs past it: a
        rare call."""
        if stored.state.run_count <= paused_at_run:
            return None
        try:
            records = self.journal.store.history(stored.key, HISTORY_BACK)
        except StoreError:
            return None
        slots = [
            r.scheduled_ns
            for r in records
            if isinstance(r, RunRecord) and r.run > paused_at_run and r.attempt == 1 and r.cause == "schedule"
        ]
        return min(slots) if slots else None

    def _left_by_runner(self, tid: int, elsewhere: bool) -> tuple[bool, int | None]:
        """A task paused, resumed: are the slots its pause left behind this
        scheduler's to record, and after which slot (wall ns; None: from
        where its grid stands here)? If another scheduler ran it (its last
        claimer) and is gone - shut down, or its lease run out by the
        store's clock -, nobody else records them: this one does, from
        after the newest slot the store accounts for (a run, or a skip: the
        runner recorded the slot of the run it had given ahead and the pause
        took back). If that one is still there, it follows the resume and
        records them from its grid: this one too (each its own grid; the
        store keeps one record of a slot), unless it was paused here
        ``elsewhere`` (on standby: its grid was not the task's; so also if
        the store cannot say). Read now: a rare call."""
        own_grid = (not elsewhere, None)  # (the answer unless this one records for a runner gone)
        store, key = self.journal.store, self.journal.keys.get(tid)
        if key is None:
            return own_grid
        try:
            task = store.get(key)
            if task is None:
                return own_grid
            runner = task.last_holder
            if runner is not None and runner != self.journal.holder.id:
                expired = {h.id for h in store.expired_holders()}
                if runner in {h.id for h in store.schedulers()} and runner not in expired:
                    return own_grid  # it follows the resume
            elif not elsewhere:
                return own_grid  # its grid is this one's runs
            newest = store.history(key, 1, skipped=True)
        except StoreError:
            return own_grid
        if not newest:
            return True, None
        last = newest[-1]
        return True, last.slot_ns if isinstance(last, SkippedSlot) else last.scheduled_ns

    def wake(self, engine: Engine, tid: int, now: int) -> bool:
        """Take ``tid`` off standby (quietly: the core resumes it; the caller
        realigns it with the store). True if it was on standby."""
        if tid not in self.standby:
            return False
        del self.standby[tid]
        engine.wake(tid, now)
        return True

    def _kept_up(self, task: StoredTask, store_now: int) -> bool:
        """Does the store show another scheduler keeping ``task`` going?"""
        if task.state.paused:
            return False  # a pause is the user's: followed as such (apply)
        if task.holder is not None:
            return task.holder != self.journal.holder.id
        due = task.state.next_due_ns
        return due is not None and due + self.grace >= store_now

    # -- the bounded re-read ---------------------------------------------------------

    def sync(self, engine: Engine, now: int, offset: int, full: bool = False) -> None:
        """Re-read what other schedulers changed; take over expired ones."""
        journal = self.journal
        self.sync_at = now + self.interval
        # the engine's own changes are journalled first; what this pass makes it do is the store's already
        with journal.unwritten(engine.events):
            self._sync(engine, now, offset, full)

    def _sync(self, engine: Engine, now: int, offset: int, full: bool) -> None:
        journal = self.journal
        store = journal.store
        try:
            changed, count, holders, store_now = store.peers_view(0 if full else self.since - OVERLAP_NS)
            self.since = store_now
            self.holders = holders
            by_key = {key: tid for tid, key in journal.keys.items()}
            seen = set()
            for task in changed:
                self.known.add(task.key)
                tid = by_key.get(task.key)
                if tid is not None and self._redefined(engine, tid, task, now):
                    continue
                if tid is not None:
                    seen.add(tid)
                    self.apply(engine, tid, task, now, offset, store_now=store_now)
                    continue
                if task.untrusted is None and task.unloadable is None:
                    if len(self.unknown) >= UNKNOWN_KEPT:
                        self.unknown.clear()  # (bounded: a key adopted later from a read older still is read again)
                    self.unknown[task.key] = stored_hash(task.definition)
                if (
                    (task.unloadable is None or task.untrusted is not None)  # an untrusted one: the facade lists it
                    and task.key not in self.asked
                    and not journal.expecting(task.key)
                    and journal.owner.get(task.key) != REPLACING
                ):
                    self.asked.add(task.key)
                    engine.emit(AdoptKey.wire(task.key))
            for key in sorted(self.again - self.asked):
                if key not in by_key and not journal.expecting(key):
                    self.asked.add(key)
                    engine.emit(AdoptKey.wire(key))
            self.again.clear()
            for key in sorted(self.recheck):  # adopted from a read older than one made since
                self.recheck.discard(key)
                tid = by_key.get(key)
                again = store.get(key) if tid is not None else None
                if again is not None and tid is not None and not self._redefined(engine, tid, again, now):
                    self.apply(engine, tid, again, now, offset, store_now=store_now)
            if count != len(self.known):
                keys = store.keys()
                for key in self.known - keys:
                    tid = by_key.get(key)
                    if tid is not None:
                        self.drop(engine, tid, key, now)
                    self.asked.discard(key)
                self.known = keys
            for key, tid in list(self.following.items()):
                if engine.state(tid) is None:  # its run in flight has ended: the stored definition from now on
                    del self.following[key]
                    self.asked.add(key)
                    engine.emit(AdoptKey.wire(key))
            for tid in [tid for tid in self.paused_at_run if engine.state(tid) is None]:
                del self.paused_at_run[tid]  # cancelled here while paused
            me = journal.holder
            for dead in holders:
                if dead.id != me.id and dead.lease_until_ns < store_now and journal.may_take_over(now):
                    self.take_over(engine, dead, now, offset, by_key)
            for tid, due in list(self.standby.items()):
                if engine.state(tid) is None:  # cancelled here, or ended
                    del self.standby[tid]
                elif tid in seen or due is None or due + self.grace >= store_now:
                    continue  # read just now, a run in flight (its lease guards it), or not late yet
                elif (stored := store.get(journal.keys[tid]) if tid in journal.keys else None) is None:
                    del self.standby[tid]
                else:
                    self.apply(engine, tid, stored, now, offset, store_now=store_now)
            unread, self.unread = self.unread, []
            for i, lost in enumerate(unread):
                try:
                    row = store.get(lost.key)
                except StoreError:
                    self.unread[:0] = unread[i:]
                    raise
                if row is not None:
                    self._lost_read(engine, lost.run, row, now, offset, lost.refused, later=True)
            self.rereads += 1
        except StoreError as exc:
            engine.log(40, f"the store: re-reading other schedulers' changes failed ({exc})")
        except Exception as exc:  # noqa: BLE001 - a stored task this process reads differently: keep scheduling
            engine.log(40, f"following other schedulers' changes failed ({type(exc).__name__}: {exc})")

    def adopt_again(self, key: str) -> None:
        """The facade could not read ``key`` to adopt it (a store error): a
        passing failure, so the next re-read asks again - a redefined task
        whose row names this scheduler would otherwise stall (seed 805)."""
        self.asked.discard(key)
        self.again.add(key)

    def adopted(self, key: str, def_hash: str) -> None:
        """The facade adopted ``key`` with the definition of hash ``def_hash``
        (read before): if a re-read saw another one stored meanwhile, the
        next re-read reads it again (and follows the change)."""
        seen = self.unknown.pop(key, None)
        if seen is not None and seen != def_hash:
            self.recheck.add(key)
            self.sync_soon()

    def _redefined(self, engine: Engine, tid: int, task: StoredTask, now: int) -> bool:
        """Did another scheduler store a changed definition of the local
        task ``tid`` (issue 20 item 4)? Then end it here (a run in flight
        ends first; its end deletes nothing) and adopt the stored one once
        it is gone (see ``following``). A task adopted at start-up knows
        its definition from its first read back. Not a task the program is
        replacing (cancelled, its replacement's add on its way): adopted
        anew, the stored definition ran beside the replacement, each run
        twice (the fault campaign, seed 2503)."""
        journal = self.journal
        if task.untrusted is not None or task.unloadable is not None:
            return False
        stored = stored_hash(task.definition)
        known = journal.hashes.setdefault(tid, stored)
        if known == stored or journal.expecting(task.key) or journal.owner.get(task.key) == REPLACING:
            return False
        engine.log(
            20, f"keyed task {task.key}: another scheduler stored a changed definition; it runs that one from now on"
        )
        journal.hashes.pop(tid, None)
        journal.owner[task.key] = REDEFINED
        self.standby.pop(tid, None)
        engine.cancel(tid, False, now)  # (journalled as nothing: the store has the new definition)
        journal.cancelled.append(tid)  # its key goes from ``keys`` once the task is gone
        self.following[task.key] = tid
        return True

    def take_over(self, engine: Engine, dead: Any, now: int, offset: int, by_key: dict[str, int]) -> None:
        wall = now + offset

        down: list[tuple[str, int]] = []  # slots missed while nobody ran the task, dropped by its misfire policy

        def reschedule(task: StoredTask, crashed: Any, regular: int | None) -> dict[str, Any] | None:
            fields = crash_fields(task, crashed, wall, regular)
            if fields is not None:  # (None: a one-shot whose only run crashed: it ends)
                down.extend((task.key, slot) for slot in down_slots(task, crashed, wall, regular))
            return fields

        runs = self.journal.store.take_over(dead, self.journal.holder, reschedule=reschedule)
        if runs is None:
            return  # another survivor took it over (or we were fenced out)
        journal = self.journal  # (inside the re-read pass: what the engine does here is not journalled)
        for key, slot in down:
            journal.batch.skipped(key, slot, "down")
            tid = by_key.get(key)
            if tid is not None:  # a task of ours too: told (stored just now, not again)
                engine.events.append(RunSkipped.wire(tid, slot - offset, slot, "down", None))
        self.takeovers += 1
        engine.log(
            30,
            f"scheduler {dead.id} (host {dead.host}, pid {dead.pid}) let its lease expire: taken over, "
            f"{len(runs)} run(s) in flight recorded crashed",
        )
        for record in runs:
            tid = by_key.get(record.key)
            task = self.journal.store.get(record.key)
            if tid is not None:
                if task is None:
                    self.drop(engine, tid, record.key, now)
                else:
                    self.wake(engine, tid, now)  # its claimer is gone: claim it again
                    self.apply(engine, tid, task, now, offset, force=True)

    # -- local tasks follow the store ---------------------------------------------------

    def apply(
        self,
        engine: Engine,
        tid: int,
        task: StoredTask,
        now: int,
        offset: int,
        lost: tuple[int, int] | None = None,
        force: bool = False,
        store_now: int | None = None,
        fresh: bool = False,
    ) -> None:
        """Bring the local task ``tid`` to where the stored ``task`` is.
        ``lost``: the (run, attempt) whose claim was just lost; realigning to
        that very claim again is not before now (no tight loop of claims the
        store refuses: a crash recorded at start-up, before its reschedule).
        ``force``: take the stored due time even for the same next claim (a
        task just scheduled here, on a grid of its own). A task on standby
        stays there while the store (read at ``store_now``) shows it kept
        up; otherwise it wakes and is realigned. ``fresh``: a task just
        added here, realigned even while the row names this scheduler (the
        run in flight is its key's previous task's, replaced). While a pause
        or resume asked here is on its way to the store, a row read before
        it changes nothing here (but a ``fresh`` task's grid)."""
        state = engine.state(tid)
        if state is None or (task.holder == self.journal.holder.id and not fresh):
            return
        elsewhere = False  # on standby: another scheduler ran it
        if tid in self.standby:
            if store_now is not None and self._kept_up(task, store_now):
                self._note(tid, task)
                return
            elsewhere = self.wake(engine, tid, now)
            state, force = engine.state(tid), True
        resumed = False
        if self.journal.pausing.get(task.key):
            # A pause or resume asked here is on its way to the store: it stands, and so does the
            # due time it goes on at. The row was read before it: its due time is the pause's (a
            # resume realigned to it made up, late, the slots the pause had held back - and a
            # runner late to the resume recorded them "paused": the fault campaign, seed 5915).
            # The re-read after its commit realigns the task. (A task just added here takes the
            # stored grid: its key's pause or resume on its way was its previous task's.)
            if not fresh:
                return
        elif task.state.paused and state is TaskState.PENDING:
            if elsewhere:
                self.paused_elsewhere.add(tid)
            engine.pause(tid)
            self.paused_at_run[tid] = task.state.run_count
            return
        elif not task.state.paused and state is TaskState.PAUSED:
            mark = len(engine.events)
            self.resume(engine, tid, now, task, resumed_slot(task, now + offset))
            # (in the re-read pass: the resume is the store's already, the slots it skipped are not)
            self.journal.record_skips(engine.events, mark)
            state = engine.state(tid)
            resumed = True
        if state is TaskState.PENDING:
            self._realign(
                engine, tid, task, now, offset, lost, force, resumed_at(task, now + offset) if resumed else None
            )

    def _realign(
        self,
        engine: Engine,
        tid: int,
        task: StoredTask,
        now: int,
        offset: int,
        lost: tuple[int, int] | None,
        force: bool,
        resumed: int | None,
    ) -> None:
        """Bring the PENDING local task ``tid`` to the stored ``task``'s next
        claim (see ``apply``). ``resumed``: it was just resumed, at that wall
        time: it goes on at the stored grid's first slot from then."""
        # A retry in flight: its grid from its run's regular slot (the fault campaign, seed 3404, replayed:
        # counted from the retry's time, a scheduler on standby woke onto a grid of its own).
        regular = regular_slot(self.journal.store, task.key, task.state.run_count) if retried(task) else None
        point = store_next(task, now + offset, regular)
        if point is None:
            return
        runs, attempt, due_wall = point
        schedule = schedule_of(task.definition)
        if resumed is not None and attempt == 1:
            # Its next slot from now on the stored grid: the row's due may be the one before the pause
            # (a catch_up task realigned to it made up every slot it was paused over). Not the local
            # task's own next slot: one that waited for a retry another scheduler ran resumes "now",
            # off the grid (the fault campaign, seed 3302, replayed).
            # From the resume (the row's write), not from this re-read: the slots since are to run (a re-read
            # late by a store lock recorded them "paused" - the fault campaign, seed 4622).
            following = schedule.not_before(due_wall, resumed)
            due_wall = due_wall if following is None else following
        claim = (runs + 1, 1) if attempt == 1 else (runs, attempt)
        if engine.next_claim(tid) == claim and not force and _same_time(engine.next_wall(tid), due_wall):
            # The same claim at the same time: left as it is (clock readings differ by microseconds).
            # The same claim at another time is realigned: a holder that gave its run up before it
            # started (a clean shutdown) left the row at that run's slot, which a scheduler that had
            # moved the claim past the holder's run must take up again (the fault campaign, seed
            # 2225: four catch-up slots neither run nor recorded).
            return
        if claim == lost:
            due_wall = _after_refused(schedule, task, due_wall, now + offset)
        calendar = schedule.kind is Kind.CALENDAR
        base = None
        if attempt > 1 and not calendar:  # a retry: its run's grid goes on from that run's regular slot
            slot = regular_slot(self.journal.store, task.key, runs)
            base = None if slot is None else slot - offset
        if engine.realign(tid, runs, attempt, due_wall - offset, due_wall if calendar and attempt == 1 else None, base):
            self.journal.runs[task.key] = runs

    def drop(self, engine: Engine, tid: int, key: str, now: int) -> None:
        """Another scheduler cancelled ``key`` (or it ended there): end it here."""
        self.standby.pop(tid, None)
        self.paused_at_run.pop(tid, None)
        if self.journal.owner.get(key) == tid:
            self.journal.owner[key] = DELETED  # (its run in flight ends recorded, deleting nothing)
        if not engine.running(tid):
            # Nothing to record: the store has it deleted. A run in flight is, its end: also
            # of a task this scheduler cancelled itself, whose run went on (CANCELLED, not
            # RUNNING) - its re-read, finding the key gone, dropped it from the journal, the
            # run's end was never written, and the key re-added later found the run still in
            # flight in the store: it never ran again (the fault campaign, seed 3108, replayed).
            self.journal.keys.pop(tid, None)
        engine.cancel(tid, False, now)
        self.journal.cancelled.append(tid)  # its key goes once the task is gone (a held run's claim is lost)


#: The states of a local task whose refused claims may be its pause's.
_LIVE = frozenset((TaskState.PENDING, TaskState.RUNNING, TaskState.PAUSED))


def _after_refused(schedule: Any, task: StoredTask, due_wall: int, now_wall: int) -> int:
    """Where a claim the row ``task`` still expects, refused at ``due_wall``
    (UTC ns), goes next: the row's due time is stale. Refused by the slot
    guard (a slot at or before it claimed, or recorded skipped: a runner
    late to a resume ran the pause's slots while another recorded them
    "paused"), from the grid's first slot after the guard: the slots from
    there are to run (catch_up) or to be dropped by the misfire policy,
    which records them - taken "not before now", they were neither (the
    fault campaign, seed 5915: three slots lost). Else not before now."""
    guard = task.last_slot_ns
    floor = now_wall if guard is None or guard <= due_wall - SLOT_GAP_NS else guard + SLOT_GAP_NS
    following = schedule.not_before(due_wall, floor)
    return floor if following is None else following


def resumed_slot(task: StoredTask, now_wall: int) -> int | None:
    """The first slot (UTC ns) of the stored ``task``'s grid from its resume
    (see ``resumed_at``), or None (no due time)."""
    due = task.state.next_due_ns
    return None if due is None else schedule_of(task.definition).not_before(due, resumed_at(task, now_wall))


def resumed_at(task: StoredTask, now_wall: int) -> int:
    """When the stored ``task``, found resumed at ``now_wall`` (UTC ns), was
    resumed: its row's last write - the resume, or a later one (never a slot
    of the pause made to run)."""
    return min(now_wall, task.updated_ns) if task.updated_ns else now_wall
