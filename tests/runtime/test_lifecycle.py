"""Process lifecycle: start methods, recycling, orphans, dispatcher death, stats, logs."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest
import rt_tasks as t
from rt_helpers import Waiter

import procsched

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("method", ["forkserver", "spawn", "fork"])
def test_start_methods(method, make_scheduler):
    s = make_scheduler(2, mp_context=method)
    assert [h.result(30) for h in [s.submit(t.square, i) for i in range(5)]] == [0, 1, 4, 9, 16]
    crashed = s.submit(t.segfault)
    with pytest.raises(procsched.WorkerCrashedError):
        crashed.result(30)
    assert s.submit(t.square, 3).result(30) == 9


def test_max_tasks_per_worker_recycles(make_scheduler):
    s = make_scheduler(1, max_tasks_per_worker=2)
    pids = [s.submit(t.pid).result(30) for _ in range(6)]
    assert len(set(pids)) == 3 and pids[0] == pids[1] and pids[2] == pids[3]


def test_max_worker_memory_recycles(make_scheduler):
    s = make_scheduler(1, max_worker_memory=1)  # every worker is over 1 byte
    pids = [s.submit(t.pid).result(30) for _ in range(3)]
    assert len(set(pids)) == 3


def test_stats_and_logs(make_scheduler, caplog):
    s = make_scheduler(2)
    with caplog.at_level(logging.INFO, logger="procsched"):
        with pytest.raises(procsched.WorkerCrashedError):
            s.submit(t.segfault).result(30)
        assert s.submit(t.square, 2).result(30) == 4
        stats = s.stats()
    assert stats["outcomes"]["crashed"] == 1 and stats["outcomes"]["ok"] >= 1
    assert stats["pending"] == 0 and stats["running"] == 0
    assert sum(w["restarts"] for w in stats["workers"]) == 1
    assert {"pid", "state", "rss", "runs", "restarts"} <= set(stats["workers"][0])
    assert all(w["rss"] > 0 for w in stats["workers"])
    assert any("crashed its worker" in r.getMessage() and "SIGSEGV" in r.getMessage() for r in caplog.records)


def test_dispatcher_death_fails_every_unfinished_handle(make_scheduler):
    s = make_scheduler(2)
    waiter = Waiter(s)
    running = s.submit(t.hang)
    waiter.until(lambda: running.state is procsched.TaskState.RUNNING)
    later = s.schedule(t.square, 3600, args=(1,))
    dispatcher = psutil.Process(s._backend.proc.pid)
    workers = dispatcher.children(recursive=True)
    dispatcher.kill()
    for h in (running, later):
        with pytest.raises(procsched.SchedulerError):
            h.result(10)
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive
    with pytest.raises(procsched.SchedulerError):
        s.submit(t.square, 2)
    assert make_scheduler(1).submit(t.square, 5).result(30) == 25  # a new one works


USER_PROGRAM = textwrap.dedent("""
    import sys, time
    import procsched
    import rt_tasks as t

    if __name__ == "__main__":
        s = procsched.Scheduler(2)
        s.submit(t.child_then_hang, sys.argv[1])
        s.schedule_at_fixed_rate(t.pid, 0.05)
        s.schedule(t.pid, 3600)
        s.submit(t.square, 2).result(30)
        print("ready", flush=True)
        if sys.argv[2] == "raise":
            sys.stdin.readline()  # (the test has its process tree)
            raise RuntimeError("the user program dies with pending tasks")
        time.sleep(3600)
""")


def _program_env() -> dict[str, str]:
    """The environment of a program these tests run: it imports rt_tasks and procsched as they do."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(t.__file__), *sys.path]))


@pytest.mark.parametrize("how", ["sigkill", "raise"])
def test_no_process_outlives_the_user_process(how, tmp_path):
    script = tmp_path / "user.py"
    script.write_text(USER_PROGRAM)
    child_file = str(tmp_path / "child")
    env = _program_env()
    argv = [sys.executable, str(script), child_file, how]
    user = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
    assert user.stdout.readline().strip() == "ready"
    tree = psutil.Process(user.pid).children(recursive=True)  # (before it raises: seen gone already on a CI)
    assert len(tree) >= 4  # dispatcher, forkserver, 2 workers (+ the task's child)
    if how == "sigkill":
        user.send_signal(signal.SIGKILL)
    else:
        user.stdin.write("raise\n")
        user.stdin.flush()
    user.wait(60)
    gone, alive = psutil.wait_procs(tree, timeout=10)
    assert not alive, alive


