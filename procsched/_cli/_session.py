"""The ``run`` command: start the jobs, watch them, stop on a signal or
``--duration``, summarise.

      main thread ─ starts the jobs, then every second reads Scheduler.stats()
      │             and redraws; on Ctrl-C, SIGTERM or --duration: shuts down
      listener thread (the Scheduler's) ─ events ─▶ Board (numbers per job)
                                                   └─▶ --plain / --json lines
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

from .._errors import SchedulerBrokenError, SchedulerError
from .._jobs import Job
from .._runtime._facade import Scheduler
from ._board import OUTCOME_COLUMNS, Board, JobRow, _duration, _schedule_text, text_table
from ._live import LiveView, LogToBoard, _have_rich
from ._lines import Output

EXIT_OK, EXIT_LOAD, EXIT_USAGE, EXIT_KILLED = 0, 1, 2, 130
EXIT_BROKEN = 3  # the dispatcher process died


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


# -- a session -----------------------------------------------------------------


class Session:
    """Start the jobs, watch them, stop, summarise."""

    def __init__(self, jobs: list[Job], label: str, args: argparse.Namespace, *, demo: bool = False) -> None:
        self.jobs = jobs
        self.label = label
        self.args = args
        self.demo = demo
        self.board = Board()
        if args.json:
            mode = "json"
        elif args.plain or not sys.stdout.isatty() or not _have_rich():
            mode = "plain"
        else:
            mode = "live"
        self.out = Output(mode, sys.stdout, self.board)
        self.view: LiveView | None = None
        self.stopper = Stopper()
        self.broken = ""  # why the scheduler broke, if it did

    def run(self) -> int:
        args = self.args
        workers = args.workers or (max(2, os.cpu_count() or 1) if self.demo else None)
        self.stopper.install()
        restore_logging = self._route_logging()
        scheduler = Scheduler(workers, runner=args.runner)
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

    def _session(self, scheduler: Scheduler) -> int:
        args, out = self.args, self.out
        # Wait for the pool to be up, so that start-up is not counted as lateness.
        scheduler.submit(int).result(timeout=60)
        self.board.started = time.monotonic()
        what = f"{len(self.jobs)} job{'s' if len(self.jobs) != 1 else ''} from {self.label}"
        where = f"{scheduler.workers} {'process' if args.runner == 'processes' else 'thread'} workers"
        self.title = f"procsched - {what} on {where}"
        if out.mode == "json":
            out.json_line({"event": "procsched_started", "name": None, "jobs": [
                {"name": job.name, "schedule": _schedule_text(job)} for job in self.jobs
            ], "workers": scheduler.workers, "runner": args.runner})  # fmt: skip
        elif out.mode == "plain":
            stop = f"for {args.duration:g} s" if args.duration else "until stopped (Ctrl-C)"
            out.note(f"starting {what} on {where}, {stop}")
        scheduler.add_listener(self.board.on_event)
        if out.mode != "live":
            scheduler.add_listener(out.on_event)
        for job in self.jobs:
            first_due = time.monotonic() + job.initial_delay
            try:
                handle = job.start(scheduler)
            except Exception as exc:  # noqa: BLE001 - say which job, then stop
                print(f"procsched: cannot start job {job.name!r}: {type(exc).__name__}: {exc}", file=sys.stderr)
                scheduler.shutdown(wait=True, cancel_futures=True)
                return EXIT_LOAD
            self.board.add(job, handle, first_due)
        if out.mode == "live":
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
        if self.view is not None:
            self.view.refresh(f"stopped after {stopped_at - self.board.started:.1f} s")
            self.view.stop()
            self.view = None
        self._summary(stopped_at)
        if self.broken:
            print(f"procsched: the scheduler broke: {self.broken}", file=sys.stderr)
            return EXIT_BROKEN
        return EXIT_OK

    def _kill(self, why: str) -> None:
        """Exit now. The dispatcher sees this process go and kills every worker."""
        if self.view is not None:
            self.view.stop()
        self.out.live = None
        self.out.note(f"{why}: killing the running tasks and exiting")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_KILLED)

    def _snapshot(self, scheduler: Scheduler) -> None:
        try:
            workers = scheduler.stats()["workers"]
        except SchedulerBrokenError as exc:
            self.broken = str(exc)
            return
        except SchedulerError:
            return  # shutting down: keep the last picture
        with self.board.lock:
            self.board.workers = workers

    # -- the summary -----------------------------------------------------

    def _summary(self, stopped_at: float) -> None:
        board, out = self.board, self.out
        elapsed = stopped_at - board.started
        if out.mode == "json":
            with board.lock:
                jobs = [self._job_summary(r, stopped_at) for r in board.rows]
            out.json_line({"event": "procsched_summary", "name": None, "seconds": round(elapsed, 3), "jobs": jobs,
                           "worker_crashes": board.worker_exits["crashed"]})  # fmt: skip
            return
        lines = []
        if out.mode == "plain":
            headers, rows = board.job_table(time.monotonic())
            lines += ["", self.title, text_table(headers, rows), "", "workers (last seen)",
                      text_table(*board.worker_table())]  # fmt: skip
        lines.append("")
        lines += self._demo_verdict(elapsed, stopped_at) if self.demo else [self._run_verdict(elapsed)]
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

    def _demo_verdict(self, elapsed: float, stopped_at: float) -> list[str]:
        board = self.board
        with board.lock:
            rows = list(board.rows)
        table: list[list[str]] = []
        healthy, kept = [], True
        for row in rows:
            expected = row.expected(stopped_at)
            exp_text = "-" if expected is None else f"{'' if expected[1] else '~'}{expected[0]}"
            bad = {o: n for o, n in row.counts.items() if o != "ok" and n}
            outcome = ", ".join([f"{row.counts['ok']} ok", *(f"{n} {o}" for o, n in bad.items())])
            table.append([row.name, row.schedule, str(row.runs), exp_text, _duration(row.p99()), outcome])
            if not bad:
                on_time = expected is None or row.runs >= expected[0] - 1
                kept = kept and on_time
                healthy.append(f"{row.name} {row.runs}/{exp_text}" + ("" if on_time else " (behind)"))
        crashes = sum(r.counts["crashed"] for r in rows)
        timeouts = sum(r.counts["timeout"] for r in rows)
        worst = max((r.p99() or 0.0 for r in rows if not any(r.counts[o] for o in ("error", "crashed", "timeout"))),
                    default=0.0)  # fmt: skip
        replaced = board.worker_exits["crashed"] + timeouts
        headline = "kept their schedule" if kept else "did NOT all keep their schedule"
        others = "no other job lost a run" if kept else "but some healthy jobs fell behind (see expected)"
        return [
            f"procsched demo: {elapsed:.1f} s on {len(board.workers)} worker processes",
            "",
            text_table(["job", "schedule", "runs", "expected", "lateness p99", "outcomes"], table),
            "",
            f"Healthy jobs {headline}: {', '.join(healthy)} runs; worst lateness p99 {_duration(worst)}.",
            f"{crashes} segfault(s) and {timeouts} timeout(s) each cost one run of their own job; "
            f"{replaced} worker process(es) were replaced; {others}.",
        ]

    def _route_logging(self) -> Callable[[], None]:
        log = logging.getLogger("procsched")
        if self.out.mode == "live":
            handler: logging.Handler = LogToBoard(self.board)
        else:
            handler = logging.StreamHandler(sys.stderr)
            handler.setLevel(logging.WARNING)
            handler.setFormatter(logging.Formatter("procsched: %(message)s"))
        old_propagate, old_level = log.propagate, log.level
        log.addHandler(handler)
        log.propagate = False
        if log.level == logging.NOTSET or log.level > logging.INFO:
            log.setLevel(logging.INFO)

        def restore() -> None:
            log.removeHandler(handler)
            log.propagate = old_propagate
            log.setLevel(old_level)

        return restore

