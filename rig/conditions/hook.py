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
At a play's start the previous bed fades out linearly over up to 10 ms, never into the
play's speech: with no wait before it the two are the same noise and nothing changes.
Nothing here allocates beyond the frame, reads a clock or does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rig.audio.pcm import Pcm16, to_int16
from rig.conditions.plan import ConditionPlan
from rig.conditions.render import Bed


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
        prev, pos = self._bed_at(k - 1, p)
        m = min(pc.fade, i1) - i0
        w_in = (np.arange(i0, i0 + m, dtype=np.float64) + 0.5) / pc.fade
        before = prev.render(pos, m).astype(np.float64) if prev is not None else np.zeros(m)
        mixed = w_in * seg[:m].astype(np.float64) + (1.0 - w_in) * before
        out = seg.copy()
        out[:m] = to_int16(mixed / 32768.0)
        return out
