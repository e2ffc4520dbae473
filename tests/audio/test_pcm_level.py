"""level_dbfs: an exact integer sum of squares, same dB as the float formula it replaced."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rig.audio.pcm import GIL_HELD_MAX, SILENCE_DBFS, level_dbfs, sum_squares


def _float_level(pcm: np.ndarray) -> float:
    rms = math.sqrt(float(np.mean(np.square(pcm.astype(np.float64))))) / 32768.0
    return SILENCE_DBFS if rms <= 1e-6 else 20.0 * math.log10(rms)


@given(arrays(np.int16, st.integers(1, 4000)))
def test_level_matches_the_float_formula(pcm: np.ndarray) -> None:
    got = level_dbfs(pcm)
    want = _float_level(pcm)
    assert abs(got - want) <= 0.005 + 1e-9 or got == want == SILENCE_DBFS


def test_known_levels() -> None:
    assert level_dbfs(np.full(320, -32768, np.int16)) == 0.0
    assert level_dbfs(np.full(320, 16384, np.int16)) == round(20 * math.log10(0.5), 2)
    assert level_dbfs(np.zeros(320, np.int16)) == SILENCE_DBFS
    assert level_dbfs(np.zeros(0, np.int16)) == SILENCE_DBFS
    # a long full-scale chunk: the int64 sum holds 8e9 full-scale samples (60 s here)
    assert level_dbfs(np.full(48000 * 60, 32767, np.int16)) == round(
        20 * math.log10(32767 / 32768), 2
    )


@given(arrays(np.int16, st.integers(1, 1200)))
def test_sum_squares_is_exact_on_both_sides_of_the_gil_bound(pcm: np.ndarray) -> None:
    """The element-loop path (up to GIL_HELD_MAX samples) and the dot path give the exact
    integer sum, so a level never depends on which one measured it."""
    assert sum_squares(pcm) == float(int(np.sum(pcm.astype(np.int64) ** 2)))


def test_sum_squares_full_scale_at_the_bound() -> None:
    for n in (GIL_HELD_MAX - 1, GIL_HELD_MAX, GIL_HELD_MAX + 1):
        assert sum_squares(np.full(n, -32768, np.int16)) == float(n * 32768**2)
