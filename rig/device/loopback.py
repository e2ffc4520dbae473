"""Time a loopback: play a probe train out, record it back, measure each repeat's round trip.

How this works. The device stream opens and runs until both directions have delivered
blocks steadily for `settle_s` (the ALSA "pulse" plugin pauses ~1.5 s after start; a probe
played into that pause would be timed against a stall). Then the whole probe train is
queued at once; the output callback plays it from the start of its next block, so the
first block with `played_frames > 0` gives the train's first output frame. Recording
continues until `max_latency_s` past the train's end.

Round trip of one repeat = shared-clock time of the probe's first frame in the input
minus that of its first frame in the output, each frame placed by its stream's
`FrameClock` (block stamp + offset within the block). This is the same convention the
device transport stamps chunks with, so the number is what a session must subtract; it
includes the callback block on both sides, so calibrate with the blocksize and latency
setting you run with. A full-duplex stream shares every stamp between directions, so
there the round trip is exactly the sample lag.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from rig.clock.base import Clock, MonotonicClock
from rig.core.units import NS_PER_S
from rig.device.binding import Backend
from rig.device.calibrate import (
    CalibrationRefused,
    CalibrationStats,
    Detection,
    find_probe,
    log_chirp,
    mls,
    probe_train,
    summarize,
)
from rig.device.model import Block, StatusFlag, StreamSettings, flag_names
from rig.device.response import LENGTH_MS, ImpulseResponse, measure_response
from rig.device.stream import DeviceStream
from rig.device.timeinfo import (
    FrameClock,
    FrameStamp,
    PaClockCheck,
    check_pa_clock,
    cycle_skew_ns,
)
from rig.errors import DeviceError

PROBES = ("chirp", "mls")


@dataclass(frozen=True, slots=True)
class LoopbackResult:
    """One calibration: the statistics plus everything needed to judge them."""

    stats: CalibrationStats
    settings: StreamSettings
    backend: str
    input_name: str
    output_name: str
    hostapi: str
    probe: str
    detections: tuple[Detection, ...]
    reported_input_latency_ms: float | None
    reported_output_latency_ms: float | None
    pa_clock_in: PaClockCheck
    pa_clock_out: PaClockCheck
    xruns: dict[str, int] = field(default_factory=dict)
    #: the path's impulse response (the rig's own echo, for --cancel-own-echo)
    response: ImpulseResponse | None = None
    #: earlier attempts refused (repeats that disagreed), why: kept, never hidden
    refused: tuple[str, ...] = ()
    #: input minus output stamp of one cycle (JACK: rig.device.timeinfo.cycle_skew_ns), ns;
    #: in `round_trip_ms` and the response's `t0_ms`, and taken out again where a run sets
    #: its own streams against them (--cancel-own-echo's alignment). None: not one cycle
    in_out_skew_ns: float | None = None

    @property
    def reported_latency_ms(self) -> float | None:
        parts = [self.reported_input_latency_ms, self.reported_output_latency_ms]
        return None if any(p is None for p in parts) else float(sum(p for p in parts if p))

    def as_dict(self) -> dict[str, Any]:
        s = self.stats
        return {
            "round_trip_ms": s.mean_ms,
            "median_ms": s.median_ms,
            "spread_ms": s.spread_ms,
            "std_ms": s.std_ms,
            "repeats": s.repeats,
            "round_trips_ms": list(s.round_trips_ms),
            "reported_latency_ms": self.reported_latency_ms,
            "reported_input_latency_ms": self.reported_input_latency_ms,
            "reported_output_latency_ms": self.reported_output_latency_ms,
            "backend": self.backend,
            "input": self.input_name,
            "output": self.output_name,
            "hostapi": self.hostapi,
            "rate": self.settings.rate,
            "blocksize": self.settings.blocksize,
            "latency": self.settings.latency,
            "duplex": self.settings.duplex,
            "probe": self.probe,
            "peak_ratios": [d.peak_ratio for d in self.detections],
            "pa_clock_in": self.pa_clock_in.as_dict(),
            "pa_clock_out": self.pa_clock_out.as_dict(),
            "xruns": dict(self.xruns),
            "attempts": len(self.refused) + 1,
            "refused_attempts": list(self.refused),
            "impulse_response": None if self.response is None else self.response.as_dict(),
            "in_out_skew_us": None
            if self.in_out_skew_ns is None
            else round(self.in_out_skew_ns / 1e3, 3),
        }


def make_probe(kind: str, rate: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    if kind == "chirp":
        return log_chirp(rate, duration_s=0.25)
    if kind == "mls":
        order = max(8, min(18, int(math.log2(rate * 0.25))))
        return mls(order)
    raise DeviceError(f"unknown probe {kind!r}; choose from {', '.join(PROBES)}")


async def measure_round_trip(
    backend: Backend,
    settings: StreamSettings,
    *,
    repeats: int = 5,
    probe: str = "chirp",
    max_latency_s: float = 0.5,
    settle_s: float = 0.5,
    max_spread_ms: float = 1.0,
    timeout_s: float = 30.0,
    clock: Clock | None = None,
    response_ms: float = LENGTH_MS,
    attempts: int = 1,
) -> LoopbackResult:
    """Play `repeats` probes through the loopback and return the checked round trip.

    A measurement whose repeats disagree (or were not all found) is made again on a fresh
    stream, up to `attempts` in all: a path's latency can move for a moment (an xrun, a
    paused VM, a sound server adapting its buffer), and one disturbed measurement should
    not fail a calibration a second one would pass. The refused attempts' reasons are kept
    in the result (`refused`). Raises DeviceError for devices/formats that do not work or
    audio that never flows, and CalibrationRefused (a DeviceError) when every attempt was
    refused.
    """
    if attempts < 1:
        raise DeviceError("attempts must be at least 1")
    refused: list[str] = []
    while True:
        try:
            result = await _measure_once(
                backend,
                settings,
                repeats=repeats,
                probe=probe,
                max_latency_s=max_latency_s,
                settle_s=settle_s,
                max_spread_ms=max_spread_ms,
                timeout_s=timeout_s,
                clock=clock,
                response_ms=response_ms,
            )
        except CalibrationRefused as exc:
            refused.append(exc.reason)
            if len(refused) >= attempts:
                if attempts == 1:
                    raise
                raise CalibrationRefused(
                    f"all {attempts} attempts refused: " + "; ".join(refused),
                    exc.round_trips_ms,
                ) from None
            continue
        return replace(result, refused=tuple(refused))


async def _measure_once(
    backend: Backend,
    settings: StreamSettings,
    *,
    repeats: int,
    probe: str,
    max_latency_s: float,
    settle_s: float,
    max_spread_ms: float,
    timeout_s: float,
    clock: Clock | None,
    response_ms: float,
) -> LoopbackResult:
    """One measurement on one stream (measure_round_trip)."""
    if repeats < 1:
        raise DeviceError("repeats must be at least 1")
    clock = clock or MonotonicClock()
    rate = settings.rate
    signal = make_probe(probe, rate)
    gap_frames = int((max_latency_s + 0.05) * rate)
    train, starts = probe_train(signal, repeats, gap_frames)
    train_pcm = np.round(train * 32767).astype(np.int16)

    in_stamps: list[FrameStamp] = []
    out_stamps: list[FrameStamp] = []
    captured: list[np.ndarray[Any, np.dtype[np.int16]]] = []
    xruns: Counter[str] = Counter()

    stream = DeviceStream(backend, settings, clock=clock)
    assert stream.input is not None and stream.output is not None
    async with stream:
        reported = stream.latency()
        try:
            async with asyncio.timeout(timeout_s):
                out_start = await _run(
                    stream,
                    train_pcm,
                    rate,
                    settle_s,
                    max_latency_s,
                    in_stamps,
                    out_stamps,
                    captured,
                    xruns,
                )
        except TimeoutError:
            raise DeviceError(
                f"loopback did not finish in {timeout_s:.0f} s "
                f"({len(in_stamps)} input and {len(out_stamps)} output blocks arrived): "
                "is audio flowing on these devices?"
            ) from None

    rx = np.concatenate([c[:, 0] for c in captured]).astype(np.float64) / 32768.0
    in_clock = FrameClock(in_stamps, rate)
    out_clock = FrameClock(out_stamps, rate)
    skew_ns = cycle_skew_ns(in_stamps, out_stamps, rate) if stream.on_jack() else None
    round_trips_ms: list[float] = []
    detections: list[Detection] = []
    for s in starts:
        k = out_start + s
        t_out = out_clock.time_ns(k)
        j0 = in_clock.frame_at(t_out)
        lo = int(j0 - 0.02 * rate)
        hi = int(j0 + (max_latency_s + 0.02) * rate) + len(signal)
        det = find_probe(signal, rx, lo, hi)
        if det is None:
            continue
        detections.append(det)
        t_in = in_clock.time_ns(det.position_frames)
        round_trips_ms.append((t_in - t_out) / 1e6)
    try:
        stats = summarize(
            round_trips_ms,
            max_spread_ms=max_spread_ms,
            min_repeats=min(3, repeats),
            expected_repeats=repeats,
        )
    except CalibrationRefused as exc:
        if not xruns:
            raise
        seen = ", ".join(f"{n} {name}" for name, n in sorted(xruns.items()))
        raise CalibrationRefused(
            f"{exc.reason}; the device reported {seen} meanwhile (its latency can move at one)",
            exc.round_trips_ms,
        ) from None
    # the response must end inside the silent gap after each probe
    room_ms = gap_frames * 1000.0 / rate - stats.median_ms - 5.0
    response = measure_response(
        signal,
        rx,
        [d.position_frames for d in detections],
        rate,
        stats.median_ms,
        length_ms=max(1.0, min(response_ms, room_ms)),
    )
    return LoopbackResult(
        stats=stats,
        settings=settings,
        backend=backend.name,
        input_name=stream.input.name,
        output_name=stream.output.name,
        hostapi=stream.output.hostapi,
        probe=probe,
        detections=tuple(detections),
        reported_input_latency_ms=None if reported.input_s is None else reported.input_s * 1e3,
        reported_output_latency_ms=None if reported.output_s is None else reported.output_s * 1e3,
        pa_clock_in=check_pa_clock(in_stamps),
        pa_clock_out=check_pa_clock(out_stamps),
        xruns=dict(xruns),
        response=response,
        in_out_skew_ns=skew_ns,
    )


async def _run(
    stream: DeviceStream,
    train: np.ndarray[Any, np.dtype[np.int16]],
    rate: int,
    settle_s: float,
    max_latency_s: float,
    in_stamps: list[FrameStamp],
    out_stamps: list[FrameStamp],
    captured: list[np.ndarray[Any, Any]],
    xruns: Counter[str],
) -> int:
    """Collect blocks; queue the train once settled; return the train's first output frame."""
    settle_ns = int(settle_s * NS_PER_S)
    first_in_ns: int | None = None
    first_out_ns: int | None = None
    queued = False
    out_start: int | None = None
    train_end_ns: int | None = None
    async for b in stream.blocks():
        _record(b, in_stamps, out_stamps, captured, xruns)
        if b.direction == "in":
            first_in_ns = b.t_ns if first_in_ns is None else first_in_ns
        else:
            first_out_ns = b.t_ns if first_out_ns is None else first_out_ns
        if not queued:
            if first_in_ns is None or first_out_ns is None:
                continue
            if b.t_ns - max(first_in_ns, first_out_ns) >= settle_ns:
                stream.play(train)
                queued = True
            continue
        if b.direction == "out" and out_start is None and b.played_frames > 0:
            out_start = b.frame
        if (
            b.direction == "out"
            and out_start is not None
            and train_end_ns is None
            and b.frame + b.n_frames >= out_start + len(train)
        ):
            train_end_ns = b.t_ns + (out_start + len(train) - b.frame) * NS_PER_S // rate
        if (
            train_end_ns is not None
            and b.direction == "in"
            and b.t_ns >= train_end_ns + int(max_latency_s * NS_PER_S) + settle_ns // 5
        ):
            assert out_start is not None
            return out_start
    raise DeviceError("the device stream ended during calibration")


def _record(
    b: Block,
    in_stamps: list[FrameStamp],
    out_stamps: list[FrameStamp],
    captured: list[np.ndarray[Any, Any]],
    xruns: Counter[str],
) -> None:
    stamp = FrameStamp(b.frame, b.n_frames, b.t_ns, b.pa_time_s, b.pa_current_s)
    if b.direction == "in":
        in_stamps.append(stamp)
        assert b.pcm is not None
        captured.append(b.pcm)
    else:
        out_stamps.append(stamp)
    status = b.status & ~StatusFlag.PRIMING_OUTPUT
    for name in flag_names(status):
        xruns[name] += 1
