"""The sound-card transport: the user track goes out of an output device, the system is heard
on an input device, every sample placed on the shared clock (through rig.device.link).

Downlink `DownAudio.t_ns` is the live placement of the block's first sample. It is *later*
than the ADC time of that sample by the input latency (buffering in the driver/server),
which is part of the calibrated round trip; `extra` carries `frame` (input stream frame),
`t_cb_ns` (raw callback stamp) and `t_adc_est_ns` (t_ns minus PortAudio's reported input
latency: an estimate that is wrong on some paths, e.g. 35 ms vs a 69.5 ms report on Pulse).

Uplink. `send_audio` queues the frame behind what is already queued and returns the
shared-clock time of that hand-off. The output callbacks report how many queued frames each
block took, so every queued sample maps to an output stream frame exactly; `sent_extra(seq)`
predicts it at send time (`t_out_est_ns`, callback convention; `t_dac_est_ns` adds
PortAudio's reported output latency) and `finish_metrics` uses the exact mapping.

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
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np

from rig.audio.pcm import Pcm16
from rig.clock.base import Clock
from rig.core.events import DownAudio, DownEvent, Received
from rig.core.units import NS_PER_S
from rig.device.binding import Backend
from rig.device.calibration import Calibration, load_calibration, load_echo_response
from rig.device.link import DeviceLink
from rig.device.model import flag_names
from rig.device.noise import NoiseOptions, NoisePlayer
from rig.device.options import DeviceOptions, path_key
from rig.errors import DeviceError
from rig.transports.base import Transport
from rig.transports.deviceecho import OwnEcho


class DeviceTransport(Transport):
    """The Transport protocol over a sound card (see the module docstring)."""

    sends_now = True

    def __init__(
        self,
        opts: DeviceOptions,
        clock: Clock,
        *,
        calibration: str = "auto",
        calibration_store: str | Path | None = None,
        backend: Backend | None = None,
        cancel_own_echo: str | None = None,
        onset_threshold_dbfs: float = -40.0,
        noise: NoiseOptions | None = None,
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
        #: the rig's own playback removed from the capture (--cancel-own-echo auto|FILE)
        self.cancel_own_echo = cancel_own_echo
        self.own: OwnEcho | None = None
        if cancel_own_echo:
            key = path_key(self.link.stream, opts)
            cal = load_echo_response(cancel_own_echo, key, calibration_store)
            self.own = OwnEcho(self.link, cal, onset_threshold_dbfs=onset_threshold_dbfs)
        #: a noise scene on a second output, started with the first uplink frame
        self.noise_opts = noise
        self.noise: NoisePlayer | None = None

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
        if self.noise_opts is not None:  # silent until the first frame: see send_audio
            self.noise = await NoisePlayer.load(self.noise_opts, self.clock)
            await self.noise.open()
        await self.link.open()
        if self.own is not None:
            await self.own.start()

    async def send_audio(self, pcm: Pcm16, seq: int, t_sched_ns: int) -> int:
        return self.send_audio_now(pcm, seq, t_sched_ns)

    def send_audio_now(self, pcm: Pcm16, seq: int, t_sched_ns: int) -> int:
        """Into the output ring: never waits (the card's callback plays it)."""
        t = self.clock.now_ns()
        index = self.link.play(pcm)
        if self.noise is not None and seq == 0:
            self.noise.start()
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

    async def receive(self) -> AsyncIterator[Received]:
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
                if self.own is not None and b.direction == "out":
                    self.own.on_out(b)
                continue
            if self.own is not None:  # cleaned frames (and the raw beside them) as they are done
                for frame, clean, raw in self.own.on_in(b):
                    t = link.live_in.time_ns(frame)
                    self._down_frames.append(frame)
                    self._down_t.append(t)
                    yield DownAudio(
                        clean, self.opts.rate, t, None, {"frame": frame, "t_cb_ns": b.t_ns}
                    )
                    yield raw
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
        if self.noise is not None:
            await self.noise.close()
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
            "cancel_own_echo": None if self.own is None else self.own.cal.as_dict(),
            "noise": None if self.noise_opts is None else self.noise_opts.as_dict(),
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
        if self.own is not None:
            self.own.finish_metrics(metrics, rt)
        if self.noise is not None:
            metrics["noise"] = self.noise.describe()


def device_factory(
    opts: DeviceOptions,
    calibration: str = "auto",
    store: str | Path | None = None,
    cancel_own_echo: str | None = None,
    noise: NoiseOptions | None = None,
) -> Any:
    """A `RolloutSpec.make_transport` for the device transport."""

    def make(clock: Clock, gate: asyncio.Semaphore) -> DeviceTransport:
        return DeviceTransport(
            opts,
            clock,
            calibration=calibration,
            calibration_store=store,
            cancel_own_echo=cancel_own_echo,
            noise=noise,
        )

    return make
