"""The sound-card transport: the user track goes out of an output device, the system is heard
on an input device, every sample placed on the shared clock.

How this works
--------------
`DeviceLink` is the asyncio shell over one `DeviceStream` (rig.device.backend); both the
rig's `DeviceTransport` and the reference system's device mode (rig.sim.device_server) use it.

Opening waits until both directions deliver audio steadily (the ALSA "pulse" plugin pre-fills
and then pauses for up to ~1.5 s): a direction is steady once the last `settle_s` of its
callbacks all place their frames within `MAX_SETTLE_SPREAD_NS` of each other.

Times. Each callback is stamped on the shared clock at entry. Two placements of a stream
frame are used, both on the "callback convention" of rig.device.timeinfo (a block's first
sample at its callback stamp, the next ones at the nominal rate), which is the convention
`rig calibrate` measures the round trip on:

- live (causal, for the session): `frame/rate + min over the last LIVE_WINDOW_S of
  (stamp - frame/rate)`. Callbacks run late, never early, so the lower envelope is the
  placement least disturbed by scheduling jitter.
- exact (after the fact, for the corrected latency and the truth log): `FrameClock`, the
  median over +-0.25 s of blocks, exactly what the calibration used.

Downlink `DownAudio.t_ns` is the live placement of the block's first sample. It is *later*
than the ADC time of that sample by the input latency (buffering in the driver/server),
which is part of the calibrated round trip; `extra` carries `frame` (input stream frame),
`t_cb_ns` (raw callback stamp) and `t_adc_est_ns` (t_ns minus PortAudio's reported input
latency: an estimate that is wrong on some paths, e.g. 35 ms vs a 69.5 ms report on Pulse).

Uplink. `send_audio` queues the frame behind what is already queued and returns the
shared-clock time of that hand-off. When the queue is empty (the first frame, or after an
underrun) `lead_ms` of silence goes in first, so paced frames never find the queue dry. The
output callbacks report how many queued frames each block took, so every queued sample maps
to an output stream frame exactly; `sent_extra(seq)` predicts it at send time
(`t_out_est_ns`, callback convention; `t_dac_est_ns` adds PortAudio's reported output
latency) and `finish_metrics` uses the exact mapping.

Correction. With the user's speech end handed to PortAudio at `T_out` and the system's
onset delivered at `T_in` (both exact placements), `latency_device_ms = T_in - T_out`
includes the output and input latency of the device path; the calibrated round trip of the
path (`device_round_trip_ms`, same convention) is both of them, so
`latency_device_corrected_ms = latency_device_ms - device_round_trip_ms` is the latency at
the system under test. Its `latency_ms` (send stamp to onset) additionally holds the queue
wait `device_uplink_queue_ms = T_out - user_end_ns`.

Errors: bad devices/formats raise DeviceError at construction; a stream that PortAudio stops,
or that delivers nothing for `stall_timeout_s`, raises DeviceError out of `receive()` after
a `device.lost` event. xruns become `device.xrun` events and are counted.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import json
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rig.audio.pcm import Pcm16
from rig.clock.base import Clock
from rig.core.events import DownAudio, DownEvent, Incoming
from rig.core.units import NS_PER_S
from rig.device.backend import (
    Backend,
    Block,
    DeviceStream,
    StatusFlag,
    StreamSettings,
    flag_names,
    get_backend,
)
from rig.device.calibration_store import CalibrationStore, PathKey
from rig.device.timeinfo import FrameClock, FrameStamp, check_pa_clock
from rig.errors import ConfigError, DeviceError
from rig.transports.base import Transport

LIVE_WINDOW_S = 0.5
MAX_SETTLE_SPREAD_NS = 20_000_000
#: stamps kept for exact placement while running (the FrameClock window is +-0.25 s)
RECENT_STAMPS_S = 2.0


# ---------------------------------------------------------------------------- options


@dataclass(frozen=True, slots=True)
class DeviceOptions:
    """What to open and how; every field goes to the manifest."""

    output: str
    input: str
    rate: int = 48_000
    channels: int = 1
    blocksize: int = 0
    latency: str | float = "high"
    duplex: bool = False
    backend: str = "sounddevice"
    lead_ms: float = 40.0
    settle_s: float = 0.3
    start_timeout_s: float = 10.0
    stall_timeout_s: float = 2.0

    def settings(self) -> StreamSettings:
        return StreamSettings(
            rate=self.rate,
            input=self.input,
            output=self.output,
            in_channels=self.channels,
            out_channels=self.channels,
            blocksize=self.blocksize,
            latency=self.latency,
            duplex=self.duplex,
        )

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def parse_latency(text: str) -> str | float:
    if text in ("low", "high"):
        return text
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"--latency must be low, high or seconds, got {text!r}") from None


def open_checked(opts: DeviceOptions, backend: Backend | None = None) -> DeviceStream:
    """Resolve both devices and check the format (no stream is started): DeviceError if bad."""
    return DeviceStream(backend or get_backend(opts.backend), opts.settings())


def path_key(stream: DeviceStream, opts: DeviceOptions) -> PathKey:
    assert stream.input is not None and stream.output is not None
    return PathKey(
        backend=stream.backend.name,
        hostapi=stream.output.hostapi,
        input=stream.input.name,
        output=stream.output.name,
        rate=opts.rate,
        blocksize=opts.blocksize,
        latency=str(opts.latency),
        duplex=opts.duplex,
    )


# ---------------------------------------------------------------------------- calibration


@dataclass(frozen=True, slots=True)
class Calibration:
    """The round trip subtracted from the device path, and where it came from."""

    round_trip_ms: float
    source: str
    key: dict[str, Any]
    spread_ms: float | None = None
    measured_at: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "round_trip_ms": self.round_trip_ms,
            "source": self.source,
            "key": self.key,
            "spread_ms": self.spread_ms,
            "measured_at": self.measured_at,
        }


def load_calibration(
    spec: str, key: PathKey, store_root: str | Path | None = None
) -> Calibration | None:
    """`none`: no correction. `auto`: the stored calibration for exactly this path, if any.
    FILE: a stored calibration or `rig calibrate --json` output; it must match the path."""
    if spec == "none":
        return None
    if spec == "auto":
        store = CalibrationStore(store_root)
        doc = store.load(key)
        if doc is None:
            return None
        return _from_doc(doc["calibration"], str(store.path_for(key)), doc.get("measured_at"))
    path = Path(spec)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read calibration {spec}: {exc}") from exc
    result = doc.get("calibration", doc) if isinstance(doc, dict) else None
    if not isinstance(result, dict) or "round_trip_ms" not in result:
        raise ConfigError(f"{spec}: not a calibration (no round_trip_ms)")
    try:
        got = PathKey.from_result(result)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{spec}: calibration without its device path ({exc})") from exc
    diffs = [
        f"{name} {getattr(got, name)!r} != {getattr(key, name)!r}"
        for name in key.__dataclass_fields__
        if name != "hostapi" and getattr(got, name) != getattr(key, name)
    ]
    if diffs:
        raise ConfigError(
            f"{spec} was measured on another path ({'; '.join(diffs)}): calibrate with the "
            "devices and --rate/--blocksize/--latency/--duplex/--backend you run with"
        )
    return _from_doc(result, str(path), doc.get("measured_at"))


def _from_doc(result: dict[str, Any], source: str, measured_at: str | None) -> Calibration:
    rt = float(result["round_trip_ms"])
    if not math.isfinite(rt):
        raise ConfigError(f"{source}: round_trip_ms is not a number")
    spread = result.get("spread_ms")
    return Calibration(
        round_trip_ms=rt,
        source=source,
        key=PathKey.from_result(result).as_dict(),
        spread_ms=None if spread is None else float(spread),
        measured_at=measured_at,
    )


def compose_calibration(
    out_cable: dict[str, Any], in_cable: dict[str, Any], *, name: str = "composed"
) -> dict[str, Any]:
    """A path calibration for output = `out_cable`'s output, input = `in_cable`'s input.

    With two cables (rig -> system on one, system -> rig on the other) the device path's
    round trip is the sum of both cables' loopback round trips: each holds one rig half and
    one system half, and the system's halves are taken out with them. Both results
    (`LoopbackResult.as_dict()`) must share rate, blocksize, latency, duplex and backend.
    """
    for k in ("backend", "rate", "blocksize", "latency", "duplex"):
        if out_cable[k] != in_cable[k]:
            raise ConfigError(f"cannot compose calibrations that differ in {k}")
    spreads = [c.get("spread_ms") for c in (out_cable, in_cable)]
    return {
        **{k: out_cable[k] for k in ("backend", "hostapi", "rate", "blocksize", "latency")},
        "duplex": out_cable["duplex"],
        "input": in_cable["input"],
        "output": out_cable["output"],
        "round_trip_ms": float(out_cable["round_trip_ms"]) + float(in_cable["round_trip_ms"]),
        "spread_ms": None if None in spreads else float(sum(s for s in spreads if s)),
        "repeats": min(int(out_cable["repeats"]), int(in_cable["repeats"])),
        "reported_latency_ms": None,
        "composed_from": [out_cable, in_cable],
        "probe": name,
    }


# ---------------------------------------------------------------------------- pure trackers


class LiveClock:
    """Causal placement of one direction's frames: lower envelope of recent stamp offsets."""

    def __init__(self, rate: int, window_s: float = LIVE_WINDOW_S) -> None:
        self.rate = rate
        self.window_frames = round(window_s * rate)
        self._recent: collections.deque[tuple[int, float]] = collections.deque()

    def add(self, frame: int, t_ns: int) -> None:
        self._recent.append((frame, t_ns - frame * NS_PER_S / self.rate))
        while self._recent and self._recent[0][0] < frame - self.window_frames:
            self._recent.popleft()

    def time_ns(self, frame: float) -> int:
        if not self._recent:
            raise ValueError("no stamps yet")
        return round(min(o for _, o in self._recent) + frame * NS_PER_S / self.rate)

    def steady(self) -> bool:
        """The window is full of blocks that agree: the stream runs at its rate, no stall."""
        if len(self._recent) < 3:
            return False
        span = self._recent[-1][0] - self._recent[0][0]
        offsets = [o for _, o in self._recent]
        return span >= self.window_frames * 0.9 and max(offsets) - min(offsets) < (
            MAX_SETTLE_SPREAD_NS
        )


