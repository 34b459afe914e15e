"""The numbers behind every view: per-job rows fed by scheduler events, and
the text helpers the views share (durations, schedules, plain tables).

    listener thread ── event ──▶ Board.on_event ──▶ JobRow (counts, lateness, skipped slots)
                                               ├──▶ recent runs' output (Board.outputs)
                                               └──▶ skipped slots, as they happen (Board.recent)
    main thread ── Board.job_table() / worker_table() ──▶ live view, plain table

The board owns these numbers; both threads touch them only under its lock.
"""

from __future__ import annotations

import collections
import math
import textwrap
import threading
import time
from datetime import datetime
from typing import Any, NamedTuple

from .._core import Priority
from .._events import RUN_END, RUN_MISSED, RUN_SKIPPED, WORKER_EXITED
from .._handle import TaskHandle
from .._jobs import Job
from . import _times

#: Lateness samples kept per job for the p99 (the most recent ones).
LATENESS_WINDOW = 10_000
OUTCOME_COLUMNS = ("ok", "error", "crashed", "timeout")
#: Outcomes that count as a failed run (for --fail-on-error).
FAILED = ("error", "crashed", "timeout")
STRAY = "printed by a worker outside any captured run"


class JobRow:
    """What the board knows about one job (or one name of follow-up tasks).

    Runs are counted one way everywhere (the tables, the summaries, the
    demo's verdict, the JSON summary): a run counts once, by the outcome of
    its last attempt, so ``runs`` is the sum of the outcome counts; an
    attempt that was tried again counts in ``retries``. A retried run moves
    from its failed attempt's outcome to its next attempt's when that ends.
    """

    def __init__(self, name: str, schedule: str, job: Job | None = None, handle: TaskHandle | None = None) -> None:
        self.name = name
        self.schedule = schedule
        self.job = job
        self.handle = handle
        self.first_due: float | None = None
        self.counts = dict.fromkeys(RUN_END, 0)  # runs, by the outcome of their last attempt
        self.retries = 0  # attempts beyond a run's first
        self.missed = 0
        self.skipped = collections.Counter[str]()  # skipped slots, by reason (run_skipped events)
        self.last_duration: float | None = None
        self.durations = 0.0  # of every attempt
        self.lateness: collections.deque[float] = collections.deque(maxlen=LATENESS_WINDOW)
        self._last: dict[int, tuple[int, str]] = {}  # task id -> (run, outcome) of its last ended attempt

    @property
    def runs(self) -> int:
        return sum(self.counts.values())

    @property
    def failed(self) -> int:
        """Runs whose last attempt failed."""
        return sum(self.counts[o] for o in FAILED)

    def ended(self, task_id: int, run: int, attempt: int, outcome: str) -> None:
        """An attempt of a run ended (see the class docstring)."""
        previous = self._last.get(task_id)
        if attempt > 1:
            self.retries += 1
            if previous is not None and previous[0] == run:
                self.counts[previous[1]] -= 1  # the run is counted by this attempt now
        self.counts[outcome] += 1
        self._last[task_id] = (run, outcome)

    def p99(self) -> float | None:
        if not self.lateness:
            return None
        ordered = sorted(self.lateness)
        return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]

    def expected(self, until: float) -> tuple[int, bool] | None:
        """Runs the schedule asked for up to ``until``: (count, exact?)."""
        if self.job is None or self.first_due is None:
            return None
        if until < self.first_due:
            return 0, True
        if self.job.kind == "rate":
            return int((until - self.first_due) // self.job.period) + 1, True  # type: ignore[operator]
        if self.job.kind == "once":
            return 1, True
        if self.job.kind == "cron":
            return None  # a calendar: no simple count
        attempts = self.runs + self.retries
        mean = self.durations / attempts if attempts else 0.0  # fixed delay: an estimate
        return int((until - self.first_due) // (self.job.period + mean)) + 1, False  # type: ignore[operator]

    def next_run(self, now: float, off: float) -> str:
        handle = self.handle
        if handle is None:
            return ""
        state = handle.state.value
        if state != "pending":
            return state
        due = handle.next_run
        return "-" if due is None else _times.until_text(due, now, off)


class RunOutput(NamedTuple):
    """A finished run's captured output (or failure detail), for the views."""

    title: str  # "printer run 3 ok", "segfaulter run 3 crashed (SIGSEGV)"
    lines: list[str]
    bad: bool  # the run did not end "ok"


class SkipLine(NamedTuple):
    """The newest "recent" line about skipped slots (see ``Board._recent_skip``)."""

    job: str
    reason: str
    times: int
    line: str


class Board:
    """Per-job numbers, fed by the scheduler's events (listener thread) and
    read by the display (main thread) under one lock.

    A job's row exists from the start; its handle is attached once the job
    is started. With ``keyed`` (a store: each job is the keyed task named by
    its name) an event of a task the board does not know yet goes to the
    row of that name: a stored task the scheduler resumed (and ran) before
    the job was started again, or the one a changed definition replaced.
    """

    def __init__(self, *, tracebacks: bool = False, keyed: bool = False) -> None:
        self.lock = threading.Lock()
        self.tracebacks = tracebacks
        self.keyed = keyed
        self.rows: list[JobRow] = []
        self.by_task: dict[int, JobRow] = {}
        self.by_name: dict[str, JobRow] = {}
        self.workers: list[dict[str, Any]] = []
        #: The worker that ran the session's warm-up run (a run of no job: not counted in its runs).
        self.warm_up_worker: int | str | None = None
        self.worker_exits = collections.Counter[str]()
        self.recent: collections.deque[str] = collections.deque(maxlen=5)
        self.outputs: collections.deque[RunOutput] = collections.deque(maxlen=8)
        self.last_failure: RunOutput | None = None  # kept in view however chatty the others are
        self.started = time.monotonic()
        self.store_status = ""  # one line about this instance on its store (see _session.StoreWatch)
        self._last_skip: SkipLine | None = None  # the newest skip line in "recent"

    def add_job(self, job: Job) -> JobRow:
        """A row for ``job`` (before it is started: see ``attach``)."""
        row = JobRow(job.name, schedule_text(job), job)
        with self.lock:
            self.rows.append(row)
            self.by_name[job.name] = row
        return row

    def attach(self, job: Job, handle: TaskHandle, first_due: float) -> None:
        """``job`` was started: its handle, and when its first run is due."""
        with self.lock:
            row = self.by_name[job.name]
            row.handle = handle
            row.first_due = first_due
            self.by_task[handle.id] = row

    def add(self, job: Job, handle: TaskHandle, first_due: float) -> None:
        """``add_job`` and ``attach`` at once."""
        self.add_job(job)
        self.attach(job, handle, first_due)

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event["event"]
        with self.lock:
            if kind == WORKER_EXITED:
                self.worker_exits["crashed" if event["crashed"] else "stopped"] += 1
                for worker in self.workers:  # the last stats() may be older than this
                    if worker["pid"] == event["worker"]:
                        worker.update(state="crashed" if event["crashed"] else "exited", task=None)
                return
            if event["task_id"] is None:
                return
            row = self._row(event)
            if kind == RUN_MISSED:
                row.missed += event["missed"]
            elif kind == RUN_SKIPPED:
                row.skipped[event["reason"]] += 1
                self._recent_skip(row.name, event)
            elif kind in RUN_END.values():
                row.ended(event["task_id"], event["run"], event.get("attempt", 1), event["outcome"])
                row.last_duration = event["duration"]
                row.durations += event["duration"]
                row.lateness.append(event["lateness"])
                if event["outcome"] == "error":  # crashes, timeouts and misses are logged by the engine
                    retried = event.get("attempt", 1) > 1 or (row.job is not None and row.job.options.get("retry"))
                    which = f"run {event['run']}" + (f" attempt {event['attempt']}" if retried else "")
                    self.recent.append(f"{row.name} {which} failed: {shorten(event['error'] or '?', 300)}")
                shown = run_output(event, self.tracebacks)
                if shown:
                    entry = RunOutput(
                        f"{row.name} run {event['run']} {outcome_text(event)}", shown, event["outcome"] != "ok"
                    )
                    self.outputs.append(entry)
                    if entry.bad:
                        self.last_failure = entry

    def _recent_skip(self, name: str, event: dict[str, Any]) -> None:
        """A skipped slot in the "recent" lines; skips of one job for one
        reason in a row stay one line (counted), so they never push the rest out."""
        slot, reason = slot_text(event), event["reason"]
        last = self._last_skip
        same = last is not None and (last.job, last.reason) == (name, reason)
        if last is not None and same and self.recent and self.recent[-1] == last.line:
            count = last.times + 1
            self.recent[-1] = f"{name}: {count} slots skipped ({reason}), the last {slot}"
        else:
            count = 1
            self.recent.append(f"{name}: slot {slot} skipped ({reason})")
        self._last_skip = SkipLine(name, reason, count, self.recent[-1])

    def recent_outputs(self) -> list[RunOutput]:
        """The latest runs' output, oldest first, the latest failure included."""
        with self.lock:
            outputs = list(self.outputs)
            if self.last_failure is not None and all(o is not self.last_failure for o in outputs):
                outputs.insert(0, self.last_failure)
        return outputs

    def stray(self, line: str) -> None:
        """A line a worker wrote outside any captured run (see _lines.guard_streams)."""
        with self.lock:
            last = self.outputs[-1] if self.outputs else None
            if last is None or last.title != STRAY:
                last = RunOutput(STRAY, [], False)
                self.outputs.append(last)
            last.lines.append(line)
            del last.lines[:-50]

    def stopped(self) -> None:
        """The scheduler has shut down: no worker is busy any more."""
        with self.lock:
            for worker in self.workers:
                if worker["state"] not in ("crashed", "exited"):
                    worker.update(state="stopped", task=None)

    def _row(self, event: dict[str, Any]) -> JobRow:
        row = self.by_task.get(event["task_id"])
        if row is None:  # see the class docstring; else a task scheduled from inside a task: one row per name
            name = event["name"] or f"task {event['task_id']}"
            row = self.by_name.get(name)
            if row is not None and row.job is not None and not self.keyed and row.handle is not None:
                row = self.by_name.get(f"{name} (from a task)")
                name = f"{name} (from a task)"
            if row is None:
                row = self.by_name[name] = JobRow(name, "stored" if self.keyed else "from a task")
                self.rows.append(row)
            self.by_task[event["task_id"]] = row
        return row

    def outcomes(self) -> tuple[str, ...]:
        """The outcome columns to show: ``cancelled`` too once a run ended so."""
        with self.lock:
            cancelled = any(r.counts["cancelled"] for r in self.rows)
        return (*OUTCOME_COLUMNS, "cancelled") if cancelled else OUTCOME_COLUMNS

    def any_skipped(self) -> bool:
        """Whether to show the "skipped" column: once a slot was skipped."""
        with self.lock:
            return any(r.skipped for r in self.rows)

    def job_cells(self, now: float) -> list[dict[str, str]]:
        """Per job, every column's text (the views choose the columns: see ``layouts``)."""
        off = _times.offset()
        outcomes = self.outcomes()
        merged = merged_header(outcomes)
        with self.lock:
            return [
                {
                    "job": r.name,
                    "schedule": r.schedule,
                    "next run": r.next_run(now, off),
                    "runs": str(r.runs),
                    **{o: str(r.counts[o]) for o in outcomes},
                    merged: "/".join(str(r.counts[o]) for o in outcomes),
                    "retries": str(r.retries),
                    "skipped": str(r.skipped.total()),
                    "last duration": duration(r.last_duration),
                    "lateness p99": duration(r.p99()),
                }
                for r in self.rows
            ]

    def layouts(self) -> list[list[str]]:
        """Job-table columns, most informative first: a view shows the first that fits
        (the outcome counts merge into one column, then the timing columns go;
        "skipped", once a slot was skipped, stays)."""
        outcomes = self.outcomes()
        merged = merged_header(outcomes)
        base = ["job", "schedule", "next run"]
        skipped = ["skipped"] if self.any_skipped() else []
        return [
            [*base, "runs", *outcomes, "retries", *skipped, "last duration", "lateness p99"],
            [*base, "runs", merged, "retries", *skipped, "last duration", "lateness p99"],
            [*base, "runs", merged, *skipped, "last duration"],
            [*base, "runs", merged, *skipped],
            [*base, merged, *skipped],
        ]

    def job_table(self, now: float, width: int | None = None) -> tuple[list[str], list[list[str]]]:
        """The job table for plain text: every column, or the widest layout within ``width``."""
        cells = self.job_cells(now)
        layouts = self.layouts()
        headers = layouts[-1]
        for layout in layouts:
            if width is None or table_width(layout, [[c[h] for h in layout] for c in cells]) <= width:
                headers = layout
                break
        return headers, [[c[h] for h in headers] for c in cells]

    def worker_table(self) -> tuple[list[str], list[list[str]]]:
        headers = ["worker", "pid", "state", "RSS", "runs", "restarts"]
        with self.lock:
            rows = [
                [
                    str(w["slot"]),
                    "-" if w["pid"] is None else str(w["pid"]),
                    str(w["state"]),
                    "-" if w["rss"] is None else f"{w['rss'] / 2**20:.1f} MiB",
                    str(w["runs"] - (w["pid"] == self.warm_up_worker)),
                    str(w["restarts"]),
                ]
                for w in self.workers
            ]
        return headers, rows

    def failing_jobs(self) -> tuple[list[str], list[str]]:
        """(jobs every run of which failed, jobs with some failed runs)."""
        with self.lock:
            every = [r.name for r in self.rows if r.failed and r.counts["ok"] == 0]
            some = [r.name for r in self.rows if r.failed and r.counts["ok"]]
        return every, some


def merged_header(outcomes: tuple[str, ...]) -> str:
    """``ok/err/crash/t.o.`` (with ``/canc.`` when cancelled runs are shown)."""
    short = {"ok": "ok", "error": "err", "crashed": "crash", "timeout": "t.o.", "cancelled": "canc."}
    return "/".join(short[o] for o in outcomes)


def run_output(event: dict[str, Any], tracebacks: bool) -> list[str]:
    """The lines worth showing under a finished run: what it printed
    (``output``, from ``Scheduler(capture_output=True)``) and, with
    ``tracebacks``, its error's traceback."""
    lines = (event.get("output") or "").rstrip("\n").splitlines()
    if tracebacks and event.get("traceback"):
        lines += event["traceback"].rstrip("\n").splitlines()
    return lines


def slot_text(event: dict[str, Any]) -> str:
    """A skipped slot's time (its ``scheduled_at``, ISO UTC) in local wall time: ``12:00:01.200``."""
    at = event.get("scheduled_at")
    if at is None:
        return "-"
    when = datetime.fromisoformat(at).astimezone()
    text = _times.clock_text(when)
    return text if when.date() == datetime.now().astimezone().date() else when.strftime("%b %d ") + text


def outcome_text(event: dict[str, Any]) -> str:
    text = str(event["outcome"])
    if event["outcome"] != "ok" and event.get("error"):
        text += f" ({shorten(event['error'], 60)})"
    return text


def schedule_text(job: Job) -> str:
    text = job.describe()
    extras = []
    priority = int(job.options.get("priority", 0))
    if priority:
        named = {int(p): p.name for p in Priority}
        extras.append(f"priority {named.get(priority, priority)}")
    if job.options.get("timeout") is not None:
        extras.append(f"timeout {_plain_seconds(job.options['timeout'])}")
    return ", ".join([text, *extras])


def _plain_seconds(value: Any) -> str:
    seconds = value.total_seconds() if hasattr(value, "total_seconds") else float(value)
    return f"{seconds:g}s"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def wrap(text: str, width: int | None) -> list[str]:
    """``text`` as lines of at most ``width`` (None: one line), broken between words."""
    return [text] if width is None else textwrap.wrap(text, width, subsequent_indent="  ") or [""]


def shorten(text: str, width: int) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 3] + "..."


def pool_text(workers: int, runner: str) -> str:
    """``"1 worker process"``, ``"4 worker threads"``."""
    kind = {"processes": "process", "threads": "thread"}.get(runner, f"{runner} worker")
    noun = f"worker {kind}" if runner in ("processes", "threads") else kind
    plural = noun + ("es" if noun.endswith("s") else "s")
    return f"{workers} {noun if workers == 1 else plural}"


def table_width(headers: list[str], rows: list[list[str]], indent: str = "  ") -> int:
    """How wide ``text_table`` draws these cells."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    return len(indent) + sum(widths) + 2 * (len(widths) - 1)


def text_table(headers: list[str], rows: list[list[str]], indent: str = "  ") -> str:
    """A plain aligned table: text left, numbers right."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    numeric = [bool(rows) and all(_numeric(r[i]) for r in rows) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        padded = (c.rjust(w) if n else c.ljust(w) for c, w, n in zip(cells, widths, numeric, strict=True))
        return (indent + "  ".join(padded)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _numeric(cell: str) -> bool:
    return cell == "-" or cell[:1].isdigit()
