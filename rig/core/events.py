"""What crosses the wire, in the rig's own terms: items from the system, requests to it.

Dialects (sans-I/O framing) produce `DownAudio` / `DownEvent`; transports stamp them on the
shared clock as they come off the wire; the listener (rig.core.listener) consumes them and
answers with `ControlRequest`s the session hands to the transport. They live in the core so
that dialects and transports both depend on it, never on each other's modules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rig.audio.pcm import Pcm16


@dataclass(frozen=True, slots=True)
class DownAudio:
    """Audio from the system: mono int16 PCM at `sample_rate`, stamped on arrival."""

    pcm: Pcm16
    sample_rate: int
    t_ns: int
    server_ts_ms: float | None = None
    extra: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class DownEvent:
    """A protocol event from the system (or the transport), stamped on arrival."""

    kind: str
    t_ns: int
    data: dict[str, Any] = field(default_factory=dict)
    server_ts_ms: float | None = None
    #: "server", or "rig" for something the rig itself did that a dialect reports (its text
    #: history went out): recorded under its own kind, not as `server.<kind>`
    source: str = "server"


@dataclass(frozen=True, slots=True)
class DownTrack:
    """A track a transport records beside what it delivers, appended to `<name>.wav` (the raw
    capture before the rig's own echo was removed: rig.transports.deviceecho)."""

    name: str
    sample_rate: int
    pcm: Pcm16


Incoming = DownAudio | DownEvent
#: what a transport's receive() yields: the system's items, and tracks of its own
Received = Incoming | DownTrack


@dataclass(frozen=True, slots=True)
class UpAudio:
    """Audio a client sent to the system (the recording proxy decodes the client side of a
    dialect): mono int16 PCM at `sample_rate`, stamped when it came off the client's socket."""

    pcm: Pcm16
    sample_rate: int
    t_ns: int
    extra: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class UpEvent:
    """A control message a client sent, in the rig's terms where one applies.

    Kinds the proxy acts on: `truncate` (the client cut the reply it was playing: OpenAI
    `conversation.item.truncate`), `cancel` (`response.cancel`), `turn_start` / `turn_end`
    (manual activity markers, commits), `session` (configuration), `end`; anything else
    keeps the client's own name.
    """

    kind: str
    t_ns: int
    data: dict[str, Any] = field(default_factory=dict)


Outgoing = UpAudio | UpEvent


@dataclass(frozen=True, slots=True)
class ControlRequest:
    """A control message for the system (`Transport.send_event(kind, data)`).

    Kinds: `turn_start`, `turn_end`, `truncate`, `probe`, `end` (docs/architecture.md); a
    dialect or transport with no use for one sends nothing.
    """

    kind: str
    data: dict[str, Any] = field(default_factory=dict)
