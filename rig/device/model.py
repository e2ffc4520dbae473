"""Sound-card model: what PortAudio reports and what one callback delivers (plain data).

Devices and host APIs as a backend lists them, the stream settings the rig asks for, one
`Block` per callback and direction (stamped on the shared clock at callback entry, with
PortAudio's own ADC/DAC times and status flags), and `resolve_device`, which finds the
device a user named. No PortAudio binding is imported here.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rig.audio.pcm import Pcm16
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


def describe_pair(inp: DeviceInfo | None, out: DeviceInfo | None) -> str:
    parts = []
    if inp is not None:
        parts.append(f"input {inp.name} ({inp.hostapi})")
    if out is not None:
        parts.append(f"output {out.name} ({out.hostapi})")
    return ", ".join(parts)
