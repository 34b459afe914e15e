"""Plain lines and JSON Lines: where the CLI's own output goes.

    listener thread ── event ──▶ Lines.on_event ──▶ one plain line (+ the run's output, framed)
                                                └──▶ one JSON object per line
    main thread ── note() / write() ──▶ the same stream, under one lock

The CLI's stream is its own: :func:`guard_streams` points file descriptors
1 and 2 - which the dispatcher and the workers inherit - away from it, so
whatever a job prints (or a crashing worker's faulthandler writes) can never
land between two JSON lines or inside the live table.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from .._core._task import RECORDS_PER_STEP
from .._events import RUN_END, RUN_MISSED, RUN_SKIPPED, TASK_CANCELLED, WORKER_EXITED, WORKER_STARTED
from . import _times
from ._board import Board, duration, outcome_text, run_output, shorten, slot_text

#: Event fields that are monotonic seconds -> the wall-clock field they become.
WALL_FIELDS = {
    "scheduled_for": "scheduled_at",
    "started_at": "started_at",
    "finished_at": "finished_at",
    "next_run": "next_run_at",
}


class Lines:
    """Where lines go. Plain: a line per finished run, per skipped slot and per
    worker change. JSON: every event as one JSON object per line. Live:
    nothing per event (the board shows them)."""

    def __init__(self, mode: str, stdout: TextIO, board: Board, *, tracebacks: bool = False) -> None:
        self.mode = mode  # "live", "plain" or "json"
        self.stdout = stdout
        self.notes: TextIO = sys.stderr if mode == "json" else stdout
        self.board = board
        self.tracebacks = tracebacks
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
        self.write(json.dumps({"ts": _times.now_iso(), **record}, default=str))

    def on_event(self, event: dict[str, Any]) -> None:
        if self.mode == "json":
            self.json_line(json_record(event))
        elif self.mode == "plain":
            line = self._plain(event)
            if line:
                self.write(line)

    def _plain(self, e: dict[str, Any]) -> str | None:
        stamp = _times.clock_text(_times.wall(time.monotonic(), _times.offset()))  # type: ignore[arg-type]
        kind = e["event"]
        if kind in (WORKER_STARTED, WORKER_EXITED):
            if kind == WORKER_STARTED:
                what = "started" if e["slot"] is None else f"started (slot {e['slot']})"
            else:
                how = e["signal"] or f"exit code {e['exitcode']}"
                what = f"exited: {how}" + (", crashed" if e["crashed"] else "")
            return f"{stamp}  worker {e['worker']} {what}"
        name = shorten(e["name"] or f"task {e['task_id']}", 20)
        if kind in RUN_END.values():
            text = (
                f"{stamp}  {name:<20} run {e['run']:<4} {e['outcome']:<9} {duration(e['duration']):>9}"
                f"  late {duration(e['lateness']):>9}  worker {e['worker']}"
            )
            text += f"  attempt {e['attempt']}" if e.get("attempt", 1) > 1 else ""
            text += f"  {e['error']}" if e["error"] else ""
            shown = run_output(e, self.tracebacks)
            if shown:  # the run's output, framed, under its line
                text += f"\n    ┌─ {name} run {e['run']} {outcome_text(e)}\n"
                text += "\n".join(f"    │ {line}" for line in shown) + "\n    └─"
            return text
        if kind == RUN_MISSED:  # each dropped slot has its own "skipped misfire" line: told only past that bound
            if e["missed"] <= RECORDS_PER_STEP:
                return None
            missed = e["missed"]
            return f"{stamp}  {name:<20} run {e['run']:<4} missed {missed} slots (the last {RECORDS_PER_STEP} follow)"
        if kind == RUN_SKIPPED:
            return f"{stamp}  {name:<20} skipped   {e['reason']:<9} (slot {slot_text(e)})"
        if kind == TASK_CANCELLED:
            return f"{stamp}  {name:<20} cancelled"
        return None  # run_started: too chatty for a line each


def json_record(event: dict[str, Any]) -> dict[str, Any]:
    """A listener event as a JSON Lines record: ``event`` and ``name`` first,
    monotonic times turned into ISO 8601 UTC wall-clock times."""
    off = _times.offset()
    record = {"event": event.pop("event"), "name": event.pop("name", None)}
    for key, value in event.items():
        if key in WALL_FIELDS:
            record[WALL_FIELDS[key]] = _times.iso(value, off)
        else:
            record[key] = value
    return record


def guard_streams(
    mode: str, on_stray: Callable[[str], None], *, ray: bool = False
) -> tuple[TextIO, TextIO, Callable[[], None]]:
    """Give the CLI a stream of its own and point fds 1 and 2 elsewhere.

    JSON: fd 1 becomes a copy of stderr (stray prints go there). Live: fds 1
    and 2 become a pipe whose lines go to ``on_stray`` (the live view shows
    them under the table). Plain: nothing changes - except with ``ray``
    (``--runner ray``), where fd 1 becomes a copy of stderr as for JSON: Ray
    writes its own log lines, and what its workers print, to this process's
    stdout and stderr, never to be mixed with the plain lines. Returns the
    CLI's output and error streams and a function that puts everything back.
    """
    if mode == "plain" and not ray:
        return sys.stdout, sys.stderr, lambda: None
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    mine = os.fdopen(os.dup(saved[1]), "w", buffering=1, encoding=sys.stdout.encoding, errors="replace")
    errors = os.fdopen(os.dup(saved[2]), "w", buffering=1, encoding=sys.stderr.encoding, errors="replace")
    if mode in ("json", "plain"):
        os.dup2(2, 1)
    else:
        read_end, write_end = os.pipe()
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        os.close(write_end)
        threading.Thread(target=_drain, args=(read_end, on_stray), name="procsched-cli-stray", daemon=True).start()

    def restore() -> None:
        for stream in (sys.stdout, sys.stderr, mine, errors):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)

    return mine, errors, restore


def _drain(fd: int, on_line: Callable[[str], None]) -> None:
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as pipe:
        for line in pipe:
            on_line(line.rstrip("\n"))
