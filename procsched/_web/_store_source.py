"""The console over a store (``procsched web --store S``): every instance sharing it.

    console thread ── jobs() ───────────▶ store.jobs_view()        one query, plain data
                   ── job(key) ─────────▶ store.job_view(key, n)   the task, its last runs and skipped slots
                   ── instances() ──────▶ store.instances()        leases, what each holds, what it published
                   ── metrics() ────────▶ store.counts()
                   ── change_mark() ────▶ store.change_mark()      the live reader: at most once a second
                   ── pause / resume / cancel ──▶ store.pause / resume / cancel(key): conditional writes
                                                  every instance follows at its re-read (<= 1 s)
                   ── run_now / backfill ───────▶ store.ask(key, ...) -> a request; request(id) reads it:
                                                  the instance that runs the task takes it at its re-read,
                                                  carries it out and answers

The store's read model holds no arguments: nothing read is ever unpickled.

What an instance answers a request with (the runtime's side, issue 22: this
module reads it, and says so here): a refusal as the request's ``error``;
a run now's result ``{"run": N}`` (the run it started; ``{"accepted":
false}`` or ``false``: not run, e.g. its overlap policy skipped it); a
backfill's result the slots, UTC ns, as a list or ``{"slots": [...]}``.
"""

from __future__ import annotations

