"""A Jepsen-like fault campaign for the durable layer (issue 20).

    seed ──▶ Nemesis (random.Random(seed)) ──▶ faults at random instants
                 │  kill -9 (tree / user process), SIGSTOP..SIGCONT, clean restart
                 │  (sometimes with a changed definition), pause..resume, cancel,
                 │  replace, keyed one-shots, proxy drop / stall / lost COMMIT answer
                 │  (PostgreSQL), the SQLite file locked for a while
                 ▼
    2-3 instances (instance.py: a Scheduler each, commands on stdin) ── one store
                 │  every run appends start/end lines to one O_APPEND log (work.py)
                 ▼
    heal, a calm phase, clean shutdowns ──▶ checker.check(history, log, store) ──▶ Report

The fault schedule depends on the seed alone: each decision draws from the
seed's generator, given only earlier decisions (never on what the instances
answered or when), so a seed replays the same faults, with the same targets
and parameters, in the same order (the runs' own timing differs, and an
offset moves when an instance is slow to shut down or start). ``Report.replay`` prints
the seed and the schedule.

What the instances are asked goes through the public API only (and the
``procsched`` command where it offers an action); the checker reads the
store's tables with plain SQL.
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.campaign import storesql
from tests.campaign.instances import Instance, InstanceGone

WORK = "tests.campaign.work:work"


@dataclass
class Fault:
    """One thing the nemesis did: ``t`` seconds after the start (its plan),
    ``at`` the wall time it was done (None: not done - no target)."""

    t: float
    kind: str
    target: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    at: float | None = None
    result: str = ""

    def line(self) -> str:
        params = " ".join(f"{k}={v}" for k, v in self.params.items())
        done = "" if self.at is not None else " (not done)"
        return f"t={self.t:7.3f} {self.kind:<13} {self.target:<6} {params}{done} {self.result}".rstrip()


@dataclass
class Life:
    """One life of an instance: from its start to its end (``how``: quit, kill, kill_user, died)."""

    name: str
    gen: int
    label: str  # what its runs' lines say: "A.2"
    started: float
    ended: float | None = None
    how: str = ""
    stops: list[tuple[float, float]] = field(default_factory=list)  # (SIGSTOP, SIGCONT) wall times
    stderr: str = ""
    exit_code: int | None = None


@dataclass
class KeyEvent:
    """Something done to a key through an instance, acknowledged at ``at``."""

    kind: str  # pause, resume, cancel, readd, replace, redefine (a restart with a changed definition), add
    key: str
    at: float
    via: str  # the life label that carried it out
    version: int = 0
    asked: float | None = None  # when it was asked (a resume, a re-add: runs may start from then, before its answer)


@dataclass
class History:
    """What the checker needs from the campaign."""

    store: str  # "sqlite" | "postgresql"
    url: str  # the store as the checker reads it (direct, not through the proxy)
    lease: float
    start: float
    calm_start: float
    calm_end: float  # the calm phase ends; then every instance shuts down cleanly
    end: float
    specs: dict[str, dict[str, Any]]  # key -> its first spec (kind, period / expr, misfire)
    lives: list[Life]
    key_events: list[KeyEvent]
    faults: list[Fault]
    oneshots: dict[str, float]  # one-shot key -> when it was added
    live_at_end: set[str]  # periodic keys live (not cancelled) at the end
    left_processes: list[str]
    unresponsive: list[str]


@dataclass
class Report:
    seed: int
    store: str
    seconds: float
    faults: list[Fault]
    runs_checked: int
    violations: list[Any]
    documented: list[Any]
    wall: float

    def faults_by_kind(self) -> dict[str, int]:
        return dict(Counter(f.kind for f in self.faults if f.at is not None))

    def replay(self) -> str:
        """The seed and the fault schedule (printed on failure: replay with the seed)."""
        head = (
            f"campaign seed={self.seed} store={self.store} fault phase {self.seconds:.0f} s: replay with "
            f"python -m benchmarks.campaign --store {self.store} --seed {self.seed} "
            f"--seconds {self.seconds:.0f}"
        )
        return "\n".join([head, "fault schedule:", *(f"  {f.line()}" for f in self.faults)])

    def summary(self) -> str:
        lines = [
            self.replay(),
            f"faults injected: {self.faults_by_kind()}",
            f"runs checked: {self.runs_checked}",
            f"violations: {len(self.violations)}",
        ]
        lines += [f"  {v.render()}" for v in self.violations]
        if self.documented:
            lines.append(f"documented limits seen (not violations): {len(self.documented)}")
            lines += [f"  {v.render()}" for v in self.documented[:5]]
        return "\n".join(lines)


def task_specs() -> dict[str, dict[str, Any]]:
    """The periodic keyed tasks every instance declares (a deploy of one program)."""
    retry = {"attempts": 3, "delay": 0.05, "backoff": 2, "on": ["error", "crashed"]}
    return {
        "r1": {"kind": "rate", "period": 0.25, "misfire": "catch_up", "work": [40, 10, 3], "retry": retry},
        "r2": {"kind": "rate", "period": 0.5, "misfire": "catch_up", "work": [300, 5, 2]},
        "d1": {"kind": "delay", "period": 0.3, "work": [60, 5, 2], "retry": retry},
        "c1": {
            "kind": "cron",
            "expr": "* * * * * *",
            "misfire": "catch_up",
            "work": [100, 5, 3],
            "retry": {"attempts": 2, "delay": 0, "on": ["crashed"]},
        },
        "c2": {"kind": "cron", "expr": "*/2 * * * * *", "work": [200, 10, 0]},
    }


def spec_for(key: str, base: dict[str, Any], log: str, version: int, **extra: Any) -> dict[str, Any]:
    """The instance.py spec of ``key`` at ``version`` (the version travels in the arguments)."""
    max_ms, fail, crash = base["work"]
    spec = {k: v for k, v in base.items() if k != "work"}
    return {**spec, "key": key, "fn": WORK, "args": [log, key, version, max_ms, fail, crash], **extra}


def _cli_has(action: str) -> bool:
    """Whether the ``procsched`` command offers ``action`` on a store (issue 23's
    control from outside): then the nemesis uses it for some of its asks."""
    done = subprocess.run([sys.executable, "-m", "procsched", action, "--help"], capture_output=True, timeout=60)
    return done.returncode == 0


class Campaign:
    """One campaign run; ``run()`` returns the Report (see the module docstring)."""

    def __init__(
        self,
        *,
        store: str,
        seconds: float,
        seed: int,
        workdir: str,
        cluster: Any = None,
        instances: int = 3,
        lease: float = 1.0,
        workers: int = 2,
        kinds: list[str] | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        if store not in ("sqlite", "postgresql"):
            raise ValueError(f"store must be 'sqlite' or 'postgresql', not {store!r}")
        self.kind, self.seconds, self.seed = store, seconds, seed
        self.rng = random.Random(seed)
        self.workdir = workdir
        self.cluster = cluster
        self.n, self.lease, self.workers = instances, lease, workers
        self.only = set(kinds) if kinds else None  # the fault kinds to draw from (None: all)
        self.say = say or (lambda _msg: None)
        self.log = os.path.join(workdir, "runs.log")
        self.base = task_specs()
        self.versions = dict.fromkeys(self.base, 1)
        self.live = set(self.base)
        self.paused: dict[str, str] = {}  # key -> the instance that paused it
        self.faults: list[Fault] = []
        self.key_events: list[KeyEvent] = []
        self.oneshots: dict[str, float] = {}
        self.lives: list[Life] = []
        self.inst: dict[str, Instance] = {}
        self.retired: list[Instance] = []  # ended instances (their processes are checked at the end)
        self.life: dict[str, Life] = {}
        self.gens: Counter[str] = Counter()
        self.unresponsive: list[str] = []
        # later steps of the loop: an instance's restart, a resume, a re-add (due, seq, kind, target, params)
        self.pending: list[tuple[float, int, str, str, dict[str, Any]]] = []
        # The ends of faults (SIGCONT, unlock, unstall) run on timers of their
        # own: the loop may be blocked meanwhile (a clean shutdown that waits
        # for a store this very campaign keeps locked must not wait forever).
        self.releases: dict[int, tuple[threading.Timer, Callable[[], None]]] = {}
        self._releases_lock = threading.Lock()
        self._seq = itertools.count()
        self._oneshot_ids = itertools.count(1)
        self.proxy: Any = None
        self.lock: sqlite3.Connection | None = None
        self.use_cli = False

    # -- the store -----------------------------------------------------------------

    def _store(self) -> tuple[str, str]:
        """(the instances' URL, the checker's URL)."""
        keep = "keep_runs=1000000"
        if self.kind == "sqlite":
            path = os.path.join(self.workdir, "store.db")
            return f"sqlite:///{path}?{keep}&busy_timeout=1", f"sqlite:///{path}"
        from tests.campaign.proxy import Proxy

        db = self.cluster.create_db("camp")
        self.proxy = Proxy(self.cluster.socket)
        return f"{self.cluster.url_for(db, '127.0.0.1', self.proxy.port)}&{keep}", self.cluster.url_for(db)

    # -- instances -------------------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        tasks = [spec_for(k, self.base[k], self.log, self.versions[k]) for k in sorted(self.live)]
        return {"store": self.url, "lease": self.lease, "workers": self.workers, "tasks": tasks}

    def _start(self, name: str) -> None:
        self.gens[name] += 1
        label = f"{name}.{self.gens[name]}"
        inst = Instance(label, self._config(), self.workdir)
        life = Life(name, self.gens[name], label, time.time())
        self.inst[name], self.life[name] = inst, life
        self.lives.append(life)
        try:
            inst.ready(90)
        except InstanceGone as exc:
            if inst.alive():  # silent: end it
                inst.kill()
            self._ended(name, "died", str(exc)[:300])

    def _ended(self, name: str, how: str, note: str = "") -> None:
        inst, life = self.inst.pop(name), self.life.pop(name)
        life.ended, life.how = time.time(), how
        life.stops = [(a, min(b, life.ended)) for a, b in life.stops]  # a stopped instance killed
        try:
            life.exit_code = inst.proc.wait(30)
        except subprocess.TimeoutExpired:
            life.exit_code = None
        life.stderr = inst.stderr() + (f"\n[campaign] {note}" if note else "")
        self.retired.append(inst)

    def _running(self) -> list[str]:
        """Instances up and not stopped (they can answer)."""
        return sorted(n for n, i in self.inst.items() if not i.stopped and i.alive())

    def _ask(self, name: str, command: str) -> dict[str, Any] | None:
        inst = self.inst[name]
        try:
            return inst.ask(command, timeout=20)
        except InstanceGone as exc:
            self.unresponsive.append(f"{self.life[name].label}: {command!r}: {str(exc)[:500]}")
            inst.kill()
            self._ended(name, "died", f"unresponsive to {command!r}")
            self._later(0.5, "start", name)
            return None

    # -- the nemesis -------------------------------------------------------------------

    def _later(self, delay: float, kind: str, target: str = "", **params: Any) -> None:
        heapq.heappush(self.pending, (time.monotonic() + delay, next(self._seq), kind, target, params))

    def _release_later(self, delay: float, fn: Callable[[], None]) -> None:
        ident = next(self._seq)

        def fire() -> None:
            with self._releases_lock:
                if self.releases.pop(ident, None) is None:
                    return  # released already (healed)
            fn()

        timer = threading.Timer(delay, fire)
        timer.daemon = True
        with self._releases_lock:
            self.releases[ident] = (timer, fn)
        timer.start()

    def _release_all(self) -> None:
        """Every pending fault end, now."""
        with self._releases_lock:
            pending, self.releases = list(self.releases.values()), {}
        for timer, fn in pending:
            timer.cancel()
            fn()

    def _cont(self, name: str, inst: Instance, life: Life) -> None:
        if inst.stopped and inst.alive():
            inst.cont()
            life.stops[-1] = (life.stops[-1][0], time.time())

    def _unlock(self, conn: sqlite3.Connection) -> None:
        conn.execute("ROLLBACK")
        conn.close()
        self.lock = None

    def _kinds(self) -> list[tuple[str, float]]:
        kinds = [
            ("kill", 1.0),
            ("kill_user", 0.5),
            ("stop", 1.0),
            ("restart", 1.0),
            ("pause", 1.0),
            ("cancel", 0.4),
            ("replace", 0.6),
            ("oneshot", 1.0),
        ]
        if self.kind == "postgresql":
            kinds += [("pg_drop", 1.0), ("pg_stall", 0.6), ("pg_lose_commit", 1.0)]
        else:
            kinds += [("sqlite_lock", 1.0)]
        if self.only is not None:
            kinds = [(k, w) for k, w in kinds if k in self.only] or [("none", 1.0)]
        return kinds

    def _draw(self, offset: float) -> Fault:
        """The next fault, from the seed's generator alone."""
        kinds = self._kinds()
        kind = self.rng.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
        names = [chr(ord("A") + i) for i in range(self.n)]
        target = self.rng.choice(names)
        params: dict[str, Any] = {}
        if kind == "stop":
            params["seconds"] = round(self.rng.uniform(0.2, 2.5) * self.lease, 2)
        elif kind in ("kill", "kill_user"):
            params["restart_after"] = round(self.rng.uniform(0.2, 2.0), 2)
        elif kind == "restart":
            params["redefine"] = self.rng.random() < 0.4
            params["key"] = self.rng.choice(sorted(self.base))
        elif kind in ("pause", "cancel", "replace"):
            params["key"] = self.rng.choice(sorted(self.base))
            params["back_after"] = round(self.rng.uniform(0.5, 3.0), 2)
            params["back_via"] = self.rng.choice(names)
        elif kind == "oneshot":
            params["delay"] = round(self.rng.uniform(0.0, 1.5), 2)
        elif kind in ("pg_stall", "sqlite_lock"):
            params["seconds"] = round(self.rng.uniform(0.2, 2.5), 2)
        params["cli"] = self.rng.random() < 0.3  # where the procsched command offers the action
        return Fault(round(offset, 3), kind, target, params)

    def _apply(self, f: Fault) -> None:
        name, p = f.target, f.params
        if f.kind == "none":  # every kind was filtered out (``kinds``): a campaign of no faults
            return
        up = name in self.inst and self.inst[name].alive()
        if f.kind in ("kill", "kill_user"):
            if not up:
                return
            self.inst[name].kill(tree=f.kind == "kill")
            self._ended(name, f.kind)
            self._later(p["restart_after"], "start", name)
        elif f.kind == "stop":
            if not up or self.inst[name].stopped:
                return
            inst, life = self.inst[name], self.life[name]
            inst.stop()
            life.stops.append((time.time(), float("inf")))
            self._release_later(p["seconds"], lambda: self._cont(name, inst, life))
        elif f.kind == "restart":
            if not up or self.inst[name].stopped:
                return
            if p["redefine"] and p["key"] in self.live:
                self.versions[p["key"]] += 1
            self._quit(name)
            self._start(name)
            if p["redefine"] and p["key"] in self.live and name in self.life:  # stored once it is ready
                at = self.inst[name].ready_at or self.life[name].started
                self.key_events.append(
                    KeyEvent("redefine", p["key"], at, self.life[name].label, self.versions[p["key"]])
                )
        elif f.kind in ("pause", "cancel", "replace"):
            key = p["key"]
            if name not in self._running() or key not in self.live or (f.kind != "pause" and key in self.paused):
                return
            if f.kind == "pause" and key in self.paused:
                return
            if f.kind == "replace":
                version = self.versions[key] + 1
                spec = spec_for(key, self.base[key], self.log, version, replace=True)
                got = self._ask(name, "add " + json.dumps(spec))
                if got is None or got.get("added") != key:
                    f.result = f"refused: {got}"
                    return
                self.versions[key] = version
                self.key_events.append(KeyEvent("replace", key, got["t"], self.life[name].label, version))
            else:
                acked = self._control(f.kind, key, name, p["cli"])
                if acked is None:
                    f.result = "refused (not found here yet)"
                    return
                # the procsched command writes the store: every instance follows it within the
                # re-read interval (README), the one named no sooner than the others
                via = "" if p["cli"] and self.use_cli else self.life[name].label
                self.key_events.append(KeyEvent(f.kind, key, acked, via, self.versions[key]))
                if f.kind == "pause":
                    self.paused[key] = name
                    self._later(p["back_after"], "resume", p["back_via"], key=key)
                else:
                    self.live.discard(key)
                    self._later(p["back_after"], "readd", p["back_via"], key=key)
        elif f.kind == "oneshot":
            if name not in self._running():
                return
            key = f"o{next(self._oneshot_ids)}"
            base = {
                "kind": "once",
                "delay": p["delay"],
                "work": [50, 20, 5],
                "retry": {"attempts": 3, "delay": 0.05, "on": ["error", "crashed"]},
            }
            got = self._ask(name, "add " + json.dumps(spec_for(key, base, self.log, 1)))
            if got is None or got.get("added") != key:
                f.result = f"refused: {got}"
                return
            self.oneshots[key] = got["t"]
            self.key_events.append(KeyEvent("add", key, got["t"], self.life[name].label))
        elif f.kind == "pg_drop":
            f.result = f"{self.proxy.drop()} connections reset"
        elif f.kind == "pg_stall":
            self.proxy.stall(True)
            self._release_later(p["seconds"], lambda: self.proxy.stall(False))
        elif f.kind == "pg_lose_commit":
            self.proxy.lose_commit_answers(1)
        elif f.kind == "sqlite_lock":
            if self.lock is not None:
                return
            conn = sqlite3.connect(
                storesql.sqlite_path(self.check_url), timeout=10, isolation_level=None, check_same_thread=False
            )
            try:
                conn.execute("BEGIN EXCLUSIVE")
            except sqlite3.Error as exc:
                conn.close()
                f.result = f"could not lock: {exc}"
                return
            self.lock = conn
            self._release_later(p["seconds"], lambda: self._unlock(conn))
        f.at = time.time()

    def _control(self, action: str, key: str, name: str, cli: bool) -> float | None:
        """pause / resume / cancel ``key`` through instance ``name`` (or the
        ``procsched`` command, once it offers the action on a store); the
        wall time it was acknowledged, or None if refused."""
        if cli and self.use_cli:
            done = subprocess.run(
                [sys.executable, "-m", "procsched", action, key, "--store", self.url],
                capture_output=True,
                text=True,
                timeout=60,
            )
            return time.time() if done.returncode == 0 else None
        got = self._ask(name, f"{action} {key}")
        return got["t"] if got and got.get("ok") else None

    def _due(self, kind: str, target: str, params: dict[str, Any]) -> None:
        """A fault's timed end (or an instance's restart)."""
        if kind == "start":
            if target not in self.inst:
                self._start(target)
        elif kind == "resume":
            key = params["key"]
            if key not in self.paused:
                return
            via = self._via(target)
            asked = time.time()
            at = self._control("resume", key, via, False) if via else None
            if via is None or at is None:
                self._later(0.3, "resume", target, **params)  # not there yet (or down): again soon
                return
            del self.paused[key]
            self.key_events.append(KeyEvent("resume", key, at, self.life[via].label, self.versions[key], asked))
        elif kind == "readd":
            key = params["key"]
            via = self._via(target)
            if via is None:
                self._later(0.3, "readd", target, **params)
                return
            version = self.versions[key] + 1
            asked = time.time()
            got = self._ask(via, "add " + json.dumps(spec_for(key, self.base[key], self.log, version)))
            if got is None or got.get("added") != key:
                self._later(0.3, "readd", target, **params)
                return
            self.versions[key] = version
            self.live.add(key)
            self.key_events.append(KeyEvent("readd", key, got["t"], self.life[via].label, version, asked))

    def _via(self, name: str) -> str | None:
        """``name`` if it can answer, else any instance that can, else None."""
        running = self._running()
        return name if name in running else (running[0] if running else None)

    def _quit(self, name: str) -> None:
        inst = self.inst[name]
        try:
            got = inst.quit(60)
            note = "" if got.get("closed") else f"quit answered {got}"
        except (InstanceGone, subprocess.TimeoutExpired) as exc:
            self.unresponsive.append(f"{self.life[name].label}: quit: {str(exc)[:500]}")
            inst.kill()
            note = "did not shut down"
        self._ended(name, "quit", note)

    # -- the run ---------------------------------------------------------------------

    def run(self) -> Report:
        from tests.campaign import checker

        wall0 = time.monotonic()
        self.url, self.check_url = self._store()
        self.use_cli = _cli_has("pause")
        try:
            start = time.time()
            for i in range(self.n):
                self._start(chr(ord("A") + i))
            storesql.watch(self.check_url)  # (the schema is there: the instances are ready)
            t0 = time.monotonic()
            next_fault = t0 + self.rng.uniform(0.3, 1.0)
            while True:
                now = time.monotonic()
                if self.pending and self.pending[0][0] <= now:
                    _, _, kind, target, params = heapq.heappop(self.pending)
                    self._due(kind, target, params)
                    continue
                if now >= next_fault:
                    if now - t0 >= self.seconds:
                        break
                    fault = self._draw(now - t0)
                    self.faults.append(fault)
                    self._apply(fault)
                    self.say(f"  {fault.line()}")
                    next_fault = max(now, next_fault) + self.rng.uniform(0.2, 1.2)
                    continue
                wake = min(next_fault, self.pending[0][0] if self.pending else next_fault)
                time.sleep(max(0.0, wake - time.monotonic()))  # the schedule's next instant: real time passes
            self._heal()
            calm_start = time.time()
            time.sleep(self.lease + 4.0)  # the calm phase: every live task must run again (no faults)
            calm_end = time.time()
            for name in sorted(self.inst):
                self._quit(name)
            end = time.time()
            left = self._left_behind()
        finally:
            self._cleanup()
        history = History(
            self.kind,
            self.check_url,
            self.lease,
            start,
            calm_start,
            calm_end,
            end,
            self.base,
            self.lives,
            self.key_events,
            self.faults,
            self.oneshots,
            set(self.live),
            left,
            self.unresponsive,
        )
        violations, documented, checked = checker.check(history, self.log)
        if violations and self.kind == "postgresql":  # (its database goes with the cluster: kept as text)
            storesql.dump(self.check_url, os.path.join(self.workdir, "store.txt"))
        return Report(
            self.seed, self.kind, self.seconds, self.faults, checked, violations, documented, time.monotonic() - wall0
        )

    def _heal(self) -> None:
        """End every fault now: continue the stopped, unlock, unstall, resume
        the paused, put cancelled keys back, restart the dead."""
        self._release_all()
        while self.pending:
            _, _, kind, target, params = heapq.heappop(self.pending)
            if kind == "start":
                self._due(kind, target, params)
        for i in range(self.n):
            name = chr(ord("A") + i)
            if name not in self.inst:
                self._start(name)
        for _ in range(3):  # resumes and re-adds (a refused one goes back to the queue)
            for key in list(self.paused):
                self._due("resume", self.paused[key], {"key": key})
            for key in sorted(set(self.base) - self.live):
                self._due("readd", "A", {"key": key})
            self.pending.clear()
            if not self.paused and self.live == set(self.base):
                break
            time.sleep(0.5)

    def _left_behind(self) -> list[str]:
        """Every process any instance ever had that outlived the end (10 s of grace)."""
        import psutil

        procs = [p for inst in [*self.retired, *self.inst.values()] for p in inst.seen.values()]
        _, alive = psutil.wait_procs([p for p in procs if p.is_running()], timeout=10)
        out = []
        for p in alive:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    out.append(f"pid {p.pid} {p.name()} {' '.join(p.cmdline())[:120]}")
            except psutil.Error:
                pass
        return out

    def _cleanup(self) -> None:
        self._release_all()
        if self.proxy is not None:
            self.proxy.stall(False)
        for inst in [*self.inst.values(), *self.retired]:
            inst.close()
        if self.proxy is not None:
            self.proxy.close()


def run_campaign(
    store: str, seconds: float, seed: int, workdir: str | None = None, cluster: Any = None, **kwargs: Any
) -> Report:
    """One campaign on ``store`` (a PostgreSQL ``cluster`` (tests/campaign/pg.py)
    is started here if none is given); ``workdir`` is removed after unless given."""
    import tempfile

    own_dir = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="campaign-")
    own_cluster = store == "postgresql" and cluster is None
    if own_cluster:
        from tests.campaign.pg import Cluster

        cluster = Cluster().start()
    try:
        return Campaign(store=store, seconds=seconds, seed=seed, workdir=workdir, cluster=cluster, **kwargs).run()
    finally:
        if own_cluster:
            cluster.stop()
        if own_dir:
            shutil.rmtree(workdir, ignore_errors=True)
