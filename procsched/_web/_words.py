"""Schedules in words, and a task's next slots.

A schedule is the store's schedule record (``{"kind": "fixed_rate",
"period_ns": ...}``, ``{"kind": "cron", "expr": ..., "tz": ...}``; see
``procsched._store._model.TaskDefinition``): the store source has it as
stored, the program source makes it from a jobs file's ``Job``
(``schedule_of``). Cron expressions are put in words by cron-descriptor;
the slot arithmetic is the core's own (``Schedule.next_after``).

    "0 3 * * *", tz "Europe/Berlin"  ->  "at 03:00 Europe/Berlin, every day"
    fixed rate, 0.5 s                ->  "every 500 ms"
    fixed delay, 5 s                 ->  "every 5 s after each run ends"
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Any

from .._core._units import NS, wall_datetime, wall_ns

#: Cron's aliases, as cron-descriptor needs them spelled out.
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def schedule_of(job: Any) -> dict[str, Any]:
    """A jobs file's ``Job`` (``procsched._jobs.Job``) as a schedule record."""
    if job.kind == "cron":
        tz = job.options.get("tz")
        return {
            "kind": "cron",
            "expr": job.options["expr"],
            "tz": tz if tz is None or isinstance(tz, str) else zone_name(tz),
        }
    if job.kind in ("rate", "delay"):
        return {"kind": "fixed_rate" if job.kind == "rate" else "fixed_delay", "period_ns": round(job.period * NS)}
    return {"kind": "once"}


def zone_name(tz: tzinfo | str | float | None) -> str:
    """An IANA name where there is one; the machine's zone for None."""
    if isinstance(tz, str):
        return tz
    if isinstance(tz, (int, float)):
        return _offset_text(float(tz))
    if tz is None:
        from .._tz import local_zone

        tz = local_zone()
    key = getattr(tz, "key", None)  # zoneinfo.ZoneInfo's IANA name
    if isinstance(key, str) and key != "localtime":
        return key
    offset = datetime.now(tz).utcoffset()
    return _offset_text(offset.total_seconds() if offset is not None else 0.0)


def _offset_text(seconds: float) -> str:
    if seconds == 0:
        return "UTC"
    sign = "+" if seconds > 0 else "-"
    minutes = int(abs(seconds)) // 60
    return f"UTC{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def describe(schedule: dict[str, Any] | None) -> tuple[str, str | None]:
    """(the schedule in words, its time zone or None)."""
    if schedule is None:
        return "-", None
    kind = schedule["kind"]
    if kind in ("fixed_rate", "fixed_delay"):
        text = "every " + duration_text(schedule["period_ns"] / NS)
        return (text if kind == "fixed_rate" else text + " after each run ends"), None
    if kind == "once":
        return "once", None
    zone = zone_name(schedule.get("tz"))
    return cron_words(schedule["expr"], zone), zone


def cron_words(expr: str, zone: str) -> str:
    """``"at 03:00 Europe/Berlin, every day"``; ``"every 5 minutes (UTC)"``."""
    from cron_descriptor import ExpressionDescriptor, Options

    fields = ALIASES.get(expr.strip().lower(), expr).split()
    options = Options()
    options.use_24hour_time_format = True
    try:
        text = ExpressionDescriptor(" ".join(fields), options).get_description()
    except Exception:  # noqa: BLE001 - an expression cronsim takes and cron-descriptor does not
        return f"cron {expr} ({zone})"
    text = text[:1].lower() + text[1:]
    if not text.startswith("at "):
        return f"{text} ({zone})"
    first, sep, rest = text.partition(", ")
    if not sep and fields[-3:] == ["*", "*", "*"]:
        rest, sep = "every day", ", "
    return f"{first} {zone}{sep}{rest}"


def duration_text(seconds: float) -> str:
    """``500 ms``, ``2 s``, ``1.5 s``, ``5 min``, ``1 h``, ``40 us``."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:.3g} s" if seconds < 100 else f"{seconds:.0f} s"


def next_slots(schedule: dict[str, Any] | None, first: datetime | None, n: int = 10) -> list[datetime]:
    """The next ``n`` slots from ``first`` (the task's next run) on. A
    fixed-delay task's slots after the next depend on when its runs end, so
    it lists only the next one."""
    if first is None:
        return []
    if schedule is None or schedule["kind"] in ("once", "fixed_delay"):
        return [first]
    from .. import _tz
    from .._core import Schedule

    try:
        task_schedule = Schedule.from_record(schedule, {}, 0, _tz.zone)[0]
    except ValueError:  # a zone or an expression this process cannot read
        return [first]
    slots = [first]
    slot_ns = wall_ns(first)
    while len(slots) < n:
        following = task_schedule.next_after(slot_ns)
        if following is None or following <= slot_ns:
            break
        slot_ns = following
        slots.append(wall_datetime(slot_ns))
    return slots
