"""procsched: run Python work later, on a crash-proof pool of worker processes.

See README.md and docs/DESIGN.md (the contract). Everything public is re-exported
here; modules starting with an underscore are private.

``import procsched`` imports nothing else: each public name loads its module
on first use (PEP 562 ``__getattr__``, below), so the dispatcher and worker
processes, which import only the private modules they use, start fast, and
so does a program that imports procsched and never starts a scheduler. Type
checkers and IDEs read the ``TYPE_CHECKING`` imports.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._clock import ManualClock as ManualClock
    from ._context import current_run as current_run
    from ._context import current_scheduler as current_scheduler
    from ._core import Priority as Priority
    from ._core import TaskState as TaskState
    from ._errors import (
        SchedulerClosedError as SchedulerClosedError,
    )
    from ._errors import (
        SchedulerError as SchedulerError,
    )
    from ._errors import (
        StoreError as StoreError,
    )
    from ._errors import (
        TaskTimeoutError as TaskTimeoutError,
    )
    from ._errors import (
        WorkerCrashedError as WorkerCrashedError,
    )
    from ._handle import RunError as RunError
    from ._handle import RunInfo as RunInfo
    from ._handle import TaskHandle as TaskHandle
    from ._inline import InlineScheduler as InlineScheduler
    from ._jobs import cron as cron
    from ._jobs import every as every
    from ._jobs import once as once
    from ._retry import Retry as Retry
    from ._runtime._facade import Scheduler as Scheduler
del TYPE_CHECKING  # not a public name

__version__ = "0.1.0"

__all__ = [
    "InlineScheduler",
    "ManualClock",
    "Priority",
    "Retry",
    "RunError",
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

#: The module each public name lives in (the same as the imports above).
_HOMES = {
    "InlineScheduler": "._inline",
    "ManualClock": "._clock",
    "Priority": "._core",
    "Retry": "._retry",
    "RunError": "._handle",
    "RunInfo": "._handle",
    "Scheduler": "._runtime._facade",
    "SchedulerClosedError": "._errors",
    "SchedulerError": "._errors",
    "StoreError": "._errors",
    "TaskHandle": "._handle",
    "TaskState": "._core",
    "TaskTimeoutError": "._errors",
    "WorkerCrashedError": "._errors",
    "cron": "._jobs",
    "current_run": "._context",
    "current_scheduler": "._context",
    "every": "._jobs",
    "once": "._jobs",
}


def __getattr__(name: str) -> object:
    """A public name's first use: import its module, keep the name here."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'procsched' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(home, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
