"""Regenerate the example corpus: two short two-speaker conversations spoken by espeak-ng.

    python examples/corpus/make_corpus.py        (needs espeak-ng; writes next to this file)

Each conversation is one two-channel FLAC file (16 kHz, PCM16): speaker A on channel 0,
speaker B on channel 1, each utterance placed at a known sample. The points table
(`points.csv`, and the same points as `points.jsonl`) marks, for speaker A, one mid-turn
pause point and one turn-end point per conversation, with times measured on the placed audio
(an energy gate at -40 dBFS on 10 ms blocks, as rig does), so the marks are exact. The
files are committed; this script documents how they were made.
"""

from __future__ import annotations

import csv
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

RATE = 16_000
HERE = Path(__file__).resolve().parent

#: (speaker, text, gap before it in s); "|" splits a turn with a mid-turn pause of PAUSE_S
CONVERSATIONS = {
    "c1": [
        ("A", "So I was thinking that we could maybe | go to the coast this weekend.", 0.3),
        ("B", "That sounds lovely.", 0.4),
        ("A", "What time should we leave on Saturday?", 0.5),
        ("B", "Around eight in the morning.", 0.3),
    ],
    "c2": [
        ("A", "I need to book a table for dinner | for four people tonight.", 0.3),
        ("B", "Sure, which restaurant?", 0.4),
        ("A", "The Italian place on Main Street, please.", 0.5),
        ("B", "I will call them now.", 0.3),
    ],
}
PAUSE_S = 1.2
TAIL_S = 0.5


def speak(text: str, voice: str) -> np.ndarray:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "s.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-s", "165", "-w", str(out), text], check=True)
        x, rate = sf.read(out, dtype="float32")
    y = soxr.resample(x, rate, RATE)
    return np.asarray(np.clip(y * 0.8, -1, 1) * 32767, dtype=np.int16)


def bounds(pcm: np.ndarray) -> tuple[int, int]:
    thresh = 32768.0 * 10 ** (-40 / 20)
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > thresh)
    return int(loud[0]), int(loud[-1]) + 1


def build(name: str) -> list[dict[str, object]]:
    pos = 0
    placed: list[tuple[str, int, np.ndarray, list[tuple[int, int]]]] = []
    for speaker, text, gap_s in CONVERSATIONS[name]:
        pos += round(gap_s * RATE)
        voice = "en-us" if speaker == "A" else "en-gb"
        parts = [speak(p.strip(), voice) for p in text.split("|")]
        pcm_parts: list[np.ndarray] = []
        speech: list[tuple[int, int]] = []  # loud spans of each part, turn-relative
        off = 0
        for j, p in enumerate(parts):
            if j:
                pcm_parts.append(np.zeros(round(PAUSE_S * RATE), np.int16))
                off += round(PAUSE_S * RATE)
            b = bounds(p)
            speech.append((off + b[0], off + b[1]))
            pcm_parts.append(p)
            off += len(p)
        pcm = np.concatenate(pcm_parts)
        placed.append((speaker, pos, pcm, speech))
        pos += speech[-1][1]  # the next one starts `gap` after this one's last loud sample
    total = pos + round(TAIL_S * RATE)
    track = np.zeros((total, 2), np.int16)
    for speaker, at, pcm, _ in placed:
        ch = 0 if speaker == "A" else 1
        n = min(len(pcm), total - at)
        track[at : at + n, ch] = pcm[:n]
    sf.write(HERE / f"{name}.flac", track, RATE, subtype="PCM_16")
    return points(name, placed)


def points(name: str, placed: list[tuple[str, int, np.ndarray, list[tuple[int, int]]]]) -> list:
    s = lambda x: round(x / RATE, 4)  # noqa: E731 - seconds, 0.1 ms
    rows = []
    lead = round(0.2 * RATE)
    (_, a1, _, sp1), (_, b1, _, spb1), (_, a2, _, sp2), (_, b2, _, spb2) = placed
    # pause point: A's first turn, from 0.2 s before it to its end; the pause is a negative
    # span (taking the floor there is wrong) and the turn's end is the gold end of turn
    start, end = a1 - lead, a1 + sp1[-1][1]
    pause = (a1 + sp1[0][1] - start, a1 + sp1[1][0] - start)
    rows.append(
        {
            "id": f"{name}-pause",
            "audio": f"{name}.flac",
            "channel": 0,
            "kind": "pause",
            "start_s": s(start),
            "end_s": s(end),
            "marks": [
                {"kind": "pause", "start_s": s(pause[0]), "end_s": s(pause[1])},
                {"kind": "negative", "start_s": s(pause[0]), "end_s": s(pause[1])},
                {"kind": "anchor", "t_s": s(pause[1]), "label": "resume"},
                {"kind": "eot", "t_s": s(end - start)},
            ],
            "tags": {"conversation": name, "speaker": "A", "type": "pause", "intent": "hold"},
            "options": {"silence_duration_ms": 300},
            "drain_quiet_s": 1.0,
            "drain_wait_first_s": 2.0,
            "drain_max_s": 8.0,
        }
    )
    # turn-end point: A's question; B's reply (channel 1) is the reference
    start, end = a2 - lead, a2 + sp2[-1][1]
    rows.append(
        {
            "id": f"{name}-turn",
            "audio": f"{name}.flac",
            "channel": 0,
            "kind": "turn_taking",
            "start_s": s(start),
            "end_s": s(end),
            "marks": [
                {"kind": "eot", "t_s": s(end - start)},
            ],
            "tags": {"conversation": name, "speaker": "A", "type": "turn_end", "intent": "ans"},
            "options": {"silence_duration_ms": 500},
            "reference_text": CONVERSATIONS[name][3][1],
            "reference_file": f"{name}.flac",
            "reference_channel": 1,
            "reference_start_s": s(b2 + spb2[0][0]),
            "reference_end_s": s(b2 + spb2[-1][1]),
            "drain_quiet_s": 1.0,
            "drain_wait_first_s": 2.0,
            "drain_max_s": 8.0,
        }
    )
    return rows


def main() -> None:
    rows = build("c1") + build("c2")
    with open(HERE / "points.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    cols = [
        "id",
        "audio",
        "channel",
        "start_s",
        "end_s",
        "kind",
        "marks",
        "tag.conversation",
        "tag.speaker",
        "tag.type",
        "tag.intent",
        "opt.silence_duration_ms",
        "reference_text",
        "reference_file",
        "reference_channel",
        "reference_start_s",
        "reference_end_s",
        "drain_quiet_s",
        "drain_wait_first_s",
        "drain_max_s",
    ]
    with open(HERE / "points.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in rows:
            flat = {k: v for k, v in r.items() if k in cols}
            flat["marks"] = json.dumps(r["marks"])
            for k, v in r["tags"].items():  # type: ignore[attr-defined]
                flat[f"tag.{k}"] = v
            for k, v in r["options"].items():  # type: ignore[attr-defined]
                flat[f"opt.{k}"] = v
            w.writerow(flat)


if __name__ == "__main__":
    main()
