"""Records of what happened: chunks in both directions, protocol/session events, audio.

Frozen, slotted dataclasses. What the core hands out (`Record`) the session puts into one
sink (rig.recordings.sink), which writes it to the run directory and publishes it live:
`ChunkRecord` / `EventRecord` become one JSON line each (chunks.jsonl / events.jsonl),
`UserAudio` / `SystemAudio` / `SystemPad` the two tracks, `ReceivedAudio` the
system's stream as received (received.wav). The rest (`Probe`, `ServerMark`,
`HeardChunk`) are what the session log keeps for the analysis after the stream.

All times are integer nanoseconds on the shared monotonic clock unless the name says
otherwise (`peer`: the server's clock). `server_ts_ms` is on the *server's* clock, exactly as
the server reported it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rig.audio.pcm import Pcm16, level_dbfs

Direction = Literal["up", "down"]


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """One audio chunk, uplink (sent by the rig) or downlink (received from the system).

    Uplink: `t_sched_ns` is the pacer deadline, `t_ns` the actual send time, `lateness_ns`
    their difference. Downlink: `t_ns` is the arrival time, stamped as close to the socket as
    the transport allows; `server_ts_ms` is the server's own timestamp when it sent one;
    `play_ns` is where the listener's queue placed the chunk (playback placement).
    """

    dir: Direction
    seq: int
    n_samples: int
    sample_rate: int
    t_ns: int
    t_sched_ns: int | None = None
    lateness_ns: int | None = None
    server_ts_ms: float | None = None
    play_ns: int | None = None
    level_dbfs: float | None = None
    extra: dict[str, Any] | None = None
    #: the chunk's own audio, where its level is left to whoever reads `level` (the uplink:
    #: the writer thread computes it, not the event loop at the frame's send)
    pcm: Pcm16 | None = field(default=None, compare=False, repr=False)

    @property
    def level(self) -> float | None:
        """`level_dbfs`, or the level of `pcm` where it was left to the reader."""
        if self.level_dbfs is None and self.pcm is not None:
            return level_dbfs(self.pcm)
        return self.level_dbfs

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "dir": self.dir,
            "seq": self.seq,
            "n_samples": self.n_samples,
            "sample_rate": self.sample_rate,
            "t_ns": self.t_ns,
            "t_sched_ns": self.t_sched_ns,
        }
        if self.lateness_ns is not None:
            out["lateness_ns"] = self.lateness_ns
        out["server_ts_ms"] = self.server_ts_ms
        if self.play_ns is not None:
            out["play_ns"] = self.play_ns
        level = self.level
        if level is not None:
            out["level_dbfs"] = level
        if self.extra:
            out.update(self.extra)
        return out


@dataclass(frozen=True, slots=True)
class EventRecord:
    """A protocol or session event: `kind` names it (`session.start`, `stall`, `speech_end`...)."""

    kind: str
    t_ns: int
    data: dict[str, Any] = field(default_factory=dict)
    source: Literal["rig", "server", "device"] = "rig"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "t_ns": self.t_ns, "source": self.source, **self.data}


@dataclass(frozen=True, slots=True)
class UserAudio:
    """An uplink frame as sent: appended to user.wav (the session timeline, sample 0 = t0).
    `clean`: the same frame before the uplink's frame hooks (conditions, echo) changed it,
    appended to user_clean.wav, the track the analysis times the user's speech on."""

    pcm: Pcm16
    clean: Pcm16 | None = None


@dataclass(frozen=True, slots=True)
class SystemAudio:
    """System audio a listener heard, at its playback position on the session timeline."""

    sample_rate: int
    start_sample: int
    pcm: Pcm16


@dataclass(frozen=True, slots=True)
class SystemPad:
    """system.wav padded with silence to `total_samples` (as long as the user track)."""

    sample_rate: int
    total_samples: int


@dataclass(frozen=True, slots=True)
class ReceivedAudio:
    """A downlink chunk exactly as it arrived (played, flushed or cut off alike): appended
    to received.wav, so the system's own, untruncated stream can be rendered after the run
    (chunks.jsonl `dir: down` rows give each chunk's arrival time and length, in order)."""

    sample_rate: int
    pcm: Pcm16


@dataclass(frozen=True, slots=True)
class TrackAudio:
    """A derived track the rig made, appended to `<name>.wav` on the session timeline from
    sample 0 (e.g. `echo`: the echo the echo condition added to user.wav, rig.echo.path)."""

    name: str
    sample_rate: int
    pcm: Pcm16


Record = (
    ChunkRecord | EventRecord | UserAudio | SystemAudio | SystemPad | ReceivedAudio | TrackAudio
)


@dataclass(frozen=True, slots=True)
class Probe:
    """One four-timestamp exchange: t0/t3 on the shared clock, t1/t2 on the server's."""

    t0_ns: int
    t1_peer_ns: int
    t2_peer_ns: int
    t3_ns: int


@dataclass(frozen=True, slots=True)
class ServerMark:
    """A server event: its arrival here, its server stamp, any input-timeline position."""

    kind: str
    t_ns: int
    server_ns: int | None
    audio_end_ms: float | None = None


@dataclass(frozen=True, slots=True)
class HeardChunk:
    """A downlink chunk the listener placed on its playback queue (flushed ones are not)."""

    seq: int
    t_ns: int  # arrival
    play_ns: int  # playback placement of its first sample
    server_ts_ms: float | None
    n_samples: int
    sample_rate: int
    #: WebRTC: the rig's own receive-path delay for this frame (jitter buffer + decode)
    jb_ms: float | None = None


@dataclass(frozen=True, slots=True)
class RttSample:
    """One measured round trip of the path to the system, completed at `t_ns`.

    `source` names the method: "ws_ping" (WebSocket ping/pong), "tcp_info" (the kernel's
    smoothed RTT), "rtcp" (RTCP receiver reports), "probe" (four-timestamp clock probes).
    """

    t_ns: int
    rtt_ns: int
    source: str


@dataclass(frozen=True, slots=True)
class SendBacklog:
    """Uplink bytes handed over but not yet on the wire at `t_ns` (user space + kernel
    unsent), with the kernel's delivery rate (bytes/s; None unknown) to turn it into time."""

    t_ns: int
    backlog_bytes: int
    rate_bps: int | None
