"""Two-track timing metrics: who spoke when, and did the system take turns well.

How this works
--------------
Both tracks live on one session timeline (sample `s` is `s / sample_rate` seconds after
`t0_ns`; `system.wav` is the playback placement). Speech activity (rig.analysis.activity) turns each
track into segments; every metric below is interval arithmetic on those segments plus the
structure the rig knows because it played it: user turn spans and injection times.

* user end of a turn: end of the last user speech segment inside the turn span;
* response: first system onset in [user_end - early_onset_s, user_end + response_window_s];
* pause: a gap between user speech segments inside one turn (no turns given: any gap shorter
  than pause_max_s); a *takeover* is a system segment longer than backchannel_max_s that
  starts inside a pause;
* overlap: intersection of user and system speech, total and per interval;
* yield: barge-in onset (first user onset near an `interruption` injection) to when the
  system stopped: on its own stream, by its acknowledgement, or on the playback track rebuilt
  without the rig's truncation (rig.analysis.yields; `yield_from` picks the rule's);
* backchannel: a system segment no longer than backchannel_max_s that starts while the user
  is mid-turn (between the turn's first speech start and last speech end);
* user backchannel: an `backchannel` injection while the system talks; the system kept
  talking if its segment lasts until keep_talking_s after the injection ends.

Pure functions: no clock, no I/O. `analyze` works on arrays, `analyze_segments` on segments.
Every threshold is in `TimingParams`, recorded in the output next to the numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy.typing as npt

from rig.analysis import yields as yield_measures
from rig.analysis.activity import ActivityParams, Segment, refine_segments, speech_segments
from rig.analysis.verdicts import interruption_verdict
from rig.analysis.yields import Stream, YieldRules, validate_yield_from
from rig.core.units import NS_PER_S
from rig.errors import ConfigError

KINDS: tuple[str, ...] = ("pause", "turn_taking", "backchannel", "interruption", "user_backchannel")
INJECTION_KINDS: tuple[str, ...] = ("interruption", "backchannel")


@dataclass(frozen=True, slots=True)
class TimingParams:
    """Thresholds of every metric and pass rule (seconds)."""

    activity: ActivityParams = field(default_factory=ActivityParams)
    response_window_s: float = 10.0
    """How long after the user's end a system onset still counts as the response."""
    early_onset_s: float = 0.5
    """A system onset this much before the user's end still counts (negative latency)."""
    pause_max_s: float = 3.0
    """Without turn spans: user gaps shorter than this are pauses inside a turn."""
    backchannel_max_s: float = 1.0
    """System segments up to this long are backchannels, longer ones take the turn."""
    turn_taking_max_s: float = 2.0
    """turn_taking rule: every turn answered within this."""
    yield_max_s: float = 1.0
    """interruption rule: the system stops within this after the barge-in onset."""
    keep_talking_s: float = 0.5
    """user_backchannel rule: the system still talks this long after the user's "mhm" ends."""
    min_backchannels: int = 1
    """backchannel rule: at least this many system backchannels during the monologue."""
    barge_in_search_s: float = 1.0
    """A barge-in onset is the first user onset within this after the injection time."""
    backchannel_max_words: int = 2
    """With ASR words: a system segment of at most this many words (and no longer than
    backchannel_max_s) is a backchannel, not an answer."""
    yield_from: str = "stream"
    """interruption rule: `stream` (the system's own stream), `ack` (the server's
    acknowledgement) or `playback_untruncated`; never the rig-truncated track."""
    whisper_hnr_max_db: float = 6.0
    """A reply is whispered below this harmonics-to-noise ratio (rig.analysis.voice) ..."""
    whisper_voiced_max: float = 0.4
    """... and below this voiced fraction (InteractionBench's criterion)."""
    lowered_ratio: float = 0.7
    """A reply is lowered when its RMS is below this share of the system's median speech
    level in the run (rig.analysis.voicereport; InteractionBench's 0.7)."""

    def __post_init__(self) -> None:
        validate_yield_from(self.yield_from)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Injection:
    """User audio the rig injected: `kind` is `interruption` or `backchannel`."""

    t_s: float
    kind: str
    end_s: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in INJECTION_KINDS:
            raise ConfigError(f"injection kind must be one of {INJECTION_KINDS}, got {self.kind!r}")


