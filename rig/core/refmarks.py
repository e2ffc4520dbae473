"""Reference marks: labelled points and spans in a step's audio, and where they were played.

How this works: a scenario puts marks on a turn or prefill step (a gold end of turn, a
labelled pause, a negative or excluded span, an anchor word), times relative to that step's
audio. The file format turns them into `RefMark`s at sample offsets inside the step's `Play`.
The director emits a `mark` when a frame holds a mark's first sample, and the uplink stamps
it with the send time of that sample (prefill speed-up and padding included): one
events.jsonl line per mark, and a `PlayedMark` the session log keeps for metrics.json.
A span's end is stamped at its start on the pacer's schedule (start + span length at the
rate that sample range goes out), since it has not been played yet.

Sans-I/O: plain data and pure functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rig.core.records import EventRecord

#: point kinds take `t_s`; span kinds take `start_s`/`end_s`; anchor takes either (+ label)
POINT_KINDS: tuple[str, ...] = ("turn_end", "eot", "int")
SPAN_KINDS: tuple[str, ...] = ("pause", "negative", "exclude", "region")
MARK_KINDS: tuple[str, ...] = (*POINT_KINDS, *SPAN_KINDS, "anchor")


@dataclass(frozen=True, slots=True)
class RefMark:
    """A mark inside one Play's audio, in samples at the plan's rate."""

    mark: str
    start: int
    end: int | None = None  # a span's end (exclusive); None for a point
    label: str | None = None
    step: int = -1  # the scenario step it belongs to (-1: the item's prefill)

    def describe(self, sample_rate: int) -> dict[str, Any]:
        return {
            "mark": self.mark,
            "t_s": round(self.start / sample_rate, 6),
            "end_s": None if self.end is None else round(self.end / sample_rate, 6),
            "label": self.label,
            "step": self.step,
        }


@dataclass(frozen=True, slots=True)
class PlayedMark:
    """A mark as played: shared-clock times of its first (and for a span, last) sample."""

    mark: str
    t_ns: int
    end_ns: int | None
    label: str | None
    step: int
    sample: int  # its first sample's position in user.wav (the session timeline)

    def record(self, frame_seq: int) -> EventRecord:
        return EventRecord(
            "mark",
            self.t_ns,
            {
                "mark": self.mark,
                "end_ns": self.end_ns,
                "label": self.label,
                "step": self.step,
                "sample": self.sample,
                "frame_seq": frame_seq,
            },
        )


def marks_metrics(played: Sequence[PlayedMark], t0_ns: int) -> list[dict[str, Any]]:
    """metrics.json `marks`: seconds on the session timeline, (t_ns - t0_ns) / 1e9."""
    return [
        {
            "mark": m.mark,
            "t_s": round((m.t_ns - t0_ns) / 1e9, 9),
            "end_s": None if m.end_ns is None else round((m.end_ns - t0_ns) / 1e9, 9),
            "label": m.label,
            "step": m.step,
        }
        for m in played
    ]
