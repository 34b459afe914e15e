"""Prometheus metrics for ``procsched run --metrics-port PORT`` (the
``procsched[metrics]`` extra: prometheus-client).

    listener thread ── run end events ──▶ Metrics.on_event ──▶ runs counter, duration and lateness histograms
                    run_skipped events ─────────────────▶ skipped slots counter
    HTTP scrape ── collect() ── stats() (fresh; else the last snapshot) ──▶ gauges
                             └── counters and histograms from the events

Metrics (names are stable; ``job`` is the job's name)::

    procsched_runs_total{job, outcome}          counter   finished runs by the outcome of their last attempt
                                                          (ok, error, crashed, timeout, cancelled)
    procsched_retries_total{job, outcome}       counter   failed attempts that were tried again, by their outcome
    procsched_run_duration_seconds{job}         histogram run durations
    procsched_run_lateness_seconds{job}         histogram start - scheduled start
    procsched_missed_runs_total{job}            counter   fixed-rate slots dropped by the misfire policy
    procsched_skipped_slots_total{job, reason}  counter   slots not run (run_skipped events), by reason
                                                          (overlap, misfire, late, paused, down)
    procsched_workers_alive                     gauge     workers with a live process (or thread)
    procsched_worker_restarts_total             counter   workers replaced (crash, timeout, recycling)
    procsched_worker_crashes_total              counter   workers that died on their own
    procsched_pending_tasks                     gauge     tasks not yet finished or cancelled
    procsched_running_runs                      gauge     runs in progress
    procsched_crash_loop_holds                  gauge     periodic tasks held back after crashing in a row

Runs are counted as everywhere in the CLI: a run once, by the outcome of its
last attempt; every other attempt in ``procsched_retries_total``. A failed
attempt of a job whose ``Retry`` may try it again is counted when what
follows shows which it was (its next attempt, another run, the task's end).

The registry is private to one Metrics object, so two schedulers (or tests)
never share series.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from ._events import RUN_END, RUN_MISSED, RUN_SKIPPED, RUN_STARTED, TASK_CANCELLED, WORKER_EXITED

#: Seconds; from sub-millisecond no-op runs to hour-long jobs.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


class Metrics:
    """Scheduler metrics in a registry of their own; feed ``on_event`` (a
    listener) and ``on_stats`` (a ``stats()`` snapshot)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        self.runs = Counter(
            "procsched_runs",
            "Finished runs, by job and the outcome of their last attempt.",
            ["job", "outcome"],
            registry=self.registry,
        )
        self.retries = Counter(
            "procsched_retries",
            "Failed attempts that were tried again, by job and outcome.",
            ["job", "outcome"],
            registry=self.registry,
        )
        #: Job name -> its Retry's attempts (jobs whose failed attempts may be tried again).
        self.attempts: dict[str, int] = {}
        self._held: dict[int, tuple[str, int, str]] = {}  # task id -> (job, run, outcome) of a failed attempt
        self.duration = Histogram(
            "procsched_run_duration_seconds", "Run durations, by job.", ["job"], buckets=BUCKETS, registry=self.registry
        )
        self.lateness = Histogram(
            "procsched_run_lateness_seconds",
            "Start minus scheduled start, by job.",
            ["job"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.missed = Counter(
            "procsched_missed_runs", "Fixed-rate slots dropped by the misfire policy.", ["job"], registry=self.registry
        )
        self.skipped = Counter(
            "procsched_skipped_slots", "Slots not run, by job and reason.", ["job", "reason"], registry=self.registry
        )
        self.crashes = Counter("procsched_worker_crashes", "Workers that died on their own.", registry=self.registry)
        self._lock = threading.Lock()
        self._stats: dict[str, Any] | None = None
        self.stats_source: Callable[[], dict[str, Any]] | None = None  # e.g. Scheduler.stats
        self.registry.register(_StatsCollector(self))
        self.server: Any = None
        self.url = ""

    @classmethod
    def serve(cls, port: int, host: str = "127.0.0.1") -> Metrics:
        """Metrics served over HTTP at ``http://host:port/metrics`` (port 0: any free port).

        Raises:
            ImportError: prometheus-client is not installed (``pip install procsched[metrics]``).
            OSError: the address cannot be bound.
        """
        try:
            from prometheus_client import start_http_server
        except ImportError:
            raise ImportError("prometheus-client is not installed: pip install 'procsched[metrics]'") from None
        metrics = cls()
        server, _thread = start_http_server(port, addr=host, registry=metrics.registry)
        metrics.server = server
        bound = server.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        metrics.url = f"http://{shown}:{bound}/metrics"
        return metrics

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event["event"]
        if kind in (RUN_STARTED, TASK_CANCELLED) or kind in RUN_END.values():
            held = self._held.pop(event["task_id"], None)
            if held is not None:  # the next attempt of its run (a retry), or anything else (its run's end)
                again = kind != TASK_CANCELLED and event["run"] == held[1] and event.get("attempt", 2) > 1
                (self.retries if again else self.runs).labels(held[0], held[2]).inc()
        if kind in RUN_END.values():
            job = _job(event)
            outcome = event["outcome"]
            if outcome != "ok" and event["state"] == "pending" and event["attempt"] < self.attempts.get(job, 1):
                self._held[event["task_id"]] = (job, event["run"], outcome)
            else:
                self.runs.labels(job, outcome).inc()
            self.duration.labels(job).observe(event["duration"])
            self.lateness.labels(job).observe(event["lateness"])
        elif kind == RUN_MISSED:
            self.missed.labels(_job(event)).inc(event["missed"])
        elif kind == RUN_SKIPPED:
            self.skipped.labels(_job(event), event["reason"]).inc()
        elif kind == WORKER_EXITED and event["crashed"]:
            self.crashes.inc()

    def on_stats(self, stats: dict[str, Any]) -> None:
        with self._lock:
            self._stats = stats

    def snapshot(self) -> dict[str, Any] | None:
        """Fresh stats from ``stats_source`` if it answers, else the last ones."""
        if self.stats_source is not None:
            try:
                self.on_stats(self.stats_source())
            except Exception:  # noqa: BLE001 - shutting down or broken: serve the last numbers
                pass
        with self._lock:
            return self._stats


class _StatsCollector:
    """Gauges (and the restarts counter) from the last stats() snapshot."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Any]:
        return list(self._families(None))

    def collect(self) -> Iterator[Any]:
        return self._families(self.metrics.snapshot())

    def _families(self, stats: dict[str, Any] | None) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        stats = stats or {}
        workers = stats.get("workers", [])
        alive = sum(1 for w in workers if w.get("pid") is not None and w.get("state") not in ("down", "stopped"))
        yield GaugeMetricFamily("procsched_workers_alive", "Workers with a live process or thread.", value=alive)
        yield CounterMetricFamily(
            "procsched_worker_restarts",
            "Workers replaced (crash, timeout, recycling).",
            value=sum(w.get("restarts", 0) for w in workers),
        )
        yield GaugeMetricFamily(
            "procsched_pending_tasks", "Tasks not yet finished or cancelled.", value=stats.get("pending", 0)
        )
        yield GaugeMetricFamily("procsched_running_runs", "Runs in progress.", value=stats.get("running", 0))
        yield GaugeMetricFamily(
            "procsched_crash_loop_holds",
            "Periodic tasks held back after crashing in a row.",
            value=len(stats.get("crash_loops", {})),
        )


def _job(event: dict[str, Any]) -> str:
    return str(event.get("name") or f"task {event['task_id']}")
