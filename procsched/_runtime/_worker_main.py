"""The worker process's entry point, as the dispatcher names it.

multiprocessing pickles a process's target by reference, and pickling a
reference imports its module: naming ``_worker.main`` directly would make
the dispatcher import the worker's whole stack (the scheduling API, the
validation, the handles), which it never runs. This module imports nothing (but sys);
the worker's modules are already loaded in the forkserver (its preload), and
load here with the spawn and fork start methods.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

#: What the dispatcher's forkserver imports before it forks the first worker.
#: (ctypes: each new worker's PR_SET_PDEATHSIG call, ~3 ms if imported there)
FORKSERVER_PRELOAD = [
    "procsched._runtime._worker",
    "procsched._runtime._worker_main",
    "procsched._runtime._forkserver",
    "ctypes",
]


def main(conn: Connection, capture: str | None = None, tickets: Connection | None = None) -> None:
    sys.excepthook = sys.__excepthook__  # (the forkserver's, for its handshake: not the tasks')
    name_process("psc-worker")
    from ._worker import main as worker_main

    try:
        worker_main(conn, capture, tickets)
    except (BrokenPipeError, ConnectionResetError):
        # The dispatcher closed our pipe (a clean shutdown, or it died) while
        # we reported: there is no one left to tell, and nothing to print.
        # (A task's own BrokenPipeError never gets here: the run reports it.)
        return


def name_process(name: str) -> None:
    """A process forked from the dispatcher (the forkserver, the resource
    tracker, and so the workers) has its command line: tell them apart in
    ps/top (psutil's name())."""
    try:
        with open("/proc/self/comm", "w") as comm:
            comm.write(name)
    except OSError:
        pass
