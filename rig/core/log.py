"""The session log: what one rollout saw, frozen when its stream ends.

The session shell builds it from its uplink (send times, lateness, the turns played) and its
listener (probes, server marks, heard chunks, onsets, counters). It is the one input of the
metrics builder (rig.core.metrics) and of every analysis after the stream (clock fit and
latency split in rig.analysis): plain frozen data, so it pickles across to the analysis
worker process and nothing downstream reads a live session object.

Times are shared-clock ns unless the name says `peer` (the server's clock).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rig.core.director import TurnRecord
from rig.core.listener import Listener
from rig.core.records import HeardChunk, Probe, RttSample, SendBacklog, ServerMark
from rig.core.refmarks import PlayedMark
from rig.core.responses import Onset
from rig.core.timeline import Timeline
from rig.core.units import NS_PER_S
from rig.core.uplink import Prefill, Uplink


@dataclass(frozen=True, slots=True)
class SessionLog:
    t0_ns: int  # the session timeline's origin (pacer): where samples never sent would sit
    sample_rate: int  # uplink
    frame_samples: int
    send_ns: tuple[int, ...] = ()  # actual send time of uplink frame k
    probes: tuple[Probe, ...] = ()
    marks: tuple[ServerMark, ...] = ()  # server events (probe replies excluded)
    down_pairs: tuple[tuple[int, int], ...] = ()  # (server_ns, arrival_ns): events, then audio
    lateness_ns: tuple[int, ...] = ()
    stalls: int = 0
    prefill: Prefill | None = None
    turns: tuple[TurnRecord, ...] = ()  # user turns played, with a speech end
    onsets: tuple[Onset, ...] = ()
    heard: tuple[HeardChunk, ...] = ()  # downlink chunks placed for playback, in order
    down_chunks: int = 0  # received, played or flushed
    down_samples: int = 0
    down_rate: int | None = None
    truncated_samples: int = 0
    dropped_samples: int = 0
    truncated_items: tuple[str, ...] = ()
    path_rtt_ms: tuple[float, ...] = ()  # round trips the transport reported (RTCP RR)
    rtt: tuple[RttSample, ...] = ()  # round trips of every source, in arrival order
    backlog: tuple[SendBacklog, ...] = ()  # uplink bytes waiting to leave, sampled
    pings_lost: int = 0
    #: (arrival, round trip ns) of probes the server echoed without stamps (no server clock)
    probe_echoes: tuple[tuple[int, int], ...] = ()
    ref_marks: tuple[PlayedMark, ...] = ()  # scenario reference marks, as played
    drain_censored: bool = False  # a drain hit its cap while the system was talking
    talking_at_end: bool = False  # the system was talking at the last frame sent

    @classmethod
    def of(cls, uplink: Uplink, listener: Listener, prefill: Prefill | None = None) -> SessionLog:
        """Freeze what a session's uplink and listener saw."""
        cfg = uplink.pacer.config
        log = cls.heard_by(
            listener,
            t0_ns=uplink.pacer.t0_ns,
            sample_rate=cfg.sample_rate,
            frame_samples=cfg.frame_samples,
            send_ns=tuple(uplink.send_ns),
            turns=uplink.timed_turns(),
            lateness_ns=tuple(uplink.lateness_ns),
            stalls=uplink.pacer.stalls,
            prefill=prefill,
        )
        return replace(
            log,
            ref_marks=tuple(uplink.played_marks),
            drain_censored=uplink.director.censored,
            talking_at_end=uplink.talking_at_end,
        )

    @classmethod
    def heard_by(
        cls,
        listener: Listener,
        *,
        t0_ns: int,
        sample_rate: int,
        frame_samples: int,
        send_ns: tuple[int, ...],
        turns: tuple[TurnRecord, ...],
        lateness_ns: tuple[int, ...] = (),
        stalls: int = 0,
        prefill: Prefill | None = None,
    ) -> SessionLog:
        """Freeze what `listener` saw, with the send side given: a rig session's uplink
        (`of`) or a proxied client's audio as it passed (rig.core.clientside)."""
        return cls(
            t0_ns=t0_ns,
            sample_rate=sample_rate,
            frame_samples=frame_samples,
            send_ns=send_ns,
            probes=tuple(listener.probes),
            marks=tuple(listener.marks),
            down_pairs=tuple(listener.down_pairs),
            lateness_ns=lateness_ns,
            stalls=stalls,
            prefill=prefill,
            turns=turns,
            onsets=tuple(listener.onsets),
            heard=tuple(listener.heard),
            down_chunks=listener.down_chunks,
            down_samples=listener.down_samples,
            down_rate=listener.down_rate,
            truncated_samples=listener.truncated_samples,
            dropped_samples=listener.dropped_samples,
            truncated_items=tuple(sorted(listener.truncated_items)),
            path_rtt_ms=tuple(listener.path_rtt_ms),
            rtt=tuple(listener.path.rtt),
            backlog=tuple(listener.path.backlog),
            pings_lost=listener.path.pings_lost,
            probe_echoes=tuple(listener.probe_echoes),
        )

    @property
    def timeline(self) -> Timeline:
        return Timeline(self.t0_ns, self.sample_rate)

    @property
    def frame_ns(self) -> float:
        return self.frame_samples * NS_PER_S / self.sample_rate

    def sent_ns_of_sample(self, sample: int) -> int:
        """When the rig sent input sample position `sample` (end-exclusive, like a speech
        end): its frame's actual send time plus its offset in the frame; on the timeline for
        samples never sent."""
        n = self.frame_samples
        k = max(0, (sample - 1) // n)
        if k < len(self.send_ns):
            return self.send_ns[k] + (sample - k * n) * NS_PER_S // self.sample_rate
        return self.timeline.time_of(sample)
