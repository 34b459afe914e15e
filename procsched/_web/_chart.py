"""A job's chart: run durations and lateness, as inline SVG drawn here.

No script and no style attribute (the console's Content-Security-Policy
allows neither inline): presentation attributes and classes only.
"""

from __future__ import annotations

from markupsafe import Markup, escape

from ._model import Slot
from ._words import duration_text

WIDTH, HEIGHT, PAD_LEFT, PAD_BOTTOM, PAD_TOP = 640, 180, 64, 22, 10


def chart(runs: list[Slot]) -> Markup:
    """Durations as bars and lateness as a line, one step per finished run (oldest left)."""
    done = [r for r in runs if r.duration is not None]
    if not done:
        return Markup('<p class="muted">No finished run to chart yet.</p>')
    durations = [max(0.0, r.duration or 0.0) for r in done]
    lateness = [max(0.0, r.lateness or 0.0) for r in done]
    top = max(max(durations), max(lateness)) or 1e-6
    plot_w, plot_h = WIDTH - PAD_LEFT - 8, HEIGHT - PAD_BOTTOM - PAD_TOP
    step = plot_w / len(done)
    bar = max(1.0, step * 0.7)

    def y(value: float) -> float:
        return PAD_TOP + plot_h - value / top * plot_h

    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="durations and lateness of the last {len(done)} runs">',
        f'<line class="axis" x1="{PAD_LEFT}" y1="{PAD_TOP + plot_h}" x2="{WIDTH - 8}" y2="{PAD_TOP + plot_h}"/>',
        f'<line class="axis" x1="{PAD_LEFT}" y1="{PAD_TOP}" x2="{PAD_LEFT}" y2="{PAD_TOP + plot_h}"/>',
        f'<text class="tick" x="{PAD_LEFT - 6}" y="{PAD_TOP + 10}" text-anchor="end">{escape(duration_text(top))}</text>',
        f'<text class="tick" x="{PAD_LEFT - 6}" y="{PAD_TOP + plot_h}" text-anchor="end">0</text>',
    ]  # fmt: skip
    for i, (r, d) in enumerate(zip(done, durations)):
        x = PAD_LEFT + i * step + (step - bar) / 2
        title = f"run {r.run}: {duration_text(d)}, {r.outcome}"
        parts.append(f'<rect class="bar o-{escape(r.outcome or "")}" x="{x:.1f}" y="{y(d):.1f}" width="{bar:.1f}" '
                     f'height="{PAD_TOP + plot_h - y(d):.1f}"><title>{escape(title)}</title></rect>')  # fmt: skip
    points = " ".join(f"{PAD_LEFT + i * step + step / 2:.1f},{y(v):.1f}" for i, v in enumerate(lateness))
    parts.append(f'<polyline class="late" points="{points}"/>')
    parts.append(f'<text class="tick" x="{PAD_LEFT}" y="{HEIGHT - 6}">oldest</text>')
    parts.append(f'<text class="tick" x="{WIDTH - 8}" y="{HEIGHT - 6}" text-anchor="end">newest</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
