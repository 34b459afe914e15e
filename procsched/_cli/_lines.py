"""Plain lines and JSON Lines: where the CLI's own output goes.

    listener thread ── event ──▶ Output.on_event ──▶ one plain line / one JSON object
    main thread ── note() / write() ──▶ the same stream, under one lock
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any, TextIO

from .._events import RUN_END, RUN_MISSED, TASK_CANCELLED, WORKER_EXITED, WORKER_STARTED
from ._board import Board, _duration, _shorten


class Output:
    """Where lines go. Plain: a line per finished run and per worker change.
    JSON: every event as one JSON object per line. Live: nothing per event."""

    def __init__(self, mode: str, stdout: TextIO, board: Board) -> None:
        self.mode = mode  # "live", "plain" or "json"
        self.stdout = stdout
        self.notes = sys.stderr if mode == "json" else stdout
        self.board = board
        self.lock = threading.Lock()
        self.live: Any = None
        self.closed = threading.Event()  # the reader of stdout went away

    def write(self, text: str, stream: TextIO | None = None) -> None:
        with self.lock:
            if self.live is not None:
                self.live.console.print(text, markup=False, highlight=False)
                return
            stream = stream or self.stdout
            if stream is self.stdout and self.closed.is_set():
                return
            try:
                stream.write(text + "\n")
                stream.flush()
            except BrokenPipeError:  # e.g. `procsched run jobs.py --json | head`: stop, quietly
                if stream is self.stdout:
                    devnull = os.open(os.devnull, os.O_WRONLY)
                    os.dup2(devnull, stream.fileno())  # so that the flush at exit cannot fail
                    os.close(devnull)
                    self.closed.set()

    def note(self, text: str) -> None:
        self.write(f"procsched: {text}", self.notes)

    def json_line(self, record: dict[str, Any]) -> None:
        self.write(json.dumps({"ts": round(time.time(), 6), **record}, default=str))

    def on_event(self, event: dict[str, Any]) -> None:
        if self.mode == "json":
            first = {"event": event.pop("event"), "name": event.pop("name", None)}
            self.json_line({**first, **event})
        elif self.mode == "plain":
            line = self._plain(event)
            if line:
                self.write(line)

    def _plain(self, e: dict[str, Any]) -> str | None:
        stamp = f"{time.monotonic() - self.board.started:8.2f}s"
        kind = e["event"]
        if kind in (WORKER_STARTED, WORKER_EXITED):
            if kind == WORKER_STARTED:
                what = "started" if e["slot"] is None else f"started (slot {e['slot']})"
            else:
                how = e["signal"] or f"exit code {e['exitcode']}"
                what = f"exited: {how}" + (", crashed" if e["crashed"] else "")
            return f"{stamp}  worker {e['worker']} {what}"
        name = _shorten(e["name"] or f"task {e['task_id']}", 20)
        if kind in RUN_END.values():
            text = (f"{stamp}  {name:<20} run {e['run']:<4} {e['outcome']:<9} {_duration(e['duration']):>9}"
                    f"  late {_duration(e['lateness']):>9}  worker {e['worker']}")  # fmt: skip
            return text + (f"  {e['error']}" if e["error"] else "")
        if kind == RUN_MISSED:
            return f"{stamp}  {name:<20} run {e['run']:<4} skipped {e['missed']} missed slot(s)"
        if kind == TASK_CANCELLED:
            return f"{stamp}  {name:<20} cancelled"
        return None  # run_started: too chatty for a line each

