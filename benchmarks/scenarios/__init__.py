"""The benchmark scenarios, in the order the full suite runs them."""

from __future__ import annotations

from . import cpu_periodic, crashes, fixed_rate, restart, scale, startup, stores, throughput, timer_accuracy

REGISTRY = {
    m.NAME: m for m in (cpu_periodic, throughput, timer_accuracy, fixed_rate, scale, crashes, startup, stores, restart)
}
