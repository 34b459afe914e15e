"""The ``procsched`` command: run a jobs file with a live view, or the demo.

    procsched run FILE.py [--workers N] [--runner processes|threads|ray] [--duration S] [--json | --plain]
    procsched demo [--duration S] [--workers N] [--json | --plain]

      main thread ─ loads the jobs file, starts its jobs, then every second
      │             reads Scheduler.stats() and redraws the table; on Ctrl-C,
      │             SIGTERM or --duration: shuts the scheduler down
      listener thread (the Scheduler's) ─ events ─▶ Board (numbers per job)
                                                   └─▶ --plain / --json lines

Output: on a terminal with ``rich`` installed (``pip install procsched[cli]``),
a live table per job and per worker; otherwise (no rich, not a terminal, or
``--plain``) one line per finished run and per worker change, then the table
once at the end; ``--json`` prints one JSON object per line, per event, for
log collectors. Status notes go to stdout, except with ``--json`` (stderr).

Stopping: the first Ctrl-C (or SIGTERM) cancels every task that is not
running and lets the running ones finish, for at most ``--grace`` seconds; a
second Ctrl-C, or the grace running out, exits at once, and the dispatcher
process then kills the workers (it watches this process). Exit status: 0
after a clean stop, 1 if the jobs file cannot be loaded or started (the
reason on stderr), 2 for a bad command line, 3 if the dispatcher process
died, 130 after a forced stop (a second signal, or the grace ran out).
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import logging
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, TextIO

from ._core import Priority
from ._errors import SchedulerBrokenError, SchedulerError
from ._events import RUN_END, RUN_MISSED, TASK_CANCELLED, WORKER_EXITED, WORKER_STARTED
from ._handle import TaskHandle
from ._jobs import Job, JobsFileError, declared_jobs, load_jobs_file
from ._runtime._facade import Scheduler

EXIT_OK, EXIT_LOAD, EXIT_USAGE, EXIT_KILLED = 0, 1, 2, 130
EXIT_BROKEN = 3  # the dispatcher process died
#: Lateness samples kept per job for the p99 (the most recent ones).
LATENESS_WINDOW = 10_000
DEMO_MODULE = "procsched._demo_jobs"
DEMO_SECONDS = 20.0
OUTCOME_COLUMNS = ("ok", "error", "crashed", "timeout")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``procsched`` console script and ``python -m procsched``."""
    args = _parser().parse_args(argv)
    if args.command == "run":
        try:
            module, jobs = load_jobs_file(args.file)
            if args.runner == "ray":  # Ray's nodes do not have the file: its functions travel by value
                import cloudpickle

                cloudpickle.register_pickle_by_value(module)
        except JobsFileError as exc:
            print(f"procsched: cannot load {args.file}: {exc}", file=sys.stderr)
            return EXIT_LOAD
        except (Exception, SystemExit) as exc:  # the file's own error: show where it happened
            print(_traceback_from(exc, args.file), end="", file=sys.stderr)
            print(f"procsched: cannot load {args.file}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return EXIT_LOAD
        return Session(jobs, os.path.basename(args.file), args).run()
    importlib.import_module(DEMO_MODULE)
    args.runner = "processes"  # a segfault in a thread would take everything down: that is the point
    return Session(declared_jobs(DEMO_MODULE), "the demo jobs", args, demo=True).run()


def _traceback_from(exc: BaseException, path: str) -> str:
    """The traceback from the jobs file's first frame on (not procsched's or importlib's)."""
    tb = exc.__traceback__
    while tb is not None and not _same_file(tb.tb_frame.f_code.co_filename, path):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="procsched", description="Run Python jobs on a schedule, on a crash-proof pool of worker processes."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(p: argparse.ArgumentParser, duration: float | None, workers: str) -> None:
        p.add_argument("--workers", type=_positive_int, default=None, metavar="N",
                       help=f"how many workers (default: {workers})")  # fmt: skip
        until = f"default {duration:g}" if duration else "default: run until stopped"
        p.add_argument("--duration", type=_seconds, default=duration, metavar="S",
                       help=f"stop after S seconds ({until})")  # fmt: skip
        p.add_argument("--grace", type=_seconds, default=10.0, metavar="S",
                       help="on stop, wait at most S seconds for running tasks (default 10)")  # fmt: skip
        out = p.add_mutually_exclusive_group()
        out.add_argument("--json", action="store_true", help="print one JSON event per line")
        out.add_argument("--plain", action="store_true", help="plain lines, even on a terminal")

    run = commands.add_parser("run", help="run the jobs declared in a jobs file", description=(
        "Import FILE.py, start the jobs its @every / @once decorators declare, and show them live."))  # fmt: skip
    run.add_argument("file", metavar="FILE.py", help="the jobs file")
    run.add_argument("--runner", choices=("processes", "threads", "ray"), default="processes",
                     help="where runs happen (default: processes)")  # fmt: skip
    common(run, None, "the CPU count")
    demo = commands.add_parser("demo", help="watch healthy jobs keep their schedule next to crashing and hanging ones")
    common(demo, DEMO_SECONDS, "the CPU count, at least 2")
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {value}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


# -- the numbers -------------------------------------------------------------


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


# -- output ------------------------------------------------------------------


class Output:
    """Where lines go. Plain: a line per finished run and per worker change.
    JSON: every event as one JSON object per line. Live: nothing per event."""

    def __init__(self, mode: str, stdout: TextIO, board: Board) -> None:
        self.mode = mode  # "live", "plain" or "json"
        self.stdout = stdout
        self.notes = sys.stderr if mode == "json" else stdout
        self.board = board
        self.lock = threading.Lock()
        self.live: Any = None
        self.closed = threading.Event()  # the reader of stdout went away

    def write(self, text: str, stream: TextIO | None = None) -> None:
        with self.lock:
            if self.live is not None:
                self.live.console.print(text, markup=False, highlight=False)
                return
            stream = stream or self.stdout
            if stream is self.stdout and self.closed.is_set():
                return
            try:
                stream.write(text + "\n")
                stream.flush()
            except BrokenPipeError:  # e.g. `procsched run jobs.py --json | head`: stop, quietly
                if stream is self.stdout:
                    devnull = os.open(os.devnull, os.O_WRONLY)
                    os.dup2(devnull, stream.fileno())  # so that the flush at exit cannot fail
                    os.close(devnull)
                    self.closed.set()

    def note(self, text: str) -> None:
        self.write(f"procsched: {text}", self.notes)

    def json_line(self, record: dict[str, Any]) -> None:
        self.write(json.dumps({"ts": round(time.time(), 6), **record}, default=str))

    def on_event(self, event: dict[str, Any]) -> None:
        if self.mode == "json":
            first = {"event": event.pop("event"), "name": event.pop("name", None)}
            self.json_line({**first, **event})
        elif self.mode == "plain":
            line = self._plain(event)
            if line:
                self.write(line)

    def _plain(self, e: dict[str, Any]) -> str | None:
        stamp = f"{time.monotonic() - self.board.started:8.2f}s"
        kind = e["event"]
        if kind in (WORKER_STARTED, WORKER_EXITED):
            if kind == WORKER_STARTED:
                what = "started" if e["slot"] is None else f"started (slot {e['slot']})"
            else:
                how = e["signal"] or f"exit code {e['exitcode']}"
                what = f"exited: {how}" + (", crashed" if e["crashed"] else "")
            return f"{stamp}  worker {e['worker']} {what}"
        name = _shorten(e["name"] or f"task {e['task_id']}", 20)
        if kind in RUN_END.values():
            text = (f"{stamp}  {name:<20} run {e['run']:<4} {e['outcome']:<9} {_duration(e['duration']):>9}"
                    f"  late {_duration(e['lateness']):>9}  worker {e['worker']}")  # fmt: skip
            return text + (f"  {e['error']}" if e["error"] else "")
        if kind == RUN_MISSED:
            return f"{stamp}  {name:<20} run {e['run']:<4} skipped {e['missed']} missed slot(s)"
        if kind == TASK_CANCELLED:
            return f"{stamp}  {name:<20} cancelled"
        return None  # run_started: too chatty for a line each


class LiveView:
    """The rich live table (main thread only)."""

    def __init__(self, output: Output, board: Board, title: str) -> None:
        from rich.console import Console
        from rich.live import Live

        self.board = board
        self.title = title
        self.console = Console(file=output.stdout)
        self.live = Live(console=self.console, auto_refresh=False, transient=False,
                         redirect_stdout=True, redirect_stderr=True)  # fmt: skip
        output.live = self.live

    def start(self) -> None:
        self.live.start()
        self.refresh()

    def refresh(self, status: str | None = None) -> None:
        """Redraw; ``status`` replaces "up N s - Ctrl-C to stop" in the title."""
        if status is None:
            status = f"up {time.monotonic() - self.board.started:.0f} s - Ctrl-C to stop"
        self.live.update(self.render(status), refresh=True)

    def stop(self) -> None:
        self.live.stop()

    def render(self, status: str) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        board = self.board
        jobs = Table(title=f"{self.title} - {status}", title_justify="left", expand=False)
        headers, rows = board.job_table(time.monotonic())
        for i, header in enumerate(headers):
            jobs.add_column(header, justify="left" if i < 3 else "right", no_wrap=True)
        for row in rows:
            styled = list(row)
            for i, outcome in enumerate(OUTCOME_COLUMNS, start=4):
                if outcome != "ok" and row[i] != "0":
                    styled[i] = f"[bold red]{row[i]}[/]"
            jobs.add_row(*styled)
        workers = Table(title="workers", title_justify="left")
        headers, rows = board.worker_table()
        for i, header in enumerate(headers):
            workers.add_column(header, justify="left" if i == 2 else "right", no_wrap=True)
        for row in rows:
            workers.add_row(*row)
        parts: list[Any] = [jobs, workers]
        with board.lock:
            recent = list(board.recent)
        if recent:
            parts.append(Text("recent: " + "\n        ".join(recent), style="dim"))
        return Group(*parts)


class LogToBoard(logging.Handler):
    """In live mode, procsched's own log lines go to the 'recent' list."""

    def __init__(self, board: Board) -> None:
        super().__init__(logging.INFO)
        self.board = board

    def emit(self, record: logging.LogRecord) -> None:
        with self.board.lock:
            self.board.recent.append(_shorten(record.getMessage(), 110))


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
        kind = {"processes": "process", "threads": "thread"}.get(args.runner, args.runner.capitalize())
        where = f"{scheduler.workers} {kind} workers"
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


def _have_rich() -> bool:
    try:
        import rich.live  # noqa: F401
    except ImportError:
        return False
    return True
