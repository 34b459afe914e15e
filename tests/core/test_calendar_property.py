"""Property test: fire times of random cron expressions in random zones equal a
brute-force walk of real time, minute by minute, that applies DESIGN.md's DST
rules to each instant's local time (mostly in windows around the zones' 2026
DST transitions, where the rules bite).

The oracle: walk UTC minutes t; local = t in the zone.
- t fires if its local time matches and it is not the second occurrence of a
  repeated local time - unless the hour field is `*`, a range or a step, which
  fire at both occurrences;
- where the local clock jumps forward (a gap ends at t), t also fires if the
  hour field is fixed (a value or a list) and a skipped local time matches.
Matching is done here from the generated field sets, not by cronsim.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from procsched._core._calendar import NS, CronTrigger

UTC = UTC
MINUTE = timedelta(minutes=1)
ZONES = [
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "America/Santiago",
    "America/Havana",
    "Europe/London",
    "Australia/Sydney",
    "UTC",
    "Asia/Kolkata",
]


def _transitions(name: str) -> list[datetime]:
    zone = ZoneInfo(name)
    out = []
    t = datetime(2026, 1, 1, tzinfo=UTC)
    prev = t.astimezone(zone).utcoffset()
    while t.year == 2026:
        t += timedelta(hours=1)
        off = t.astimezone(zone).utcoffset()
        if off != prev:
            out.append(t)
        prev = off
    return out


TRANSITIONS = {name: _transitions(name) for name in ZONES}


@st.composite
def field(draw: st.DrawFn, lo: int, hi: int, focus: tuple[int, int] | None = None) -> tuple[str, set[int]]:
    """A cron field as text and as the set of values it matches."""
    pick = st.integers(lo, hi) if focus is None else st.one_of(st.integers(*focus), st.integers(lo, hi))
    kind = draw(st.sampled_from(["star", "value", "list", "range", "step", "range_step"]))
    if kind == "star":
        return "*", set(range(lo, hi + 1))
    if kind == "value":
        v = draw(pick)
        return str(v), {v}
    if kind == "list":
        values = sorted(set(draw(st.lists(pick, min_size=2, max_size=4))))
        return ",".join(map(str, values)), set(values)
    if kind == "step":
        k = draw(st.integers(1, max(1, (hi - lo) // 2)))
        return f"*/{k}", set(range(lo, hi + 1, k))
    a = draw(pick)
    b = draw(st.integers(a, min(hi, a + draw(st.integers(0, hi - lo)))))
    if kind == "range":
        return f"{a}-{b}", set(range(a, b + 1))
    # cronsim reads a one-value range with a step ("1-1/1") as "1/1" (1 to the
    # end); crontab(5) gives no meaning to that corner: generate real ranges.
    a = draw(st.integers(lo, hi - 1))
    b = draw(st.integers(a + 1, hi))
    k = draw(st.integers(1, 5))
    return f"{a}-{b}/{k}", set(range(a, b + 1, k))


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, dict, str, datetime]:
    minute = draw(field(0, 59))
    hour = draw(field(0, 23, focus=(0, 4)))
    if draw(st.booleans()):
        dom = ("*", set(range(1, 32)))
    else:
        dom = draw(field(1, 31))
    month = ("*", set(range(1, 13)))
    if draw(st.integers(0, 3)) == 0:
        dow = draw(field(0, 6))
    else:
        dow = ("*", set(range(7)))
    expr = " ".join(f[0] for f in (minute, hour, dom, month, dow))
    sets = {
        "minute": minute[1],
        "hour": hour[1],
        "dom": dom[1],
        "month": month[1],
        "dow": dow[1],
        "day_and": dom[0].startswith("*") or dow[0].startswith("*"),
        "fixed_hour": not any(c in hour[0] for c in "*-/"),
    }
    name = draw(st.sampled_from(ZONES))
    if TRANSITIONS[name] and draw(st.integers(0, 4)):
        base = draw(st.sampled_from(TRANSITIONS[name]))
        start = base + timedelta(minutes=draw(st.integers(-6 * 60, 60)))
    else:
        start = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=draw(st.integers(0, 364 * 24 * 60)))
    return expr, sets, name, start


def matches(sets: dict, n: datetime) -> bool:
    if n.minute not in sets["minute"] or n.hour not in sets["hour"] or n.month not in sets["month"]:
        return False
    dom_ok = n.day in sets["dom"]
    dow_ok = (n.weekday() + 1) % 7 in sets["dow"]
    return (dom_ok and dow_ok) if sets["day_and"] else (dom_ok or dow_ok)


def oracle(sets: dict, zone: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    out = []
    t = start
    prev = (t - MINUTE).astimezone(zone).replace(tzinfo=None)
    while t < end:
        local = t.astimezone(zone)
        naive = local.replace(tzinfo=None, fold=0)
        fire = matches(sets, naive) and (local.fold == 0 or not sets["fixed_hour"])
        if not fire and sets["fixed_hour"] and naive - prev > MINUTE:  # a gap ended at t
            skipped = prev + MINUTE
            while skipped < naive and not fire:
                fire = matches(sets, skipped)
                skipped += MINUTE
        if fire:
            out.append(t)
        prev = naive
        t += MINUTE
    return out


@settings(max_examples=600, deadline=None, derandomize=True)  # ~10 s of the suite; 4 in 5 near a DST change
@given(cases())
def test_fire_times_match_a_minute_by_minute_walk(case: tuple[str, dict, str, datetime]) -> None:
    expr, sets, name, start = case
    zone = ZoneInfo(name)
    end = start + timedelta(hours=8)
    expected = oracle(sets, zone, start, end)
    trigger = CronTrigger(expr, zone)
    start_ns = int(start.timestamp()) * NS
    end_ns = int(end.timestamp()) * NS
    got = []
    for instant in trigger.iter_ns(start_ns - 1):
        if instant >= end_ns:
            break
        got.append(datetime.fromtimestamp(instant // NS, UTC))
    assert got == expected, (expr, name, start)
