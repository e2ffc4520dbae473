"""Offline ASR with word timestamps (faster-whisper, the `asr` extra), after the stream.

Runs in the runner's analysis worker (a separate, low-priority process), once a rollout's
files are closed: never on the audio loop. `write_words(rollout_dir, model)` transcribes
`user.wav` and `system.wav` (playback placement) and writes `words.jsonl`, one word per line:
`word, start, end, probability, track, placement` (seconds on the session timeline).
rig.analysis.words turns them into metrics; `rig report --rules` reuses the file, never the
model.

The model is a setting: a faster-whisper size name (`tiny.en`, `base`...: faster-whisper
downloads it on first use) or a local CTranslate2 model directory. CPU, int8, greedy
decoding, one thread: the worker is meant to share the machine with a live run. A model is
loaded once per worker process and kept.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import soxr

from rig.analysis.rollout import read_track
from rig.extras import MissingExtra

ASR_RATE = 16_000
#: a segment Whisper thinks is probably not speech and is unsure of is dropped (Whisper's
#: own thresholds: no_speech_threshold 0.6, logprob_threshold -1.0)
NO_SPEECH_PROB = 0.6
MIN_AVG_LOGPROB = -1.0
_MODELS: dict[str, Any] = {}


def load_model(model: str) -> Any:
    """The WhisperModel for `model` (name or path), loaded once per process."""
    if model not in _MODELS:
        try:
            from faster_whisper import WhisperModel
        except ImportError as exc:
            raise MissingExtra("asr", "word-level onsets (--asr-model)", "faster_whisper") from exc
        _MODELS[model] = WhisperModel(model, device="cpu", compute_type="int8", cpu_threads=1)
    return _MODELS[model]


def transcribe(
    x: npt.NDArray[np.float32], sample_rate: int, model: str, *, track: str, placement: str
) -> list[dict[str, Any]]:
    """Words of one mono track (any rate), times in seconds from the track's first sample."""
    if sample_rate != ASR_RATE:
        x = soxr.resample(x, sample_rate, ASR_RATE).astype(np.float32)
    if not x.size or not np.any(np.abs(x) > 1e-4):
        return []
    segments, _ = load_model(model).transcribe(
        x,
        language="en" if model.endswith(".en") else None,
        word_timestamps=True,
        beam_size=1,
        vad_filter=False,
        condition_on_previous_text=False,
    )
    out: list[dict[str, Any]] = []
    for seg in segments:
        if seg.no_speech_prob > NO_SPEECH_PROB and seg.avg_logprob < MIN_AVG_LOGPROB:
            continue  # Whisper's own rule: a hum or noise it would "transcribe" anyway
        for w in seg.words or []:
            out.append(
                {
                    "word": str(w.word),
                    "start": round(float(w.start), 4),
                    "end": round(float(w.end), 4),
                    "probability": round(float(w.probability), 4),
                    "track": track,
                    "placement": placement,
                }
            )
    return out


def write_words(rollout_dir: str, model: str) -> list[dict[str, Any]]:
    """Transcribe both tracks of a rollout and write words.jsonl (replaced atomically)."""
    root = Path(rollout_dir)
    words: list[dict[str, Any]] = []
    for track, placement in (("user", "sent"), ("system", "playback")):
        path = root / f"{track}.wav"
        if path.exists():
            x, rate = read_track(path)
            words += transcribe(x, rate, model, track=track, placement=placement)
    tmp = root / f"words.jsonl.tmp.{os.getpid()}"
    tmp.write_text("".join(json.dumps(w) + "\n" for w in words), encoding="utf-8")
    os.replace(tmp, root / "words.jsonl")
    return words
