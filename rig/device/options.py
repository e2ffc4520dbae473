"""The device path a run opens: which devices, format, buffering, and how to check them.

Every field of `DeviceOptions` goes to the manifest; `open_checked` resolves both devices
and checks the format before anything streams (a DeviceError names what is wrong), and
`path_key` is the key a stored calibration is filed under (rig.device.calibration_store).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rig.device.binding import Backend
from rig.device.calibration_store import PathKey
from rig.device.model import StreamSettings
from rig.device.stream import DeviceStream, get_backend
from rig.errors import ConfigError


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
