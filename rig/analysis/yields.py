"""Yield at a barge-in, measured on the system, not on the rig's own truncation.

Why: at a barge-in the listener truncates its playback queue, so `system.wav` stops at the
barge-in by construction; a system that ignores the barge-in but sends faster than real
time would "yield" there. Three measures, each labelled (docs/metrics.md):

  stream    when the system stopped sending new audio for the interrupted reply, from its
            own stream (received.wav: every chunk as it arrived, flushed ones included).
            The interrupted reply is the run of chunks from the one playing at the
            barge-in (untruncated placement) on, as long as the stream keeps flowing (no
            arrival gap over `STREAM_GAP_S`); its end is the last sample above the energy
            gate, at its chunk's arrival time plus its offset in the chunk. A reply whose
            end had arrived before the barge-in cannot show a yield in its stream
            (`sent_ahead`): the measure is then absent.
  ack       the first acknowledgement the server sent after the barge-in
            (`response.cancelled`, OpenAI/Grok `input_audio_buffer.speech_started`, Gemini
            `interrupted`, Pipecat `interruption`), by its arrival time.
  playback_untruncated
            the end of the reply on the playback track rebuilt without truncation: each
            received chunk at max(arrival, end of the previous one), nothing dropped.

The `interruption` rule reads `TimingParams.yield_from` (`stream` by default). Each yield
carries `pass`: True or False where its measure exists, None ("cannot tell") where it cannot
exist for this system (`cannot_tell`: a reply sent ahead in full before the barge-in, no
received.wav, the system not talking at the barge-in): a burst sender that sends no
acknowledgement cannot be judged from its stream, which is not the same as failing. A
missing acknowledgement when the rule asked for `ack` is a failure. The rig's truncated
listener track is reported as `playback_truncated`, for reference only.

Segment ends on the rebuilt track are refined from the VAD frame to the last sample above
the activity energy gate, so a yield is exact to the sample (not to the 20 ms frame).
Pure functions over arrays and rows: no clock, no I/O (the finish step reads the files).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from rig.analysis.activity import ActivityParams, Segment, refine_segments, speech_segments
from rig.core.timeline import Timeline
from rig.core.units import NS_PER_S
from rig.errors import ConfigError

YIELD_FROM: tuple[str, ...] = ("stream", "ack", "playback_untruncated")
#: server events that acknowledge a barge-in (events.jsonl kind without `server.`)
ACK_KINDS: frozenset[str] = frozenset(
    {"response.cancelled", "input_audio_buffer.speech_started", "interrupted", "interruption"}
)


#: a pause in arrivals longer than this ends the interrupted reply's run of chunks
STREAM_GAP_S = 0.25
#: measures that cannot exist for this rollout: the verdict is "cannot tell", not "failed"
NO_STREAM: dict[str, Any] = {"yield_ms": None, "why_none": "no received.wav", "cannot_tell": True}
NOT_TALKING: dict[str, Any] = {
    "yield_ms": None,
    "why_none": "system not talking at the barge-in: nothing to yield",
    "cannot_tell": True,
}


@dataclass(frozen=True, slots=True)
class Stream:
    """The system's own stream on the session timeline (seconds from t0)."""

    segments: tuple[Segment, ...]
    """Speech on the untruncated playback rebuild, ends refined to the sample."""
    pos_s: tuple[float, ...]
    """Untruncated playback start of each received chunk, in arrival order."""
    arrival_s: tuple[float, ...]
    """Arrival time of each received chunk."""
    dur_s: tuple[float, ...] = ()
    """Length of each chunk (empty: every chunk runs to the next one's position)."""
    loud_end_s: tuple[float | None, ...] = ()
    """Per chunk: offset just after its last sample above the gate (None: silent)."""

    def arrival_of(self, t_s: float, sample_rate: int) -> float:
        """Arrival time of the audio that plays at `t_s` on the untruncated rebuild (the end
        of a segment maps through its last sample, then one sample on)."""
        last = t_s - 1.0 / sample_rate
        k = max(0, bisect.bisect_right(self.pos_s, last + 1e-9) - 1)
        return self.arrival_s[k] + (last - self.pos_s[k]) + 1.0 / sample_rate


