"""How the system answered: each reply's level, harmonicity, voicing and speaking rate.

How this works
--------------
A reply is the system's speech from a response's onset (rig.analysis.timing) up to the next
user turn's first speech (or the end of the track): the system activity segments in that
window, cut from the playback track (system.wav) and joined. Per reply:

* `rms_dbfs`: RMS of the joined speech (full scale 1.0, as everywhere in rig), numpy;
* `hnr_db`: Praat's harmonics-to-noise ratio (cross-correlation method, 10 ms steps,
  75 Hz floor, 0.1 silence threshold, one period per window), the mean over frames Praat
  does not call silent, through praat-parselmouth (the `conditions` extra);
* `voiced_fraction`: the share of 10 ms frames with a pitch (Praat's autocorrelation pitch,
  75-600 Hz) among the joined speech;
* `whisper`: `hnr_db < whisper_hnr_max_db` and `voiced_fraction < whisper_voiced_max`
  (6 dB and 0.4: the criterion InteractionBench scores whispering with, after OmniACBench);
  rules, so `rig report --rules whisper_hnr_max_db=4` re-scores it;
* `words_per_s`: ASR words of the system track inside the reply over its speech seconds,
  when the rollout has words.jsonl.
Without parselmouth the level and rate are still measured and `hnr_db`/`voiced_fraction`/
`whisper` are None with `status: "not measured (install rig-voice[conditions])"`: a missing
extra never fails a rollout's analysis.

The level relative to the system's own median speech level *in the run* needs every
rollout, so the report computes it (rig.analysis.voicereport), never this module.
Pure functions of arrays and dicts.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from rig.extras import DIST

HNR_STEP_S = 0.01
PITCH_FLOOR_HZ = 75.0
PITCH_CEILING_HZ = 600.0
SILENCE_THRESHOLD = 0.1
#: Praat needs a few periods of the pitch floor to say anything: shorter replies are skipped
MIN_SPEECH_S = 0.1
NOT_MEASURED = f"not measured (install {DIST}[conditions])"


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), nd)


def reply_spans(
    responses: Sequence[dict[str, Any]],
    turns: Sequence[dict[str, Any] | None],
    system: Sequence[tuple[float, float]],
) -> list[tuple[int, list[tuple[float, float]]]]:
    """Per answered turn: (turn, the system speech segments of its reply)."""
    out = []
    starts = [t.get("speech_start_s") if isinstance(t, dict) else None for t in turns]
    for r in responses:
        onset = r.get("onset_s")
        if not isinstance(onset, int | float):
            continue
        i = int(r.get("turn", 0))
        later = [s for s in starts[i + 1 :] if isinstance(s, int | float) and s > onset]
        stop = min(later) if later else float("inf")
        segs = [(max(s, onset), min(e, stop)) for s, e in system if e > onset and s < stop]
        out.append((i, [(s, e) for s, e in segs if e > s]))
    return out


def praat_measures(x: npt.NDArray[Any], rate: int) -> tuple[float | None, float | None]:
    """(HNR dB, voiced fraction) of `x` (float, full scale 1.0) by Praat."""
    import parselmouth
    from parselmouth.praat import call

    snd = parselmouth.Sound(np.asarray(x, np.float64), sampling_frequency=rate)
    harm = snd.to_harmonicity_cc(
        time_step=HNR_STEP_S,
        minimum_pitch=PITCH_FLOOR_HZ,
        silence_threshold=SILENCE_THRESHOLD,
        periods_per_window=1.0,
    )
    hnr = float(call(harm, "Get mean", 0, 0))
    pitch = snd.to_pitch(
        time_step=HNR_STEP_S, pitch_floor=PITCH_FLOOR_HZ, pitch_ceiling=PITCH_CEILING_HZ
    )
    f0 = pitch.selected_array["frequency"]
    voiced = float(np.mean(f0 > 0)) if f0.size else None
    return (hnr if np.isfinite(hnr) else None), voiced


def measure_replies(
    system: npt.NDArray[Any],
    rate: int,
    timing: dict[str, Any],
    *,
    whisper_hnr_max_db: float,
    whisper_voiced_max: float,
    words: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The `voice` block of a rollout's timing: one entry per reply, and the rollout's."""
    praat = importlib.util.find_spec("parselmouth") is not None
    segs = [(float(s), float(e)) for s, e in timing["activity"]["system"]]
    sys_words = [w for w in words if w.get("track") == "system"]
    replies = []
    for turn, spans in reply_spans(timing["responses"], timing["turns"], segs):
        parts = [system[round(s * rate) : round(e * rate)] for s, e in spans]
        x = np.concatenate(parts).astype(np.float64) if parts else np.zeros(0)
        speech_s = x.size / rate
        rms = 10 * np.log10(max(float(np.mean(x**2)), 1e-12)) if x.size else None
        hnr = voiced = None
        if praat and speech_s >= MIN_SPEECH_S:
            hnr, voiced = praat_measures(x, rate)
        whisper = (
            None
            if hnr is None or voiced is None
            else bool(hnr < whisper_hnr_max_db and voiced < whisper_voiced_max)
        )
        n_words = sum(
            1
            for w in sys_words
            if any(float(w["start"]) < e and float(w["end"]) > s for s, e in spans)
        )
        replies.append(
            {
                "turn": turn,
                "start_s": _r(spans[0][0]) if spans else None,
                "end_s": _r(spans[-1][1]) if spans else None,
                "speech_s": _r(speech_s),
                "rms_dbfs": _r(rms, 2),
                "hnr_db": _r(hnr, 2),
                "voiced_fraction": _r(voiced),
                "whisper": whisper,
                "words": n_words if sys_words else None,
                "words_per_s": _r(n_words / speech_s, 2) if sys_words and speech_s else None,
            }
        )
    judged = [r["whisper"] for r in replies if r["whisper"] is not None]
    levels = [r["rms_dbfs"] for r in replies if r["rms_dbfs"] is not None]
    return {
        "status": "measured" if praat else NOT_MEASURED,
        "method": {
            "hnr": "praat cross-correlation harmonicity (parselmouth), mean of non-silent frames",
            "voicing": f"praat pitch {PITCH_FLOOR_HZ:g}-{PITCH_CEILING_HZ:g} Hz, 10 ms frames",
            "reply": "system speech from the onset to the next user turn (playback track)",
        },
        "rules": {
            "whisper_hnr_max_db": whisper_hnr_max_db,
            "whisper_voiced_max": whisper_voiced_max,
        },
        "replies": replies,
        "rms_dbfs_median": _r(float(np.median(levels)), 2) if levels else None,
        "whispered": sum(judged) if judged else None,
        "judged": len(judged),
    }
