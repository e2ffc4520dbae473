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
                    `near_after_ms` after it, beyond `figure_ms`
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

`LoopMonitor` is sans-I/O: the shell (rig.loopwatch) feeds it (due, woke) pairs, run-delay
totals and backlog samples with their times, the sessions their frames' timer wake-ups; a
rollout takes a `mark()` when it starts and `since(mark, t_ns)` when it ends. Lag goes into a
fixed histogram (0.25 ms bins), so a mark is a copy of ~400 ints and a summary needs no sort
of the rollout's samples; lags above 1 ms are kept with their times for the figure bounds.
"""

from __future__ import annotations

import bisect
import itertools
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from rig.core.log import SessionLog
from rig.core.units import NS_PER_MS, NS_PER_S

BIN_NS = 250_000  # 0.25 ms
N_BINS = 400  # 0..100 ms, the last bin holds everything above
#: lags, run delays and backlogs above these are kept one by one (for maxima in a window)
KEEP_LAG_NS = NS_PER_MS
KEEP_EVENTS = 200_000
#: late sends closer together than this are kept as one (the largest)
MERGE_NS = NS_PER_MS
#: how far after a stamp (and how many) wake-ups that were due before it are looked for
OVERDUE_NS = 1_000 * NS_PER_MS
OVERDUE_SCAN = 64


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
class Mark:
    """Where a rollout started in the monitor's streams."""

    t_ns: int
    bins: tuple[int, ...]
    ticks: int
    run_delay_ns: int | None
    steal_ns: int | None = None


