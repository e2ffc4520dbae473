"""The uplink frame hook of conditions: what the system hears, frame by frame.

How this works (sans-I/O; rig.core.framehook's contract): the session hands each uplink
frame the director produced, with its first sample's place on the session timeline, to
`apply(frame, start_sample)` before the frame is sent and recorded (user.wav is what was
sent). The director's list of played audio (`played`: role, start_sample, end_sample, in
play order, growing as each starts) says where every play lies. Each sample of the frame is
  inside play k           the condition's rendering of play k (ConditionPlan.plays[k].pcm;
                          played as scripted when k has no condition or is a prefill)
  after play k            play k's noise bed, at noise position noise_pos_k + (s - start_k),
                          until the next play starts (pauses, releases, drains: the room)
  before any live play    the first live play's bed (the pre-bed)
At a play's start the previous bed crossfades linearly into the play's own noise over up to
10 ms, never into its speech; with no wait before it the two are the same noise and not a
sample changes.
Nothing here allocates beyond the frame, reads a clock or does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rig.audio.pcm import Pcm16, to_int16
from rig.conditions.render import Bed


@dataclass(frozen=True, slots=True)
class PlayConditions:
    """One played audio's condition: what replaces it, and the noise after it."""

    pcm: Pcm16 | None  # None: played as scripted
    bed: Bed | None  # the noise after it until the next play (None: silence)
    noise_pos: int  # noise position of its first sample
    fade: int  # samples at its start over which the previous bed fades out


@dataclass
class ConditionPlan:
    """What a plan's uplink hears under its conditions (sans-I/O; see rig.conditions.hook)."""

    sample_rate: int
    plays: list[PlayConditions | None]
    pre_bed: Bed | None = None  # before the first conditioned play (a room before speech)
    pre_pos: int = 0  # noise position of timeline sample 0 for the pre-bed
    records: list[dict[str, Any]] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)

    def frame_hook(self, played: Sequence[Any]) -> ConditionHook:
        return ConditionHook(self, played)

    def describe(self) -> dict[str, Any]:
        return {"run": self.run, "turns": self.records}


class ConditionHook:
    def __init__(self, plan: ConditionPlan, played: Sequence[Any]) -> None:
        self.plan = plan
        self.played = played  # the director's TurnRecords (read only)
        self._k = -1  # the latest play started at or before the position being rendered

    def apply(self, frame: Pcm16, start_sample: int) -> Pcm16:
        end = start_sample + len(frame)
        played = self.played
        out: Pcm16 | None = None
        p = start_sample
        while p < end:
            while self._k + 1 < len(played) and played[self._k + 1].start_sample <= p:
                self._k += 1
            k = self._k
            stop = min(played[k + 1].start_sample, end) if k + 1 < len(played) else end
            if k >= 0 and p < played[k].end_sample:
                stop = min(stop, played[k].end_sample)
                piece = self._inside(k, p, stop)
            else:
                piece = self._between(k, p, stop)
            if piece is not None:
                if out is None:
                    out = frame.copy()
                out[p - start_sample : stop - start_sample] = piece
            p = stop
        return frame if out is None else out

    def _cond(self, k: int) -> Any:
        plays = self.plan.plays
        if k < 0 or k >= len(plays) or self.played[k].role == "prefill":
            return None
        return plays[k]

    def _bed_at(self, k: int, p: int) -> tuple[Bed | None, int]:
        """The bed that sounds after play k (k < 0 or a prefill: the pre-bed), and its
        noise position at timeline sample p."""
        if k < 0 or self.played[k].role == "prefill":
            return self.plan.pre_bed, self.plan.pre_pos + p
        pc = self._cond(k)
        if pc is None:
            return None, 0
        return pc.bed, pc.noise_pos + (p - self.played[k].start_sample)

    def _between(self, k: int, p: int, stop: int) -> Pcm16 | None:
        bed, pos = self._bed_at(k, p)
        return None if bed is None else bed.render(pos, stop - p)

    def _inside(self, k: int, p: int, stop: int) -> Pcm16 | None:
        pc = self._cond(k)
        if pc is None or pc.pcm is None:
            return None
        t0 = self.played[k].start_sample
        i0, i1 = p - t0, stop - t0
        seg: Pcm16 = pc.pcm[i0:i1]
        if i0 >= pc.fade:
            return seg
        # the noise alone crossfades: play + (1 - w) (previous bed - this play's own bed),
        # so the play's lead-in is untouched, and with the same noise nothing changes at all
        prev, pos = self._bed_at(k - 1, p)
        m = min(pc.fade, i1) - i0
        w_out = 1.0 - (np.arange(i0, i0 + m, dtype=np.float64) + 0.5) / pc.fade
        delta = np.zeros(m)
        if prev is not None:
            delta += prev.render(pos, m)
        if pc.bed is not None:
            delta -= pc.bed.render(pc.noise_pos + i0, m)
        if not delta.any():
            return seg
        out = seg.copy()
        out[:m] = to_int16((seg[:m] + w_out * delta) / 32768.0)
        return out
