"""metrics.json of one rollout, built by one pure function from its session log and status.

`build_metrics(log, outcome, ...)` is everything metrics.json says about the stream itself:
status, uplink pacing (lateness, stalls, drift), downlink counts, onsets and the responses
matched on the playback placement (rig.core.responses). What needs more than the log is
added by others: the transport (`Transport.finish_metrics`: the device path), the analysis
after the stream (clock fit and latency split, timing: rig.analysis.finish). See
docs/metrics.md for every field.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from rig.core.log import SessionLog
from rig.core.refmarks import marks_metrics
from rig.core.responses import lateness_summary, match_responses
from rig.core.selfcheck import LoopMonitor, LoopStats, TimingTolerance, Verdict, judge_session
from rig.errors import DeadlineError, DeviceError, ProtocolError, RigError, TransportError


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a rollout ended: `status` (ok, no_audio, timed_out, *_error) and why."""

    status: str
    reason: str | None = None

    @classmethod
    def of_error(cls, exc: BaseException) -> Outcome:
        """A rollout ended by `exc`: a status that says whose fault it was."""
        if isinstance(exc, DeadlineError):
            status = "timed_out"
        elif isinstance(exc, ProtocolError):
            status = "protocol_error"
        elif isinstance(exc, TransportError):
            status = "transport_error"
        elif isinstance(exc, DeviceError):
            status = "device_error"
        elif isinstance(exc, OSError):  # a socket error a transport did not wrap
            return cls("transport_error", f"{type(exc).__name__}: {exc}")
        elif not isinstance(exc, RigError):  # a bug: say what it was
            return cls("error", f"{type(exc).__name__}: {exc}")
        else:
            status = "error"
        return cls(status, str(exc) or type(exc).__name__)

    def settled(self, log: SessionLog) -> Outcome:
        """The final word: a clean end without any system audio is `no_audio`."""
        if self.status == "ok" and log.down_chunks == 0:
            return Outcome("no_audio", "the system sent no audio")
        return self


def judge_metrics(
    metrics: dict[str, Any],
    log: SessionLog | None,
    loop: LoopStats | None,
    monitor: LoopMonitor,
    tolerance: TimingTolerance,
    exact: Collection[int] = (),
) -> Verdict:
    """`timing_valid` and why (rig.core.selfcheck.judge_session: pacing, the error bound of
    every figure from the loop's lag, xruns): did the rig keep its own time? Added to
    `metrics` in place; the verdict returned. `exact`: arrival stamps measured exactly."""
    verdict = judge_session(metrics, log, loop, monitor, tolerance, exact)
    metrics["timing_valid"] = verdict.valid
    metrics["rig_timing"] = verdict.as_dict(tolerance)
    return verdict


def responses_of(log: SessionLog) -> list[dict[str, Any]]:
    """Each user turn's end as sent, matched to the first system onset after it (before the
    next turn starts), on the playback placement."""
    ends = [(t, t.speech_end_sample) for t in log.turns if t.speech_end_sample is not None]
    user_ends = [(t.index, log.sent_ns_of_sample(end)) for t, end in ends]
    next_starts: list[int | None] = []
    for i in range(len(ends)):
        start = ends[i + 1][0].speech_start_sample if i + 1 < len(ends) else None
        next_starts.append(None if start is None else log.timeline.time_of(start))
    return match_responses(user_ends, log.onsets, next_starts)


def build_metrics(
    log: SessionLog,
    outcome: Outcome,
    *,
    rollout_id: str,
    meta: dict[str, Any] | None = None,
    transport: dict[str, Any] | None = None,
    writer_high_water: int = 0,
) -> dict[str, Any]:
    """metrics.json of a rollout whose stream ran (status already settled)."""
    frames = len(log.send_ns)
    rate = log.down_rate
    return {
        "status": outcome.status,
        "reason": outcome.reason,
        "rollout_id": rollout_id,
        **ITEM_DEFAULTS,
        **(meta or {}),
        "marks": marks_metrics(log.ref_marks, log.t0_ns),
        "censored": censored(log, outcome),
        "t0_ns": log.t0_ns,
        "sample_rate": log.sample_rate,
        "system_sample_rate": rate,
        "frame_ms": log.frame_ns / 1e6,
        "uplink": {
            "frames": frames,
            "lateness_ms": lateness_summary(log.lateness_ns),
            "stalls": log.stalls,
            "drift_ms": drift_ms(log.lateness_ns),
            "audio_s": round(frames * log.frame_ns / 1e9, 3),
            "prefill": None if log.prefill is None else log.prefill.as_dict(),
        },
        "downlink": {
            "chunks": log.down_chunks,
            "audio_s": round(log.down_samples / rate, 3) if rate else 0.0,
            "truncated_samples": log.truncated_samples,
            "dropped_after_truncate_samples": log.dropped_samples,
            "truncated_items": list(log.truncated_items),
        },
        "onsets_play_ns": [o.play_ns for o in log.onsets],
        "responses": responses_of(log),
        "clock_fit": None,  # the analysis after the stream fits it (rig.analysis.latency)
        "transport": transport or {},
        "writer_backlog_high_water": writer_high_water,
    }


def metrics_without_stream(
    outcome: Outcome, *, rollout_id: str, meta: dict[str, Any] | None = None
) -> dict[str, Any]:
    """metrics.json of a rollout that never streamed (the connection failed)."""
    return {
        "status": outcome.status,
        "reason": outcome.reason,
        "rollout_id": rollout_id,
        **ITEM_DEFAULTS,
        **(meta or {}),
        "marks": [],
        "censored": False,
        "responses": [],
    }


#: what every metrics.json says about its item when the scenario gave nothing
ITEM_DEFAULTS: dict[str, Any] = {"tags": {}, "reference": None}


def censored(log: SessionLog, outcome: Outcome) -> bool:
    """Was the system cut while still talking: a drain at its cap, or the rollout's cap?"""
    return log.drain_censored or (outcome.status == "timed_out" and log.talking_at_end)


def drift_ms(lateness_ns: tuple[int, ...] | list[int], window: int = 50) -> float | None:
    """Trend of send lateness: mean of the last `window` frames minus the first `window`.

    Deadlines are absolute, so a correct pacer shows no trend however long it runs; a pacer
    that slept one frame per frame would show its accumulated error here.
    """
    if len(lateness_ns) < 2 * window:
        return None
    head = sum(lateness_ns[:window]) / window
    tail = sum(lateness_ns[-window:]) / window
    return round((tail - head) / 1e6, 4)
