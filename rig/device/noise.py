"""A noise scene on a second output: `--noise-device NAME --noise FILE --noise-level-dbfs X`.

Why: hands-free terminals are tested in noise played from its own loudspeaker (the acoustic
test procedures for hands-free terminals); a device under test should hear the user over a
noise scene that the rig controls exactly and records.

How this works. `NoiseScene` (sans-I/O) is the file at the device rate scaled so that its RMS
over the whole loop is exactly `level_dbfs` (RMS relative to full scale, 32768, as
rig.audio.pcm.level_dbfs and the rest of the rig), played as a loop: sample i of the scene
is sample i mod len(file), from sample 0 at the start, with no crossfade (the same samples
every run). `NoisePlayer` is the asyncio shell: an output-only
device stream (rig.device.stream) kept `ahead_s` ahead by a feeder task on the loop (one
small copy per period, no disk), silent until `start()`; every output block is stamped on
the shared clock like the rig's own playback, so the scene's first sample has an exact time
(`start_ns`, the calibration's FrameClock convention) on the clock the rollout is measured
on. On one card or one JACK server both outputs share the sample clock; on two cards they
drift apart by the cards' clock difference (not corrected).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from rig.audio.pcm import Pcm16
from rig.audio.source import load_wav
from rig.clock.base import Clock
from rig.device.binding import Backend
from rig.device.model import StatusFlag, StreamSettings, flag_names
from rig.device.stream import DeviceStream, get_backend
from rig.device.timeinfo import FrameClock, FrameStamp
from rig.errors import ConfigError, RigError

#: how far ahead of the output the feeder keeps the queue
AHEAD_S = 0.2


@dataclass(frozen=True, slots=True)
class NoiseOptions:
    device: str
    file: str
    level_dbfs: float
    rate: int = 48_000
    backend: str = "sounddevice"
    latency: str | float = "high"

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class NoiseScene:
    """The file as a loop at an exact RMS level; `take(n)` gives the next n samples."""

    def __init__(self, pcm: Pcm16, level_dbfs: float) -> None:
        if pcm.size == 0:
            raise ConfigError("the noise file has no samples")
        x = pcm.astype(np.float64)
        rms = math.sqrt(float(x @ x) / x.size)
        if rms < 1.0:
            raise ConfigError("the noise file is silent: nothing to set a level on")
        if level_dbfs > 0:
            raise ConfigError(f"--noise-level-dbfs must be <= 0, got {level_dbfs:g}")
        self.level_dbfs = level_dbfs
        self.gain = 32768.0 * 10 ** (level_dbfs / 20) / rms
        y = np.rint(x * self.gain)
        self.clipped = int(np.count_nonzero(np.abs(y) > 32767))
        self.loop: Pcm16 = np.clip(y, -32768, 32767).astype(np.int16)
        self.pos = 0  # samples of the scene handed out so far

    def take(self, n: int) -> Pcm16:
        idx = (self.pos + np.arange(n)) % self.loop.size
        self.pos += n
        return self.loop[idx]

    def describe(self) -> dict[str, Any]:
        y = self.loop.astype(np.float64)
        return {
            "level_dbfs": self.level_dbfs,
            "loop_samples": int(self.loop.size),
            "gain_db": round(20 * math.log10(self.gain), 3),
            "loop_rms_dbfs": round(10 * math.log10(float(y @ y) / y.size / 32768.0**2), 3),
            "clipped_samples": self.clipped,
        }


class NoisePlayer:
    """An output-only device stream that plays a `NoiseScene` once started."""

    def __init__(
        self,
        opts: NoiseOptions,
        scene: NoiseScene,
        clock: Clock,
        backend: Backend | None = None,
        ahead_s: float = AHEAD_S,
    ) -> None:
        self.opts = opts
        self.scene = scene
        settings = StreamSettings(
            opts.rate, None, opts.device, out_channels=1, latency=opts.latency
        )
        self.stream = DeviceStream(backend or get_backend(opts.backend), settings, clock)
        self.ahead = round(ahead_s * opts.rate)
        self.stamps: list[FrameStamp] = []
        self.xruns: Counter[str] = Counter()
        self.start_frame: int | None = None  # output frame of the scene's first sample
        self._started = False
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def load(
        cls, opts: NoiseOptions, clock: Clock, backend: Backend | None = None
    ) -> NoisePlayer:
        """Read the file (off the loop), check the device, build the player (not opened)."""
        try:
            src = await asyncio.to_thread(load_wav, opts.file, opts.rate)
        except (OSError, RigError) as exc:
            raise ConfigError(f"--noise {opts.file}: {exc}") from exc
        return cls(opts, NoiseScene(src.pcm, opts.level_dbfs), clock, backend)

    async def open(self) -> None:
        await self.stream.open()
        self._task = asyncio.create_task(self._run(), name="noise-output")

    def start(self) -> None:
        """From the next output block on, the scene plays (from its first sample)."""
        self._started = True
        self.stream.play(self.scene.take(self.ahead))

    async def _run(self) -> None:
        async for b in self.stream.blocks():
            if b.direction != "out":
                continue
            self.stamps.append(FrameStamp(b.frame, b.n_frames, b.t_ns, b.pa_time_s, b.pa_current_s))
            for f in flag_names(b.status & ~StatusFlag.PRIMING_OUTPUT):
                self.xruns[f] += 1
            if self._started and self.start_frame is None and b.played_frames > 0:
                self.start_frame = b.frame  # the queue fills a block from its first frame
            if self._started and self.stream.queued_frames < self.ahead:
                self.stream.play(self.scene.take(self.ahead - self.stream.queued_frames))

    @property
    def start_ns(self) -> int | None:
        """The scene's first sample on the shared clock (FrameClock over its stamps)."""
        if self.start_frame is None or not self.stamps:
            return None
        return round(FrameClock(self.stamps, self.opts.rate).time_ns(self.start_frame))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self.stream.close()

    def describe(self) -> dict[str, Any]:
        out = self.stream.output
        return {
            **self.opts.as_dict(),
            **self.scene.describe(),
            "device_name": None if out is None else out.name,
            "hostapi": None if out is None else out.hostapi,
            "start_ns": self.start_ns,
            "samples_played": self.scene.pos - self.stream.queued_frames,
            "xruns": dict(self.xruns),
        }
