"""The command line's value converters: each turns one option's text into its
value or raises ``argparse.ArgumentTypeError`` naming what it wanted (argparse
prefixes the option's name: ``argument --workers: must be at least 1, not 0``).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def positive_int(option: str, minimum: int = 1) -> Callable[[str], int]:
    """A whole number ``>= minimum`` (``--workers``, ``-n``)."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    convert.__name__ = option
    return convert


def seconds(option: str) -> Callable[[str], float]:
    """A positive, finite number of seconds (``--timeout``, ``--wait``)."""

    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number of seconds, not {text!r}") from None
        if not value > 0 or math.isinf(value):
            raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
        return value

    convert.__name__ = option
    return convert


#: --max-worker-memory units: binary (K, KiB, ...) and decimal (KB, ...).
_UNITS = {
    "": 1,
    "k": 2**10,
    "kib": 2**10,
    "m": 2**20,
    "mib": 2**20,
    "g": 2**30,
    "gib": 2**30,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
}


def size(text: str) -> int:
    """A size in bytes: ``1073741824``, ``512M``, ``2G``, ``1.5GB``."""
    number = text.strip().rstrip("KMGBikmgb")
    unit = text.strip()[len(number) :].lower()
    try:
        value = float(number) * _UNITS[unit]
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"must be a size in bytes (1073741824, 512M, 2G), not {text!r}") from None
    if not 1 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"must be a positive size, not {text!r}")
    return int(value)


def port(text: str) -> int:
    """A TCP port, 0..65535 (0: any free port)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a port number, not {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0..65535, not {value}")
    return value
