"""Did the rig's own timing hold? The loop-lag monitor and the `timing_valid` verdict.

Every stamp the rig takes (a send, an arrival) is taken on the event loop; when the loop is
late, so is every stamp, whatever the transport. A rollout's numbers are only as good as
the loop that took them, so each rollout gets a verdict on the rig itself, distinct from the
turn-taking `timing` block. The verdict bounds the error of what was measured, figure by
figure (calibrated against the reference system's truth: bench/selfcheck.py, docs/pacing.md):

  uplink pacing     the rollout's own frames, send time minus deadline (measured exactly):
                    p99 beyond `lateness_p99_ms` (default 5), or any frame more than one
                    frame late (a stall)
  reply onsets      each onset's arrival stamp is late by at most the loop's lag at that
                    moment: the largest lag of any wake-up on the loop (monitor ticks, every
                    rollout's frame timers) from `near_before_ms` before the stamp to
                    `near_after_ms` after it, beyond `figure_ms`; a stamp the kernel took at
                    the message's own last byte (rig.transports.kstamp) is exact: bound 0
  latencies         onset stamp bound + how late the frame holding the user's end was sent
                    (latency counts from that send) + how late the frames went out that the
                    system's decision event (speech_stopped, ...) says it endpointed on,
                    beyond `figure_ms`
  received chunks   every downlink chunk's arrival stamp, bounded as an onset's, beyond
                    `loop_lag_max_ms` (default: one frame): the arrival placement and the
                    timing analysis (yields, backchannels) read them

What is recorded but not judged, because it bounds no stamp: the lag p50/p99/max of the
whole rollout (a stall while nothing arrived moves no figure; one while frames were due is a
stall of theirs), the loop thread's run-queue wait (schedstat: on two cores some wait is certain and
harmless; a wait that delays a stamp shows as lag there), steal, and the writer's backlog (its
hand-off never blocks the loop; its share of the GIL shows as lag).

The loop's record (`LoopMonitor`, rig.core.loopmonitor: lag histogram, late wake-ups with
their times, run delay, steal, backlog) is fed by rig.loopwatch and the sessions; the verdict
is one pure function of it and the session's log (`judge_session`).
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from rig.core.loopmonitor import KEEP_LAG_NS as KEEP_LAG_NS
from rig.core.loopmonitor import OVERDUE_NS
from rig.core.loopmonitor import LagView as LagView
from rig.core.loopmonitor import LoopMonitor as LoopMonitor
from rig.core.loopmonitor import LoopStats as LoopStats
from rig.core.loopmonitor import Mark as Mark
from rig.core.units import NS_PER_MS, NS_PER_S

if TYPE_CHECKING:  # the log pulls numpy; RunConfig (the CLI's parser) imports this module
    from rig.core.log import SessionLog


@dataclass(frozen=True, slots=True)
class TimingTolerance:
    """What the rig tolerates of itself before a rollout's timing is not valid."""

    #: pacing: p99 of the rollout's frames' lateness (`--timing-tolerance-ms`)
    lateness_p99_ms: float = 5.0
    #: the error bound of every measured figure (reply onsets, latencies; the same option)
    figure_ms: float = 5.0
    #: the delay bound of any received chunk's stamp (`--loop-lag-max-ms`, default one frame)
    loop_lag_max_ms: float = 20.0
    #: which wake-ups' lags count for a stamp: from this long before it (callbacks that ran
    #: ahead of it in the same loop iteration: up to ~2 ms with 100 streams) to this long
    #: after (timer wake-ups the same stall delayed run an iteration later); calibrated by
    #: bench/selfcheck.py (docs/pacing.md)
    near_before_ms: float = 2.5
    near_after_ms: float = 5.0
    #: the late wake-ups listed with each onset (`near`), for the record
    listed_ms: float = 10.0

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class FigureBounds:
    """How far off each measured figure of one rollout can be, from the loop's own record.
    `onset_ms[k]`: the delay bound of onset k's arrival stamp (the onset's downlink chunk
    `onset_seq[k]`); `latency_ms[j]`: the error bound of response j's latency (the turn
    `latency_turn[j]`)."""

    onset_seq: tuple[int, ...] = ()
    onset_ms: tuple[float, ...] = ()
    latency_turn: tuple[int, ...] = ()
    latency_ms: tuple[float, ...] = ()
    #: per onset, the late wake-ups its bound was made of: (ms from the stamp, lag ms)
    onset_near: tuple[tuple[tuple[float, float], ...], ...] = ()
    #: per latency: how late its end frame and its decision's frames went out (ms; None: the
    #: system sent no decision event)
    latency_parts: tuple[tuple[float, float | None], ...] = ()
    #: the largest delay bound of any received chunk's arrival stamp (None: not measured)
    chunk_ms: float | None = None

    def as_dict(self) -> dict[str, Any]:
        near = self.onset_near or tuple(() for _ in self.onset_seq)
        parts = self.latency_parts or tuple((0.0, None) for _ in self.latency_turn)
        return {
            "onsets": [
                {"seq": q, "stamp_ms": b, "near": [list(e) for e in n]}
                for q, b, n in zip(self.onset_seq, self.onset_ms, near, strict=True)
            ],
            "latencies": [
                {"turn": t, "error_ms": b, "end_late_ms": p[0], "decision_late_ms": p[1]}
                for t, b, p in zip(self.latency_turn, self.latency_ms, parts, strict=True)
            ],
            "chunk_max_ms": self.chunk_ms,
        }


