"""Captured output (``capture_output=True``) when runs are given ahead: a
worker that holds its next run starts it - and empties its capture file -
as soon as it has reported the last one, possibly before the dispatcher
has read that report. Each run's output travels in its own report, so it
is never lost nor mixed with the next run's."""

from __future__ import annotations

import concurrent.futures

import pytest
import rt_tasks


@pytest.mark.timeout(120)
def test_each_run_keeps_its_own_output_when_the_next_run_was_given_ahead(make_scheduler):
    s = make_scheduler(1, capture_output=True)
    handles = [s.submit(rt_tasks.say, f"line {i}") for i in range(300)]
    done, not_done = concurrent.futures.wait(handles, timeout=100)
    assert not not_done
    outputs = [h.runs[-1].output for h in handles]
    wrong = [(i, out) for i, out in enumerate(outputs) if out != f"line {i}\n"]
    assert not wrong, f"{len(wrong)} of 300 runs lost or mixed their output, e.g. {wrong[:5]}"