@dataclass(frozen=True, slots=True)
class LoopStats:
    """The loop as one rollout saw it (between its mark and its end)."""

    ticks: int
    lag_p50_ms: float | None
    lag_p99_ms: float | None
    lag_max_ms: float | None
    run_delay_ms: float | None  # None: the kernel's schedstat was not readable
    run_delay_share: float | None
    backlog_max: int
    span_ms: float
    #: CPU time the hypervisor took from this VM in the span (all CPUs, /proc/stat `steal`,
    #: 10 ms ticks): a stall with neither run delay nor steal is the loop's own
    steal_ms: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class LoopMonitor:
    """Running record of the loop's lag, the loop thread's run delay and the writer backlog."""

    def __init__(self) -> None:
        self._bins = [0] * N_BINS
        self.ticks = 0
        self._big_t: deque[int] = deque(maxlen=KEEP_EVENTS)  # lags above KEEP_LAG_NS
        self._big_lag: deque[int] = deque(maxlen=KEEP_EVENTS)
        self._backlog_t: deque[int] = deque(maxlen=KEEP_EVENTS)  # backlog samples > 0
        self._backlog_n: deque[int] = deque(maxlen=KEEP_EVENTS)
        self._run_delay_ns: int | None = None
        self._steal_ns: int | None = None
        self.max_lag_ns = 0
        #: late frame wake-ups of every stream on the loop (> KEEP_LAG_NS; one per
        #: MERGE_NS, its largest lag: 50 streams late together are one event)
        self._send_t: deque[int] = deque(maxlen=KEEP_EVENTS)
        self._send_lag: deque[int] = deque(maxlen=KEEP_EVENTS)

    def tick(self, due_ns: int, woke_ns: int) -> int:
        """The periodic task was due at `due_ns` and ran at `woke_ns`; returns the lag."""
        lag = max(0, woke_ns - due_ns)
        self._bins[min(lag // BIN_NS, N_BINS - 1)] += 1
        self.ticks += 1
        if lag > KEEP_LAG_NS:
            self._big_t.append(woke_ns)
            self._big_lag.append(lag)
        if lag > self.max_lag_ns:
            self.max_lag_ns = lag
        return lag

    def frame_woke(self, due_ns: int, woke_ns: int) -> None:
        """A stream on this loop slept until its frame's deadline `due_ns` and woke at
        `woke_ns`: a timer wake-up like a tick, and with many streams a far denser probe of
        the loop's lag than the ticks (a stream already behind its deadline is no probe:
        the session feeds only wake-ups from a real wait)."""
        lag = woke_ns - due_ns
        if lag <= KEEP_LAG_NS:
            return
        if self._send_t and woke_ns - self._send_t[-1] < MERGE_NS:
            if lag > self._send_lag[-1]:
                self._send_lag[-1] = lag
            return
        self._send_t.append(woke_ns)
        self._send_lag.append(lag)

    def view(self, lo_ns: int, hi_ns: int) -> LagView:
        """The kept late wake-ups (ticks and frame timers) that woke in [lo_ns, hi_ns], as
        plain sorted lists: one pass over the deques, so a rollout's many stamps are bounded
        by bisection on lists (the deques can hold 10^5 events after an overload)."""
        pairs: list[tuple[int, int]] = []
        for ts, vs in ((self._big_t, self._big_lag), (self._send_t, self._send_lag)):
            i, j = bisect.bisect_left(ts, lo_ns), bisect.bisect_right(ts, hi_ns)
            pairs.extend(zip(itertools.islice(ts, i, j), itertools.islice(vs, i, j), strict=True))
        pairs.sort()
        return LagView([t for t, _ in pairs], [v for _, v in pairs])

    def lag_near(self, t_ns: int, before_ns: int, after_ns: int) -> int:
        """`LagView.lag_near` for one stamp."""
        return self.view(t_ns - before_ns, t_ns + OVERDUE_NS).lag_near(t_ns, before_ns, after_ns)

    def run_delay(self, total_wait_ns: int) -> None:
        """The loop thread's total run-queue wait so far (schedstat's second field)."""
        self._run_delay_ns = total_wait_ns

    def steal(self, total_steal_ns: int) -> None:
        """The machine's total steal time so far (/proc/stat, summed over CPUs)."""
        self._steal_ns = total_steal_ns

    def backlog(self, t_ns: int, items: int) -> None:
        """The writer's queue length at `t_ns` (only non-zero samples are kept)."""
        if items > 0:
            self._backlog_t.append(t_ns)
            self._backlog_n.append(items)

    def mark(self, t_ns: int) -> Mark:
        return Mark(t_ns, tuple(self._bins), self.ticks, self._run_delay_ns, self._steal_ns)

    def since(self, mark: Mark, t_ns: int) -> LoopStats:
        """The loop between `mark` and `t_ns`."""
        counts = [a - b for a, b in zip(self._bins, mark.bins, strict=True)]
        n = self.ticks - mark.ticks
        span_ns = max(0, t_ns - mark.t_ns)
        lag_max = _max_after(self._big_t, self._big_lag, mark.t_ns)
        if lag_max is None and n:
            top = max(i for i, c in enumerate(counts) if c)
            lag_max = min((top + 1) * BIN_NS, KEEP_LAG_NS)  # all below the kept threshold
        run_ms = share = None
        if mark.run_delay_ns is not None and self._run_delay_ns is not None:
            run_ns = max(0, self._run_delay_ns - mark.run_delay_ns)
            run_ms = round(run_ns / NS_PER_MS, 3)
            share = round(run_ns / span_ns, 4) if span_ns else 0.0
        max_ms = None if lag_max is None else round(lag_max / NS_PER_MS, 3)
        steal_ms = None
        if mark.steal_ns is not None and self._steal_ns is not None:
            steal_ms = round(max(0, self._steal_ns - mark.steal_ns) / NS_PER_MS, 3)
        return LoopStats(
            ticks=n,
            lag_p50_ms=_capped(_quantile_ms(counts, n, 0.50), max_ms),
            lag_p99_ms=_capped(_quantile_ms(counts, n, 0.99), max_ms),
            lag_max_ms=max_ms,
            run_delay_ms=run_ms,
            run_delay_share=share,
            backlog_max=_max_after(self._backlog_t, self._backlog_n, mark.t_ns) or 0,
            span_ms=round(span_ns / NS_PER_MS, 3),
            steal_ms=steal_ms,
        )


class LagView:
    """Late wake-ups of a stretch of the loop's time: `woke_ns` sorted, `lag_ns` beside."""

    def __init__(self, woke_ns: list[int], lag_ns: list[int]) -> None:
        self.woke_ns = woke_ns
        self.lag_ns = lag_ns

    def lag_near(self, t_ns: int, before_ns: int, after_ns: int) -> int:
        """The largest lag of any wake-up in [t_ns - before_ns, t_ns + after_ns], or of one
        due before `t_ns` that ran after it however late (an overloaded loop wakes seldom):
        how late the loop got to things around a stamp taken at `t_ns`; lags up to
        KEEP_LAG_NS count as that bound."""
        ts, vs = self.woke_ns, self.lag_ns
        i, j = bisect.bisect_left(ts, t_ns - before_ns), bisect.bisect_right(ts, t_ns + after_ns)
        worst = max(vs[i:j], default=KEEP_LAG_NS)
        k = bisect.bisect_left(ts, t_ns)  # wake-ups after the stamp that were due before it
        for m in range(k, min(k + OVERDUE_SCAN, len(ts))):
            if ts[m] > t_ns + OVERDUE_NS:
                break
            if ts[m] - vs[m] <= t_ns:
                worst = max(worst, vs[m])
        return max(worst, KEEP_LAG_NS)

    def late_near(self, t_ns: int, within_ns: int, most: int = 16) -> list[tuple[int, int]]:
        """The late wake-ups in [t_ns - within_ns, t_ns + within_ns] as (woke - t_ns, lag),
        at most `most` of them (the largest lags), in time order: what a flagged onset's
        bound was made of."""
        ts, vs = self.woke_ns, self.lag_ns
        i, j = bisect.bisect_left(ts, t_ns - within_ns), bisect.bisect_right(ts, t_ns + within_ns)
        found = [(ts[k] - t_ns, vs[k]) for k in range(i, j)]
        return sorted(sorted(found, key=lambda e: -e[1])[:most])


def _max_after(ts: deque[int], vs: deque[int], t_ns: int) -> int | None:
    i = bisect.bisect_left(ts, t_ns)
    if i >= len(ts):
        return None
    return max(vs[k] for k in range(i, len(ts)))


def _capped(q_ms: float | None, max_ms: float | None) -> float | None:
    return q_ms if q_ms is None or max_ms is None else min(q_ms, max_ms)


def _quantile_ms(counts: list[int], n: int, q: float) -> float | None:
    """Upper edge of the bin holding quantile `q` (a bound, never an underestimate)."""
    if n <= 0:
        return None
    need = q * n
    acc = 0
    for i, c in enumerate(counts):
        acc += c
        if acc >= need:
            return round((i + 1) * BIN_NS / NS_PER_MS, 3)
    return round(N_BINS * BIN_NS / NS_PER_MS, 3)


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
) -> FigureBounds:
    """Error bounds of a rollout's figures. `onsets`: (chunk seq, arrival stamp) of each
    reply onset; `responses`: each answered turn; `send_ns` and `lateness_ns`: the
    rollout's uplink frames in order; `chunks`: every received chunk's arrival stamp (the
    arrival placement and the timing analysis read them).

    An arrival stamp is late by how long the loop took to get to the socket, which is what
    every wake-up near it measured (`lag_near`). A latency runs from the user's end as sent
    (the send stamp of the frame holding it: exact) to the onset stamp, so it is off by the
    onset stamp's delay plus how late that frame went out (the user stopped on schedule),
    plus how late the frame went out whose arrival let the system detect the end (the reply
    waits for it). Which frame that was only the system knows; where it says when it
    decided (a decision event), the frames sent in the round trip before that event's
    arrival are the candidates; where it does not, the pacing checks bound it."""
    before = round(tolerance.near_before_ms * NS_PER_MS)
    after = round(tolerance.near_after_ms * NS_PER_MS)
    near = round(tolerance.listed_ms * NS_PER_MS)
    responses = [Answered(*r) for r in responses]  # plain tuples welcome
    stamps = [t for _, t in onsets] + [r.onset_ns for r in responses] + list(chunks)
    view = monitor.view(
        min(stamps, default=0) - max(before, near), max(stamps, default=0) + OVERDUE_NS
    )
    stamp = {t: view.lag_near(t, before, after) for _, t in onsets}
    for r in responses:
        stamp.setdefault(r.onset_ns, view.lag_near(r.onset_ns, before, after))
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
        chunk_ms=_ms(max(view.lag_near(t, before, after) for t in chunks)) if chunks else None,
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
) -> FigureBounds:
    """`figure_bounds` of a finished session: its onsets and frames from the log, its answered
    turns from metrics' `responses`; each onset at its chunk's arrival stamp, each decision
    window the largest measured round trip + two frames before the decision's arrival."""
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
    return figure_bounds(monitor, onsets, answered, log.send_ns, log.lateness_ns, tolerance, chunks)


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
) -> Verdict:
    """The verdict on the rig's own timing for one rollout, with every reason it failed (one
    line each). A sound-card xrun is the rig's own audio path missing its deadline, like a
    stall."""
    tol = tolerance
    reasons: list[str] = []
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
