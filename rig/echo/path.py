"""The echo condition on the uplink: the user's audio plus the system's reply as heard.

How this works (sans-I/O; the session calls it, rig.session). The sink hands every piece of
played system audio to `hear` (the playback track: what a listener at the rig heard, so audio
dropped at a barge-in is never echoed); `apply(frame, start_sample)` is the uplink frame hook
(HELPERS' contract, beside rig.conditions'): it reads the played track `delay_ms` before the
frame at the uplink rate (rig.echo.resample), convolves it with the room's response if there
is one (rig.echo.convolve: one partitioned FFT block per frame, state kept), scales it by the
echo return loss and adds it to the frame, saturating to int16. What it added goes out as
`echo.wav` (`take`), sample-aligned with user.wav, so the analysis can tell the user's own
speech (user.wav - echo.wav) from the echo (rig.analysis.selfecho).

Every frame's positions are in samples on the session timeline: frame k starts at k * n. The
playback is final only before the frame's deadline (the listener places what arrives at
max(arrival, end of what is queued), never earlier), so the echo reads only there: the
minimum delay is one frame plus the resampler's look-ahead (rig.echo.spec.check_delay).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from rig.audio.pcm import Pcm16
from rig.core.listener import Listener, Output
from rig.core.records import EventRecord, Record, SystemAudio, SystemPad, TrackAudio
from rig.core.sessionconfig import SessionConfig
from rig.core.units import NS_PER_MS
from rig.core.uplink import Frame
from rig.echo.convolve import PartitionedConvolver
from rig.echo.resample import PlayedTrack
from rig.echo.rir import rir_for
from rig.echo.spec import EchoSpec, check_delay, min_delay_ms

F64 = npt.NDArray[np.float64]
#: how much played audio the ring keeps beyond the delay
KEEP_S = 1.0


class Sink(Protocol):
    """What the path needs of the session's sink (rig.recordings.sink.RolloutSink)."""

    played: Callable[[Record], None] | None

    def put_all(self, records: Iterable[Output]) -> None: ...


class EchoPath:
    def __init__(
        self, spec: EchoSpec, sample_rate: int, frame_samples: int, rir: F64 | None = None
    ) -> None:
        frame_ms = frame_samples * 1000.0 / sample_rate
        check_delay(spec, frame_ms)
        self.spec = spec
        self.rate = sample_rate
        self.n = frame_samples
        self.frame_ms = frame_ms
        self.delay = round(spec.delay_ms * sample_rate / 1000.0)
        self.gain = spec.gain
        self.rir_samples = 0 if rir is None else int(rir.size)
        self._conv = None if rir is None else PartitionedConvolver(rir, frame_samples)
        self._played: PlayedTrack | None = None
        self._out: list[TrackAudio] = []
        self.frames = 0
        self.loud_frames = 0  # frames with any echo at all
        self.peak_dbfs = -120.0
        self.clipped = 0  # samples where user + echo saturated int16
        self.cost_ns = 0  # CPU time of apply(), summed (process time of this thread)
        self._sink: Sink | None = None
        self._last_ns = 0

    @classmethod
    async def for_session(cls, cfg: SessionConfig, sample_rate: int, sink: Sink) -> EchoPath | None:
        """The session's echo path (None: no echo condition), built off the event loop (a
        room is read or generated), tapping the sink for the playback track."""
        if not cfg.echo:
            return None
        n = round(sample_rate * cfg.frame_ms / 1000)
        path = await asyncio.to_thread(cls.build, cfg.echo, sample_rate, n)
        path._sink = sink
        sink.played = path.tap
        return path

    def on_frame(self, frame: Frame, listener: Listener, deadline_ns: int) -> Frame:
        """The session's call per frame: what has played by the deadline goes to system.wav
        (and, through the tap, to the echo), then the frame gets its echo, then echo.wav."""
        assert self._sink is not None
        self._sink.put_all(listener.release(deadline_ns))
        pcm = self.apply(frame.pcm, frame.seq * self.n)
        self._sink.put_all(self.take())
        self._last_ns = deadline_ns
        return dataclasses.replace(frame, pcm=pcm, silent=False)  # echo may be in it now

    def tap(self, record: Record) -> None:
        """The sink's tap: played audio is heard; at the end (system.wav padded) the
        summary goes to events.jsonl as `echo.summary` (the analysis reads it)."""
        if isinstance(record, SystemAudio):
            self.hear(record)
        elif isinstance(record, SystemPad) and self._sink is not None:
            t_ns = self._last_ns + round(self.frame_ms * NS_PER_MS)
            self._sink.put_all([EventRecord("echo.summary", t_ns, self.describe())])

    @classmethod
    def build(cls, text: str, sample_rate: int, frame_samples: int) -> EchoPath:
        """From the canonical spec; loads or generates the room (disk, CPU): call it off
        the event loop."""
        spec = EchoSpec.parse(text)
        check_delay(spec, frame_samples * 1000.0 / sample_rate)
        rir = rir_for(spec.rir, spec.room, spec.distance_m, sample_rate)
        return cls(spec, sample_rate, frame_samples, rir)

    # --- what played --------------------------------------------------------------------

    def hear(self, audio: SystemAudio) -> None:
        """A piece of the playback track (the sink's `played` tap)."""
        if self._played is None:
            keep = (self.spec.delay_ms / 1000.0) + KEEP_S
            self._played = PlayedTrack(audio.sample_rate, keep)
        self._played.write(audio.start_sample, audio.pcm)

    # --- the uplink frame hook ----------------------------------------------------------

    def apply(self, frame: Pcm16, start_sample: int) -> Pcm16:
        """`frame` (at `start_sample` on the session timeline) plus the echo."""
        t = time.thread_time_ns()
        n = frame.size
        echo: F64
        if self._played is None:
            echo = np.zeros(n)
        else:
            a = start_sample - self.delay
            echo = self._played.read(a, a + n, self.rate)
        if self._conv is not None and n == self.n:
            echo = self._conv.process(echo)
        echo = echo * (self.gain * 32768.0)
        e16 = np.clip(np.rint(echo), -32768, 32767).astype(np.int16)
        mixed = frame.astype(np.int32) + e16
        out: Pcm16 = np.clip(mixed, -32768, 32767).astype(np.int16)
        self.frames += 1
        if e16.any():
            self.loud_frames += 1
            peak = float(np.max(np.abs(e16.astype(np.int32)))) / 32768.0
            self.peak_dbfs = max(self.peak_dbfs, 20.0 * float(np.log10(max(peak, 1e-6))))
            self.clipped += int(np.count_nonzero(mixed != out))
        self._out.append(TrackAudio("echo", self.rate, e16))
        self.cost_ns += time.thread_time_ns() - t
        return out

    def take(self) -> list[TrackAudio]:
        """The echo added since the last call (echo.wav)."""
        out, self._out = self._out, []
        return out

    def describe(self) -> dict[str, Any]:
        """The manifest's and metrics.json's `echo` block."""
        return {
            **self.spec.as_dict(),
            "spec": self.spec.text,
            "min_delay_ms": min_delay_ms(self.frame_ms),
            "rir_ms": round(self.rir_samples * 1000.0 / self.rate, 3),
            "sample_rate": self.rate,
            "frames": self.frames,
            "frames_with_echo": self.loud_frames,
            "peak_dbfs": round(self.peak_dbfs, 2),
            "clipped_samples": self.clipped,
            "cost_us_per_frame": round(self.cost_ns / 1000.0 / max(1, self.frames), 2),
        }
