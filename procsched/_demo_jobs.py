"""The jobs file behind ``procsched demo``: an ordinary jobs file, like yours.

Two CPU-heavy periodic jobs, a quick high-priority heartbeat, a calendar
job on the wall clock, a flaky job that succeeds on its retry, and two
misbehaving jobs: one crashes its worker process (a segfault) every third
run, one hangs and is killed by its timeout. The point of the demo: the
misbehaving jobs lose their own runs - one each - and nothing else; the
healthy jobs keep their schedule.
"""

from __future__ import annotations

import ctypes
import faulthandler
import hashlib
import time

from procsched import Priority, Retry, cron, current_run, every


@every(1.0)
def count_primes() -> int:
    """CPU-bound pure Python (~0.2 s): trial division, holding the GIL throughout."""
    count = 0
    for n in range(2, 100_000):
        for d in range(2, int(n**0.5) + 1):
            if n % d == 0:
                break
        else:
            count += 1
    return count


@every(0.5)
def hash_chain() -> str:
    """CPU-bound (~0.05 s): 100,000 chained SHA-256 digests."""
    digest = b"procsched"
    for _ in range(100_000):
        digest = hashlib.sha256(digest).digest()
    return digest.hex()


@every(0.25, priority=Priority.HIGH)
def heartbeat() -> float:
    """Quick and high priority: when workers are busy it goes first."""
    return time.time()


@cron("*/2 * * * * *")  # six fields, seconds first: every even second of the wall clock
def on_the_clock() -> str:
    """A calendar job: runs at hh:mm:00, :02, :04 ... on the wall clock, whatever DST does."""
    return current_run().scheduled_at.isoformat()  # type: ignore[union-attr]


@every(2.0, initial_delay=0.7, retry=Retry(attempts=3, delay=0.1))
def flaky_fetch() -> int:
    """Its first attempt at every run fails (an upstream that is not ready);
    the retry 0.1 s later succeeds: each run shows one error, then ok."""
    if current_run().attempt == 1:
        raise ConnectionError("upstream not ready yet (the retry will succeed)")
    return current_run().attempt


@every(1.0, initial_delay=0.5)
def segfaulter() -> None:
    """Every third run dereferences a NULL pointer: the worker dies of SIGSEGV."""
    if (current_run().run or 0) % 3 == 0:
        faulthandler.disable()  # keep the screen tidy: no C-level traceback on the terminal
        ctypes.string_at(0)


@every(4.0, initial_delay=1.0, timeout=1.0)
def hangs() -> None:
    """Never returns; after its 1 s timeout its worker is killed and replaced."""
    time.sleep(3600)
