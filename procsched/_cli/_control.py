"""``procsched pause | resume | cancel | run-now KEY --store S``: control from outside.

    procsched pause KEY --store S     ──▶ store.pause(KEY)    ┐ conditional writes of the task's state: the
    procsched resume KEY --store S    ──▶ store.resume(KEY)   │ instance that runs it follows them at its
    procsched cancel KEY --store S    ──▶ store.cancel(KEY)   ┘ re-read of the store (<= 1 s); cancel removes
                                                                the task (its history is kept)
    procsched run-now KEY --store S   ──▶ store.ask(KEY, "run_now") ──▶ request id (printed)
              [--wait S]              ──▶ store.request(id) until the instance that runs KEY answered,
                                          or S seconds passed

Each prints one line (``--json``: one JSON object) and exits 0 when done,
1 when it cannot be (no store, an unknown key, an action the task refuses:
the reason on stderr), 3 when ``--wait`` ran out before an answer (the
request stands: an instance that runs the task carries it out when it takes
it). The store is never created (``_store_cmds.open_existing``).

Waiting for an answer: the store offers no notification (SQLite has none;
the PostgreSQL store does not LISTEN/NOTIFY), so ``--wait`` reads the
request (one row, by its id) at growing intervals - 50 ms, doubling, at
most 500 ms - until the answer or the deadline: an instance takes requests
at its re-read (at most a second apart), so the answer comes within about
a second of being asked when one runs the task, and a wait costs the store
a handful of one-row reads.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from .._errors import StoreError
from ._args import seconds
from ._store_cmds import EXIT_STORE, no_task, one_line, open_existing, store_option

EXIT_OK = 0
EXIT_NO_ANSWER = 3
#: The first and the longest interval between two reads of a request while waiting for its answer (s).
FIRST_WAIT, MAX_WAIT = 0.05, 0.5
#: The longest --wait (s).
MAX_WAIT_OPTION = 3600.0
ACTIONS = ("pause", "resume", "cancel", "run-now")
EPILOG = """\
exit status:
  0    done (run-now: asked, or with --wait answered: the run started)
  1    the store cannot be opened (none is ever created), no such key, or the action was refused
  2    bad command line
  3    run-now --wait: no answer within S seconds (the request stands)
