"""Small inline SVG pictures for the HTML report: a rollout's timeline, latency CDFs, a split bar.

Plain SVG text built with numpy (no matplotlib, no fonts to fetch): the report stays one
self-contained file that any browser draws. Every label passes through `html.escape`.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

import numpy as np
import numpy.typing as npt

USER = "#1f77b4"
SYSTEM = "#d62728"
SPLIT_COLORS = {"uplink": "#1f77b4", "model": "#ff7f0e", "downlink": "#2ca02c", "queue": "#9467bd"}
CDF_COLORS = ("#000000", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b")


def _f(x: float) -> str:
    return f"{x:.1f}"


def envelope(x: npt.NDArray[np.float32], buckets: int) -> tuple[npt.NDArray[np.float32], ...]:
    """Min and max per bucket (a long track draws fast and still shows every peak)."""
    if x.size == 0:
        z = np.zeros(buckets, dtype=np.float32)
        return z, z
    per = max(1, x.size // buckets)
    n = min(x.size, per * buckets)
    body = np.zeros(per * buckets, dtype=np.float32)
    body[:n] = x[:n]
    shaped = body.reshape(buckets, per)
    return shaped.min(axis=1), shaped.max(axis=1)


def timeline_svg(
    user: npt.NDArray[np.float32],
    user_rate: int,
    system: npt.NDArray[np.float32],
    system_rate: int,
    *,
    user_speech: Sequence[tuple[float, float]] = (),
    system_speech: Sequence[tuple[float, float]] = (),
    marks: Sequence[tuple[float, str, str]] = (),
    responses: Sequence[tuple[float, float, float]] = (),
    width: int = 900,
) -> str:
    """Both tracks as min/max envelopes on one time axis (s), speech activity bars under
    each, marks as vertical lines (t_s, label, color) and responses as arrows from the user's
    turn end to the system's onset, labelled with the latency (user_end_s, onset_s, ms)."""
    dur_s = max(user.size / max(user_rate, 1), system.size / max(system_rate, 1), 0.001)
    left, right, lane_h = 60, 10, 70
    plot_w = width - left - right
    height = 2 * lane_h + 80

    def x_of(t: float) -> float:
        return left + plot_w * min(max(t / dur_s, 0.0), 1.0)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" class="timeline">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>',
    ]
    for lane, (x, rate, color, name, speech) in enumerate(
        ((user, user_rate, USER, "user", user_speech), (system, system_rate, SYSTEM, "system",
                                                        system_speech))
    ):  # fmt: skip
        top = 10 + lane * (lane_h + 15)
        mid = top + lane_h / 2
        buckets = plot_w
        lo, hi = envelope(x, buckets)
        track_s = x.size / max(rate, 1)
        used = max(1, round(buckets * track_s / dur_s))
        peak = max(float(np.abs(x).max()) if x.size else 0.0, 1e-4)
        pts_hi = " ".join(
            f"{_f(left + i * plot_w / buckets)},{_f(mid - hi[i] / peak * lane_h / 2)}"
            for i in range(min(used, buckets))
        )
        pts_lo = " ".join(
            f"{_f(left + i * plot_w / buckets)},{_f(mid - lo[i] / peak * lane_h / 2)}"
            for i in reversed(range(min(used, buckets)))
        )
        parts.append(f'<text x="4" y="{_f(mid + 4)}" font-size="12">{name}</text>')
        if pts_hi:
            parts.append(f'<polygon points="{pts_hi} {pts_lo}" fill="{color}" opacity="0.75"/>')
        for s, e in speech:
            parts.append(
                f'<rect x="{_f(x_of(s))}" y="{_f(top + lane_h)}" '
                f'width="{_f(max(x_of(e) - x_of(s), 1.0))}" height="4" fill="{color}"/>'
            )
    axis_y = 2 * lane_h + 35
    parts.append(
        f'<line x1="{left}" y1="{axis_y}" x2="{left + plot_w}" y2="{axis_y}" stroke="#444"/>'
    )
    step = _tick_step(dur_s)
    t = 0.0
    while t <= dur_s + 1e-9:
        parts.append(
            f'<text x="{_f(x_of(t))}" y="{axis_y + 14}" font-size="10" '
            f'text-anchor="middle">{t:g}</text>'
        )
        t += step
    parts.append(f'<text x="{left + plot_w}" y="{axis_y + 28}" font-size="10" '
                 'text-anchor="end">seconds</text>')  # fmt: skip
    for t_s, label, color in marks:
        xx = x_of(t_s)
        parts.append(
            f'<line x1="{_f(xx)}" y1="8" x2="{_f(xx)}" y2="{axis_y}" stroke="{color}" '
            f'stroke-dasharray="3,2"><title>{escape(label)} at {t_s:.3f} s</title></line>'
        )
    for end_s, onset_s, ms in responses:
        y = lane_h + 18
        parts.append(
            f'<line x1="{_f(x_of(end_s))}" y1="{y}" x2="{_f(x_of(onset_s))}" y2="{y}" '
            'stroke="#000" stroke-width="2"/>'
            f'<text x="{_f((x_of(end_s) + x_of(onset_s)) / 2)}" y="{y - 3}" font-size="11" '
            f'text-anchor="middle">{ms:.0f} ms</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _tick_step(span: float) -> float:
    for step in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600):
        if span / step <= 12:
            return float(step)
    return span / 10