def analyze(
    user: npt.NDArray[Any],
    system: npt.NDArray[Any],
    sample_rate: int,
    *,
    kind: str | None = None,
    turns: Sequence[Segment] | None = None,
    injections: Sequence[Injection] = (),
    params: TimingParams | None = None,
    t0_ns: int | None = None,
    placement: str = "playback",
    stream: Stream | None = None,
    stream_rate: int | None = None,
    acks_s: Sequence[float] | None = None,
) -> dict[str, Any]:
    """Metrics of one rollout from its two tracks (same rate, same timeline); `stream` and
    `acks_s` are the system's own stream and acknowledgements (rig.analysis.yields)."""
    p = params or TimingParams()
    # VAD segments, boundaries then refined from the frame grid to the sample
    user_segs = refine_segments(
        user, sample_rate, speech_segments(user, sample_rate, p.activity), p.activity
    )
    system_segs = refine_segments(
        system, sample_rate, speech_segments(system, sample_rate, p.activity), p.activity
    )
    out = analyze_segments(
        user_segs,
        system_segs,
        kind=kind,
        turns=turns,
        injections=injections,
        params=p,
        t0_ns=t0_ns,
        stream=stream,
        stream_rate=stream_rate,
        acks_s=acks_s,
    )
    out["placement"] = placement
    return out


def analyze_segments(
    user: Sequence[Segment],
    system: Sequence[Segment],
    *,
    kind: str | None = None,
    turns: Sequence[Segment] | None = None,
    injections: Sequence[Injection] = (),
    params: TimingParams | None = None,
    t0_ns: int | None = None,
    stream: Stream | None = None,
    stream_rate: int | None = None,
    acks_s: Sequence[float] | None = None,
) -> dict[str, Any]:
    """Metrics from speech segments (seconds on the session timeline). JSON-able result.
    Without `stream` the stream and untruncated yields are absent (`why_none`)."""
    p = params or TimingParams()
    kind = normalize_kind(kind)
    user_s = sorted(user)
    system_s = sorted(system)
    turn_spans = _turn_speech_spans(user_s, turns, injections, p)

    responses = [_response(i, span, system_s, p, t0_ns) for i, span in enumerate(turn_spans)]
    pauses = _pauses(user_s, turn_spans, system_s, p)
    overlaps = _overlaps(user_s, system_s)
    backchannels, takeovers = _system_inside_turns(turn_spans, system_s, p)
    yr = YieldRules(p.yield_from, p.barge_in_search_s, p.response_window_s, p.yield_max_s)
    yields = [
        yield_measures.measure(
            inj.t_s, user_s, system_s, yr, stream=stream, stream_rate=stream_rate, acks_s=acks_s
        )
        for inj in injections
        if inj.kind == "interruption"
    ]
    user_bcs = [_kept_talking(inj, system_s, p) for inj in injections if inj.kind == "backchannel"]

    metrics: dict[str, Any] = {
        "kind": kind,
        "params": p.as_dict(),
        "activity": {"user": _r_segs(user_s), "system": _r_segs(system_s)},
        "user_speech_s": _r(sum(e - s for s, e in user_s)),
        "system_speech_s": _r(sum(e - s for s, e in system_s)),
        "turns": [
            {"speech_start_s": _r(a), "user_end_s": _r(b)} if a is not None else None
            for a, b in turn_spans
        ],
        "responses": responses,
        "latency_ms": [r["latency_ms"] for r in responses if r["latency_ms"] is not None],
        "pauses": pauses,
        "pause_takeovers": sum(1 for x in pauses if x["takeover"]),
        "overlap": {
            "total_s": _r(sum(o["dur_ms"] for o in overlaps) / 1000.0),
            "count": len(overlaps),
            "events": overlaps,
        },
        "backchannels": backchannels,
        "turn_takeovers": takeovers,
        "yields": yields,
        "user_backchannels": user_bcs,
    }
    verdict, rule = _rule(kind, metrics, p)
    metrics["pass"] = verdict
    metrics["rule"] = rule
    return metrics


def normalize_kind(kind: str | None) -> str | None:
    """Accept `turn-taking` and `turn_taking` alike; reject unknown categories."""
    if kind is None:
        return None
    k = kind.strip().lower().replace("-", "_").replace(" ", "_")
    if k in ("user_backchannels", "userbackchannel"):
        k = "user_backchannel"
    if k == "turntaking":
        k = "turn_taking"
    if k not in KINDS:
        raise ConfigError(f"unknown timing category {kind!r}; known: {', '.join(KINDS)}")
    return k


