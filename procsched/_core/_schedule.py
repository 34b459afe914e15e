"""Schedule: when a task runs, as one pure value that answers for itself.

Theory of operation
-------------------
A task's schedule is one immutable :class:`Schedule`: its kind (once, fixed
rate, fixed delay, calendar), its period or cron trigger, what it does
about slots it missed (``misfire``), and what ends it (``stop_on_error``,
``until``, ``max_runs``). Every question about slots is asked of it, and
nobody else does grid arithmetic or parses a cron string:

    next_after(slot)              the regular slot after ``slot``
    after_run(slot, ended, o)     the next slot after a run of ``slot`` that
                                  ended at ``ended`` with outcome ``o``, by the
                                  misfire policy, and how many slots it dropped
    resume(slot, now)             where a task whose next slot ``slot`` was
                                  left behind (a crash, a restart, a wall-clock
                                  step, a take-over) goes on at ``now``
    not_before(slot, floor)       the first regular slot at or after ``floor``
    to_wire() / from_wire(...)    plain values that cross a pipe (and back)
    to_record(...) / from_record(...)   its versioned stored form (and back;
                                  the first release's form too), in the
                                  store's words ("cron" for a calendar)

Time bases. A slot is an integer of nanoseconds in the schedule's own time
base: wall-clock ns since the epoch for a calendar schedule (its fire times
are wall-clock instants), any one base for the others (the core's grid is
monotonic, a store's is wall-clock: ``first + k * period`` holds in both).
Arguments and answers of one call are in one base.

``until`` is a duration, counted from the task's start (the call that
scheduled it): the schedule is a value many tasks may share, and where the
start lies is the task's (the core turns it into an absolute limit when it
adds the task; a stored record keeps the wall-clock instant).

What issue "Schedule control" adds (a concurrency limit, an overlap policy,
a catch-up window, jitter, a group) goes here, a field each: the value, its
wire form and its record are written in this one file.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from datetime import timedelta, timezone, tzinfo
from typing import Any, Final, NamedTuple

from ._calendar import CronTrigger, Zone

#: Counting missed calendar slots stops here (a suspended machine and a
#: per-second expression must not cost a million steps).
MISSED_CAP: Final = 10_000
#: The version of the stored record that :meth:`Schedule.to_record` writes.
RECORD_VERSION: Final = 2


class Kind(enum.Enum):
    """How a task's slots follow one another."""

    ONCE = "once"
    """One run."""
    FIXED_RATE = "fixed_rate"
    """Slots on a grid: the previous *slot* + the period (no drift)."""
    FIXED_DELAY = "fixed_delay"
    """The previous run's *end* + the period; never catches up."""
    CALENDAR = "calendar"
    """The fire times of a cron expression, on the wall clock of a zone."""


class Overlap(enum.Enum):
    """What a slot does when it comes due while ``max_concurrent`` runs of
    its task are running."""

    WAIT = "wait"
    """Wait for a run to end (then ``misfire`` decides)."""
    SKIP = "skip"
    """Not run: a skipped slot (reason "overlap")."""
    REPLACE = "replace"
    """The oldest running run is killed (reason "replaced") and the slot starts."""


class Misfire(enum.Enum):
    """What a periodic task does about slots it missed (while overrunning,
    or while no scheduler ran it)."""

    CATCH_UP = "catch_up"
    """Run every missed slot, back to back (Java's ScheduledThreadPoolExecutor)."""
    SKIP = "skip"
    """Drop the missed slots; next run at the first slot at or after now."""
    COALESCE = "coalesce"
    """Run once, now, for all missed slots; then resume the schedule."""


#: Members by value, for runners that get kinds and misfire policies as
#: strings off a wire: ``KIND_OF[kind]`` is a dict lookup (~15 ns),
#: ``Kind(kind)`` runs the enum machinery (~240 ns, as much as half an add).
KIND_OF: Final[dict[str, Kind]] = {member.value: member for member in Kind}
MISFIRE_OF: Final[dict[str, Misfire]] = {member.value: member for member in Misfire}
OVERLAP_OF: Final[dict[str, Overlap]] = {member.value: member for member in Overlap}

