"""The one small interface every transport implements.

A transport is a thin asyncio shell around one live connection to a system: it sends uplink
PCM when the session tells it to, and yields what arrives, each item stamped on the shared
clock as it comes off the wire. Every stamp comes from the `Clock` the transport was given
(never from `time` directly), so a transport on a `FakeClock` records only fake times. It
holds no policy: pacing, placement and recording live in the session and the sans-I/O core.

End of stream is signalled by `receive()` finishing; a connection that dies raises
`TransportError` out of it (never a silent end: a dead peer is not a silent peer).

Required: `uplink_rate`, `open`, `send_audio`, `send_event`, `receive`, `close`, `describe`.
Optional features have documented defaults here; a transport overrides what it has and the
session uses them unconditionally:

  faster_than_real_time  False  audio may go out faster than it plays (the session's fast
                                prefill); sound cards and RTP play in real time
  sent_extra(seq)        None   extra chunks.jsonl fields for uplink frame `seq`
  finish_metrics(m)      no-op  add transport-specific metrics at the end of a rollout
  samples_path           False  `sample_path()` measures the path (round trips, send backlog)
  sample_path()          []     `net.*` events of one sample; the session calls it every
                                `path_interval_s` (WebSocket: ping/pong + TCP_INFO)
  send_event_now(k, d)   False  `send_event` without waiting, from the clock's tick (the
                                session's clock probes: rig.sessionchores); False: not now
  exact_stamps()         ()     arrival stamps that are exact (the kernel's, at the message's
                                own last byte: rig.transports.kstamp); the timing verdict
                                bounds every other stamp by the loop's lag
  sample_path_now(emit)  False  `sample_path` without waiting: events to `emit` as they
                                come (a pong's round trip from the socket's read); False:
                                its round trip must be awaited (`path_round_trip()`)
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Callable, Collection
from typing import Any

from rig.audio.pcm import Pcm16
from rig.core.events import DownEvent, Received


class Transport(abc.ABC):
    """A live connection to one system under test."""

    #: sample rate the system expects on the uplink (the session's plan is at this rate)
    uplink_rate: int
    faster_than_real_time: bool = False
    #: `send_audio_now` can send (the session then sends from its clock's tick)
    sends_now: bool = False
    samples_path: bool = False

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and finish any handshake; raise TransportError on failure."""

    @abc.abstractmethod
    async def send_audio(self, pcm: Pcm16, seq: int, t_sched_ns: int) -> int:
        """Send one uplink frame; return the shared-clock time it was handed to the OS."""

    def send_audio_now(self, pcm: Pcm16, seq: int, t_sched_ns: int) -> int | None:
        """Send one uplink frame without waiting, as `send_audio` would; None when that
        cannot be done now (then nothing was sent: the caller awaits `send_audio`). The
        session's tick (rig.sessiontick) sends through this. Default: never."""
        return None

    @abc.abstractmethod
    async def send_event(self, kind: str, data: dict[str, Any]) -> None:
        """Send a control message (end of input, clock probe, truncate...)."""

    @abc.abstractmethod
    def receive(self) -> AsyncIterator[Received]:
        """Everything the system sends, in arrival order, until it closes."""

    async def receive_into(self, handle: Callable[[Received], None]) -> None:
        """`receive()`, each item to `handle` as it comes; returns once the system closed.
        A transport may call `handle` straight from its socket's read (no task step per
        message: rig.transports.websocket); it raises what `receive()` would have raised,
        and what `handle` raised."""
        async for item in self.receive():
            handle(item)

    @abc.abstractmethod
    async def close(self) -> None:
        """Close; safe to call twice."""

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """Settings for the manifest (never secrets)."""

    def sent_extra(self, seq: int) -> dict[str, Any] | None:
        """Extra chunks.jsonl fields for uplink frame `seq` (default: none)."""
        return None

    def exact_stamps(self) -> Collection[int]:
        """Arrival stamps (shared-clock ns) measured exactly, not through the loop (default:
        none: each is bounded by the loop's lag where it was taken)."""
        return ()

    def finish_metrics(self, metrics: dict[str, Any]) -> None:
        """Add transport-specific fields to a rollout's metrics.json (default: nothing)."""
        return None

    async def sample_path(self) -> list[DownEvent]:
        """One sample of the path to the system: `net.rtt` / `net.tcp` events (default: none)."""
        return []

    def send_event_now(self, kind: str, data: dict[str, Any]) -> bool:
        """`send_event` without waiting; False when that cannot be done now (nothing sent:
        the caller awaits `send_event`). Default: never."""
        return False

    def sample_path_now(self, emit: Callable[[list[DownEvent]], None]) -> bool:
        """`sample_path` without waiting, its events handed to `emit` (now, or as a reply
        arrives); False: its round trip was not started (what it emitted stands): the
        caller awaits `path_round_trip()`. Default: never (the caller awaits `sample_path`)."""
        return False

    async def path_round_trip(self) -> list[DownEvent]:
        """The round-trip half of `sample_path`, after `sample_path_now` returned False."""
        return await self.sample_path()
