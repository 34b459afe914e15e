"""Time zones outside the pure core: the machine's local zone, and zones as
plain values that can cross to the dispatcher process.

``tz=None`` means the machine's local zone *with its DST rules* (not a fixed
offset): the IANA key from ``$TZ`` or the ``/etc/localtime`` link, else the
``/etc/localtime`` file itself, else the current fixed offset (a machine
without zone data).
"""

from __future__ import annotations

import os
import zoneinfo
from datetime import datetime, timezone, tzinfo
from typing import Any

from ._core import _calendar


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
        return datetime.now().astimezone().tzinfo or timezone.utc


_calendar.local_zone = local_zone


def to_wire(tz: tzinfo | None) -> Any:
    """A zone as a value the dispatcher can rebuild without user code: an
    IANA key, a ``datetime.timezone``, or None (the local zone). Raises
    ValueError for a tzinfo that names no IANA zone."""
    if tz is None or isinstance(tz, timezone):
        return tz
    key = getattr(tz, "key", None) or getattr(tz, "zone", None)
    if isinstance(key, str):
        try:
            zoneinfo.ZoneInfo(key)
            return key
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
            pass
    raise ValueError(
        f"tz {tz!r} names no IANA zone, so it cannot reach the dispatcher process: "
        "pass an IANA name such as 'Europe/Berlin' (or use runner='threads')"
    )


def from_wire(value: Any) -> tzinfo:
    if value is None:
        return local_zone()
    if isinstance(value, tzinfo):
        return value
    return zoneinfo.ZoneInfo(value)
