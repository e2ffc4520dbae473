"""Opus for the WebRTC path: libopus driven frame by frame, directly or through PyAV.

Backend: `libopus` calls the library PyAV bundles through ctypes (`rig.transports.webrtc.
libopus`: one C call per frame, ~40 us cheaper per encode and ~17 us per decode than PyAV's
codec contexts, measured in docs/webrtc.md); `pyav` drives PyAV codec contexts; `auto`
(default) takes `libopus` when it loads. Both run the same libopus with the same settings
(unconstrained VBR as PyAV's `vbr=on`): the packets and the decoded PCM are identical
(tested).

Encoder settings (recorded in the manifest through `describe()`): 48 kHz mono, 20 ms frames
(one packet per frame, nothing buffered), 64 kbit/s VBR, DTX off (a silent user still sends
a packet every 20 ms, so send timing is uniform), `application=audio` and complexity 5 by
default. At 64 kbit/s `audio` codes CELT only, while `voip` picks hybrid SILK+CELT, which
costs about twice the CPU per frame; both have the same 6.5 ms (312 sample) lookahead, so
latency shares are unchanged (measurements in docs/webrtc.md). Complexity 0 is refused: it
turns off CELT's transient detection, and pre-echo then moves a noisy onset up to 14 ms
early in the decoded audio. No resampler: the transport hands 48 kHz frames straight in
(with PyAV one `AudioFrame` is reused, its samples overwritten in place), so a frame costs
one libopus call and one `bytes` copy of the packet.

The decoder is one libopus decoder (or PyAV context) per stream, mono s16 out; the
transport calls it off the packet path, when the session pulls the frame.
"""

from __future__ import annotations

import fractions
from typing import Any

import av
import numpy as np

import rig.transports.webrtc.libopus as libopus
from rig.audio.pcm import Pcm16
from rig.errors import ConfigError, ProtocolError

OPUS_RATE = 48_000
FRAME_SAMPLES = 960  # 20 ms at 48 kHz
TIME_BASE = fractions.Fraction(1, OPUS_RATE)
BACKENDS = ("auto", "libopus", "pyav")


