"""Per-rollout timing metrics from what the session observed (sans-I/O).

Response latency is measured from the end of the user's speech *as sent* (send time of the
frame holding the last speech sample, plus that sample's offset in the frame) to the onset
of system speech in the playback placement (what a listener at the rig would hear). The
arrival placement is reported beside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# numpy (2.x) imports numpy.ma on the first np.percentile; that first call is in the first
# finished rollout's metrics, built on the audio loop while other rollouts stream, and the
# import took 15-22 ms there (tests/test_loop_imports.py): import it with this module instead
import numpy.ma  # noqa: F401, E402


@dataclass(frozen=True, slots=True)
class Onset:
    """Start of a system speech segment, in each placement it is known in."""

    play_ns: int
    arrival_ns: int
    server_ts_ms: float | None
    chunk_seq: int


def lateness_summary(lateness_ns: Sequence[int]) -> dict[str, float | None]:
    if not lateness_ns:
        return {"p50": None, "p99": None, "max": None, "mean": None}
    a = np.array(lateness_ns, dtype=np.float64)
    a /= 1e6
    a.sort()  # one sort for both percentiles: this runs on the audio loop at every close
    return {
        "p50": round(sorted_percentile(a, 50), 4),
        "p99": round(sorted_percentile(a, 99), 4),
        "max": round(float(a[-1]), 4),
        "mean": round(float(a.mean()), 4),
    }


def sorted_percentile(a: np.ndarray[Any, Any], q: float) -> float:
    """`np.percentile(a, q)` (its default, linear method, to the last bit) of an array
    already sorted ascending, without numpy's general machinery: two of them cost ~0.4 ms per
    rollout close on the audio loop (cProfile, docs/pacing.md eleventh pass), this ~2 µs."""
    n = len(a)
    virtual = q / 100 * (n - 1)
    lo = math.floor(virtual)
    hi = min(lo + 1, n - 1)
    lo = min(lo, n - 1)
    t = virtual - lo
    x, y = float(a[lo]), float(a[hi])
    diff = y - x
    # numpy's _lerp: from the nearer end, so that t = 1 gives y exactly
    return y - diff * (1 - t) if t >= 0.5 else x + diff * t


def match_responses(
    user_ends_ns: Sequence[tuple[int, int]],
    onsets: Sequence[Onset],
    next_turn_starts_ns: Sequence[int | None],
) -> list[dict[str, Any]]:
    """For each user turn end, the first system onset after it (before the next turn starts).

    `user_ends_ns` holds (turn_index, user_end_ns). Turns without a matching onset get a
    null latency with a reason, never a made-up number.
    """
    out: list[dict[str, Any]] = []
    for (turn, end_ns), next_start in zip(user_ends_ns, next_turn_starts_ns, strict=True):
        match = next(
            (
                o
                for o in onsets
                if o.play_ns >= end_ns and (next_start is None or o.play_ns < next_start)
            ),
            None,
        )
        if match is None:
            out.append(
                {
                    "turn": turn,
                    "user_end_ns": end_ns,
                    "onset_ns": None,
                    "latency_ms": None,
                    "placement": "playback",
                    "reason": "no system speech after this turn",
                }
            )
            continue
        out.append(
            {
                "turn": turn,
                "user_end_ns": end_ns,
                "onset_ns": match.play_ns,
                "latency_ms": round((match.play_ns - end_ns) / 1e6, 3),
                "placement": "playback",
                "onset_arrival_ns": match.arrival_ns,
                "latency_arrival_ms": round((match.arrival_ns - end_ns) / 1e6, 3),
                "onset_server_ts_ms": match.server_ts_ms,
                "onset_chunk_seq": match.chunk_seq,
            }
        )
    return out
