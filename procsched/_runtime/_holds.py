"""Which run starts next, and the tasks whose runs are held back.

    Engine.tick ──▶ _claim ──▶ a parked run whose hold is over
                           ──▶ SchedulerCore.claim (its task held: parked instead)
                           ──▶ a staged run (``_handoff.py``) that ranks first
    a run's end ──▶ _track_crash_loop ──▶ held (crash loops)
    a store outage ──▶ hold_back ──▶ held, parked (``_durable/_journal.py``)

A task's runs are *held* until a time (``held``: task id -> when its next
run may start): a periodic task that keeps crashing its workers (a crash
loop), or a keyed task whose claims the store cannot record (an outage).
A run claimed from the core while its task is held is *parked*: claimed,
so it can never run twice, and started first once the hold is over. A run
made up after an overrun (misfire "catch_up", ``behind``) yields once to
another task's due run, so a task that cannot catch up never takes the
whole pool. ``Engine`` extends this class (after ``Handoff``); the state
is the engine's, declared here.
"""

from __future__ import annotations

import heapq

from .._core import Run
from .._core._units import NS
from ._handoff import Handoff

#: After this many crashes in a row (of a task's runs; of one slot's
#: workers), its runs (its respawns) back off: from the first, doubling to the most.
BACKOFF_AFTER = 2
BACKOFF_FIRST_NS = 50_000_000
BACKOFF_MAX_NS = 2 * NS

INFO, WARNING = 20, 30


class Holds(Handoff):
    """What ``Engine`` does to pick the next run and hold tasks back (see
    the module docstring); the engine's state it works on is declared here
    and in ``Handoff``."""

    task_crashes: dict[int, int]  # task id -> runs crashed in a row
    behind: set[int]  # periodic tasks whose next run was due before their last one ended

    def log(self, level: int, message: str) -> None:
        """A log record for the user process (``Engine.log``)."""
        raise NotImplementedError

    def _replace_runs(self, now: int) -> None:
        """End the runs the core asked to replace (``Engine._replace_runs``)."""
        raise NotImplementedError

    def hold_back(self, task_ids: set[int], until: int) -> None:
        """The runs of ``task_ids`` wait until ``until`` (their claims cannot
        be recorded: a store outage): the ones given to workers and never
        started are taken back and parked, so the workers run the other
        tasks meanwhile (issue 20 item 12)."""
        for task_id in task_ids:
            self.held[task_id] = max(self.held.get(task_id, until), until)
        for slot in self.slots:
            if slot.run is not None and any(r.task_id in task_ids for r in (slot.run, *slot.queue)):
                self._take_back(slot, head=True)
        back = [entry for entry in self.staged if entry[2].task_id in task_ids]
        if back:
            self.staged = [entry for entry in self.staged if entry[2].task_id not in task_ids]
            heapq.heapify(self.staged)
            for _, _, run in back:
                self.announced.discard((run.task_id, run.run, run.attempt))
                self.parked.append(run)

    def _claim(self, now: int) -> Run | None:
        """The next run to start: a parked run whose hold is over, else the
        core's next due run - parked instead if its task is held - or a
        staged one (given ahead, taken back) that ranks before it."""
        run = self._claim_core(now)
        staged = self.staged
        if staged and (run is None or staged[0][0] <= self._rank(run)):
            best = heapq.heappop(staged)[2]
            if run is not None:
                self._stage(run)
            return best
        return run

    def _claim_core(self, now: int) -> Run | None:
        for i, parked in enumerate(self.parked):
            if self.held.get(parked.task_id, now) <= now:
                del self.parked[i]
                self.held.pop(parked.task_id, None)
                return parked
        yielding = None
        while (run := self.core.claim(now)) is not None:
            if self.core.replaced:
                self._replace_runs(now)
            release = self.held.get(run.task_id)
            if release is not None and release > now:
                self.parked.append(run)  # claimed, so it cannot run twice; started later
                continue
            self.held.pop(run.task_id, None)
            if yielding is None and run.task_id in self.behind:
                # Fairness bound: a run made up after an overrun (misfire
                # "catch_up") yields once to the next due run of another task,
                # so a task that can never catch up (a 1 ns period) takes at
                # most every other start, never the whole pool.
                yielding = run
                continue
            if yielding is not None:
                self.parked.append(yielding)  # first in line for the next free worker
            return run
        return yielding

    def _track_crash_loop(self, run: Run, outcome: str, now: int, ended: bool) -> None:
        """From a periodic task's second crashed run in a row, hold its next
        run back: 50 ms, doubling up to 2 s, from the crash. A task that
        segfaults every 10 ms then costs a worker now and then instead of at
        every period, the dispatcher stays cheap, and the other tasks keep
        the pool and their schedule. The slots' own respawn backoff (see
        worker_exited) cannot do this: it takes capacity from every task.
        The first run that does not crash ends the hold."""
        tid = run.task_id
        if ended or outcome != "crashed":
            if self._forget_crash_loop(tid) >= BACKOFF_AFTER and not ended:
                self.log(INFO, f"task {label(run)} ran without crashing: no longer held back")
            return
        n = self.task_crashes[tid] = self.task_crashes.get(tid, 0) + 1
        if n >= BACKOFF_AFTER:
            delay = min(BACKOFF_FIRST_NS << (n - BACKOFF_AFTER), BACKOFF_MAX_NS)
            self.held[tid] = now + delay
            if n == BACKOFF_AFTER:
                self.log(
                    WARNING,
                    f"task {label(run)}: {n} crashed runs in a row; holding its runs back "
                    f"({delay / 1e6:.0f} ms, doubling to {BACKOFF_MAX_NS / 1e6:.0f} ms)",
                )

    def _forget_crash_loop(self, task_id: int) -> int:
        """End a task's hold; return how many runs in a row it had crashed."""
        self.held.pop(task_id, None)
        self.behind.discard(task_id)
        return self.task_crashes.pop(task_id, 0)


def label(run: Run) -> str:
    return f"{run.task_id} ({run.name})" if run.name else str(run.task_id)
