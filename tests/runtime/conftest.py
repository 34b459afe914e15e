from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import psutil
import pytest

import procsched

RUNNERS = ["processes", "threads", "ray"]
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
#: Process trees that are not the test's to account for (the Ray cluster).
_NOT_OURS: set[int] = set()


def _descendants() -> set[int]:
    try:
        found = {p.pid for p in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return set()
    for root in _NOT_OURS:
        try:
            found -= {root} | {p.pid for p in psutil.Process(root).children(recursive=True)}
        except psutil.Error:
            found.discard(root)
    return found


@pytest.fixture(params=RUNNERS)
def runner(request) -> str:
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")
    return request.param


@pytest.fixture
def make_scheduler():
    """Start schedulers; at teardown shut them down and check nothing is left."""
    made: list[procsched.Scheduler] = []
    before = _descendants()

    def make(*args, **kwargs) -> procsched.Scheduler:
        scheduler = procsched.Scheduler(*args, **kwargs)
        made.append(scheduler)
        return scheduler

    yield make
    for scheduler in made:
        scheduler.shutdown(wait=True, cancel_futures=True)
    left = [psutil.Process(p) for p in _descendants() - before if psutil.pid_exists(p)]
    gone, alive = psutil.wait_procs(left, timeout=5)
    assert not alive, f"processes left behind: {alive}"


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return str(path)


#: RAY_TQDM_PATCH_PRINT=0: a Ray driver replaces builtins.print when it first
#: prints a cluster message (e.g. a worker crash), and a replaced print can
#: no longer be pickled by reference - which later tests of this session do.
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "RAY_TQDM_PATCH_PRINT": "0"}


@pytest.fixture(scope="session")
def ray_cluster():
    """A local 2-CPU Ray cluster (``ray start --head --block``), with this
    process connected to it as the driver; yields its address (also in
    RAY_ADDRESS). Started once, by the first test that needs it: a start
    costs ~10 s of a 2-core machine (six Python processes import Ray), so
    the three modules that use it share it. At the end the cluster is
    stopped and every one of its processes must be gone."""
    ray = pytest.importorskip("ray")
    temp_dir = tempfile.mkdtemp(prefix="psray-")
    saved = {k: os.environ.get(k) for k in (*RAY_ENV, "RAY_ADDRESS")}
    os.environ.update(RAY_ENV)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE, os.environ.get("PYTHONPATH", "")]))
    env.pop("RAY_ADDRESS", None)
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    head = subprocess.Popen(
        [
            ray_cli,
            "start",
            "--head",
            "--block",
            "--num-cpus",
            "2",
            "--temp-dir",
            temp_dir,
            "--port",
            "0",
            "--include-dashboard",
            "false",
            "--include-log-monitor",
            "false",
            "--disable-usage-stats",
            "--object-store-memory",
            str(512 << 20),
            # ports that default to fixed numbers: free ones, so clusters can coexist
            *_client_port(),
            "--dashboard-agent-listen-port",
            str(_free_port()),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
        text=True,
    )
    started = _HeadOutput(head, os.path.join(temp_dir, "start.log"))
    _NOT_OURS.add(head.pid)
    try:
        address = started.address()
        os.environ["RAY_ADDRESS"] = address
        ray.init(address=address, log_to_driver=False, logging_level="WARNING")
        # Ray starts its worker processes on first use: start one per CPU now,
        # so the first test (real-time ones among them) does not time that.
        warm = ray.remote(num_cpus=1)(lambda seconds: time.sleep(seconds))  # by value: workers cannot import conftest
        ray.get([warm.remote(0.2) for _ in range(2)], timeout=60)
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        tree = [psutil.Process(head.pid)]
        try:
            tree += tree[0].children(recursive=True)
        except psutil.Error:
            pass
        head.send_signal(signal.SIGTERM)
        head.wait(30)
        _NOT_OURS.discard(head.pid)
        gone, alive = psutil.wait_procs(tree, timeout=15)
        strays = alive + [p for p in psutil.process_iter(["cmdline"]) if temp_dir in " ".join(p.info["cmdline"] or [])]
        for p in strays:
            try:
                p.kill()
            except psutil.Error:
                pass
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not strays, f"Ray processes left behind: {strays}"


def _client_port() -> list[str]:
    """``--ray-client-server-port`` on a free port where Ray Client is
    installed (``ray[client]``); the minimal ``ray`` of the ray extra starts no
    client server, and refuses the option."""
    from ray._private.utils import get_ray_client_dependency_error

    return [] if get_ray_client_dependency_error() is not None else ["--ray-client-server-port", str(_free_port())]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _HeadOutput(threading.Thread):
    """Drains the output of ``ray start --block`` into a log file (it writes
    as long as it runs) and picks the cluster's address from it."""

    def __init__(self, head: subprocess.Popen, log_path: str) -> None:
        super().__init__(daemon=True)
        self.head, self.log_path = head, log_path
        self.found = threading.Event()
        self.value: str | None = None
        self.start()

    def run(self) -> None:
        with open(self.log_path, "w") as log:
            for line in self.head.stdout:
                log.write(line)
                log.flush()
                match = re.search(r"ray start --address='([^']+)'", line)
                if match and self.value is None:
                    self.value = match.group(1)
                    self.found.set()
        self.found.set()  # it exited

    def address(self, timeout: float = 60.0) -> str:
        self.found.wait(timeout)
        if self.value is None:
            raise RuntimeError(f"the Ray head did not start:\n{open(self.log_path).read()[-3000:]}")
        return self.value
