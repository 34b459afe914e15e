"""Entry point: the command line, loading the jobs file, choosing the command."""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
import traceback

from .._jobs import JobsFileError, declared_jobs, load_jobs_file
from ._session import EXIT_LOAD, Session

DEMO_MODULE = "procsched._demo_jobs"
DEMO_SECONDS = 20.0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``procsched`` console script and ``python -m procsched``."""
    args = _parser().parse_args(argv)
    if args.command == "run":
        try:
            _, jobs = load_jobs_file(args.file)
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
    run.add_argument("--runner", choices=("processes", "threads"), default="processes",
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

