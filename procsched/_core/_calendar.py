"""Calendar triggers: the next wall-clock instant a cron expression fires.

Theory of operation
-------------------
cronsim walks the *calendar*: given a naive local time it yields the next
naive local times that match the expression (seconds resolution, names,
lists, ranges, steps, ``L``, ``#``). This module maps each of those local
times to real instants in the zone, by the DST rules of DESIGN.md (cronie's):

* a local time that exists once is one instant;
* a local time in a spring-forward gap (it never happens on the wall) runs
  once, at the first instant after the gap - when the hour field is a fixed
  value or a list (``30 2 * * *``); with ``*``, a range or a step in the
  hour field it is skipped (``0 * * * *`` fires 23 times that day);
* a local time that happens twice at fall-back runs at its first occurrence
  only with a fixed hour, and at both with ``*``/range/step hours.

Instants come out in time order even though the local walk is not in time
order inside a fall-back window: the second occurrence of 01:30 comes after
the first occurrence of 01:45, so second occurrences wait in a small sorted
buffer until the walk passes them. Several gap times map to the same
instant; duplicates are dropped.

Instants are integer nanoseconds since the Unix epoch (UTC), the core's wall
unit; fire times are whole seconds. Nothing here reads a clock: "now" is
always an argument. Zones are ``tzinfo`` objects (``zoneinfo.ZoneInfo`` or
``datetime.timezone``); naming a zone by string goes through ``zoneinfo``,
and the machine's local zone is resolved outside the core (``procsched._tz``
installs ``local_zone``).
"""

from __future__ import annotations

from bisect import insort
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Callable, Iterator


NS = 1_000_000_000
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ZERO = timedelta(0)

#: The aliases cron understands, as five-field expressions.
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

#: Set by ``procsched._tz`` (outside the pure core): the machine's local zone.
local_zone: Callable[[], tzinfo] | None = None


def zone(tz: str | tzinfo | None) -> tzinfo:
    """``tz`` as a ``tzinfo``: an IANA name, a tzinfo, or None (the local zone).

    Raises ValueError for an unknown name, TypeError for anything else.
    """
    if tz is None:
        if local_zone is not None:
            return local_zone()
        return datetime.now().astimezone().tzinfo or timezone.utc  # pragma: no cover - _tz always installs it
    if isinstance(tz, tzinfo):
        return tz
    if not isinstance(tz, str):
        raise TypeError(f"tz must be an IANA zone name, a tzinfo or None, not {type(tz).__name__} {tz!r}")
    import zoneinfo

    try:
        return zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"tz must be a known IANA zone name (e.g. 'Europe/Berlin'), not {tz!r}") from None


def _fields(expr: str) -> list[str]:
    if not isinstance(expr, str):
        raise TypeError(f"expr must be a cron expression (str), not {type(expr).__name__} {expr!r}")
    text = expr.strip()
    text = ALIASES.get(text.lower(), text)
    parts = text.split()
    if len(parts) == 5:
        parts.insert(0, "0")
    if len(parts) != 6:
        raise ValueError(
            f"expr must have five fields (minute hour day-of-month month day-of-week), six with seconds "
            f"first, or be an alias ({' '.join(ALIASES)}), not {expr!r}"
        )
    return parts


def _invalid(expr: str, parts: list[str], why: str) -> str:
    """The message for an expression cronsim refuses: what is wrong, in the user's terms."""
    from cronsim import CronSim, CronSimError

    given = expr.split()
    if why == "Bad day-of-week" and len(given) == 6 and given[5].isdigit() and len(given[5]) == 4:
        return (f"expr has six fields, read seconds first (second minute hour day-of-month month day-of-week); "
                f"cron has no year field, and {given[5]!r} is not a day of the week: {expr!r}")  # fmt: skip
    if why == "Bad day-of-month":
        try:  # the days are valid on their own: no month named has them
            CronSim(" ".join([*parts[:4], "*", parts[5]]), datetime(2000, 1, 1))
        except CronSimError:
            pass
        else:
            return f"expr can never fire: no month in {parts[4]!r} has day {parts[3]!r}: {expr!r}"
    return f"expr is not a valid cron expression ({why}): {expr!r}"