def test_a_listener_that_schedules_work_cannot_deadlock(make_scheduler):
    # Both pipes full at once: the user's listener thread blocks sending while
    # the dispatcher has events for it. The dispatcher must never block on output.
    # 5,000 runs each way: ~500 KB of frames each way, eight times a pipe's 64 KiB.
    import concurrent.futures

    s = make_scheduler(2)
    follow_ups: list = []

    def on_event(event):
        if event["event"] == "run_finished" and len(follow_ups) < 5_000:
            follow_ups.append(s.submit(t.square, 2))

    s.add_listener(on_event)
    first = [s.submit(t.square, 1) for _ in range(5_000)]
    done, not_done = concurrent.futures.wait(first, timeout=120)
    assert not not_done
    s.shutdown(wait=True)
    assert len(follow_ups) == 5_000 and all(h.result(0) == 4 for h in follow_ups)


def test_commands_sent_from_two_threads_at_once_arrive_whole(tmp_path):
    """The program's threads and the listener thread (adopting another
    scheduler's task: ``Adopt``, ``AdoptAgain``, ``Unloadable``) send
    commands; one of 40 KB is several writes. Sent at once from two
    threads, they interleaved, and the dispatcher read garbage
    (UnpicklingError) and died."""
    import threading

    from procsched._runtime import _messages as m

    with procsched.Scheduler(1, store=str(tmp_path / "store.db")) as s:

        def send(tag: str) -> None:
            for i in range(200):
                s._backend.send(m.Unloadable.wire(f"{tag}{i}", tag * 40_000))

        threads = [threading.Thread(target=send, args=(tag,)) for tag in "ab"]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert s.stats()["store"]  # (answered: the dispatcher read every command)
        assert s.schedule(t.square, 0, args=(3,)).result(timeout=30) == 9


ORPHAN_PROGRAM = textwrap.dedent("""
    import os, socket, struct, sys
    from multiprocessing import reduction
    import procsched
    import rt_tasks as t

    def signed(fd):
        data = b""
        while len(data) < 8:
            chunk = os.read(fd, 8 - len(data))
            assert chunk, "the forkserver closed the status pipe"
            data += chunk
        return struct.unpack("q", data)[0]

    if __name__ == "__main__":
        s = procsched.Scheduler(1)
        assert s.submit(t.square, 3).result(30) == 9  # its forkserver is up
        assert s.submit(lambda: sys.excepthook is sys.__excepthook__).result(30)  # (a task's, as Python's)
        # What the dispatcher does to start a worker, up to the start data it never sends:
        # the forkserver forks the worker, which finds its data pipe closed.
        status_r, child_w = os.pipe()
        child_r, data_w = os.pipe()
        spare_r, spare_w = os.pipe()
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(os.path.join(s._backend.tempdir, "forkserver"))
            reduction.sendfds(client, [child_r, child_w, spare_r, spare_w])
        for fd in (child_r, child_w, spare_r, spare_w, data_w):
            os.close(fd)
        signed(status_r)  # the orphan's pid, then its exit code
        print(signed(status_r), flush=True)
        s.shutdown()
""")


def test_a_worker_whose_dispatcher_dies_while_starting_it_exits_quietly(tmp_path):
    """The fault campaign, seed 6516: an instance's process tree was
    SIGKILLed while its dispatcher started a worker; the forkserver had
    forked it, its start data never came, and multiprocessing's child
    printed EOFError's traceback on the program's stderr. Such an orphan
    exits (code 1) without a word: its dispatcher is gone."""
    script = tmp_path / "orphan.py"
    script.write_text(ORPHAN_PROGRAM)
    env = _program_env()
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1"]
    assert "Traceback" not in done.stderr and "EOFError" not in done.stderr, done.stderr
