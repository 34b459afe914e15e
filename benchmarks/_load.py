"""How much CPU *other* processes take while the benchmarks run.

Two cores shared with anything else make every timing here wrong, so the
harness measures the competition instead of guessing it. A thread samples
/proc once a second. Foreign CPU = the machine's busy time (/proc/stat) -
this run's own CPU, where this run's CPU is, over the processes of this run
alive at the sample, utime + stime + cutime + cstime since they were first
seen (cutime/cstime carry the CPU of children they reaped, so a worker that
crashed or a subprocess that came and went between two samples is still
counted once its parent reaps it). A process is ours if it descends from
this process (the ppid chain) or carries this run's marker in its initial
environment (``PROCSCHED_BENCH_RUN``, inherited through exec - procsched's
dispatcher runs in a session of its own and its forkserver outlives it, so
the chain alone would miss them). Short-lived foreign processes are counted
too. Linux only; elsewhere it reports nothing.
"""

from __future__ import annotations

import os
import threading
import time

VAR = "PROCSCHED_BENCH_RUN"


class ForeignLoad:
    def __init__(self, interval: float = 1.0) -> None:
        self.available = os.path.isdir("/proc/self/task")
        self.token = f"{os.getpid()}-{time.time_ns()}"
        os.environ[VAR] = self.token  # before any pool starts: children inherit it
        self.marker = f"{VAR}={self.token}".encode()
        self.me = os.getpid()
        self.hz = os.sysconf("SC_CLK_TCK") if self.available else 100
        self.start_ticks = self._uptime_ticks()
        self.ours: dict[tuple[int, int], bool] = {}
        self.last: dict[tuple[int, int], int] = {}
        self.ours_seconds = 0.0  # CPU seconds of this run's live processes (and what they reaped) since start
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._paused = threading.Event()
        self.thread_id: int | None = None
        if self.available:
            self.busy0 = self._busy_seconds()
            self.sample()
            thread = threading.Thread(target=self._loop, args=(interval,), name="bench-load", daemon=True)
            thread.start()
            self.thread_id = thread.native_id  # harness overhead: excluded from procsched's idle CPU

    def _uptime_ticks(self) -> int:
        try:
            with open("/proc/uptime") as f:
                return int(float(f.read().split()[0]) * self.hz)
        except OSError:
            return 0

    def _loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            if not self._paused.is_set():
                self.sample()

    def pause(self) -> None:
        """Stop sampling in the background (it costs this process ~1 ms of CPU
        a second, which an idle-CPU measurement must not see)."""
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()

    def stop(self) -> None:
        self._stop.set()

    @staticmethod
    def _stat(pid: int) -> tuple[int, int, int] | None:
        """(ppid, utime + stime + cutime + cstime, starttime) in clock ticks."""
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                data = f.read()
        except OSError:
            return None
        fields = data.rpartition(b")")[2].split()
        return int(fields[1]), sum(int(x) for x in fields[11:15]), int(fields[19])

    def _is_ours(self, pid: int, ppid: int, stats: dict[int, tuple[int, int, int]]) -> bool:
        if pid == self.me:
            return True
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if self.marker in f.read():
                    return True
        except OSError:
            pass
        seen = {pid}
        while ppid > 1 and ppid not in seen:
            if ppid == self.me:
                return True
            parent = stats.get(ppid)
            if parent is None:
                return False
            key = (ppid, parent[2])
            if self.ours.get(key):
                return True
            seen.add(ppid)
            ppid = parent[0]
        return False

    def _busy_seconds(self) -> float:
        """CPU seconds the whole machine has spent busy (not idle, not iowait)."""
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        # guest time is already inside user/nice
        return (sum(fields[:8]) - idle) / self.hz

    def sample(self) -> float:
        """Update and return the foreign CPU seconds since start."""
        if not self.available:
            return 0.0
        with self._lock:
            self._sample_ours()
            return max(0.0, self._busy_seconds() - self.busy0 - self.ours_seconds)

    def _sample_ours(self) -> None:
        stats = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                st = self._stat(int(name))
                if st is not None:
                    stats[int(name)] = st
        live = set()
        total = 0
        for pid, (ppid, ticks, start) in stats.items():
            key = (pid, start)
            live.add(key)
            ours = self.ours.get(key)
            if ours is None:
                ours = self.ours[key] = self._is_ours(pid, ppid, stats)
            if not ours:
                continue
            base = self.last.get(key)
            if base is None:  # first sight: born during the run, all of it counts
                base = self.last[key] = 0 if start >= self.start_ticks else ticks
            total += ticks - base
        for table in (self.ours, self.last):
            for key in [k for k in table if k not in live]:
                del table[key]
        self.ours_seconds = total / self.hz

    def share_since(self, seconds0: float, t0: float) -> float:
        """Foreign CPU since (seconds0, t0) as a share of the whole machine."""
        elapsed = time.monotonic() - t0
        if elapsed <= 0:
            return 0.0
        return max(0.0, self.sample() - seconds0) / (elapsed * (os.cpu_count() or 1))

    def wait_quiet(self, max_wait: float, threshold: float = 0.10, window: float = 1.0) -> float:
        """Wait until one `window` passes with other processes below
        `threshold` of the machine, at most `max_wait` seconds; return the wait."""
        t_start = time.monotonic()
        while time.monotonic() - t_start < max_wait:
            s0, t0 = self.sample(), time.monotonic()
            time.sleep(window)
            if self.share_since(s0, t0) < threshold:
                break
        return time.monotonic() - t_start