"""


def add_parsers(commands: Any) -> None:
    helps = {
        "pause": (
            "pause a stored task: no scheduled run of it starts until it is resumed",
            "Pause the keyed task KEY in the store: the instance that runs it follows within a second "
            "(a run in flight finishes). Pausing a paused task changes nothing.",
        ),
        "resume": (
            "resume a paused stored task at its next slot from now",
            "Resume the paused task KEY: the instance that runs it goes on at its next slot from now.",
        ),
        "cancel": (
            "cancel a stored task: it never runs again (its history is kept)",
            "Cancel the keyed task KEY: it is removed from the store (its history is kept); the "
            "instance that runs it drops it within a second, and a run in flight finishes.",
        ),
        "run-now": (
            "ask the instance that runs a stored task to run it once now",
            "Ask the instance that runs KEY to run it once now, outside its schedule (its next slot "
            "does not move; a paused task stays paused). Prints the request's id; --wait S waits "
            "for the instance's answer.",
        ),
    }

    for action in ACTIONS:
        short, long = helps[action]
        p = commands.add_parser(
            action, help=short, description=long, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        p.set_defaults(handler=control_command, action=action)
        p.add_argument("key", metavar="KEY", help="the task's key")
        store_option(p)
        if action == "run-now":
            p.add_argument(
                "--wait",
                type=seconds("--wait"),
                default=None,
                metavar="S",
                help="wait at most S seconds for the answer (exit 3 if none came: the request stands)",
            )
        p.add_argument("--json", action="store_true", help="print one JSON object instead of a line")


def control_command(args: argparse.Namespace) -> int:
    if args.action == "run-now" and args.wait is not None and args.wait > MAX_WAIT_OPTION:
        return _fail(f"--wait must be at most {MAX_WAIT_OPTION:g} seconds, not {args.wait:g}")
    store = open_existing(args.store, write=True)
    if store is None:
        return EXIT_STORE
    key = args.key
    try:
        with store:
            if args.action == "run-now":
                return _run_now(store, args)
            change = {"pause": store.pause, "resume": store.resume, "cancel": store.cancel}[args.action]
            try:
                changed = change(key)
            except KeyError:
                return no_task(key)
    except StoreError as exc:
        return _fail(f"cannot write the store: {one_line(exc)}")
    if args.action == "cancel" and not changed:
        return no_task(key)
    if args.action == "resume" and not changed:
        return _fail(f"cannot resume {key!r}: it is not paused")
    said = {
        ("pause", True): f"paused {key!r}: the instance that runs it follows within a second",
        ("pause", False): f"{key!r} is paused already",
        ("resume", True): f"resumed {key!r}: it goes on at its next slot from now",
        ("cancel", True): f"cancelled {key!r}: removed from the store (its history is kept); the instance that "
        "runs it drops it within a second",
    }[args.action, changed]
    return _done(args, f"procsched: {said}", {"key": key, "action": args.action, "ok": True, "changed": changed})


def _run_now(store: Any, args: argparse.Namespace) -> int:
    from .._web._store_source import request_of

    key = args.key
    try:
        ident = store.ask(key, "run_now", asked_by=f"cli {_me()}")
    except KeyError:
        return no_task(key)
    asked = request_of(store.request(ident))
    if args.wait is None:
        return _done(
            args,
            f"procsched: asked the instance that runs {key!r} to run it now (request {ident}); it "
            "starts the run within a second (--wait S waits for its answer)",
            _json(asked),
        )
    answer = wait_answer(store, ident, args.wait)
    if answer is None:  # forgotten meanwhile (asked a day ago): cannot be
        return _fail(f"request {ident} is gone from the store")
    seen = request_of(answer)
    if seen.state == "done":
        run = f"run {seen.run}" if seen.run is not None else "a run"
        return _done(args, f"procsched: {seen.taken_by} started {run} of {key!r} now (request {ident})", _json(seen))
    if seen.state == "refused":
        return _fail(f"{key!r} was not run now: {seen.error} (request {ident})", seen, args)
    where = (
        f"taken by {seen.taken_by}, not answered"
        if seen.state == "taken"
        else "no instance took it (is one running the task, not on standby?)"
    )
    _fail(
        f"no answer to request {ident} within {args.wait:g} s: {where}; it stands: the instance that runs "
        f"{key!r} carries it out when it takes it",
        seen,
        args,
    )
    return EXIT_NO_ANSWER


def wait_answer(store: Any, ident: int, timeout: float) -> Any:
    """The request ``ident`` once answered, or as it stands after ``timeout``
    seconds (None: unknown). Reads it at growing intervals (see the module
    docstring: the store offers nothing to block on)."""
    deadline = time.monotonic() + timeout
    pause = FIRST_WAIT
    while True:
        found = store.request(ident)
        left = deadline - time.monotonic()
        if found is None or found.done or left <= 0:
            return found
        time.sleep(min(pause, left))
        pause = min(pause * 2, MAX_WAIT)


def _me() -> str:
    import os
    import socket

    return f"{socket.gethostname()}/{os.getpid()}"


def _json(request: Any) -> dict[str, Any]:
    return {"key": request.ref, "action": "run-now", "ok": request.state != "refused", "request": request.api()}


def _done(args: argparse.Namespace, line: str, record: dict[str, Any]) -> int:
    print(json.dumps(record) if args.json else line)
    return EXIT_OK


def _fail(message: str, request: Any = None, args: argparse.Namespace | None = None) -> int:
    print(f"procsched: {message}", file=sys.stderr)
    if request is not None and args is not None and args.json:
        print(json.dumps({**_json(request), "ok": False, "error": message}))
    return EXIT_STORE
