"""Response latencies while a rollout runs, for live views (sans-I/O).

The analysis after the stream measures each response properly (speech activity, the clock
fit, the split) and publishes it then; a 15 s rollout whose system answered at 4 s would
show "no response yet" until its end. This pairs each user turn's end (`turn.end`) with the
next system onset as played (`system.onset`, its `play_ns`), as the records pass: the same
two stamps the final `responses` start from, so the live number is the final latency in the
simple case. It is marked `live`; the final one, with its split, replaces it in the view.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rig.core.units import NS_PER_MS


class LiveResponses:
    """Feed it every event record's kind, time and data; it returns a response when an onset
    answers the pending turn end (None otherwise)."""

    def __init__(self) -> None:
        self._pending: tuple[Any, int] | None = None  # (turn, turn end ns)

    def feed(self, kind: str, t_ns: int, data: Mapping[str, Any]) -> dict[str, Any] | None:
        if kind == "turn.end":
            self._pending = (data.get("turn"), t_ns)
        elif kind == "turn.start":  # the next turn began unanswered
            self._pending = None
        elif kind == "system.onset" and self._pending is not None:
            play_ns = data.get("play_ns")
            play = play_ns if isinstance(play_ns, int) else t_ns
            turn, end_ns = self._pending
            if play >= end_ns:
                self._pending = None
                return {
                    "latency_ms": round((play - end_ns) / NS_PER_MS, 3),
                    "turn": turn,
                    "placement": "playback",
                    "live": True,
                    "t_ns": play,
                }
        return None
