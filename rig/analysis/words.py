"""Word-level onsets: what the system said and when, from offline ASR word timings.

Why: energy and VAD open a "response" on a cough, a hum or a one-word "mhm" exactly as on an
answer. With word timings (rig.analysis.asr writes them to `words.jsonl` after the stream,
in the analysis worker) each system speech segment is classed:

  wordless     no word overlaps it (a hum, a tone, a breath): not counted as a response
  backchannel  at most `backchannel_max_words` words and no longer than backchannel_max_s
  answer       anything longer

and each response gets `first_word_latency_ms`: the user's end to the first word the system
said in the response window. ASR word times are coarse (Whisper's are cross-attention
alignments, often 50-600 ms off, the first word of a segment early); each word's start is
refined to the first rise above the activity energy gate inside its ASR span when there is
one (`onset: "energy"`), else kept (`onset: "asr"`): ASR says what and roughly where, the
signal says when. Pure functions: rows in, JSON-able dicts out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from rig.analysis.activity import Segment

WORD_KEYS = ("word", "start", "end", "probability", "track", "placement")
#: a refined onset is looked for this far either side of the ASR word start
ONSET_SEARCH_S = 0.15


def refine_onsets(
    words: Sequence[dict[str, Any]],
    x: npt.NDArray[Any],
    sample_rate: int,
    energy_dbfs: float,
    search_s: float = ONSET_SEARCH_S,
) -> list[dict[str, Any]]:
    """Each word's `start` moved to the first rise above the gate (after 20 ms of quiet)
    inside its ASR span: from `search_s` before the ASR start (never before the previous
    word's end) to the ASR end. The ASR start is kept as `asr_start`."""
    amp = 10 ** (energy_dbfs / 20.0) * (32768.0 if x.dtype == np.int16 else 1.0)
    loud = np.abs(x) >= amp
    out: list[dict[str, Any]] = []
    prev_end = 0.0
    for w in words:
        start = float(w["start"])
        lo = max(round(max(start - search_s, prev_end) * sample_rate), 0)
        hi = min(round(max(start + search_s, float(w["end"])) * sample_rate), x.size)
        onset = _first_rise(loud, lo, hi, round(0.02 * sample_rate))
        refined = {**w, "asr_start": round(start, 4)}
        if onset is not None:
            refined["start"] = round(onset / sample_rate, 4)
            refined["onset"] = "energy"
        else:
            refined["onset"] = "asr"
        out.append(refined)
        prev_end = max(prev_end, float(w["end"]))
    return out


def _first_rise(loud: npt.NDArray[np.bool_], lo: int, hi: int, quiet: int) -> int | None:
    """The first loud sample in [lo, hi) that follows at least `quiet` samples of quiet (a
    word's start, not the middle of the previous sound); None if there is none."""
    if hi <= lo:
        return None
    idx = np.flatnonzero(loud[lo:hi])
    for i in idx:
        k = lo + int(i)
        before = loud[max(0, k - quiet) : k]
        if not before.any():
            return k
    return None


def words_in(words: Sequence[dict[str, Any]], s: float, e: float) -> list[dict[str, Any]]:
    """Words that overlap [s, e)."""
    return [w for w in words if float(w["start"]) < e and float(w["end"]) > s]


def classify_segments(
    segments: Sequence[Segment],
    words: Sequence[dict[str, Any]],
    *,
    backchannel_max_words: int,
    backchannel_max_s: float,
) -> list[dict[str, Any]]:
    """Each system speech segment as `wordless`, `backchannel` or `answer`, with its words."""
    out = []
    for s, e in segments:
        ws = words_in(words, s, e)
        if not ws:
            cls = "wordless"
        elif len(ws) <= backchannel_max_words and e - s <= backchannel_max_s:
            cls = "backchannel"
        else:
            cls = "answer"
        out.append(
            {
                "start_s": round(s, 4),
                "end_s": round(e, 4),
                "class": cls,
                "n_words": len(ws),
                "text": "".join(str(w["word"]) for w in ws).strip(),
            }
        )
    return out


def word_responses(
    responses: Sequence[dict[str, Any]],
    segments: Sequence[dict[str, Any]],
    words: Sequence[dict[str, Any]],
    *,
    early_onset_s: float,
    response_window_s: float,
) -> list[dict[str, Any]]:
    """Per response (turn): the first word said in its window and `first_word_latency_ms`;
    `class` of the segment that word starts (a wordless onset is not a response)."""
    out = []
    for r in responses:
        end = float(r["user_end_s"])
        lo, hi = end - early_onset_s, end + response_window_s
        first = next((w for w in words if lo <= float(w["start"]) <= hi), None)
        seg = None
        if first is not None:
            t = float(first["start"])
            seg = next((g for g in segments if g["start_s"] - 0.05 <= t < g["end_s"] + 0.05), None)
        out.append(
            {
                "turn": r["turn"],
                "first_word": None if first is None else str(first["word"]).strip(),
                "first_word_s": None if first is None else round(float(first["start"]), 4),
                "first_word_latency_ms": (
                    None if first is None else round((float(first["start"]) - end) * 1000.0, 1)
                ),
                "class": None if seg is None else seg["class"],
                "vad_onset_s": r.get("onset_s"),
            }
        )
    return out


def word_metrics(
    system_segments: Sequence[Segment],
    responses: Sequence[dict[str, Any]],
    words: Sequence[dict[str, Any]],
    *,
    backchannel_max_words: int,
    backchannel_max_s: float,
    early_onset_s: float,
    response_window_s: float,
) -> dict[str, Any]:
    """The `words` block of timing: segment classes, word responses, counts."""
    system_words = [w for w in words if w.get("track") == "system"]
    segs = classify_segments(
        system_segments,
        system_words,
        backchannel_max_words=backchannel_max_words,
        backchannel_max_s=backchannel_max_s,
    )
    resp = word_responses(
        responses,
        segs,
        system_words,
        early_onset_s=early_onset_s,
        response_window_s=response_window_s,
    )
    return {
        "segments": segs,
        "responses": resp,
        "first_word_latency_ms": [
            r["first_word_latency_ms"] for r in resp if r["first_word_latency_ms"] is not None
        ],
        "counts": {c: sum(1 for g in segs if g["class"] == c) for c in CLASSES},
        "n_words": {
            "user": sum(1 for w in words if w.get("track") == "user"),
            "system": len(system_words),
        },  # fmt: skip
    }


CLASSES = ("wordless", "backchannel", "answer")
