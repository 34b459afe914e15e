"""The ``run`` command (and the demo): start the jobs, watch them, stop on a
signal or ``--duration``, summarise.

      main thread ─ starts the jobs, then every second reads Scheduler.stats()
      │             and redraws (and feeds the metrics); on Ctrl-C, SIGTERM or
      │             --duration: shuts the scheduler down
      listener thread (the Scheduler's) ─ events ─▶ Board (numbers per job)
                                                   ├─▶ --plain / --json lines
                                                   └─▶ Prometheus metrics (--metrics-port)
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .._errors import SchedulerBrokenError, SchedulerError, StoreError
from .._jobs import Job
from .._runtime._facade import Scheduler
from . import _web
from ._board import OUTCOME_COLUMNS, Board, JobRow, pool_text, schedule_text, text_table
from ._lines import Lines, guard_streams
from ._live import LiveView, LogToBoard, have_rich

# Exit statuses (documented in the --help epilog and the README).
EXIT_OK = 0
EXIT_LOAD = 1  # the jobs file cannot be loaded or a job cannot be started
EXIT_USAGE = 2  # a bad command line (argparse's own)
EXIT_BROKEN = 3  # the dispatcher process died
EXIT_SOME_FAILED = 4  # --fail-on-error: some runs failed, every job had a good run
EXIT_JOB_FAILED = 5  # --fail-on-error: every run of some job failed
EXIT_KILLED = 130  # a second signal, or the grace ran out

#: Seconds to wait for the pool to come up before the first job starts.
START_TIMEOUT = 60


class Stopper:
    """SIGINT / SIGTERM: the first asks for a graceful stop, the second for a kill."""

    def __init__(self) -> None:
        self.count = 0
        self.name = ""
        self.event = threading.Event()
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.count += 1
        self.name = signal.Signals(signum).name
        self.event.set()


def make_scheduler(args: argparse.Namespace, workers: int | None) -> Scheduler:
    """The Scheduler the command line asks for, capturing each run's output."""
    options: dict[str, Any] = {"runner": args.runner}
    for name in ("policy", "timeout", "mp_context", "store"):
        if getattr(args, name, None) is not None:
            options[name] = getattr(args, name)
    try:
        return Scheduler(workers, capture_output=True, **options)  # type: ignore[call-arg]
    except TypeError as exc:
        if "capture_output" not in str(exc):
            raise
        # A runtime without capture_output: the fds that the workers inherit
        # still never reach the CLI's stream (see _lines.guard_streams).
        return Scheduler(workers, **options)


