from __future__ import annotations

from collections.abc import Iterator

import pytest

import procsched


@pytest.fixture
def sched() -> Iterator[procsched.Scheduler]:
    with procsched.Scheduler(workers=3) as scheduler:
        yield scheduler
        scheduler.shutdown(wait=True, cancel_futures=True)
