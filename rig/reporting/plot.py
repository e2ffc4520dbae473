"""Timeline picture of one rollout: both tracks, speech activity, turns, injections, latency.

Runs after the rollout, never beside the audio loop. matplotlib is the `plot` extra and is
imported only when a picture is drawn, with the non-interactive Agg backend (no display).
Speech segments come from metrics.json (`timing.activity`) when the run recorded them,
otherwise they are computed here with rig.analysis.activity and the given parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from rig.analysis.activity import ActivityParams, Segment, speech_segments
from rig.analysis.rollout import Response, RolloutView, load_rollout
from rig.extras import MissingExtra

USER_COLOR = "#1f77b4"
SYSTEM_COLOR = "#d62728"
DETECT_COLOR = "#ff7f0e"  # endpointing: user's end -> the system's decision
MARK_STYLE: dict[str, dict[str, Any]] = {
    "turn.start": {"color": "#2ca02c", "linestyle": "-", "linewidth": 1.2},
    "turn.end": {"color": "#2ca02c", "linestyle": "--", "linewidth": 1.2},
    "inject": {"color": "#9467bd", "linestyle": ":", "linewidth": 1.8},
}
#: the scenario's reference marks (rig.core.refmarks), drawn as `ref.<kind>`
REF_COLOR = "#8c564b"
MARK_STYLE |= {
    f"ref.{k}": {"color": c, "linestyle": "-.", "linewidth": 1.3}
    for k, c in (
        ("eot", REF_COLOR),
        ("turn_end", REF_COLOR),
        ("int", "#e377c2"),
        ("anchor", "#17becf"),
        ("pause", "#bcbd22"),
        ("negative", "#d62728"),
        ("exclude", "#7f7f7f"),
        ("region", "#1f77b4"),
    )
}


def activity_of(
    view: RolloutView, params: ActivityParams | None = None
) -> tuple[list[Segment], list[Segment]]:
    """(user, system) speech segments: recorded ones if present, else computed now."""
    timing = view.metrics.get("timing")
    if isinstance(timing, dict) and isinstance(timing.get("activity"), dict):
        act = timing["activity"]
        try:
            return (
                [(float(s), float(e)) for s, e in act.get("user", [])],
                [(float(s), float(e)) for s, e in act.get("system", [])],
            )
        except (TypeError, ValueError):
            pass  # malformed: recompute
    rate = view.sample_rate
    return (
        speech_segments(view.user, rate, params) if view.user.size else [],
        speech_segments(view.system, rate, params) if view.system.size else [],
    )


def _envelope(
    x: npt.NDArray[np.float32], rate: int, buckets: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Min/max per bucket so a long track draws fast and still shows every peak."""
    if x.size <= 2 * buckets:
        t = np.arange(x.size) / rate
        return t, x, x
    per = x.size // buckets
    n = per * buckets
    body = x[:n].reshape(buckets, per)
    t = (np.arange(buckets) * per + per / 2) / rate
    return t, body.min(axis=1), body.max(axis=1)


