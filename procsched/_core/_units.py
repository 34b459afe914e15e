"""Time units: the one home of procsched's time arithmetic constants.

Inside, time is integer nanoseconds: a monotonic clock's reading (a due
time, a run's start) or, on the *wall* clock, nanoseconds since the Unix
epoch, UTC (a calendar slot, everything a store keeps). At the public
surface it is seconds (``float``) or an aware ``datetime``; these helpers
convert at that edge, and nowhere else.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

#: Nanoseconds per second.
NS: Final = 1_000_000_000
#: Nanoseconds per millisecond.
MS: Final = 1_000_000
#: The Unix epoch, the origin of every wall-clock time in ns.
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)


def wall_datetime(wall_ns: int) -> datetime:
    """Wall-clock ns since the epoch -> an aware UTC datetime (to the microsecond)."""
    return EPOCH + timedelta(microseconds=wall_ns // 1000)


def wall_ns(when: datetime) -> int:
    """An aware datetime -> wall-clock ns since the epoch (to the microsecond)."""
    return (when - EPOCH) // _MICROSECOND * 1000
