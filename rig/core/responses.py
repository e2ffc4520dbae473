"""Per-rollout timing metrics from what the session observed (sans-I/O).

Response latency is measured from the end of the user's speech *as sent* (send time of the
frame holding the last speech sample, plus that sample's offset in the frame) to the onset
of system speech in the playback placement (what a listener at the rig would hear). The
arrival placement is reported beside it.
"""

from __future__ import annotations

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
    a = np.asarray(lateness_ns, dtype=np.float64) / 1e6
    return {
        "p50": round(float(np.percentile(a, 50)), 4),
        "p99": round(float(np.percentile(a, 99)), 4),
        "max": round(float(a.max()), 4),
        "mean": round(float(a.mean()), 4),
    }


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