def render_png(
    view: RolloutView,
    out: str | Path,
    *,
    user_speech: Sequence[Segment] = (),
    system_speech: Sequence[Segment] = (),
    title: str | None = None,
    width_in: float = 14.0,
    dpi: int = 110,
) -> Path:
    """Draw the picture of `view` into a PNG file."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
    except ImportError as exc:
        raise MissingExtra("plot", "rig plot", "matplotlib") from exc

    rate = view.sample_rate or 1
    duration_s = max(view.user.size, view.system.size) / rate
    fig, axes = plt.subplots(2, 1, sharex=True, figsize=(width_in, 5.5), dpi=dpi)
    buckets = int(width_in * dpi)
    tracks = (
        ("user", view.user, user_speech, USER_COLOR),
        ("system (playback)", view.system, system_speech, SYSTEM_COLOR),
    )
    for ax, (name, x, segs, color) in zip(axes, tracks, strict=True):
        peak = float(np.max(np.abs(x))) if x.size else 0.0
        lim = max(peak, 1e-3) * 1.15
        for s, e in segs:
            ax.axvspan(s, e, color=color, alpha=0.13, linewidth=0)
        if x.size:
            t, lo, hi = _envelope(x, rate, buckets)
            ax.fill_between(t, lo, hi, color=color, linewidth=0.4, edgecolor=color)
        ax.set_ylim(-lim, lim)
        ax.set_ylabel(name)
        ax.set_yticks([])
        ax.grid(axis="x", alpha=0.3)
        for m in view.marks:
            style = MARK_STYLE.get(m.kind, {"color": "grey", "linestyle": "-"})
            ax.axvline(m.t_s, **style)
            if m.end_s is not None:
                ax.axvspan(m.t_s, m.end_s, color=style["color"], alpha=0.12, linewidth=0)
    top = axes[0]
    for m in view.marks:
        top.annotate(
            m.label,
            (m.t_s, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(2, 2),
            textcoords="offset points",
            fontsize=7,
            rotation=30,
            color=MARK_STYLE.get(m.kind, {"color": "grey"})["color"],
        )
    sys_ax = axes[1]
    y_arrow = sys_ax.get_ylim()[1] * 0.72
    for r in view.responses:
        sys_ax.annotate(
            "",
            xy=(r.onset_s, y_arrow),
            xytext=(r.user_end_s, y_arrow),
            arrowprops={"arrowstyle": "->", "color": "black", "linewidth": 1.4},
        )
        sys_ax.axvline(r.user_end_s, color="black", linestyle=(0, (1, 2)), linewidth=0.8)
        sys_ax.annotate(
            f"{r.latency_ms:.0f} ms",
            ((r.user_end_s + r.onset_s) / 2, y_arrow),
            xytext=(0, 4),
            textcoords="offset points",
            ha="center",
            fontsize=8,
        )
        if r.decision_s is not None:
            # the endpointing wait under the latency arrow, the decision as a tick
            y_det = y_arrow * 0.8
            sys_ax.plot([r.user_end_s, r.decision_s], [y_det, y_det], color=DETECT_COLOR, lw=3)
            sys_ax.axvline(r.decision_s, color=DETECT_COLOR, linestyle="--", linewidth=0.9)
            gen = "" if r.generation_ms is None else f" · gen {r.generation_ms:.0f}"
            sys_ax.annotate(
                f"detect {r.detect_ms:.0f}{gen} ms",
                (r.user_end_s, y_det),
                xytext=(0, -12),
                textcoords="offset points",
                fontsize=7,
                color=DETECT_COLOR,
                bbox={"facecolor": "white", "alpha": 0.85, "linewidth": 0, "pad": 1},
            )
    _draw_splits(sys_ax, view.responses, y_arrow)
    yielded = _draw_yields(sys_ax, yields_of(view), y_arrow)
    sys_ax.set_xlabel("session time (s from t0)")
    sys_ax.set_xlim(0, max(duration_s, 1e-3))
    handles = [
        Patch(color=USER_COLOR, alpha=0.3, label="user speech"),
        Patch(color=SYSTEM_COLOR, alpha=0.3, label="system speech"),
        Line2D([], [], label="turn start", **MARK_STYLE["turn.start"]),
        Line2D([], [], label="turn end", **MARK_STYLE["turn.end"]),
        Line2D([], [], label="injection", **MARK_STYLE["inject"]),
        *(
            [Line2D([], [], label="reference mark", **MARK_STYLE["ref.eot"])]
            if any(m.kind.startswith("ref.") for m in view.marks)
            else []
        ),
        Line2D([], [], color="black", marker=">", label="response latency"),
        Line2D([], [], color=DETECT_COLOR, lw=3, label="endpointing (detect)"),
    ]
    if yielded:
        handles.append(Line2D([], [], label="barge-in → yield", **YIELD_STYLE))
    if any(r.parts_ms for r in view.responses):
        handles += [Patch(color=c, label=n) for n, c in zip(SPLIT_NAMES, SPLIT_COLORS, strict=True)]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    status = view.metrics.get("status")
    fig.suptitle(
        title or f"{view.path.name}" + (f"  [{status}]" if status else ""), fontsize=10, y=0.995
    )
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    out_path = Path(out)
    fig.savefig(out_path, format="png")
    plt.close(fig)
    return out_path


SPLIT_NAMES = ("uplink", "model", "downlink", "queue")
SPLIT_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#8c8c8c")


def _draw_splits(ax: Any, responses: Sequence[Response], y_arrow: float) -> None:
    """Under each latency arrow, its split as one stacked bar: uplink, model, downlink,
    queue from the user's speech end (labelled with the method that split it)."""
    height = abs(y_arrow) * 0.18
    y = y_arrow - height * 2.2
    for r in responses:
        if not r.parts_ms:
            continue
        start = r.user_end_s
        for part_ms, color in zip(r.parts_ms, SPLIT_COLORS, strict=True):
            width = max(part_ms, 0.0) / 1000
            ax.broken_barh([(start, width)], (y, height), facecolors=color, alpha=0.85)
            start += width
        if r.method:
            ax.annotate(
                r.method,
                (r.user_end_s, y),
                xytext=(0, -9),
                textcoords="offset points",
                fontsize=6,
                color="dimgray",
            )


YIELD_STYLE: dict[str, Any] = {"color": "#e377c2", "linestyle": "-.", "linewidth": 1.4}


def yields_of(view: RolloutView) -> list[tuple[float, float | None, str]]:
    """(barge-in s, yield s or None, label) per barge-in of the timing analysis
    (metrics `timing.yields`: the system's stop on its own stream, what the rule judged)."""
    timing = view.metrics.get("timing")
    raw = timing.get("yields") if isinstance(timing, dict) else None
    out: list[tuple[float, float | None, str]] = []
    for y in raw if isinstance(raw, list) else []:
        if not isinstance(y, dict) or not isinstance(y.get("barge_in_s"), int | float):
            continue
        t = float(y["barge_in_s"])
        ms = y.get("yield_ms")
        if isinstance(ms, int | float) and not isinstance(ms, bool):
            out.append((t, t + ms / 1000, f"yield {ms:.0f} ms"))
        else:
            out.append((t, None, f"no yield: {y.get('why_none') or 'not measured'}"))
    return out


def _draw_yields(
    ax: Any, yields: Sequence[tuple[float, float | None, str]], y_arrow: float
) -> bool:
    """Each barge-in as a line on the system track, the yield as a span to where the
    system stopped, labelled with the time the rule judged."""
    for t, end, label in yields:
        ax.axvline(t, **YIELD_STYLE)
        if end is not None:
            ax.axvspan(t, end, color=YIELD_STYLE["color"], alpha=0.25, linewidth=0)
        ax.annotate(
            label,
            (t, -y_arrow),
            xytext=(3, 0),
            textcoords="offset points",
            fontsize=7,
            color=YIELD_STYLE["color"],
        )
    return bool(yields)


def plot_rollout(
    rollout_dir: str | Path,
    out: str | Path | None = None,
    *,
    params: ActivityParams | None = None,
) -> Path:
    """Read a rollout directory and write its picture (default: ROLLOUT_DIR/timeline.png)."""
    view = load_rollout(rollout_dir)
    user_speech, system_speech = activity_of(view, params)
    return render_png(
        view,
        out if out is not None else view.path / "timeline.png",
        user_speech=user_speech,
        system_speech=system_speech,
    )
