"""The console over a store (``procsched web --store S``): every instance sharing it.

    console thread ── jobs() / job() / instances() ──▶ store.jobs(), history(), schedulers()
                   ── change_mark() (the live reader, at most once a second) ──▶ store.peers_view(since)
                   ── pause / resume / cancel ──▶ one store batch: the writes an instance makes
                                                  itself; every instance follows them at its re-read
                                                  (README "Changes travel": within lease/3, <= 1 s)

Built on the store's API of today (``jobs``, ``get``, ``history``,
``schedulers``, ``peers_view``, ``batch``); the store's read model and
control channel (issue 23, store side) replace these calls here, and only
here. Nothing read is ever unpickled: a task's arguments stay opaque bytes.
"""

from __future__ import annotations

import functools
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from .._errors import StoreError
from . import _words
from ._model import (
    Backfill,
    ConsoleError,
    ConsoleSource,
    Instance,
    Job,
    JobDetail,
    NotFound,
    Refused,
    Slot,
)

NS = 1_000_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: The re-read overlap of the change mark (a transaction may commit a
#: little after the store-clock time it stamped; as the instances' re-read).
OVERLAP_NS = 2 * NS
NEEDS_CONTROL = (
    "{} through a store needs the store's control channel (issues 22 and 23, store side), "
    "which this procsched does not have yet"
)


def wall(ns: int | None) -> datetime | None:
    return None if ns is None else _EPOCH + timedelta(microseconds=ns // 1000)


@functools.lru_cache(maxsize=4096)
def _describe(kind: str, period_ns: int | None, expr: str | None, tz: Any) -> tuple[str, str | None]:
    return _words.describe({"kind": kind, "period_ns": period_ns, "expr": expr, "tz": tz})


def describe(schedule: dict[str, Any]) -> tuple[str, str | None]:
    """Schedules in words, once per distinct schedule (10,000 jobs share a few)."""
    return _describe(schedule["kind"], schedule.get("period_ns"), schedule.get("expr"), schedule.get("tz"))


class StoreSource(ConsoleSource):
    """The read model over a store (any number of instances).

    Args:
        target: the store, as ``procsched web --store`` takes it.
        secret: the store's secret(s) (``--secret-file``; see ``Scheduler(secret=)``), or None.
    """

    def __init__(self, target: str, secret: list[bytes] | None = None) -> None:
        from .._store import open_store
        from .._store._open import redact

        self.store: Any = open_store(target, secret=secret)  # StoreError / ValueError: the caller says why
        self.title = f"store {redact(target)}"  # a URL's password never reaches a page
        self._lock = threading.Lock()  # one thread at a time on the connection
        self._since = 0  # store clock of the last change read
        self._mark: tuple[Any, ...] = ()
        #: key -> (the row's updated_ns, its holder's name, its Job): a row
        #: not written since is not made into a record again.
        self._jobs: dict[str, tuple[int, str | None, Job]] = {}

    def close(self) -> None:
        with self._lock:
            self.store.close()

    def _read(self, call: Any, *args: Any) -> Any:
        with self._lock:
            try:
                return call(*args)
            except StoreError as exc:
                raise ConsoleError(str(exc)) from exc

    # -- the read model ------------------------------------------------------------

    def change_mark(self) -> object:
        """One bounded read (the rows changed since the last read, the task
        count, the registered instances): what each instance reads at its
        own re-read; the store's change mark replaces it."""
        with self._lock:
            since = self._since
            changed, count, holders, now = self.store.peers_view(max(0, since - OVERLAP_NS))
            self._since = now
            newest = max((t.updated_ns for t in changed), default=0)
            previous = self._mark[0] if self._mark else 0
            self._mark = (max(newest, previous), count, tuple(sorted(h.id for h in holders)))
            return self._mark

    def jobs(self) -> list[Job]:
        # load(): one snapshot of every task and instance, each distinct
        # schedule parsed once (jobs() parses every row's JSON: 10,000 jobs
        # cost twice as much); the store's read model will replace it.
        loaded = self._read(self.store.load)
        names = {h.id: f"{h.host}/{h.pid}" for h in loaded.schedulers}
        tasks = sorted(loaded.tasks, key=lambda t: t.definition.key)
        cache, jobs = self._jobs, []
        fresh: dict[str, tuple[int, str | None, Job]] = {}
        for t in tasks:
            held = None if t.holder is None else names.get(t.holder)
            hit = cache.get(t.definition.key)
            if hit is None or hit[0] != t.updated_ns or hit[1] != held:
                hit = (t.updated_ns, held, self._job(t, names))
            fresh[t.definition.key] = hit
            jobs.append(hit[2])
        self._jobs = fresh  # two requests at once: each builds a valid cache, the last one stays
        return jobs

    def _job(self, task: Any, names: dict[str, str]) -> Job:
        words, zone = describe(task.definition.schedule)
        st = task.state
        if task.unloadable is not None:
            state = "unloadable"
        elif task.holder is not None:
            state = "running"
        elif st.paused:
            state = "paused"
        elif st.next_due_ns is None:
            state = "done"
        else:
            state = "pending"
        held = None if task.holder is None else names.get(task.holder, _holder_text(task.holder))
        return Job(
            ref=task.key,
            key=task.key,
            name=task.definition.options.get("name") or task.key,
            state=state,
            paused=st.paused,
            schedule=words,
            zone=zone,
            next_run_at=None if st.paused else wall(st.next_due_ns),
            last_outcome=task.last_outcome,
            held_by=held,
            runs=st.run_count,
            unloadable=task.unloadable,
        )

    def job(self, ref: str, limit: int = 50) -> JobDetail:
        def read() -> tuple[Any, list[Any], list[Any]]:
            return self.store.get(ref), self.store.history(ref, limit), self.store.schedulers()

        task, records, holders = self._read(read)
        if task is None:
            raise NotFound(f"no task {ref!r}")
        job = self._job(task, {h.id: f"{h.host}/{h.pid}" for h in holders})
        runs = [_slot(r) for r in records]
        return JobDetail(
            job, _words.next_slots(task.definition.schedule, job.next_run_at), runs, runs, task.definition.fn_ref
        )

    def instances(self) -> list[Instance]:
        def read() -> tuple[list[Any], list[Any], int]:
            return self.store.schedulers(), self.store.jobs(), self.store.now_ns()

        holders, tasks, now = self._read(read)
        held: dict[str, list[str]] = {}
        for t in tasks:
            if t.holder is not None:
                held.setdefault(t.holder, []).append(t.key)
        return [
            Instance(
                h.id,
                h.host,
                h.pid,
                h.lease_ns / NS,
                wall(h.lease_until_ns),
                h.lease_until_ns >= now,
                sorted(held.get(h.id, [])),
            )
            for h in holders
        ]

    def metrics(self) -> bytes:
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.core import GaugeMetricFamily

        def read() -> tuple[list[Any], list[Any], int]:
            return self.store.jobs(), self.store.schedulers(), self.store.now_ns()

        tasks, holders, now = self._read(read)

        class Collector:
            def collect(self) -> Any:
                jobs = GaugeMetricFamily(
                    "procsched_store_jobs", "Keyed tasks in the store, by state.", labels=["state"]
                )
                states: dict[str, int] = {}
                for t in tasks:
                    state = (
                        "unloadable"
                        if t.unloadable
                        else "paused"
                        if t.state.paused
                        else "running"
                        if t.holder
                        else "pending"
                    )
                    states[state] = states.get(state, 0) + 1
                for state, n in sorted(states.items()):
                    jobs.add_metric([state], n)
                yield jobs
                runs = GaugeMetricFamily("procsched_store_runs", "Runs claimed so far, by job.", labels=["job"])
                last = GaugeMetricFamily(
                    "procsched_store_last_outcome", "1 for each job's last outcome.", labels=["job", "outcome"]
                )
                for t in tasks:
                    runs.add_metric([t.key], t.state.run_count)
                    if t.last_outcome is not None:
                        last.add_metric([t.key, t.last_outcome], 1)
                yield runs
                yield last
                alive = sum(1 for h in holders if h.lease_until_ns >= now)
                inst = GaugeMetricFamily(
                    "procsched_store_instances", "Registered instances, by lease.", labels=["lease"]
                )
                inst.add_metric(["alive"], alive)
                inst.add_metric(["expired"], len(holders) - alive)
                yield inst

        registry = CollectorRegistry(auto_describe=False)
        registry.register(Collector())
        return bytes(generate_latest(registry))

    # -- actions: the writes an instance makes itself --------------------------------

    def _task(self, ref: str) -> Any:
        task = self._read(self.store.get, ref)
        if task is None:
            raise NotFound(f"no task {ref!r}")
        return task

    def _write(self, what: str, build: Any) -> None:
        with self._lock:
            batch = self.store.batch()
            build(batch)
            try:
                batch.commit()
            except StoreError as exc:
                raise ConsoleError(f"cannot {what}: {exc}") from exc

    def pause(self, ref: str) -> bool:
        task = self._task(ref)
        if task.state.next_due_ns is None and task.holder is None:
            raise Refused(f"cannot pause {ref!r}: it has no next run")
        self._write("pause", lambda b: b.update(ref, paused=True))
        return True

    def resume(self, ref: str) -> bool:
        from .._runtime._durable._stored import schedule_of

        task = self._task(ref)
        if not task.state.paused:
            raise Refused(f"cannot resume {ref!r}: it is not paused")
        due = task.state.next_due_ns
        now = self._read(self.store.now_ns)
        fields: dict[str, Any] = {"paused": False}
        if due is not None:  # its next slot from now, as a resume in an instance
            fields["next_due_ns"] = schedule_of(task.definition).not_before(due, now)
        self._write("resume", lambda b: b.update(ref, **fields))
        return True

    def cancel(self, ref: str) -> bool:
        self._task(ref)
        self._write("cancel", lambda b: b.delete(ref))
        return True

    def run_now(self, ref: str) -> bool:
        self._task(ref)
        raise Refused(NEEDS_CONTROL.format("Run now"))

    def backfill(self, ref: str, start: datetime, end: datetime, dry_run: bool) -> Backfill:
        self._task(ref)
        raise Refused(NEEDS_CONTROL.format("A backfill"))


def _holder_text(holder_id: str) -> str:
    """``host/pid`` from a scheduler id (``host:pid:random``) no longer registered."""
    host, _, rest = holder_id.partition(":")
    return f"{host}/{rest.partition(':')[0]} (lease gone)"


def _slot(r: Any) -> Slot:
    error = None if r.error_type is None else f"{r.error_type}: {r.error_message}"
    return Slot(
        r.run,
        r.attempt,
        r.outcome,
        None,
        "schedule",
        wall(r.scheduled_ns),
        wall(r.started_ns),
        wall(r.finished_ns),
        None if r.pid is None else f"{r.host}/{r.pid}",
        error,
    )
