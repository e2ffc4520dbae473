"""Uplink frame levels looked up from the track, not measured frame by frame.

Why: the writer thread writes every uplink frame's level into chunks.jsonl, 10 000 frames a
second at 200 streams. Measured one frame at a time (`level_dbfs`: three numpy calls) that was
the writer's largest single cost: taking it out saved 2-6 % of the rig's CPU per frame at 200
streams (docs/pacing.md, sixteenth pass on #32). A plain frame is a view of its turn's audio at
a known position, and a run's repeats share those arrays: the levels of an array's frames at one
frame size and phase are measured once, a block of frames in one pass, and each frame's level
is an index.
A frame of the script's silence between turns (`Frame.silent`) is looked up in `SILENCE`.

Owned by the writer thread (no lock). Arrays are held weakly: a table goes with its audio, and
a new array at a reused id is measured afresh.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from rig.audio.pcm import Pcm16, frame_levels, level_dbfs

#: tables kept before the dead ones are swept out
PRUNE_AT = 1024
#: frames measured at a time (5 s of 20 ms frames, ~0.3 ms of the writer's Python): a long
#: track is not measured in one stretch that holds the GIL from the event loop
BLOCK_FRAMES = 250


class FrameLevels:
    """`level_dbfs(audio[pos:pos + n])` for frames cut from shared, never-written audio."""

    def __init__(self) -> None:
        # (id of the audio, n, phase) -> (a weak reference to it, {block: levels of its frames})
        self._tables: dict[tuple[int, int, int], tuple[weakref.ref[Any], dict[int, list[float]]]]
        self._tables = {}
        self.measured = 0  # blocks measured (a test's view of the sharing)

    def at(self, audio: Pcm16, pos: int, n: int) -> float:
        """The level of the `n` samples of `audio` from `pos` (within `audio`)."""
        phase = pos % n
        key = (id(audio), n, phase)
        seen = self._tables.get(key)
        if seen is None or seen[0]() is not audio:
            seen = self._table(key, audio)
        block, i = divmod(pos // n, BLOCK_FRAMES)
        levels = seen[1].get(block)
        if levels is None:
            start = phase + block * BLOCK_FRAMES * n
            levels = seen[1][block] = frame_levels(audio[start : start + BLOCK_FRAMES * n], n)
            self.measured += 1
        if i < len(levels):
            return levels[i]
        return level_dbfs(audio[pos : pos + n])  # a frame past the last whole one: measured

    def _table(
        self, key: tuple[int, int, int], audio: Pcm16
    ) -> tuple[weakref.ref[Any], dict[int, list[float]]]:
        if len(self._tables) >= PRUNE_AT:
            for k in [k for k, (ref, _) in self._tables.items() if ref() is None]:
                del self._tables[k]
        blocks: dict[int, list[float]] = {}
        seen = self._tables[key] = (weakref.ref(audio), blocks)  # every ndarray takes one
        return seen


#: where an all-silent uplink frame (`Frame.silent`) is a view of: its level from a table too
SILENCE: Pcm16 = np.zeros(48_000, dtype=np.int16)  # 1 s at 48 kHz: any frame size in use
SILENCE.flags.writeable = False
SILENT_SRC: tuple[Pcm16, int] = (SILENCE, 0)
