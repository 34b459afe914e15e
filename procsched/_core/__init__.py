"""The sans-IO scheduling core.

It holds the task table, the heaps of due times and the task state machine,
and answers what to run next and what changed; it is given the time and told
what happened. It never blocks, sleeps, reads a clock, pickles, or touches a
thread or a process: this package imports no threading, multiprocessing, os,
signal, time or pickle module (tests/core/test_purity.py checks it), so every
runner - inline, threads, processes - drives the very same decisions.

    _state.py      the task state machine (a table)
    _schedule.py   Schedule: when a task runs (slots, misfire, limits; wire and stored forms)
    _calendar.py   CronTrigger: cron fire times with cron's DST rules
    _scheduler.py  SchedulerCore: the task table, the heaps, the run decisions
    _task.py       the records: a task, its extra state, a run, a completion, a skipped slot
    _control.py    schedule control: runs counted one by one, run now, backfill, skipped slots
    _limits.py     shared limits (groups) and the schedule's jitter
    _units.py      time units: ns, the epoch, wall-clock datetimes
"""

from ._calendar import CronTrigger as CronTrigger
from ._calendar import Zone as Zone
from ._schedule import (
    KIND_OF as KIND_OF,
)
from ._schedule import (
    MISFIRE_OF as MISFIRE_OF,
)
from ._schedule import (
    ONCE as ONCE,
)
from ._schedule import (
    OVERLAP_OF as OVERLAP_OF,
)
from ._schedule import (
    Kind as Kind,
)
from ._schedule import (
    Misfire as Misfire,
)
from ._schedule import (
    Overlap as Overlap,
)
from ._schedule import (
    Schedule as Schedule,
)
from ._scheduler import (
    SchedulerCore as SchedulerCore,
)
from ._state import Outcome as Outcome
from ._state import Priority as Priority
from ._state import TaskState as TaskState
from ._state import transition as transition
from ._task import CancelResult as CancelResult
from ._task import Completion as Completion
from ._task import Policy as Policy
from ._task import RetryPolicy as RetryPolicy
from ._task import Run as Run