class Answered(NamedTuple):
    """One answered turn, as the figure bounds need it (shared-clock ns)."""

    turn: int
    end_ns: int  # the user's end as sent
    onset_ns: int  # the reply onset's arrival stamp
    #: (from, to): sends in this span may hold the frame whose arrival let the system detect
    #: the end (before the arrival of its decision event, e.g. speech_stopped); None: no event
    decided: tuple[int, int] | None = None


def figure_bounds(
    monitor: LoopMonitor,
    onsets: Sequence[tuple[int, int]],
    responses: Sequence[Answered],
    send_ns: Sequence[int],
    lateness_ns: Sequence[int],
    tolerance: TimingTolerance,
    chunks: Sequence[int] = (),
    exact: Collection[int] = (),
) -> FigureBounds:
    """Error bounds of a rollout's figures. `onsets`: (chunk seq, arrival stamp) of each
    reply onset; `responses`: each answered turn; `send_ns` and `lateness_ns`: the
    rollout's uplink frames in order; `chunks`: every received chunk's arrival stamp (the
    arrival placement and the timing analysis read them); `exact`: arrival stamps the
    kernel took at the message's own last byte (rig.transports.kstamp): bound 0.

    An arrival stamp taken by the loop is late by how long the loop took to get to the
    socket, which is what every wake-up near it measured (`lag_near`). A latency runs from
    the user's end as sent (the send stamp of the frame holding it: exact) to the onset
    stamp, so it is off by the onset stamp's delay plus how late that frame went out (the
    user stopped on schedule), plus how late the frame went out whose arrival let the system
    detect the end (the reply waits for it). Which frame that was only the system knows;
    where it says when it decided (a decision event), the frames sent in the round trip
    before that event's arrival are the candidates; where it does not, the pacing checks
    bound it."""
    before = round(tolerance.near_before_ms * NS_PER_MS)
    after = round(tolerance.near_after_ms * NS_PER_MS)
    near = round(tolerance.listed_ms * NS_PER_MS)
    responses = [Answered(*r) for r in responses]  # plain tuples welcome
    stamps = [t for _, t in onsets] + [r.onset_ns for r in responses] + list(chunks)
    view = monitor.view(
        min(stamps, default=0) - max(before, near), max(stamps, default=0) + OVERDUE_NS
    )

    def bound(t: int) -> int:
        return 0 if t in exact else view.lag_near(t, before, after)

    stamp = {t: bound(t) for _, t in onsets}
    for r in responses:
        if r.onset_ns not in stamp:
            stamp[r.onset_ns] = bound(r.onset_ns)
    lat: list[float] = []
    parts: list[tuple[float, float | None]] = []
    for r in responses:
        i = bisect.bisect_right(send_ns, r.end_ns) - 1  # the frame holding the user's end
        end_late = max(0, lateness_ns[i]) if 0 <= i < len(lateness_ns) else 0
        decided = None
        if r.decided is not None:
            lo = bisect.bisect_left(send_ns, r.decided[0])
            hi = bisect.bisect_right(send_ns, r.decided[1])
            decided = max((max(0, lateness_ns[k]) for k in range(lo, hi)), default=0)
        lat.append(_ms(stamp[r.onset_ns] + end_late + (decided or 0)))
        parts.append((_ms(end_late), None if decided is None else _ms(decided)))
    return FigureBounds(
        onset_seq=tuple(q for q, _ in onsets),
        onset_ms=tuple(_ms(stamp[t]) for _, t in onsets),
        latency_turn=tuple(r.turn for r in responses),
        latency_ms=tuple(lat),
        onset_near=tuple(
            tuple((_ms(dt), _ms(lag)) for dt, lag in view.late_near(t, near)) for _, t in onsets
        ),
        latency_parts=tuple(parts),
        chunk_ms=_chunk_ms(view, chunks, exact, before, after),
    )


