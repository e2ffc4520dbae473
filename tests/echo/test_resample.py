"""The played track read at the uplink rate: exact at equal rates, near-exact across rates."""

import numpy as np
import pytest

from rig.echo.resample import PlayedTrack


def test_equal_rates_are_a_copy_with_gaps_silent() -> None:
    t = PlayedTrack(16_000, 1.0)
    t.write(100, np.full(50, 1000, np.int16))
    t.write(300, np.full(10, -1000, np.int16))
    y = t.read(90, 320, 16_000)
    assert np.all(y[:10] == 0) and np.allclose(y[10:60], 1000 / 32768)
    assert np.all(y[60:210] == 0) and np.allclose(y[210:220], -1000 / 32768)
    assert np.all(y[220:] == 0)  # not played (yet): silence


@pytest.mark.parametrize(("down", "freq"), [(24_000, 440.0), (48_000, 3000.0), (8_000, 1000.0)])
def test_other_rates_read_at_the_exact_positions(down: int, freq: float) -> None:
    t = PlayedTrack(down, 2.0)
    sig = np.rint(np.sin(2 * np.pi * freq * np.arange(down) / down) * 10_000).astype(np.int16)
    for i in range(0, sig.size, 480):  # written piecewise, as the listener releases it
        t.write(i, sig[i : i + 480])
    y = t.read(1000, 1320, 16_000)
    ref = np.sin(2 * np.pi * freq * np.arange(1000, 1320) / 16_000) * 10_000 / 32768
    assert 20 * np.log10(np.abs(y - ref).max() / 0.305) < -60


def test_the_ring_forgets_what_is_older_than_it_keeps() -> None:
    t = PlayedTrack(16_000, 0.1)  # 1600 samples
    t.write(0, np.full(5000, 500, np.int16))
    assert np.all(t.read(0, 100, 16_000) == 0)
    assert np.allclose(t.read(4900, 5000, 16_000), 500 / 32768)
