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
