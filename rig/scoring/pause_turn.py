"""`pause_turn`: what the system did at labelled pauses and turn ends, against the person.

The protocol of "People Making Conversation" (sections 3.5, 4.4, appendices D-E):

* at a `pause` mark [a, b) (the speaker stops at a and resumes at b), the outcome is
  `takeover` when a word-bearing interval overlaps [a, b) (latency from a to its first
  word; speech already under way at a gives 0), else `after` when the system's first
  words come at or after b (the speaker resumed first), else `wordless` when only
  wordless phonation (sound with no word) overlaps the pause, else `silent`. The paper's
  "silent" share is `silent` + `wordless` here; its wordless rate is `wordless_any`.
* at a turn end t (a `turn_end` mark, or an `eot` where there is none): latency to the
  first system word that is still going at t (a word begun before t gives <= 0), the
  response's duration (first word-bearing interval to the end of the last speech
  interval after t) and word count, each as a ratio to the item's reference reply when
  it has one, and whether the rollout was `censored` (cut at the cap while still talking).

Rates are over marks with Wilson intervals; latencies and ratios are medians with IQR over
marks with words, bootstrap intervals over `--cluster` (items by default). `shift_ms`
moves every label and reports the rates again, with the paper's own perturbations (start
+|shift|, end -|shift|, end +|shift|). Without ASR words, VAD segments stand in for words
(`basis: vad`) and the result says so: wordless phonation is then invisible.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from rig.scoring.measures import CI, Unit, clusters, grouped, r4, rate_metric, stat_metric, unit
from rig.scoring.rundir import Interval, RefMark, Rollout, ScoringRun, clip_to_regions

OUTCOMES = ("silent", "wordless", "takeover", "after")


@dataclass(frozen=True, slots=True)
class Params:
    """pause_turn parameters (published defaults: People Making Conversation)."""

    shift_ms: float = 0.0
    """Move every label by this much and report how the rates change (paper: +-250)."""
    bins_s: str = "0.8,1.0,1.5,2.5"
    """Pause-duration bin edges (s) for the takeover rate by duration (paper's figure 7)."""
    cap_s: float = 30.0
    """The cap a censored reply was cut at (paper: 30 s); recorded, censoring is read from
    the rollout's `censored` flag."""


def outcome_at(
    a: float, b: float, worded: list[Interval], wordless: list[Interval]
) -> dict[str, Any]:
    """The outcome at a pause [a, b) from the word-bearing and wordless intervals."""
    over = [i for i in worded if i.start_s < b and i.end_s > a]
    if over:
        first = min(over, key=lambda i: i.start_s)
        return {
            "outcome": "takeover",
            "latency_ms": round(max(0.0, first.start_s - a) * 1000.0, 1),
            "under_way": first.start_s < a,
        }
    later = [i for i in worded if i.start_s >= b]
    if later:
        first = min(later, key=lambda i: i.start_s)
        return {
            "outcome": "after",
            "latency_ms": round((first.start_s - a) * 1000.0, 1),
            "after_end_ms": round((first.start_s - b) * 1000.0, 1),
        }
    if any(i.start_s < b and i.end_s > a for i in wordless):
        return {"outcome": "wordless", "latency_ms": None}
    return {"outcome": "silent", "latency_ms": None}


def _pause_units(r: Rollout, ci: CI, shift_s: float) -> list[Unit]:
    worded = clip_to_regions(r, r.worded())
    wordless = clip_to_regions(r, r.wordless())
    out = []
    for m in r.marks_of("pause"):
        a = m.t_s + shift_s
        b = m.stop_s + shift_s
        res = outcome_at(a, b, worded, wordless)
        res["wordless_any"] = any(i.start_s < b and i.end_s > a for i in wordless)
        out.append(
            unit(r, ci, mark="pause", t_s=r4(m.t_s), end_s=r4(m.stop_s), dur_s=r4(b - a), **res)
        )
    return out


def _turn_unit(r: Rollout, m: RefMark, ci: CI) -> Unit:
    t = m.t_s
    if r.basis == "words":
        regions = r.marks_of("region")
        ws = [
            w
            for w in r.words
            if float(w["end"]) > t
            and (not regions or any(g.t_s <= float(w["start"]) < g.stop_s for g in regions))
        ]
        first = min((float(w["start"]) for w in ws), default=None)
        n_words: int | None = len(ws)
    else:
        segs = [i for i in clip_to_regions(r, list(r.speech)) if i.end_s > t]
        first = min((i.start_s for i in segs), default=None)
        n_words = None
    tail = [i for i in clip_to_regions(r, list(r.speech)) if i.end_s > t]
    dur = (max(i.end_s for i in tail) - first) if first is not None and tail else None
    ref = r.reference or {}
    ref_dur = ref.get("duration_s")
    ref_words = ref.get("words")
    if isinstance(ref_words, list):
        ref_words = len(ref_words)
    elif not isinstance(ref_words, int) and isinstance(ref.get("text"), str):
        ref_words = len(ref["text"].split())
    return unit(
        r,
        ci,
        mark="turn_end",
        t_s=r4(t),
        latency_ms=None if first is None else round((first - t) * 1000.0, 1),
        no_words=first is None,
        duration_s=r4(dur),
        n_words=n_words,
        duration_ratio=(
            r4(dur / ref_dur) if dur is not None and isinstance(ref_dur, int | float) and ref_dur
            else None
        ),
        word_ratio=(
            r4(n_words / ref_words) if n_words is not None and isinstance(ref_words, int)
            and ref_words and first is not None else None
        ),
        censored=r.censored,
    )  # fmt: skip


def score(run: ScoringRun, p: Params, ci: CI, by: list[str]) -> dict[str, Any]:
    pauses = [u for r in run.rollouts for u in _pause_units(r, ci, p.shift_ms / 1000.0)]
    turns = [_turn_unit(r, m, ci) for r in run.rollouts for m in r.turn_ends()]
    edges = [float(x) for x in str(p.bins_s).split(",") if x.strip()]
    groups = []
    for g, units in grouped(pauses + turns, by):
        gp = [u for u in units if u["mark"] == "pause"]
        gt = [u for u in units if u["mark"] == "turn_end"]
        metrics = _pause_metrics(gp, ci) | _turn_metrics(gt, ci)
        entry: dict[str, Any] = {"group": g, "n_pauses": len(gp), "n_turn_ends": len(gt)}
        entry["metrics"] = metrics
        entry["takeover_by_duration"] = _bins(gp, edges, ci)
        groups.append(entry)
    out: dict[str, Any] = {"groups": groups, "units": pauses + turns}
    if p.shift_ms:
        out["shift"] = _shifted(run, p.shift_ms, ci, by)
    return out


def _pause_metrics(units: list[Unit], ci: CI) -> dict[str, Any]:
    if not units:
        return {}
    cl = clusters(units)
    out = {
        f"pause_{o}_rate": rate_metric([u["outcome"] == o for u in units], cl, ci) for o in OUTCOMES
    }
    out["pause_wordless_any_rate"] = rate_metric([u["wordless_any"] for u in units], cl, ci)
    took = [u for u in units if u["outcome"] == "takeover"]
    out["takeover_latency_ms"] = stat_metric([u["latency_ms"] for u in took], clusters(took), ci)
    spoke = [u for u in units if u["outcome"] in ("takeover", "after")]
    out["pause_first_words_ms"] = stat_metric([u["latency_ms"] for u in spoke], clusters(spoke), ci)
    return out


def _turn_metrics(units: list[Unit], ci: CI) -> dict[str, Any]:
    if not units:
        return {}
    cl = clusters(units)
    out: dict[str, Any] = {
        "turn_no_words_rate": rate_metric([u["no_words"] for u in units], cl, ci),
        "turn_censored_rate": rate_metric(
            [bool(u["censored"]) for u in units if u["censored"] is not None],
            [u["cluster"] for u in units if u["censored"] is not None],
            ci,
        ),
    }
    for key in ("latency_ms", "duration_s", "n_words", "duration_ratio", "word_ratio"):
        have = [u for u in units if u[key] is not None]
        out[f"turn_{key}"] = stat_metric([float(u[key]) for u in have], clusters(have), ci)
    return out


def _bins(units: list[Unit], edges: list[float], ci: CI) -> list[dict[str, Any]]:
    bounds = [0.0, *edges, float("inf")]
    out = []
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        inside = [u for u in units if lo <= float(u["dur_s"]) < hi]
        if not inside:
            continue
        m = rate_metric([u["outcome"] == "takeover" for u in inside], clusters(inside), ci)
        out.append({"dur_lo_s": lo, "dur_hi_s": None if hi == float("inf") else hi, **m})
    return out


def _shifted(run: ScoringRun, shift_ms: float, ci: CI, by: list[str]) -> dict[str, Any]:
    """Takeover and silent rates with the labels moved, and their change from the labels."""
    s, s_all = abs(shift_ms) / 1000.0, shift_ms / 1000.0
    variants = {
        f"all{shift_ms:+g}ms": [u for r in run.rollouts for u in _pause_units(r, ci, s_all)],
        f"start+{abs(shift_ms):g}ms": [u for r in run.rollouts for u in _start_moved(r, ci, s)],
        f"end-{abs(shift_ms):g}ms": [u for r in run.rollouts for u in _end_moved(r, ci, -s)],
        f"end+{abs(shift_ms):g}ms": [u for r in run.rollouts for u in _end_moved(r, ci, s)],
    }  # fmt: skip
    unshifted = [u for r in run.rollouts for u in _pause_units(r, ci, 0.0)]
    out: dict[str, Any] = {"shift_ms": shift_ms, "variants": []}
    for name, units in variants.items():
        for (g, gu), (_, g0) in zip(grouped(units, by), grouped(unshifted, by), strict=True):
            row: dict[str, Any] = {"variant": name, "group": g}
            for o in ("takeover", "after", "silent"):
                m = rate_metric([u["outcome"] == o for u in gu], clusters(gu), ci)
                before = sum(u["outcome"] == o for u in g0) / len(g0) if g0 else None
                m["change"] = None if m["value"] is None or before is None else m["value"] - before
                row[f"pause_{o}_rate"] = m
            out["variants"].append(row)
    return out


def _start_moved(r: Rollout, ci: CI, s: float) -> list[Unit]:
    moved = [RefMark(m.mark, m.t_s + s, m.stop_s, m.label) for m in r.marks_of("pause")]
    return _with_pauses(r, moved, ci)


def _end_moved(r: Rollout, ci: CI, s: float) -> list[Unit]:
    moved = [RefMark(m.mark, m.t_s, m.stop_s + s, m.label) for m in r.marks_of("pause")]
    return _with_pauses(r, moved, ci)


def _with_pauses(r: Rollout, pauses: list[RefMark], ci: CI) -> list[Unit]:
    others = tuple(m for m in r.marks if m.mark != "pause")
    return _pause_units(dataclasses.replace(r, marks=others + tuple(pauses)), ci, 0.0)
