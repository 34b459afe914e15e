"""Time zones outside the pure core: naming a zone, the machine's local
zone, zones that can cross to another process, and cron fire times for
people (``procsched next``).

``tz=None`` means the machine's local zone *with its DST rules* (not a fixed
offset): the IANA key from ``$TZ`` or the ``/etc/localtime`` link, else the
``/etc/localtime`` file itself, else the current fixed offset (a machine
without zone data). A zone is resolved where it is used (:func:`zone`): the
dispatcher resolves ``None`` to *its* local zone, as it did the name.
"""

from __future__ import annotations

import os
import zoneinfo
from datetime import UTC, datetime, timezone, tzinfo

from ._core import CronTrigger, Zone
from ._core._units import wall_datetime, wall_ns


def local_zone() -> tzinfo:
    tz_env = os.environ.get("TZ", "").lstrip(":")
    if tz_env:
        try:
            return zoneinfo.ZoneInfo(tz_env)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
            if os.path.isabs(tz_env) and os.path.isfile(tz_env):
                with open(tz_env, "rb") as f:
                    return zoneinfo.ZoneInfo.from_file(f, key=tz_env)
    try:
        target = os.path.realpath("/etc/localtime")
        marker = "/zoneinfo/"
        if marker in target:
            return zoneinfo.ZoneInfo(target.split(marker, 1)[1])
        with open("/etc/localtime", "rb") as f:
            return zoneinfo.ZoneInfo.from_file(f, key="localtime")
    except (OSError, ValueError, zoneinfo.ZoneInfoNotFoundError):
        return datetime.now().astimezone().tzinfo or UTC


def zone(tz: Zone) -> tzinfo:
    """``tz`` as a ``tzinfo``: an IANA name, a tzinfo, or None (the local zone).

    Raises ValueError for an unknown name, TypeError for anything else.
    """
    if tz is None:
        return local_zone()
    if isinstance(tz, tzinfo):
        return tz
    if not isinstance(tz, str):
        raise TypeError(f"tz must be an IANA zone name, a tzinfo or None, not {type(tz).__name__} {tz!r}")
    try:
        return zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"tz must be a known IANA zone name (e.g. 'Europe/Berlin'), not {tz!r}") from None


def portable(tz: Zone) -> Zone:
    """A zone as a value another process rebuilds without user code: an
    IANA key, a ``datetime.timezone``, or None (the local zone). Raises
    ValueError for a tzinfo that names no IANA zone."""
    if tz is None or isinstance(tz, (str, timezone)):
        return tz
    if isinstance(tz, zoneinfo.ZoneInfo) and tz.key and _known(tz.key):
        return tz.key
    if type(tz).__module__.partition(".")[0] == "pytz" and _known(str(tz)):  # a pytz zone's str() is its name
        return str(tz)
    raise ValueError(
        f"tz {tz!r} names no IANA zone, so it cannot reach the dispatcher process: "
        "pass an IANA name such as 'Europe/Berlin' (or use runner='threads')"
    )


def _known(key: str) -> bool:
    try:
        zoneinfo.ZoneInfo(key)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


def next_fire_times(expr: str, tz: Zone, after: datetime, n: int) -> list[datetime]:
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
    trigger = CronTrigger(expr, zone_, tz)
    out: list[datetime] = []
    for instant in trigger.iter_ns(wall_ns(after)):
        if len(out) >= n:
            break
        out.append(wall_datetime(instant).astimezone(zone_))
    return out
