"""`--cancel-own-echo` on the sound-card transport: the capture the listener hears is cleaned of
the rig's own playback, the raw capture is kept, and the rollout says how well it worked.

How this works. `OwnEcho` sits between the device link and the transport's `receive()`:
  queue     every sample queued for the output (lead silence too) is mirrored in order
            (`DeviceLink.on_queue`); each output block takes its `played_frames` from the
            mirror and hands them, at their output frames, to the canceller as reference
  capture   each input block goes to the canceller (rig.echo.livecancel); what comes out,
            a frame at a time, becomes the `DownAudio` the listener gets (its `frame` and
            `t_ns` those of its first sample, exactly as without cancelling) and a
            `DownTrack("system_raw")` with the raw frame beside it
  align     once the streams are steady (`start`), the calibrated response's `t0_ms` (the
            direct path less the margin) becomes the frame offset between the input and
            the output stream on the shared clock; the canceller is seeded from the response
  account   per rollout, `metrics.json` `own_echo`: ERLE, residual and raw echo peaks, the
            canceller's cost per frame, the response used; a flagged rollout's reason goes
            to `transport_timing_reasons` (not timing_valid: rig.core.selfcheck); each
            response gets `latency_device_raw_ms`, the same latency read off the raw capture
            (its first raw onset after the user's end), to show what the echo would have done

The canceller runs on the event loop, in the receive path: measured (bench/own_echo_cancel.py,
2-core shared box, load 3.8 before / 3.3 after) 35 us median per 256-sample block with a 10 ms
filter, 60 us at 100 ms, 118 us at 300 ms (p99 70-179 us; 0.7-2.2 % of the 5.33 ms block), so
it stays there rather than in a thread (which would add a hand-off per block).
"""

from __future__ import annotations

import asyncio
import bisect
import collections
from typing import Any

import numpy as np

from rig.audio.pcm import Pcm16
from rig.core.events import DownTrack
from rig.core.onset import OnsetDetector
from rig.core.units import NS_PER_MS
from rig.device.calibration import EchoCalibration
from rig.device.link import DeviceLink
from rig.device.model import Block
from rig.device.timeinfo import cycle_skew_ns
from rig.echo.livecancel import CaptureCanceller

RAW_TRACK = "system_raw"


class _Mirror:
    """The output queue's samples in order, taken as output blocks play them."""

    def __init__(self) -> None:
        self._q: collections.deque[Pcm16] = collections.deque()
        self._head = 0  # samples of _q[0] already taken

    def push(self, pcm: Pcm16) -> None:
        if pcm.size:
            self._q.append(pcm.copy())

    def take(self, n: int) -> Pcm16:
        parts = []
        while n > 0 and self._q:
            head = self._q[0]
            k = min(n, head.size - self._head)
            parts.append(head[self._head : self._head + k])
            self._head += k
            n -= k
            if self._head >= head.size:
                self._q.popleft()
                self._head = 0
        if n > 0:
            parts.append(np.zeros(n, np.int16))
        return np.concatenate(parts) if parts else np.zeros(0, np.int16)


