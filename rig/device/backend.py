"""PortAudio streams behind one small interface, for sounddevice and PyAudio.

A `Backend` lists devices and host APIs, checks a format, and opens raw streams. A
`DeviceStream` is the asyncio shell the rest of the rig uses: `play()` queues int16 PCM
for the output, `blocks()` yields one `Block` per callback and direction, in callback
order. Either one full-duplex PortAudio stream (`duplex=True`, one callback serves both
directions, so input and output share every stamp), or separate input and output streams
(the default: PortAudio's full-duplex path through the ALSA "pulse" plugin stalls and its
lag changes from one open to the next; separate streams, aligned by their stamps, repeat).

The callbacks run on PortAudio's thread and only copy: the captured samples out, the next
queued samples in (a deque, whose append/popleft are atomic), then hand the record to the
event loop with `loop.call_soon_threadsafe`. Every callback is stamped on the shared clock
at entry and keeps PortAudio's time_info and status flags (xruns), which the rest of the
rig records; nothing is thrown away, nothing blocks.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from rig.audio.pcm import Pcm16
from rig.clock.base import Clock, MonotonicClock
from rig.errors import DeviceError

Direction = Literal["in", "out"]


class StatusFlag(enum.IntFlag):
    """PortAudio's callback status bits (same values as paInputUnderflow etc.)."""

    INPUT_UNDERFLOW = 1
    INPUT_OVERFLOW = 2
    OUTPUT_UNDERFLOW = 4
    OUTPUT_OVERFLOW = 8
    PRIMING_OUTPUT = 16


def flag_names(status: int) -> list[str]:
    return [f.name.lower() for f in StatusFlag if f.name and status & f]


@dataclass(frozen=True, slots=True)
class HostApiInfo:
    index: int
    name: str
    default_input: int | None
    default_output: int | None


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One PortAudio device as the backend reports it."""

    index: int
    name: str
    hostapi: str
    max_input_channels: int
    max_output_channels: int
    default_rate: float
    low_input_latency_s: float
    high_input_latency_s: float
    low_output_latency_s: float
    high_output_latency_s: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "hostapi": self.hostapi,
            "max_input_channels": self.max_input_channels,
            "max_output_channels": self.max_output_channels,
            "default_rate": self.default_rate,
            "low_input_latency_ms": self.low_input_latency_s * 1e3,
            "high_input_latency_ms": self.high_input_latency_s * 1e3,
            "low_output_latency_ms": self.low_output_latency_s * 1e3,
            "high_output_latency_ms": self.high_output_latency_s * 1e3,
        }


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """What to open. Device specs are resolved with `resolve_device`."""

    rate: int
    input: int | str | None = None
    output: int | str | None = None
    in_channels: int = 1
    out_channels: int = 1
    #: frames per callback; 0 lets PortAudio choose (and vary) it
    blocksize: int = 0
    #: PortAudio suggested latency: "low", "high" or seconds
    latency: str | float = "high"
    duplex: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "rate": self.rate,
            "input": self.input,
            "output": self.output,
            "in_channels": self.in_channels,
            "out_channels": self.out_channels,
            "blocksize": self.blocksize,
            "latency": self.latency,
            "duplex": self.duplex,
        }


@dataclass(frozen=True, slots=True)
class Block:
    """One callback's worth of one direction, stamped on the shared clock at callback entry."""

    direction: Direction
    #: stream frame index of the block's first sample (per direction, from 0)
    frame: int
    n_frames: int
    t_ns: int
    #: PortAudio's inputBufferAdcTime (in) or outputBufferDacTime (out), stream clock, s
    pa_time_s: float
    pa_current_s: float
    #: PortAudio status flags (StatusFlag bits): xruns
    status: int
    #: captured samples, shape (n_frames, in_channels) (in only)
    pcm: Pcm16 | None = None
    #: frames taken from the play queue; the rest of the block was silence (out only)
    played_frames: int = 0


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """PortAudio stopped the stream on its own (device lost, fatal error)."""

    direction: Direction | Literal["duplex"]
    t_ns: int


@dataclass(frozen=True, slots=True)
class OpenedLatency:
    """PortAudio's reported latency of an open stream, seconds."""

    input_s: float | None
    output_s: float | None


