"""A hypothesis state machine against the real process runtime with
prefetch: many tasks, random cancels, priority injections and worker kills
(SIGKILL), then the exactness rules are checked from what the tasks
themselves wrote (each run appends its tag as it starts):

- a task whose ``cancel()`` returned True never started (one-shot tasks,
  no interrupt: True means it had not started);
- no run starts twice, whatever was killed (a queued run goes back untouched);
- every task ends: DONE ran exactly once; FAILED only by a crash
  (``WorkerCrashedError``: its worker was killed while it ran) and started at
  most once; CANCELLED never started.
"""

from __future__ import annotations

import os
import signal
import tempfile

import prefetch_tasks as pt
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

import procsched
from procsched import TaskState, WorkerCrashedError


class PrefetchMachine(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="psch-sm-")
        self.out = os.path.join(self.dir, "marks")
        self.s = procsched.Scheduler(2)
        self.handles: dict[str, procsched.TaskHandle] = {}
        self.cancelled: set[str] = set()  # cancel() returned True
        self.n = 0

    def _tag(self) -> str:
        self.n += 1
        return f"t{self.n}"

    @rule(k=st.integers(1, 6), seconds=st.sampled_from([0.0, 0.002, 0.02]))
    def submit(self, k: int, seconds: float) -> None:
        for _ in range(k):
            tag = self._tag()
            self.handles[tag] = self.s.submit(pt.mark, self.out, tag, seconds)

    @rule(priority=st.sampled_from([-3, 2, 9]))
    def inject_priority(self, priority: int) -> None:
        tag = self._tag()
        self.handles[tag] = self.s.schedule(pt.mark, args=(self.out, tag, 0.002), priority=priority)

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        if not self.handles:
            return
        tag = data.draw(st.sampled_from(sorted(self.handles)))
        if self.handles[tag].cancel():
            self.cancelled.add(tag)

    @rule(slot=st.integers(0, 1))
    def kill_worker(self, slot: int) -> None:
        pid = self.s.stats()["workers"][slot]["pid"]
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def teardown(self) -> None:
        if not hasattr(self, "s"):
            return
        try:
            for handle in self.handles.values():
                try:
                    handle.result(60)
                except Exception:  # noqa: BLE001 - checked below
                    pass
        finally:
            self.s.shutdown(wait=True, cancel_futures=True)
        marks = pt.marks(self.out)
        for tag, handle in self.handles.items():
            started = marks.count(tag)
            assert started <= 1, f"{tag} started {started} times"
            state = handle.state
            if tag in self.cancelled:
                assert state is TaskState.CANCELLED and started == 0, (tag, state, started)
            elif state is TaskState.DONE:
                assert started == 1, (tag, started)
            elif state is TaskState.FAILED:
                assert isinstance(handle.exception(0), WorkerCrashedError), (tag, handle.exception(0))
            else:
                assert state is TaskState.CANCELLED and started == 0, (tag, state, started)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_prefetch_state_machine() -> None:
    PrefetchMachine.TestCase.settings = settings(
        max_examples=8,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    PrefetchMachine.TestCase().runTest()
