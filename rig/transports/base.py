"""The one small interface every transport implements.

A transport is a thin asyncio shell around one live connection to a system: it sends uplink
PCM when the session tells it to, and yields what arrives, each item stamped on the shared
clock as it comes off the wire. It holds no policy: pacing, placement and recording live in
the session and the sans-I/O core.

End of stream is signalled by `receive()` finishing; a connection that dies raises
`TransportError` out of it (never a silent end: a dead peer is not a silent peer).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from rig.audio.pcm import Pcm16
from rig.core.events import Incoming


class Transport(Protocol):
    """A live connection to one system under test."""

    #: sample rate the system expects on the uplink (the session resamples to it)
    uplink_rate: int
    # optional: `faster_than_real_time = True` where audio may be sent faster than it plays
    # (the session's fast prefill); sound cards and RTP leave it out

    async def open(self) -> None:
        """Connect and finish any handshake; raise TransportError on failure."""

    async def send_audio(self, pcm: Pcm16, seq: int, t_sched_ns: int) -> int:
        """Send one uplink frame; return the shared-clock time it was handed to the OS."""

    async def send_event(self, kind: str, data: dict[str, Any]) -> None:
        """Send a control message (end of input, clock probe, truncate...)."""

    def receive(self) -> AsyncIterator[Incoming]:
        """Everything the system sends, in arrival order, until it closes."""

    async def close(self) -> None:
        """Close; safe to call twice."""

    def describe(self) -> dict[str, Any]:
        """Settings for the manifest (never secrets)."""