#: A schedule's wire form: (kind, period_ns, misfire, stop_on_error, cron
#: expression, zone, until_ns, max_runs, max_concurrent, overlap,
#: misfire_grace_ns, jitter_ns, group), or None for a plain one-shot.
Wire = (
    tuple[
        str, int, str, bool, "str | None", Zone, "int | None", "int | None", int, str, "int | None", int, "str | None"
    ]
    | None
)
#: Resolves a zone as given (``Zone``) to a tzinfo (``procsched._tz.zone``).
ZoneOf = Callable[[Zone], tzinfo]


class Schedule(NamedTuple):
    """When a task runs. Immutable; equal schedules are interchangeable.

    Build one with :meth:`once`, :meth:`fixed_rate`, :meth:`fixed_delay` or
    :meth:`calendar`; arguments are assumed valid (the public API checks
    them).
    """

    kind: Kind
    period_ns: int = 0
    """Fixed rate: the grid's step; fixed delay: the pause after each run (ns)."""
    misfire: Misfire = Misfire.CATCH_UP
    """What the task does about slots it missed (periodic tasks)."""
    stop_on_error: bool = False
    """A periodic task ends (FAILED) at its first run that fails for good."""
    trigger: CronTrigger | None = None
    """Calendar: the cron expression in its zone."""
    until_ns: int | None = None
    """No slot later than this long after the task's start (None: no bound)."""
    max_runs: int | None = None
    """No scheduled run after the ``max_runs``-th (None: no bound)."""
    max_concurrent: int = 1
    """How many runs of the task may run at once."""
    overlap: Overlap = Overlap.WAIT
    """What a slot does when ``max_concurrent`` runs are running."""
    misfire_grace_ns: int | None = None
    """A run that would start later than its slot + this is skipped ("late")."""
    jitter_ns: int = 0
    """Each slot starts a random delay in ``[0, jitter_ns)`` after it (its
    ``scheduled_at`` stays the slot); 0: none."""
    group: str | None = None
    """The shared limit its runs count against (``_limits.py``), or None."""

    # -- making one ------------------------------------------------------------

    @staticmethod
    def once() -> Schedule:
        """The one-shot schedule (one value, shared by every one-shot task)."""
        return ONCE

    @staticmethod
    def fixed_rate(
        period_ns: int,
        misfire: Misfire = Misfire.CATCH_UP,
        stop_on_error: bool = False,
        until_ns: int | None = None,
        max_runs: int | None = None,
    ) -> Schedule:
        return Schedule(Kind.FIXED_RATE, period_ns, misfire, stop_on_error, None, until_ns, max_runs)

    @staticmethod
    def fixed_delay(
        period_ns: int, stop_on_error: bool = False, until_ns: int | None = None, max_runs: int | None = None
    ) -> Schedule:
        return Schedule(Kind.FIXED_DELAY, period_ns, Misfire.CATCH_UP, stop_on_error, None, until_ns, max_runs)

    @staticmethod
    def calendar(
        trigger: CronTrigger,
        misfire: Misfire = Misfire.COALESCE,
        stop_on_error: bool = False,
        until_ns: int | None = None,
        max_runs: int | None = None,
    ) -> Schedule:
        return Schedule(Kind.CALENDAR, 0, misfire, stop_on_error, trigger, until_ns, max_runs)

    # -- questions ---------------------------------------------------------------

    @property
    def periodic(self) -> bool:
        return self.kind is not Kind.ONCE

    def same_grid(self, other: Schedule) -> bool:
        """Do both put a periodic task's slots at the same points: the same
        kind and period (fixed rate, fixed delay), or cron expression and
        zone (calendar)? Policies, bounds and limits aside: a deploy that
        changes only those (or the function, its arguments, its options)
        keeps a stored task's grid."""
        same = other.kind is self.kind and other.period_ns == self.period_ns and other.trigger == self.trigger
        return self.periodic and same

    @property
    def limited(self) -> bool:
        """Does something beyond the kind end it (a trigger's end, until, max_runs)?
        (The core keeps per-task state for such a task.)"""
        return not (
            self.trigger is None
            and self.until_ns is None
            and self.max_runs is None
            and self.misfire_grace_ns is None
            and not self.controlled
            and not self.jitter_ns
            and self.group is None
        )

    @property
    def controlled(self) -> bool:
        """Are its runs counted one by one (more than one at once, or an
        overlap policy other than waiting)? See ``_control.py``."""
        return self.max_concurrent != 1 or self.overlap is not Overlap.WAIT

    @property
    def chained(self) -> bool:
        """Is its next slot queued only when its scheduled run ends (a fixed
        delay, or one run at a time that waits)? Else it is queued as soon
        as a run starts, so slots may come due while runs are running."""
        return self.kind is Kind.FIXED_DELAY or (self.max_concurrent == 1 and self.overlap is Overlap.WAIT)

    def first(self, after: int) -> int | None:
        """Calendar: the first slot strictly after ``after`` (wall ns), or None
        if the expression never fires again. Other kinds: ``after``."""
        if self.trigger is None:
            return after
        return self.trigger.next_ns(after)

    def next_after(self, slot: int) -> int | None:
        """The regular slot after ``slot``; None for a one-shot (or a cron
        expression that never fires again). A fixed-delay task's is a
        period after ``slot``: its run's end is not known here."""
        kind = self.kind
        if kind is Kind.FIXED_RATE or kind is Kind.FIXED_DELAY:
            return slot + self.period_ns
        if self.trigger is not None:
            return self.trigger.next_ns(slot)
        return None

    def after_run(self, slot: int, ended: int, outcome: str) -> tuple[int | None, int]:
        """The slot after a run of ``slot`` that ended at ``ended`` with
        ``outcome``, and how many slots the misfire policy dropped to get
        there. A run that crashed or timed out is not caught up back to back
        (a task that crashes every run would otherwise loop on its backlog):
        ``catch_up`` acts as ``skip`` then."""
        kind = self.kind
        if kind is Kind.FIXED_DELAY:
            return ended + self.period_ns, 0
        following = self.next_after(slot)
        if following is None or following >= ended:
            return following, 0
        mode = self._mode(outcome)
        if mode is Misfire.CATCH_UP:
            return following, 0
        if kind is Kind.FIXED_RATE:
            resumed = self._grid(following, ended, mode)
            return resumed, (resumed - following) // self.period_ns
        return self._calendar_after(slot, following, ended, mode)

    def resume(self, slot: int, now: int) -> int:
        """Where a task whose next slot is ``slot`` goes on at ``now``, when
        that slot was left behind (down, crashed, a wall-clock step, a
        take-over): ``catch_up`` keeps it; ``skip`` takes the first slot at
        or after ``now``; ``coalesce`` the last one at or before ``now``
        (one run for all that were missed)."""
        if slot >= now or self.misfire is Misfire.CATCH_UP:
            return slot
        if self.kind is Kind.FIXED_RATE:
            return self._grid(slot, now, self.misfire)
        trigger = self.trigger
        if trigger is None:
            return slot
        if self.misfire is Misfire.SKIP:
            following = trigger.next_ns(now - 1)
            return slot if following is None else following
        last = trigger.last_ns(now)
        return slot if last is None or last < slot else last

    def not_before(self, slot: int, floor: int) -> int | None:
        """The first regular slot at or after ``floor``, counting from
        ``slot`` on (``slot`` itself if it is not before ``floor``). A fixed
        delay or a one-shot has no grid: ``floor``. None: a cron expression
        that never fires again."""
        if slot >= floor:
            return slot
        if self.kind is Kind.FIXED_RATE:
            return self._grid(slot, floor, Misfire.SKIP)
        if self.trigger is not None:
            return self.trigger.next_ns(floor - 1)
        return floor

    # -- wire and record ---------------------------------------------------------

    def to_wire(self) -> Wire:
        """Plain values for another process (see ``Wire``); the zone as given."""
        if self is ONCE:
            return None
        trigger = self.trigger
        expr, zone = (None, None) if trigger is None else (trigger.expr, trigger.zone)
        return (
            self.kind.value,
            self.period_ns,
            self.misfire.value,
            self.stop_on_error,
            expr,
            zone,
            self.until_ns,
            self.max_runs,
            self.max_concurrent,
            self.overlap.value,
            self.misfire_grace_ns,
            self.jitter_ns,
            self.group,
        )

    @staticmethod
    def from_wire(wire: Wire, zone_of: ZoneOf) -> Schedule:
        """The schedule ``to_wire`` made ``wire`` from. Raises ValueError
        for a cron expression or a zone this process cannot read."""
        if wire is None:
            return ONCE
        (
            kind,
            period_ns,
            misfire,
            stop_on_error,
            expr,
            zone,
            until_ns,
            max_runs,
            concurrent,
            overlap,
            grace,
            jitter,
            group,
        ) = wire
        trigger = None if expr is None else CronTrigger(expr, zone_of(zone), zone)
        return Schedule(
            KIND_OF[kind],
            period_ns,
            MISFIRE_OF[misfire],
            stop_on_error,
            trigger,
            until_ns,
            max_runs,
            concurrent,
            OVERLAP_OF[overlap],
            grace,
            jitter,
            group,
        )

    def to_record(self, delay_ns: int, start_wall_ns: int) -> dict[str, Any]:
        """The stored form (JSON), with the task's first delay and ``until``
        as a wall-clock instant (counted from ``start_wall_ns``, the task's
        start). In the store's words (a calendar is ``"cron"`` there, its
        expression ``"expr"``: what a store and its readers know), marked
        with its version. What ends the schedule (``stop_on_error``,
        ``max_runs``, ``until``) is written only when set, and so must any
        field added later: the records (and definition hashes) of tasks that
        do not use it stay as they were."""
        record: dict[str, Any] = {"v": RECORD_VERSION, "kind": _STORED_KIND[self.kind], "delay_ns": delay_ns}
        if self.periodic and self.trigger is None:
            record["period_ns"] = self.period_ns
        if self.kind is Kind.FIXED_RATE or self.kind is Kind.CALENDAR:  # (a fixed delay never misses a slot)
            record["misfire"] = self.misfire.value
        if self.trigger is not None:
            record["expr"] = self.trigger.expr
            record["tz"] = _stored_zone(self.trigger.zone)
        if self.stop_on_error:
            record["stop_on_error"] = True
        if self.max_runs is not None:
            record["max_runs"] = self.max_runs
        if self.until_ns is not None:
            record["until_wall_ns"] = start_wall_ns + self.until_ns
        if self.max_concurrent != 1:
            record["max_concurrent"] = self.max_concurrent
        if self.overlap is not Overlap.WAIT:
            record["overlap"] = self.overlap.value
        if self.misfire_grace_ns is not None:
            record["misfire_grace_ns"] = self.misfire_grace_ns
        if self.jitter_ns:
            record["jitter_ns"] = self.jitter_ns
        if self.group is not None:
            record["group"] = self.group
        return record

    @staticmethod
    def from_record(
        schedule: Mapping[str, Any], options: Mapping[str, Any], now_wall_ns: int, zone_of: ZoneOf
    ) -> tuple[Schedule, int]:
        """A stored schedule, and its task's first delay (ns), as of
        ``now_wall_ns`` (``until`` counts from then). Reads this version's
        record and the first release's (see :func:`upgrade_record`); raises
        ValueError for a cron expression or a zone this process cannot read."""
        record = upgrade_record(schedule, options)[0]
        kind = _KIND_STORED[record["kind"]]
        trigger = None
        if kind is Kind.CALENDAR:
            zone = _zone_of_record(record.get("tz"))
            trigger = CronTrigger(record["expr"], zone_of(zone), zone)
        until_wall = record.get("until_wall_ns")
        value = Schedule(
            kind,
            record.get("period_ns", 0),
            MISFIRE_OF[record.get("misfire", Misfire.CATCH_UP.value)],
            bool(record.get("stop_on_error", False)),
            trigger,
            None if until_wall is None else until_wall - now_wall_ns,
            record.get("max_runs"),
            int(record.get("max_concurrent", 1)),
            OVERLAP_OF[record.get("overlap", Overlap.WAIT.value)],
            record.get("misfire_grace_ns"),
            int(record.get("jitter_ns", 0)),
            record.get("group"),
        )
        return (ONCE if value == ONCE else value), record.get("delay_ns", 0)

    # -- internals -----------------------------------------------------------------

    def _mode(self, outcome: str) -> Misfire:
        if self.misfire is Misfire.CATCH_UP and outcome in ("crashed", "timeout"):
            return Misfire.SKIP
        return self.misfire

    def _grid(self, slot: int, now: int, mode: Misfire) -> int:
        """Fixed rate, ``slot < now``: the first grid point at or after
        ``now`` (skip), or the last at or before it (coalesce)."""
        period = self.period_ns
        if mode is Misfire.SKIP:
            return slot + -(-(now - slot) // period) * period
        return slot + (now - slot) // period * period

    def _calendar_after(self, slot: int, following: int, now: int, mode: Misfire) -> tuple[int | None, int]:
        """``after_run`` for a calendar schedule whose slot after ``slot``
        (``following``) lies before ``now``: count the slots up to now (up to
        MISSED_CAP) and keep the last one."""
        trigger = self.trigger
        assert trigger is not None
        count, last = 0, following
        for instant in trigger.iter_ns(slot):
            if instant > now:
                break
            count += 1
            last = instant
            if count >= MISSED_CAP:
                last = trigger.last_ns(now) or last
                break
        if mode is Misfire.SKIP:
            return trigger.next_ns(now - 1), count
        return last, count - 1  # COALESCE: the last slot up to now runs once, late


#: The one-shot schedule.
ONCE: Final = Schedule(Kind.ONCE)


def upgrade_record(schedule: Mapping[str, Any], options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A stored (schedule, options) pair in this version's form (copies).

    The first release's record (no ``"v"``) kept a periodic task's delay as
    ``initial_delay_ns``, and what ends a schedule (``stop_on_error``,
    ``max_runs``, ``until_wall_ns``) in the options: it is rewritten as
    :meth:`Schedule.to_record` writes it now, its options without those."""
    if "v" in schedule:
        return dict(schedule), dict(options)
    record: dict[str, Any] = {"v": RECORD_VERSION, "kind": schedule["kind"]}
    record["delay_ns"] = schedule.get("delay_ns", schedule.get("initial_delay_ns", 0))
    for name in ("period_ns", "misfire", "expr", "tz"):
        if name in schedule:
            record[name] = schedule[name]
    rest = dict(options)
    if rest.pop("stop_on_error", False):
        record["stop_on_error"] = True
    for name in ("max_runs", "until_wall_ns"):
        value = rest.pop(name, None)
        if value is not None:
            record[name] = value
    return record, rest


#: Kinds in a store's words (a store knows a calendar schedule as "cron").
_STORED_KIND: Final = {
    Kind.ONCE: "once",
    Kind.FIXED_RATE: "fixed_rate",
    Kind.FIXED_DELAY: "fixed_delay",
    Kind.CALENDAR: "cron",
}
_KIND_STORED: Final = {stored: kind for kind, stored in _STORED_KIND.items()}


def _stored_zone(zone: Zone) -> str | float | None:
    """A zone as a store keeps it: an IANA name, a fixed UTC offset in
    seconds, or None (the local zone of whichever process reads it)."""
    if zone is None or isinstance(zone, str):
        return zone
    offset = zone.utcoffset(None)
    if isinstance(zone, timezone) and offset is not None:
        return offset.total_seconds()
    raise ValueError(
        f"tz {zone!r} names no IANA zone, so it cannot be stored: pass an IANA name such as 'Europe/Berlin'"
    )


def _zone_of_record(stored: object) -> Zone:
    if isinstance(stored, (int, float)) and not isinstance(stored, bool):
        return timezone(timedelta(seconds=stored))
    if stored is None or isinstance(stored, str):
        return stored
    raise ValueError(f"a stored zone must be a name, an offset in seconds or null, not {stored!r}")
