"""The listener: what a person at the rig hears of the system, as a sans-I/O state machine.

How this works (h11 style: data in, records and requests out). The session feeds the
listener what arrives from the system and what the user does; each call returns the records
to write (`Record`: chunk rows, events, placed system audio) and the control requests to
send, in the order they happened. The listener owns

  playback   a listener's queue (rig.core.placement): each chunk at max(arrival, end of
             the previous one); `release(now)` hands out what has played by `now`
  onsets     system speech onsets on that playback timeline (rig.core.onset)
  barge-in   `barge_in(turn, t)` when a user turn starts: audio still queued is dropped
             (truncation) and a `truncate` request tells the system how much was heard;
             audio of a cut item that keeps arriving is recorded as received, never played
  counting   downlink chunk numbers (played or flushed), samples and the downlink rate
  the log    probes, server marks and heard chunks, for the session log (rig.core.log)

and answers `observe(t)` with what the director needs to decide the next frame. Nothing here
reads a clock, sleeps or does I/O: every time comes in with the item or the call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rig.core.director import Observation
from rig.core.events import ControlRequest, DownAudio, DownEvent
from rig.core.onset import OnsetDetector
from rig.core.path import PathLog
from rig.core.placement import PlaybackQueue
from rig.core.records import (
    ChunkRecord,
    EventRecord,
    HeardChunk,
    Probe,
    ReceivedAudio,
    Record,
    RttSample,
    ServerMark,
    SystemAudio,
    SystemPad,
)
from rig.core.responses import Onset
from rig.core.units import NS_PER_S, ms_to_ns
from rig.errors import ProtocolError

Output = Record | ControlRequest
#: an echoed probe older than this is not a round trip of a live path (a stale or forged t0)
MAX_ECHO_NS = 60 * NS_PER_S


@dataclass(frozen=True, slots=True)
class ListenerConfig:
    onset_threshold_dbfs: float = -40.0
    onset_gap_ms: float = 300.0
    #: a user turn that starts while system audio is still heard cuts it off
    truncate_on_barge_in: bool = True


class Listener:
    """The rig's ears for one rollout, on the session timeline that starts at `t0_ns`."""

    def __init__(self, t0_ns: int, config: ListenerConfig | None = None) -> None:
        self.t0_ns = t0_ns
        self.cfg = config or ListenerConfig()
        self.playback: PlaybackQueue | None = None  # created with the first audio (its rate)
        self._detector: OnsetDetector | None = None
        self.onsets: list[Onset] = []
        self.down_chunks = 0  # received audio chunks, played or flushed: the chunk seq
        self.down_samples = 0
        self.down_rate: int | None = None
        self.dropped_samples = 0  # audio of truncated items that arrived after the cut
        self.truncated_items: set[str] = set()
        self._last_item_id: str | None = None
        self.heard: list[HeardChunk] = []
        self.probes: list[Probe] = []
        self.marks: list[ServerMark] = []
        self.mark_pairs: list[tuple[int, int]] = []  # (server_ns, arrival_ns) of stamped marks
        self.path_rtt_ms: list[float] = []  # round trips the transport reported (RTCP RR)
        self.path = PathLog()  # round trips and send backlog of every source (net.*, RTCP)
        #: (arrival, round trip) of probes answered without server stamps (no server clock)
        self.probe_echoes: list[tuple[int, int]] = []

    # --- what arrives ----------------------------------------------------------------------

    def on_audio(self, item: DownAudio) -> list[Output]:
        """System audio arrived: place it, look for an onset, record it."""
        if self.down_rate is None:
            self.down_rate = item.sample_rate
            self.playback = PlaybackQueue(self.t0_ns, item.sample_rate)
            self._detector = OnsetDetector(
                item.sample_rate, self.cfg.onset_threshold_dbfs, self.cfg.onset_gap_ms
            )
        elif item.sample_rate != self.down_rate:
            raise ProtocolError(
                f"downlink sample rate changed mid-stream ({self.down_rate} -> {item.sample_rate})"
            )
        assert self.playback is not None and self._detector is not None
        item_id = item.extra.get("item_id") if item.extra else None
        if item_id:
            self._last_item_id = str(item_id)
        if item_id and item_id in self.truncated_items:
            # a client flushes a truncated item: recorded as received, never heard
            seq = self._count(item)
            self.dropped_samples += item.pcm.size
            extra = {**(item.extra or {}), "dropped": "truncated_item"}
            return [
                self._chunk_record(item, seq, None, extra),
                ReceivedAudio(item.sample_rate, item.pcm),
            ]
        start = self.playback.push(item.pcm, item.t_ns)
        play_ns = self.playback.timeline.time_of(start)
        seq = self._count(item)
        jb = item.extra.get("jb_ms") if item.extra else None
        self.heard.append(
            HeardChunk(
                seq,
                item.t_ns,
                play_ns,
                item.server_ts_ms,
                int(item.pcm.size),
                item.sample_rate,
                None if jb is None else float(jb),
            )
        )
        out: list[Output] = []
        off = self._detector.feed(item.pcm, start)
        if off is not None:
            off_ns = off * NS_PER_S // item.sample_rate
            server_ms = None if item.server_ts_ms is None else item.server_ts_ms + off_ns / 1e6
            self.onsets.append(Onset(play_ns + off_ns, item.t_ns + off_ns, server_ms, seq))
            out.append(
                EventRecord("system.onset", item.t_ns, {"play_ns": play_ns + off_ns, "seq": seq})
            )
        out.append(self._chunk_record(item, seq, play_ns, item.extra))
        out.append(ReceivedAudio(item.sample_rate, item.pcm))
        return out

    def on_event(self, item: DownEvent) -> list[Output]:
        """A protocol event arrived: record it; keep probe replies and server stamps."""
        data = dict(item.data)
        if item.server_ts_ms is not None:
            data["server_ts_ms"] = item.server_ts_ms
        if item.kind == "probe_reply":
            try:
                self.probes.append(
                    Probe(
                        int(data["t0_ns"]),
                        int(data["t1_server_ns"]),
                        int(data["t2_server_ns"]),
                        item.t_ns,
                    )
                )
            except (KeyError, TypeError, ValueError):
                self._echo(item)  # no server stamps: still a round trip (else malformed)
        self.path.on_event(item)
        if item.source == "rig":  # the rig's own doing (a dialect's history, path samples)
            return [EventRecord(item.kind, item.t_ns, data, "rig")]
        if item.kind != "probe_reply":
            self._mark(item)
        return [EventRecord(f"server.{item.kind}", item.t_ns, data, "server")]

    # --- what the user does ----------------------------------------------------------------

    def barge_in(self, turn: int, t_ns: int) -> list[Output]:
        """User turn `turn` starts at `t_ns`: if system audio is still heard, cut it off."""
        pb = self.playback
        if pb is None or not self.cfg.truncate_on_barge_in or not pb.busy_at(t_ns):
            return []
        released, dropped = pb.truncate(t_ns)
        if self._last_item_id is not None:
            # systems that tag audio by item (OpenAI) keep streaming the cut item for a
            # while: like a real client, the listener flushes it and never plays the rest
            self.truncated_items.add(self._last_item_id)
        out: list[Output] = [SystemAudio(pb.sample_rate, p.start_sample, p.pcm) for p in released]
        played_ms = round(pb.played_sample * 1000 / pb.sample_rate, 3)
        out.append(
            EventRecord(
                "playback.truncate",
                t_ns,
                {"turn": turn, "dropped_samples": dropped, "played_until_ms": played_ms},
            )
        )
        # what the listener heard of the audio received so far: the dialect maps it onto the
        # server's items (OpenAI `conversation.item.truncate` wants ms per item)
        heard = {
            "turn": turn,
            "played_samples": self.down_samples - pb.truncated_samples,
            "sample_rate": pb.sample_rate,
            "dropped_samples": dropped,
        }
        out.append(ControlRequest("truncate", heard))
        return out

    def release(self, now_ns: int) -> list[Output]:
        """System audio whose play time has come by `now_ns` (for system.wav)."""
        pb = self.playback
        if pb is None:
            return []
        return [SystemAudio(pb.sample_rate, p.start_sample, p.pcm) for p in pb.release(now_ns)]

    def finish(self, now_ns: int, user_track_ns: float) -> list[Output]:
        """The end: what played by `now_ns`, then system.wav padded to the user track."""
        out = self.release(now_ns)
        if self.playback is not None:
            rate = self.playback.sample_rate
            out.append(SystemPad(rate, math.ceil(user_track_ns * rate / NS_PER_S)))
        return out

    # --- what the director asks ------------------------------------------------------------

    def observe(self, t_ns: int) -> Observation:
        """What a listener at the rig knows about the system at `t_ns` (playback clock)."""
        pb, det = self.playback, self._detector
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

    @property
    def truncated_samples(self) -> int:
        return self.playback.truncated_samples if self.playback is not None else 0

    @property
    def down_pairs(self) -> list[tuple[int, int]]:
        """(server_ns, arrival_ns) of everything the server stamped: events, then audio."""
        chunks = [
            (ms_to_ns(c.server_ts_ms), c.t_ns) for c in self.heard if c.server_ts_ms is not None
        ]
        return [*self.mark_pairs, *chunks]

    # --- helpers ---------------------------------------------------------------------------

    def _count(self, item: DownAudio) -> int:
        """The next downlink chunk number (received audio, played or not)."""
        seq = self.down_chunks
        self.down_chunks += 1
        self.down_samples += item.pcm.size
        return seq

    def _echo(self, item: DownEvent) -> None:
        """A probe reply without server stamps: its round trip, if it echoes a sane t0."""
        t0 = item.data.get("t0_ns")
        if isinstance(t0, int) and not isinstance(t0, bool) and 0 <= item.t_ns - t0 < MAX_ECHO_NS:
            self.probe_echoes.append((item.t_ns, item.t_ns - t0))
            # an application-level round trip: the same path (and any delay the system adds
            # in front of its model) as the audio, so the split prefers it to WebSocket pings,
            # which the peer's protocol layer answers before that path
            self.path.rtt.append(RttSample(item.t_ns, item.t_ns - t0, "probe"))

    def _mark(self, item: DownEvent) -> None:
        server_ns = None if item.server_ts_ms is None else ms_to_ns(item.server_ts_ms)
        end = item.data.get("audio_end_ms")
        audio_end = float(end) if isinstance(end, int | float) else None
        self.marks.append(ServerMark(item.kind, item.t_ns, server_ns, audio_end))
        if server_ns is not None:
            self.mark_pairs.append((server_ns, item.t_ns))
        rtt = item.data.get("rtt_ms")
        if item.kind == "rtcp.rr" and isinstance(rtt, int | float):
            self.path_rtt_ms.append(float(rtt))

    @staticmethod
    def _chunk_record(
        item: DownAudio, seq: int, play_ns: int | None, extra: dict[str, Any] | None
    ) -> ChunkRecord:
        """chunks.jsonl row of a received chunk (play_ns None: never played)."""
        return ChunkRecord(
            "down",
            seq,
            int(item.pcm.size),
            item.sample_rate,
            item.t_ns,
            server_ts_ms=item.server_ts_ms,
            play_ns=play_ns,
            extra=extra,
            pcm=item.pcm,  # its level: measured by the writer thread, off the audio loop
        )