#: events by which a system says "the user's turn ended" (as rig.analysis.endpoint reads them)
DECISION_KINDS = (
    "speech_stopped",
    "input_audio_buffer.speech_stopped",
    "rtvi.user-stopped-speaking",
    "rtvi.vad-user-stopped-speaking",
    "user_stopped_speaking",
)
#: round-trip sources that are the path's (the kernel's tcp_info smooths in delayed ACKs)
PATH_RTT_SOURCES = ("ws_ping", "probe", "rtcp")
#: the decision's candidate frames when no round trip was measured
DECIDED_DEFAULT_NS = 100 * NS_PER_MS


def log_figure_bounds(
    log: SessionLog,
    responses: Sequence[Mapping[str, Any]],
    monitor: LoopMonitor,
    tolerance: TimingTolerance,
    exact: Collection[int] = (),
) -> FigureBounds:
    """`figure_bounds` of a finished session: its onsets and frames from the log, its answered
    turns from metrics' `responses`; each onset at its chunk's arrival stamp, each decision
    window the largest measured round trip + two frames before the decision's arrival;
    `exact`: the arrival stamps the transport measured exactly."""
    arrival = {c.seq: c.t_ns for c in log.heard}
    onsets = [(o.chunk_seq, arrival.get(o.chunk_seq, o.arrival_ns)) for o in log.onsets]
    rtts = [r.rtt_ns for r in log.rtt if r.source in PATH_RTT_SOURCES]
    frame_ns = log.frame_samples * NS_PER_S // log.sample_rate
    back_ns = max(rtts) + 2 * frame_ns if rtts else DECIDED_DEFAULT_NS
    answered: list[Answered] = []
    for r in responses:
        seq, end, onset = r.get("onset_chunk_seq"), r.get("user_end_ns"), r.get("onset_arrival_ns")
        if isinstance(seq, int) and isinstance(end, int) and isinstance(onset, int):
            stop = next(
                (m for m in log.marks if end <= m.t_ns <= onset and m.kind in DECISION_KINDS),
                None,
            )
            decided = None if stop is None else (stop.t_ns - back_ns, stop.t_ns)
            answered.append(
                Answered(int(r.get("turn") or 0), end, arrival.get(seq, onset), decided)
            )
    chunks = [c.t_ns for c in log.heard]
    return figure_bounds(
        monitor, onsets, answered, log.send_ns, log.lateness_ns, tolerance, chunks, exact
    )


def _chunk_ms(
    view: LagView, chunks: Sequence[int], exact: Collection[int], before: int, after: int
) -> float | None:
    """The largest bound of any received chunk's stamp (None: no chunk)."""
    if not chunks:
        return None
    looped = [t for t in chunks if t not in exact] if exact else chunks
    return _ms(view.lag_over(looped, before, after)) if looped else 0.0


def _ms(ns: int) -> float:
    return round(ns / NS_PER_MS, 3)


