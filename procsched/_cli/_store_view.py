"""What ``procsched run --store`` tells about the store (issue 26 items 2, 5, 6).

    before the scheduler starts ── _store_cmds.sync_jobs ──▶ StoreSnapshot ──▶ startup_notes
                                   (removes the jobs the file no longer declares)
    right after it started ──────── Scheduler.history(key) ──────────────────▶ recovered_notes
    every second ────────────────── stats()["store"] ──▶ StoreWatch.update ──▶ notes + a status line

A note is said once, in every output: a plain line (``procsched: ...``), a
JSON record (its ``event`` and fields, ``message`` the plain text), a line
under the live view's tables. What it tells: the stored jobs removed, the
ones resumed, how many slots each job missed while no instance ran it and
what its misfire policy makes of them (a ``catch_up`` job makes up every
one, back to back), the runs in flight when their instance died (recorded
``crashed`` at start-up), other instances joining and leaving, a take-over,
and the jobs this instance leaves on standby to another one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from .._errors import StoreError
from .._jobs import Job
from ._store_cmds import StoreSnapshot, iso

#: Missed slots are counted up to this many (a cron job down for years).
MAX_COUNTED = 100_000


class Note(NamedTuple):
    """Something to tell the operator once."""

    event: str  # the JSON record's "event"
    name: str | None  # the job it is about, if one
    text: str  # the plain line, after "procsched: "
    fields: dict[str, Any]  # the JSON record's other fields


def startup_notes(store: str, snapshot: StoreSnapshot, jobs: list[Job]) -> list[Note]:
    """The start-up report: removed and resumed jobs, and the slots each
    resumed job missed and will make up (read before the scheduler started)."""
    notes = []
    if snapshot.removed:
        names = ", ".join(snapshot.removed)
        notes.append(Note("procsched_store_removed", None,
                          f"removed {_count(len(snapshot.removed), 'stored job')} the jobs file no longer declares "
                          f"from {store}: {names} (history kept; --keep-others keeps such jobs)",
                          {"keys": snapshot.removed}))  # fmt: skip
    declared = {job.name: job for job in jobs}
    resumed = [job.name for job in jobs if job.name in snapshot.tasks]
    if snapshot.live:
        others = sorted(f"{h.host}/{h.pid}" for h in snapshot.live.values())
        notes.append(Note("procsched_peers", None, f"{_count(len(others), 'other instance')} "
                          f"{'runs' if len(others) == 1 else 'run'} on {store}: {', '.join(others)}; each run of "
                          "a stored job runs once among the instances", {"instances": others}))  # fmt: skip
    if resumed:
        words = ", ".join(f"{key} (run {snapshot.tasks[key].state.run_count + 1} next)" for key in resumed)
        verb = "found" if snapshot.live else "resumed"
        notes.append(Note("procsched_resumed", None, f"{verb} {_count(len(resumed), 'stored job')} in {store}: "
                          f"{words}", {"keys": resumed}))  # fmt: skip
    others = sorted(set(snapshot.tasks) - set(declared))
    if others:
        notes.append(Note("procsched_resumed", None,
                          f"{_count(len(others), 'stored job')} the jobs file does not declare "
                          f"{'runs' if len(others) == 1 else 'run'} here too (--keep-others): {', '.join(others)}",
                          {"keys": others, "declared": False}))  # fmt: skip
    for key in resumed:
        note = missed_note(declared[key], snapshot.tasks[key], snapshot)
        if note is not None:
            notes.append(note)
    return notes


def missed_note(job: Job, task: Any, snapshot: StoreSnapshot) -> Note | None:
    """How many slots ``job`` missed while no instance ran it, and what its
    misfire policy makes of them; None if it missed fewer than two."""
    due, now = task.state.next_due_ns, snapshot.now_ns
    if due is None or due > now or task.state.paused or job.kind not in ("rate", "cron"):
        return None
    if task.holder is not None and task.holder in snapshot.live:
        return None  # a live instance has its run in flight
    missed = _slots(job, due, now)
    if missed < 2:
        return None
    misfire = str(job.options.get("misfire", "catch_up"))
    makes_up = {"catch_up": missed, "coalesce": 1, "skip": 0}[misfire]
    since = datetime.fromtimestamp(due / 1e9).astimezone().strftime("%H:%M:%S %Z").strip()
    what = {
        "catch_up": "misfire catch_up runs every one of them now, back to back (misfire=\"coalesce\" would run "
                    "one for all)",
        "coalesce": "misfire coalesce runs one run for all of them, then keeps the schedule",
        "skip": "misfire skip skips them: the next run is at the next slot",
    }[misfire]  # fmt: skip
    text = f"{job.name}: {missed if missed < MAX_COUNTED else f'over {MAX_COUNTED:,}'} slots missed since {since} " \
           f"({_ago((now - due) / 1e9)} ago) while no instance ran it; {what}"
    return Note("procsched_catching_up", job.name, text,
                {"missed": missed, "makes_up": makes_up, "misfire": misfire, "since": iso(due)})  # fmt: skip


def _slots(job: Job, due: int, now: int) -> int:
    """The job's slots from ``due`` to ``now`` (UTC ns), both included."""
    if job.kind == "rate":
        period = round(job.period * 1e9)  # type: ignore[operator]
        return min(MAX_COUNTED, (now - due) // period + 1)
    from .. import _validate as v

    trigger, _ = v.cron(job.options["expr"], job.options.get("tz"), due - 1)
    count = 0
    for instant in trigger.iter_ns(due - 1):
        if instant > now or count >= MAX_COUNTED:
            break
        count += 1
    return count


def recovered_notes(scheduler: Any, jobs: list[Job], since: float) -> list[Note]:
    """The runs the scheduler's start-up recorded ``crashed`` (in flight when
    their instance died), from the store's history of each job."""
    notes = []
    for job in jobs:
        try:
            runs = scheduler.history(job.name, 5)
        except StoreError:  # the store failed meanwhile: the scheduler logs it and retries
            continue
        for info in runs:
            if info.outcome == "crashed" and info.finished_at is not None and info.finished_at >= since:
                notes.append(Note("procsched_recovered", job.name,
                                  f"{job.name} run {info.run} (attempt {info.attempt}) was in flight when its "
                                  "instance stopped: recorded crashed", {"run": info.run, "attempt": info.attempt,
                                                                         "outcome": "crashed"}))  # fmt: skip
    return notes


class StoreWatch:
    """This instance's place among the instances on its store, from
    ``stats()["store"]`` once a second: a note for each change, and
    ``status`` (one line) for the live view."""

    def __init__(self, store: str, live: dict[str, Any]) -> None:
        self.store = store
        #: id -> "host/pid" of the other instances (those of the start-up snapshot: said already)
        self.peers = {ident: f"{h.host}/{h.pid}" for ident, h in live.items()}
        self.standby: set[str] = set()
        self.taken_over = 0
        self.status = ""
        self.seen = False  # an update came

    def update(self, stats: dict[str, Any]) -> list[Note]:
        me = stats["scheduler"]
        peers = {p["id"]: f"{p['host']}/{p['pid']}" for p in stats["peers"]}
        notes = []
        if not self.seen and not peers:
            peers = dict(self.peers)  # its first re-read of the store may not have come yet
        self.seen = True
        for ident in peers.keys() - self.peers.keys():
            notes.append(Note("procsched_peer_joined", None, f"instance {peers[ident]} joined {self.store}",
                              {"instance": peers[ident]}))  # fmt: skip
        for ident in self.peers.keys() - peers.keys():
            notes.append(Note("procsched_peer_left", None, f"instance {self.peers[ident]} left {self.store} "
                              "(stopped, or taken over after its lease expired)",
                              {"instance": self.peers[ident]}))  # fmt: skip
        if stats["taken_over"] > self.taken_over:
            count = stats["taken_over"] - self.taken_over
            notes.append(Note("procsched_took_over", None,
                              f"took over from {_count(count, 'instance')} whose lease expired: its runs in flight "
                              "are recorded crashed, and its jobs run here now", {"instances": count}))  # fmt: skip
        standby = set(stats["standby"])
        others = ", ".join(peers.values()) or "another instance"
        if standby - self.standby:
            keys = sorted(standby - self.standby)
            notes.append(Note("procsched_standby", None,
                              f"on standby for {', '.join(keys)}: {others} runs {'it' if len(keys) == 1 else 'them'}; "
                              "this instance takes over if that stops", {"keys": keys, "held_by": sorted(peers.values())}))  # fmt: skip
        if self.standby - standby:
            keys = sorted(self.standby - standby)
            notes.append(Note("procsched_active", None, f"no longer on standby for {', '.join(keys)}: "
                              f"{'it runs' if len(keys) == 1 else 'they run'} here now", {"keys": keys}))  # fmt: skip
        self.peers, self.standby, self.taken_over = peers, standby, stats["taken_over"]
        here = f"store {self.store}: this instance {me['host']}/{me['pid']}, lease {me['lease']:g} s"
        if peers:
            here += f"; {_count(len(peers), 'other')}: {', '.join(sorted(peers.values()))}"
        if standby:
            here += f"; standby for {', '.join(sorted(standby))} (held by {others})"
        self.status = here
        return notes


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"