class PlayLog:
    """Which output stream frame each queued sample played at (fed from output blocks)."""

    def __init__(self) -> None:
        self.pushed = 0  # samples queued so far (lead silence included)
        self.played = 0  # samples the output blocks seen so far took from the queue
        self.next_out_frame = 0  # stream frame after the last output block seen
        self._starts: list[int] = []  # cumulative queue index of each block's first taken sample
        self._frames: list[int] = []  # that sample's output stream frame

    @property
    def empty(self) -> bool:
        return self.played >= self.pushed

    def push(self, n: int) -> int:
        start = self.pushed
        self.pushed += n
        return start

    def on_block(self, frame: int, n_frames: int, taken: int) -> None:
        if taken > 0:
            self._starts.append(self.played)
            self._frames.append(frame)
            self.played += taken
        self.next_out_frame = frame + n_frames

    def frame_of(self, index: int) -> int | None:
        """Output stream frame of queued sample `index`, once an output block took it."""
        if index >= self.played or not self._starts:
            return None
        i = bisect.bisect_right(self._starts, index) - 1
        return self._frames[i] + index - self._starts[i]

    def predict_frame(self, index: int) -> int:
        """Where `index` will play if the queue drains without a gap from now on."""
        return self.next_out_frame + max(0, index - self.played)


