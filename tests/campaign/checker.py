"""The campaign's checker: the runs' own log, the store's tables (plain SQL)
and what the nemesis did, against the promises of README ("durable",
"Running several instances") and issue 20.

    log lines ──▶ Attempt per (key, run, attempt, process) ─┐
    store rows (procsched_runs, procsched_tasks) ───────────┼─▶ one check per promise ──▶ Violations
    History (lives of instances, faults, key events) ───────┘

The checks (each a function below, each violation with its evidence):

- ``twice``: no (key, run, attempt) started twice;
- ``overlap``: never two runs of one task at once (max_concurrent is 1 for
  every campaign task); a run under way on an instance stopped past its lease
  is the README's documented limit ("side effects are not fenced"), counted
  apart, not a violation - stopped longer than the lease, or stopped when the
  store recorded the run crashed by another instance's take-over (which it
  does only once the lease has run out, by its own clock: a stop shorter than
  the lease that began a while after the last renewal);
- ``stale attempt``: no attempt of a run starts after a later attempt of it;
- ``unrecorded`` / ``never ran``: every attempt that ran is in the store, and
  every attempt the store says ended ``ok`` ran;
- ``in flight``: nothing is left in flight once every instance has shut down;
- ``slot lost``: every slot of a ``catch_up`` task either ran or is in the
  store with a reason (``procsched_skipped``, or the misfire slots on a
  run's row: ``storesql.skipped``). Today's store records runs only, so a slot it does not
  hold is accepted where a fault legitimately skips slots (a crashed run
  behaves as ``skip``; a take-over after a kill or a stop; a pause); a clean
  restart and a store outage excuse nothing. When the store records skipped
  slots (issue 22: rows of ``procsched_runs`` with outcome ``skipped`` -
  ``_recorded_skips`` is the one place that knows where), those excuses are
  dropped: every slot must be a run or a recorded skip;
- ``two ends``: no slot of a periodic task both ran and is recorded
  skipped (one slot, one end: a skip means it never runs);
- ``stalled``: in the calm phase at the end every live task runs, and every
  one-shot has run once and left the store's live set (one that ran again
  because its end was not stored before its instance was killed is the
  README's "runs in flight when the scheduler died are recorded crashed",
  counted apart);
- ``paused`` / ``cancelled`` / ``old definition``: no run starts after a
  pause or a cancel was acknowledged, or with a definition older than one
  acknowledged, on the instance that acknowledged it (at once) or on the
  others (after the re-read interval, 1 s, plus 1 s of slack). Two deploys
  of one key within seconds are concurrent: each is the store's at its
  instance's next commit, and the one committed last is the task from then
  on - its runs are counted apart as documented ("last deploy wins"), the
  store's definitions table saying which was written last (a deploy stored
  just after a cancel deleted its key makes it live again). A deploy whose
  instance was killed before its next commit is lost with it (documented,
  as for a one-shot's add): stored only if a later deploy of it wrote it;
- ``processes``, ``traceback``, ``died``, ``unresponsive``: every process
  gone at the end, no traceback in an instance's stderr, no instance dead
  or silent unless the nemesis did it.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from tests.campaign import storesql

#: After a pause, a cancel or a changed definition acknowledged by one
#: instance, the others follow within the re-read interval (<= 1 s); slack
#: for a loaded machine on top.
SETTLE = 2.0
#: On the instance that acknowledged it: at once (a run that had begun as the
#: call returned writes its start line within microseconds; 20 ms of slack).
SAME = 0.02


@dataclass(frozen=True)
class Violation:
    kind: str
    key: str | None
    what: str
    evidence: tuple[str, ...] = ()

    def render(self) -> str:
        head = f"[{self.kind}] {self.key + ': ' if self.key else ''}{self.what}"
        return "\n      ".join([head, *self.evidence[:8]])


@dataclass
class Attempt:
    """One attempt as the log saw it (a start line, and its end line if any)."""

    key: str
    run: int
    attempt: int
    inst: str  # the instance's life label, "A.2"
    version: int
    slot_us: int | None
    pid: int
    start: float
    end: float | None = None
    x: str | None = None  # "ok", "fail", "crash" (from the end line)

    def __str__(self) -> str:
        end = "?" if self.end is None else _ts(self.end)
        slot = "" if self.slot_us is None else f" slot {_ts(self.slot_us / 1e6)}"
        return (
            f"{self.key} run {self.run} attempt {self.attempt} v{self.version} on {self.inst} (pid {self.pid})"
            f"{slot} ran {_ts(self.start)}..{end} {self.x or ''}"
        ).rstrip()


def _ts(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S.%f")[:-3]


def read_log(path: str) -> list[Attempt]:
    runs: dict[tuple[Any, ...], Attempt] = {}
    order: list[Attempt] = []
    try:
        with open(path) as f:
            lines = [json.loads(x) for x in f if x.strip()]
    except FileNotFoundError:
        return []
    for d in lines:
        ident = (d["k"], d["r"], d["a"], d["pid"], d["i"])
        if d["ev"] == "start":
            a = Attempt(d["k"], d["r"], d["a"], d["i"], d["v"], d["slot"], d["pid"], d["t"])
            runs[ident] = a
            order.append(a)
        elif ident in runs:
            runs[ident].end, runs[ident].x = d["t"], d["x"]
    return order


def check(h: Any, log_path: str) -> tuple[list[Violation], list[Violation], int]:
    """(violations, documented limits seen, attempts checked)."""
    attempts = read_log(log_path)
    rows = storesql.runs(h.url)
    tasks = storesql.tasks(h.url)
    lives = {life.label: life for life in h.lives}
    for a in attempts:  # a run cut short by its instance's death ends with it
        if a.end is None:
            life = lives.get(a.inst)
            a.end = life.ended if life is not None and life.ended is not None else h.end
    out: list[Violation] = []
    documented: list[Violation] = []
    out += _twice(attempts)
    found, limits = _overlap(attempts, lives, h.lease, rows)
    out += found
    documented += limits
    out += _stale_attempts(attempts)
    out += _recorded(attempts, rows)
    out += [
        Violation("in flight", r.key, f"run {r.run} attempt {r.attempt} never ended (held by {r.holder})")
        for r in rows
        if r.outcome is None
    ]
    stored = storesql.skipped(h.url)
    out += _slots(h, attempts, rows, stored)
    out += _two_ends(h, attempts, stored)
    found, limits = _stalled(h, attempts, tasks, lives, rows)
    out += found
    documented += limits
    found, limits = _after_events(
        h,
        attempts,
        storesql.definitions(h.url),
        lives,
        storesql.definitions_written(h.url),
        storesql.deleted(h.url),
    )
    out += found
    documented += limits
    out += _health(h)
    return out, documented, len(attempts)


def _twice(attempts: list[Attempt]) -> list[Violation]:
    seen: dict[tuple[str, int, int], list[Attempt]] = defaultdict(list)
    for a in attempts:
        seen[(a.key, a.run, a.attempt)].append(a)
    return [
        Violation("twice", k[0], f"run {k[1]} attempt {k[2]} started {len(v)} times", tuple(map(str, v)))
        for k, v in seen.items()
        if len(v) > 1
    ]


def _stopped_past_lease(life: Any, start: float, end: float, lease: float) -> bool:
    return any(a < end and b > start and b - a > lease for a, b in life.stops) if life else False


def _taken_over_while_stopped(life: Any, row: storesql.RunRow | None) -> bool:
    """The store recorded the attempt crashed by a take-over (``SchedulerDied``:
    another instance found its scheduler's lease run out, by the store's clock)
    at an instant its instance was stopped (it could not renew)."""
    if life is None or row is None or row.error_type != "SchedulerDied" or row.finished_ns is None:
        return False
    t = row.finished_ns / 1e9
    return any(a <= t <= b for a, b in life.stops)


def _retried_while_stopped(life: Any, a: Attempt, row: storesql.RunRow | None, lease: float) -> bool:
    """README, "Side effects are not fenced": a run under way on an instance
    stopped past its lease (or taken over while stopped) is recorded crashed
    and retried elsewhere while it may still be running there."""
    return _stopped_past_lease(life, a.start, a.end or 0, lease) or _taken_over_while_stopped(life, row)


def _overlap(
    attempts: list[Attempt], lives: dict[str, Any], lease: float, rows: list[storesql.RunRow]
) -> tuple[list[Violation], list[Violation]]:
    out, documented = [], []
    by_row = {(r.key, r.run, r.attempt): r for r in rows}
    by_key: dict[str, list[Attempt]] = defaultdict(list)
    for a in attempts:
        by_key[a.key].append(a)
    for key, runs in by_key.items():
        runs.sort(key=lambda a: a.start)
        for i, a in enumerate(runs):
            for b in runs[i + 1 :]:
                if b.start >= (a.end or 0):
                    break
                if (a.run, a.attempt) == (b.run, b.attempt) and a.pid == b.pid:
                    continue
                row = by_row.get((a.key, a.run, a.attempt))
                life = lives.get(a.inst)
                ended = "none" if row is None or row.finished_ns is None else _ts(row.finished_ns / 1e9)
                v = Violation(
                    "overlap",
                    key,
                    f"two runs at once ({b.start - a.start:.3f}s apart, the first still running)",
                    (
                        str(a),
                        str(b),
                        f"the first in the store: {row and row.outcome} {row and row.error_type} ended {ended}; "
                        f"{a.inst} stopped {[(_ts(x), _ts(min(y, 4e9))) for x, y in life.stops] if life else []}",
                    ),
                )
                if _retried_while_stopped(life, a, row, lease):
                    documented.append(
                        Violation(
                            "overlap (documented)",
                            key,
                            "a run under way on an instance stopped past its lease, retried elsewhere",
                            (str(a), str(b)),
                        )
                    )
                else:
                    out.append(v)
    return out, documented


def _stale_attempts(attempts: list[Attempt]) -> list[Violation]:
    out = []
    by_run: dict[tuple[str, int], list[Attempt]] = defaultdict(list)
    for a in attempts:
        by_run[(a.key, a.run)].append(a)
    for (key, run), tries in by_run.items():
        tries.sort(key=lambda a: a.start)
        for i, a in enumerate(tries):
            later = [b for b in tries[:i] if b.attempt > a.attempt]
            if later:
                out.append(
                    Violation(
                        "stale attempt",
                        key,
                        f"run {run}: attempt {a.attempt} started after attempt "
                        f"{later[0].attempt} (the same run on two instances)",
                        (str(later[0]), str(a)),
                    )
                )
    return out


def _recorded(attempts: list[Attempt], rows: list[storesql.RunRow]) -> list[Violation]:
    stored = {(r.key, r.run, r.attempt): r for r in rows}
    ran = {(a.key, a.run, a.attempt) for a in attempts}
    out = [
        Violation(
            "unrecorded", a.key, f"run {a.run} attempt {a.attempt} ran but the store has no record of it", (str(a),)
        )
        for a in attempts
        if (a.key, a.run, a.attempt) not in stored
    ]
    out += [
        Violation("never ran", r.key, f"run {r.run} attempt {r.attempt} recorded ok but never ran", (repr(r),))
        for r in rows
        if r.outcome == "ok" and (r.key, r.run, r.attempt) not in ran
    ]
    return out


# -- slots ------------------------------------------------------------------------------


def _recorded_skips(rows: list[storesql.RunRow]) -> dict[str, set[int]] | None:
    """Slots the store says were skipped (with a reason), or None while it
    records runs only (before issue 22): then the checker excuses what a
    fault may legitimately skip."""
    skipped = [r for r in rows if r.outcome == "skipped"]
    if not skipped:
        return None
    out: dict[str, set[int]] = defaultdict(set)
    for r in skipped:
        out[r.key].add(r.scheduled_ns // 1000)
    return out


def _grid(spec: dict[str, Any], first_us: int, last_us: int) -> list[int]:
    if spec["kind"] == "rate":
        step = round(spec["period"] * 1e6)
        return list(range(first_us, last_us + 1, step))
    from cronsim import CronSim

    out = [first_us]
    it = CronSim(spec["expr"], datetime.fromtimestamp(first_us / 1e6, UTC))
    for when in it:
        us = round(when.timestamp() * 1e6)
        if us > last_us:
            break
        out.append(us)
    return out


def _excuses(h: Any, key: str, attempts: list[Attempt], rows: list[storesql.RunRow]) -> list[tuple[float, float]]:
    """Windows (wall seconds) in which today's store may legitimately lose a slot without a record."""
    spec = h.specs[key]
    period = spec.get("period", 2.0)
    out: list[tuple[float, float]] = []
    events = sorted((e for e in h.key_events if e.key == key), key=lambda e: e.at)
    for e in events:  # a pause: its slots are not made up ("on resume it continues at its next slot from now")
        if e.kind == "pause":
            resume = next((r.at for r in events if r.kind == "resume" and r.at > e.at), h.end)
            out.append((e.at - period, resume + SETTLE))
    for life in h.lives:  # a take-over: the crashed run is not caught up (it behaves as "skip")
        if life.how in ("kill", "kill_user", "died") and life.ended:
            out.append((life.ended - 2 * period, life.ended + h.lease + SETTLE + period))
        for a, b in life.stops:
            out.append((a - 2 * period, b + h.lease + SETTLE + period))
    crashed = [r for r in rows if r.key == key and r.outcome in ("crashed", "timeout")]
    crashed += [r for r in rows if r.key == key and r.outcome == "error" and r.error_type == "SchedulerDied"]
    for r in crashed:  # after a crash or a timeout: "skip" to the next slot from now
        out.append((r.scheduled_ns / 1e9, (r.finished_ns or r.scheduled_ns) / 1e9 + period + SETTLE))
    for a in attempts:
        if a.key == key and a.x == "crash" and a.slot_us is not None:
            out.append((a.slot_us / 1e6, (a.end or a.start) + period + SETTLE))
    return out