def cdf_svg(
    series: dict[str, Sequence[float]], *, width: int = 640, height: int = 300, unit: str = "ms"
) -> str:
    """Empirical CDFs (a step per value) of each named series on one axis."""
    values = [v for vs in series.values() for v in vs]
    left, bottom, top, right = 50, 35, 10, 150
    pw, ph = width - left - right, height - top - bottom
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" class="cdf">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>',
    ]
    if not values:
        parts.append(f'<text x="{left}" y="{top + 20}">no values</text></svg>')
        return "".join(parts)
    lo, hi = min(0.0, min(values)), max(values) * 1.05 or 1.0

    def xy(v: float, q: float) -> str:
        return f"{_f(left + pw * (v - lo) / (hi - lo))},{_f(top + ph * (1 - q))}"

    parts.append(
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>'
    )
    for q in (0.5, 0.9, 0.95, 0.99):
        y = top + ph * (1 - q)
        parts.append(
            f'<line x1="{left}" y1="{_f(y)}" x2="{left + pw}" y2="{_f(y)}" stroke="#ddd"/>'
            f'<text x="{left - 4}" y="{_f(y + 3)}" font-size="9" text-anchor="end">{q:g}</text>'
        )
    step = _tick_step(hi - lo)
    t = 0.0
    while t <= hi + 1e-9:
        if t >= lo:
            parts.append(
                f'<text x="{_f(left + pw * (t - lo) / (hi - lo))}" y="{top + ph + 14}" '
                f'font-size="10" text-anchor="middle">{t:g}</text>'
            )
        t += step
    parts.append(f'<text x="{left + pw}" y="{height - 4}" font-size="10" '
                 f'text-anchor="end">{escape(unit)}</text>')  # fmt: skip
    for i, (name, vs) in enumerate(series.items()):
        color = CDF_COLORS[i % len(CDF_COLORS)]
        xs = sorted(vs)
        if not xs:
            continue
        pts = [xy(xs[0], 0.0)]
        for k, v in enumerate(xs):
            pts += [xy(v, k / len(xs)), xy(v, (k + 1) / len(xs))]
        parts.append(
            f'<polyline points="{" ".join(pts)}" fill="none" stroke="{color}" stroke-width="1.5"/>'
            f'<text x="{left + pw + 8}" y="{top + 14 + 14 * i}" font-size="11" '
            f'fill="{color}">{escape(name)} (n={len(xs)})</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def split_bar_svg(parts_ms: dict[str, float | None], total_ms: float, width: int = 260) -> str:
    """One response's latency as stacked uplink/model/downlink/queue segments."""
    h = 14
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" '
           f'viewBox="0 0 {width} {h}" class="split">']  # fmt: skip
    x = 0.0
    scale = width / total_ms if total_ms > 0 else 0.0
    for name, color in SPLIT_COLORS.items():
        v = parts_ms.get(name)
        if v is None or v <= 0:
            continue
        w = v * scale
        out.append(
            f'<rect x="{_f(x)}" y="0" width="{_f(w)}" height="{h}" fill="{color}">'
            f"<title>{name} {v:.1f} ms</title></rect>"
        )
        x += w
    out.append("</svg>")
    return "".join(out)
