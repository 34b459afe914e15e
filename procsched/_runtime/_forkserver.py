"""Preloaded only into the dispatcher's multiprocessing forkserver.

The forkserver is the workers' parent: when the dispatcher dies, the
forkserver sees its "alive" pipe close and exits, and each worker dies with
it (PR_SET_PDEATHSIG, see ``_worker.py``). But what a task started - its
children, in the worker's process group - would outlive them all. So on its
way out the forkserver kills each worker's whole process group, while the
workers are still alive and their group ids cannot have been reused.
"""

from __future__ import annotations

import atexit
import os
import signal


def _kill_worker_groups() -> None:
    try:
        with open(f"/proc/self/task/{os.getpid()}/children") as f:
            children = [int(pid) for pid in f.read().split()]
    except (OSError, ValueError):
        return  # no /proc children list: the workers still die with us
    for pid in children:
        try:
            if os.getpgid(pid) == pid:  # a worker leads its own group
                os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


atexit.register(_kill_worker_groups)
