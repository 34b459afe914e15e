"""The ``run`` command (and the demo): start the jobs, watch them, stop on a
signal or ``--duration``, summarise.

      main thread ─ (with --store: syncs the store's jobs with the file) starts
      │             the scheduler, adds the listeners at once, starts the jobs,
      │             then every second reads Scheduler.stats() and redraws (and
      │             feeds the metrics and the store watch); on Ctrl-C, SIGTERM
      │             or --duration: shuts the scheduler down
      listener thread (the Scheduler's) ─ events ─▶ Board (numbers per job)
                                                   ├─▶ --plain / --json lines
                                                   └─▶ Prometheus metrics (--metrics-port)

The listeners are added right after ``Scheduler()`` returns, before the
pool is waited for and before the jobs are started: with a store the
scheduler resumes the stored jobs - and runs their missed slots - at once,
and every one of those runs is reported too (the board finds a job's row by
its name, which is its key).
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import shutil
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
from ._board import Board, JobRow, pool_text, schedule_text, text_table, wrap
from ._lines import Lines, guard_streams
from ._live import LiveView, LogToBoard, have_rich
from ._store_cmds import one_line, store_label, sync_jobs
from ._store_view import Note, StoreWatch, recovered_notes, startup_notes
from ._verdict import verdict

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
#: The name of the run that waits for the pool (its events are not the jobs').
WARM_UP = "procsched: the pool's first run"


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
    """The Scheduler the command line asks for, capturing each run's output
    (unless ``--no-capture``). A ``lease=`` in the store URL applies unless
    ``--lease`` is given (the option wins)."""
    given = vars(args)
    options = {name: given[name] for name in SCHEDULER_OPTIONS if given[name] is not None}
    return Scheduler(workers, runner=args.runner, capture_output=not args.no_capture, **options)


#: The ``Scheduler()`` options ``procsched run`` passes on when given (the option's dest is the keyword).
SCHEDULER_OPTIONS = (
    "policy",
    "timeout",
    "mp_context",
    "store",
    "lease",
    "max_tasks_per_worker",
    "max_worker_memory",
    "secret",
)


def _not_warm_up(listener: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def on_event(event: dict[str, Any]) -> None:
        if event["name"] != WARM_UP:
            listener(event)

    return on_event


class Session:
    """Start the jobs, watch them, stop, summarise."""

    def __init__(self, jobs: list[Job], label: str, args: argparse.Namespace, *, demo: bool = False) -> None:
        self.jobs = jobs
        self.label = label
        self.args = args
        self.demo = demo
        self.store: str | None = args.store
        self.board = Board(tracebacks=args.tracebacks, keyed=self.store is not None)
        for job in jobs:
            self.board.add_job(job)
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
        self.watch: StoreWatch | None = None
        self.pending_notes: list[Note] = []  # said once the "starting" line is out
        self.live_width = 0  # the live view's last width, for the summary under it

    def run(self) -> int:
        args = self.args
        if args.metrics_port is not None:
            from .._metrics import Metrics

            try:
                self.metrics = Metrics.serve(args.metrics_port, args.metrics_host)
            except (ImportError, OSError) as exc:
                print(
                    f"procsched: cannot serve metrics on {args.metrics_host}:{args.metrics_port}: {exc}",
                    file=sys.stderr,
                )
                return EXIT_LOAD
        if self.store is not None:
            snapshot = sync_jobs(
                self.store, [job.name for job in self.jobs], keep_others=args.keep_others, secret=args.secret
            )
            if snapshot is None:
                return EXIT_LOAD
            self.pending_notes = startup_notes(store_label(self.store), snapshot, self.jobs)
            self.watch = StoreWatch(store_label(self.store), snapshot.live)
        stdout, self.err, restore_streams = guard_streams(self.mode, self.board.stray, ray=args.runner == "ray")
        self.out.stdout = stdout
        self.out.notes = self.err if self.mode == "json" else stdout
        self.stopper.install()
        restore_logging = self._route_logging()
        started_wall = time.time()
        try:
            scheduler = make_scheduler(args, args.workers)
        except BaseException as exc:
            self.stopper.restore()
            restore_logging()
            restore_streams()
            if isinstance(exc, StoreError):
                print(f"procsched: cannot open the store: {one_line(exc)}", file=sys.stderr)
                return EXIT_LOAD
            if isinstance(exc, (ValueError, TypeError, SchedulerError)):  # an option the scheduler refuses
                print(f"procsched: cannot start the scheduler: {one_line(exc)}", file=sys.stderr)
                return EXIT_LOAD
            raise
        # At once: with a store, the stored jobs run from now on (see the module docstring).
        listeners = [self.board.on_event]
        if self.mode != "live":
            listeners.append(self.out.on_event)
        if self.metrics is not None:
            self.metrics.attempts = {
                job.name: job.options["retry"].attempts for job in self.jobs if job.options.get("retry") is not None
            }
            listeners.append(self.metrics.on_event)
            self.metrics.stats_source = scheduler.stats
        for listener in listeners:
            scheduler.add_listener(_not_warm_up(listener))
        try:
            if self.store is not None:
                self.pending_notes += recovered_notes(scheduler, self.jobs, started_wall - 1.0)
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
        what = f"{len(self.jobs)} job{'s' if len(self.jobs) != 1 else ''} from {self.label}"
        where = pool_text(scheduler.workers, args.runner)
        self.title = f"procsched - {what} on {where}"
        if out.mode == "json":
            out.json_line(
                {
                    "event": "procsched_started",
                    "name": None,
                    "jobs": [{"name": job.name, "schedule": schedule_text(job)} for job in self.jobs],
                    "workers": scheduler.workers,
                    "runner": args.runner,
                    "store": None if self.store is None else store_label(self.store),
                    "metrics": None if self.metrics is None else self.metrics.url,
                }
            )
        elif out.mode == "plain":
            stop = f"for {args.duration:g} s" if args.duration else "until stopped (Ctrl-C)"
            out.note(f"starting {what} on {where}, {stop}")
            if self.metrics is not None:
                out.note(f"metrics at {self.metrics.url}")
        for note in self.pending_notes:
            self.say(note)
        # Wait for the pool to be up, so that start-up is not counted as lateness.
        warm_up = scheduler.schedule(int, name=WARM_UP)
        warm_up.result(timeout=START_TIMEOUT)
        self.board.warm_up_worker = warm_up.runs[-1].worker if warm_up.runs else None
        self.board.started = time.monotonic()
        for job in self.jobs:
            first_due = time.monotonic() + job.initial_delay
            try:
                handle = job.start(scheduler, job.name if self.store is not None else None)
            except Exception as exc:  # noqa: BLE001 - say which job, then stop
                print(f"procsched: cannot start job {job.name!r}: {type(exc).__name__}: {exc}", file=self.err)
                scheduler.shutdown(wait=True, cancel_futures=True)
                return EXIT_LOAD
            self.board.attach(job, handle, first_due)
        if args.web is not None:
            self.console = _web.start_console(self, scheduler)
            if self.console is None:
                scheduler.shutdown(wait=True, cancel_futures=True)
                return EXIT_LOAD
        if out.mode == "live":
            self.view = LiveView(out, self.board, self.title)
            if self.metrics is not None:
                self.say(Note("procsched_metrics", None, f"metrics at {self.metrics.url}", {}))
            self.view.start()
        reason = self._watch(scheduler)
        return self._stop(scheduler, reason)

    def say(self, note: Note) -> None:
        """Tell the operator ``note`` once: a plain line, a JSON record, a line in the live view."""
        if self.out.mode == "json":
            self.out.json_line({"event": note.event, "name": note.name, **note.fields, "message": note.text})
        elif self.out.mode == "plain":
            self.out.note(note.text)
        else:
            with self.board.lock:
                self.board.recent.append(note.text)

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
            self.live_width = self.view.console.size[0]
            self.view.stop()
            self.view = None
        status_code = self._exit_status()
        self._summary(stopped_at, status_code)
        if self.broken:
            print(f"procsched: the scheduler broke: {self.broken}", file=self.err, flush=True)
            return EXIT_BROKEN
        return status_code

    def _exit_status(self) -> int:
        if not self.args.fail_on_error:
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
        if self.watch is not None and "store" in stats:
            for note in self.watch.update(stats["store"]):
                self.say(note)
            with self.board.lock:
                self.board.store_status = self.watch.status

    # -- the summary -----------------------------------------------------

    def _summary(self, stopped_at: float, status_code: int) -> None:
        board, out = self.board, self.out
        elapsed = stopped_at - board.started
        every, _some = board.failing_jobs()
        if out.mode == "json":
            with board.lock:
                jobs = [self._job_summary(r, stopped_at) for r in board.rows]
            out.json_line(
                {
                    "event": "procsched_summary",
                    "name": None,
                    "seconds": round(elapsed, 3),
                    "jobs": jobs,
                    "worker_crashes": board.worker_exits["crashed"],
                    "every_run_failed": every,
                    "exit_status": status_code,
                }
            )
            return
        width = self._width()
        lines = []
        if out.mode == "plain":
            headers, rows = board.job_table(time.monotonic(), width)
            lines += [
                "",
                self.title,
                text_table(headers, rows),
                "",
                "workers (last seen)",
                text_table(*board.worker_table()),
            ]
        lines.append("")
        if self.demo:
            lines += verdict(board, elapsed, stopped_at, width)
        else:
            if every:
                lines += wrap(f"procsched: every run of {', '.join(every)} failed", width)
            lines += wrap(self._run_verdict(elapsed), width)
        out.write("\n".join(lines))

    def _width(self) -> int | None:
        """The terminal's width to fit the summary in (None: not a terminal)."""
        if self.view is not None or self.mode == "live":
            return int(self.live_width or shutil.get_terminal_size().columns)
        stream = self.out.stdout
        try:
            return os.get_terminal_size(stream.fileno()).columns if stream.isatty() else None
        except (OSError, ValueError, AttributeError):
            return None

    def _job_summary(self, row: JobRow, until: float) -> dict[str, Any]:
        expected = row.expected(until)
        return {
            "name": row.name,
            "schedule": row.schedule,
            "runs": row.runs,
            "expected": None if expected is None else expected[0],
            **row.counts,
            "retries": row.retries,
            "missed": row.missed,
            "skipped": row.skipped.total(),
            "skipped_by_reason": dict(row.skipped),
            "lateness_p99": row.p99(),
        }

    def _run_verdict(self, elapsed: float) -> str:
        with self.board.lock:
            totals = collections.Counter[str]()
            retries = skipped = 0
            for row in self.board.rows:
                totals.update(row.counts)
                retries += row.retries
                skipped += row.skipped.total()
        runs = sum(totals.values())
        parts = ", ".join(f"{totals[o]} {o}" for o in self.board.outcomes())
        crashed = self.board.worker_exits["crashed"]
        again = f", {retries} retr{'y' if retries == 1 else 'ies'}" if retries else ""
        again += f"; {skipped} skipped slot{'' if skipped == 1 else 's'}" if skipped else ""
        return f"procsched: stopped after {elapsed:.1f} s: {runs} runs ({parts}){again}; {crashed} worker crash(es)"

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
