"""``procsched web --store S`` and ``procsched run jobs.py --web [HOST:]PORT``: the console.

    procsched web --store S [--host H] [--port P] [--read-only]
        open_existing(S) ──▶ StoreSource ──▶ Console (its own thread) ──▶ the main thread waits for
                                                                        Ctrl-C / SIGTERM
    procsched run jobs.py --web [HOST:]PORT [--web-read-only]   (and procsched demo --web ...)
        Session ──▶ start_console(session, scheduler) ──▶ ProgramSource ──▶ Console on its own thread

Each prints its login link (it carries the access token: random per start,
or ``PROCSCHED_WEB_TOKEN``) on stderr. Needs ``pip install "procsched[web]"``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from ._args import port

EXIT_OK = 0
EXIT_FAILED = 1  # the store cannot be opened, the address cannot be bound, or the web extra is missing
NEEDS_EXTRA = "the console needs the web extra: pip install 'procsched[web]'"


def add_parser(commands: Any) -> None:
    """Register ``procsched web``."""
    from .._web._model import DEFAULT_HOST, DEFAULT_PORT

    web = commands.add_parser(
        "web",
        help="serve the web console over a store (every instance sharing it)",
        description="Serve the web console over a durable store: the jobs of every "
        "instance that shares it, their runs, the instances; pause, resume, cancel, run now, backfill. "
        "Prints a login link (its token is random per start, or PROCSCHED_WEB_TOKEN).",
    )
    web.set_defaults(handler=web_command)
    web.add_argument(
        "--store",
        required=True,
        metavar="PATH_OR_URL",
        help="the store: a SQLite file path, sqlite:///path or postgresql://...",
    )
    web.add_argument(
        "--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST}: this machine only)"
    )
    web.add_argument("--port", type=port, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free port)")
    web.add_argument("--read-only", action="store_true", help="show, but offer and take no actions")
    web.add_argument(
        "--secret-file",
        default=None,
        metavar="PATH",
        help="the store's secret (as procsched run --secret-file; default: PROCSCHED_SECRET)",
    )


def add_run_options(run: argparse.ArgumentParser) -> None:
    """``--web [HOST:]PORT`` and ``--web-read-only`` for ``procsched run`` (and ``demo``)."""
    run.add_argument(
        "--web",
        type=_address,
        default=None,
        metavar="[HOST:]PORT",
        help="serve the web console for this program (host default 127.0.0.1; needs procsched[web])",
    )
    run.add_argument("--web-read-only", action="store_true", help="the --web console shows, but takes no actions")


def _address(text: str) -> tuple[str, int]:
    """``8765``, ``0.0.0.0:8765``, ``[::1]:8765`` -> (host, port)."""
    from .._web._model import DEFAULT_HOST

    host, sep, number = text.rpartition(":")
    if not sep:
        return DEFAULT_HOST, port(text)
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host:
        raise argparse.ArgumentTypeError(f"must be PORT or HOST:PORT, not {text!r}")
    return host, port(number)


def _announce(console: Any, stream: Any) -> None:
    print(f"procsched console at {console.url}", file=stream)
    print(f"  log in: {console.login_url}", file=stream)
    if console.access.read_only:
        print("  read-only: no actions", file=stream)
    stream.flush()


def web_command(args: argparse.Namespace) -> int:
    try:
        from .._web import Console
        from .._web._store_source import StoreSource
    except ImportError:
        print(f"procsched: {NEEDS_EXTRA}", file=sys.stderr)
        return EXIT_FAILED
    from .._secret import of_command
    from ._store_cmds import open_existing

    try:  # the store's secret: --secret-file, else PROCSCHED_SECRET (see README, "Security")
        secret, warning = of_command(args.secret_file)
    except (OSError, ValueError) as exc:
        print(f"procsched: cannot read the store's secret: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if warning is not None:
        print(f"procsched: warning: {warning}", file=sys.stderr)
    store = open_existing(args.store, write=True, secret=secret)  # never creates one; the reason on stderr
    if store is None:
        return EXIT_FAILED
    source = StoreSource(store, args.store)
    try:
        console = Console(source, host=args.host, port=args.port, read_only=args.read_only)
    except OSError as exc:
        source.close()
        print(f"procsched: cannot serve the console on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        console.start()
        _announce(console, sys.stderr)
        stop.wait()
    except OSError as exc:
        print(f"procsched: the console failed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        console.close()
    return EXIT_OK


def start_console(session: Any, scheduler: Any) -> Any:
    """The console beside a running program (``--web``), serving already;
    None (the reason printed) if it cannot start."""
    try:
        from .._web import Console
        from .._web._program import ProgramSource
        from .._web._words import schedule_of
    except ImportError:
        print(f"procsched: {NEEDS_EXTRA}", file=session.err)
        return None
    host, port = session.args.web
    source = ProgramSource(scheduler, session.title or "procsched")
    with session.board.lock:
        rows = list(session.board.rows)
    for row in rows:
        if row.handle is not None and row.job is not None:
            source.add(row.handle, schedule_of(row.job))
    try:
        console = Console(source, host=host, port=port, read_only=session.args.web_read_only)
        console.start()
    except OSError as exc:
        print(f"procsched: cannot serve the console on {host}:{port}: {exc}", file=session.err)
        return None
    _announce(console, session.err)
    session.title += f" - console at {console.url}"
    return console
