"""Records of what happened: chunks in both directions and protocol/session events.

Frozen, slotted dataclasses; the recordings writer turns them into one JSON line each. All
times are integer nanoseconds on the shared monotonic clock unless the name says otherwise.
`server_ts_ms` is on the *server's* clock, exactly as the server reported it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

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
        if self.level_dbfs is not None:
            out["level_dbfs"] = self.level_dbfs
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
