"""The sans-IO scheduling core.

It holds the task table, the heaps of due times and the task state machine,
and answers what to run next and what changed; it is given the time and told
what happened. It never blocks, sleeps, reads a clock, pickles, or touches a
thread or a process: this package imports no threading, multiprocessing, os,
signal, time or pickle module (tests/core/test_purity.py checks it), so every
runner - inline, threads, processes - drives the very same decisions.
"""

from ._scheduler import (
    CancelResult as CancelResult,
    Completion as Completion,
    Kind as Kind,
    KIND_OF as KIND_OF,
    Misfire as Misfire,
    MISFIRE_OF as MISFIRE_OF,
    Policy as Policy,
    Run as Run,
    SchedulerCore as SchedulerCore,
)
from ._state import Outcome as Outcome, Priority as Priority, TaskState as TaskState, transition as transition
