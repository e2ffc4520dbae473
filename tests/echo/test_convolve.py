"""The partitioned convolution equals the linear convolution, block by block."""

import numpy as np
import pytest

from rig.echo.convolve import PartitionedConvolver


@pytest.mark.parametrize(("taps", "block"), [(1, 320), (100, 320), (320, 320), (4801, 320), (7, 4)])
def test_blocks_equal_the_linear_convolution(taps: int, block: int) -> None:
    rng = np.random.default_rng(taps)
    h = rng.standard_normal(taps)
    x = rng.standard_normal(block * 25)
    conv = PartitionedConvolver(h, block)
    y = np.concatenate([conv.process(x[i : i + block]) for i in range(0, x.size, block)])
    assert np.abs(y - np.convolve(x, h)[: x.size]).max() < 1e-9


def test_a_wrong_block_is_refused() -> None:
    conv = PartitionedConvolver(np.ones(3), 8)
    with pytest.raises(ValueError, match="block of 8"):
        conv.process(np.zeros(7))
