"""PortAudio through PyAudio: the `pyaudio` extra."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

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
from rig.device.threadstate import pin_thread_state as pin
from rig.errors import DeviceError


class PyAudioBackend:
    """PortAudio through PyAudio. PyAudio cannot pass a suggested latency: its streams
    always open with the device's default low latency, whatever `settings.latency` says.
    Its callbacks pin their thread's Python state (rig.device.threadstate): without it
    PyAudio builds and destroys one per callback, and the JACK client misses cycles."""

    name = "pyaudio"

    def __init__(self) -> None:
        try:
            import pyaudio
        except ImportError as exc:
            raise DeviceError(f"pyaudio is not usable: {exc}") from exc
        self._pa_mod = pyaudio
        self._pa = pyaudio.PyAudio()

    def terminate(self) -> None:
        self._pa.terminate()

    def hostapis(self) -> list[HostApiInfo]:
        out = []
        for i in range(self._pa.get_host_api_count()):
            h = self._pa.get_host_api_info_by_index(i)
            di, do = int(h["defaultInputDevice"]), int(h["defaultOutputDevice"])
            out.append(
                HostApiInfo(i, str(h["name"]), di if di >= 0 else None, do if do >= 0 else None)
            )
        return out

    def devices(self) -> list[DeviceInfo]:
        apis = {h.index: h.name for h in self.hostapis()}
        out = []
        for i in range(self._pa.get_device_count()):
            d = self._pa.get_device_info_by_index(i)
            out.append(
                DeviceInfo(
                    index=int(d["index"]),
                    name=str(d["name"]),
                    hostapi=apis.get(int(d["hostApi"]), "?"),
                    max_input_channels=int(d["maxInputChannels"]),
                    max_output_channels=int(d["maxOutputChannels"]),
                    default_rate=float(d["defaultSampleRate"]),
                    low_input_latency_s=float(d["defaultLowInputLatency"]),
                    high_input_latency_s=float(d["defaultHighInputLatency"]),
                    low_output_latency_s=float(d["defaultLowOutputLatency"]),
                    high_output_latency_s=float(d["defaultHighOutputLatency"]),
                )
            )
        return out

    def check(self, device: DeviceInfo, kind: Direction, channels: int, rate: int) -> None:
        check_channels(device, kind, channels)
        fmt = self._pa_mod.paInt16
        kw: dict[str, Any] = (
            dict(input_device=device.index, input_channels=channels, input_format=fmt)
            if kind == "in"
            else dict(output_device=device.index, output_channels=channels, output_format=fmt)
        )
        try:
            self._pa.is_format_supported(rate, **kw)
        except ValueError as exc:
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
        pa = self._pa_mod
        cont = pa.paContinue
        blocksize = settings.blocksize or pa.paFramesPerBufferUnspecified
        in_ch, out_ch = settings.in_channels, settings.out_channels

        def as_in(data: bytes | None, frames: int) -> npt.NDArray[np.int16]:
            if data is None:
                return np.zeros((frames, in_ch), dtype=np.int16)
            return np.frombuffer(data, dtype=np.int16).reshape(-1, in_ch)

        def duplex_cb(
            data: bytes | None, frames: int, ti: dict[str, float], status: int
        ) -> tuple[bytes, int]:
            pin()
            outbuf = np.empty((frames, out_ch), dtype=np.int16)
            callbacks.on_duplex(
                as_in(data, frames),
                outbuf,
                ti["input_buffer_adc_time"],
                ti["output_buffer_dac_time"],
                ti["current_time"],
                status,
            )
            return outbuf.tobytes(), cont

        def in_cb(
            data: bytes | None, frames: int, ti: dict[str, float], status: int
        ) -> tuple[None, int]:
            pin()
            callbacks.on_input(
                as_in(data, frames), ti["input_buffer_adc_time"], ti["current_time"], status
            )
            return None, cont

        def out_cb(
            data: bytes | None, frames: int, ti: dict[str, float], status: int
        ) -> tuple[bytes, int]:
            pin()
            outbuf = np.empty((frames, out_ch), dtype=np.int16)
            callbacks.on_output(outbuf, ti["output_buffer_dac_time"], ti["current_time"], status)
            return outbuf.tobytes(), cont

        def open_one(kind: str, **kw: Any) -> RawStream:
            s = self._pa.open(
                rate=settings.rate,
                format=pa.paInt16,
                frames_per_buffer=blocksize,
                start=False,
                **kw,
            )
            return _PaStream(s, kind)

        try:
            if settings.duplex:
                assert inp is not None and out is not None
                if in_ch != out_ch:
                    raise DeviceError(
                        "PyAudio full-duplex streams need as many input as "
                        f"output channels (got {in_ch} and {out_ch})"
                    )
                return [
                    open_one(
                        "duplex",
                        input=True,
                        output=True,
                        input_device_index=inp.index,
                        output_device_index=out.index,
                        channels=in_ch,
                        stream_callback=duplex_cb,
                    )
                ]
            streams = []
            if inp is not None:
                streams.append(
                    open_one(
                        "in",
                        input=True,
                        input_device_index=inp.index,
                        channels=in_ch,
                        stream_callback=in_cb,
                    )
                )
            if out is not None:
                streams.append(
                    open_one(
                        "out",
                        output=True,
                        output_device_index=out.index,
                        channels=out_ch,
                        stream_callback=out_cb,
                    )
                )
            return streams
        except (OSError, ValueError) as exc:
            raise DeviceError(f"cannot open stream ({describe_pair(inp, out)}): {exc}") from exc


class _PaStream:
    def __init__(self, stream: Any, kind: str) -> None:
        self._s = stream
        self._kind = kind

    def start(self) -> None:
        self._s.start_stream()

    def stop(self) -> None:
        if not self._s.is_stopped():
            self._s.stop_stream()

    def close(self) -> None:
        self._s.close()

    def latency(self) -> OpenedLatency:
        i = float(self._s.get_input_latency()) if self._kind != "out" else None
        o = float(self._s.get_output_latency()) if self._kind != "in" else None
        return OpenedLatency(i, o)
