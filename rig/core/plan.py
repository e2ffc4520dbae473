"""What the rig will play: one mono track at the uplink rate, with its user turns marked.

A plan is prepared before the stream starts (files decoded, resampled, concatenated), so the
audio loop only slices an array. Each turn records where its speech starts and ends (an energy
gate on 10 ms blocks, sample-precise at the edges) so metrics can time responses from the end
of speech as sent, not from the end of the file.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rig.audio.pcm import Pcm16
from rig.audio.source import ArraySource, load_wav, silence
from rig.core.framehook import PlanHooks

BLOCK_MS = 10


@dataclass(frozen=True, slots=True)
class TurnSpan:
    """A user turn on the plan's timeline, in samples at the plan's rate."""

    index: int
    start_sample: int
    end_sample: int
    speech_start_sample: int | None
    speech_end_sample: int | None
    label: str = ""

    def as_dict(self, sample_rate: int) -> dict[str, Any]:
        def s(x: int | None) -> float | None:
            return None if x is None else round(x / sample_rate, 6)

        return {
            "index": self.index,
            "label": self.label,
            "start_s": s(self.start_sample),
            "end_s": s(self.end_sample),
            "speech_start_s": s(self.speech_start_sample),
            "speech_end_s": s(self.speech_end_sample),
        }


@dataclass
class UserPlan:
    pcm: Pcm16
    sample_rate: int
    turns: list[TurnSpan] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)
    #: a scripted plan (rig.core.director steps); None = play `pcm` with its turns, then drain
    steps: list[Any] | None = None
    #: input conditions (rig.conditions.ConditionPlan: level, noise, line), applied to the
    #: uplink frames through the hook it makes (rig.core.framehook); None: as scripted
    conditions: PlanHooks | None = None

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / self.sample_rate

    def describe(self) -> dict[str, Any]:
        return {
            "sample_rate": self.sample_rate,
            "duration_s": round(self.duration_s, 6),
            "turns": [t.as_dict(self.sample_rate) for t in self.turns],
            "sources": self.sources,
            **(
                {"steps": [describe_step(x, self.sample_rate) for x in self.steps]}
                if self.steps is not None
                else {}
            ),
        }


def describe_step(step: Any, sample_rate: int) -> dict[str, Any]:
    """A director step as manifest data: its parameters, audio as a duration (not samples)."""
    out: dict[str, Any] = {"type": type(step).__name__}
    for name in getattr(step, "__dataclass_fields__", {}):
        v = getattr(step, name)
        if isinstance(v, np.ndarray):
            out["duration_s"] = round(len(v) / sample_rate, 6)
        elif name == "marks":  # reference marks (rig.core.refmarks), listed when there are any
            if v:
                out["marks"] = [m.describe(sample_rate) for m in v]
        else:
            out[name] = v
    return out


def speech_bounds(
    pcm: Pcm16, sample_rate: int, threshold_dbfs: float = -40.0
) -> tuple[int, int] | None:
    """(first, last+1) loud sample of the speech in `pcm`, gated on 10 ms blocks."""
    thresh = 32768.0 * 10 ** (threshold_dbfs / 20)
    mags = np.abs(pcm.astype(np.int32))
    block = max(1, sample_rate * BLOCK_MS // 1000)
    n = len(mags) // block
    if n == 0:
        return None
    loud_blocks = np.flatnonzero(mags[: n * block].reshape(n, block).max(axis=1) > thresh)
    if loud_blocks.size == 0:
        return None
    first_blk, last_blk = int(loud_blocks[0]), int(loud_blocks[-1])
    seg = mags[first_blk * block : (first_blk + 1) * block]
    first = first_blk * block + int(np.flatnonzero(seg > thresh)[0])
    seg = mags[last_blk * block : (last_blk + 1) * block]
    last = last_blk * block + int(np.flatnonzero(seg > thresh)[-1])
    return first, last + 1


#: (id of the audio, rate, threshold) -> (a weak reference to it, its bounds)
_BOUNDS_SEEN: dict[tuple[int, int, float], tuple[weakref.ref[Any], tuple[int, int] | None]] = {}
_BOUNDS_PRUNE_AT = 4096


def speech_bounds_once(
    pcm: Pcm16, sample_rate: int, threshold_dbfs: float = -40.0
) -> tuple[int, int] | None:
    """`speech_bounds`, measured once per audio array while it lives.

    Why: a run's repeats share their plans' arrays, and the director measures every step's
    bounds as the session starts, on the event loop. Measured at each step's start (as
    before), 200 rollouts of one scenario measured the same turns at the same instants inside
    the uplink's tick: 30-180 µs a turn, a burst of milliseconds the other streams' frames
    waited out (docs/pacing.md, twelfth pass). The arrays are never written after the plan is
    made (frames are copies or read-only views); the weak reference tells a live array from a
    new one at a reused id."""
    key = (id(pcm), sample_rate, float(threshold_dbfs))
    seen = _BOUNDS_SEEN.get(key)
    if seen is not None and seen[0]() is pcm:
        return seen[1]
    bounds = speech_bounds(pcm, sample_rate, threshold_dbfs)
    if len(_BOUNDS_SEEN) >= _BOUNDS_PRUNE_AT:
        for k in [k for k, (ref, _) in _BOUNDS_SEEN.items() if ref() is None]:
            del _BOUNDS_SEEN[k]
    try:
        _BOUNDS_SEEN[key] = (weakref.ref(pcm), bounds)
    except TypeError:  # an array type without weak references: measured every time
        pass
    return bounds


class PlanBuilder:
    """Append silence and turns; each turn's speech bounds are measured as it is added."""

    def __init__(self, sample_rate: int, threshold_dbfs: float = -40.0) -> None:
        self.sample_rate = sample_rate
        self.threshold_dbfs = threshold_dbfs
        self._parts: list[Pcm16] = []
        self._n = 0
        self.turns: list[TurnSpan] = []
        self.sources: list[dict[str, Any]] = []

    def add_silence(self, duration_s: float) -> PlanBuilder:
        src = silence(duration_s, self.sample_rate)
        self._parts.append(src.pcm)
        self._n += len(src.pcm)
        return self

    def add_turn(self, source: ArraySource, label: str = "") -> PlanBuilder:
        if source.sample_rate != self.sample_rate:
            raise ValueError("turn audio must be at the plan's rate")
        bounds = speech_bounds(source.pcm, self.sample_rate, self.threshold_dbfs)
        start = self._n
        self.turns.append(
            TurnSpan(
                len(self.turns),
                start,
                start + len(source.pcm),
                None if bounds is None else start + bounds[0],
                None if bounds is None else start + bounds[1],
                label,
            )
        )
        self._parts.append(source.pcm)
        self._n += len(source.pcm)
        self.sources.append(source.describe())
        return self

    def add_wav(self, path: str, label: str = "") -> PlanBuilder:
        return self.add_turn(load_wav(path, self.sample_rate), label or path)

    def build(self) -> UserPlan:
        pcm = np.concatenate(self._parts) if self._parts else np.zeros(0, np.int16)
        return UserPlan(pcm, self.sample_rate, list(self.turns), list(self.sources))
