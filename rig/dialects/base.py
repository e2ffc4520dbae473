"""The dialect interface (sans-I/O)."""

from __future__ import annotations

from typing import Any, Protocol

from rig.audio.pcm import Pcm16
from rig.core.events import Incoming

Message = str | bytes


class Dialect(Protocol):
    name: str
    #: rate the system wants on the uplink, and what it sends back
    uplink_rate: int
    downlink_rate: int

    def headers(self) -> dict[str, str]:
        """Extra HTTP headers for the WebSocket handshake (credentials from the environment)."""

    def open_messages(self) -> list[Message]:
        """What to send right after the socket opens (hello, session setup)."""

    @property
    def ready(self) -> bool:
        """True once the handshake is complete and uplink audio may flow."""

    def encode_audio(self, pcm: Pcm16, seq: int, t_sched_ns: int, t_now_ns: int) -> list[Message]:
        """Messages that carry one uplink frame."""

    def encode_event(self, kind: str, data: dict[str, Any], t_now_ns: int) -> list[Message]:
        """Messages for a control request (`end`, `probe`, `truncate`, `commit`...)."""

    def decode(self, message: Message, t_ns: int) -> list[Incoming]:
        """Items from one incoming message stamped at `t_ns`; raises ProtocolError on garbage."""

    def describe(self) -> dict[str, Any]:
        """Settings for the manifest (never secrets)."""