class OwnEcho:
    """The canceller between one device link's output and its input (module docstring)."""

    def __init__(
        self,
        link: DeviceLink,
        cal: EchoCalibration,
        *,
        onset_threshold_dbfs: float = -40.0,
        onset_gap_ms: float = 300.0,
    ) -> None:
        self.link = link
        self.cal = cal
        self.rate = link.rate
        ir = cal.response
        self.taps = ir.array
        # the filter covers the room's ring from tap 0 (99.9 % of its energy, margin before
        # the direct path included) with room to spare, not the whole measured window: a
        # short filter converges faster and deeper
        tail = round((ir.length_ms() * 1.5 + 10.0) * self.rate / 1000)
        tail = min(tail, self.taps.size)
        self.canceller = CaptureCanceller(self.rate, tail, float(self.taps @ self.taps))
        self.threshold_dbfs = onset_threshold_dbfs
        self._mirror = _Mirror()
        link.on_queue = self._mirror.push
        self._raw_onsets = OnsetDetector(self.rate, onset_threshold_dbfs, onset_gap_ms)
        self.raw_onset_frames: list[int] = []
        self._first_in: int | None = None

    async def start(self) -> None:
        """Seed the filter (CPU: off the loop) and align the streams; the link is open."""
        await asyncio.to_thread(self.canceller.pretrain, self.taps[: self.canceller.tail])
        link = self.link
        # the calibration's convention (FrameClock: median over the stamps around a frame),
        # so the response's t0 lands on the sample it was measured at
        j = link.in_stamps[-1].frame if link.in_stamps else 0
        k = link.out_stamps[-1].frame if link.out_stamps else 0
        t_echo = link.exact_ns("in", j) - round(self.cal.response.t0_ms * NS_PER_MS)
        lead = t_echo - link.exact_ns("out", k) - self._skew_change_ns()
        out_frame = k + round(lead * self.rate / 1e9)
        self.canceller.align(j - out_frame)

    def _skew_change_ns(self) -> float:
        """How much more this run's input stamps lead its output stamps of the same cycle
        than the calibration's did (JACK; 0 where unknown). Both stamps of a cycle hold the
        same instant, but each is taken as its own callback starts: the calibration's skew
        is in its `t0_ms`, this run's in its stamps. Their difference (-0.9 to +1.7 samples
        on the JACK room) moved the alignment off the sample the filter was seeded for:
        ERLE 60 dB on the sample, 46 one off; two off left the residual echo's p95 at -35.5
        dBFS, above the -40 dBFS onset threshold, and the rollout was flagged."""
        link, cal_skew = self.link, self.cal.in_out_skew_ns
        if cal_skew is None or not link.stream.on_jack():
            return 0.0
        recent = self.rate // 2  # the stamps around j and k (FrameClock's window and more)
        ins = [s for s in link.in_stamps if s.frame >= link.in_stamps[-1].frame - recent]
        outs = [s for s in link.out_stamps if s.frame >= link.out_stamps[-1].frame - recent]
        skew = cycle_skew_ns(ins, outs, self.rate)
        return 0.0 if skew is None else skew - cal_skew

    def on_out(self, b: Block) -> None:
        taken = self._mirror.take(b.played_frames)
        pcm = np.zeros(b.n_frames, np.int16)
        pcm[: taken.size] = taken
        self.canceller.played(b.frame, pcm)

    def on_in(self, b: Block) -> list[tuple[int, Pcm16, DownTrack]]:
        """(first input frame, cleaned pcm, the raw track piece) for what can be done now."""
        assert b.pcm is not None
        out = []
        for frame, clean, raw in self.canceller.captured(
            b.frame, np.ascontiguousarray(b.pcm[:, 0])
        ):
            if self._first_in is None:
                self._first_in = frame
            off = self._raw_onsets.feed(raw, frame - self._first_in)
            if off is not None:
                self.raw_onset_frames.append(frame + off)
            out.append((frame, clean, DownTrack(RAW_TRACK, self.rate, raw)))
        return out

    def finish_metrics(self, metrics: dict[str, Any], round_trip_ms: float | None) -> None:
        verdict = self.canceller.verdict(self.threshold_dbfs)
        metrics["own_echo"] = {
            **self.canceller.describe(),
            **verdict.as_dict(),
            "onset_threshold_dbfs": self.threshold_dbfs,
            "response": self.cal.as_dict(),
            "raw_track": f"{RAW_TRACK}.wav",
        }
        if verdict.reason is not None:
            metrics.setdefault("transport_timing_reasons", []).append(verdict.reason)
        link = self.link
        for r in metrics.get("responses", []):
            up = r.get("device_user_end_ns")
            if up is None:
                continue
            times = [link.exact_ns("in", f) for f in self.raw_onset_frames]
            i = bisect.bisect_left(times, int(up))
            raw_ms = None if i >= len(times) else round((times[i] - int(up)) / 1e6, 3)
            r["latency_device_raw_ms"] = raw_ms
            r["latency_device_raw_corrected_ms"] = (
                None
                if raw_ms is None or round_trip_ms is None
                else round(raw_ms - round_trip_ms, 3)
            )