@dataclass(frozen=True, slots=True)
class Verdict:
    valid: bool
    reasons: tuple[str, ...]
    measured: dict[str, Any]

    @property
    def reason(self) -> str | None:
        return "; ".join(self.reasons) or None

    def as_dict(self, tolerance: TimingTolerance) -> dict[str, Any]:
        return {
            "reasons": list(self.reasons),
            **self.measured,
            "tolerance": tolerance.as_dict(),
        }


def judge(
    lateness_p99_ms: float | None,
    stalls: int,
    loop: LoopStats | None,
    tolerance: TimingTolerance,
    device_xruns: int = 0,
    figures: FigureBounds | None = None,
    transport_reasons: Sequence[str] = (),
) -> Verdict:
    """The verdict on the rig's own timing for one rollout, with every reason it failed (one
    line each). A sound-card xrun is the rig's own audio path missing its deadline, like a
    stall; a transport may add its own (residual own echo: rig.transports.deviceecho)."""
    tol = tolerance
    reasons: list[str] = list(transport_reasons)
    if device_xruns:
        reasons.append(f"{device_xruns} sound-card xrun{'s' if device_xruns != 1 else ''}")
    if lateness_p99_ms is not None and lateness_p99_ms > tol.lateness_p99_ms:
        reasons.append(f"uplink lateness p99 {lateness_p99_ms:.2f} ms > {tol.lateness_p99_ms} ms")
    if stalls:
        reasons.append(f"{stalls} stalled frame{'s' if stalls != 1 else ''}")
    if loop is None:
        reasons.append("event loop lag not measured")
    if figures is not None:
        reasons.extend(_figure_reasons(figures, tol.figure_ms))
        if figures.chunk_ms is not None and figures.chunk_ms > tol.loop_lag_max_ms:
            reasons.append(
                f"a received chunk stamped up to {figures.chunk_ms:.1f} ms late (the loop's "
                f"lag at its arrival; > {tol.loop_lag_max_ms} ms)"
            )
    measured: dict[str, Any] = {
        "uplink_lateness_p99_ms": lateness_p99_ms,
        "stalls": stalls,
        "loop": None if loop is None else loop.as_dict(),
        "figures": None if figures is None else figures.as_dict(),
    }
    return Verdict(not reasons, tuple(reasons), measured)


def _figure_reasons(f: FigureBounds, limit_ms: float) -> list[str]:
    out: list[str] = []
    bad = [b for b in f.onset_ms if b > limit_ms]
    if bad:
        out.append(
            f"{len(bad)} of {len(f.onset_ms)} reply onsets stamped up to {max(bad):.1f} ms "
            f"late (the loop's lag at their arrival; > {limit_ms} ms)"
        )
    bad = [b for b in f.latency_ms if b > limit_ms]
    if bad:
        out.append(
            f"{len(bad)} of {len(f.latency_ms)} latencies off by up to {max(bad):.1f} ms "
            f"(onset stamp + late frames at the user's end or the system's decision; "
            f"> {limit_ms} ms)"
        )
    return out


def judge_session(
    metrics: Mapping[str, Any],
    log: SessionLog | None,
    loop: LoopStats | None,
    monitor: LoopMonitor,
    tolerance: TimingTolerance,
    exact: Collection[int] = (),
) -> Verdict:
    """The verdict for a finished session from its metrics (pacing, responses, xruns), its
    log and the loop's record of its span; `exact`: arrival stamps measured exactly (the
    kernel's: no loop lag in them)."""
    uplink = metrics.get("uplink") or {}
    p99 = (uplink.get("lateness_ms") or {}).get("p99")
    stalls = int(uplink.get("stalls") or 0)
    xruns = metrics.get("device_xruns")
    figures = None
    if log is not None and loop is not None:
        responses = metrics.get("responses") or []
        figures = log_figure_bounds(log, responses, monitor, tolerance, exact)
    n_xruns = xruns if isinstance(xruns, int) else 0
    more = [str(r) for r in metrics.get("transport_timing_reasons") or []]
    return judge(p99, stalls, loop, tolerance, n_xruns, figures, more)
