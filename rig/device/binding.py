"""What a PortAudio binding provides: device listing, format checks, raw streams.

One module per binding implements `Backend` (rig.device.sounddevice_binding,
rig.device.pyaudio_binding); both drive the same library-independent callbacks
(rig.device.callbacks). The binding itself is imported only when a backend is created, so
the rest of the rig works without PortAudio.
"""

from __future__ import annotations

from typing import Protocol

from rig.device.callbacks import Callbacks
from rig.device.model import DeviceInfo, Direction, HostApiInfo, OpenedLatency, StreamSettings
from rig.errors import DeviceError


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
        callbacks: Callbacks,
    ) -> list[RawStream]: ...


def check_channels(device: DeviceInfo, kind: Direction, channels: int) -> None:
    limit = device.max_input_channels if kind == "in" else device.max_output_channels
    if channels < 1 or channels > limit:
        what = "input" if kind == "in" else "output"
        raise DeviceError(
            f"{device.name} ({device.hostapi}): {channels} {what} channels "
            f"requested, the device has {limit}"
        )
