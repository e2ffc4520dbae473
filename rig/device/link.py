"""The device link: one open device path, blocks in, PCM out, every frame on the shared clock.

How this works
--------------
`DeviceLink` is the asyncio shell over one `DeviceStream` (rig.device.stream); both the
rig's sound-card transport (rig.transports.device) and the reference system's device mode
(rig.sim.device_server) use it.

Opening waits until both directions deliver audio steadily (the ALSA "pulse" plugin pre-fills
and then pauses for up to ~1.5 s): a direction is steady once the last `settle_s` of its
callbacks all place their frames within `MAX_SETTLE_SPREAD_NS` of each other.

Times. Each callback is stamped on the shared clock at entry. Two placements of a stream
frame are used, both on the "callback convention" of rig.device.timeinfo (a block's first
sample at its callback stamp, the next ones at the nominal rate), which is the convention
`rig calibrate` measures the round trip on:

- live (causal, for the session): `LiveClock`, `frame/rate + min over the last
  LIVE_WINDOW_S of (stamp - frame/rate)`. Callbacks run late, never early, so the lower
  envelope is the placement least disturbed by scheduling jitter.
- exact (after the fact, for the corrected latency and the truth log): `FrameClock`, the
  median over +-0.25 s of blocks, exactly what the calibration used (`exact_ns`).

`play()` queues PCM behind what is already queued; when the queue is empty (the first
frame, or after an underrun) `lead_ms` of silence goes in first, so paced frames never find
the queue dry. `PlayLog` maps every queued sample to the output stream frame it played at.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rig.audio.pcm import Pcm16
from rig.clock.base import Clock
from rig.device.binding import Backend
from rig.device.model import Block, StatusFlag, flag_names
from rig.device.options import DeviceOptions
from rig.device.stream import DeviceStream, get_backend
from rig.device.timeinfo import FrameClock, FrameStamp, LiveClock, PlayLog, check_pa_clock
from rig.errors import DeviceError

#: stamps kept for exact placement while running (the FrameClock window is +-0.25 s)
RECENT_STAMPS_S = 2.0


@dataclass
class LinkStats:
    xruns: collections.Counter[str] = field(default_factory=collections.Counter)
    playout_underruns: int = 0
    in_blocks: int = 0
    out_blocks: int = 0


class DeviceLink:
    """An open device path: blocks in, PCM out, every frame placed on the shared clock."""

    def __init__(self, opts: DeviceOptions, clock: Clock, backend: Backend | None = None) -> None:
        self.opts = opts
        self.clock = clock
        self.rate = opts.rate
        self.stream = DeviceStream(backend or get_backend(opts.backend), opts.settings(), clock)
        self.live_in = LiveClock(opts.rate)
        self.live_out = LiveClock(opts.rate)
        self.play_log = PlayLog()
        self.in_stamps: list[FrameStamp] = []
        self.out_stamps: list[FrameStamp] = []
        self.stats = LinkStats()
        self.lead_frames = round(opts.lead_ms * opts.rate / 1000)
        self.open_ns: int | None = None
        self.ready_ns: int | None = None
        self.lost: str | None = None
        self._blocks: AsyncIterator[Block] | None = None
        self._opened: dict[str, Any] | None = None
        #: sees every sample queued for the output, lead silence included, in queue order
        #: (the own-echo canceller's reference: rig.transports.deviceecho)
        self.on_queue: Callable[[Pcm16], None] | None = None

    async def open(self) -> None:
        """Start the streams and return once both directions flow steadily."""
        self.open_ns = self.clock.now_ns()
        await self.stream.open()
        self._blocks = self.stream.blocks().__aiter__()
        try:
            async with asyncio.timeout(self.opts.start_timeout_s):
                while not (self.live_in.steady() and self.live_out.steady()):
                    b = await self.next_block(watchdog=False)
                    if b is None:
                        raise DeviceError("the device stream closed while starting")
                    self.note(b)
        except TimeoutError:
            await self.stream.close()
            raise DeviceError(
                f"audio did not flow steadily within {self.opts.start_timeout_s:.0f} s "
                f"({self.stats.in_blocks} input, {self.stats.out_blocks} output blocks) on "
                f"{self.opts.input} -> {self.opts.output}"
            ) from None
        except BaseException:
            await self.stream.close()
            raise
        self.ready_ns = self.clock.now_ns()
        self._opened = self.stream.describe()  # reported latencies while the streams are open

    async def next_block(self, watchdog: bool = True) -> Block | None:
        """The next block, None once closed; DeviceError when the device is lost."""
        assert self._blocks is not None
        try:
            if not watchdog:
                return await anext(self._blocks)
            async with asyncio.timeout(self.opts.stall_timeout_s):
                return await anext(self._blocks)
        except StopAsyncIteration:
            return None
        except TimeoutError:
            self.lost = (
                f"no audio callbacks for {self.opts.stall_timeout_s:.1f} s from "
                f"{self.opts.input} -> {self.opts.output}: device lost?"
            )
        except DeviceError as exc:
            self.lost = str(exc)
        raise DeviceError(self.lost)

    def note(self, b: Block) -> list[str]:
        """Book-keep one block (stamps, play log); returns its xrun flag names."""
        stamp = FrameStamp(b.frame, b.n_frames, b.t_ns, b.pa_time_s, b.pa_current_s)
        if b.direction == "in":
            self.stats.in_blocks += 1
            self.in_stamps.append(stamp)
            self.live_in.add(b.frame, b.t_ns)
        else:
            self.stats.out_blocks += 1
            self.out_stamps.append(stamp)
            self.live_out.add(b.frame, b.t_ns)
            self.play_log.on_block(b.frame, b.n_frames, b.played_frames)
        flags = flag_names(b.status & ~StatusFlag.PRIMING_OUTPUT)
        for f in flags:
            self.stats.xruns[f] += 1
        return flags

    def play(self, pcm: Pcm16) -> int:
        """Queue mono PCM (lead silence first if the queue ran dry); its first queue index."""
        if self.lost is not None:
            raise DeviceError(self.lost)
        if self.play_log.empty:
            if self.play_log.pushed > 0:
                self.stats.playout_underruns += 1
            if self.lead_frames:
                lead = np.zeros(self.lead_frames, np.int16)
                self.play_log.push(self.lead_frames)
                self.stream.play(lead)
                if self.on_queue is not None:
                    self.on_queue(lead)
        start = self.play_log.push(len(pcm))
        self.stream.play(pcm)
        if self.on_queue is not None:
            self.on_queue(pcm)
        return start

    def live_out_ns(self, index: int) -> int:
        return self.live_out.time_ns(self.play_log.predict_frame(index))

    def exact_ns(self, direction: str, frame: float) -> int:
        """FrameClock placement (the calibration's convention) of a stream frame."""
        stamps = self.in_stamps if direction == "in" else self.out_stamps
        reach = RECENT_STAMPS_S * self.rate / 2  # well beyond FrameClock's +-0.25 s window
        lo = bisect.bisect_left(stamps, frame - reach, key=lambda s: s.frame)
        hi = bisect.bisect_right(stamps, frame + reach, key=lambda s: s.frame)
        near = stamps[lo:hi] or (stamps[-1:] if lo >= len(stamps) else stamps[lo : lo + 1])
        return round(FrameClock(near, self.rate).time_ns(frame))

    def covered(self, direction: str, frame: float) -> bool:
        """Stamps reach far enough past `frame` for its FrameClock window."""
        stamps = self.in_stamps if direction == "in" else self.out_stamps
        return bool(stamps) and stamps[-1].frame >= frame + self.rate // 4

    def describe(self) -> dict[str, Any]:
        d = self._opened or self.stream.describe()
        inp, out = self.stream.input, self.stream.output
        return {
            **d,
            "hostapi": out.hostapi if out else (inp.hostapi if inp else None),
            "input_name": inp.name if inp else None,
            "output_name": out.name if out else None,
            "lead_ms": self.opts.lead_ms,
            "settle_s": self.opts.settle_s,
            "stall_timeout_s": self.opts.stall_timeout_s,
            "start_ms": None
            if self.open_ns is None or self.ready_ns is None
            else round((self.ready_ns - self.open_ns) / 1e6, 3),
            "xruns": dict(self.stats.xruns),
            "xrun_total": sum(self.stats.xruns.values()),
            "playout_underruns": self.stats.playout_underruns,
            "blocks": {"in": self.stats.in_blocks, "out": self.stats.out_blocks},
            "lost": self.lost,
        }

    def pa_clock_checks(self) -> dict[str, Any]:
        return {
            "pa_clock_in": check_pa_clock(self.in_stamps).as_dict(),
            "pa_clock_out": check_pa_clock(self.out_stamps).as_dict(),
        }

    async def close(self) -> None:
        await self.stream.close()
