"""The live view: a rich table per job and per worker, redrawn by the main thread."""

from __future__ import annotations

import logging
import time
from typing import Any

from ._board import OUTCOME_COLUMNS, Board, _shorten
from ._lines import Output


class LiveView:
    """The rich live table (main thread only)."""

    def __init__(self, output: Output, board: Board, title: str) -> None:
        from rich.console import Console
        from rich.live import Live

        self.board = board
        self.title = title
        self.console = Console(file=output.stdout)
        self.live = Live(console=self.console, auto_refresh=False, transient=False,
                         redirect_stdout=True, redirect_stderr=True)  # fmt: skip
        output.live = self.live

    def start(self) -> None:
        self.live.start()
        self.refresh()

    def refresh(self, status: str | None = None) -> None:
        """Redraw; ``status`` replaces "up N s - Ctrl-C to stop" in the title."""
        if status is None:
            status = f"up {time.monotonic() - self.board.started:.0f} s - Ctrl-C to stop"
        self.live.update(self.render(status), refresh=True)

    def stop(self) -> None:
        self.live.stop()

    def render(self, status: str) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        board = self.board
        jobs = Table(title=f"{self.title} - {status}", title_justify="left", expand=False)
        headers, rows = board.job_table(time.monotonic())
        for i, header in enumerate(headers):
            jobs.add_column(header, justify="left" if i < 3 else "right", no_wrap=True)
        for row in rows:
            styled = list(row)
            for i, outcome in enumerate(OUTCOME_COLUMNS, start=4):
                if outcome != "ok" and row[i] != "0":
                    styled[i] = f"[bold red]{row[i]}[/]"
            jobs.add_row(*styled)
        workers = Table(title="workers", title_justify="left")
        headers, rows = board.worker_table()
        for i, header in enumerate(headers):
            workers.add_column(header, justify="left" if i == 2 else "right", no_wrap=True)
        for row in rows:
            workers.add_row(*row)
        parts: list[Any] = [jobs, workers]
        with board.lock:
            recent = list(board.recent)
        if recent:
            parts.append(Text("recent: " + "\n        ".join(recent), style="dim"))
        return Group(*parts)


class LogToBoard(logging.Handler):
    """In live mode, procsched's own log lines go to the 'recent' list."""

    def __init__(self, board: Board) -> None:
        super().__init__(logging.INFO)
        self.board = board

    def emit(self, record: logging.LogRecord) -> None:
        with self.board.lock:
            self.board.recent.append(_shorten(record.getMessage(), 110))



def _have_rich() -> bool:
    try:
        import rich.live  # noqa: F401
    except ImportError:
        return False
    return True
