"""A task module that takes half a second to import in a worker (each cold
worker pays it; the test process does not)."""

import multiprocessing
import time

if multiprocessing.current_process().name.startswith("procsched-worker"):
    time.sleep(0.5)


def quick() -> str:
    return "quick"
