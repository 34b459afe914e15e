"""The console over the running program (``procsched run jobs.py --web PORT``).

    Scheduler's listener thread ── events ──▶ ProgramSource._on_event ──▶ last runs per task (with error,
                                                                         traceback, output), change mark
    console thread ── jobs() / job() / instances() ──▶ Scheduler.jobs(), handles, stats()
                   ── pause / resume / cancel / run_now / backfill ──▶ the task's handle

Only the Scheduler's public API: handles (state, runs, next_run_at, pause,
resume, cancel), ``jobs()``, ``stats()`` and listener events. The events
bring what a handle does not keep (a run's error, traceback and output, the
runs in flight, the slots the misfire policy dropped).
"""

from __future__ import annotations

import collections
import os
import socket
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from .._errors import SchedulerError
from .._events import RUN_END, RUN_SKIPPED, RUN_STARTED
from .._handle import RunInfo, TaskHandle
from . import _words
from ._model import (
    RUNS_KEPT,
    UNKEYED,
    BadRequest,
    ConsoleSource,
    Instance,
    Job,
    JobDetail,
    NotFound,
    Refused,
    Request,
    Slot,
    Worker,
)

#: Ended tasks kept listed (a one-shot that ran, a cancelled task), newest.
ENDED_KEPT = 1000


