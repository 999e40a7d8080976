"""Small hand-made SVG plots for the HTML report (report_html.py): no library, no network.

`line_plot` draws one polyline per series on linear axes with a few round ticks; `rate_series`
turns a campaign's timeline (seconds, programs checked so far) into programs per second."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


@dataclass(frozen=True)
class Series:
    label: str
    points: tuple[tuple[float, float], ...]


def rate_series(points: Sequence[tuple[float, int]]) -> tuple[tuple[float, float], ...]:
    """Programs per second over each interval between consecutive points, placed at the
    interval's end (a step back to the previous point's time would hide nothing: intervals are
    short and even). Intervals of zero length are skipped."""
    out: list[tuple[float, float]] = []
    for (t0, n0), (t1, n1) in itertools.pairwise(points):
        if t1 > t0:
            out.append((t1, (n1 - n0) / (t1 - t0)))
    return tuple(out)


def nice_ticks(hi: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least `hi` (1, 2 or 5 times a power of ten apart)."""
    if not math.isfinite(hi) or hi <= 0:
        return [0.0, 1.0]
    raw = hi / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    n = math.ceil(hi / step - 1e-9)
    return [i * step for i in range(n + 1)]


def _fmt(x: float) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:g}"


def line_plot(series: Sequence[Series], *, title: str, x_label: str, y_label: str,
              width: int = 560, height: int = 260) -> str:
    """An inline `<svg>` with the series as polylines (each point also a dot, so a series of one
    point shows), axes from 0, ticks, a legend when there is more than one series."""
    left, right, top, bottom = 64, 16, 28, 44
    pw, ph = width - left - right, height - top - bottom
    xs = [x for s in series for x, _ in s.points]
    ys = [y for s in series for _, y in s.points]
    xt = nice_ticks(max(xs, default=0.0))
    yt = nice_ticks(max(ys, default=0.0))
    x_hi, y_hi = xt[-1], yt[-1]

    def px(x: float) -> float:
        return left + pw * x / x_hi

    def py(y: float) -> float:
        return top + ph - ph * y / y_hi

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>',
           f'<text x="{left}" y="16" font-size="13" font-weight="bold">{escape(title)}</text>']
    for v in yt:
        y = py(v)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{_fmt(v)}</text>')
    for v in xt:
        x = px(v)
        out.append(f'<line x1="{x:.1f}" y1="{top + ph}" x2="{x:.1f}" y2="{top + ph + 4}" stroke="#333"/>')
        out.append(f'<text x="{x:.1f}" y="{top + ph + 16}" font-size="11" text-anchor="middle">{_fmt(v)}</text>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#333"/>')
    out.append(f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#333"/>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{height - 6}" font-size="12" text-anchor="middle">'
               f'{escape(x_label)}</text>')
    out.append(f'<text x="14" y="{top + ph / 2:.1f}" font-size="12" text-anchor="middle" '
               f'transform="rotate(-90 14 {top + ph / 2:.1f})">{escape(y_label)}</text>')
    if not xs:
        out.append(f'<text x="{left + pw / 2:.1f}" y="{top + ph / 2:.1f}" font-size="12" text-anchor="middle" '
                   'fill="#888">no data</text>')
    for i, s in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in s.points)
        if len(s.points) > 1:
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{pts}">'
                       f'<title>{escape(s.label)}</title></polyline>')
        for x, y in s.points:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{colour}">'
                       f'<title>{escape(s.label)}: {_fmt(round(y, 2))} at {_fmt(round(x, 2))}</title></circle>')
        if len(series) > 1:
            ly = top + 14 * (i + 1)
            out.append(f'<rect x="{left + pw - 180}" y="{ly - 9}" width="10" height="10" fill="{colour}"/>')
            out.append(f'<text x="{left + pw - 166}" y="{ly}" font-size="11">{escape(s.label[:32])}</text>')
    out.append("</svg>")
    return "\n".join(out)
