"""Levels of a turn: RMS and peak in dBFS, loudness in LUFS, and the gain that reaches a target.

Conventions (the same as rig.audio.pcm and rig.analysis.activity): full scale is 1.0 (int16
divided by 32768), so a full-scale square wave is 0 dBFS RMS and a full-scale sine -3 dBFS.
RMS is taken over the turn's *speech span* (first to last sample above the speech gate, the
span the turn marks bound), so a file's leading and trailing silence does not dilute it;
peak is the largest sample of the turn; loudness is ITU-R BS.1770-4 integrated loudness of
the whole turn (its gating ignores silence), computed by pyloudnorm (the `conditions` extra).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from rig.extras import require

F64 = npt.NDArray[np.float64]
SILENT_DB = -120.0


def db(power_ratio: float) -> float:
    return SILENT_DB if power_ratio <= 1e-12 else 10.0 * math.log10(power_ratio)


def rms_dbfs(x: F64) -> float:
    return db(float(np.mean(np.square(x)))) if x.size else SILENT_DB


def peak_dbfs(x: F64) -> float:
    return db(float(np.max(np.abs(x))) ** 2) if x.size else SILENT_DB


def lufs(x: F64, sample_rate: int) -> float:
    """BS.1770-4 integrated loudness (pyloudnorm); at least one 400 ms block is needed."""
    require("conditions", "target_lufs (BS.1770 loudness)")
    import pyloudnorm

    if x.size < round(0.4 * sample_rate):
        raise ValueError(f"{x.size / sample_rate:.3f} s is shorter than one 400 ms BS.1770 block")
    value = float(pyloudnorm.Meter(sample_rate).integrated_loudness(x))
    return value if math.isfinite(value) else SILENT_DB


def target_gain_db(key: str, value: float, x: F64, span: tuple[int, int], rate: int) -> float:
    """The gain (dB) that brings `x` to `key = value` (gain_db: `value` itself)."""
    if key == "gain_db":
        return value
    if key == "target_rms_dbfs":
        now = rms_dbfs(x[span[0] : span[1]])
    elif key == "target_peak_dbfs":
        now = peak_dbfs(x)
    else:  # target_lufs: loudness scales exactly with gain (a linear filter, then power)
        now = lufs(x, rate)
    if now <= SILENT_DB:
        raise ValueError("the turn is silent: no gain reaches a level")
    return value - now


def measure(x: F64, span: tuple[int, int], rate: int, with_lufs: bool) -> dict[str, Any]:
    """What a turn measures at: RMS over its speech span, peak, and (asked) loudness."""
    out: dict[str, Any] = {
        "rms_dbfs": round(rms_dbfs(x[span[0] : span[1]]), 3),
        "peak_dbfs": round(peak_dbfs(x), 3),
    }
    if with_lufs:
        out["lufs"] = round(lufs(x, rate), 3)
    return out


def clipped(x: F64) -> int:
    """Samples beyond what int16 can hold (they would be clipped)."""
    y = np.rint(x * 32768.0)
    return int(np.count_nonzero((y > 32767) | (y < -32768)))
