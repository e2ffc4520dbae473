"""Uplink frame levels from their track's table (rig.recordings.levels): the same floats as
measuring each frame, one table per audio, frame size and phase, gone with the audio."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from rig.audio.pcm import SILENCE_DBFS, frame_levels, level_dbfs
from rig.recordings.levels import BLOCK_FRAMES, FrameLevels


def _audio(n: int, scale: float, seed: int = 1) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal(n) * scale
    return np.clip(np.rint(x), -32768, 32767).astype(np.int16)


@pytest.mark.parametrize("scale", [0.0, 0.4, 30.0, 3000.0, 40000.0])
@pytest.mark.parametrize("n", [160, 320, 499, 500, 501, 960])
def test_the_table_is_level_dbfs_frame_by_frame(scale: float, n: int) -> None:
    """Exact: both sides of numpy's element-loop bound (500), silence and clipping."""
    x = _audio(30 * n + 17, scale)
    for phase in (0, 1, n // 2, n - 1):
        table = frame_levels(x, n, phase)
        assert len(table) == (len(x) - phase) // n
        want = [level_dbfs(x[phase + k * n : phase + (k + 1) * n]) for k in range(len(table))]
        assert table == want
    if scale == 0.0:
        assert set(frame_levels(x, n)) == {SILENCE_DBFS}


def test_no_whole_frame_no_levels() -> None:
    x = _audio(100, 1000.0)
    assert frame_levels(x, 320) == []
    assert frame_levels(x, 50, phase=100) == []
    assert frame_levels(x[:0], 10) == []


def test_one_table_per_audio_size_and_phase() -> None:
    levels = FrameLevels()
    x, y = _audio(16_000, 3000.0), _audio(16_000, 30.0, seed=2)
    for pos in range(0, 16_000 - 320, 320):  # 200 repeats of a play share its table
        assert levels.at(x, pos, 320) == level_dbfs(x[pos : pos + 320])
    assert levels.measured == 1
    for pos in (7, 327, 15_047):  # another phase: another table
        assert levels.at(x, pos, 320) == level_dbfs(x[pos : pos + 320])
    assert levels.at(x, 0, 160) == level_dbfs(x[:160])  # another frame size
    assert levels.at(y, 640, 320) == level_dbfs(y[640:960])  # other audio
    assert levels.measured == 4


def test_a_frame_past_the_last_whole_one_is_measured() -> None:
    levels = FrameLevels()
    x = _audio(1000, 3000.0)
    assert levels.at(x, 900, 100) == level_dbfs(x[900:1000])  # the last whole frame
    assert levels.at(x, 950, 100) == level_dbfs(x[950:1000])  # a short tail: measured


def test_new_audio_at_a_reused_id_gets_its_own_table() -> None:
    levels = FrameLevels()
    x = _audio(3200, 3000.0)
    loud = levels.at(x, 0, 320)
    key = id(x)
    del x
    gc.collect()
    for seed in range(200):  # a new array, often at the freed address
        y = _audio(3200, 3.0, seed=seed)
        assert levels.at(y, 0, 320) == level_dbfs(y[:320]) != loud
        if id(y) == key:
            break
        del y


def test_a_long_track_is_measured_a_block_at_a_time() -> None:
    """Only the blocks frames came from, each in one pass (the writer never holds the GIL
    for a whole long track), and the same floats on both sides of a block's edge."""
    levels = FrameLevels()
    n = 320
    x = _audio(n * (3 * BLOCK_FRAMES + 10) + 5, 3000.0)
    for k in (0, BLOCK_FRAMES - 1, BLOCK_FRAMES, 3 * BLOCK_FRAMES + 9):
        assert levels.at(x, k * n, n) == level_dbfs(x[k * n : (k + 1) * n]), k
    assert levels.measured == 3  # blocks 0, 1 and 3; never block 2
    for k in range(BLOCK_FRAMES - 3, BLOCK_FRAMES + 3):
        assert levels.at(x, k * n + 5, n) == level_dbfs(x[k * n + 5 : (k + 1) * n + 5])
    assert levels.measured == 5  # phase 5: blocks 0 and 1
