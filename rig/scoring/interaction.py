"""`interaction`: the pass windows of InteractionBench's timing items (Table 2, Appendix B).

An item's type is its `type` tag (`type_tag`) where that names a type here, else its
scenario `kind` (a corpus's `type = turn_end` item of kind `turn_taking` is `turn_taking`).
Onsets are system speech onsets (VAD segment starts; with ASR words, a word-bearing
segment's first word).

* `turn_taking`: the reference is the last user word: the item's last turn end
  (`turn_end`, or `eot` where there is none), else the end of the user's last speech
  (VAD). Passes when the first onset after the user's turn began lies in
  [ref - early_ms, ref + window_s]; an earlier onset is a false start and fails even
  when a later one lands in the window.
* `pause`: the `pause` mark (else the first VAD gap inside the user's turn). Passes when no
  system vocalisation (any segment, backchannels and wordless sound included) overlaps the
  pause and the system speaks after it (`pause_backchannels_ok`: segments of at most four
  words ending before the user resumes are allowed, the paper's lenient variant).
* `backchannel`: during the user's turn, at least one system segment, none longer than
  `bc_max_s` or `bc_max_words` words (word counts need ASR).
* `anchor`: each `anchor` mark opens a window [end + lo_ms, end + hi_ms] after the anchor
  word's end; the system must start inside it (`expect` tag `start`, the default) or must
  not (`expect` = `silent`).
* `interruption`: the existing yield measures (`timing.yields`, rig.analysis.yields): the
  system was talking at the barge-in (or stopped less than `talking_grace_s` before it) and
  yielded within `yield_max_s` by the rollout's `yield_from`; whether what it said next
  addresses the request needs a judge rig does not have (`content: not judged`).
* `user_backchannel`: the system kept talking through every user backchannel.

Pass rates per type (Wilson intervals); turn-taking latency median of the replies that do
not start early.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rig.scoring.measures import CI, Unit, clusters, grouped, r4, rate_metric, stat_metric, unit
from rig.scoring.rundir import Interval, Rollout, ScoringRun, clip_to_regions

TYPES = ("turn_taking", "pause", "backchannel", "anchor", "interruption", "user_backchannel")


@dataclass(frozen=True, slots=True)
class Params:
    """interaction parameters (published defaults: InteractionBench)."""

    type_tag: str = "type"
    early_ms: float = 50.0
    window_s: float = 2.5
    bc_max_s: float = 3.0
    bc_max_words: int = 10
    lo_ms: float = 50.0
    hi_ms: float = 300.0
    talking_grace_s: float = 1.0
    yield_max_s: float = 1.0
    pause_backchannels_ok: bool = False


def item_type(r: Rollout, p: Params) -> str | None:
    t = None
    for raw in (r.tags.get(p.type_tag), r.kind):  # the tag, else the item's kind
        t = None if raw is None else raw.strip().lower().replace("-", "_")
        t = "turn_taking" if t == "turntaking" else t
        if t in TYPES:
            break
    if r.marks_of("anchor") and t not in TYPES:
        t = "anchor"
    return t if t in TYPES else None


def _turns(r: Rollout) -> list[dict[str, Any]]:
    timing = r.metrics.get("timing") if isinstance(r.metrics.get("timing"), dict) else {}
    turns = timing.get("turns") if isinstance(timing, dict) else None
    return [t for t in turns or [] if isinstance(t, dict)]


def _onsets(r: Rollout) -> list[Interval]:
    speech = clip_to_regions(r, list(r.speech))
    return sorted(speech, key=lambda i: i.onset_s if r.basis == "words" else i.start_s)


def _onset(r: Rollout, i: Interval) -> float:
    return i.onset_s if r.basis == "words" else i.start_s


def _turn_taking(r: Rollout, p: Params) -> dict[str, Any]:
    ends = r.turn_ends()
    turns = _turns(r)
    ref = ends[-1].t_s if ends else None
    start = None
    if turns and isinstance(turns[-1].get("user_end_s"), int | float):
        ref = float(turns[-1]["user_end_s"]) if ref is None else ref
        s = turns[-1].get("speech_start_s")
        start = float(s) if isinstance(s, int | float) else None
    if ref is None:
        return {"pass": None, "why": "no turn_end mark and no user turn"}
    lo = ref - p.early_ms / 1000.0
    after = [i for i in _onsets(r) if start is None or i.start_s >= start]
    if not after:
        return {"pass": False, "ref_s": r4(ref), "why": "no system onset"}
    t = _onset(r, after[0])
    lat = round((t - ref) * 1000.0, 1)
    if t < lo:
        return {"pass": False, "ref_s": r4(ref), "onset_ms": lat, "why": "false start"}
    ok = t <= ref + p.window_s
    return {"pass": ok, "ref_s": r4(ref), "onset_ms": lat, "latency_ms": lat,
            "why": "in window" if ok else "late"}  # fmt: skip


def _pause(r: Rollout, p: Params) -> dict[str, Any]:
    marks = r.marks_of("pause")
    if marks:
        a, b = marks[0].t_s, marks[0].stop_s
    else:
        timing = r.metrics.get("timing") or {}
        gaps = timing.get("pauses") if isinstance(timing, dict) else None
        if not gaps:
            return {"pass": None, "why": "no pause mark and no user pause"}
        a, b = float(gaps[0]["start_s"]), float(gaps[0]["end_s"])
    speech = clip_to_regions(r, list(r.speech))
    inside = [i for i in speech if i.start_s < b and i.end_s > a]
    if p.pause_backchannels_ok and r.basis == "words":
        inside = [i for i in inside if not (i.n_words <= 4 and i.end_s <= b)]
    later = [i for i in speech if i.start_s >= b]
    ok = not inside and bool(later)
    why = "took the floor in the pause" if inside else ("held" if later else "never spoke after")
    return {"pass": ok, "pause_s": [r4(a), r4(b)], "why": why}


def _backchannel(r: Rollout, p: Params) -> dict[str, Any]:
    turns = _turns(r)
    if not turns or not isinstance(turns[0].get("speech_start_s"), int | float):
        return {"pass": None, "why": "no user turn"}
    a = float(turns[0]["speech_start_s"])
    b = float(turns[-1]["user_end_s"])
    segs = [i for i in clip_to_regions(r, list(r.speech)) if a <= i.start_s < b]
    long = [i for i in segs if i.end_s - i.start_s > p.bc_max_s or i.n_words > p.bc_max_words]
    ok = bool(segs) and not long
    why = "no system segment" if not segs else (f"{len(long)} too long" if long else "ok")
    return {"pass": ok, "segments": len(segs), "why": why}


def _anchor(r: Rollout, p: Params) -> dict[str, Any]:
    marks = r.marks_of("anchor")
    if not marks:
        return {"pass": None, "why": "no anchor mark"}
    expect = r.tags.get("expect", "start").strip().lower()
    must_start = expect not in ("silent", "take_floor", "no_start", "none")
    onsets = [_onset(r, i) for i in _onsets(r)]
    results = []
    for m in marks:
        lo, hi = m.stop_s + p.lo_ms / 1000.0, m.stop_s + p.hi_ms / 1000.0
        hit = any(lo <= t <= hi for t in onsets)
        results.append(hit if must_start else not hit)
    return {"pass": all(results), "expect": "start" if must_start else "silent",
            "anchors": len(marks), "why": f"{sum(results)}/{len(results)} windows met"}  # fmt: skip


def _interruption(r: Rollout, p: Params) -> dict[str, Any]:
    timing = r.metrics.get("timing") if isinstance(r.metrics.get("timing"), dict) else {}
    ys = [y for y in (timing or {}).get("yields") or [] if isinstance(y, dict)]
    if not ys:
        return {"pass": None, "why": "no interruption injection"}
    speech = list(r.speech)
    oks = []
    for y in ys:
        barge = y.get("barge_in_s", y.get("injection_s"))
        t = float(barge) if isinstance(barge, int | float) else None
        talking = bool(y.get("system_talking")) or (
            t is not None and any(i.start_s < t and i.end_s > t - p.talking_grace_s for i in speech)
        )
        ms = y.get("yield_ms")
        stopped_before = t is not None and not any(i.start_s < t < i.end_s for i in speech)
        yielded = (isinstance(ms, int | float) and ms <= p.yield_max_s * 1000.0) or (
            talking and stopped_before
        )
        oks.append(talking and yielded)
    return {"pass": all(oks), "barge_ins": len(ys), "content": "not judged",
            "why": f"{sum(oks)}/{len(oks)} yielded"}  # fmt: skip


def _user_backchannel(r: Rollout, p: Params) -> dict[str, Any]:
    timing = r.metrics.get("timing") if isinstance(r.metrics.get("timing"), dict) else {}
    bcs = [b for b in (timing or {}).get("user_backchannels") or [] if isinstance(b, dict)]
    if not bcs:
        return {"pass": None, "why": "no user backchannel injection"}
    kept = [bool(b.get("kept_talking")) for b in bcs]
    return {"pass": all(kept), "why": f"kept talking through {sum(kept)}/{len(kept)}"}


RULES = {
    "turn_taking": _turn_taking,
    "pause": _pause,
    "backchannel": _backchannel,
    "anchor": _anchor,
    "interruption": _interruption,
    "user_backchannel": _user_backchannel,
}


def score(run: ScoringRun, p: Params, ci: CI, by: list[str]) -> dict[str, Any]:
    units: list[Unit] = []
    untyped = 0
    for r in run.rollouts:
        t = item_type(r, p)
        if t is None:
            untyped += 1
            continue
        units.append(unit(r, ci, mark=t, **RULES[t](r, p)))
    groups = []
    for g, us in grouped(units, by):
        metrics: dict[str, Any] = {}
        for t in TYPES:
            judged = [u for u in us if u["mark"] == t and u["pass"] is not None]
            if not judged and not any(u["mark"] == t for u in us):
                continue
            rate = rate_metric([u["pass"] for u in judged], clusters(judged), ci)
            metrics[f"{t}_pass_rate"] = rate
            rate["not_judged"] = sum(1 for u in us if u["mark"] == t and u["pass"] is None)
        tt = [u for u in us if u["mark"] == "turn_taking" and u.get("latency_ms") is not None]
        if tt:
            metrics["turn_taking_latency_ms"] = stat_metric(
                [float(u["latency_ms"]) for u in tt], clusters(tt), ci
            )
        groups.append({"group": g, "metrics": metrics})
    return {"groups": groups, "units": units, "untyped_rollouts": untyped}
