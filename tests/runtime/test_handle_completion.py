"""A handle finished before anyone waited on it is finished without a
Condition (the listener's hot path); every Future reader still sees it, and
a reader that came first is still woken."""

from __future__ import annotations

import concurrent.futures
import threading

import pytest

from procsched import TaskHandle, TaskState


def _handle(task_id: int = 1) -> TaskHandle:
    return TaskHandle(None, task_id, None, 0.0)  # type: ignore[arg-type] - no owner: nothing asks it


def test_a_handle_finished_unwatched_makes_no_condition_and_reads_as_finished() -> None:
    h = _handle()
    h._on_result(TaskState.DONE, 42)
    assert "_condition" not in vars(h)
    assert h.done() and not h.running() and not h.cancelled()
    assert h.result(0) == 42 and h.exception(0) is None
    seen: list[object] = []
    h.add_done_callback(lambda f: seen.append(f.result()))
    assert seen == [42]
    done, pending = concurrent.futures.wait([h], timeout=0)
    assert done == {h} and not pending
    assert list(concurrent.futures.as_completed([h], timeout=0)) == [h]


def test_a_failure_finished_unwatched_raises_from_result() -> None:
    h = _handle()
    h._on_result(TaskState.FAILED, exc=KeyError("k"))
    assert "_condition" not in vars(h)
    with pytest.raises(KeyError):
        h.result(0)
    assert isinstance(h.exception(0), KeyError)


@pytest.mark.timeout(30)
def test_readers_that_came_first_are_woken() -> None:
    h = _handle()
    got: list[object] = []
    waiting = threading.Event()

    def wait_result() -> None:
        waiting.set()
        got.append(h.result(20))

    called: list[object] = []
    h.add_done_callback(lambda f: called.append(f.result()))
    reader = threading.Thread(target=wait_result)
    reader.start()
    waiting.wait(10)
    futures_wait = concurrent.futures.ThreadPoolExecutor(1).submit(concurrent.futures.wait, [h], 20)
    h._on_result(TaskState.DONE, "v")
    reader.join(20)
    assert got == ["v"] and called == ["v"]
    assert futures_wait.result(20).done == {h}


def test_a_finished_handle_cannot_be_finished_again() -> None:
    h = _handle()
    h._on_result(TaskState.DONE, 1)
    with pytest.raises(concurrent.futures.InvalidStateError):
        h.set_result(2)
    assert h.result(0) == 1
