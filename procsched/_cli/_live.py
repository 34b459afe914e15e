"""The live view: a rich table per job and per worker, redrawn by the main thread.

Readable from 80 x 24 up: the title is one line that fits (the words that
do not fit go, never half a word); a status that does not fit beside it
gets a line of its own. The job table uses the first of the board's
layouts that fits the terminal's width (the outcome counts merge into one
column, then the timing columns go); job names are never cut (only the
schedule wraps). Under the tables: what this instance does on its store,
the last log lines (wrapped, never cut), then what the latest runs printed
(a crash's trace with its crash), in as many lines as the terminal has left.
"""

from __future__ import annotations

import logging
import os
import textwrap
import time
from typing import Any

from ._board import OUTCOME_COLUMNS, Board, merged_header, shorten
from ._lines import Lines

_LEFT = {"job", "schedule", "next run"}
#: Lines of the output pane per run shown, at most.
OUTPUT_LINES_PER_RUN = 6
#: How "recent" lines start (and how their continuation lines are indented).
RECENT = "recent: "


class LiveView:
    """The rich live table (main thread only)."""

    def __init__(self, lines: Lines, board: Board, title: str, *, console: Any = None) -> None:
        from rich.console import Console
        from rich.live import Live

        self.board = board
        self.title = title
        self.console = console or Console(file=lines.stdout)
        self._fd = _fileno(lines.stdout)
        self.live = Live(
            console=self.console,
            auto_refresh=False,
            transient=False,
            redirect_stdout=True,
            redirect_stderr=True,
            vertical_overflow="crop",
        )
        lines.live = self.live

    def start(self) -> None:
        self.live.start()
        self.refresh()

    def refresh(self, status: str | None = None) -> None:
        """Redraw; ``status`` replaces "up N s - Ctrl-C to stop" in the title."""
        if status is None:
            status = f"up {time.monotonic() - self.board.started:.0f} s - Ctrl-C to stop"
        self._follow_terminal_size()
        self.live.update(self.render(status), refresh=True)

    def stop(self) -> None:
        self.live.stop()

    def _follow_terminal_size(self) -> None:
        # fds 1 and 2 point away from the terminal (see _lines.guard_streams),
        # so rich cannot see its size there: ask the CLI's own descriptor.
        if self._fd is None or "COLUMNS" in os.environ:
            return
        try:
            width, height = os.get_terminal_size(self._fd)
        except OSError:
            return
        if width and height:
            self.console.size = (width, height)

    def render(self, status: str) -> Any:
        from rich.console import Group
        from rich.text import Text

        width, height = self.console.size
        parts: list[Any] = [Text(line, style="bold") for line in title_lines(self.title, status, width)]
        parts += [self._job_table(width), self._worker_table()]
        with self.board.lock:
            recent = list(self.board.recent)
            store = self.board.store_status
        if store:
            parts.append(Text("\n".join(textwrap.wrap(store, width, subsequent_indent="  ")), style="dim"))
        used = sum(
            len(self.console.render_lines(p, self.console.options.update(width=width), pad=False)) for p in parts
        )
        outputs = self.board.recent_outputs()
        room = max(0, height - used - 1)
        # With runs' output to show, the log lines take half the room at most:
        # a busy log (a crash, skipped slots, each a line) must not push every
        # job's output off the screen.
        lines = recent_lines(recent, width, room // 2 if outputs else room)
        if lines:
            parts.append(Text("\n".join(lines), style="dim"))
            used += len(lines)
        pane = _output_pane(outputs, height - used - 1, width)
        if pane is not None:
            parts.append(pane)
        return Group(*parts)

    def _job_table(self, width: int) -> Any:
        from rich.measure import Measurement

        cells = self.board.job_cells(time.monotonic())
        merged = merged_header(self.board.outcomes())
        # Measure unclamped (a measurement never exceeds the width it is given).
        options = self.console.options.update(width=10 * width)
        layouts = self.board.layouts()
        for layout in layouts:
            table = _table(layout, cells, merged, wrap_schedule=False)
            if Measurement.get(self.console, options, table).maximum <= width:
                return table
        return _table(layouts[-1], cells, merged, wrap_schedule=True)

    def _worker_table(self) -> Any:
        from rich.table import Table

        workers = Table(title="workers", title_justify="left")
        headers, rows = self.board.worker_table()
        for i, header in enumerate(headers):
            workers.add_column(header, justify="left" if i == 2 else "right", no_wrap=True)
        for row in rows:
            workers.add_row(*row)
        return workers


def _table(columns: list[str], cells: list[dict[str, str]], merged: str, *, wrap_schedule: bool) -> Any:
    from rich.table import Table

    table = Table(expand=False)
    for column in columns:
        wraps = wrap_schedule and column == "schedule"
        table.add_column(
            column,
            justify="left" if column in _LEFT else "right",
            no_wrap=not wraps,
            min_width=max((len(c[column]) for c in cells), default=0) if column == "job" else None,
        )
    bad = (*OUTCOME_COLUMNS[1:], "cancelled")
    for row in cells:
        styled = [row[c] for c in columns]
        for i, column in enumerate(columns):
            failed = (
                row[column] != "0" if column in bad else column == merged and any(row.get(o, "0") != "0" for o in bad)
            )
            if failed:
                styled[i] = f"[bold red]{row[column]}[/]"
            elif column == "skipped" and row[column] != "0":
                styled[i] = f"[yellow]{row[column]}[/]"
        table.add_row(*styled)
    return table


def title_lines(title: str, status: str, width: int) -> list[str]:
    """The title, and the status beside it if both fit on one line, else
    under it: each line fitted to ``width`` by dropping the words that do
    not fit (the title's " - "-separated parts from the end, then words)."""
    joined = f"{title} - {status}"
    if len(joined) <= width:
        return [joined]
    return [_fit(title, width), *textwrap.wrap(status, width)]


def _fit(text: str, width: int) -> str:
    parts = text.split(" - ")
    while len(parts) > 1 and len(" - ".join(parts)) > width:
        parts.pop()
    text = " - ".join(parts)
    while len(text) > width and " " in text:
        text = text.rsplit(" ", 1)[0]
    return text[:width]


def recent_lines(recent: list[str], width: int, room: int) -> list[str]:
    """The "recent" log lines, each wrapped whole (never cut), the newest
    that fit in ``room`` lines, oldest first."""
    indent = " " * len(RECENT)
    chosen: list[list[str]] = []
    left = room
    for entry in reversed(recent):
        wrapped = textwrap.wrap(entry, max(20, width - len(RECENT))) or [""]
        if len(wrapped) > left:
            break
        chosen.insert(0, wrapped)
        left -= len(wrapped)
    lines = [indent + line for wrapped in chosen for line in wrapped]
    if lines:
        lines[0] = RECENT + lines[0][len(RECENT) :]
    return lines


def _output_pane(outputs: list[Any], room: int, width: int) -> Any:
    """The latest runs' output in at most ``room`` lines: the newest failed
    run's first (a crash trace stays in view however chatty the others are),
    then the newest others; shown oldest first."""
    from rich.text import Text

    if room < 2 or not outputs:
        return None
    newest_bad = next((o for o in reversed(outputs) if o.bad), None)
    order = ([newest_bad] if newest_bad is not None else []) + [o for o in reversed(outputs) if o is not newest_bad]
    chosen: list[tuple[Any, int]] = []
    left = room - 1  # the "output" line
    for shown in order:
        take = min(OUTPUT_LINES_PER_RUN, left - 1, len(shown.lines))
        if take <= 0:
            break
        chosen.append((shown, take))
        left -= take + 1
    if not chosen:
        return None
    position = {id(o): i for i, o in enumerate(outputs)}
    out = Text("output", style="dim")
    for shown, take in sorted(chosen, key=lambda pair: position[id(pair[0])]):
        out.append("\n")
        out.append(shorten(shown.title, width - 4), style="bold red" if shown.bad else "bold")
        # A crash trace reads top down (faulthandler prints the most recent
        # call first): show its head; of anything else, the newest lines.
        start = next((i for i, line in enumerate(shown.lines) if line.startswith("Fatal Python error")), None)
        if start is None or not shown.bad:
            start = len(shown.lines) - take
        if take < len(shown.lines):
            which = "last" if start + take == len(shown.lines) else f"lines {start + 1}-{start + take}"
            out.append(
                f"  ({which} {take} of {len(shown.lines)} lines)"
                if which == "last"
                else f"  ({which} of {len(shown.lines)})",
                style="dim",
            )
        for line in shown.lines[start : start + take]:
            out.append("\n│ " + line.expandtabs()[: width - 3])
    return out


class LogToBoard(logging.Handler):
    """In live mode, procsched's own log lines go to the 'recent' list."""

    def __init__(self, board: Board, level: int = logging.INFO) -> None:
        super().__init__(level)
        self.board = board

    def emit(self, record: logging.LogRecord) -> None:
        with self.board.lock:
            self.board.recent.append(record.getMessage())


def _fileno(stream: Any) -> int | None:
    try:
        return int(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return None


def have_rich() -> bool:
    try:
        import rich.live  # noqa: F401
    except ImportError:
        return False
    return True
