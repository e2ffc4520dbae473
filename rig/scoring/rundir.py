"""A finished run directory as scorers see it: per rollout, marks, tags, speech and words.

Why a reader of its own: a scorer is a pure function of the run directory and its
parameters, so everything it reads comes from the files, through one place, in one shape.
Marks come from metrics.json `marks` (the contract of docs/benchmarks.md: seconds on the
session timeline, the axis of `timing.activity`); a rollout whose metrics carry none falls
back to the `mark` lines of events.jsonl (`t_ns` on the shared clock, minus `t0_ns`). Marks
are never re-derived from the scenario file.

System speech is the stored `timing.activity.system` (VAD segments on the playback track);
a rollout without it is analysed again from system.wav with the stored activity rules.
Words are the system words of words.jsonl (ASR, the `asr` extra), each start refined to the
first rise above the energy gate (rig.analysis.words); `basis` says which a scorer used:
`words`, or `vad` when the rollout has no words.jsonl (every VAD segment then stands in for
a word-bearing interval, and wordless phonation cannot be told apart).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rig.analysis.activity import ActivityParams, Segment, refine_segments, speech_segments
from rig.analysis.aggregate import RolloutMetrics, load_run, timing_invalid
from rig.analysis.rollout import read_json, read_jsonl, read_track
from rig.analysis.words import refine_onsets
from rig.core.units import NS_PER_S

MARK_KINDS = ("pause", "turn_end", "eot", "int", "negative", "exclude", "anchor", "region")
#: statuses whose rollouts are scored: a rollout with no audio is an outcome, not an exclusion
SCORED_STATUSES = ("ok", "no_audio")


@dataclass(frozen=True, slots=True)
class RefMark:
    """One reference mark: a point (`end_s` None) or a span, seconds on the session timeline."""

    mark: str
    t_s: float
    end_s: float | None = None
    label: str | None = None

    @property
    def stop_s(self) -> float:
        return self.t_s if self.end_s is None else self.end_s


@dataclass(frozen=True, slots=True)
class Interval:
    """System speech: a VAD segment, with the words inside it when there are words."""

    start_s: float
    end_s: float
    n_words: int = 0
    first_word_s: float | None = None

    @property
    def onset_s(self) -> float:
        """Where its words begin (its first word), else where its sound begins."""
        return self.start_s if self.first_word_s is None else self.first_word_s


@dataclass(frozen=True, slots=True)
class Rollout:
    """What the scorers read of one rollout."""

    rollout_id: str
    item: str
    scenario: str
    status: str
    kind: str | None
    tags: dict[str, str]
    marks: tuple[RefMark, ...]
    reference: dict[str, Any] | None
    censored: bool | None
    timing_valid: bool | None
    basis: str  # "words" or "vad"
    speech: tuple[Interval, ...]
    """Every system VAD segment (word-bearing or not)."""
    words: tuple[dict[str, Any], ...] = ()
    """System words (start/end refined), empty without ASR."""
    user_speech: tuple[Segment, ...] = ()
    metrics: dict[str, Any] = field(default_factory=dict)
    events: tuple[dict[str, Any], ...] = ()
    t0_ns: int | None = None

    def marks_of(self, *kinds: str) -> list[RefMark]:
        return [m for m in self.marks if m.mark in kinds]

    def turn_ends(self) -> list[RefMark]:
        """The turn ends: `turn_end` points, and `eot` points (the gold end of turn) where
        no `turn_end` stands within 1 ms, in time order (a corpus marks either)."""
        ends = self.marks_of("turn_end")
        ends += [e for e in self.marks_of("eot") if all(abs(e.t_s - m.t_s) > 1e-3 for m in ends)]
        return sorted(ends, key=lambda m: m.t_s)

    def worded(self) -> list[Interval]:
        """Word-bearing intervals: with words, the segments holding at least one word
        (starting at that word); without, every segment."""
        if self.basis == "vad":
            return list(self.speech)
        return [
            Interval(i.onset_s, i.end_s, i.n_words, i.first_word_s)
            for i in self.speech
            if i.n_words
        ]

    def wordless(self) -> list[Interval]:
        """Segments without a word (only known with words)."""
        return [i for i in self.speech if not i.n_words] if self.basis == "words" else []


@dataclass(frozen=True, slots=True)
class ScoringRun:
    run_dir: Path
    manifest: dict[str, Any] | None
    rollouts: tuple[Rollout, ...]
    excluded: dict[str, Any]
    """What was left out and why: `timing_invalid` (n, ids) and `status` counts."""

    @property
    def seed(self) -> int:
        s = (self.manifest or {}).get("seed")
        return s if isinstance(s, int) and not isinstance(s, bool) else 0


def read_run(run_dir: str | Path, *, include_invalid: bool = False) -> ScoringRun:
    """Every scorable rollout of a run. Rollouts the rig judged invalid (`timing_valid`
    false) are left out unless `include_invalid`; rollouts that did not finish (errors)
    are left out always. Both are counted in `excluded`."""
    data = load_run(run_dir)
    kept: list[Rollout] = []
    invalid: list[str] = []
    status_out: dict[str, int] = {}
    for r in data.rollouts:
        if r.status not in SCORED_STATUSES:
            status_out[r.status] = status_out.get(r.status, 0) + 1
            continue
        if timing_invalid(r) and not include_invalid:
            invalid.append(r.rollout_id)
            continue
        kept.append(read_rollout(data.run_dir / "rollouts" / r.rollout_id, r))
    excluded = {
        "timing_invalid": len(invalid),
        "timing_invalid_ids": invalid,
        "timing_invalid_included": include_invalid,
        "status": status_out,
    }
    return ScoringRun(data.run_dir, data.manifest, tuple(kept), excluded)


def read_rollout(root: Path, r: RolloutMetrics | None = None) -> Rollout:
    """One rollout directory (its metrics from `r`, else from its metrics.json)."""
    m = r.metrics if r is not None else (read_json(root / "metrics.json") or {})
    events = tuple(read_jsonl(root / "events.jsonl"))
    t0 = m.get("t0_ns")
    t0_ns = t0 if isinstance(t0, int) and not isinstance(t0, bool) else None
    raw_timing = m.get("timing")
    timing: dict[str, Any] = raw_timing if isinstance(raw_timing, dict) else {}
    segments = _system_segments(root, timing, m)
    words = _system_words(root, m)
    speech = tuple(_interval(s, e, words) for s, e in segments)
    tags = m.get("tags")
    ref = m.get("reference")
    censored = m.get("censored")
    valid = m.get("timing_valid")
    user = (timing.get("activity") or {}).get("user") if isinstance(timing, dict) else None
    return Rollout(
        rollout_id=r.rollout_id if r is not None else root.name,
        item=str(m.get("item") or root.name),
        scenario=str(m.get("scenario") or "default"),
        status=r.status if r is not None else str(m.get("status", "unknown")),
        kind=m.get("kind") if isinstance(m.get("kind"), str) else None,
        tags={str(k): str(v) for k, v in tags.items()} if isinstance(tags, dict) else {},
        marks=tuple(_marks(m, events, t0_ns)),
        reference=ref if isinstance(ref, dict) else None,
        censored=censored if isinstance(censored, bool) else None,
        timing_valid=valid if isinstance(valid, bool) else None,
        basis="words" if words is not None else "vad",
        speech=speech,
        words=tuple(words or ()),
        user_speech=tuple(_pairs(user)),
        metrics=m,
        events=events,
        t0_ns=t0_ns,
    )


def _pairs(raw: Any) -> list[Segment]:
    out: list[Segment] = []
    for seg in raw if isinstance(raw, list) else []:
        if isinstance(seg, list | tuple) and len(seg) == 2:
            out.append((float(seg[0]), float(seg[1])))
    return sorted(out)


def _activity(m: dict[str, Any]) -> ActivityParams:
    rules = m.get("rules") if isinstance(m.get("rules"), dict) else {}
    act = rules.get("activity") if isinstance(rules, dict) else None
    return ActivityParams(**act) if isinstance(act, dict) else ActivityParams()


def _system_segments(root: Path, timing: dict[str, Any], m: dict[str, Any]) -> list[Segment]:
    act = timing.get("activity") if isinstance(timing, dict) else None
    if isinstance(act, dict) and isinstance(act.get("system"), list):
        return _pairs(act["system"])
    path = root / "system.wav"
    if not path.exists():
        return []
    x, rate = read_track(path)
    if not x.size:
        return []
    p = _activity(m)
    return sorted(refine_segments(x, rate, speech_segments(x, rate, p), p))


def _system_words(root: Path, m: dict[str, Any]) -> list[dict[str, Any]] | None:
    """System words with refined starts; None when the rollout has no words.jsonl."""
    path = root / "words.jsonl"
    if not path.exists():
        return None
    rows = [
        w
        for w in read_jsonl(path)
        if w.get("track") == "system"
        and isinstance(w.get("start"), int | float)
        and isinstance(w.get("end"), int | float)
    ]
    rows.sort(key=lambda w: float(w["start"]))
    if rows and (root / "system.wav").exists():
        x, rate = read_track(root / "system.wav")
        rows = refine_onsets(rows, np.asarray(x), rate, _activity(m).energy_dbfs)
    return rows


def _interval(s: float, e: float, words: list[dict[str, Any]] | None) -> Interval:
    if not words:
        return Interval(s, e)
    inside = [w for w in words if float(w["start"]) < e and float(w["end"]) > s]
    if not inside:
        return Interval(s, e)
    return Interval(s, e, len(inside), min(float(w["start"]) for w in inside))


def _marks(m: dict[str, Any], events: tuple[dict[str, Any], ...], t0: int | None) -> list[RefMark]:
    raw = m.get("marks")
    out: list[RefMark] = []
    if isinstance(raw, list):
        for x in raw:
            if isinstance(x, dict) and isinstance(x.get("t_s"), int | float):
                end = x.get("end_s")
                out.append(
                    RefMark(
                        str(x.get("mark")),
                        float(x["t_s"]),
                        float(end) if isinstance(end, int | float) else None,
                        None if x.get("label") is None else str(x["label"]),
                    )
                )
        return sorted(out, key=lambda k: k.t_s)
    if t0 is None:
        return out
    for ev in events:  # older metrics: the events.jsonl lines of the same contract
        if ev.get("kind") != "mark" or not isinstance(ev.get("t_ns"), int):
            continue
        end_ns = ev.get("end_ns")
        out.append(
            RefMark(
                str(ev.get("mark")),
                (ev["t_ns"] - t0) / NS_PER_S,
                (end_ns - t0) / NS_PER_S if isinstance(end_ns, int) else None,
                None if ev.get("label") is None else str(ev["label"]),
            )
        )
    return sorted(out, key=lambda k: k.t_s)


def clip_to_regions(r: Rollout, intervals: list[Interval]) -> list[Interval]:
    """Only the scored region counts: intervals outside every `region` mark are dropped
    (a rollout without region marks keeps all)."""
    regions = r.marks_of("region")
    if not regions:
        return intervals
    return [i for i in intervals if any(i.start_s < g.stop_s and i.end_s > g.t_s for g in regions)]