import functools
import os
import socket
import threading
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .._core._units import NS, wall_datetime, wall_ns
from .._errors import StoreError
from .._store import SkippedSlot
from . import _words
from ._model import (
    BadRequest,
    ConsoleError,
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

if TYPE_CHECKING:
    from .._store import ChangeMark, ControlRequest, HolderRef, JobView, RunRecord, Store


def wall(ns: int | None) -> datetime | None:
    return None if ns is None else wall_datetime(ns)


ns_of = wall_ns


@functools.lru_cache(maxsize=4096)
def _describe(kind: str, period_ns: int | None, expr: str | None, tz: Any) -> tuple[str, str | None]:
    return _words.describe({"kind": kind, "period_ns": period_ns, "expr": expr, "tz": tz})


def describe(schedule: dict[str, Any]) -> tuple[str, str | None]:
    """Schedules in words, once per distinct schedule (10,000 jobs share a few)."""
    if schedule.get("kind") not in ("once", "fixed_rate", "fixed_delay", "cron"):
        return "unknown schedule", None  # a row this release cannot read: listed, not a reason to fail
    return _describe(schedule["kind"], schedule.get("period_ns"), schedule.get("expr"), schedule.get("tz"))


def holder_text(ref: HolderRef | None) -> str | None:
    """``host/pid``, and why that instance is not alive: `` (lease expired)``
    (registered, not renewed: stopped or hanging, nobody took it over yet),
    `` (gone)`` (its registration ended or was taken over)."""
    if ref is None:
        return None
    text = f"{ref.host or '?'}/{ref.pid if ref.pid is not None else '?'}"
    if ref.alive:
        return text
    return text + (" (lease expired)" if ref.registered else " (gone)")


def instance_text(ident: str | None) -> str | None:
    """``host/pid`` from a scheduler id (``host:pid:nonce``)."""
    if ident is None:
        return None
    host, _, rest = ident.partition(":")
    return f"{host}/{rest.partition(':')[0]}"


def job_of(view: JobView) -> Job:
    """A stored task as the jobs page shows it."""
    words, zone = describe(view.schedule)
    st = view.state
    if view.unloadable is not None:
        state = "unloadable"
    elif view.in_flight:
        state = "running"
    elif st.paused:
        state = "paused"
    elif st.next_due_ns is None:
        state = "done"
    else:
        state = "pending"
    return Job(
        ref=view.key,
        key=view.key,
        name=view.name or view.key,
        state=state,
        paused=st.paused,
        schedule=words,
        zone=zone,
        next_run_at=None if st.paused else wall(st.next_due_ns),
        last_outcome=view.last_outcome,
        held_by=holder_text(view.held_by),
        runs=st.run_count,
        unloadable=view.unloadable,
        kept_by=holder_text(view.claimed_by),
    )


def slot_of(r: RunRecord | SkippedSlot) -> Slot:
    """A stored run (attempt) or skipped slot as a ``Slot``."""
    if isinstance(r, SkippedSlot):
        return Slot(None, 1, "skipped", r.reason, None, wall(r.slot_ns), None, None, instance=instance_text(r.holder))
    run = r
    if run.error_type is not None:
        error: str | None = f"{run.error_type}: {run.error_message}" if run.error_message else run.error_type
    else:
        error = run.error_message
    return Slot(
        run.run,
        run.attempt,
        run.outcome,
        run.reason,
        run.cause,
        wall(run.scheduled_ns),
        wall(run.started_ns),
        wall(run.finished_ns),
        None if run.worker_pid is None else str(run.worker_pid),
        error,
        run.error_traceback,
        run.output,
        None if run.pid is None else f"{run.host}/{run.pid}",
    )


def request_of(r: ControlRequest) -> Request:
    """A stored control request, and what its answer says (see the module docstring)."""
    kind = r.kind
    state = "taken" if r.taken_by is not None else "asked"
    slots = run = None
    error = r.error
    if r.done:
        result = r.result
        if error is None and (result is False or (isinstance(result, dict) and result.get("accepted") is False)):
            error = "the instance did not start it (its overlap policy skipped it, or the task ended)"
        if error is not None:
            state = "refused"
        else:
            state = "done"
            if kind == "run_now" and isinstance(result, dict) and type(result.get("run")) is int:
                run = result["run"]
            items = result.get("slots") if isinstance(result, dict) else result
            if kind == "backfill" and isinstance(items, list):
                slots = [wall_datetime(x) for x in items if type(x) is int]
    return Request(
        r.id,
        r.key,
        kind,
        state,
        wall(r.asked_ns),
        instance_text(r.taken_by),
        wall(r.done_ns),
        wall(r.start_ns),
        wall(r.end_ns),
        r.dry_run,
        slots,
        run,
        error,
    )


class StoreSource(ConsoleSource):
    """The read model over a store (any number of instances).

    Args:
        store: an open store (``procsched._store.open_store``); the source
            owns it from now on (``close()`` closes it). The caller opens it:
            ``procsched web`` opens only a store that exists.
        target: what the user named the store by, for the pages' title (a
            URL's password never reaches a page: the store's own redaction).
    """

    def __init__(self, store: Store, target: str | None = None) -> None:
        from .._store._url import redact

        self.store = store
        self.title = store.describe if target is None else f"store {redact(target)}"
        self.asker = f"console {socket.gethostname()}/{os.getpid()}"
        self._lock = threading.Lock()  # one thread at a time on the connection
        #: The last listing and the change mark read just before it: equal
        #: marks, the same listing (a listing is a function of what the mark
        #: counts: the tasks' writes and the instances' leases).
        self._listed: tuple[ChangeMark, list[Job]] | None = None
        #: key -> (the store's view of it, its Job), from the last listing:
        #: the store reads again only the rows written since, and a view it
        #: lists again (the same object) is not made into a record again.
        self._made: dict[str, tuple[JobView, Job]] = {}

    def close(self) -> None:
        with self._lock:
            self.store.close()

    def _call(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        """``call(*args)`` on the store: KeyError -> NotFound, a store fault -> ConsoleError."""
        with self._lock:
            try:
                return call(*args, **kwargs)
            except KeyError as exc:
                raise NotFound(f"no task {exc.args[0]!r}" if exc.args else "no such task") from None
            except StoreError as exc:
                raise ConsoleError(str(exc)) from exc

    # -- the read model ------------------------------------------------------------

    def change_mark(self) -> object:
        return self._call(self.store.change_mark)

    def jobs(self) -> list[Job]:
        made = self._made

        def read() -> tuple[ChangeMark, list[JobView] | None]:
            mark = self.store.change_mark()
            listed = self._listed
            if listed is not None and listed[0] == mark:
                return mark, None
            return mark, self.store.jobs_view({key: hit[0] for key, hit in made.items()})

        mark, views = self._call(read)
        if views is None:
            return self._listed[1]  # type: ignore[index]
        fresh, jobs = {}, []
        for v in views:
            hit = made.get(v.key)
            if hit is None or hit[0] is not v:
                hit = (v, job_of(v))
            fresh[v.key] = hit
            jobs.append(hit[1])
        self._made = fresh  # two requests at once: each makes a valid cache, the last one stays
        self._listed = (mark, jobs)
        return jobs

    def job(self, ref: str, limit: int = 50) -> JobDetail:
        detail = self._call(self.store.job_view, ref, limit)
        if detail is None:
            raise NotFound(f"no task {ref!r}")
        job = job_of(detail.job)
        return JobDetail(
            job,
            _words.next_slots(detail.job.schedule, job.next_run_at),
            [slot_of(r) for r in detail.runs],
            [slot_of(r) for r in detail.slots],
            detail.job.fn_ref,
            {"runs": detail.runs_total, "skipped": detail.skipped_total},
        )

    def instances(self) -> list[Instance]:
        found = []
        for v in self._call(self.store.instances):
            status = v.status
            workers = None
            if status.runner is not None or status.workers:  # an instance that publishes its status
                state = "alive" if v.alive else "lease expired"
                workers = [
                    Worker(v.id, i, w.pid, state, w.rss, w.runs, w.restarts) for i, w in enumerate(status.workers)
                ]
            found.append(
                Instance(
                    v.id,
                    v.host,
                    v.pid,
                    v.lease_ns / NS,
                    wall(v.lease_until_ns),
                    v.alive,
                    list(v.holding),
                    list(status.standby),
                    workers,
                    v.keeping,
                    max(status.standby_count, len(status.standby)),
                    status.runner,
                )
            )
        return found

    def metrics(self) -> bytes:
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        counts = self._call(self.store.counts)

        class Collector:
            def collect(self) -> Any:
                yield GaugeMetricFamily("procsched_store_jobs", "Keyed tasks in the store.", value=counts.jobs)
                inst = GaugeMetricFamily(
                    "procsched_store_instances", "Registered instances, by lease.", labels=["lease"]
                )
                inst.add_metric(["alive"], counts.alive)
                inst.add_metric(["expired"], counts.instances - counts.alive)
                yield inst
                # Per job, the non-zero counts only (10,000 jobs x 5 outcomes of zeros help nobody).
                runs = CounterMetricFamily(
                    "procsched_store_attempts",
                    "Run attempts ended, by job and outcome (a retried run counts each attempt).",
                    labels=["job", "outcome"],
                )
                skipped = CounterMetricFamily(
                    "procsched_skipped_slots", "Slots not run, by job and reason.", labels=["job", "reason"]
                )
                for key in sorted(counts.by_job):
                    by_outcome, by_reason = counts.by_job[key]
                    for outcome, n in by_outcome.items():
                        if n:
                            runs.add_metric([key, outcome], n)
                    for reason, n in by_reason.items():
                        if n:
                            skipped.add_metric([key, reason], n)
                yield runs
                yield skipped

        registry = CollectorRegistry(auto_describe=False)
        registry.register(Collector())
        return bytes(generate_latest(registry))

    # -- actions: through the store's control channel ------------------------------------

    def pause(self, ref: str) -> bool:
        self._call(self.store.pause, ref)  # False: paused already - it is paused, as asked
        return True

    def resume(self, ref: str) -> bool:
        if not self._call(self.store.resume, ref):
            raise Refused(f"cannot resume {ref!r}: it is not paused")
        return True

    def cancel(self, ref: str) -> bool:
        if not self._call(self.store.cancel, ref):
            raise NotFound(f"no task {ref!r}")
        return True

    def run_now(self, ref: str) -> Request:
        return self.request(self._call(self.store.ask, ref, "run_now", asked_by=self.asker))

    def backfill(self, ref: str, start: datetime, end: datetime, dry_run: bool) -> Request:
        if start >= end:
            raise BadRequest(f"start must be before end, got {start.isoformat()} >= {end.isoformat()}")
        try:
            ident = self._call(
                self.store.ask,
                ref,
                "backfill",
                start_ns=ns_of(start),
                end_ns=ns_of(end),
                dry_run=dry_run,
                asked_by=self.asker,
            )
        except (ValueError, TypeError) as exc:
            raise BadRequest(str(exc)) from exc
        return self.request(ident)

    def request(self, ident: int) -> Request:
        found = self._call(self.store.request, ident)
        if found is None:
            raise NotFound(f"no request {ident} (requests are forgotten a day after they were asked)")
        return request_of(found)
