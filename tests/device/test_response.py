"""The calibration keeps the path's impulse response: recovered from a synthetic recording."""

import json
from pathlib import Path

import numpy as np
import pytest

from rig.device.calibrate import find_probe, log_chirp, probe_train
from rig.device.calibration import load_echo_response
from rig.device.calibration_store import CalibrationStore, PathKey
from rig.device.response import ImpulseResponse, measure_response
from rig.errors import ConfigError

RATE = 48_000


def test_the_response_of_a_known_room_comes_back() -> None:
    probe = log_chirp(RATE)
    train, starts = probe_train(probe, 3, RATE // 2)
    room = np.zeros(2400)
    room[0], room[480], room[1500] = 0.5, 0.12, -0.08  # -6 dB, reflections at 10 and 31 ms
    bulk = 1234
    rec = np.convolve(np.concatenate([np.zeros(bulk), train]), room)[: train.size + bulk]
    rec += np.random.default_rng(0).standard_normal(rec.size) * 1e-4
    pos = [find_probe(probe, rec, s, s + RATE // 2) for s in starts]
    assert all(p is not None for p in pos)
    rt_ms = bulk * 1000 / RATE
    got = measure_response(probe, rec, [p.position_frames for p in pos if p], RATE, rt_ms)
    assert got is not None
    h = got.array
    pre = 96  # 2 ms before the direct path
    assert got.t0_ms == pytest.approx(rt_ms - 2.0)
    # the probe's band (100 Hz to 0.4 x rate) is what is known: speech in it goes through
    # the measured response as through the room, to -30 dB
    rng = np.random.default_rng(1)
    x = np.fft.irfft(np.fft.rfft(rng.standard_normal(RATE)) * _band(RATE, 200, 8000))
    true = np.convolve(x, room)[: x.size]
    est = np.convolve(x, h)[pre : pre + x.size]
    err = 10 * np.log10(np.sum((est - true) ** 2) / np.sum(true**2))
    assert err < -30, err
    assert got.gain_db == pytest.approx(10 * np.log10(0.25 + 0.0144 + 0.0064), abs=1.5)
    assert got.peak_ms == pytest.approx(rt_ms, abs=0.05)
    assert 31 < got.length_ms() < 34
    back = ImpulseResponse.from_dict(got.as_dict())
    assert back.rate == RATE and np.allclose(back.array, h, atol=1e-5)
    with pytest.raises(ValueError, match="finite"):
        ImpulseResponse.from_dict({"rate": RATE, "t0_ms": 0, "taps": [float("nan")]})


def _band(rate: int, lo: float, hi: float) -> np.ndarray:
    f = np.fft.rfftfreq(rate, 1 / rate)
    return ((f >= lo) & (f <= hi)).astype(float)


def test_the_canceller_takes_the_response_stored_for_exactly_this_path(tmp_path: Path) -> None:
    key = PathKey("sounddevice", "JACK", "mic", "spk", RATE, 0, "high", False)
    ir = ImpulseResponse(RATE, 38.0, (0.0, 0.5, 0.1))
    doc = {**key.as_dict(), "round_trip_ms": 40.0, "impulse_response": ir.as_dict()}
    with pytest.raises(ConfigError, match="run `rig calibrate"):
        load_echo_response("auto", key, tmp_path)
    CalibrationStore(tmp_path).save(doc)
    got = load_echo_response("auto", key, tmp_path)
    assert got.response == ir and got.round_trip_ms == 40.0
    f = tmp_path / "old.json"
    f.write_text(json.dumps({**doc, "impulse_response": None}))
    with pytest.raises(ConfigError, match="no impulse response"):
        load_echo_response(str(f), key)
    other = PathKey("sounddevice", "JACK", "mic", "spk", 16_000, 0, "high", False)
    f.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="measured on another path"):
        load_echo_response(str(f), other)
