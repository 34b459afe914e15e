"""The demo's verdict: did the healthy jobs keep their schedule next to the bad ones?

Read from the :class:`~._board.Board` at the end of ``procsched demo``
(``_session.py`` prints it under the final table).
"""

from __future__ import annotations

from ._board import Board, duration, table_width, text_table, wrap


def verdict(board: Board, elapsed: float, stopped_at: float, width: int | None = None) -> list[str]:
    """Did the healthy jobs keep their schedule next to the bad ones? Fitted
    to ``width`` (a terminal's) when given: the schedule column goes first,
    then the lateness, and the sentences wrap between words."""
    with board.lock:
        rows = list(board.rows)
        workers = len(board.workers)
    table: list[list[str]] = []
    healthy, kept = [], True
    for row in rows:
        expected = row.expected(stopped_at)
        exp_text = "-" if expected is None else f"{'' if expected[1] else '~'}{expected[0]}"
        bad = {o: n for o, n in row.counts.items() if o != "ok" and n}
        outcome = ", ".join([f"{row.counts['ok']} ok", *(f"{n} {o}" for o, n in bad.items())])
        if row.retries:
            outcome += f" ({row.retries} retr{'y' if row.retries == 1 else 'ies'})"
        table.append([row.name, row.schedule, str(row.runs), exp_text, duration(row.p99()), outcome])
        if not bad:
            on_time = expected is None or row.runs >= expected[0] - 1
            kept = kept and on_time
            healthy.append(f"{row.name} {row.runs}/{exp_text}" + ("" if on_time else " (behind)"))
    crashes = sum(r.counts["crashed"] for r in rows)
    timeouts = sum(r.counts["timeout"] for r in rows)
    worst = max((r.p99() or 0.0 for r in rows if not r.failed), default=0.0)
    replaced = board.worker_exits["crashed"] + timeouts
    headline = "kept their schedule" if kept else "did NOT all keep their schedule"
    others = "no other job lost a run" if kept else "but some healthy jobs fell behind (see expected)"
    headers = ["job", "schedule", "runs", "expected", "lateness p99", "outcomes"]
    for drop in ([], ["schedule"], ["schedule", "lateness p99"]):
        keep = [i for i, h in enumerate(headers) if h not in drop]
        shown = ([headers[i] for i in keep], [[r[i] for i in keep] for r in table])
        if width is None or table_width(*shown) <= width:
            break
    return [
        f"procsched demo: {elapsed:.1f} s on {workers} worker process{'es' if workers != 1 else ''}",
        "",
        text_table(*shown),
        "",
        *wrap(f"Healthy jobs {headline}: {', '.join(healthy)} runs; worst lateness p99 {duration(worst)}.", width),
        *wrap(
            f"{crashes} segfault(s) and {timeouts} timeout(s) each cost one run of their own job; "
            f"{replaced} worker process(es) were replaced; {others}.",
            width,
        ),
    ]
