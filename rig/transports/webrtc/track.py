"""An outgoing aiortc audio track that hands out exactly the frames the rig's pacer pushed.

aiortc's sender loop calls `recv()` and sends whatever it returns as fast as it can encode;
its stock tracks pace themselves with wall-clock sleeps inside `recv()`. This track never
sleeps: `recv()` waits for the next frame pushed by `push()`, so the only pacing is the
rig's absolute-deadline pacer on the shared clock. Frames carry `pts` = running sample count
at 48 kHz, which the Opus encoder turns into the RTP timestamp.

Encoding happens in `push()`, on the caller's loop (libopus, ~0.15 ms per 20 ms frame):
`recv()` hands aiortc a ready Opus packet, which its sender only packetizes, so a frame
reaches the socket without the worker-thread hop aiortc uses for raw frames (that hop made
send lateness and CPU per frame several times larger in bench/webrtc.py). `encode=False`
hands raw frames to aiortc's own encoder instead.
"""

from __future__ import annotations

import asyncio
import fractions
from typing import Any

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import AudioFrame

from rig.audio.pcm import Pcm16

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


class OpusPacketEncoder:
    """libopus at 48 kHz mono, one packet per 20 ms frame, stamped with the frame's pts."""

    def __init__(self, bitrate: int = 64_000) -> None:
        self.codec: Any = av.CodecContext.create("libopus", "w")
        self.codec.bit_rate = bitrate
        self.codec.format = "s16"
        self.codec.layout = "mono"
        self.codec.sample_rate = OPUS_RATE
        self.codec.time_base = TIME_BASE
        self.codec.options = {"application": "voip"}
        self.resampler = av.AudioResampler(
            format="s16", layout="mono", rate=OPUS_RATE, frame_size=960
        )
        self._next_pts = 0

    def encode(self, frame: AudioFrame) -> list[Any]:
        packets = []
        for f in self.resampler.resample(frame):
            for p in self.codec.encode(f):
                p.pts = self._next_pts  # the RTP timestamp: samples since the first frame
                p.time_base = TIME_BASE
                self._next_pts += 960
                packets.append(p)
        return packets


class PushedAudioTrack(MediaStreamTrack):
    """Audio track fed by `push()`; `recv()` returns items in push order, never sleeps."""

    kind = "audio"

    def __init__(self, max_queued: int = 50, encode: bool = True) -> None:
        super().__init__()
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self.encoder = OpusPacketEncoder() if encode else None
        self.max_queued = max_queued
        self.pts = 0
        self.pushed = 0
        self.taken = 0
        self.dropped = 0
        self.held = 0  # frames pushed since the last queued item (the encoder buffers some)

    def push(self, pcm: Pcm16, rate: int = OPUS_RATE) -> int:
        """Queue one frame for the sender; returns its pts. Drops the oldest if aiortc stalls."""
        pts = self.pts
        self.pts += int(pcm.size)
        frame = make_frame(pcm, pts, rate)
        items: list[Any] = [frame] if self.encoder is None else self.encoder.encode(frame)
        self.pushed += 1
        self.held += 1
        for item in items:
            while self._queue.qsize() >= self.max_queued:
                old = self._queue.get_nowait()
                self.dropped += 1
                if old is not None:
                    self.taken += old[1]  # gone for good: count it as taken
            self._queue.put_nowait((item, self.held))
            self.held = 0
        return pts

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    async def recv(self) -> Any:
        """The next frame (or Opus packet); `taken` counts the pushed frames it covers."""
        if self.readyState != "live":
            raise MediaStreamError
        entry = await self._queue.get()
        if entry is None:
            raise MediaStreamError
        item, frames = entry
        self.taken += frames
        return item

    def stop(self) -> None:
        if self.readyState == "live":
            self._queue.put_nowait(None)
        super().stop()