def validate_yield_from(value: str) -> str:
    if value not in YIELD_FROM:
        raise ConfigError(f"yield_from must be one of {', '.join(YIELD_FROM)}, got {value!r}")
    return value


def untruncated(
    received: npt.NDArray[np.float32], sample_rate: int, rows: Sequence[dict[str, Any]], t0_ns: int
) -> tuple[npt.NDArray[np.float32], list[tuple[int, int, int, int]]]:
    """The playback track without truncation, and per chunk (position, arrival sample).
    `rows` are the `dir: down` chunks.jsonl rows; chunks the file does not hold in full (a
    crash) are left out. Same placement as the listener's queue (rig.core.placement).
    Per chunk: (position, offset in received, length, arrival sample)."""
    tl = Timeline(t0_ns, sample_rate)
    placed: list[tuple[int, int, int, int]] = []  # (position, offset, length, arrival)
    off = end = 0
    for row in sorted(rows, key=lambda r: int(r["seq"])):
        n = int(row["n_samples"])
        if off + n > received.size:
            break
        arrival = tl.sample_at(int(row["t_ns"]))
        pos = max(arrival, end, 0)
        placed.append((pos, off, n, arrival))
        off += n
        end = pos + n
    out = np.zeros(end, np.float32)
    for pos, o, n, _ in placed:
        out[pos : pos + n] = received[o : o + n]
    return out, placed


def stream_of(
    received: npt.NDArray[np.float32],
    sample_rate: int,
    rows: Sequence[dict[str, Any]],
    t0_ns: int,
    activity: ActivityParams,
) -> Stream:
    """The Stream of a rollout from received.wav and its down chunk rows."""
    track, placed = untruncated(received, sample_rate, rows, t0_ns)
    segs = speech_segments(track, sample_rate, activity)
    refined = refine_segments(track, sample_rate, segs, activity)
    amp = 10 ** (activity.energy_dbfs / 20.0)
    loud_end: list[float | None] = []
    for _, off, n, _ in placed:
        loud = np.flatnonzero(np.abs(received[off : off + n]) >= amp)
        loud_end.append((int(loud[-1]) + 1) / sample_rate if loud.size else None)
    return Stream(
        segments=tuple(refined),
        pos_s=tuple(p / sample_rate for p, _, _, _ in placed),
        arrival_s=tuple(a / sample_rate for _, _, _, a in placed),
        dur_s=tuple(n / sample_rate for _, _, n, _ in placed),
        loud_end_s=tuple(loud_end),
    )


@dataclass(frozen=True, slots=True)
class YieldRules:
    """The thresholds a yield needs (from TimingParams)."""

    yield_from: str
    barge_in_search_s: float
    ack_window_s: float
    yield_max_s: float = 1.0


def measure(
    injection_s: float,
    user: Sequence[Segment],
    system: Sequence[Segment],
    p: YieldRules,
    *,
    stream: Stream | None,
    stream_rate: int | None,
    acks_s: Sequence[float] | None,
) -> dict[str, Any]:
    """One interruption: the barge-in onset and the yield three ways (plus the rig's
    truncated track for reference); `yield_ms` is the measure `p.yield_from` names."""
    t_inj = injection_s
    onset = next((s for s, _ in user if t_inj - 0.05 <= s <= t_inj + p.barge_in_search_s), None)
    barge = onset if onset is not None else t_inj
    seg = _active_at(barge, system)
    truncated = {
        "yield_ms": _ms(seg[1] - barge) if seg is not None else None,
        "system_end_s": _r(seg[1]) if seg is not None else None,
    }
    measures = {
        "stream": _stream_yield(barge, stream, stream_rate),
        "ack": _ack_yield(barge, acks_s, p),
        "playback_untruncated": _untruncated_yield(barge, stream),
    }
    chosen = measures[p.yield_from]
    talking = measures["playback_untruncated"].get("system_talking")
    ms = chosen.get("yield_ms")
    # a measure that exists judges; one that cannot exist for this system says "cannot tell"
    passed = None if chosen.get("cannot_tell") else (ms is not None and ms <= p.yield_max_s * 1e3)
    return {
        "injection_s": _r(t_inj),
        "barge_in_s": _r(barge),
        "barge_in_from": "vad" if onset is not None else "injection",
        "system_talking": talking if talking is not None else seg is not None,
        "yield_from": p.yield_from,
        "yield_ms": ms,
        "why_none": chosen.get("why_none"),
        "pass": passed,
        **measures,
        "playback_truncated": truncated,
    }


