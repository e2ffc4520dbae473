"""The one place a rollout's records go: the run directory and, beside it, live telemetry.

`RolloutSink.put(record)` hands each record the core produced to the writer thread (a
non-blocking hand-off: nothing here waits for the disk) and publishes the same record to
whoever watches live, so what the dashboard shows and what the run directory holds come
from one object and cannot disagree. Published, as `publish(event)` with one typed record
of rig.core.live per kind (the telemetry bridge, rig.telemetry.session_bridge, maps each
type onto bus events):

  chunk     every uplink chunk and every downlink chunk that was played (audio flushed
            after a barge-in is recorded, not shown)
  protocol  every server event
  status    the session's state changes (`status()`)
  rtt       each round trip as measured (WebSocket ping/pong, RTCP): `rtt_ms`, `method`
  response  each response latency as it happens (`live`: turn end to onset as played,
            rig.core.liveresponse), then with its split, and `clock` the clock fit, once
            the analysis after the stream is done (`results()`)

Publishing never raises into the audio loop: a failing subscriber costs its own events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal

from rig.audio.pcm import Pcm16, level_dbfs
from rig.core.events import ControlRequest
from rig.core.live import (
    LiveChunk,
    LiveClock,
    LiveEvent,
    LiveProtocol,
    LiveResponse,
    LiveRtt,
    LiveStatus,
)
from rig.core.liveresponse import LiveResponses
from rig.core.records import (
    ChunkRecord,
    EventRecord,
    ReceivedAudio,
    Record,
    SystemAudio,
    SystemPad,
    TrackAudio,
    UserAudio,
)
from rig.core.selfcheck import Verdict
from rig.recordings.writer import RolloutRecorder

Publish = Callable[[LiveEvent], None]
#: (dir, seq, n_samples, t_ns, lateness_ns, level_dbfs): a chunk view as its fields
ChunkLane = Callable[[Literal["up", "down"], int, int, int, "int | None", "float | None"], None]

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
        #: whether anyone watches now (a publish function's own `listening`, e.g.
        #: rig.telemetry.session_bridge's: the bus has a subscriber); chunk views, the
        #: per-frame part of the live feed, are built only then
        self._listening: Callable[[], bool] = getattr(publish, "listening", _always)
        #: a publish function's own per-chunk lane (`RolloutPublish.chunk`: the chunk as its
        #: fields, no LiveChunk or, for a folding subscriber, no event), if it has one
        self._lane: ChunkLane | None = getattr(publish, "chunk", None)
        self._live = LiveResponses()
        #: sees every played piece of system audio as it goes to system.wav, and its final
        #: padding (the echo condition hears the playback track through it: rig.echo.path)
        self.played: Callable[[Record], None] | None = None

    def put(self, record: Record | ControlRequest) -> None:
        """Write one record (and publish it); control requests are the caller's to send."""
        rec = self.recorder
        if isinstance(record, ChunkRecord):
            rec.chunk(record)
            # no live view: no view built per chunk (nor its level measured)
            if (
                self._publish is not None
                and (record.dir == "up" or record.play_ns is not None)
                and self._listening()
            ):
                self._chunk(_chunk_view(record))
        elif isinstance(record, EventRecord):
            rec.event(record)
            if record.source == "server":
                name = record.kind.removeprefix("server.")
                self.publish(LiveProtocol(name, record.t_ns))
            if record.kind in RTT_KINDS:
                self._rtt(record)
            if self._publish is not None:
                live = self._live.feed(record.kind, record.t_ns, record.data)
                if live is not None:
                    self.publish(LiveResponse(**live))
        elif isinstance(record, UserAudio):
            rec.user_audio(record.pcm, record.clean)
        elif isinstance(record, SystemAudio):
            rec.system_audio(record.sample_rate, record.start_sample, record.pcm)
            if self.played is not None:
                self.played(record)
        elif isinstance(record, SystemPad):
            rec.system_pad(record.sample_rate, record.total_samples)
            if self.played is not None:
                self.played(record)
        elif isinstance(record, ReceivedAudio):
            rec.received_audio(record.sample_rate, record.pcm)
        elif isinstance(record, TrackAudio):
            rec.track_audio(record.name, record.sample_rate, record.pcm)

    def up_frame(
        self,
        pcm: Pcm16,
        clean: Pcm16 | None,
        rate: int,
        seq: int,
        t_ns: int,
        t_sched_ns: int,
        lateness_ns: int,
        src: tuple[Pcm16, int] | None = None,
    ) -> None:
        """An uplink frame as sent: what `UserAudio` and its `ChunkRecord` would write,
        handed to the writer as one tuple (its line and level made there); `pcm` and
        `clean` are the frame's own (never changed afterwards); `src`: the track audio and
        position `pcm` is an unchanged view of (its level then comes from the track's table).
        A live view gets the chunk as `_chunk_view` shows it (its level measured here too),
        while one listens."""
        self.recorder.up_frame(pcm, clean, rate, seq, t_ns, t_sched_ns, lateness_ns, src)
        if self._publish is not None and self._listening():
            level = level_dbfs(pcm)
            lane = self._lane
            if lane is None:
                self.publish(LiveChunk("up", seq, int(pcm.size), t_ns, lateness_ns, None, level))
                return
            try:
                lane("up", seq, int(pcm.size), t_ns, lateness_ns, level)
            except Exception:  # noqa: BLE001 - telemetry must never hurt the stream
                pass

    def _chunk(self, view: LiveChunk) -> None:
        """A chunk view, through the publish function's lane where it has one."""
        lane = self._lane
        if lane is None or view.stall is not None:
            self.publish(view)
            return
        try:
            lane(view.dir, view.seq, view.n_samples, view.t_ns, view.lateness_ns, view.level_dbfs)
        except Exception:  # noqa: BLE001 - telemetry must never hurt the stream
            pass

    def put_all(self, records: Iterable[Record | ControlRequest]) -> None:
        """`put` each, handed to the writer as one item (a frame's records together)."""
        rec = self.recorder
        rec.gather()
        try:
            for record in records:
                self.put(record)
        finally:
            rec.hand_off()

    def close(self) -> None:
        self.recorder.close()

    @property
    def backlog_high_water(self) -> int:
        return self.recorder.writer.high_water

    # --- live only ------------------------------------------------------------------------

    def status(self, state: str, **data: Any) -> None:
        self.publish(LiveStatus(state, **data))

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
                self.publish(LiveResponse(r["latency_ms"], r["turn"], "playback", **parts))
        clock_fit = metrics.get("clock_fit")
        if isinstance(clock_fit, dict) and not clock_fit.get("refused"):
            rtt = clock_fit.get("rtt") or {}
            self.publish(
                LiveClock(
                    offset_ms=clock_fit.get("offset_ms"),
                    drift_ppm=clock_fit.get("drift_ppm"),
                    rtt_ms=rtt.get("rtt_p50_ms") if isinstance(rtt, dict) else None,
                )
            )

    def _rtt(self, record: EventRecord) -> None:
        """Each round trip as it is measured (the live view's RTT column and its history)."""
        rtt = record.data.get("rtt_ms")
        if isinstance(rtt, int | float) and not isinstance(rtt, bool):
            method = "rtcp" if record.kind == "server.rtcp.rr" else record.data.get("source")
            self.publish(LiveRtt(float(rtt), method, record.t_ns))

    def publish(self, event: LiveEvent) -> None:
        if self._publish is not None:
            try:
                self._publish(event)
            except Exception:  # noqa: BLE001 - telemetry must never hurt the stream
                pass


def _always() -> bool:
    return True


def _chunk_view(r: ChunkRecord) -> LiveChunk:
    """What a live view shows of a chunk."""
    up = r.dir == "up"
    return LiveChunk(
        r.dir,
        r.seq,
        r.n_samples,
        r.t_ns,
        lateness_ns=r.lateness_ns if up else None,
        play_ns=None if up else r.play_ns,
        level_dbfs=r.level,
    )