# ---------------------------------------------------------------------------- the link


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
                self.play_log.push(self.lead_frames)
                self.stream.play(np.zeros(self.lead_frames, np.int16))
        start = self.play_log.push(len(pcm))
        self.stream.play(pcm)
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


# ---------------------------------------------------------------------------- transport


class DeviceTransport(Transport):
    """The Transport protocol over a sound card (see the module docstring)."""

    def __init__(
        self,
        opts: DeviceOptions,
        clock: Clock,
        *,
        calibration: str = "auto",
        calibration_store: str | Path | None = None,
        backend: Backend | None = None,
    ) -> None:
        self.opts = opts
        self.clock = clock
        self.uplink_rate = opts.rate
        self.calibration_spec = calibration
        self.calibration_store = calibration_store
        self.calibration: Calibration | None = None
        self.calibration_note: str | None = None
        self.link = DeviceLink(opts, clock, backend)  # DeviceError for bad devices/formats
        self._sent_t: list[int] = []
        self._sent_seq: list[int] = []
        self._sent_index: list[int] = []
        self._extra: dict[int, dict[str, Any]] = {}
        self._down_frames: list[int] = []
        self._down_t: list[int] = []
        self._closed = False
        self._resolve_calibration()

    def _resolve_calibration(self) -> None:
        key = path_key(self.link.stream, self.opts)
        self.calibration = load_calibration(self.calibration_spec, key, self.calibration_store)
        if self.calibration is None:
            self.calibration_note = (
                "--calibration none"
                if self.calibration_spec == "none"
                else f"no stored calibration for {key.slug()} (run `rig calibrate` on this path)"
            )

    async def open(self) -> None:
        await self.link.open()

    async def send_audio(self, pcm: Pcm16, seq: int, t_sched_ns: int) -> int:
        t = self.clock.now_ns()
        index = self.link.play(pcm)
        frame = self.link.play_log.predict_frame(index)
        t_out = self.link.live_out.time_ns(frame)
        lat = self.link.stream.latency().output_s
        self._sent_t.append(t)
        self._sent_seq.append(seq)
        self._sent_index.append(index)
        self._extra[seq] = {
            "device_frame_est": frame,
            "t_out_est_ns": t_out,
            "t_dac_est_ns": None if lat is None else t_out + round(lat * NS_PER_S),
        }
        return t

    def sent_extra(self, seq: int) -> dict[str, Any] | None:
        """Extra chunks.jsonl fields for uplink frame `seq` (predicted device times)."""
        return self._extra.pop(seq, None)

    async def send_event(self, kind: str, data: dict[str, Any]) -> None:
        """A sound card carries audio only: control messages have nowhere to go."""

    async def receive(self) -> AsyncIterator[Incoming]:
        link = self.link
        in_lat = link.stream.latency().input_s
        while True:
            try:
                b = await link.next_block()
            except DeviceError as exc:
                if self._closed:
                    return
                yield DownEvent("device.lost", self.clock.now_ns(), {"reason": str(exc)})
                raise
            if b is None:
                return
            flags = link.note(b)
            if flags:
                yield DownEvent(
                    "device.xrun",
                    b.t_ns,
                    {
                        "direction": b.direction,
                        "flags": flags,
                        "frame": b.frame,
                        "count": sum(link.stats.xruns.values()),
                    },
                )
            if b.direction != "in" or b.pcm is None:
                continue
            t = link.live_in.time_ns(b.frame)
            self._down_frames.append(b.frame)
            self._down_t.append(t)
            yield DownAudio(
                np.ascontiguousarray(b.pcm[:, 0]),
                self.opts.rate,
                t,
                None,
                {
                    "frame": b.frame,
                    "t_cb_ns": b.t_ns,
                    "t_adc_est_ns": None if in_lat is None else t - round(in_lat * NS_PER_S),
                    "pa_adc_s": b.pa_time_s,
                    **({"status": flag_names(b.status)} if b.status else {}),
                },
            )

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.link.close()

    def describe(self) -> dict[str, Any]:
        return {
            "transport": "device",
            "options": self.opts.as_dict(),
            **self.link.describe(),
            "calibration": None if self.calibration is None else self.calibration.as_dict(),
            "calibration_note": self.calibration_note,
            "device_round_trip_ms": None
            if self.calibration is None
            else self.calibration.round_trip_ms,
        }

    # --- metrics ----------------------------------------------------------------------------

    def out_time_of_sent(self, t_ns: int) -> tuple[int, int] | None:
        """(output frame, exact time) of the uplink sample the session stamped at `t_ns`."""
        k = bisect.bisect_right(self._sent_t, t_ns) - 1
        if k < 0:
            return None
        index = self._sent_index[k] + round((t_ns - self._sent_t[k]) * self.opts.rate / NS_PER_S)
        frame = self.link.play_log.frame_of(index)
        if frame is None or not self.link.out_stamps:
            return None
        return frame, self.link.exact_ns("out", frame)

    def in_time_of_chunk(self, chunk_seq: int, t_ns: int) -> tuple[int, int] | None:
        """(input frame, exact time) of the sample in downlink chunk `chunk_seq` at `t_ns`."""
        if not 0 <= chunk_seq < len(self._down_frames):
            return None
        off = round((t_ns - self._down_t[chunk_seq]) * self.opts.rate / NS_PER_S)
        frame = self._down_frames[chunk_seq] + off
        return frame, self.link.exact_ns("in", frame)

    def finish_metrics(self, metrics: dict[str, Any]) -> None:
        """Add the device section, the round trip and each response's corrected latency."""
        rt = None if self.calibration is None else self.calibration.round_trip_ms
        metrics["device"] = {**self.describe(), **self.link.pa_clock_checks()}
        metrics["device_round_trip_ms"] = rt
        metrics["device_xruns"] = sum(self.link.stats.xruns.values())
        for r in metrics.get("responses", []):
            r["latency_device_corrected_ms"] = None
            if r.get("onset_arrival_ns") is None or r.get("onset_chunk_seq") is None:
                continue
            up = self.out_time_of_sent(int(r["user_end_ns"]))
            down = self.in_time_of_chunk(int(r["onset_chunk_seq"]), int(r["onset_arrival_ns"]))
            if up is None or down is None:
                r["device_reason"] = "the user end or the onset was not seen on the device"
                continue
            dev_ms = (down[1] - up[1]) / 1e6
            r["device_user_end_frame"], r["device_user_end_ns"] = up
            r["device_onset_frame"], r["device_onset_ns"] = down
            r["device_uplink_queue_ms"] = round((up[1] - int(r["user_end_ns"])) / 1e6, 3)
            r["latency_device_ms"] = round(dev_ms, 3)
            if rt is not None:
                r["latency_device_corrected_ms"] = round(dev_ms - rt, 3)
            else:
                r["device_reason"] = self.calibration_note


def device_factory(
    opts: DeviceOptions, calibration: str = "auto", store: str | Path | None = None
) -> Any:
    """A `RolloutSpec.make_transport` for the device transport."""

    def make(clock: Clock, gate: asyncio.Semaphore) -> DeviceTransport:
        return DeviceTransport(opts, clock, calibration=calibration, calibration_store=store)

    return make
