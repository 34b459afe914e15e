"""The ``procsched`` command: run a jobs file with a live view, or the demo.

    procsched run FILE.py [--workers N] [--runner R] [--policy P] [--timeout S] [--mp-context M]
                          [--store S [--keep-others] [--lease S]] [--max-tasks-per-worker N]
                          [--max-worker-memory SIZE] [--no-capture]
                          [--duration S] [--grace S] [--json | --plain] [--tracebacks]
                          [--log-level L | -v | -q] [--fail-on-error] [--metrics-port PORT]
    procsched demo [--workers N] [--duration S] [--json | --plain] ...
    procsched next "EXPR" [--tz ZONE] [-n N] [--after ISO] [--json]
    procsched jobs | history [KEY] [--skipped] | remove KEY  --store S [--json]
    procsched pause | resume | cancel | run-now KEY --store S [--wait S] [--json]
    procsched web --store S [--host H] [--port P] [--read-only]
    procsched --version

Modules, by role::

    _main.py     the command line and its handlers (entry point: main)
    _args.py     the options' value converters (seconds, whole numbers, sizes, ports)
    _session.py  a run: start the jobs, watch, stop on a signal or --duration, summarise
    _board.py    the numbers per job and per worker, fed by the scheduler's events
    _lines.py    plain lines and JSON Lines; keeps job output off the CLI's own stream
    _live.py     the rich live view (readable from 80 x 24)
    _times.py    monotonic scheduler times -> wall-clock times, in one place
    _demo.py     the demo command
    _verdict.py  the demo's verdict: did the healthy jobs keep their schedule?
    _next.py     procsched next: a cron expression's next fire times
    _store_cmds.py  procsched jobs / history / remove, run --store's sync with the jobs file, and
                    opening a store without ever creating one
    _control.py  procsched pause / resume / cancel / run-now: control from outside, through the store
    _web.py      procsched web, and run --web: the console
    _store_view.py  what run --store tells: resumed jobs, missed slots, recoveries, standby, take-overs

Output: on a terminal with ``rich`` installed (``pip install procsched[cli]``),
a live table per job and per worker, with what the latest runs printed under
it; otherwise (no rich, not a terminal, or ``--plain``) one line per finished
run (its output framed under it) and per worker change, then the table once
at the end; ``--json`` prints one JSON object per line, per event, for log
collectors, and nothing else on stdout. Status notes go to stdout, except
with ``--json`` (stderr); what the store says (``_store_view``: resumed jobs,
missed slots, standby, take-overs) is a note in plain mode, a JSON record with
``--json``, a line under the live view's tables.

Stopping: the first Ctrl-C (or SIGTERM) cancels every task that is not
running and lets the running ones finish, for at most ``--grace`` seconds; a
second Ctrl-C, or the grace running out, exits at once, and the dispatcher
process then kills the workers (it watches this process). Exit statuses: see
``_main.EPILOG`` (``procsched --help``).
"""

from ._main import main as main

__all__ = ["main"]
