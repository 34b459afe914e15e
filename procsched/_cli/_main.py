"""Entry point: the command line, loading the jobs file, choosing the command.

Subcommands are registered in :func:`parser` (one ``add_parser`` each, with
its handler set by ``set_defaults(handler=...)``); :func:`main` calls the
handler of the one on the command line.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import traceback

from .._jobs import Job, JobsFileError, load_jobs_file
from .._secret import of_command
from . import _control, _next, _store_cmds, _web, _why
from ._args import port, positive_int, seconds, size
from ._demo import DEMO_SECONDS, MIN_WORKERS, run_demo

RUNNERS = ("processes", "threads", "ray")
POLICIES = ("priority", "due", "fifo")
LOG_LEVELS = ("debug", "info", "warning", "error")

EPILOG = """\
exit status:
  0    stopped cleanly (Ctrl-C, SIGTERM or --duration)
  1    the jobs file cannot be loaded, or a job cannot be started (reason on stderr)
  2    bad command line
  3    the dispatcher process died
  4    with --fail-on-error: some runs failed (error, crashed, timeout), but every job had a good run
  5    with --fail-on-error: every run of some job failed (the summary names the jobs)
  130  forced stop: a second Ctrl-C, or the grace ran out
"""


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``procsched`` console script and ``python -m procsched``."""
    args = parser().parse_args(argv)
    return int(args.handler(args))