def _slots(
    h: Any, attempts: list[Attempt], rows: list[storesql.RunRow], stored: dict[str, set[int]]
) -> list[Violation]:
    """``stored``: the slots the store records skipped, with their reason
    (``storesql.skipped``): never lost. A version's grid is its first
    attempts' slots: a retry's slot is its retry's time, off the grid (the
    first run of a version may be a retry, its definition changed between
    attempts: a grid from it lost every slot of the real one outside the
    excuses - the fault campaign, seed 2807, replayed)."""
    skips = _recorded_skips(rows)
    out = []
    for key, spec in h.specs.items():
        if spec.get("misfire") != "catch_up" or spec["kind"] not in ("rate", "cron"):
            continue  # coalesce / skip / fixed delay: which slots run depends on timing, not checkable yet
        mine = [(a.version, a.slot_us, a.attempt) for a in attempts if a.key == key and a.slot_us is not None]
        held = {r.scheduled_ns // 1000 for r in rows if r.key == key}
        seen = sorted({slot for _v, slot, _a in mine} | held)
        tol = min(round(spec.get("period", 1.0) * 1e6) // 4, 50_000)
        excuses = [] if skips is not None else _excuses(h, key, attempts, rows)
        recorded = (skips.get(key, set()) if skips is not None else set()) | stored.get(key, set())
        versions: dict[int, list[int]] = defaultdict(list)
        for version, slot, attempt in mine:
            if attempt == 1:
                versions[version].append(slot)
        lost = []
        firsts = sorted(min(slots) for slots in versions.values())
        for v, slots in sorted(versions.items()):
            # a version's grid ends where a newer definition's begins (an old one that runs on past
            # that is reported as "old definition", not as lost slots of its own grid)
            end = min([max(slots), *(f for f in firsts if f > min(slots))])
            for slot in _grid(spec, min(slots), end):
                if any(abs(slot - s) <= tol for s in seen) or any(abs(slot - s) <= tol for s in recorded):
                    continue
                t = slot / 1e6
                if any(a <= t <= b for a, b in excuses):
                    continue
                lost.append((v, slot))
        if lost:
            near = [f.line() for f in h.faults if f.at is not None and any(abs(f.at - s / 1e6) < 3 for _, s in lost)]
            out.append(
                Violation(
                    "slot lost",
                    key,
                    f"{len(lost)} slot(s) never ran and are not in the store: "
                    + ", ".join(f"v{v} {_ts(s / 1e6)}" for v, s in lost[:8]),
                    tuple(f"fault near: {x}" for x in near[:5]),
                )
            )
    return out


def _two_ends(h: Any, attempts: list[Attempt], stored: dict[str, set[int]]) -> list[Violation]:
    """``stored``: the slots the store records skipped (``storesql.skipped``)."""
    out = []
    for key, spec in h.specs.items():
        skipped = sorted(stored.get(key, ()))
        if spec["kind"] not in ("rate", "cron") or not skipped:
            continue
        tol = min(round(spec.get("period", 1.0) * 1e6) // 4, 50_000)
        both = []
        for a in attempts:
            if a.key == key and a.attempt == 1 and a.slot_us is not None:
                i = bisect_left(skipped, a.slot_us - tol)
                if i < len(skipped) and skipped[i] <= a.slot_us + tol:
                    both.append(a)
        if both:
            what = f"{len(both)} slot(s) ran and are recorded skipped too"
            out.append(Violation("two ends", key, what, tuple(map(str, both[:4]))))
    return out


# -- liveness -----------------------------------------------------------------------------


#: Faults that keep an instance's commits from the store for a while.
STORE_FAULTS = ("sqlite_lock", "pg_stall", "pg_drop", "pg_lose_commit")


def _killed_before_stored(h: Any, key: str, lives: dict[str, Any], tasks: dict[str, storesql.TaskRow]) -> bool:
    """The README's documented limit: a keyed add is the store's after the
    dispatcher's next commit; a scheduler killed in between loses it. True
    for a one-shot the store never had whose instance was killed after the
    add's answer, while the store refused commits (a store fault from 3 s
    before the answer to the kill) or within half a second of it."""
    if key in tasks:
        return False
    add = next((e for e in h.key_events if e.kind == "add" and e.key == key), None)
    return add is not None and _killed_before_commit(h, lives.get(add.via), add.at)


def _resume_lost(h: Any, key: str, lives: dict[str, Any], tasks: dict[str, storesql.TaskRow]) -> bool:
    """The README's documented limit again, for a resume: the store still
    has ``key`` paused, and its last pause or resume was a resume through an
    instance killed before its next commit (seed 4820: asked while another
    process had the SQLite store locked, the instance killed 1.4 s later)."""
    row = tasks.get(key)
    last = max(
        (e for e in h.key_events if e.key == key and e.kind in ("pause", "resume")), key=lambda e: e.at, default=None
    )
    return (
        row is not None
        and row.paused
        and last is not None
        and last.kind == "resume"
        and _killed_before_commit(h, lives.get(last.via), last.at)
    )


def _killed_before_commit(h: Any, life: Any, at: float) -> bool:
    """Was ``life`` (an instance's) killed before its next commit after
    ``at`` could store what it did then: within half a second of it, or
    while the store refused commits (a store fault from 3 s before ``at``
    to the kill)?"""
    if life is None or life.how not in ("kill", "kill_user") or life.ended is None or life.ended < at:
        return False
    if life.ended - at < 0.5:
        return True
    return any(f.kind in STORE_FAULTS and f.at is not None and at - 3 <= f.at <= life.ended for f in h.faults)


def _end_lost(h: Any, a: Attempt, rows: dict[tuple[str, int, int], storesql.RunRow], lives: dict[str, Any]) -> bool:
    """README: runs in flight when the scheduler died are recorded crashed
    (and retried if the task's Retry covers crashed). True for an attempt
    that ended in its log but that the store has crashed: its instance was
    killed before the commit of its end."""
    row = rows.get((a.key, a.run, a.attempt))
    if row is None or row.outcome != "crashed" or a.end is None:
        return False
    return _killed_before_commit(h, lives.get(a.inst), a.end)


def _stalled(
    h: Any,
    attempts: list[Attempt],
    tasks: dict[str, storesql.TaskRow],
    lives: dict[str, Any],
    runs: list[storesql.RunRow],
) -> tuple[list[Violation], list[Violation]]:
    out, documented = [], []
    by_row = {(r.key, r.run, r.attempt): r for r in runs}
    window = (h.calm_start + h.lease + 1.5, h.calm_end)
    for key in sorted(h.live_at_end):
        ran = [a for a in attempts if a.key == key and window[0] <= a.start <= window[1]]
        if not ran:
            last = max((a.start for a in attempts if a.key == key), default=None)
            done = [f"{e.kind} via {e.via or 'the command'} at {_ts(e.at)}" for e in h.key_events if e.key == key]
            v = Violation(
                "stalled",
                key,
                f"no run in the calm phase {_ts(window[0])}..{_ts(window[1])} "
                f"(last start {_ts(last) if last else 'never'})",
                (f"store: {tasks.get(key)}", *done[-3:]),
            )
            if _resume_lost(h, key, lives, tasks):
                documented.append(replace(v, kind="stalled (documented)", what="its resume was lost with a kill"))
            else:
                out.append(v)
    for key, added in sorted(h.oneshots.items()):
        cancelled = any(e.kind == "cancel" and e.key == key for e in h.key_events)
        if not cancelled and not any(a.key == key for a in attempts):
            v = Violation("stalled", key, f"a one-shot added at {_ts(added)} never ran", (f"store: {tasks.get(key)}",))
            if _killed_before_stored(h, key, lives, tasks):
                documented.append(
                    Violation("stalled (documented)", key, "killed before the add was stored", v.evidence)
                )
            else:
                out.append(v)
        ok = [a for a in attempts if a.key == key and a.x == "ok"]
        if len(ok) > 1:
            v = Violation("twice", key, "a one-shot ran to completion more than once", tuple(map(str, ok)))
            if all(_end_lost(h, a, by_row, lives) for a in ok[:-1]):
                documented.append(replace(v, kind="twice (documented)", what="its end was not stored before a kill"))
            elif all(
                _end_lost(h, a, by_row, lives)
                or _retried_while_stopped(lives.get(a.inst), a, by_row.get((a.key, a.run, a.attempt)), h.lease)
                for a in ok[:-1]
            ):
                documented.append(
                    replace(v, kind="twice (documented)", what="retried while its instance was stopped past its lease")
                )
            else:
                out.append(v)
        if key in tasks:
            out.append(
                Violation("stalled", key, "a one-shot is still in the store's live set at the end", (str(tasks[key]),))
            )
    return out, documented


#: Two deploys of one key this close (their acknowledgements, s) are
#: concurrent: either may be stored last (each is the store's at its
#: instance's next commit, which a store fault or a stop delays).
CONCURRENT_DEPLOYS = 5.0


def _overwritten(
    h: Any, e: Any, stored: dict[str, tuple[int, float]], written: dict[tuple[str, int], list[float]]
) -> tuple[int, float] | None:
    """The definition (version, written) stored over ``e``'s, if another
    deploy acknowledged before ``e`` committed after it: the README's
    "the store has it after the dispatcher's next commit" - the last commit
    wins, and its runs are the stored definition's, not an older one's.
    From the writes the store logged (``written``) if it did - the first
    write of another version after ``e``'s (a later deploy may have
    replaced both by the end: the fault campaign, seed 3025, replayed: C.6,
    starting with v3, committed it 3 ms after B.3's replace with v4, and a
    deploy of v5 came 10 s later) - else from the definition stored at the
    end (``stored``)."""

    def concurrent(version: int) -> bool:
        return _concurrent(h, e, version)

    mine = next((t for t in written.get((e.key, e.version), ()) if t >= e.at - SAME), None)
    if mine is not None:
        later = sorted(
            (t, v) for (k, v), times in written.items() if k == e.key and v != e.version for t in times if t > mine
        )
        first = later[0] if later else None
        return (first[1], first[0]) if first is not None and concurrent(first[1]) else None
    final = stored.get(e.key)
    if final is None or final[0] == e.version or final[1] <= e.at:
        return None
    return final if concurrent(final[0]) else None


def _concurrent(h: Any, e: Any, version: int) -> bool:
    """Was ``version`` of ``e``'s key deployed shortly before ``e`` was acknowledged?"""
    deploys = ("add", "readd", "replace", "redefine")
    return any(
        d.key == e.key and d.kind in deploys and d.version == version and 0 <= e.at - d.at <= CONCURRENT_DEPLOYS
        for d in h.key_events
    )


def _recreated(h: Any, e: Any, gone: float, written: dict[tuple[str, int], list[float]]) -> tuple[int, float] | None:
    """(version, written) of a deploy acknowledged shortly before the cancel
    ``e`` whose definition the store wrote after the cancel deleted the key
    (at ``gone``): the last write wins - the key lives again with it (the
    fault campaign, seed 3424, replayed: C.7, starting with r1 v4, stored it
    4 ms after A.6's cancel deleted r1, and ran it from then on)."""
    later = sorted((t, v) for (k, v), times in written.items() if k == e.key for t in times if t > gone)
    if not later:
        return None
    t, v = later[0]
    return (v, t) if _concurrent(h, e, v) else None


def _after_events(
    h: Any,
    attempts: list[Attempt],
    stored: dict[str, tuple[int, float]],
    lives: dict[str, Any],
    written: dict[tuple[str, int], list[float]] | None = None,
    deleted: dict[str, list[float]] | None = None,
) -> tuple[list[Violation], list[Violation]]:
    """No start after an acknowledged pause / cancel / newer definition
    (violations, documented limits seen); ``stored``: each key's stored
    definition at the end (``storesql.definitions``). A definition whose
    instance was killed before its next commit is lost with it (the
    README's documented limit): stored only when a later deploy of it
    wrote it, if one did. ``written``: when each (key, version) was written
    (``storesql.definitions_written``): a definition is the store's from
    its instance's next commit on, which a store fault delays (seed 2503: a
    lost commit answer and a stopped instance holding locks, 3.5 s); the
    other instances follow it within the re-read interval of that commit,
    the deploying instance at once. ``deleted``: when each key's row was
    deleted (``storesql.deleted``): a cancel likewise, from its deletion -
    until a deploy acknowledged just before it is stored after it
    (``_recreated``)."""
    written, deleted = written or {}, deleted or {}
    out, documented = [], []
    events = sorted(h.key_events, key=lambda e: e.at)
    for e in events:
        if e.kind not in ("pause", "cancel", "replace", "redefine", "readd"):
            continue
        if e.kind in ("replace", "redefine", "readd") and _killed_before_commit(h, lives.get(e.via), e.at):
            final = stored.get(e.key)
            rewritten = final[1] if final is not None and final[0] == e.version and final[1] > e.at else None
            documented.append(
                Violation(
                    "killed before stored (documented)",
                    e.key,
                    f"v{e.version} ({e.kind} by {e.via} at {_ts(e.at)}) was lost with its instance"
                    + ("" if rewritten is None else f"; stored by a later deploy at {_ts(rewritten)}"),
                )
            )
            if rewritten is None:
                continue
            e = replace(e, at=rewritten, via="")  # stored then: older definitions may run until the re-read after it
        others_at = e.at  # (when the other instances were told: a deploy, once stored)
        if e.kind in ("replace", "redefine", "readd"):
            first = next((t for t in written.get((e.key, e.version), ()) if t >= e.at - SAME), None)
            others_at = max(e.at, first) if first is not None else e.at
        elif e.kind == "cancel":
            gone = next((t for t in deleted.get(e.key, ()) if t >= e.at - SAME), None)
            others_at = max(e.at, gone) if gone is not None else e.at
            again = _recreated(h, e, e.at if gone is None else gone, written)
        until = h.end
        if e.kind in ("pause", "cancel"):
            back = "resume" if e.kind == "pause" else "readd"
            # (a run may start once the resume is asked: the answer can come after it, e.g. from an
            # instance whose store was locked meanwhile)
            until = next((b.asked or b.at for b in events if b.key == e.key and b.kind == back and b.at > e.at), h.end)
        if e.kind == "cancel":
            if again is not None and again[1] < until:
                until = again[1]
                documented.append(
                    Violation(
                        "last deploy wins (documented)",
                        e.key,
                        f"v{again[0]}, deployed just before the cancel ({e.via or 'the procsched command'}, "
                        f"{_ts(e.at)}), was stored after it (at {_ts(again[1])}): the key lives again with it",
                    )
                )

        def late(a: Attempt, e: Any = e, others_at: float = others_at) -> bool:
            return a.start > (e.at + SAME if a.inst == e.via else others_at + SETTLE)

        if e.kind in ("pause", "cancel"):
            bad = [a for a in attempts if a.key == e.key and late(a) and a.start < until]
            by = e.via or "the procsched command"  # (written to the store: every instance follows it)
            what = f"{len(bad)} run(s) started after {e.kind} was acknowledged by {by} at {_ts(e.at)}" + (
                f" (stored at {_ts(others_at)})" if others_at != e.at else ""
            )
            kind = "paused" if e.kind == "pause" else "cancelled"
        else:
            bad = [a for a in attempts if a.key == e.key and a.version < e.version and late(a)]
            what = (
                f"{len(bad)} run(s) of an older definition started after v{e.version} was stored "
                f"({e.kind} by {e.via} at {_ts(e.at)}, written at {_ts(others_at)})"
            )
            kind = "old definition"
            over = _overwritten(h, e, stored, written)
            if over is not None:  # a concurrent deploy's commit came last: its runs are the stored task's
                last = [a for a in bad if a.version == over[0] and a.start >= over[1]]
                bad = [a for a in bad if a not in last]
                if last:
                    documented.append(
                        Violation(
                            "last deploy wins (documented)",
                            e.key,
                            f"v{over[0]}, acknowledged before v{e.version}, was stored after it "
                            f"(at {_ts(over[1])}): {len(last)} run(s) of it after that",
                            tuple(map(str, last[:4])),
                        )
                    )
        if bad:
            out.append(Violation(kind, e.key, what, tuple(map(str, bad[:4]))))
    return out, documented


def _health(h: Any) -> list[Violation]:
    out = (
        [Violation("processes", None, f"{len(h.left_processes)} process(es) outlived the end", tuple(h.left_processes))]
        if h.left_processes
        else []
    )
    out += [Violation("unresponsive", None, x) for x in h.unresponsive]
    for life in h.lives:
        if "Traceback" in life.stderr:
            # The last traceback's innermost frames of procsched and its last lines (where it escaped).
            last = life.stderr[life.stderr.rindex("Traceback") :]
            lines = [x for x in last.splitlines() if x.strip()]
            frames = [x.strip() for x in lines if x.strip().startswith("File ") and "procsched" in x]
            out.append(
                Violation(
                    "traceback", None, f"{life.label} printed a traceback ({life.how})", tuple(frames[-4:] + lines[-3:])
                )
            )
        if life.how == "died":
            out.append(
                Violation(
                    "died",
                    None,
                    f"{life.label} ended by itself (exit {life.exit_code})",
                    tuple(life.stderr.strip().splitlines()[-4:]),
                )
            )
        elif life.how == "quit" and life.exit_code not in (0, None):
            out.append(
                Violation(
                    "died",
                    None,
                    f"{life.label} exited {life.exit_code} after a clean shutdown",
                    tuple(life.stderr.strip().splitlines()[-4:]),
                )
            )
    return out