class CronTrigger:
    """A cron expression in a zone; answers "the next fire time after t".

    Raises ValueError at construction for a malformed expression or an
    out-of-range field, naming it.
    """

    __slots__ = ("expr", "tz", "_cron", "_fixed_hour")

    def __init__(self, expr: str, tz: tzinfo) -> None:
        parts = _fields(expr)
        self.expr = expr
        self.tz = tz
        self._cron = " ".join(parts)
        hour = parts[2]
        # DESIGN.md: a fixed hour (a value or a list) runs a repeated time once
        # and a skipped time at the end of the gap; "*", ranges and steps follow
        # real time.
        self._fixed_hour = not any(c in hour for c in "*-/")
        from cronsim import CronSim, CronSimError  # here: only cron tasks need it (a fast start for the rest)

        try:
            probe = CronSim(self._cron, datetime(2000, 1, 1))
            next(probe)
        except CronSimError as exc:
            raise ValueError(_invalid(expr, parts, str(exc))) from None
        except StopIteration:
            raise ValueError(f"expr never fires: {expr!r}") from None

    def __repr__(self) -> str:
        return f"CronTrigger({self.expr!r}, {self.tz!r})"

    def next_ns(self, after_ns: int) -> int | None:
        """The first fire instant strictly after ``after_ns`` (ns since the
        epoch), or None if the expression never fires again."""
        for instant in self._instants(after_ns):
            return instant
        return None

    def iter_ns(self, after_ns: int) -> Iterator[int]:
        """Fire instants strictly after ``after_ns``, in order."""
        return self._instants(after_ns)

    # -- internals -------------------------------------------------------

    def _instants(self, after_ns: int) -> Iterator[int]:
        tz = self.tz
        after_s = after_ns // NS  # fire times are whole seconds: t * NS > after_ns iff t > after_s
        local = (EPOCH + timedelta(seconds=after_s)).astimezone(tz)
        naive = local.replace(tzinfo=None, fold=0)
        back = _ZERO
        if local.fold == 0:
            off0, off1 = _offsets(naive, tz)
            if off0 > off1:  # in the first pass of a fall-back window: the second
                back = timedelta(seconds=off0 - off1)  # occurrences of earlier times lie ahead of us
        start = naive - back - timedelta(seconds=1)
        deferred: list[int] = []
        last = after_s
        from cronsim import CronSim, CronSimError

        try:
            for n in CronSim(self._cron, start):
                first, second = self._map(n)
                if second is not None:
                    insort(deferred, second)
                if first is None:
                    continue
                while deferred and deferred[0] <= first:
                    t = deferred.pop(0)
                    if t > last:
                        last = t
                        yield t * NS
                if first > last:
                    last = first
                    yield first * NS
        except CronSimError:  # pragma: no cover - validated at construction
            return
        for t in deferred:  # the walk ended (no match for 50 years)
            if t > last:
                last = t
                yield t * NS

    def _map(self, n: datetime) -> tuple[int | None, int | None]:
        """Local time ``n`` -> (its first instant or None, its second instant or None), in seconds."""
        tz = self.tz
        off0, off1 = _offsets(n, tz)
        base = _seconds(n)
        if off0 == off1:
            return base - off0, None
        if off0 > off1:  # ambiguous: happens twice (fall-back)
            return base - off0, None if self._fixed_hour else base - off1
        # In a gap (spring-forward): never on the wall.
        if not self._fixed_hour:
            return None, None
        return _transition(base - off1, base - off0, off1, tz), None


def _offsets(n: datetime, tz: tzinfo) -> tuple[int, int]:
    """UTC offsets (whole seconds) of naive ``n`` read with fold=0 and fold=1."""
    a = tz.utcoffset(n.replace(fold=0)) or _ZERO
    b = tz.utcoffset(n.replace(fold=1)) or _ZERO
    return a // timedelta(seconds=1), b // timedelta(seconds=1)


def _seconds(n: datetime) -> int:
    """Naive ``n`` read as if it were UTC, in seconds since the epoch."""
    return (n.replace(tzinfo=timezone.utc) - EPOCH) // timedelta(seconds=1)


def _offset_at(t: int, tz: tzinfo) -> int:
    return ((EPOCH + timedelta(seconds=t)).astimezone(tz).utcoffset() or _ZERO) // timedelta(seconds=1)


def _transition(lo: int, hi: int, after: int, tz: tzinfo) -> int:
    """The first instant (seconds) in (lo, hi] whose offset is ``after``: the
    end of the gap. Binary search: a gap is at most a few hours wide."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset_at(mid, tz) == after:
            hi = mid
        else:
            lo = mid
    return hi


def next_fire_times(expr: str, tz: str | tzinfo | None, after: datetime, n: int) -> list[datetime]:
    """The next ``n`` fire times of ``expr`` in ``tz`` strictly after ``after``
    (an aware datetime), as aware datetimes in that zone.

    Raises:
        ValueError: a bad expression, an unknown zone, a naive ``after``, n < 0.
        TypeError: arguments of the wrong type.
    """
    if not isinstance(after, datetime):
        raise TypeError(f"after must be an aware datetime, not {type(after).__name__} {after!r}")
    if after.tzinfo is None or after.utcoffset() is None:
        raise ValueError(f"after must be an aware datetime, not naive {after!r}")
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"n must be an int, not {type(n).__name__} {n!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0, not {n!r}")
    zone_ = zone(tz)
    trigger = CronTrigger(expr, zone_)
    after_ns = (after - EPOCH) // timedelta(microseconds=1) * 1000
    out: list[datetime] = []
    for instant in trigger.iter_ns(after_ns):
        if len(out) >= n:
            break
        out.append((EPOCH + timedelta(seconds=instant // NS)).astimezone(zone_))
    return out