# ---------------------------------------------------------------------------- resolution


def resolve_device(devices: Sequence[DeviceInfo], spec: int | str, kind: Direction) -> DeviceInfo:
    """Find the device `spec` names, with channels in direction `kind`.

    `spec` is an index, an exact name, "HOSTAPI:NAME" (host API by prefix, e.g.
    "JACK:loopback"), or a unique case-insensitive substring of the name.
    """

    def usable(d: DeviceInfo) -> bool:
        return (d.max_input_channels if kind == "in" else d.max_output_channels) > 0

    what = "input" if kind == "in" else "output"
    listing = ", ".join(f"{d.index}: {d.name} ({d.hostapi})" for d in devices if usable(d))
    if isinstance(spec, int) or (isinstance(spec, str) and spec.strip().isdigit()):
        idx = int(spec)
        for d in devices:
            if d.index == idx:
                if not usable(d):
                    raise DeviceError(f"device {idx} ({d.name}) has no {what} channels")
                return d
        raise DeviceError(f"no device with index {idx}; {what} devices: {listing or 'none'}")
    name = spec.strip()
    api = None
    if ":" in name:
        head, tail = name.split(":", 1)
        if any(d.hostapi.lower().startswith(head.lower()) for d in devices):
            api, name = head.lower(), tail
    pool = [d for d in devices if usable(d) and (api is None or d.hostapi.lower().startswith(api))]
    exact = [d for d in pool if d.name == name]
    if len(exact) == 1:
        return exact[0]
    matches = exact or [d for d in pool if name.lower() in d.name.lower()]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise DeviceError(f"no {what} device matches {spec!r}; {what} devices: {listing or 'none'}")
    names = ", ".join(f"{d.index}: {d.name} ({d.hostapi})" for d in matches)
    raise DeviceError(
        f"{spec!r} matches several {what} devices ({names}); use 'HOSTAPI:NAME' or an index"
    )


# ---------------------------------------------------------------------------- callbacks


class _Playout:
    """The output queue: filled from the loop thread, drained by the audio callback."""

    def __init__(self) -> None:
        self._chunks: collections.deque[Pcm16] = collections.deque()
        self._head_pos = 0  # touched only by the callback thread
        self.queued_frames = 0

    def push(self, pcm: Pcm16) -> None:
        self.queued_frames += len(pcm)
        self._chunks.append(pcm)

    def fill(self, out: npt.NDArray[Any]) -> int:
        """Copy queued mono frames into every channel of `out`; silence after. Returns frames."""
        n = len(out)
        done = 0
        while done < n and self._chunks:
            head = self._chunks[0]
            take = min(n - done, len(head) - self._head_pos)
            out[done : done + take, :] = head[self._head_pos : self._head_pos + take, None]
            done += take
            self._head_pos += take
            if self._head_pos >= len(head):
                self._chunks.popleft()
                self._head_pos = 0
        if done < n:
            out[done:, :] = 0
        self.queued_frames -= done
        return done


class _Callbacks:
    """Library-independent callback bodies: copy, stamp, hand off. Nothing else."""

    def __init__(
        self,
        clock: Clock,
        loop: asyncio.AbstractEventLoop,
        sink: Callable[[Block | StreamEnded], None],
        playout: _Playout,
    ) -> None:
        self._now_ns = clock.now_ns
        self._loop = loop
        self._sink = sink
        self._playout = playout
        self._in_frame = 0
        self._out_frame = 0

    def _hand_off(self, item: Block | StreamEnded) -> None:
        try:
            self._loop.call_soon_threadsafe(self._sink, item)
        except RuntimeError:
            pass  # loop closed while the stream was stopping

    def on_input(
        self,
        indata: npt.NDArray[Any],
        adc_s: float,
        current_s: float,
        status: int,
        t_ns: int | None = None,
    ) -> None:
        t = self._now_ns() if t_ns is None else t_ns
        n = len(indata)
        self._hand_off(
            Block(
                "in",
                self._in_frame,
                n,
                t,
                adc_s,
                current_s,
                status,
                pcm=np.array(indata, dtype=np.int16, copy=True),
            )
        )
        self._in_frame += n

    def on_output(
        self,
        outdata: npt.NDArray[Any],
        dac_s: float,
        current_s: float,
        status: int,
        t_ns: int | None = None,
    ) -> None:
        t = self._now_ns() if t_ns is None else t_ns
        n = len(outdata)
        played = self._playout.fill(outdata)
        self._hand_off(
            Block("out", self._out_frame, n, t, dac_s, current_s, status, played_frames=played)
        )
        self._out_frame += n

    def on_duplex(
        self,
        indata: npt.NDArray[Any],
        outdata: npt.NDArray[Any],
        adc_s: float,
        dac_s: float,
        current_s: float,
        status: int,
    ) -> None:
        t = self._now_ns()
        self.on_input(indata, adc_s, current_s, status, t)
        self.on_output(outdata, dac_s, current_s, status, t)

    def on_finished(self, direction: Direction | Literal["duplex"]) -> None:
        self._hand_off(StreamEnded(direction, self._now_ns()))


