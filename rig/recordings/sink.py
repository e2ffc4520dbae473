"""The one place a rollout's records go: the run directory and, beside it, live telemetry.

`RolloutSink.put(record)` hands each record the core produced to the writer thread (a
non-blocking hand-off: nothing here waits for the disk) and publishes the same record to
whoever watches live, so what the dashboard shows and what the run directory holds come
from one object and cannot disagree. Published, as `publish(kind, data)` (the telemetry
bridge, rig.telemetry.session_bridge, maps these onto bus events):

  chunk     every uplink chunk and every downlink chunk that was played (audio flushed
            after a barge-in is recorded, not shown)
  protocol  every server event
  status    the session's state changes (`status()`)
  rtt       each round trip as measured (WebSocket ping/pong, RTCP): `rtt_ms`, `method`
  response  each response latency with its split, and `clock` the clock fit, once the
            analysis after the stream is done (`results()`)

Publishing never raises into the audio loop: a failing subscriber costs its own events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from rig.core.events import ControlRequest
from rig.core.records import (
    ChunkRecord,
    EventRecord,
    ReceivedAudio,
    Record,
    SystemAudio,
    SystemPad,
    UserAudio,
)
from rig.core.selfcheck import Verdict
from rig.recordings.writer import RolloutRecorder

Publish = Callable[[str, dict[str, Any]], None]

#: events that carry one measured round trip (`rtt_ms`): ping/pong (rig.net) and RTCP
RTT_KINDS = ("net.rtt", "server.rtcp.rr")
#: the latency parts a live view shows beside each response
RESPONSE_PARTS = (
    "uplink_ms",
    "model_ms",
    "downlink_ms",
    "queue_ms",
    "detect_ms",  # endpointing wait and generation: model_ms cut at the system's decision
    "generation_ms",
)


class RolloutSink:
    def __init__(self, recorder: RolloutRecorder, publish: Publish | None = None) -> None:
        self.recorder = recorder
        self._publish = publish

    def put(self, record: Record | ControlRequest) -> None:
        """Write one record (and publish it); control requests are the caller's to send."""
        rec = self.recorder
        if isinstance(record, ChunkRecord):
            rec.chunk(record)
            # no live view: no view dict built per chunk
            if self._publish is not None and (record.dir == "up" or record.play_ns is not None):
                self.publish("chunk", _chunk_view(record))
        elif isinstance(record, EventRecord):
            rec.event(record)
            if record.source == "server":
                name = record.kind.removeprefix("server.")
                self.publish("protocol", {"name": name, "t_ns": record.t_ns})
            if record.kind in RTT_KINDS:
                self._rtt(record)
        elif isinstance(record, UserAudio):
            rec.user_audio(record.pcm)
        elif isinstance(record, SystemAudio):
            rec.system_audio(record.sample_rate, record.start_sample, record.pcm)
        elif isinstance(record, SystemPad):
            rec.system_pad(record.sample_rate, record.total_samples)
        elif isinstance(record, ReceivedAudio):
            rec.received_audio(record.sample_rate, record.pcm)

    def put_all(self, records: Iterable[Record | ControlRequest]) -> None:
        for record in records:
            self.put(record)

    def close(self) -> None:
        self.recorder.close()

    @property
    def backlog_high_water(self) -> int:
        return self.recorder.writer.high_water

    # --- live only ------------------------------------------------------------------------

    def status(self, state: str, **data: Any) -> None:
        self.publish("status", {"state": state, **data})

    def done(self, status: str, reason: str | None, verdict: Verdict | None) -> None:
        """The rollout ended: its status and whether the rig's own timing held."""
        self.status(
            "done",
            status=status,
            reason=reason,
            timing_valid=None if verdict is None else verdict.valid,
            timing_reason=None if verdict is None else verdict.reason,
        )

    def results(self, metrics: dict[str, Any]) -> None:
        """Response latencies (with their split) and the clock fit, for live views."""
        for r in metrics.get("responses", []):
            if r.get("latency_ms") is not None:
                parts = {k: r.get(k) for k in RESPONSE_PARTS}
                self.publish(
                    "response",
                    {"latency_ms": r["latency_ms"], "turn": r["turn"], "placement": "playback"}
                    | parts,
                )
        clock_fit = metrics.get("clock_fit")
        if isinstance(clock_fit, dict) and not clock_fit.get("refused"):
            rtt = clock_fit.get("rtt") or {}
            self.publish(
                "clock",
                {
                    "offset_ms": clock_fit.get("offset_ms"),
                    "drift_ppm": clock_fit.get("drift_ppm"),
                    "rtt_ms": rtt.get("rtt_p50_ms") if isinstance(rtt, dict) else None,
                },
            )

    def _rtt(self, record: EventRecord) -> None:
        """Each round trip as it is measured (the live view's RTT column and its history)."""
        rtt = record.data.get("rtt_ms")
        if isinstance(rtt, int | float) and not isinstance(rtt, bool):
            method = "rtcp" if record.kind == "server.rtcp.rr" else record.data.get("source")
            self.publish("rtt", {"rtt_ms": float(rtt), "method": method, "t_ns": record.t_ns})

    def publish(self, kind: str, data: dict[str, Any]) -> None:
        if self._publish is not None:
            try:
                self._publish(kind, data)
            except Exception:  # noqa: BLE001 - telemetry must never hurt the stream
                pass


def _chunk_view(r: ChunkRecord) -> dict[str, Any]:
    """What a live view shows of a chunk (the bridge reads these keys)."""
    out: dict[str, Any] = {"dir": r.dir, "seq": r.seq, "n_samples": r.n_samples, "t_ns": r.t_ns}
    if r.dir == "up":
        out["lateness_ns"] = r.lateness_ns
    else:
        out["play_ns"] = r.play_ns
    out["level_dbfs"] = r.level_dbfs
    return out
