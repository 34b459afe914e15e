"""Task functions of the ``procsched why`` tests (importable by reference)."""

from __future__ import annotations


def ok() -> None:
    pass


def fails() -> None:
    raise ValueError("no data")
