"""Helpers for the prefetch tests."""

from __future__ import annotations

import threading
import time


def until_stats(s, predicate, timeout=30.0):
    """Wait until ``predicate(s.stats())`` holds. ``stats()`` is a request
    answered through the listener thread, so it is never called under a lock
    a listener takes (as ``Waiter.until`` holds its condition): it is asked
    again after each event, or every 50 ms."""
    event = threading.Event()
    s.add_listener(lambda _e: event.set())
    deadline = time.monotonic() + timeout
    while not predicate(s.stats()):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out after {timeout}s waiting for {predicate}")
        event.wait(min(left, 0.05))
        event.clear()
