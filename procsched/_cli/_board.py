"""The numbers behind every view: per-job rows fed by scheduler events, and
the text helpers the views share (durations, schedules, plain tables).

    listener thread ── event ──▶ Board.on_event ──▶ JobRow (counts, lateness)
    main thread ── Board.job_table() / worker_table() ──▶ live view, plain table
"""

from __future__ import annotations

import collections
import math
import threading
import time
from typing import Any

from .._core import Priority
from .._events import RUN_END, RUN_MISSED, WORKER_EXITED
from .._handle import TaskHandle
from .._jobs import Job

#: Lateness samples kept per job for the p99 (the most recent ones).
LATENESS_WINDOW = 10_000
OUTCOME_COLUMNS = ("ok", "error", "crashed", "timeout")


class JobRow:
    """What the board knows about one job (or one name of follow-up tasks)."""

    def __init__(self, name: str, schedule: str, job: Job | None = None, handle: TaskHandle | None = None) -> None:
        self.name = name
        self.schedule = schedule
        self.job = job
        self.handle = handle
        self.first_due: float | None = None
        self.counts = dict.fromkeys(RUN_END, 0)
        self.missed = 0
        self.last_duration: float | None = None
        self.durations = 0.0
        self.lateness: collections.deque[float] = collections.deque(maxlen=LATENESS_WINDOW)

    @property
    def runs(self) -> int:
        return sum(self.counts.values())

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
        mean = self.durations / self.runs if self.runs else 0.0  # fixed delay: an estimate
        return int((until - self.first_due) // (self.job.period + mean)) + 1, False  # type: ignore[operator]

    def next_run(self, now: float) -> str:
        handle = self.handle
        if handle is None:
            return ""
        state = handle.state.value
        if state == "running":
            return "running"
        if state != "pending":
            return state
        due = handle.next_run
        if due is None:
            return "-"
        return "due" if due <= now else f"in {_duration(due - now)}"


class Board:
    """Per-job numbers, fed by the scheduler's events (listener thread) and
    read by the display (main thread) under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[JobRow] = []
        self.by_task: dict[int, JobRow] = {}
        self.by_name: dict[str, JobRow] = {}
        self.workers: list[dict[str, Any]] = []
        self.worker_exits = collections.Counter[str]()
        self.recent: collections.deque[str] = collections.deque(maxlen=5)
        self.started = time.monotonic()

    def add(self, job: Job, handle: TaskHandle, first_due: float) -> None:
        row = JobRow(job.name, _schedule_text(job), job, handle)
        row.first_due = first_due
        with self.lock:
            self.rows.append(row)
            self.by_task[handle.id] = row

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event["event"]
        with self.lock:
            if kind == WORKER_EXITED:
                self.worker_exits["crashed" if event["crashed"] else "stopped"] += 1
                return
            if event["task_id"] is None:
                return
            row = self._row(event)
            if kind == RUN_MISSED:
                row.missed += event["missed"]
            elif kind in RUN_END.values():
                row.counts[event["outcome"]] += 1
                row.last_duration = event["duration"]
                row.durations += event["duration"]
                row.lateness.append(event["lateness"])
                if event["outcome"] == "error":  # crashes, timeouts and misses are logged by the engine
                    self.recent.append(f"{row.name} run {event['run']} failed: {_shorten(event['error'] or '?', 90)}")

    def _row(self, event: dict[str, Any]) -> JobRow:
        row = self.by_task.get(event["task_id"])
        if row is None:  # a task scheduled from inside a task: one row per name
            name = event["name"] or f"task {event['task_id']}"
            row = self.by_name.get(name)
            if row is None:
                row = self.by_name[name] = JobRow(name, "from a task")
                self.rows.append(row)
            self.by_task[event["task_id"]] = row
        return row

    def job_table(self, now: float) -> tuple[list[str], list[list[str]]]:
        headers = ["job", "schedule", "next run", "runs", *OUTCOME_COLUMNS, "last duration", "lateness p99"]
        with self.lock:
            rows = [
                [r.name, r.schedule, r.next_run(now), str(r.runs), *(str(r.counts[o]) for o in OUTCOME_COLUMNS),
                 _duration(r.last_duration), _duration(r.p99())]
                for r in self.rows
            ]  # fmt: skip
        return headers, rows

    def worker_table(self) -> tuple[list[str], list[list[str]]]:
        headers = ["worker", "pid", "state", "RSS", "runs", "restarts"]
        rows = [
            [str(w["slot"]), "-" if w["pid"] is None else str(w["pid"]), str(w["state"]),
             "-" if w["rss"] is None else f"{w['rss'] / 2**20:.1f} MiB", str(w["runs"]), str(w["restarts"])]
            for w in self.workers
        ]  # fmt: skip
        return headers, rows


def _schedule_text(job: Job) -> str:
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


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def _shorten(text: str, width: int) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 3] + "..."


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

