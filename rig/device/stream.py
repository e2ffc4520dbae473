"""The device stream: the asyncio shell over one or two PortAudio streams.

`DeviceStream` is what the rest of the rig uses: `play()` queues int16 PCM for the output,
`blocks()` yields one `Block` per callback and direction, in callback order. Either one
full-duplex PortAudio stream (`duplex=True`, one callback serves both directions, so input
and output share every stamp), or separate input and output streams (the default:
PortAudio's full-duplex path through the ALSA "pulse" plugin stalls and its lag changes
from one open to the next; separate streams, aligned by their stamps, repeat). The
callbacks (rig.device.callbacks) run on PortAudio's thread; everything here runs on the
event loop, and stopping streams runs in a thread (a lost device can hang PortAudio).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np

from rig.audio.pcm import Pcm16
from rig.clock.base import Clock, MonotonicClock
from rig.device.binding import Backend, RawStream
from rig.device.callbacks import Callbacks, Playout
from rig.device.model import (
    Block,
    OpenedLatency,
    StreamEnded,
    StreamSettings,
    describe_pair,
    resolve_device,
)
from rig.device.pyaudio_binding import PyAudioBackend
from rig.device.sounddevice_binding import SoundDeviceBackend
from rig.errors import DeviceError

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
        self._playout = Playout()
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
        callbacks = Callbacks(self._clock, loop, self._queue.put_nowait, self._playout)
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
                    f"({describe_pair(self.input, self.output)}): device lost?"
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
        settle_s = JACK_SETTLE_S if self.on_jack() else 0.0

        def stop() -> None:
            try:
                _stop_all(streams, settle_s)
            finally:
                done.set()

        threading.Thread(target=stop, name="rig-device-stop", daemon=True).start()
        if not await asyncio.to_thread(done.wait, STOP_TIMEOUT_S):
            mark_portaudio_wedged(f"stream stop did not return within {STOP_TIMEOUT_S} s")
        self._queue.put_nowait(StreamEnded("duplex", self._clock.now_ns()))

    def on_jack(self) -> bool:
        """Whether PortAudio's JACK host API serves this stream (one cycle for all)."""
        devices = (self.input, self.output)
        return any(d is not None and d.hostapi.upper().startswith("JACK") for d in devices)

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


#: how long the JACK client is left alone after each change to its ports when closing
JACK_SETTLE_S = 0.1
_JACK_PORT_CHANGES = threading.Lock()


def _stop_all(streams: list[RawStream], settle_s: float = 0.0) -> None:
    """Stop every stream, then close them one by one, `settle_s` apart (JACK: see below).

    libjack (jack2 1.9.21 and 1.9.22, jackaudio/jack2#216) walks the client's port list on
    its notification thread for every latency notification, while `jack_port_unregister`
    (inside Pa_CloseStream) erases from that same list on the closing thread, unlocked. The
    server sends those notifications asynchronously, a period or two after any change to the
    graph, and stopping a PortAudio stream disconnects its ports: a close right after a stop
    (or after another stream's close) unregisters while the walk is under way, and the process
    dies in libjack (one CI run; once in 19 rounds of tests/device/test_devices.py's four JACK
    cases in one process, two CPU burners beside it; docs/devices.md). PortAudio shares one
    JACK client per process and does not expose it, so the only cure from here is time: no
    port is unregistered within `settle_s` of the last change to the graph, which leaves the
    notification thread many periods to finish its walk.
    """
    # one close at a time per process: two device streams closing together would otherwise
    # interleave their port changes inside each other's settle time
    with _JACK_PORT_CHANGES if settle_s > 0 else contextlib.nullcontext():
        try:
            for s in streams:
                s.stop()
        finally:
            for s in streams:
                if settle_s > 0:
                    time.sleep(settle_s)
                s.close()
            if settle_s > 0:  # the last unregister's walk ends before the next open registers
                time.sleep(settle_s)