def _untruncated_yield(barge: float, stream: Stream | None) -> dict[str, Any]:
    if stream is None:
        return {**NO_STREAM}
    seg = _active_at(barge, stream.segments)
    if seg is None:
        return {**NOT_TALKING, "system_talking": False}
    return {"yield_ms": _ms(seg[1] - barge), "system_end_s": _r(seg[1]), "system_talking": True}


def _stream_yield(barge: float, stream: Stream | None, rate: int | None) -> dict[str, Any]:
    if stream is None or rate is None:
        return {**NO_STREAM}
    seg = _active_at(barge, stream.segments)
    if seg is None:
        return {**NOT_TALKING}
    end = _run_end(stream, barge) if stream.dur_s else stream.arrival_of(seg[1], rate)
    if end is None:
        why = "no loud audio in the interrupted reply"
        return {"yield_ms": None, "why_none": why, "cannot_tell": True}
    if end < barge:
        return {
            "yield_ms": None,
            "why_none": "sent ahead: the reply had arrived in full before the barge-in",
            "cannot_tell": True,
            "sent_ahead": True,
            "stream_end_s": _r(end),
        }
    return {"yield_ms": _ms(end - barge), "stream_end_s": _r(end), "sent_ahead": False}


def _run_end(stream: Stream, barge: float) -> float | None:
    """Arrival time of the last loud sample of the run of chunks the barge-in interrupted."""
    pos, arr, dur, loud = stream.pos_s, stream.arrival_s, stream.dur_s, stream.loud_end_s
    k = max(0, bisect.bisect_right(pos, barge) - 1)
    end: float | None = None
    while True:
        if loud[k] is not None:
            end = arr[k] + loud[k]  # type: ignore[operator]
        if k + 1 >= len(pos) or arr[k + 1] - (arr[k] + dur[k]) > STREAM_GAP_S:
            return end
        k += 1


def _ack_yield(barge: float, acks_s: Sequence[float] | None, p: YieldRules) -> dict[str, Any]:
    if acks_s is None:
        return {"yield_ms": None, "why_none": "no events", "cannot_tell": True}
    t = next((a for a in sorted(acks_s) if barge - 0.05 <= a <= barge + p.ack_window_s), None)
    if t is None:
        return {"yield_ms": None, "why_none": "no acknowledgement from the server"}
    return {"yield_ms": _ms(t - barge), "ack_s": _r(t)}


def acks_from_events(events: Sequence[dict[str, Any]], t0_ns: int) -> list[float]:
    """Arrival times (s from t0) of the server's barge-in acknowledgements."""
    out = []
    for ev in events:
        kind, t_ns = ev.get("kind"), ev.get("t_ns")
        if isinstance(kind, str) and isinstance(t_ns, int) and ev.get("source") == "server":
            if kind.removeprefix("server.") in ACK_KINDS:
                out.append((t_ns - t0_ns) / NS_PER_S)
    return out


def _active_at(t: float, segs: Sequence[Segment]) -> Segment | None:
    return next(((s, e) for s, e in segs if s <= t < e), None)


def _ms(x_s: float) -> float:
    return round(x_s * 1000.0, 1)


def _r(x: float) -> float:
    return round(float(x), 4)
