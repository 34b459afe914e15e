"""A task module whose import never finishes in a worker."""

import multiprocessing
import time

if multiprocessing.current_process().name.startswith("procsched-worker"):
    time.sleep(3600)


def never() -> None:
    pass
