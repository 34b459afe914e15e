"""A user program for the SIGKILL test: a scheduler on the store given as
argv[1] runs a keyed task of group "db" (limit 1) that waits at the
rendezvous argv[3] (logging to argv[2]); the program then waits to be killed."""

from __future__ import annotations

import sys

import procsched
from tests.limits.limit_tasks import hold

if __name__ == "__main__":
    store, log, meet = sys.argv[1:4]
    s = procsched.Scheduler(1, store=store, limits={"db": 1}, lease=1)
    s.schedule(hold, args=(log, "held", meet), key="held", group="db")
    print("scheduled", flush=True)
    sys.stdin.read()  # until the test kills it