class ProgramSource(ConsoleSource):
    """The read model over one Scheduler in this process.

    Args:
        scheduler: a ``procsched.Scheduler`` (or ``InlineScheduler``).
        title: what the pages call this program.
    """

    def __init__(self, scheduler: Any, title: str = "procsched") -> None:
        from .._metrics import Metrics

        self.scheduler = scheduler
        self.title = title
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._mark = 0
        self._schedules: dict[int, dict[str, Any]] = {}
        self._known: dict[int, TaskHandle] = {}  # every task seen, in submission order
        self._slots: dict[int, collections.deque[Slot]] = {}
        self._running: dict[int, dict[int, Slot]] = {}  # task id -> attempt key -> the run in flight
        try:
            self._metrics: Any = Metrics()
        except ImportError:  # prometheus-client is part of the web extra; without it /metrics says so
            self._metrics = None
        else:
            self._metrics.stats_source = scheduler.stats
        scheduler.add_listener(self._on_event)

    # -- what the program tells us -------------------------------------------

    def add(self, handle: TaskHandle, schedule: dict[str, Any] | None) -> None:
        """Register a task and its schedule record (``_words.schedule_of``)."""
        with self._lock:
            self._known.setdefault(handle.id, handle)
            if schedule is not None:
                self._schedules[handle.id] = schedule
            self._mark += 1

    def _on_event(self, event: dict[str, Any]) -> None:
        if self._metrics is not None:
            self._metrics.on_event(event)
        kind = event["event"]
        tid = event.get("task_id")
        with self._lock:
            self._mark += 1
            if tid is None:
                return
            if kind == RUN_STARTED:
                scheduled = _wall(event.get("scheduled_at"))
                now = datetime.now(UTC)
                self._running.setdefault(tid, {})[event["run"]] = Slot(
                    event["run"],
                    event.get("attempt", 1),
                    None,
                    None,
                    event.get("cause", "schedule"),
                    scheduled or now,
                    now,
                    None,
                    _text(event.get("worker")),
                )
            elif kind in RUN_END.values():
                self._running.get(tid, {}).pop(event["run"], None)
                scheduled = _wall(event["scheduled_at"])
                base = event["scheduled_for"]

                def wall(t: float | None) -> datetime | None:
                    return None if t is None or scheduled is None else scheduled + timedelta(seconds=t - base)

                slot = Slot(
                    event["run"],
                    event.get("attempt", 1),
                    event["outcome"],
                    event.get("reason"),
                    event.get("cause", "schedule"),
                    scheduled,
                    wall(event["started_at"]),
                    wall(event["finished_at"]),
                    _text(event.get("worker")),
                    event.get("error"),
                    event.get("traceback"),
                    event.get("output"),
                )
                self._slots.setdefault(tid, collections.deque(maxlen=RUNS_KEPT)).append(slot)
            elif kind == RUN_SKIPPED:  # (a slot the misfire policy dropped is one of these too)
                slot = Slot(None, 1, "skipped", event["reason"], "schedule", _wall(event["scheduled_at"]), None, None)
                self._slots.setdefault(tid, collections.deque(maxlen=RUNS_KEPT)).append(slot)

    # -- the read model ------------------------------------------------------------

    def change_mark(self) -> object:
        with self._lock:
            return self._mark

    def _handles(self) -> list[TaskHandle]:
        live = self.scheduler.jobs()
        with self._lock:
            for handle in live:
                self._known.setdefault(handle.id, handle)
            ended = [tid for tid, h in self._known.items() if h.done()]
            for tid in ended[: max(0, len(ended) - ENDED_KEPT)]:
                del self._known[tid]
                self._slots.pop(tid, None)
            return list(self._known.values())

    def jobs(self) -> list[Job]:
        return [self._job(h) for h in self._handles()]

    def _job(self, handle: TaskHandle) -> Job:
        schedule = self._schedules.get(handle.id)
        words, zone = _words.describe(schedule)
        state = handle.state.value
        with self._lock:
            recorded = self._slots.get(handle.id)
            last = next((s.outcome for s in reversed(recorded or ()) if s.run is not None), None)
        if last is None and handle.runs:
            last = handle.runs[-1].outcome
        return Job(
            ref=handle.key if handle.key is not None else f"{UNKEYED}{handle.id}",
            key=handle.key,
            name=handle.name or f"task {handle.id}",
            state=state,
            paused=state == "paused",
            schedule=words,
            zone=zone,
            next_run_at=handle.next_run_at,
            last_outcome=last,
            held_by=f"{self.host}/{self.pid}" if state == "running" else None,
            runs=handle.run_count,
        )

    def _handle(self, ref: str) -> TaskHandle:
        handles = self._handles()
        for handle in handles:
            if handle.key == ref:
                return handle
        if ref.startswith(UNKEYED) and ref[1:].isdigit():
            with self._lock:
                known = self._known.get(int(ref[1:]))
            if known is not None:
                return known
        raise NotFound(f"no task {ref!r}")

    def job(self, ref: str, limit: int = 50) -> JobDetail:
        handle = self._handle(ref)
        job = self._job(handle)
        with self._lock:
            recorded = list(self._slots.get(handle.id, ()))
            running = list(self._running.get(handle.id, {}).values())
        seen = {(s.run, s.attempt) for s in recorded if s.run is not None}
        older = [_slot_of(r) for r in handle.runs[-limit:] if (r.run, r.attempt) not in seen]
        slots = older + recorded + running
        runs = [s for s in slots if s.run is not None]
        return JobDetail(
            job, _words.next_slots(self._schedules.get(handle.id), handle.next_run_at), runs[-limit:], slots[-limit:]
        )

    def instances(self) -> list[Instance]:
        try:
            stats = self.scheduler.stats()
        except SchedulerError:
            stats = {"workers": []}
        store = stats.get("store")
        ident = store["scheduler"]["id"] if store else f"{self.host}:{self.pid}"
        workers = [
            Worker(
                ident,
                w.get("slot", i),
                w.get("pid"),
                str(w.get("state")),
                w.get("rss"),
                w.get("runs", 0),
                w.get("restarts", 0),
                None if w.get("task") is None else self._ref_of(w["task"]),
            )
            for i, w in enumerate(stats.get("workers", []))
        ]
        holding = sorted(j.ref for j in self.jobs() if j.state == "running") if not store else store["holding"]
        instance = Instance(
            ident,
            self.host,
            self.pid,
            store["scheduler"]["lease"] if store else None,
            None,
            True,
            holding,
            store["standby"] if store else [],
            workers,
        )
        return [instance]

    def _ref_of(self, task_id: int) -> str:
        with self._lock:
            handle = self._known.get(task_id)
        if handle is not None and handle.key is not None:
            return handle.key
        return f"{UNKEYED}{task_id}"

    def metrics(self) -> bytes:
        if self._metrics is None:
            return b"# prometheus-client is not installed: pip install 'procsched[web]'\n"
        from prometheus_client import generate_latest

        return bytes(generate_latest(self._metrics.registry))

    # -- actions ---------------------------------------------------------------------

    def pause(self, ref: str) -> bool:
        return self._act(ref, "pause")

    def resume(self, ref: str) -> bool:
        return self._act(ref, "resume")

    def cancel(self, ref: str) -> bool:
        return self._act(ref, "cancel")

    def _act(self, ref: str, action: str) -> bool:
        handle = self._handle(ref)
        try:
            done = bool(
                handle.pause() if action == "pause" else handle.resume() if action == "resume" else handle.cancel()
            )
        except SchedulerError as exc:
            raise Refused(f"cannot {action} {ref!r}: {exc}") from exc
        with self._lock:
            self._mark += 1
        if not done:
            raise Refused(f"cannot {action} {ref!r}: it is {handle.state.value}")
        return done

    def run_now(self, ref: str) -> Request:
        handle = self._handle(ref)
        try:
            accepted = handle.run_now()
        except SchedulerError as exc:
            raise Refused(f"cannot run {ref!r} now: {exc}") from exc
        if not accepted:
            raise Refused(f"cannot run {ref!r} now (its overlap policy skipped it, or it ended)")
        with self._lock:
            self._mark += 1
        now = datetime.now(UTC)
        return Request(None, ref, "run_now", "done", now, f"{self.host}/{self.pid}", now)

    def backfill(self, ref: str, start: datetime, end: datetime, dry_run: bool) -> Request:
        handle = self._handle(ref)
        try:
            slots = handle.backfill(start, end, dry_run=dry_run)
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
        except SchedulerError as exc:
            raise Refused(f"cannot backfill {ref!r}: {exc}") from exc
        with self._lock:
            self._mark += 1
        now = datetime.now(UTC)
        return Request(
            None, ref, "backfill", "done", now, f"{self.host}/{self.pid}", now, start, end, dry_run, list(slots)
        )


def _wall(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _slot_of(info: RunInfo) -> Slot:
    """A handle's RunInfo (seen before the console listened) as a Slot."""
    scheduled = info.scheduled_at
    base = info.scheduled_for

    def wall(t: float | None) -> datetime | None:
        return None if t is None or scheduled is None else scheduled + timedelta(seconds=t - base)

    return Slot(
        info.run,
        info.attempt,
        info.outcome,
        info.reason,
        info.cause,
        scheduled,
        wall(info.started_at),
        wall(info.finished_at),
        _text(info.worker),
        None if info.error is None else str(info.error),
        None if info.error is None else info.error.traceback,
        info.output,
    )
