"""procsched: run Python work later, on a crash-proof pool of worker processes.

See README.md and docs/DESIGN.md (the contract). Everything public is re-exported
here; modules starting with an underscore are private.
"""

from . import _tz  # noqa: F401 - gives the pure core the machine's local zone
from ._clock import ManualClock as ManualClock
from ._context import current_run as current_run, current_scheduler as current_scheduler
from ._core import Priority as Priority, TaskState as TaskState
from ._errors import (
    SchedulerClosedError as SchedulerClosedError,
    SchedulerError as SchedulerError,
    StoreError as StoreError,
    TaskTimeoutError as TaskTimeoutError,
    WorkerCrashedError as WorkerCrashedError,
)
from ._handle import RunInfo as RunInfo, TaskHandle as TaskHandle
from ._inline import InlineScheduler as InlineScheduler
from ._retry import Retry as Retry
from ._jobs import cron as cron, every as every, once as once
from ._runtime._facade import Scheduler as Scheduler

__version__ = "0.1.0"

__all__ = [
    "InlineScheduler",
    "ManualClock",
    "Priority",
    "Retry",
    "RunInfo",
    "Scheduler",
    "SchedulerClosedError",
    "SchedulerError",
    "StoreError",
    "TaskHandle",
    "TaskState",
    "TaskTimeoutError",
    "WorkerCrashedError",
    "cron",
    "current_run",
    "current_scheduler",
    "every",
    "once",
]