# ---------------------------------------------------------------------------- backends


class RawStream(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...
    def latency(self) -> OpenedLatency: ...


class Backend(Protocol):
    name: str

    def hostapis(self) -> list[HostApiInfo]: ...
    def devices(self) -> list[DeviceInfo]: ...
    def check(self, device: DeviceInfo, kind: Direction, channels: int, rate: int) -> None:
        """Raise DeviceError if the device cannot do this format."""

    def open(
        self,
        settings: StreamSettings,
        inp: DeviceInfo | None,
        out: DeviceInfo | None,
        callbacks: _Callbacks,
    ) -> list[RawStream]: ...


def _check_channels(device: DeviceInfo, kind: Direction, channels: int) -> None:
    limit = device.max_input_channels if kind == "in" else device.max_output_channels
    if channels < 1 or channels > limit:
        what = "input" if kind == "in" else "output"
        raise DeviceError(
            f"{device.name} ({device.hostapi}): {channels} {what} channels "
            f"requested, the device has {limit}"
        )


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
        _check_channels(device, kind, channels)
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
        callbacks: _Callbacks,
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
            raise DeviceError(f"cannot open stream ({_describe(inp, out)}): {exc}") from exc


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


class PyAudioBackend:
    """PortAudio through PyAudio. PyAudio cannot pass a suggested latency: its streams
    always open with the device's default low latency, whatever `settings.latency` says."""

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
        _check_channels(device, kind, channels)
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
        callbacks: _Callbacks,
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
            callbacks.on_input(
                as_in(data, frames), ti["input_buffer_adc_time"], ti["current_time"], status
            )
            return None, cont

        def out_cb(
            data: bytes | None, frames: int, ti: dict[str, float], status: int
        ) -> tuple[bytes, int]:
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
            raise DeviceError(f"cannot open stream ({_describe(inp, out)}): {exc}") from exc


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


BACKENDS: dict[str, Callable[[], Backend]] = {
    "sounddevice": SoundDeviceBackend,
    "pyaudio": PyAudioBackend,
}


def get_backend(name: str) -> Backend:
    try:
        factory = BACKENDS[name]
    except KeyError:
        raise DeviceError(
            f"unknown audio backend {name!r}; choose from {', '.join(BACKENDS)}"
        ) from None
    return factory()


def _describe(inp: DeviceInfo | None, out: DeviceInfo | None) -> str:
    parts = []
    if inp is not None:
        parts.append(f"input {inp.name} ({inp.hostapi})")
    if out is not None:
        parts.append(f"output {out.name} ({out.hostapi})")
    return ", ".join(parts)


# ---------------------------------------------------------------------------- the shell


class DeviceStream:
    """An open device path: `play()` PCM out, `blocks()` of both directions back.

    Use as `async with DeviceStream(backend, settings) as stream:`. Blocks queue without
    bound on the loop side; a consumer that stops reading only costs memory, never audio.
    """

    def __init__(
        self, backend: Backend, settings: StreamSettings, clock: Clock | None = None
    ) -> None:
        if settings.input is None and settings.output is None:
            raise DeviceError("a device stream needs an input, an output, or both")
        if settings.duplex and (settings.input is None or settings.output is None):
            raise DeviceError("a full-duplex stream needs both an input and an output")
        self.backend = backend
        self.settings = settings
        self._clock = clock or MonotonicClock()
        self._playout = _Playout()
        self._queue: asyncio.Queue[Block | StreamEnded] = asyncio.Queue()
        self._streams: list[RawStream] = []
        self._closed = False
        self._lock = threading.Lock()
        devices = backend.devices()
        self.input = (
            resolve_device(devices, settings.input, "in") if settings.input is not None else None
        )
        self.output = (
            resolve_device(devices, settings.output, "out") if settings.output is not None else None
        )
        if self.input is not None:
            backend.check(self.input, "in", settings.in_channels, settings.rate)
        if self.output is not None:
            backend.check(self.output, "out", settings.out_channels, settings.rate)

    async def __aenter__(self) -> DeviceStream:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        callbacks = _Callbacks(self._clock, loop, self._queue.put_nowait, self._playout)
        self._streams = self.backend.open(self.settings, self.input, self.output, callbacks)
        try:
            for s in self._streams:
                s.start()
        except Exception as exc:
            await self.close()
            raise DeviceError(f"cannot start stream: {exc}") from exc

    def play(self, pcm: Pcm16) -> None:
        """Queue mono int16 PCM for the output; it plays after what is already queued."""
        if self.output is None:
            raise DeviceError("this stream has no output")
        pcm = np.ascontiguousarray(pcm, dtype=np.int16)
        if pcm.ndim != 1:
            raise ValueError("play() takes mono PCM (one dimension)")
        if len(pcm):
            self._playout.push(pcm)

    @property
    def queued_frames(self) -> int:
        """Frames queued for output and not yet handed to PortAudio."""
        return self._playout.queued_frames

    def latency(self) -> OpenedLatency:
        """PortAudio's reported latency of the open streams."""
        inp = out = None
        for s in self._streams:
            lat = s.latency()
            inp = lat.input_s if lat.input_s is not None else inp
            out = lat.output_s if lat.output_s is not None else out
        return OpenedLatency(inp, out)

    async def blocks(self) -> AsyncIterator[Block]:
        """Every block in callback order, until close; DeviceError if PortAudio stops."""
        while True:
            item = await self._queue.get()
            if isinstance(item, StreamEnded):
                if self._closed:
                    return
                raise DeviceError(
                    f"{item.direction} stream stopped by PortAudio "
                    f"({_describe(self.input, self.output)}): device lost?"
                )
            yield item

    async def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        streams, self._streams = self._streams, []
        # stop/close call into PortAudio and wait for its thread: keep them off the loop. After
        # the device (or the JACK server) has gone, PortAudio's abort can block forever: wait
        # a bounded time in a daemon thread, then give the streams up.
        done = threading.Event()

        def stop() -> None:
            try:
                _stop_all(streams)
            finally:
                done.set()

        threading.Thread(target=stop, name="rig-device-stop", daemon=True).start()
        if not await asyncio.to_thread(done.wait, STOP_TIMEOUT_S):
            mark_portaudio_wedged(f"stream stop did not return within {STOP_TIMEOUT_S} s")
        self._queue.put_nowait(StreamEnded("duplex", self._clock.now_ns()))

    def describe(self) -> dict[str, Any]:
        lat = self.latency()
        return {
            "backend": self.backend.name,
            **self.settings.as_dict(),
            "input_device": self.input.as_dict() if self.input else None,
            "output_device": self.output.as_dict() if self.output else None,
            "reported_input_latency_ms": None if lat.input_s is None else lat.input_s * 1e3,
            "reported_output_latency_ms": None if lat.output_s is None else lat.output_s * 1e3,
        }


#: how long closing a stream may take before it is given up (a lost device can hang it)
STOP_TIMEOUT_S = 3.0
#: why PortAudio can no longer be shut down cleanly in this process (None: it can)
PORTAUDIO_WEDGED: str | None = None


def mark_portaudio_wedged(reason: str) -> None:
    """Remember that a PortAudio call hung: the CLI then exits without Pa_Terminate."""
    global PORTAUDIO_WEDGED
    PORTAUDIO_WEDGED = reason


def _stop_all(streams: list[RawStream]) -> None:
    for s in streams:
        try:
            s.stop()
        finally:
            s.close()