def run_command(args: argparse.Namespace) -> int:
    from ._session import (  # (here: the store and web commands need none of the runtime)
        EXIT_LOAD,
        Session,
    )

    try:
        module, jobs = load_jobs_file(args.file)
        check_unique_names(jobs)
        if args.runner == "ray":  # Ray's nodes do not have the file: its functions travel by value
            import cloudpickle

            cloudpickle.register_pickle_by_value(module)
    except JobsFileError as exc:
        print(f"procsched: cannot load {args.file}: {exc}", file=sys.stderr)
        return EXIT_LOAD
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the file's own error: show where it happened
        print(_traceback_from(exc, args.file), end="", file=sys.stderr)
        print(f"procsched: cannot load {args.file}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_LOAD
    if args.secret_file is not None and args.store is None:
        print("procsched: --secret-file signs a store's jobs: it needs --store", file=sys.stderr)
        return 2
    try:  # the store's secret: --secret-file, else PROCSCHED_SECRET (see README, "Security")
        args.secret, warning = of_command(args.secret_file) if args.store is not None else (None, None)
    except (OSError, ValueError) as exc:
        print(f"procsched: cannot read the store's secret: {exc}", file=sys.stderr)
        return EXIT_LOAD
    if warning is not None:
        print(f"procsched: warning: {warning}", file=sys.stderr)
    return Session(jobs, os.path.basename(args.file), args).run()


def check_unique_names(jobs: list[Job]) -> None:
    """Two jobs of one file with one name: a JobsFileError naming both definitions."""
    seen: dict[str, Job] = {}
    for job in jobs:
        first = seen.setdefault(job.name, job)
        if first is not job:
            raise JobsFileError(
                f"two jobs are named {job.name!r}: {_where(first)} and {_where(job)}; "
                "give one of them another name (name=...)"
            )


def _where(job: Job) -> str:
    fn = inspect.unwrap(job.fn)
    try:
        path = inspect.getsourcefile(fn) or "?"
        line = inspect.getsourcelines(fn)[1]
    except (OSError, TypeError):
        return repr(job.fn)
    return f"{os.path.relpath(path) if not os.path.relpath(path).startswith('..') else path}:{line}"


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


def parser() -> argparse.ArgumentParser:
    from .. import __version__

    top = argparse.ArgumentParser(
        prog="procsched",
        description="Run Python jobs on a schedule, on a crash-proof pool of worker processes.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top.add_argument("--version", action="version", version=f"procsched {__version__}")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    # -- procsched run FILE.py
    run = commands.add_parser(
        "run",
        help="run the jobs declared in a jobs file",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Import FILE.py, start the jobs its @every, @cron and @once decorators declare, and show them live."
        ),
    )
    run.set_defaults(handler=run_command)
    run.add_argument("file", metavar="FILE.py", help="the jobs file")
    run.add_argument(
        "--workers",
        type=positive_int("--workers"),
        default=None,
        metavar="N",
        help="how many workers (default: the CPU count)",
    )
    run.add_argument("--runner", choices=RUNNERS, default="processes", help="where runs happen (default: processes)")
    run.add_argument("--policy", choices=POLICIES, default=None, help="which due task goes first (default: priority)")
    run.add_argument(
        "--timeout",
        type=seconds("--timeout"),
        default=None,
        metavar="S",
        help="default per-run timeout in seconds, for jobs without their own (default: none)",
    )
    run.add_argument(
        "--store",
        default=None,
        metavar="PATH_OR_URL",
        help="keep the jobs in a durable store (a SQLite file path, sqlite:///path or "
        "postgresql://...): each job is a keyed task named by its name; a restart goes on "
        "where it stopped; stored jobs the file no longer declares are removed at start "
        "(their history is kept)",
    )
    run.add_argument(
        "--secret-file",
        default=None,
        metavar="PATH",
        help="with --store: sign the stored jobs with the secret in PATH (one a line: the first signs, "
        "the others are accepted too); stored jobs whose signature does not match are not run "
        "(default: PROCSCHED_SECRET, comma-separated; none: stored jobs are trusted as code)",
    )
    run.add_argument(
        "--keep-others",
        action="store_true",
        help="with --store: keep (and run) the stored jobs this file does not declare, for a "
        "store shared with programs that declare other jobs",
    )
    run.add_argument(
        "--lease",
        type=seconds("--lease"),
        default=None,
        metavar="S",
        help="with --store: how long another instance on the store waits before it takes over "
        "the runs of this one if it dies (default 30, or lease= in the store URL)",
    )
    run.add_argument(
        "--mp-context",
        choices=("forkserver", "spawn", "fork"),
        default=None,
        dest="mp_context",
        help="how worker processes are started (default: forkserver)",
    )
    run.add_argument(
        "--max-tasks-per-worker",
        type=positive_int("--max-tasks-per-worker"),
        default=None,
        metavar="N",
        help="replace a worker process after N runs (default: never)",
    )
    run.add_argument(
        "--max-worker-memory",
        type=size,
        default=None,
        metavar="SIZE",
        help="replace a worker process whose memory (RSS) after a run exceeds SIZE: bytes, "
        "or with K, M, G (KiB, MiB, GiB) or KB, MB, GB (default: never)",
    )
    run.add_argument(
        "--no-capture",
        action="store_true",
        help="let runs write straight to this process's output as they go (to stderr with "
        "--json), instead of showing each run's output (its last 64 KiB) under its line",
    )
    _common(run, None)
    _web.add_run_options(run)
    run.add_argument(
        "--fail-on-error",
        action="store_true",
        help="exit 4 if any run failed, 5 if every run of some job failed (see exit status)",
    )
    run.add_argument(
        "--metrics-port",
        type=port,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics on PORT (0: any free port; needs procsched[metrics])",
    )
    run.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="address for --metrics-port (default 127.0.0.1; 0.0.0.0 for every interface)",
    )

    # -- procsched demo
    demo = commands.add_parser(
        "demo",
        help="watch healthy jobs keep their schedule next to crashing and hanging ones",
        description="A jobs file of healthy, segfaulting and hanging jobs, on worker "
        "processes: the bad jobs cost their own runs only.",
    )
    demo.set_defaults(
        handler=run_demo,
        metrics_port=None,
        fail_on_error=False,
        store=None,
        secret=None,
        secret_file=None,
        keep_others=False,
        policy=None,
        timeout=None,
        mp_context=None,
        lease=None,
        max_tasks_per_worker=None,
        max_worker_memory=None,
        no_capture=False,
    )
    demo.add_argument(
        "--workers",
        type=positive_int("--workers", MIN_WORKERS),
        default=None,
        metavar="N",
        help=f"how many worker processes, at least {MIN_WORKERS} (default: the CPU count, at least {MIN_WORKERS})",
    )
    _common(demo, DEMO_SECONDS)
    _web.add_run_options(demo)

    _next.add_parser(commands)
    _store_cmds.add_parsers(commands)
    _control.add_parsers(commands)
    _why.add_parser(commands)
    _web.add_parser(commands)
    # Further subcommands: add_parser(...) here, with set_defaults(handler=...).
    return top


def _common(p: argparse.ArgumentParser, duration: float | None) -> None:
    until = f"default {duration:g}" if duration else "default: run until stopped"
    p.add_argument(
        "--duration", type=seconds("--duration"), default=duration, metavar="S", help=f"stop after S seconds ({until})"
    )
    p.add_argument(
        "--grace",
        type=seconds("--grace"),
        default=10.0,
        metavar="S",
        help="on stop, wait at most S seconds for running tasks (default 10)",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON event per line (times in ISO 8601 UTC)")
    out.add_argument("--plain", action="store_true", help="plain lines, even on a terminal")
    p.add_argument("--tracebacks", action="store_true", help="show a failed run's whole traceback (default: one line)")
    level = p.add_mutually_exclusive_group()
    level.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default=None,
        help="procsched's own log messages (default: info in the live view, else warning)",
    )
    level.add_argument(
        "-v", "--verbose", dest="log_level", action="store_const", const="debug", help="--log-level debug"
    )
    level.add_argument("-q", "--quiet", dest="log_level", action="store_const", const="error", help="--log-level error")
