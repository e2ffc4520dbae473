"""`eot_int`: detection of gold end-of-turn and interruption anchors (TurnBench, V-C).

Predictions are the system's speech onsets on the playback clock (every VAD segment start,
as TurnBench reads full-duplex models: "an EOT is committed at each model speech onset"),
or with `source=server_vad` the server's own `speech_stopped` (for `eot`) and
`speech_started` (for `int`) events, at the server's time mapped onto the shared clock by
the rollout's clock fit (`mapped: server_clock`), else at their arrival (`mapped: arrival`,
which adds the downlink delay). Predictions inside an `exclude` span are dropped first.

Per rollout and anchor kind (`eot`, `int`), anchors in time order: a prediction matches an
anchor at t inside [t - pre_s, t + max_s]; the earliest unclaimed prediction in the window
is the true positive (signed delta t = prediction - anchor; negative: committed early). A
`negative` span counts at most one false positive (an unclaimed prediction inside it) and
otherwise one true negative; its `label` names its track (`eot` or `int`; none: every track
the rollout has anchors for, `eot` when it has none). Predictions elsewhere are ignored.

Reported per kind and group: recall TP/(TP+FN), false-positive rate FP/(FP+TN) (Wilson
intervals), delta t p10/p50/p90 over true positives (bootstrap intervals), and whether the
FPR is within `fpr_budget` (TurnBench ranks by recall under a 0.15 FPR ceiling). Every
rollout's predictions are kept in `units` (and written as a JSON list with `export=PATH`)
for external scorers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rig.clockfit.mapping import ClockMap
from rig.core.units import NS_PER_S
from rig.errors import ConfigError
from rig.scoring.measures import (
    CI,
    Unit,
    clusters,
    grouped,
    percentile_metric,
    r4,
    rate_metric,
    unit,
)
from rig.scoring.rundir import Rollout, ScoringRun, clip_to_regions

KINDS = ("eot", "int")
SOURCES = ("playback", "server_vad")
#: the server events that are predictions, per anchor kind (events.jsonl, without `server.`)
SERVER_EVENTS = {"eot": "speech_stopped", "int": "speech_started"}


@dataclass(frozen=True, slots=True)
class Params:
    """eot_int parameters (published defaults: TurnBench)."""

    source: str = "playback"
    """`playback` (system speech onsets) or `server_vad` (the server's VAD events)."""
    pre_s: float = 0.25
    """Matching tolerance before the anchor (tau_pre)."""
    max_s: float = 3.0
    """Latency deadline after the anchor (tau_max)."""
    fpr_budget: float = 0.15
    """FPR ceiling a result must stay under to rank (TurnBench test; 0.1 on dev)."""
    export: str = ""
    """Write every item's predictions and anchors as a JSON list to this path."""

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ConfigError(f"eot_int source must be one of {', '.join(SOURCES)}")
        if self.pre_s < 0 or self.max_s <= 0:
            raise ConfigError("eot_int: pre_s must be >= 0 and max_s > 0")


def predictions(r: Rollout, kind: str, source: str) -> tuple[list[float], str]:
    """Prediction times (s, session timeline) for one anchor kind, and how they were timed."""
    if source == "playback":
        return sorted(i.start_s for i in clip_to_regions(r, list(r.speech))), "playback"
    name = "server." + SERVER_EVENTS[kind]
    fit = r.metrics.get("clock_fit")
    cmap = None
    if isinstance(fit, dict) and not fit.get("refused") and "local_ref_ns" in fit:
        try:
            cmap = ClockMap.from_dict(fit)
        except (KeyError, TypeError, ValueError):
            cmap = None
    out: list[float] = []
    how = "server_clock" if cmap is not None else "arrival"
    for ev in r.events:
        if ev.get("kind") != name or r.t0_ns is None:
            continue
        ts = ev.get("server_ts_ms")
        if cmap is not None and isinstance(ts, int | float):
            t_ns = cmap.to_local(round(float(ts) * 1e6))
        elif isinstance(ev.get("t_ns"), int):
            t_ns, how = int(ev["t_ns"]), "arrival"
        else:
            continue
        out.append((t_ns - r.t0_ns) / NS_PER_S)
    return sorted(out), how


def match(
    anchors: list[float], preds: list[float], pre_s: float, max_s: float
) -> tuple[list[float | None], set[int]]:
    """Per anchor (time order) its delta t or None; and the indices of claimed predictions."""
    claimed: set[int] = set()
    deltas: list[float | None] = []
    for t in sorted(anchors):
        hit = next(
            (k for k, x in enumerate(preds) if k not in claimed and t - pre_s <= x <= t + max_s),
            None,
        )
        if hit is None:
            deltas.append(None)
        else:
            claimed.add(hit)
            deltas.append(preds[hit] - t)
    return deltas, claimed


def _rollout_units(r: Rollout, p: Params, ci: CI) -> list[Unit]:
    excl = r.marks_of("exclude")
    anchors = {k: [m.t_s for m in r.marks_of(k)] for k in KINDS}
    tracks_with = [k for k in KINDS if anchors[k]] or ["eot"]
    out: list[Unit] = []
    for kind in KINDS:
        negs = [
            m
            for m in r.marks_of("negative")
            if m.label == kind or (m.label not in KINDS and kind in tracks_with)
        ]
        if not anchors[kind] and not negs:
            continue
        raw, how = predictions(r, kind, p.source)
        preds = [x for x in raw if not any(e.t_s <= x < e.stop_s for e in excl)]
        deltas, claimed = match(anchors[kind], preds, p.pre_s, p.max_s)
        for t, d in zip(sorted(anchors[kind]), deltas, strict=True):
            out.append(
                unit(r, ci, mark=kind, role="anchor", t_s=r4(t), tp=d is not None,
                     delta_ms=None if d is None else round(d * 1000.0, 1))
            )  # fmt: skip
        free = [x for k, x in enumerate(preds) if k not in claimed]
        for m in negs:
            fp = any(m.t_s <= x < m.stop_s for x in free)
            out.append(
                unit(r, ci, mark=kind, role="negative", t_s=r4(m.t_s), end_s=r4(m.stop_s), fp=fp)
            )
        out.append(
            unit(r, ci, mark=kind, role="predictions", mapped=how,
                 predictions_s=[r4(x) for x in preds], dropped_excluded=len(raw) - len(preds))
        )  # fmt: skip
    return out


def score(run: ScoringRun, p: Params, ci: CI, by: list[str]) -> dict[str, Any]:
    units = [u for r in run.rollouts for u in _rollout_units(r, p, ci)]
    groups = []
    for g, us in grouped([u for u in units if u["role"] != "predictions"], by):
        metrics: dict[str, Any] = {}
        for kind in KINDS:
            pos = [u for u in us if u["mark"] == kind and u["role"] == "anchor"]
            neg = [u for u in us if u["mark"] == kind and u["role"] == "negative"]
            if not pos and not neg:
                continue
            tps = [u for u in pos if u["tp"]]
            d = [float(u["delta_ms"]) for u in tps]
            metrics[f"{kind}_recall"] = rate_metric([u["tp"] for u in pos], clusters(pos), ci)
            fpr = rate_metric([u["fp"] for u in neg], clusters(neg), ci)
            fpr["within_budget"] = None if fpr["value"] is None else fpr["value"] <= p.fpr_budget
            metrics[f"{kind}_fpr"] = fpr
            for q in (10, 50, 90):
                metrics[f"{kind}_delta_p{q}_ms"] = percentile_metric(d, clusters(tps), q, ci)
        groups.append({"group": g, "metrics": metrics})
    mapped = sorted({u["mapped"] for u in units if u["role"] == "predictions"})
    out: dict[str, Any] = {"groups": groups, "units": units, "predictions_timed_by": mapped}
    if p.export:
        out["exported"] = p.export
    return out


def export_list(units: list[Unit]) -> list[dict[str, Any]]:
    """Per rollout: its item, tags, anchors and predictions (seconds, session timeline)."""
    rows: dict[str, dict[str, Any]] = {}
    for u in units:
        row = rows.setdefault(
            u["rollout"], {"rollout": u["rollout"], "item": u["item"], "tags": u["tags"]}
        )
        if u["role"] == "predictions":
            row.setdefault("predictions", {})[u["mark"]] = u["predictions_s"]
        elif u["role"] == "anchor":
            row.setdefault("anchors", {}).setdefault(u["mark"], []).append(u["t_s"])
    return list(rows.values())
