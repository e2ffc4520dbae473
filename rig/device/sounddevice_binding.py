"""PortAudio through python-sounddevice (cffi): the `sounddevice` extra."""

from __future__ import annotations

from typing import Any

from rig.device.binding import RawStream, check_channels
from rig.device.callbacks import Callbacks
from rig.device.model import (
    DeviceInfo,
    Direction,
    HostApiInfo,
    OpenedLatency,
    StreamSettings,
    describe_pair,
)
from rig.errors import DeviceError


class SoundDeviceBackend:
    """PortAudio through python-sounddevice (cffi)."""

    name = "sounddevice"

    def __init__(self) -> None:
        try:
            import sounddevice
        except (ImportError, OSError) as exc:
            raise DeviceError(f"sounddevice is not usable: {exc}") from exc
        self._sd = sounddevice

    def hostapis(self) -> list[HostApiInfo]:
        out = []
        for i, h in enumerate(self._sd.query_hostapis()):
            out.append(
                HostApiInfo(
                    i,
                    h["name"],
                    h["default_input_device"] if h["default_input_device"] >= 0 else None,
                    h["default_output_device"] if h["default_output_device"] >= 0 else None,
                )
            )
        return out

    def devices(self) -> list[DeviceInfo]:
        apis = {h.index: h.name for h in self.hostapis()}
        return [
            DeviceInfo(
                index=d["index"],
                name=d["name"],
                hostapi=apis.get(d["hostapi"], "?"),
                max_input_channels=d["max_input_channels"],
                max_output_channels=d["max_output_channels"],
                default_rate=float(d["default_samplerate"]),
                low_input_latency_s=d["default_low_input_latency"],
                high_input_latency_s=d["default_high_input_latency"],
                low_output_latency_s=d["default_low_output_latency"],
                high_output_latency_s=d["default_high_output_latency"],
            )
            for d in self._sd.query_devices()
        ]

    def check(self, device: DeviceInfo, kind: Direction, channels: int, rate: int) -> None:
        check_channels(device, kind, channels)
        checker = self._sd.check_input_settings if kind == "in" else self._sd.check_output_settings
        try:
            checker(device=device.index, channels=channels, dtype="int16", samplerate=rate)
        except self._sd.PortAudioError as exc:
            raise DeviceError(
                f"{device.name} ({device.hostapi}) refuses {rate} Hz, {channels} ch, int16: {exc}"
            ) from exc

    def open(
        self,
        settings: StreamSettings,
        inp: DeviceInfo | None,
        out: DeviceInfo | None,
        callbacks: Callbacks,
    ) -> list[RawStream]:
        sd = self._sd

        def flags(status: Any) -> int:
            return int(getattr(status, "_flags", 0))

        common: dict[str, Any] = dict(
            samplerate=settings.rate,
            dtype="int16",
            blocksize=settings.blocksize,
            latency=settings.latency,
        )
        try:
            if settings.duplex:
                assert inp is not None and out is not None

                def duplex_cb(indata: Any, outdata: Any, frames: int, ti: Any, status: Any) -> None:
                    callbacks.on_duplex(
                        indata,
                        outdata,
                        ti.inputBufferAdcTime,
                        ti.outputBufferDacTime,
                        ti.currentTime,
                        flags(status),
                    )

                s = sd.Stream(
                    device=(inp.index, out.index),
                    channels=(settings.in_channels, settings.out_channels),
                    callback=duplex_cb,
                    finished_callback=lambda: callbacks.on_finished("duplex"),
                    **common,
                )
                return [_SdStream(s, "duplex")]
            streams: list[RawStream] = []
            if inp is not None:

                def in_cb(indata: Any, frames: int, ti: Any, status: Any) -> None:
                    callbacks.on_input(indata, ti.inputBufferAdcTime, ti.currentTime, flags(status))

                streams.append(
                    _SdStream(
                        sd.InputStream(
                            device=inp.index,
                            channels=settings.in_channels,
                            callback=in_cb,
                            finished_callback=lambda: callbacks.on_finished("in"),
                            **common,
                        ),
                        "in",
                    )
                )
            if out is not None:

                def out_cb(outdata: Any, frames: int, ti: Any, status: Any) -> None:
                    callbacks.on_output(
                        outdata, ti.outputBufferDacTime, ti.currentTime, flags(status)
                    )

                streams.append(
                    _SdStream(
                        sd.OutputStream(
                            device=out.index,
                            channels=settings.out_channels,
                            callback=out_cb,
                            finished_callback=lambda: callbacks.on_finished("out"),
                            **common,
                        ),
                        "out",
                    )
                )
            return streams
        except sd.PortAudioError as exc:
            raise DeviceError(f"cannot open stream ({describe_pair(inp, out)}): {exc}") from exc


class _SdStream:
    def __init__(self, stream: Any, kind: str) -> None:
        self._s = stream
        self._kind = kind

    def start(self) -> None:
        self._s.start()

    def stop(self) -> None:
        self._s.abort()

    def close(self) -> None:
        self._s.close(ignore_errors=True)

    def latency(self) -> OpenedLatency:
        lat = self._s.latency
        if self._kind == "duplex":
            return OpenedLatency(float(lat[0]), float(lat[1]))
        if self._kind == "in":
            return OpenedLatency(float(lat), None)
        return OpenedLatency(None, float(lat))
