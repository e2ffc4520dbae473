"""Self-interruption: did the system stop or barge in on its own echo?

Why: with the echo condition (rig.echo, `rig run --echo`) the uplink carries the system's own
reply, as a room would. A system without working echo handling hears itself and yields to
itself; this finds where, per response, from a rollout's files.

How this works (pure functions over arrays and rows: no clock, no I/O). `echo.wav` holds what
the echo condition added, sample-aligned with `user.wav` (what was sent), so the user's own
speech is `user - echo`: its speech segments (rig.analysis.activity) are where the user
spoke. For each system response (a speech segment of the playback track, as the timing
analysis found it) two kinds of evidence count, each only while *no user speech* was on
the uplink within `lookback_s` before it and the echo was above `echo_gate_dbfs`:

  server_event  the system said it heard speech or stopped: a server event of `SIGNALS`
                (speech_started, input_audio_buffer.speech_started, interrupted,
                interruption, response.cancelled) arriving during the response or within
                `grace_s` after its end; its arrival time is the moment.
  self_turn     the system went quiet and then took a new turn, with no user speech in
                between, at least `self_turn_gap_s` after it stopped (it answered its own
                echo); the end of the response is the moment. A heuristic for systems that
                send no events: a reply with long pauses inside can look the same, so it is
                reported apart (`by`) and `min_gap` is longer than a sentence pause.

The echo level at the moment is the RMS of `echo.wav` over the `level_window_s` before it.
Per rollout: each response's verdict, the count and the rate; the run report aggregates
the rate (rig.analysis.aggregate, gate `self_interruption_rate`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from rig.analysis.activity import ActivityParams, Segment, speech_segments
from rig.analysis.rollout import read_track
from rig.core.units import NS_PER_S

#: server events that mean "the system heard speech" or "it stopped for it"
SIGNALS: frozenset[str] = frozenset(
    {
        "speech_started",
        "input_audio_buffer.speech_started",
        "interrupted",
        "interruption",
        "response.cancelled",
    }
)


@dataclass(frozen=True, slots=True)
class SelfEchoParams:
    lookback_s: float = 1.0
    grace_s: float = 0.3
    echo_gate_dbfs: float = -50.0
    level_window_s: float = 0.2
    self_turn_gap_s: float = 0.6
    self_turn_max_gap_s: float = 3.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def signals_from_events(events: Sequence[dict[str, Any]], t0_ns: int) -> list[tuple[float, str]]:
    """(arrival s from t0, kind) of the server's speech/stop signals."""
    out = []
    for ev in events:
        kind, t_ns = ev.get("kind"), ev.get("t_ns")
        if isinstance(kind, str) and isinstance(t_ns, int) and ev.get("source") == "server":
            name = kind.removeprefix("server.")
            if name in SIGNALS:
                out.append(((t_ns - t0_ns) / NS_PER_S, name))
    return out


def _level_dbfs(x: npt.NDArray[np.float32], rate: int, t_s: float, window_s: float) -> float:
    b = max(0, min(x.size, round(t_s * rate)))
    a = max(0, b - round(window_s * rate))
    if b <= a:
        return -120.0
    seg = x[a:b].astype(np.float64)
    rms = math.sqrt(float(seg @ seg) / seg.size)
    return round(20.0 * math.log10(rms), 2) if rms > 1e-6 else -120.0


def _overlaps(segs: Sequence[Segment], a: float, b: float) -> bool:
    return any(s < b and e > a for s, e in segs)


def analyze_self_echo(
    user: npt.NDArray[np.float32],
    echo: npt.NDArray[np.float32],
    sample_rate: int,
    system: Sequence[Segment],
    signals: Sequence[tuple[float, str]],
    *,
    activity: ActivityParams | None = None,
    params: SelfEchoParams | None = None,
) -> dict[str, Any]:
    """The `self_echo` block: per response, did the system yield to its own echo?"""
    p = params or SelfEchoParams()
    n = min(user.size, echo.size)
    dry = (user[:n].astype(np.float64) - echo[:n].astype(np.float64)).astype(np.float32)
    spoke = speech_segments(dry, sample_rate, activity)
    rows: list[dict[str, Any]] = []
    for i, (start, end) in enumerate(system):
        row: dict[str, Any] = {"response": i, "start_s": round(start, 4), "end_s": round(end, 4)}
        found = _by_signal(start, end, signals, spoke, echo, sample_rate, p)
        if found is None and i + 1 < len(system):
            found = _by_self_turn(end, system[i + 1][0], spoke, echo, sample_rate, p)
        row["self_interrupted"] = found is not None
        if found is not None:
            row |= found
        rows.append(row)
    k = sum(1 for r in rows if r["self_interrupted"])
    return {
        "responses": len(rows),
        "self_interruptions": k,
        "rate": (k / len(rows)) if rows else None,
        "by_server_event": sum(1 for r in rows if r.get("by") == "server_event"),
        "by_self_turn": sum(1 for r in rows if r.get("by") == "self_turn"),
        "echo_peak_dbfs": _peak_dbfs(echo),
        "user_speech": [[round(s, 4), round(e, 4)] for s, e in spoke],
        "per_response": rows,
        "params": p.as_dict(),
    }


