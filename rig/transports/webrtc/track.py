"""An outgoing aiortc audio track that hands out exactly the frames the rig's pacer pushed.

aiortc's sender loop calls `recv()` and sends whatever it returns as fast as it can encode;
its stock tracks pace themselves with wall-clock sleeps inside `recv()`. This track never
sleeps: `recv()` waits for the next frame pushed by `push()`, so the only pacing is the
rig's absolute-deadline pacer on the shared clock. Frames carry `pts` = running sample count
at 48 kHz, which the Opus encoder turns into the RTP timestamp.

`taken_ns` records when aiortc took each frame (the start of encoding), for the wire stamps.
"""

from __future__ import annotations

import asyncio
import fractions
import time
from collections import deque

import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import AudioFrame

from rig.transports.base import Pcm16

OPUS_RATE = 48_000
TIME_BASE = fractions.Fraction(1, OPUS_RATE)


def make_frame(pcm: Pcm16, pts: int, rate: int = OPUS_RATE) -> AudioFrame:
    """A mono s16 av frame of `pcm` at `rate`, stamped `pts` samples from the start."""
    data = np.ascontiguousarray(pcm, dtype=np.int16).reshape(1, -1)
    frame = AudioFrame.from_ndarray(data, format="s16", layout="mono")
    frame.sample_rate = rate
    frame.pts = pts
    frame.time_base = fractions.Fraction(1, rate)
    return frame


class PushedAudioTrack(MediaStreamTrack):
    """Audio track fed by `push()`; `recv()` returns frames in push order, never sleeps."""

    kind = "audio"

    def __init__(self, max_queued: int = 50) -> None:
        super().__init__()
        self._queue: asyncio.Queue[AudioFrame | None] = asyncio.Queue()
        self.max_queued = max_queued
        self.pts = 0
        self.pushed = 0
        self.taken = 0
        self.dropped = 0
        self.taken_ns: deque[int] = deque(maxlen=256)

    def push(self, pcm: Pcm16, rate: int = OPUS_RATE) -> int:
        """Queue one frame for the sender; returns its pts. Drops the oldest if aiortc stalls."""
        pts = self.pts
        self.pts += int(pcm.size)
        while self._queue.qsize() >= self.max_queued:
            self._queue.get_nowait()
            self.dropped += 1
        self._queue.put_nowait(make_frame(pcm, pts, rate))
        self.pushed += 1
        return pts

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        frame = await self._queue.get()
        if frame is None:
            raise MediaStreamError
        self.taken += 1
        self.taken_ns.append(time.monotonic_ns())
        return frame

    def stop(self) -> None:
        if self.readyState == "live":
            self._queue.put_nowait(None)
        super().stop()
