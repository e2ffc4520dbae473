"""One turn under a condition, offline: level, then the room's noise, then the line.

How this works, for a turn's clean audio x (float, full scale 1.0) with speech span [a, b):
  1. level   x *= gain, the gain that reaches the target exactly (RMS over [a, b), peak,
             BS.1770 loudness) or `gain_db`; if any sample would clip, a ConditionError
             says by how much (a clipped whisper or shout is not the stimulus asked for)
  2. noise   n = the noise loop from this turn's noise position; its gain makes
             10 log10(sum x^2 / sum (g n)^2) over [a, b) equal `snr_db`; mix = x + g n
  3. line    phone: the mix through rig.conditions.line.phone, with 50 ms of the noise bed
             on each side so the filters start and end on the same noise as the bed around
             the turn; lossy: after rounding, 20 ms frames counted from the turn's start
  4. int16   rounded and clipped; the samples that clipped are counted
The results (gain, levels, achieved SNR measured on the rounded int16 samples, lost frames,
clipped samples) are the turn's record in the manifest and metrics.json.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

import rig.conditions.levels as levels  # the modules, not the package (no import cycle)
import rig.conditions.line as line
from rig.audio.pcm import Pcm16, to_int16
from rig.conditions.noise import F32, overlay
from rig.conditions.spec import Condition

F64 = npt.NDArray[np.float64]
MARGIN_S = 0.05


class ConditionError(ValueError):
    """A condition that cannot be met (it would clip, the turn is silent, too short)."""


@dataclass(frozen=True, slots=True)
class Bed:
    """The noise between turns, by noise position: a unit loop scaled on the fly, or a loop
    already through the line (int16)."""

    loop: F32 | Pcm16
    gain: float = 1.0

    def render(self, pos: int, n: int) -> Pcm16:
        part = take(self.loop, pos, n)
        if part.dtype == np.int16:
            copy: Pcm16 = part.copy()
            return copy
        return to_int16(part * self.gain)


def take(loop: Any, pos: int, n: int) -> Any:
    size = loop.size
    pos %= size
    if pos + n <= size:
        return loop[pos : pos + n]
    return np.concatenate([loop[pos:], take(loop, 0, n - (size - pos))])


def _r(x: float) -> float:
    return round(x, 3)


@dataclass(frozen=True, slots=True)
class Rendered:
    pcm: Pcm16
    bed: Bed | None
    result: dict[str, Any]


def render_turn(
    clean: Pcm16,
    span: tuple[int, int],
    cond: Condition,
    rate: int,
    *,
    loop: F32 | None,
    noise_pos: int,
    loss_gen: np.random.Generator | None,
) -> Rendered:
    a, b = span
    x = clean.astype(np.float64) / 32768.0
    result: dict[str, Any] = {
        "condition": cond.as_dict(),
        "speech_span_s": [_r(a / rate), _r(b / rate)],
        "clean": levels.measure(x, span, rate, False),
    }
    if cond.level is not None:
        key, value = cond.level
        try:
            gain_db = levels.target_gain_db(key, value, x, span, rate)
        except ValueError as exc:
            raise ConditionError(str(exc)) from None
        x = x * 10 ** (gain_db / 20)
        n_clip = levels.clipped(x)
        if n_clip:
            peak = levels.peak_dbfs(x)
            raise ConditionError(
                f"{key} = {value:g} needs {gain_db:+.1f} dB of gain and would clip {n_clip} "
                f"samples (peak {peak:+.1f} dBFS); lower the target"
                + ("" if key == "target_peak_dbfs" else " or set target_peak_dbfs instead")
            )
        xq = to_int16(x)
        result["level"] = {
            "gain_db": _r(gain_db),
            **levels.measure(xq.astype(np.float64) / 32768.0, span, rate, key == "target_lufs"),
        }
    else:
        xq = clean
    mix = xq.astype(np.float64) / 32768.0
    bed = None
    if cond.noise is not None and loop is not None:
        n = overlay(loop, noise_pos, x.size)
        p_speech = float(np.mean(np.square(mix[a:b])))
        p_noise = float(np.mean(np.square(n[a:b])))
        if p_speech <= 1e-12:
            raise ConditionError("the turn's speech is silent: no SNR can be set")
        g = math.sqrt(p_speech / (p_noise * 10 ** (cond.noise.snr_db / 10)))
        mix = mix + g * n
        bed = Bed(loop, g)
        rounded = to_int16(mix)
        noise_q = rounded[a:b].astype(np.float64) - xq[a:b].astype(np.float64)
        speech_q = xq[a:b].astype(np.float64)
        achieved = levels.db(float(np.sum(speech_q**2)) / max(float(np.sum(noise_q**2)), 1e-12))
        result["noise"] = {
            **cond.noise.as_dict(),
            "noise_gain_db": _r(20 * math.log10(g)),
            "noise_pos": noise_pos,
            "achieved_snr_db": _r(achieved),
        }
    clipped = levels.clipped(mix)
    if cond.line is not None and cond.line.kind == "phone":
        m = round(MARGIN_S * rate)
        ctx = np.zeros(mix.size + 2 * m)
        ctx[m : m + mix.size] = mix
        if bed is not None:
            ctx[:m] = bed.gain * overlay(bed.loop, noise_pos - m, m)  # type: ignore[arg-type]
            ctx[m + mix.size :] = bed.gain * overlay(bed.loop, noise_pos + mix.size, m)  # type: ignore[arg-type]
        mix = line.phone(ctx, rate)[m : m + x.size]
        if bed is not None:
            loop_f = bed.gain * np.asarray(bed.loop, np.float64)
            bed = Bed(to_int16(line.phone_loop(loop_f, rate)))
        result["line"] = {"kind": "phone"}
        clipped += levels.clipped(mix)
    out = to_int16(mix)
    if cond.line is not None and cond.line.kind == "lossy":
        assert loss_gen is not None
        lost = line.lost_frames(out.size, rate, cond.line.loss, loss_gen)
        out = line.lossy(out, rate, lost, cond.line.conceal)
        if bed is not None:
            bed_loop = to_int16(bed.gain * np.asarray(bed.loop, np.float64))
            bed_lost = line.lost_frames(bed_loop.size, rate, cond.line.loss, loss_gen)
            bed = Bed(line.lossy(bed_loop, rate, bed_lost, cond.line.conceal))
        result["line"] = {
            **cond.line.as_dict(),
            "frames": int(lost.size),
            "lost_frames": int(lost.sum()),
        }
    result["clipped_samples"] = clipped
    result["sent"] = levels.measure(out.astype(np.float64) / 32768.0, span, rate, False)
    return Rendered(out, bed, result)
