"""The uplink frame hook: something that changes each uplink frame before it is sent.

Why a seam of its own: input conditions (rig.conditions: noise between turns, a level or a
line on a turn) and the system's own echo in the user's microphone both change what the
system hears *after* the director decided the frame and *before* the pacer sends it and the
recorder writes user.wav (user.wav is what was sent). Each is a sans-I/O object with one
method; the uplink calls them in order. `start_sample` is the frame's first sample on the
session timeline (sample 0 at t0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from rig.audio.pcm import Pcm16


class FrameHook(Protocol):
    def apply(self, frame: Pcm16, start_sample: int) -> Pcm16:
        """The frame as it should go out (the same array when unchanged)."""
        ...


class PlanHooks(Protocol):
    """What a plan carries to make its hook (rig.conditions.ConditionPlan)."""

    def frame_hook(self, played: Sequence[Any]) -> FrameHook:
        """A hook over the director's played audio (its TurnRecords, growing as they start)."""
        ...
