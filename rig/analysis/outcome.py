"""A rollout whose analysis failed is not `ok`: the `analysis_error` status.

Why: the analysis (clock fit, latency split, timing, words) runs after the stream in a
worker process. If it fails and the rollout still says `ok`, the run looks good while its
verdicts are missing: `pass: null` reads as "no rule" and a gate then says "nothing
measured" with no hint why. So whatever made the analysis fail (the worker did not start,
died mid-call, timed out, raised) ends a finished rollout `analysis_error` with the reason;
it is not ok, counts as failed (exit 3), and a resume redoes it (rig.recordings.rundir).
A rollout that already ended in an error keeps that status (it says more) and carries the
analysis failure beside it. Pure: metrics in, metrics out.
"""

from __future__ import annotations

from typing import Any

from rig.status import is_done

ANALYSIS_ERROR = "analysis_error"


def analysis_failure(metrics: dict[str, Any]) -> str | None:
    """Why the analysis of this rollout failed, read from its metrics, or None."""
    timing = metrics.get("timing")
    if not isinstance(timing, dict):
        return None
    if timing.get("error") is not None:
        return str(timing["error"])
    if timing.get("asr") == "error":  # words were asked for (an ASR model) and failed
        return f"asr: {timing.get('asr_error') or 'failed'}"
    return None


def settle_analysis(metrics: dict[str, Any], error: str | None = None) -> dict[str, Any]:
    """metrics with status `analysis_error` when the analysis failed (`error`, or what the
    metrics say); unchanged when it did not."""
    why = error if error is not None else analysis_failure(metrics)
    if why is None:
        return metrics
    if not is_done(metrics.get("status")):  # ended in an error: that status says more
        return {**metrics, "analysis_error": why}
    return {
        **metrics,
        "status": ANALYSIS_ERROR,
        "reason": f"analysis failed: {why}",
        "session_status": metrics.get("status"),
        "session_reason": metrics.get("reason"),
        "pass": None,
    }
