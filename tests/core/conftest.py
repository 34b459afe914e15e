"""Shared fixtures for the pure core tests: a ManualClock and schedulers on it."""

from __future__ import annotations

import pytest

import procsched
from procsched._core import SchedulerCore

NS = 1_000_000_000
MS = 1_000_000


@pytest.fixture
def clock() -> procsched.ManualClock:
    return procsched.ManualClock()


@pytest.fixture
def sched(clock: procsched.ManualClock) -> procsched.InlineScheduler:
    return procsched.InlineScheduler(clock)


@pytest.fixture
def core() -> SchedulerCore:
    return SchedulerCore()
