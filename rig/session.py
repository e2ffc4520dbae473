"""One rollout: a live conversation between the rig and one system.

How this works: two tasks share one transport.
  send loop     waits for each uplink deadline on the shared clock (absolute, from the
                pacer), sends the frame, records deadline and actual time, and releases the
                audio a listener would have heard by then from the playback queue
  receive loop  stamps what arrives (the transport already did, at the socket), places
                downlink audio in the playback queue, finds speech onsets, records events
Neither awaits the disk: records go to the writer thread via non-blocking hand-offs.

The session ends when the plan has been played and the system has then been quiet for
`drain_quiet_s` on the playback clock (or at the hard cap `max_s`), or when the transport
fails: then the status says so with a reason, and everything recorded so far is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rig.audio.pcm import level_dbfs
from rig.clock.base import Clock
from rig.core.director import (
    Director,
    Drain,
    Observation,
    Play,
    Step,
    TurnRecord,
    WaitQuiet,
    steps_from_plan,
)
from rig.core.events import DownAudio, DownEvent
from rig.core.onset import OnsetDetector
from rig.core.pacer import Pacer, PacerConfig
from rig.core.placement import PlaybackQueue
from rig.core.plan import UserPlan
from rig.core.records import ChunkRecord, EventRecord
from rig.core.responses import Onset, lateness_summary, match_responses
from rig.core.units import NS_PER_MS, NS_PER_S
from rig.errors import DeviceError, ProtocolError, RigError, TransportError
from rig.recordings.writer import RolloutRecorder
from rig.transports.base import Transport

Publish = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True, slots=True)
class SessionConfig:
    frame_ms: float = 20.0
    start_lead_ms: float = 50.0
    drain_quiet_s: float = 1.5
    max_s: float = 120.0
    onset_threshold_dbfs: float = -40.0
    onset_gap_ms: float = 300.0
    send_end: bool = True
    truncate_on_barge_in: bool = True
    probe_interval_s: float = 0.0
    #: leading `prefill` audio goes out this many times faster than real time where the
    #: transport can carry it (WebSocket); sound cards and WebRTC play it in real time
    prefill_speed: float = 1.0

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class Session:
    def __init__(
        self,
        rollout_id: str,
        transport: Transport,
        plan: UserPlan,
        recorder: RolloutRecorder,
        clock: Clock,
        config: SessionConfig | None = None,
        publish: Publish | None = None,
        meta: dict[str, Any] | None = None,
        *,
        write_metrics: bool = True,
        phase: float | None = None,
    ) -> None:
        self.rollout_id = rollout_id
        # False: the caller writes metrics.json (the runner adds timing after analysis)
        self.write_metrics = write_metrics
        #: where in the frame period this stream's deadlines fall (0..1); the runner spreads
        #: concurrent streams over the period so their sends never pile up on one instant
        self.phase = phase
        self.meta = meta or {}
        self.transport = transport
        self.plan = plan
        self.rec = recorder
        self.clock = clock
        self.cfg = config or SessionConfig()
        self._publish = publish
        if plan.sample_rate != transport.uplink_rate:
            raise ValueError(
                f"plan is at {plan.sample_rate} Hz, the transport wants {transport.uplink_rate} Hz"
            )
        self.pacer_cfg = PacerConfig.from_ms(plan.sample_rate, self.cfg.frame_ms)
        self.pacer: Pacer | None = None
        self.prefill: dict[str, Any] = {}
        self.playback: PlaybackQueue | None = None
        self.onsets: list[Onset] = []
        self.send_ns: list[int] = []
        self.lateness_ns: list[int] = []
        self.down_chunks = 0
        self.down_samples = 0
        self.down_rate: int | None = None
        self.probes: list[dict[str, Any]] = []
        self.server_events: list[DownEvent] = []
        self.down_rows: list[dict[str, Any]] = []
        self.down_log: list[
            tuple[int, int, float | None, int]
        ] = []  # (t_ns, play_ns, server_ts_ms, n)
        self.status = "pending"
        self.reason: str | None = None
        self._onset_detector: OnsetDetector | None = None
        self._recv_error: BaseException | None = None
        self._pending_truncate: dict[str, Any] | None = None
        self.director: Director | None = None
        self.truncated_items: set[str] = set()
        self._last_item_id: str | None = None
        self.dropped_samples = 0
        self.observations: Any = None  # rig.analysis.latency.Observations, taken at close

    # --- telemetry ----------------------------------------------------------------------

    def publish(self, kind: str, data: dict[str, Any]) -> None:
        if self._publish is not None:
            try:
                self._publish(kind, data)
            except Exception:  # noqa: BLE001 - telemetry must never hurt the stream
                pass

    def event(self, kind: str, t_ns: int, source: str = "rig", **data: Any) -> None:
        self.rec.event(EventRecord(kind, t_ns, data, source))  # type: ignore[arg-type]

    # --- run ------------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        self.status = "connecting"
        self.publish("status", {"state": "connecting"})
        t_open = self.clock.now_ns()
        try:
            await self.transport.open()
        except RigError as exc:
            return await self._finish_early(exc, t_open)
        steps = self._steps()
        prefill = self._prefill_plan(steps)
        fast_frames, speed = prefill["fast_frames"], prefill["speed"]
        t0 = self.clock.now_ns() + round(self.cfg.start_lead_ms * NS_PER_MS)
        t0 -= Pacer.head_start_ns(self.pacer_cfg, fast_frames, speed)  # history before "now"
        if self.phase is not None:
            frame_ns = round(self.pacer_cfg.frame_ns)
            t0 += (round(self.phase * frame_ns) - t0) % frame_ns
        self.pacer = Pacer(self.pacer_cfg, t0, fast_frames=fast_frames, speed=speed)
        self.prefill = prefill
        self.status = "running"
        self.event(
            "session.start",
            t0,
            t0_ns=t0,
            frame_ms=self.pacer_cfg.frame_ms,
            frame_samples=self.pacer_cfg.frame_samples,
            sample_rate=self.plan.sample_rate,
            connect_ms=round((self.pacer.deadline_ns(0) - t_open) / 1e6, 3),  # to 1st frame
            transport=self._describe_transport(),
            session=self.cfg.as_dict(),
            prefill=prefill,
        )
        self.publish("status", {"state": "running", "t0_ns": t0})
        recv = asyncio.create_task(self._receive_loop(), name=f"recv-{self.rollout_id}")
        probe = (
            asyncio.create_task(self._probe_loop(), name=f"probe-{self.rollout_id}")
            if self.cfg.probe_interval_s > 0
            else None
        )
        try:
            await self._send_loop(recv, steps)
        except RigError as exc:
            self._set_error(exc)
        finally:
            if probe is not None:
                probe.cancel()
            if self.status in ("running", "ok", "no_audio", "timed_out") and self.cfg.send_end:
                with contextlib.suppress(RigError):
                    await self.transport.send_event("end", {})
            recv.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await recv
            await self.transport.close()
        if self._recv_error is not None and self.status == "running":
            self._set_error(self._recv_error)
        return self._close()

    async def _finish_early(self, exc: RigError, t_ns: int) -> dict[str, Any]:
        self._set_error(exc)
        self.event("transport.error", t_ns, reason=str(exc))
        with contextlib.suppress(Exception):
            await self.transport.close()
        metrics = {
            "status": self.status,
            "reason": self.reason,
            "rollout_id": self.rollout_id,
            **self.meta,
            "responses": [],
        }
        if self.write_metrics:
            self.rec.metrics(metrics)
        self.rec.close()
        self.publish("status", {"state": "done", "status": self.status, "reason": self.reason})
        return metrics

    def _describe_transport(self) -> dict[str, Any]:
        try:
            return self.transport.describe()
        except Exception as exc:  # noqa: BLE001 - a description must not end a rollout
            return {"error": f"{type(exc).__name__}: {exc}"}

    def _set_error(self, exc: BaseException) -> None:
        if isinstance(exc, ProtocolError):
            self.status = "protocol_error"
        elif isinstance(exc, TransportError):
            self.status = "transport_error"
        elif isinstance(exc, DeviceError):
            self.status = "device_error"
        else:
            self.status = "error"
        self.reason = str(exc) or type(exc).__name__

    def _steps(self) -> list[Step]:
        return list(self.plan.steps or []) or [
            *steps_from_plan(self.plan.pcm, self.plan.turns, self.plan.sample_rate),
            Drain(self.cfg.drain_quiet_s, self.cfg.max_s),
        ]

    def _prefill_plan(self, steps: list[Step]) -> dict[str, Any]:
        """How the leading prefill audio goes out: whole frames of it at `speed`."""
        samples = 0
        for step in steps:
            if not (isinstance(step, Play) and step.role == "prefill"):
                break
            samples += len(step.pcm)
        requested = self.cfg.prefill_speed
        out: dict[str, Any] = {
            "samples": samples,
            "requested_speed": requested,
            "speed": 1.0,
            "fast_frames": 0,
        }
        if samples == 0 or requested <= 1.0:
            return out
        if not self.transport.faster_than_real_time:
            out["reason"] = "this transport plays audio in real time (sound card, RTP)"
            return out
        out["speed"] = requested
        out["fast_frames"] = samples // self.pacer_cfg.frame_samples
        return out

    async def _send_loop(self, recv: asyncio.Task[None], steps: list[Step]) -> None:
        assert self.pacer is not None
        pacer = self.pacer
        n = self.pacer_cfg.frame_samples
        rate = self.plan.sample_rate
        max_frames = math.ceil(self.cfg.max_s * NS_PER_S / self.pacer_cfg.frame_ns)
        director = self.director = Director(
            steps, rate, n, pacer.t0_ns, threshold_dbfs=self.cfg.onset_threshold_dbfs
        )
        barge_seen = 0
        while True:
            seq = pacer.next_seq
            if seq >= max_frames:
                self.status = "timed_out"
                self.reason = f"hard cap of {self.cfg.max_s} s reached"
                return
            if recv.done():
                if self._recv_error is not None:
                    raise self._recv_error
                if director.done or self._only_drain_left(director):
                    self.status = "ok"
                    return
                raise TransportError("the system closed the connection before the user finished")
            deadline = pacer.deadline_ns(seq)
            await self.clock.sleep_until(deadline)
            frame = director.next_frame(self._observe(deadline))
            if frame is None:
                self.status = "ok"
                return
            pcm, marks = frame
            for mark in marks:  # manual activity markers lead the audio they mark
                if mark.kind == "turn.start":
                    await self._send_control("turn_start", {"turn": mark.data["turn"]})
            try:
                t_sent = await self.transport.send_audio(pcm, seq, deadline)
            except TransportError:
                await asyncio.sleep(0)  # let the receive loop report a root cause first
                if self._recv_error is not None:
                    raise self._recv_error from None
                raise
            timing, stall = pacer.record(t_sent)
            self.send_ns.append(t_sent)
            self.lateness_ns.append(timing.lateness_ns)
            lvl = level_dbfs(pcm)
            self.rec.user_audio(pcm)
            self.rec.chunk(
                ChunkRecord(
                    "up",
                    seq,
                    n,
                    rate,
                    t_sent,
                    deadline,
                    timing.lateness_ns,
                    level_dbfs=lvl,
                    extra=self._chunk_extra(seq),
                )
            )
            self.publish(
                "chunk",
                {
                    "dir": "up",
                    "seq": seq,
                    "n_samples": n,
                    "t_ns": t_sent,
                    "lateness_ns": timing.lateness_ns,
                    "level_dbfs": lvl,
                    "stall": stall,
                },
            )
            if stall:
                self.event("stall", t_sent, seq=seq, lateness_ns=timing.lateness_ns)
            for mark in marks:
                if mark.kind == "step.start":
                    continue
                t_mark = t_sent + mark.offset * NS_PER_S // rate
                self.event(
                    mark.kind, t_mark, sample=seq * n + mark.offset, frame_seq=seq, **mark.data
                )
            while barge_seen < len(director.barge_ins):
                at = director.barge_ins[barge_seen]
                barge_seen += 1
                turn = director.turns[-1].index if director.turns else -1
                self._on_user_turn_start(turn, t_sent + (at - seq * n) * NS_PER_S // rate)
                if self._pending_truncate is not None:
                    pending, self._pending_truncate = self._pending_truncate, None
                    await self._send_control("truncate", pending)
            for mark in marks:
                if mark.kind == "turn.end":
                    await self._send_control("turn_end", {"turn": mark.data["turn"]})
            self._release_playback(t_sent)

    def _chunk_extra(self, seq: int) -> dict[str, Any] | None:
        extra = self.transport.sent_extra(seq)
        if self.pacer is not None and seq < self.pacer.fast_frames:
            extra = {**(extra or {}), "prefill_speed": self.pacer.speed}  # a fast history frame
        return extra

    @staticmethod
    def _only_drain_left(director: Director) -> bool:
        return all(isinstance(s, Drain | WaitQuiet) for s in director.steps[director.i :])

    def _observe(self, t_ns: int) -> Observation:
        """What a listener at the rig knows about the system at `t_ns` (playback clock)."""
        pb, det = self.playback, self._onset_detector
        if pb is None or det is None or det.last_loud_end_sample is None:
            return Observation(t_ns, False, None, None, len(self.onsets))
        loud_end = min(det.last_loud_end_sample, pb.end_sample)
        return Observation(
            t_ns,
            loud_end > pb.timeline.sample_at(t_ns),
            pb.timeline.time_of(loud_end),
            self.onsets[-1].play_ns if self.onsets else None,
            len(self.onsets),
        )

    def _on_dropped_audio(self, item: DownAudio) -> None:
        """Audio of an item the listener already cut off: recorded as received, not played."""
        seq = self._count_down(item)
        self.dropped_samples += item.pcm.size
        self._record_down(item, seq, None, {**(item.extra or {}), "dropped": "truncated_item"})

    def _count_down(self, item: DownAudio) -> int:
        """The next downlink chunk number (received audio, played or not)."""
        seq = self.down_chunks
        self.down_chunks += 1
        self.down_samples += item.pcm.size
        return seq

    def _record_down(
        self, item: DownAudio, seq: int, play_ns: int | None, extra: dict[str, Any] | None
    ) -> float:
        """chunks.jsonl row of a received chunk (play_ns None: never played); its level."""
        lvl = level_dbfs(item.pcm)
        self.rec.chunk(
            ChunkRecord(
                "down",
                seq,
                int(item.pcm.size),
                item.sample_rate,
                item.t_ns,
                None,
                None,
                item.server_ts_ms,
                play_ns,
                lvl,
                extra,
            )
        )
        return lvl

    def _on_user_turn_start(self, turn: int, t_ns: int) -> None:
        """The user starts speaking: if the system is still being heard, that is a barge-in."""
        if self.playback is None or not self.cfg.truncate_on_barge_in:
            return
        if self.playback.busy_at(t_ns):
            released, dropped = self.playback.truncate(t_ns)
            if self._last_item_id is not None:
                # systems that tag audio by item (OpenAI) keep streaming the cut item for a
                # while: like a real client, the listener flushes it and never plays the rest
                self.truncated_items.add(self._last_item_id)
            for p in released:
                self.rec.system_audio(self.playback.sample_rate, p.start_sample, p.pcm)
            played_ms = round(self.playback.played_sample * 1000 / self.playback.sample_rate, 3)
            self.event(
                "playback.truncate",
                t_ns,
                turn=turn,
                dropped_samples=dropped,
                played_until_ms=played_ms,
            )
            # what the listener heard of the audio received so far: the dialect maps it onto
            # the server's items (OpenAI `conversation.item.truncate` wants ms per item)
            self._pending_truncate = {
                "turn": turn,
                "played_samples": self.down_samples - self.playback.truncated_samples,
                "sample_rate": self.playback.sample_rate,
                "dropped_samples": dropped,
            }

    async def _send_control(self, kind: str, data: dict[str, Any]) -> None:
        """A control request to the system (dialects that have no use for it send nothing)."""
        self.event(f"control.{kind}", self.clock.now_ns(), **data)
        await self.transport.send_event(kind, data)

    def _release_playback(self, now_ns: int) -> None:
        if self.playback is None:
            return
        for p in self.playback.release(now_ns):
            self.rec.system_audio(self.playback.sample_rate, p.start_sample, p.pcm)

    async def _receive_loop(self) -> None:
        try:
            async for item in self.transport.receive():
                if isinstance(item, DownAudio):
                    self._on_audio(item)
                else:
                    self._on_event(item)
        except asyncio.CancelledError:
            raise
        except RigError as exc:
            self._recv_error = exc
            self.event(
                "transport.error",
                self.clock.now_ns(),
                reason=str(exc),
                error_type=type(exc).__name__,
            )
        except Exception as exc:  # noqa: BLE001 - recorded as a rollout error, not a crash
            self._recv_error = exc
            self.event("session.error", self.clock.now_ns(), reason=f"{type(exc).__name__}: {exc}")

    def _on_audio(self, item: DownAudio) -> None:
        assert self.pacer is not None
        if self.down_rate is None:
            self.down_rate = item.sample_rate
            self.playback = PlaybackQueue(self.pacer.t0_ns, item.sample_rate)
            self._onset_detector = OnsetDetector(
                item.sample_rate, self.cfg.onset_threshold_dbfs, self.cfg.onset_gap_ms
            )
        elif item.sample_rate != self.down_rate:
            raise ProtocolError(
                f"downlink sample rate changed mid-stream ({self.down_rate} -> {item.sample_rate})"
            )
        assert self.playback is not None and self._onset_detector is not None
        item_id = item.extra.get("item_id") if item.extra else None
        if item_id:
            self._last_item_id = str(item_id)
        if item_id and item_id in self.truncated_items:
            self._on_dropped_audio(item)  # a client flushes a truncated item: never heard
            return
        start = self.playback.push(item.pcm, item.t_ns)
        play_ns = self.playback.timeline.time_of(start)
        seq = self._count_down(item)
        self.down_log.append((item.t_ns, play_ns, item.server_ts_ms, int(item.pcm.size)))
        if item.extra and "jb_ms" in item.extra:  # WebRTC: receive-path delay per frame
            self.down_rows.append(
                {
                    "dir": "down",
                    "t_ns": item.t_ns,
                    "n_samples": int(item.pcm.size),
                    "sample_rate": item.sample_rate,
                    "jb_ms": item.extra["jb_ms"],
                }
            )
        off = self._onset_detector.feed(item.pcm, start)
        if off is not None:
            off_ns = off * NS_PER_S // item.sample_rate
            self.onsets.append(
                Onset(
                    play_ns + off_ns,
                    item.t_ns + off_ns,
                    None if item.server_ts_ms is None else item.server_ts_ms + off_ns / 1e6,
                    seq,
                )
            )
            self.event("system.onset", item.t_ns, play_ns=play_ns + off_ns, seq=seq)
        lvl = self._record_down(item, seq, play_ns, item.extra)
        self.publish(
            "chunk",
            {
                "dir": "down",
                "seq": seq,
                "n_samples": int(item.pcm.size),
                "t_ns": item.t_ns,
                "play_ns": play_ns,
                "level_dbfs": lvl,
            },
        )

    def _on_event(self, item: DownEvent) -> None:
        data = dict(item.data)
        if item.server_ts_ms is not None:
            data["server_ts_ms"] = item.server_ts_ms
        if item.kind == "probe_reply":
            self.probes.append({**data, "t3_ns": item.t_ns})
        if item.source == "rig":  # the rig's own doing, reported by the dialect
            self.rec.event(EventRecord(item.kind, item.t_ns, data, "rig"))
            return
        self.server_events.append(item)
        self.rec.event(EventRecord(f"server.{item.kind}", item.t_ns, data, "server"))
        self.publish("protocol", {"name": item.kind, "t_ns": item.t_ns})

    async def _probe_loop(self) -> None:
        """Clock probes (four-timestamp exchanges) for peers that answer them."""
        k = 0
        while True:
            await asyncio.sleep(self.cfg.probe_interval_s)
            with contextlib.suppress(RigError):
                await self.transport.send_event("probe", {"id": k})
            k += 1

    # --- close ------------------------------------------------------------------------------

    def user_end_ns(self, speech_end_sample: int) -> int:
        """Shared-clock time the last speech sample left: its frame's send time + offset."""
        assert self.pacer is not None
        n = self.pacer_cfg.frame_samples
        k = max(0, (speech_end_sample - 1) // n)
        if k < len(self.send_ns):
            offset = speech_end_sample - k * n
            return self.send_ns[k] + offset * NS_PER_S // self.plan.sample_rate
        return self.pacer.timeline.time_of(speech_end_sample)

    def _add_webrtc_shares(self, responses: list[dict[str, Any]]) -> None:
        """Over WebRTC, split off the rig's own receive path (jitter buffer, codec lookahead)."""
        from rig.analysis.webrtc import decompose as webrtc_decompose

        rtts = [
            e.data["rtt_ms"]
            for e in self.server_events
            if e.kind == "rtcp.rr" and isinstance(e.data.get("rtt_ms"), int | float)
        ]
        rtt = sorted(rtts)[len(rtts) // 2] if rtts else None
        for r in responses:
            shares = webrtc_decompose(r, self.down_rows, rtt)
            if shares is not None:
                r["webrtc"] = shares

    def _turns(self) -> list[TurnRecord]:
        """User turns actually played (injections and prefills are not timed as turns)."""
        if self.director is None:
            return []
        return [
            t for t in self.director.turns if t.role == "turn" and t.speech_end_sample is not None
        ]

    def _close(self) -> dict[str, Any]:
        assert self.pacer is not None
        t_end = self.clock.now_ns()
        if self.playback is not None:
            self._release_playback(t_end)
            total = math.ceil(
                len(self.send_ns) * self.pacer_cfg.frame_ns * self.playback.sample_rate / NS_PER_S
            )
            self.rec.system_pad(self.playback.sample_rate, total)
        turns = self._turns()
        user_ends = [(t.index, self.user_end_ns(t.speech_end_sample)) for t in turns]  # type: ignore[arg-type]
        next_starts: list[int | None] = []
        for i, _t in enumerate(turns):
            nxt = turns[i + 1] if i + 1 < len(turns) else None
            next_starts.append(
                None
                if nxt is None or nxt.speech_start_sample is None
                else self.pacer.timeline.time_of(nxt.speech_start_sample)
            )
        responses = match_responses(user_ends, self.onsets, next_starts)
        # The clock fit and the latency split are analysis: a copy of what they need is taken
        # here (cheap), the work itself runs after the stream (in the runner's worker process,
        # or inline below for a session used on its own).
        clock_fit: dict[str, Any] | None = None
        try:
            from rig.analysis.latency import observations

            self.observations = observations(self)
        except Exception as exc:  # noqa: BLE001 - analysis failing must not lose the rollout
            clock_fit = {"error": f"{type(exc).__name__}: {exc}"}
        if self.down_rows:
            self._add_webrtc_shares(responses)
        if self.status == "ok" and self.down_chunks == 0:
            self.status, self.reason = "no_audio", "the system sent no audio"
        metrics: dict[str, Any] = {
            "status": self.status,
            "reason": self.reason,
            "rollout_id": self.rollout_id,
            **self.meta,
            "t0_ns": self.pacer.t0_ns,
            "sample_rate": self.plan.sample_rate,
            "system_sample_rate": self.down_rate,
            "frame_ms": self.pacer_cfg.frame_ms,
            "uplink": {
                "frames": len(self.send_ns),
                "lateness_ms": lateness_summary(self.lateness_ns),
                "stalls": self.pacer.stalls,
                "drift_ms": _drift_ms(self.lateness_ns),
                "audio_s": round(len(self.send_ns) * self.pacer_cfg.frame_ns / NS_PER_S, 3),
                "prefill": self.prefill,
            },
            "downlink": {
                "chunks": self.down_chunks,
                "audio_s": round(self.down_samples / self.down_rate, 3) if self.down_rate else 0.0,
                "truncated_samples": self.playback.truncated_samples if self.playback else 0,
                "dropped_after_truncate_samples": self.dropped_samples,
                "truncated_items": sorted(self.truncated_items),
            },
            "onsets_play_ns": [o.play_ns for o in self.onsets],
            "responses": responses,
            "clock_fit": clock_fit,
            "transport": self._describe_transport(),
            "writer_backlog_high_water": self.rec.writer.high_water,
        }
        try:
            self.transport.finish_metrics(metrics)
        except Exception as exc:  # noqa: BLE001 - analysis failing must not lose the rollout
            metrics["transport_metrics_error"] = f"{type(exc).__name__}: {exc}"
        self.event("session.end", t_end, status=self.status, reason=self.reason)
        if self.write_metrics:
            from rig.analysis.latency import apply_decomposition

            metrics = apply_decomposition(metrics, self.observations)
            self.rec.metrics(metrics)
        self.rec.close()
        if self.write_metrics:
            self.publish_results(metrics)
        self.publish("status", {"state": "done", "status": self.status, "reason": self.reason})
        return metrics

    def publish_results(self, metrics: dict[str, Any]) -> None:
        """Response latencies (with their split) and the clock fit, for live views."""
        clock_fit = metrics.get("clock_fit")
        for r in metrics.get("responses", []):
            if r.get("latency_ms") is not None:
                parts = ("uplink_ms", "model_ms", "downlink_ms", "queue_ms")
                self.publish(
                    "response",
                    {
                        "latency_ms": r["latency_ms"],
                        "turn": r["turn"],
                        "placement": "playback",
                        **{k: r.get(k) for k in parts},
                    },
                )
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


def _drift_ms(lateness_ns: list[int], window: int = 50) -> float | None:
    """Trend of send lateness: mean of the last `window` frames minus the first `window`.

    Deadlines are absolute, so a correct pacer shows no trend however long it runs; a pacer
    that slept one frame per frame would show its accumulated error here.
    """
    if len(lateness_ns) < 2 * window:
        return None
    head = sum(lateness_ns[:window]) / window
    tail = sum(lateness_ns[-window:]) / window
    return round((tail - head) / 1e6, 4)
