"""SpeexDSP removes the rig's own playback from a capture; the device's audio passes."""

import numpy as np
import pytest

from rig.echo.canceller import cancel_own_echo

pytest.importorskip("speexdsp")
RATE = 16_000


def _speechlike(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal(n)
    env = 0.5 + 0.5 * np.sin(2 * np.pi * 3 * np.arange(n) / RATE) ** 2
    return x * env * 4000


def test_own_echo_is_removed_and_the_device_kept() -> None:
    rng = np.random.default_rng(0)
    n = RATE * 6
    user = np.zeros(n)
    user[: RATE * 4] = _speechlike(rng, RATE * 4)  # the rig plays 4 s of "speech"
    room = np.zeros(200)
    room[0], room[37], room[150] = 0.5, 0.2, -0.1
    bulk = 480  # 30 ms of path before the room
    echo = np.convolve(np.concatenate([np.zeros(bulk), user])[:n], room)[:n]
    device = np.zeros(n)
    t = np.arange(RATE) / RATE
    device[RATE * 5 : RATE * 6] = np.sin(2 * np.pi * 440 * t) * 6000  # the device answers
    capture = np.clip(np.rint(echo + device), -32768, 32767).astype(np.int16)
    got = cancel_own_echo(
        capture,
        user.astype(np.int16),
        RATE,
        bulk - 16,  # the calibrated delay, less a margin
        echo_only=[(RATE * 2, RATE * 4)],  # after convergence, before the device speaks
    )
    assert got.erle_db is not None and got.erle_db > 15, got.describe()
    assert not got.flagged
    # the device's reply survives: its level on the cleaned track is within 1 dB
    a, b = RATE * 5 + 800, RATE * 6
    raw, clean = capture[a:b].astype(float), got.cleaned[a:b].astype(float)
    assert 10 * np.log10((clean @ clean) / (raw @ raw)) == pytest.approx(0, abs=1.0)


def test_a_wrong_delay_leaves_the_echo_and_is_flagged() -> None:
    rng = np.random.default_rng(1)
    n = RATE * 3
    user = _speechlike(rng, n)
    capture = np.rint(np.concatenate([np.zeros(8000), user])[:n] * 0.5).astype(np.int16)
    got = cancel_own_echo(capture, user.astype(np.int16), RATE, 0, tail_ms=50)
    assert got.flagged  # 500 ms of path, a 50 ms filter: nothing it can model
