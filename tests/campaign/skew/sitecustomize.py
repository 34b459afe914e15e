"""A host whose wall clock is off: put this directory on PYTHONPATH with
``CAMPAIGN_SKEW_S=3.0`` and every Python process started with it (and every
fork of one: the dispatcher, its forkserver, the workers) reads the wall
clock that many seconds ahead (``time.time``, ``time.time_ns``; datetime's
``now()`` follows ``time.time``-based ``fromtimestamp`` users only). The
monotonic clock is untouched, as on a real host.
"""

import os
import time

_skew = float(os.environ.get("CAMPAIGN_SKEW_S", "0") or 0)
if _skew:
    _time, _time_ns = time.time, time.time_ns
    _skew_ns = int(_skew * 1e9)
    time.time = lambda: _time() + _skew  # type: ignore[assignment]
    time.time_ns = lambda: _time_ns() + _skew_ns  # type: ignore[assignment]