# -- structure -------------------------------------------------------------------------------


def _turn_speech_spans(
    user: list[Segment],
    turns: Sequence[Segment] | None,
    injections: Sequence[Injection],
    p: TimingParams,
) -> list[tuple[float | None, float]]:
    """Per turn: (first user speech start, last user speech end); (None, turn_end) if silent."""
    if turns is not None:
        spans: list[tuple[float | None, float]] = []
        for t_start, t_end in turns:
            inside = [(s, e) for s, e in user if s < t_end and e > t_start]
            if inside:
                spans.append((inside[0][0], inside[-1][1]))
            else:
                spans.append((None, t_end))
        return spans
    # No turn spans: user speech merged across gaps shorter than pause_max_s, leaving out the
    # user's own backchannels (they are not turns the system should answer).
    bc = [i for i in injections if i.kind == "backchannel"]
    merged: list[tuple[float | None, float]] = []
    for s, e in user:
        if any(_near_injection(s, e, i) for i in bc):
            continue
        last = merged[-1] if merged else None
        if last is not None and last[0] is not None and s - last[1] < p.pause_max_s:
            merged[-1] = (last[0], e)
        else:
            merged.append((s, e))
    return merged


def _near_injection(s: float, e: float, inj: Injection) -> bool:
    end = inj.end_s if inj.end_s is not None else inj.t_s
    return s < end + 0.25 and e > inj.t_s - 0.25


def _response(
    i: int, span: tuple[float | None, float], system: list[Segment], p: TimingParams, t0: int | None
) -> dict[str, Any]:
    user_end = span[1]
    lo, hi = user_end - p.early_onset_s, user_end + p.response_window_s
    onset = next((s for s, _ in system if lo <= s <= hi), None)
    out: dict[str, Any] = {
        "turn": i,
        "user_end_s": _r(user_end),
        "onset_s": _r(onset) if onset is not None else None,
        "latency_ms": _r((onset - user_end) * 1000.0, 1) if onset is not None else None,
        "user_end_from": "vad" if span[0] is not None else "turn",
    }
    if t0 is not None:
        out["user_end_ns"] = t0 + round(user_end * NS_PER_S)
        out["onset_ns"] = t0 + round(onset * NS_PER_S) if onset is not None else None
    return out


