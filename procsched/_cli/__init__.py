"""The ``procsched`` command: run a jobs file with a live view, or the demo.

    procsched run FILE.py [--workers N] [--runner processes|threads] [--duration S] [--json | --plain]
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

from ._main import main as main

__all__ = ["main"]
