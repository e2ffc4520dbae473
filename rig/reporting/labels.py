"""Audacity label tracks: the rollout's events as `start<TAB>end<TAB>label` lines (seconds).

Import the file in Audacity (File > Import > Labels) next to user.wav and system.wav: times
are on the session timeline, so sample 0 of both tracks is 0.0 s. Point events have
start == end; spans (speech segments, response latencies, injections with an end) do not.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from rig.analysis.activity import Segment
from rig.analysis.rollout import Mark, RolloutView
from rig.reporting.plot import yields_of


def rollout_labels(
    view: RolloutView,
    *,
    user_speech: Sequence[Segment] = (),
    system_speech: Sequence[Segment] = (),
) -> list[Mark]:
    """Turn boundaries, injections, response latencies, barge-ins with their yields and (if
    given) speech segments."""
    labels = list(view.marks)
    for r in view.responses:
        labels.append(Mark("response", r.user_end_s, f"latency {r.latency_ms:.0f} ms", r.onset_s))
        if r.decision_s is not None and r.detect_ms is not None:
            gen = "" if r.generation_ms is None else f", generation {r.generation_ms:.0f} ms"
            text = f"detect {r.detect_ms:.0f} ms{gen}"
            labels.append(Mark("endpointing", r.user_end_s, text, r.decision_s))
    labels += [Mark("yield", t, label, end) for t, end, label in yields_of(view)]
    labels += [Mark("speech.user", s, "user speech", e) for s, e in user_speech]
    labels += [Mark("speech.system", s, "system speech", e) for s, e in system_speech]
    labels.sort(key=lambda m: (m.t_s, m.kind))
    return labels


def format_labels(labels: Iterable[Mark]) -> str:
    lines = []
    for m in labels:
        end = m.end_s if m.end_s is not None else m.t_s
        text = m.label.replace("\t", " ").replace("\n", " ")
        lines.append(f"{m.t_s:.6f}\t{end:.6f}\t{text}\n")
    return "".join(lines)


def write_labels(labels: Iterable[Mark], path: str | Path) -> Path:
    out = Path(path)
    out.write_text(format_labels(labels), encoding="utf-8")
    return out
