"""The capture-path canceller: blocks in as a sound card delivers them, the rig's own echo out."""

import numpy as np
import pytest

from rig.echo.livecancel import CaptureCanceller, frame_samples

pytest.importorskip("speexdsp")
RATE = 48_000
BLOCK = 256  # one JACK period


def _speechlike(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal(n)
    env = 0.5 + 0.5 * np.sin(2 * np.pi * 3 * np.arange(n) / RATE) ** 2
    return x * env * 6000


def _run(
    room: np.ndarray,
    bulk: int,
    *,
    pretrain: bool,
    offset: int = 12_345,
    device_at_s: float = 2.5,
    assumed_bulk: int | None = None,
) -> tuple[CaptureCanceller, np.ndarray, np.ndarray, np.ndarray]:
    """The rig plays 2 s, the device answers 0.5 s later; input frames = output + offset."""
    rng = np.random.default_rng(3)
    n = RATE * 3
    play = np.zeros(n)
    play[: RATE * 2] = _speechlike(rng, RATE * 2)
    echo = np.convolve(np.concatenate([np.zeros(bulk), play])[:n], room)[:n]
    device = np.zeros(n)
    a = round(device_at_s * RATE)
    device[a:] = 6000 * np.sin(2 * np.pi * 440 * np.arange(n - a) / RATE)
    capture = np.clip(np.rint(echo + device), -32768, 32767).astype(np.int16)
    play16 = play.astype(np.int16)
    margin = 96  # the calibration's 2 ms before the direct path
    c = CaptureCanceller(RATE, 4800, float(room @ room))
    # input frame j hears output frame j - lag first
    c.align(offset + (bulk if assumed_bulk is None else assumed_bulk) - margin)
    if pretrain:
        c.pretrain(np.concatenate([np.zeros(margin), room]))
    cleaned = np.zeros(n, np.int16)
    raw_back = np.zeros(n, np.int16)
    for k in range(0, n, BLOCK):
        c.played(k, play16[k : k + BLOCK])  # the output block of this cycle first...
        for f, clean, raw in c.captured(offset + k, capture[k : k + BLOCK]):  # ...then input
            cleaned[f - offset : f - offset + clean.size] = clean
            raw_back[f - offset : f - offset + raw.size] = raw
    return c, capture, cleaned, raw_back


def test_frame_is_a_power_of_two_near_5_ms() -> None:
    assert frame_samples(48_000) == 256 and frame_samples(16_000) == 64


def test_seeded_canceller_removes_the_echo_from_the_start_and_keeps_the_device() -> None:
    room = np.zeros(300)
    room[0], room[40], room[200] = 0.5, 0.15, -0.05  # -6 dB direct path and two reflections
    c, capture, cleaned, raw = _run(room, bulk=1500, pretrain=True)
    n_done = c.frames * c.frame
    assert np.array_equal(raw[:n_done], capture[:n_done])  # the raw capture comes back as is
    v = c.verdict(-40.0)
    assert v.erle_db is not None and v.erle_db > 25, v.as_dict()
    assert not v.flagged and v.residual_peak_dbfs is not None
    print(v.as_dict(), c.describe())
    # already converged in the first half second: the seed is the measured room
    first = slice(RATE // 10, RATE // 2)
    e_raw = float(np.sum(capture[first].astype(float) ** 2))
    e_clean = float(np.sum(cleaned[first].astype(float) ** 2))
    assert 10 * np.log10(e_raw / max(e_clean, 1.0)) > 20
    assert c.suppressed > 0  # what the filter left of the echo alone is silenced
    # the device's reply passes within 1 dB
    a, b = int(2.6 * RATE), int(2.95 * RATE)
    x, y = capture[a:b].astype(float), cleaned[a:b].astype(float)
    assert 10 * np.log10((y @ y) / (x @ x)) == pytest.approx(0, abs=1.0)
    assert c.describe()["cost_us_per_frame"] > 0


def test_unseeded_canceller_starts_worse() -> None:
    room = np.zeros(300)
    room[0], room[40], room[200] = 0.5, 0.15, -0.05
    _, capture, cleaned, _ = _run(room, bulk=1500, pretrain=False)
    first = slice(RATE // 10, RATE // 2)
    e_raw = float(np.sum(capture[first].astype(float) ** 2))
    e_clean = float(np.sum(cleaned[first].astype(float) ** 2))
    assert 10 * np.log10(e_raw / e_clean) < 20


def test_a_wrong_alignment_is_flagged_with_a_reason() -> None:
    room = np.zeros(10)
    room[0] = 0.5
    # the echo comes 417 ms late, the canceller was told 0 ms; its filter covers 100 ms
    c, *_ = _run(room, bulk=20_000, pretrain=False, assumed_bulk=0)
    v = c.verdict(-40.0)
    assert v.flagged and v.reason is not None and "dB" in v.reason


def test_the_device_talking_over_the_rig_is_not_suppressed() -> None:
    """Double talk: the device answers while the rig still plays (its tone about 9 dB over the
    rig's echo); the cleaned capture keeps the device within 1 dB, not suppressed. Double talk
    is where an adaptive filter does worst: what differs from the device alone stays ~9 dB
    under it here (MDF adapts on the device too), against 40+ dB without double talk."""
    room = np.zeros(300)
    room[0] = 0.5
    c, capture, cleaned, _ = _run(room, bulk=1500, pretrain=True, device_at_s=1.0)
    a, b = int(1.2 * RATE), int(1.9 * RATE)
    device = 6000 * np.sin(2 * np.pi * 440 * np.arange(a, b) / RATE - 2 * np.pi * 440 * 1.0)
    y = cleaned[a:b].astype(float)
    assert 10 * np.log10((y @ y) / (device @ device)) == pytest.approx(0, abs=1.0)
    err = y - device
    assert 10 * np.log10((err @ err) / (device @ device)) < -6
