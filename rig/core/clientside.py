"""The client's uplink as it passes the recording proxy: the Uplink's counterpart when the
user is a real client, not the rig's own script (sans-I/O).

How this works. The proxy (rig.proxy) decodes each client message (the dialect's
`decode_client`) and hands its audio here with the time it came off the client's socket.
The user track is laid on the session timeline (sample 0 = `t0_ns`: the proxy sets it to
the client's first audio, unless system audio came first)
the way the listener lays out system audio: each chunk at max(its arrival, the end of the
previous one: arrival jitter under `fill_gap_ms` (250 ms) closes up), silence where the client sent
nothing for longer. So user.wav holds the client's audio
where it passed, and `sent_ns_of_sample` answers, like the rig's own send log, when a given
input sample passed: its chunk's arrival plus its offset in the chunk.

Turns are found in the audio, since a client's protocol rarely marks them: speech segments
on a per-sample energy gate (the same threshold the rig's plans use, rig.core.plan), and
consecutive segments belong to one turn unless the system's speech started between them
(a turn ends when the system answers it). Where a client does mark turns (OpenAI
`input_audio_buffer.commit`, Gemini `activityEnd`), the marks are recorded as events beside
the audio; the measured turns come from the audio either way, so every dialect is timed
the same way.

`log(listener)` freezes the rollout into the same `SessionLog` the rig's own sessions
produce, so metrics.json, the latency split and the timing analysis run unchanged.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

import numpy as np

from rig.audio.pcm import Pcm16, level_dbfs
from rig.core.director import TurnRecord
from rig.core.listener import Listener
from rig.core.log import SessionLog
from rig.core.records import ChunkRecord, Record, UserAudio
from rig.core.timeline import Timeline
from rig.core.units import NS_PER_S
from rig.errors import ProtocolError


@dataclass(frozen=True, slots=True)
class ClientConfig:
    threshold_dbfs: float = -40.0
    #: quiet this long (in the client's audio) separates two speech segments
    segment_gap_ms: float = 300.0
    #: frame of the send log when the client's chunks do not say (its first chunk's size)
    default_frame_ms: float = 20.0
    #: a chunk arriving this much after the end of the track starts a stretch of silence;
    #: less is arrival jitter, and the chunk follows on (the system counts input samples
    #: without gaps, so the track's sample k stays the system's k-th input sample)
    fill_gap_ms: float = 250.0


@dataclass(frozen=True, slots=True)
class _Chunk:
    start_sample: int
    n_samples: int
    t_ns: int  # arrival at the proxy


class ClientUplink:
    """The user side of one proxied connection."""

    def __init__(self, t0_ns: int, config: ClientConfig | None = None) -> None:
        self.t0_ns = t0_ns
        self.cfg = config or ClientConfig()
        self.rate: int | None = None
        self.frame_samples: int | None = None
        self.end_sample = 0
        self.chunks: list[_Chunk] = []
        self._starts: list[int] = []
        self.segments: list[list[int]] = []  # [first loud sample, last loud sample + 1]
        self._threshold = 32768.0 * 10 ** (self.cfg.threshold_dbfs / 20)

    @property
    def timeline(self) -> Timeline:
        return Timeline(self.t0_ns, self.rate or 16_000)

    def on_audio(
        self, pcm: Pcm16, sample_rate: int, t_ns: int, extra: dict[str, Any] | None = None
    ) -> list[Record]:
        """Client audio that arrived at `t_ns`: the user track and its chunk row."""
        if self.rate is None:
            self.rate = sample_rate
            self.frame_samples = int(pcm.size) or round(
                sample_rate * self.cfg.default_frame_ms / 1000
            )
        elif sample_rate != self.rate:
            raise ProtocolError(
                f"client audio sample rate changed mid-stream ({self.rate} -> {sample_rate})"
            )
        out: list[Record] = []
        start = self.timeline.sample_at(t_ns)
        if start - self.end_sample < round(self.cfg.fill_gap_ms * sample_rate / 1000):
            start = self.end_sample
        if start > self.end_sample:  # the client sent nothing for a while: silence
            out.append(UserAudio(np.zeros(start - self.end_sample, dtype=np.int16)))
        n = int(pcm.size)
        if n:
            out.append(UserAudio(pcm))
            self.chunks.append(_Chunk(start, n, t_ns))
            self._starts.append(start)
            self._segment(pcm, start)
        self.end_sample = start + n
        out.append(
            ChunkRecord(
                "up",
                len(self.chunks) - 1 if n else len(self.chunks),
                n,
                sample_rate,
                t_ns,
                play_ns=self.timeline.time_of(start),
                level_dbfs=level_dbfs(pcm) if n else None,
                extra=extra,
            )
        )
        return out

    def _segment(self, pcm: Pcm16, start: int) -> None:
        loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > self._threshold)
        if loud.size == 0:
            return
        gap = round(self.cfg.segment_gap_ms / 1000 * (self.rate or 16_000))
        breaks = np.flatnonzero(np.diff(loud) >= gap)
        pieces = np.split(loud, breaks + 1)
        for piece in pieces:
            first, last = start + int(piece[0]), start + int(piece[-1]) + 1
            if self.segments and first - self.segments[-1][1] < gap:
                self.segments[-1][1] = last
            else:
                self.segments.append([first, last])

    def passed_ns(self, sample: int) -> int:
        """When input sample position `sample` passed the proxy (its chunk's arrival plus
        its offset; on the timeline where the client sent nothing)."""
        i = bisect.bisect_right(self._starts, sample) - 1
        rate = self.rate or 16_000
        if i >= 0:
            c = self.chunks[i]
            if sample < c.start_sample + c.n_samples:
                return c.t_ns + (sample - c.start_sample) * NS_PER_S // rate
        return self.timeline.time_of(sample)

    def turns(self, onsets_play_ns: list[int]) -> tuple[TurnRecord, ...]:
        """Speech segments joined into turns: a turn ends where the system's speech started
        before the next segment (or with the last segment)."""
        out: list[TurnRecord] = []
        tl = self.timeline
        cur: list[int] | None = None
        for seg in self.segments:
            if cur is not None:
                end_ns, start_ns = tl.time_of(cur[1]), tl.time_of(seg[0])
                answered = any(end_ns <= t < start_ns for t in onsets_play_ns)
                if answered:
                    out.append(self._turn(len(out), cur))
                    cur = None
            cur = list(seg) if cur is None else [cur[0], seg[1]]
        if cur is not None:
            out.append(self._turn(len(out), cur))
        return tuple(out)

    @staticmethod
    def _turn(index: int, seg: list[int]) -> TurnRecord:
        return TurnRecord(index, "turn", f"client-{index}", seg[0], seg[1], seg[0], seg[1])

    def log(self, listener: Listener) -> SessionLog:
        """The frozen session log of this connection: the same shape as a rig session's.

        The send log has one entry per frame of `frame_samples` (the client's first chunk):
        when that frame's first sample passed the proxy, so `sent_ns_of_sample` gives each
        input sample's passing time as the rig's own log gives its send time."""
        n = self.frame_samples or 320
        rate = self.rate or listener.down_rate or 16_000
        frames = -(-self.end_sample // n)
        send_ns = tuple(self.passed_ns(k * n) for k in range(frames))
        onsets = [o.play_ns for o in listener.onsets]
        return SessionLog.heard_by(
            listener,
            t0_ns=self.t0_ns,
            sample_rate=rate,
            frame_samples=n,
            send_ns=send_ns,
            turns=self.turns(onsets),
        )
