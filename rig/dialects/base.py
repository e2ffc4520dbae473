"""The dialect interface (sans-I/O): how one family of systems frames a conversation.

A dialect turns uplink PCM and control requests into WebSocket messages, and each incoming
message (with its arrival stamp) into `DownAudio` / `DownEvent` items. It never touches a
socket or a clock: times come in as arguments, the WebSocket transport does the I/O.

Both sides of the protocol live in one module: `decode` reads what the server sends, and
`decode_client` what a client sends (input audio, truncate/cancel, session configuration),
for the recording proxy (rig.proxy), which sits between a real client and the system.

Required: `name`, `uplink_rate`, `downlink_rate`, `ready`, `encode_audio`, `encode_event`,
`decode`, `decode_client`, `describe`. Optional features are methods with documented
defaults below; a dialect overrides what it has, and the transport calls them
unconditionally.
"""

from __future__ import annotations

import abc
from typing import Any

from rig.audio.pcm import Pcm16
from rig.core.events import Incoming, Outgoing

Message = str | bytes


class Dialect(abc.ABC):
    name: str
    #: rate the system wants on the uplink, and what it sends back
    uplink_rate: int
    downlink_rate: int
    #: the uplink frame the system prefers (Moshi: 80 ms); None: the session's default
    frame_ms: float | None = None
    #: the server steps through its input in real time (Moshi): audio sent faster than real
    #: time (a fast prefill) piles up in its input queue instead of being taken faster
    steps_in_real_time = False

    def headers(self) -> dict[str, str]:
        """Extra HTTP headers for the WebSocket handshake (credentials from the environment)."""
        return {}

    def open_messages(self) -> list[Message]:
        """What to send right after the socket opens (hello, session setup)."""
        return []

    def take_outgoing(self) -> list[Message]:
        """Messages the dialect wants sent in answer to what it just decoded (Grok's
        `response.create` once the server confirmed a commit); the transport drains this
        after every decoded message. Default: nothing."""
        return []

    @property
    @abc.abstractmethod
    def ready(self) -> bool:
        """True once the handshake is complete and uplink audio may flow."""

    @abc.abstractmethod
    def encode_audio(self, pcm: Pcm16, seq: int, t_sched_ns: int, t_now_ns: int) -> list[Message]:
        """Messages that carry one uplink frame."""

    @abc.abstractmethod
    def encode_event(self, kind: str, data: dict[str, Any], t_now_ns: int) -> list[Message]:
        """Messages for a control request (`end`, `probe`, `truncate`, `turn_start`...)."""

    @abc.abstractmethod
    def decode(self, message: Message, t_ns: int) -> list[Incoming]:
        """Items from one incoming message stamped at `t_ns`; raises ProtocolError on garbage."""

    @abc.abstractmethod
    def decode_client(self, message: Message, t_ns: int) -> list[Outgoing]:
        """Items from one message a *client* sent, stamped at `t_ns` (the proxy's view of
        the uplink): `UpAudio` for input audio, `UpEvent` for the rest; raises ProtocolError
        on garbage. Its state is apart from `decode`'s (one dialect object per connection
        serves both directions)."""

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """Settings for the manifest (never secrets)."""
