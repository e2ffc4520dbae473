"""The onset gate's int16 comparisons pass exactly the samples |x| > threshold passes."""

from __future__ import annotations

import numpy as np
import pytest

from rig.core.onset import OnsetDetector

EVERY_SAMPLE = np.arange(-32768, 32768, dtype=np.int16)


@pytest.mark.parametrize(
    "threshold_dbfs", [-200.0, -100.0, -60.0, -40.0, -40.01, -20.0, -6.0, -1e-3, 0.0, 1e-4, 3.0]
)
def test_every_int16_value_is_gated_as_by_magnitude(threshold_dbfs: float) -> None:
    det = OnsetDetector(16_000, threshold_dbfs)
    want = np.flatnonzero(np.abs(EVERY_SAMPLE.astype(np.int32)) > det.threshold)
    first = det.feed(EVERY_SAMPLE, 0)
    if want.size == 0:
        assert first is None and det.last_loud_end_sample is None
    else:
        assert first == int(want[0])
        assert det.last_loud_end_sample == int(want[-1]) + 1


def _feed_searching_every_chunk(state: dict, pcm: np.ndarray, start: int, k: int, gap: int):
    """The detector's rule with the in-chunk gap search run on every chunk (as before the
    skip): the reference the detector must match chunk by chunk."""
    loud = np.flatnonzero((pcm > k) | (pcm < -k))
    if loud.size == 0:
        return None
    onset, first, last_end = None, int(loud[0]), state.get("end")
    if last_end is None or start + first - last_end >= gap:
        onset = first
    else:
        gaps = np.flatnonzero(np.diff(loud) >= gap)
        if gaps.size:
            onset = int(loud[gaps[0] + 1])
    state["end"] = start + int(loud[-1]) + 1
    return onset


@pytest.mark.parametrize("seed", range(12))
def test_onsets_in_chunks_of_any_size_match_the_full_search(seed: int) -> None:
    """Chunks short and long (a quiet stretch inside one chunk, bursts across chunk edges):
    the in-chunk gap search is skipped only where no gap fits, so every chunk's onset is the
    one the search on every chunk finds."""
    rng = np.random.default_rng(seed)
    det = OnsetDetector(16_000, -40.0, gap_ms=20.0)  # gap: 320 samples
    pcm = np.zeros(40_000, np.int16)
    for _ in range(40):  # bursts 1-600 samples long, anywhere
        at, n = int(rng.integers(0, 39_000)), int(rng.integers(1, 600))
        pcm[at : at + n] = rng.choice([-3000, 3000], n)
    state: dict = {}
    pos, inside = 0, 0
    while pos < len(pcm):
        n = int(rng.choice([1, 50, 320, 321, 700, 2_000]))
        chunk = pcm[pos : pos + n]
        want = _feed_searching_every_chunk(state, chunk, pos, det._k, det.gap_samples)
        got = det.feed(chunk, pos)
        assert got == want, pos
        inside += got is not None and got != int(np.flatnonzero(np.abs(chunk) > 327)[0])
        pos += n
    assert det.last_loud_end_sample == state["end"]
    assert inside  # some onsets were found by the search inside a chunk
