"""Fixtures for the ``procsched`` command tests (helpers: cli_helpers.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from cli_helpers import QUICK_JOBS


@pytest.fixture
def jobs_file(tmp_path: Path):
    """write(body, name=...) -> the path of a jobs file with that body."""

    def write(body: str = QUICK_JOBS, name: str | None = None) -> Path:
        path = tmp_path / (name or f"jobs_{tmp_path.name.replace('-', '_')}.py")
        path.write_text(textwrap.dedent(body))
        return path

    return write