def _moment(
    t: float, spoke: Sequence[Segment], echo: npt.NDArray[np.float32], rate: int, p: SelfEchoParams
) -> float | None:
    """The echo level at `t` if only the echo was on the uplink then, else None."""
    if _overlaps(spoke, t - p.lookback_s, t):
        return None
    level = _level_dbfs(echo, rate, t, p.level_window_s)
    return level if level >= p.echo_gate_dbfs else None


def _by_signal(
    start: float,
    end: float,
    signals: Sequence[tuple[float, str]],
    spoke: Sequence[Segment],
    echo: npt.NDArray[np.float32],
    rate: int,
    p: SelfEchoParams,
) -> dict[str, Any] | None:
    for t, kind in signals:
        if start <= t <= end + p.grace_s:
            level = _moment(t, spoke, echo, rate, p)
            if level is not None:
                return {
                    "by": "server_event",
                    "signal": kind,
                    "t_s": round(t, 4),
                    "echo_dbfs": level,
                }
    return None


def _by_self_turn(
    end: float,
    next_start: float,
    spoke: Sequence[Segment],
    echo: npt.NDArray[np.float32],
    rate: int,
    p: SelfEchoParams,
) -> dict[str, Any] | None:
    gap = next_start - end
    if not p.self_turn_gap_s <= gap <= p.self_turn_max_gap_s:
        return None
    if _overlaps(spoke, end - p.lookback_s, next_start):
        return None
    level = _moment(end, spoke, echo, rate, p)
    if level is None:
        return None
    return {"by": "self_turn", "t_s": round(end, 4), "echo_dbfs": level, "gap_s": round(gap, 4)}


def _peak_dbfs(x: npt.NDArray[np.float32]) -> float:
    peak = float(np.max(np.abs(x))) if x.size else 0.0
    return round(20.0 * math.log10(peak), 2) if peak > 1e-6 else -120.0


def own_echo(rollout_dir: Path, n: int) -> npt.NDArray[np.float32] | None:
    """echo.wav of a rollout, `n` samples long (None: no echo condition)."""
    path = rollout_dir / "echo.wav"
    if not path.exists():
        return None
    x = read_track(path)[0][:n]
    return np.pad(x, (0, n - x.size)).astype(np.float32)


def run_rate(metrics: Sequence[dict[str, Any]]) -> tuple[int, int]:
    """(self-interrupted responses, responses) over rollouts' metrics that have the block."""
    k = n = 0
    for m in metrics:
        t = m.get("timing")
        block = t.get("self_echo") if isinstance(t, dict) else None
        if isinstance(block, dict) and isinstance(block.get("responses"), int):
            n += block["responses"]
            k += int(block.get("self_interruptions") or 0)
    return k, n


def rate_line(block: dict[str, Any] | None) -> str | None:
    """`self-interruptions: 3 of 5 responses (60%, 95% CI 23-88%)` from a report's
    `self_interruption` rate (None: no rollout had an echo condition)."""
    if not isinstance(block, dict) or not block.get("evaluated"):
        return None
    k, n, r = block["passed"], block["evaluated"], block.get("rate")
    lo, hi = block.get("ci_low"), block.get("ci_high")
    ci = f", 95% CI {lo:.0%}-{hi:.0%}" if lo is not None and hi is not None else ""
    return f"self-interruptions on own echo: {k} of {n} responses ({r:.0%}{ci}, Wilson)"


def rollouts_line(metrics: Sequence[dict[str, Any]]) -> str | None:
    """The same line from rollouts' metrics (what `rig run` prints after its table)."""
    k, n = run_rate(metrics)
    if n == 0:
        return None
    return f"self-interruptions on own echo: {k} of {n} responses"