class Session:
    """Start the jobs, watch them, stop, summarise."""

    def __init__(self, jobs: list[Job], label: str, args: argparse.Namespace, *, demo: bool = False) -> None:
        self.jobs = jobs
        self.label = label
        self.args = args
        self.demo = demo
        self.board = Board(tracebacks=args.tracebacks)
        if args.json:
            mode = "json"
        elif args.plain or not sys.stdout.isatty() or not have_rich():
            mode = "plain"
        else:
            mode = "live"
        self.mode = mode
        self.out = Lines(mode, sys.stdout, self.board, tracebacks=args.tracebacks)
        self.view: LiveView | None = None
        self.stopper = Stopper()
        self.metrics: Any = None
        self.console: Any = None  # the --web console (_web.start_console)
        self.broken = ""  # why the scheduler broke, if it did
        self.err: Any = sys.stderr  # the real stderr, even while fd 2 points away
        self.title = ""

    def run(self) -> int:
        args = self.args
        if args.metrics_port is not None:
            from .._metrics import Metrics

            try:
                self.metrics = Metrics.serve(args.metrics_port, args.metrics_host)
            except (ImportError, OSError) as exc:
                print(f"procsched: cannot serve metrics on {args.metrics_host}:{args.metrics_port}: {exc}",
                      file=sys.stderr)  # fmt: skip
                return EXIT_LOAD
        stdout, self.err, restore_streams = guard_streams(self.mode, self.board.stray)
        self.out.stdout = stdout
        self.out.notes = self.err if self.mode == "json" else stdout
        self.stopper.install()
        restore_logging = self._route_logging()
        try:
            scheduler = make_scheduler(args, args.workers)
        except BaseException as exc:
            self.stopper.restore()
            restore_logging()
            restore_streams()
            if isinstance(exc, StoreError):
                print(f"procsched: cannot open the store: {exc}", file=sys.stderr)
                return EXIT_LOAD
            raise
        try:
            return self._session(scheduler)
        except BaseException:
            scheduler.shutdown(wait=False, cancel_futures=True)  # the dispatcher stops the rest
            raise
        finally:
            if self.view is not None:
                self.view.stop()
            self.stopper.restore()
            restore_logging()
            restore_streams()
            if self.metrics is not None:
                self.metrics.close()
            if self.console is not None:
                self.console.close()

    def _session(self, scheduler: Scheduler) -> int:
        args, out = self.args, self.out
        # Wait for the pool to be up, so that start-up is not counted as lateness.
        scheduler.submit(int).result(timeout=START_TIMEOUT)
        self.board.started = time.monotonic()
        what = f"{len(self.jobs)} job{'s' if len(self.jobs) != 1 else ''} from {self.label}"
        where = pool_text(scheduler.workers, args.runner)
        self.title = f"procsched - {what} on {where}"
        if out.mode == "json":
            out.json_line({"event": "procsched_started", "name": None, "jobs": [
                {"name": job.name, "schedule": schedule_text(job)} for job in self.jobs
            ], "workers": scheduler.workers, "runner": args.runner,
                "metrics": None if self.metrics is None else self.metrics.url})  # fmt: skip
        elif out.mode == "plain":
            stop = f"for {args.duration:g} s" if args.duration else "until stopped (Ctrl-C)"
            out.note(f"starting {what} on {where}, {stop}")
            if self.metrics is not None:
                out.note(f"metrics at {self.metrics.url}")
        scheduler.add_listener(self.board.on_event)
        if out.mode != "live":
            scheduler.add_listener(out.on_event)
        if self.metrics is not None:
            scheduler.add_listener(self.metrics.on_event)
            self.metrics.stats_source = scheduler.stats
        for job in self.jobs:
            first_due = time.monotonic() + job.initial_delay
            try:
                handle = job.start(scheduler, job.name if getattr(args, "store", None) else None)
            except Exception as exc:  # noqa: BLE001 - say which job, then stop
                print(f"procsched: cannot start job {job.name!r}: {type(exc).__name__}: {exc}", file=self.err)
                scheduler.shutdown(wait=True, cancel_futures=True)
                return EXIT_LOAD
            self.board.add(job, handle, first_due)
        if args.web is not None:
            self.console = _web.start_console(self, scheduler)
            if self.console is None:
                scheduler.shutdown(wait=True, cancel_futures=True)
                return EXIT_LOAD
        if out.mode == "live":
            if self.metrics is not None:
                self.title += f" - metrics at {self.metrics.url}"
            self.view = LiveView(out, self.board, self.title)
            self.view.start()
        reason = self._watch(scheduler)
        return self._stop(scheduler, reason)

    def _watch(self, scheduler: Scheduler) -> str:
        """Until a signal or the end of --duration: refresh once a second."""
        deadline = None if self.args.duration is None else time.monotonic() + self.args.duration
        while True:
            self._snapshot(scheduler)
            if self.view is not None:
                self.view.refresh()
            wait = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            if wait <= 0:
                return "duration"
            if self.stopper.event.wait(wait):
                return self.stopper.name
            if deadline is not None and time.monotonic() >= deadline:
                return "duration"  # now, not after one more redraw
            if self.out.closed.is_set():
                return "closed stdout"
            if self.broken:
                return "broken"

    def _stop(self, scheduler: Scheduler, reason: str) -> int:
        args = self.args
        stopped_at = time.monotonic()
        self._snapshot(scheduler)
        running = sum(1 for w in self.board.workers if w.get("task") is not None)
        cause = f"after {args.duration:g} s" if reason == "duration" else f"on {reason}"
        status = f"stopping {cause}"
        if running:
            again = "; Ctrl-C again to kill" if reason.startswith("SIG") else ""
            status += f": waiting for {running} running task(s) to finish (at most {args.grace:g} s{again})"
        if self.view is not None:
            self.view.refresh(status)
        elif running or reason != "duration":
            self.out.note(status)
        self.stopper.event.clear()
        closer = threading.Thread(
            target=scheduler.shutdown, kwargs={"wait": True, "cancel_futures": True}, name="procsched-cli-shutdown"
        )
        closer.start()
        grace_end = time.monotonic() + args.grace
        while closer.is_alive():
            closer.join(0.25)
            if self.stopper.count >= 2 or time.monotonic() > grace_end:
                why = "second signal" if self.stopper.count >= 2 else f"grace of {args.grace:g} s over"
                self._kill(why)
            if self.view is not None:
                self.view.refresh(status)
        self.board.stopped()
        if self.view is not None:
            self.view.refresh(f"stopped after {stopped_at - self.board.started:.1f} s")
            self.view.stop()
            self.view = None
        status_code = self._exit_status()
        self._summary(stopped_at, status_code)
        if self.broken:
            print(f"procsched: the scheduler broke: {self.broken}", file=self.err, flush=True)
            return EXIT_BROKEN
        return status_code

    def _exit_status(self) -> int:
        if not getattr(self.args, "fail_on_error", False):
            return EXIT_OK
        every, some = self.board.failing_jobs()
        return EXIT_JOB_FAILED if every else EXIT_SOME_FAILED if some else EXIT_OK

    def _kill(self, why: str) -> None:
        """Exit now. The dispatcher sees this process go and kills every worker."""
        if self.view is not None:
            self.view.stop()
        self.out.live = None
        self.out.note(f"{why}: killing the running tasks and exiting")
        for stream in (self.out.stdout, self.err, sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(EXIT_KILLED)

    def _snapshot(self, scheduler: Scheduler) -> None:
        try:
            stats = scheduler.stats()
        except SchedulerBrokenError as exc:
            self.broken = str(exc)
            return
        except SchedulerError:
            return  # shutting down: keep the last picture
        with self.board.lock:
            self.board.workers = stats["workers"]
        if self.metrics is not None:
            self.metrics.on_stats(stats)

    # -- the summary -----------------------------------------------------

    def _summary(self, stopped_at: float, status_code: int) -> None:
        board, out = self.board, self.out
        elapsed = stopped_at - board.started
        every, some = board.failing_jobs()
        if out.mode == "json":
            with board.lock:
                jobs = [self._job_summary(r, stopped_at) for r in board.rows]
            out.json_line({"event": "procsched_summary", "name": None, "seconds": round(elapsed, 3), "jobs": jobs,
                           "worker_crashes": board.worker_exits["crashed"], "every_run_failed": every,
                           "exit_status": status_code})  # fmt: skip
            return
        lines = []
        if out.mode == "plain":
            headers, rows = board.job_table(time.monotonic())
            lines += ["", self.title, text_table(headers, rows), "", "workers (last seen)",
                      text_table(*board.worker_table())]  # fmt: skip
        lines.append("")
        if self.demo:
            from ._demo import verdict

            lines += verdict(board, elapsed, stopped_at)
        else:
            if every:
                lines.append(f"procsched: every run of {', '.join(every)} failed")
            lines.append(self._run_verdict(elapsed))
        out.write("\n".join(lines))

    def _job_summary(self, row: JobRow, until: float) -> dict[str, Any]:
        expected = row.expected(until)
        return {"name": row.name, "schedule": row.schedule, "runs": row.runs,
                "expected": None if expected is None else expected[0], **row.counts, "missed": row.missed,
                "lateness_p99": row.p99()}  # fmt: skip

    def _run_verdict(self, elapsed: float) -> str:
        with self.board.lock:
            totals = collections.Counter[str]()
            for row in self.board.rows:
                totals.update(row.counts)
        runs = sum(totals.values())
        parts = ", ".join(f"{totals[o]} {o}" for o in OUTCOME_COLUMNS)
        crashed = self.board.worker_exits["crashed"]
        return f"procsched: stopped after {elapsed:.1f} s: {runs} runs ({parts}); {crashed} worker crash(es)"

    def _route_logging(self) -> Callable[[], None]:
        log = logging.getLogger("procsched")
        name = self.args.log_level or ("info" if self.out.mode == "live" else "warning")
        level = logging.getLevelName(name.upper())
        if self.out.mode == "live":
            handler: logging.Handler = LogToBoard(self.board, level)
        else:
            handler = logging.StreamHandler(self.err)
            handler.setLevel(level)
            handler.setFormatter(logging.Formatter("procsched: %(message)s"))
        old_propagate, old_level = log.propagate, log.level
        log.addHandler(handler)
        log.propagate = False
        log.setLevel(level)

        def restore() -> None:
            log.removeHandler(handler)
            log.propagate = old_propagate
            log.setLevel(old_level)

        return restore
