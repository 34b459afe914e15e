"""Issue 26 item 13: what the README's "Running it in production" section
claims - handles awaited from asyncio, and a systemd unit whose stop lets
procsched's grace run out before systemd's SIGKILL."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from cli_helpers import REPO, cli

import procsched

pytestmark = pytest.mark.timeout(60)


def square(n: int) -> int:
    return n * n


def fails() -> None:
    raise LookupError("not here")


def test_handles_are_awaited_with_asyncio_wrap_future() -> None:
    async def main(s: procsched.Scheduler) -> None:
        assert await asyncio.wrap_future(s.submit(square, 12)) == 144
        with pytest.raises(LookupError, match="not here"):  # the run's own exception type
            await asyncio.wrap_future(s.schedule(fails, 0.01))
        periodic = s.schedule_at_fixed_rate(square, 0.02, args=(3,), max_runs=3)
        assert await asyncio.wait_for(asyncio.wrap_future(periodic), 30) is None  # until it ends
        assert [r.outcome for r in periodic.runs] == ["ok"] * 3
        # the event loop goes on while a run executes
        slow = asyncio.wrap_future(s.submit(time.sleep, 0.5))
        ticks = 0
        while not slow.done():
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks >= 3  # not blocked for the run's 0.5 s (a loaded machine sleeps longer than 10 ms a tick)
        # cancelling the awaiting coroutine cancels the task
        later = s.schedule(square, 30, args=(1,))
        waiter = asyncio.ensure_future(asyncio.wrap_future(later))
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await asyncio.wait([asyncio.wrap_future(later)], timeout=10)
        assert later.cancelled() and later.state is procsched.TaskState.CANCELLED

    with procsched.Scheduler(workers=1) as s:
        asyncio.run(main(s))


def test_the_readme_systemd_unit_stops_within_its_timeout() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Running it in production") : readme.index("## Testing your own")]
    unit = section[section.index("```ini") : section.index("```", section.index("```ini") + 3)]
    settings = dict(re.findall(r"^(\w+)=(.*)$", unit, re.M))
    assert settings["Type"] == "exec" and settings["KillSignal"] == "SIGTERM" and settings["KillMode"] == "mixed"
    command = settings["ExecStart"].split()
    assert command[1:3] == ["run", "jobs.py"] and "--plain" in command
    grace = float(command[command.index("--grace") + 1])
    assert float(settings["TimeoutStopSec"]) > grace
    shown = cli("run", "--help").stdout
    assert all(option in shown for option in command if option.startswith("--"))
