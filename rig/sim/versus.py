"""What the rig measured, against the reference system's own truth log (pure).

`rig demo` runs the reference system with a truth log on the same monotonic clock, so every
response can be checked: the reply's onset as the rig stamped it on arrival vs the moment
the sim's first loud reply chunk left its socket, and the rig's `model_ms` (the server-side
share, from the fitted clock) vs the sim's own end-of-speech-to-first-chunk time. One line
of that tells a newcomer why the rig exists.

Responses are paired with the sim's by onset: each measured onset is matched to the truth
reply whose first loud chunk left the socket nearest to it (within `MATCH_NS`). The sim
stamps a chunk once its send call returns, so on loopback the rig's arrival stamp can come
a fraction of a millisecond before it: the onset difference is signed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from rig.core.units import NS_PER_MS

MATCH_NS = 50 * NS_PER_MS


@dataclass(frozen=True, slots=True)
class TruthReply:
    """One reply as the sim logged it: its first loud chunk on the wire, the true end of the
    user's speech it answered, and when the model side emitted that chunk."""

    sent_ns: int
    audio_end_ns: int
    emit_ns: int


def truth_replies(events: Sequence[dict[str, Any]]) -> list[TruthReply]:
    """Every answered turn of the truth log (speech_end, then its first loud reply_chunk)."""
    ends: dict[int, int] = {}
    out: list[TruthReply] = []
    seen: set[tuple[int, int]] = set()
    for ev in events:
        conn = ev.get("conn")
        if not isinstance(conn, int):
            continue
        if ev.get("event") == "speech_end" and isinstance(ev.get("audio_end_ns"), int):
            ends[conn] = ev["audio_end_ns"]
        elif ev.get("event") == "reply_chunk" and ev.get("loud") and conn in ends:
            key = (conn, int(ev.get("response", 0)))
            if key in seen or not isinstance(ev.get("emit_ns"), int):
                continue
            seen.add(key)
            out.append(TruthReply(int(ev["t_ns"]), ends[conn], int(ev["emit_ns"])))
    return out


@dataclass(frozen=True, slots=True)
class Versus:
    """Medians over the matched responses (ms), and the worst error."""

    n: int
    onset_error_ms: float  # the rig's arrival stamp minus the sim's send stamp
    onset_error_max_ms: float
    model_ms: float | None  # the rig's model share
    model_truth_ms: float | None  # the sim's end of speech -> first chunk emitted
    model_error_max_ms: float | None

    def line(self) -> str:
        text = (
            f"vs the reference system's own truth log ({self.n} response"
            f"{'' if self.n == 1 else 's'}): reply onset {self.onset_error_ms:+.1f} ms "
            f"(worst {self.onset_error_max_ms:+.1f})"
        )
        if self.model_ms is not None and self.model_truth_ms is not None:
            text += (
                f", model time {self.model_ms:.1f} vs {self.model_truth_ms:.1f} ms "
                f"(worst error {self.model_error_max_ms:.1f} ms)"
            )
        return text


def versus_truth(
    rollouts: Sequence[dict[str, Any]], events: Sequence[dict[str, Any]]
) -> Versus | None:
    """Measured responses (metrics.json dicts) against the truth log; None if none match."""
    truth = truth_replies(events)
    onset_err: list[float] = []
    model: list[tuple[float, float]] = []
    for m in rollouts:
        responses = m.get("responses")
        for r in responses if isinstance(responses, list) else []:
            arrival = r.get("onset_arrival_ns") if isinstance(r, dict) else None
            if not isinstance(arrival, int):
                continue
            near = [t for t in truth if abs(arrival - t.sent_ns) <= MATCH_NS]
            if not near:
                continue
            t = min(near, key=lambda x: abs(arrival - x.sent_ns))
            onset_err.append((arrival - t.sent_ns) / NS_PER_MS)
            if isinstance(r.get("model_ms"), int | float):
                model.append((float(r["model_ms"]), (t.emit_ns - t.audio_end_ns) / NS_PER_MS))
    if not onset_err:
        return None
    return Versus(
        n=len(onset_err),
        onset_error_ms=median(onset_err),
        onset_error_max_ms=max(onset_err, key=abs),
        model_ms=median(a for a, _ in model) if model else None,
        model_truth_ms=median(b for _, b in model) if model else None,
        model_error_max_ms=max(abs(a - b) for a, b in model) if model else None,
    )
