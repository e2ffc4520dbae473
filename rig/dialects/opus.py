"""Opus encode/decode through PyAV (libopus), PCM16 mono in and out.

The encoder takes frames of 20/40/60/80 ms at its rate and returns one packet per frame.
libopus decodes at 48 kHz; the decoder brings that back to the stream rate with a stateful
resampler, so chunk edges carry no transient. PyAV is the `opus` extra (also in `webrtc`);
without it the Moshi dialect is unavailable (MissingExtra), the rest of the rig is not affected.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rig.audio.pcm import Pcm16
from rig.dialects.resample import ResampleStream
from rig.errors import ProtocolError
from rig.extras import MissingExtra

_DECODE_RATE = 48_000


def _av() -> Any:
    try:
        import av
    except ImportError as exc:
        raise MissingExtra("opus", "Opus (the moshi dialect)", "av") from exc
    return av


class OpusEncoder:
    def __init__(self, sample_rate: int = 24_000, frame_ms: int = 80, bitrate: int = 32_000):
        av = _av()
        self.sample_rate = sample_rate
        self.frame_samples = sample_rate * frame_ms // 1000
        ctx = av.CodecContext.create("libopus", "w")
        ctx.sample_rate = sample_rate
        ctx.layout = "mono"
        ctx.format = "s16"
        ctx.bit_rate = bitrate
        ctx.options = {"frame_duration": str(frame_ms), "application": "voip"}
        self._ctx = ctx
        self._av = av
        self._pts = 0

    def encode(self, pcm: Pcm16) -> list[bytes]:
        if pcm.size != self.frame_samples:
            raise ValueError(f"Opus frame must be {self.frame_samples} samples, got {pcm.size}")
        frame = self._av.AudioFrame.from_ndarray(
            np.ascontiguousarray(pcm, dtype=np.int16).reshape(1, -1), format="s16", layout="mono"
        )
        frame.sample_rate = self.sample_rate
        frame.pts = self._pts
        self._pts += pcm.size
        return [bytes(p) for p in self._ctx.encode(frame)]


class OpusDecoder:
    def __init__(self, sample_rate: int = 24_000) -> None:
        av = _av()
        self.sample_rate = sample_rate
        self._ctx = av.CodecContext.create("libopus", "r")
        self._ctx.layout = "mono"
        self._av = av
        self._resample = ResampleStream(_DECODE_RATE, sample_rate)

    def decode(self, packet: bytes) -> Pcm16:
        try:
            frames = self._ctx.decode(self._av.Packet(packet))
        except self._av.error.FFmpegError as exc:
            raise ProtocolError(f"undecodable Opus packet: {exc}") from exc
        parts = []
        for fr in frames:
            if fr.sample_rate != _DECODE_RATE:
                raise ProtocolError(f"Opus decoder gave {fr.sample_rate} Hz")
            arr = fr.to_ndarray()
            channels = len(fr.layout.channels)
            if fr.format.is_planar:
                arr = arr[0]
            else:
                arr = arr.reshape(-1, channels)[:, 0]
            if arr.dtype != np.int16:
                arr = np.clip(arr * 32768.0, -32768, 32767).astype(np.int16)
            parts.append(arr)
        if not parts:
            return np.zeros(0, dtype=np.int16)
        return self._resample.process(np.concatenate(parts))