def _pauses(
    user: list[Segment],
    spans: list[tuple[float | None, float]],
    system: list[Segment],
    p: TimingParams,
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, (a, b) in enumerate(spans):
        if a is None:
            continue
        inside = [(s, e) for s, e in user if s >= a and e <= b]
        for (_, gap_start), (gap_end, _) in zip(inside, inside[1:], strict=False):
            if gap_end <= gap_start:
                continue
            onsets = [
                (s, e)
                for s, e in system
                if gap_start <= s < gap_end and e - s > p.backchannel_max_s
            ]
            out.append(
                {
                    "turn": i,
                    "start_s": _r(gap_start),
                    "end_s": _r(gap_end),
                    "dur_ms": _r((gap_end - gap_start) * 1000.0, 1),
                    "takeover": bool(onsets),
                    "takeover_onset_s": _r(onsets[0][0]) if onsets else None,
                    "takeover_after_ms": (
                        _r((onsets[0][0] - gap_start) * 1000.0, 1) if onsets else None
                    ),
                }
            )
    return out


def _overlaps(user: list[Segment], system: list[Segment]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for us, ue in user:
        for ss, se in system:
            s, e = max(us, ss), min(ue, se)
            if e > s:
                out.append(
                    {
                        "start_s": _r(s),
                        "end_s": _r(e),
                        "dur_ms": _r((e - s) * 1000.0, 1),
                        "by": "system" if ss > us else "user",
                    }
                )
    out.sort(key=lambda o: o["start_s"])
    return out


def _system_inside_turns(
    spans: list[tuple[float | None, float]], system: list[Segment], p: TimingParams
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """System segments that start while the user is mid-turn: backchannels or takeovers."""
    bcs: list[dict[str, Any]] = []
    takeovers: list[dict[str, Any]] = []
    for i, (a, b) in enumerate(spans):
        if a is None:
            continue
        for s, e in system:
            if a <= s < b:
                rec = {"turn": i, "start_s": _r(s), "end_s": _r(e), "dur_ms": _r((e - s) * 1e3, 1)}
                (bcs if e - s <= p.backchannel_max_s else takeovers).append(rec)
    return bcs, takeovers


def _active_at(t: float, segs: list[Segment]) -> Segment | None:
    return next(((s, e) for s, e in segs if s <= t < e), None)


def _kept_talking(inj: Injection, system: list[Segment], p: TimingParams) -> dict[str, Any]:
    end = inj.end_s if inj.end_s is not None else inj.t_s
    seg = _active_at(inj.t_s, system)
    kept = seg is not None and seg[1] >= end + p.keep_talking_s
    return {
        "injection_s": _r(inj.t_s),
        "injection_end_s": _r(end),
        "system_talking": seg is not None,
        "system_end_s": _r(seg[1]) if seg is not None else None,
        "kept_talking": kept,
    }


# -- pass rules ------------------------------------------------------------------------------


def _rule(kind: str | None, m: dict[str, Any], p: TimingParams) -> tuple[bool | None, str]:
    if kind is None:
        return None, "no category: metrics only"
    if kind == "pause":
        if not m["pauses"]:
            return None, "pause: no user pause found inside a turn"
        n = m["pause_takeovers"]
        return n == 0, f"pause: no system takeover inside {len(m['pauses'])} pause(s) (got {n})"
    if kind == "turn_taking":
        if not m["responses"]:
            return None, "turn_taking: no user turn found"
        lat = [r["latency_ms"] for r in m["responses"]]
        ok = all(x is not None and x <= p.turn_taking_max_s * 1000.0 for x in lat)
        return ok, f"turn_taking: every turn answered within {p.turn_taking_max_s:g} s ({lat})"
    if kind == "backchannel":
        n_bc, n_to = len(m["backchannels"]), len(m["turn_takeovers"])
        ok = n_bc >= p.min_backchannels and n_to == 0
        return ok, (
            f"backchannel: >= {p.min_backchannels} system backchannel(s) and no takeover "
            f"during the monologue (got {n_bc} backchannel(s), {n_to} takeover(s))"
        )
    if kind == "interruption":
        if not m["yields"]:
            return None, "interruption: no interruption injection"
        return interruption_verdict(m["yields"], p.yield_from, p.yield_max_s)
    if not m["user_backchannels"]:
        return None, "user_backchannel: no backchannel injection"
    if not all(b["system_talking"] for b in m["user_backchannels"]):
        return None, (
            "user_backchannel: cannot tell: the system was not talking at a user backchannel "
            "(nothing to keep talking through)"
        )
    kept = [b["kept_talking"] for b in m["user_backchannels"]]
    return all(kept), (
        f"user_backchannel: system keeps talking {p.keep_talking_s:g} s past each user "
        f"backchannel ({sum(kept)}/{len(kept)})"
    )


# -- structure from a rollout's events -------------------------------------------------------


def structure_from_events(
    events: Sequence[dict[str, Any]], t0_ns: int
) -> tuple[list[Segment], list[Injection]]:
    """Turn spans and injections from events.jsonl records (`turn.start`, `turn.end`,
    `inject`), in seconds from `t0_ns`. An `inject` names its kind in `injection` (or `type`)
    and may carry `end_ns` or `duration_ms`; unknown kinds are skipped."""
    turns: list[Segment] = []
    injections: list[Injection] = []
    open_start: float | None = None
    for ev in events:
        k = ev.get("kind")
        t_ns = ev.get("t_ns")
        if not isinstance(t_ns, int):
            continue
        t_s = (t_ns - t0_ns) / NS_PER_S
        if k == "turn.start":
            open_start = t_s
        elif k == "turn.end" and open_start is not None:
            turns.append((open_start, t_s))
            open_start = None
        elif k == "inject":
            what = ev.get("injection", ev.get("type"))
            if what not in INJECTION_KINDS:
                continue
            end_s: float | None = None
            if isinstance(ev.get("end_ns"), int):
                end_s = (ev["end_ns"] - t0_ns) / NS_PER_S
            elif isinstance(ev.get("duration_ms"), int | float):
                end_s = t_s + ev["duration_ms"] / 1000.0
            injections.append(Injection(t_s, str(what), end_s))
    return turns, injections


def _r(x: float, nd: int = 4) -> float:
    return round(float(x), nd)


def _r_segs(segs: list[Segment]) -> list[list[float]]:
    return [[_r(s), _r(e)] for s, e in segs]