def _backend(backend: str) -> Any:
    """The ctypes libopus handle for `backend`, or None for PyAV."""
    if backend not in BACKENDS:
        raise ConfigError(f"Opus backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "pyav":
        return None
    lib = libopus.load()
    if lib is None and backend == "libopus":
        raise ConfigError(
            "libopus could not be loaded (neither PyAV's bundled copy nor a system one)"
        )
    return lib


class OpusFrameEncoder:
    """One Opus packet per 20 ms mono frame at 48 kHz; partial input waits for the rest."""

    def __init__(
        self,
        bitrate: int = 64_000,
        complexity: int = 5,
        dtx: bool = False,
        application: str = "audio",
        backend: str = "auto",
    ) -> None:
        if not 1 <= complexity <= 10:
            raise ConfigError(
                f"Opus complexity must be 1..10, got {complexity} (0 turns off CELT's transient "
                "detection: a noisy onset smears up to 14 ms earlier, which corrupts timing)"
            )
        self.bitrate = bitrate
        self.complexity = complexity
        self.dtx = dtx
        if application not in ("audio", "voip"):
            raise ConfigError(f"Opus application must be audio or voip, got {application!r}")
        self.application = application
        self._pending = np.zeros(0, np.int16)
        self._pts = 0
        lib = _backend(backend)
        self.backend = "pyav" if lib is None else "libopus"
        self._direct: libopus.Encoder | None = None
        if lib is not None:
            app = libopus.OPUS_APPLICATION_AUDIO
            if application == "voip":
                app = libopus.OPUS_APPLICATION_VOIP
            self._direct = libopus.Encoder(
                lib,
                OPUS_RATE,
                app,
                {
                    libopus.OPUS_SET_BITRATE: bitrate,
                    libopus.OPUS_SET_VBR: 1,
                    libopus.OPUS_SET_VBR_CONSTRAINT: 0,  # unconstrained, as PyAV's vbr=on
                    libopus.OPUS_SET_DTX: int(dtx),
                    libopus.OPUS_SET_COMPLEXITY: complexity,
                },
            )
            return
        codec: Any = av.CodecContext.create("libopus", "w")
        codec.bit_rate = bitrate
        codec.format = "s16"
        codec.layout = "mono"
        codec.sample_rate = OPUS_RATE
        codec.time_base = TIME_BASE
        codec.options = {
            "application": application,
            "frame_duration": "20",
            "vbr": "on",
            "dtx": "1" if dtx else "0",
            "compression_level": str(complexity),
        }
        codec.open()
        self._codec = codec
        self._frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
        self._frame.sample_rate = OPUS_RATE
        self._frame.time_base = TIME_BASE
        plane: Any = self._frame.planes[0]
        self._samples = np.frombuffer(plane, np.int16)  # a writable view of the frame

    def encode(self, pcm: Pcm16) -> list[bytes]:
        """Opus packets for `pcm` (mono int16 at 48 kHz): one per complete 20 ms."""
        if self._pending.size == 0 and pcm.size == FRAME_SAMPLES:
            return self._encode_one(pcm)
        buf = np.concatenate([self._pending, np.asarray(pcm, np.int16).reshape(-1)])
        out: list[bytes] = []
        n = buf.size // FRAME_SAMPLES
        for k in range(n):
            out += self._encode_one(buf[k * FRAME_SAMPLES : (k + 1) * FRAME_SAMPLES])
        self._pending = buf[n * FRAME_SAMPLES :].copy()
        return out

    def _encode_one(self, pcm: Pcm16) -> list[bytes]:
        if self._direct is not None:
            return [self._direct.encode(pcm)]
        self._samples[:] = pcm
        self._frame.pts = self._pts
        self._pts += FRAME_SAMPLES
        return [bytes(p) for p in self._codec.encode(self._frame)]

    def describe(self) -> dict[str, Any]:
        return {
            "codec": "opus/48000/1",
            "frame_ms": 20,
            "application": self.application,
            "bitrate": self.bitrate,
            "vbr": True,
            "dtx": self.dtx,
            "complexity": self.complexity,
            "backend": self.backend,
        }


class OpusFrameDecoder:
    """Opus payloads of one stream to mono int16 PCM at 48 kHz."""

    def __init__(self, backend: str = "auto") -> None:
        lib = _backend(backend)
        self.backend = "pyav" if lib is None else "libopus"
        self._direct = None if lib is None else libopus.Decoder(lib, OPUS_RATE)
        self._codec: Any = None
        if self._direct is not None:
            return
        codec: Any = av.CodecContext.create("libopus", "r")
        codec.format = "s16"
        codec.layout = "mono"
        codec.sample_rate = OPUS_RATE
        self._codec = codec

    def decode(self, payload: bytes) -> Pcm16:
        if not payload:  # an empty packet would flush PyAV's decoder: every later one fails
            return np.zeros(0, np.int16)
        if self._direct is not None:
            try:
                return self._direct.decode(payload)
            except ValueError as exc:
                raise ProtocolError(f"undecodable Opus packet: {exc}") from exc
        try:
            frames = self._codec.decode(av.Packet(payload))
        except av.error.FFmpegError as exc:
            raise ProtocolError(f"undecodable Opus packet: {exc}") from exc
        if len(frames) == 1:
            return _mono(frames[0])
        if not frames:
            return np.zeros(0, np.int16)
        return np.concatenate([_mono(f) for f in frames])


def _mono(frame: Any) -> Pcm16:
    data = frame.to_ndarray().reshape(-1)
    channels = len(frame.layout.channels)
    if data.dtype != np.int16:
        raise ProtocolError(f"Opus decoder gave {data.dtype} samples")
    return data if channels == 1 else np.ascontiguousarray(data[::channels])
