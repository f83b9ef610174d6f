"""Inline SVG charts, drawn on the server: no chart library, nothing fetched.

Each chart is an ``<svg role="img">`` with a title and description for screen readers;
the pages put the same numbers in a table beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT = 640, 160
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 56, 8, 10, 22


def _fmt(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.0f}"
    return f"{value:.2g}"


def _frame(title: str, desc: str, body: str, ymax: float, left: str, right: str) -> str:
    inner_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    grid = []
    for i in range(3):
        y = PAD_TOP + inner_h * i / 2
        value = ymax * (1 - i / 2)
        grid.append(
            f'<line x1="{PAD_LEFT}" x2="{WIDTH - PAD_RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
            f'class="grid"/><text x="{PAD_LEFT - 4}" y="{y + 4:.1f}" class="axis" '
            f'text-anchor="end">{escape(_fmt(value))}</text>'
        )
    return (
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-labelledby="{{id}}-t {{id}}-d">'
        f'<title id="{{id}}-t">{escape(title)}</title><desc id="{{id}}-d">{escape(desc)}</desc>'
        + "".join(grid)
        + f'<text x="{PAD_LEFT}" y="{HEIGHT - 4}" class="axis">{escape(left)}</text>'
        f'<text x="{WIDTH - PAD_RIGHT}" y="{HEIGHT - 4}" class="axis" text-anchor="end">'
        f"{escape(right)}</text>" + body + "</svg>"
    )


def line_chart(
    chart_id: str, title: str, unit: str, points: Sequence[tuple[datetime, float]]
) -> SafeString:
    """A line over time. ``points`` are (time, value), oldest first."""
    if not points:
        return mark_safe('<p class="muted">No samples yet.</p>')
    ymax = max(v for _, v in points) or 1.0
    t0, t1 = points[0][0].timestamp(), points[-1][0].timestamp()
    span = (t1 - t0) or 1.0
    inner_w = WIDTH - PAD_LEFT - PAD_RIGHT
    inner_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    coords = " ".join(
        f"{PAD_LEFT + inner_w * (t.timestamp() - t0) / span:.1f},"
        f"{PAD_TOP + inner_h * (1 - v / ymax):.1f}"
        for t, v in points
    )
    body = f'<polyline class="line" points="{coords}"/>'
    if len(points) == 1:
        x, y = coords.split(",")
        body = f'<circle class="dot" cx="{x}" cy="{y}" r="3"/>'
    desc = (
        f"{len(points)} samples from {points[0][0]:%Y-%m-%d %H:%M} to {points[-1][0]:%Y-%m-%d %H:%M}; "
        f"latest {_fmt(points[-1][1])} {unit}, highest {_fmt(ymax)} {unit}."
    )
    svg = _frame(
        title, desc, body, ymax, f"{points[0][0]:%m-%d %H:%M}", f"{points[-1][0]:%m-%d %H:%M}"
    )
    return mark_safe(svg.replace("{id}", escape(chart_id)))  # noqa: S308 - every part is escaped


def bar_chart(
    chart_id: str,
    title: str,
    unit: str,
    bars: Sequence[tuple[str, float, float | None]],
) -> SafeString:
    """Bars, oldest left: (label, value, optional inner value drawn over it)."""
    if not bars:
        return mark_safe('<p class="muted">Nothing recorded yet.</p>')
    ymax = max(max(v, inner or 0) for _, v, inner in bars) or 1.0
    inner_w = WIDTH - PAD_LEFT - PAD_RIGHT
    inner_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    step = inner_w / len(bars)
    width = max(1.0, step * 0.8)
    parts = []
    for i, (label, value, inner) in enumerate(bars):
        x = PAD_LEFT + i * step + (step - width) / 2
        h = inner_h * value / ymax
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{PAD_TOP + inner_h - h:.1f}" width="{width:.1f}" '
            f'height="{h:.1f}"><title>{escape(label)}: {escape(_fmt(value))} {escape(unit)}'
            f"</title></rect>"
        )
        if inner is not None:
            hi = inner_h * inner / ymax
            parts.append(
                f'<rect class="bar-inner" x="{x:.1f}" y="{PAD_TOP + inner_h - hi:.1f}" '
                f'width="{width:.1f}" height="{hi:.1f}"/>'
            )
    values = [v for _, v, _ in bars]
    desc = (
        f"{len(bars)} bars; latest {_fmt(values[-1])} {unit}, highest {_fmt(max(values))} {unit}, "
        f"median {_fmt(sorted(values)[len(values) // 2])} {unit}."
    )
    svg = _frame(title, desc, "".join(parts), ymax, bars[0][0], bars[-1][0])
    return mark_safe(svg.replace("{id}", escape(chart_id)))  # noqa: S308 - every part is escaped


# Canonical resource-seconds -> a unit people read.
USAGE_UNITS = {
    "cpu": ("core-hours", 1000 * 3600),
    "memory": ("GiB-hours", 2**30 * 3600),
    "ephemeral-storage": ("GiB-hours", 2**30 * 3600),
}


def usage_unit(resource: str) -> tuple[str, float]:
    return USAGE_UNITS.get(resource, (f"{resource}-hours", 3600))
