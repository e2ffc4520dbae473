"""A noise scene on a second output: the level exact, the loop deterministic, on the same clock.

The room client (tests/support/jackroom.py) takes the rig's noise stream (opened on
JACK:loopback, moved off it at once) and plays it into the rig's own input, so where the
noise arrives is the rig's capture."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile

from rig.clock.base import MonotonicClock
from rig.core.events import DownAudio
from rig.device.noise import NoiseOptions, NoiseScene
from rig.device.options import DeviceOptions
from rig.errors import ConfigError
from rig.transports.device import DeviceTransport

RATE = 48_000
D5 = 480  # 10 ms
ROOT = Path(__file__).resolve().parents[2]


def _noise(n: int, seed: int = 5) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    return np.clip(rng.standard_normal(n) * 3000, -32768, 32767).astype(np.int16)


def test_the_scene_loops_from_its_first_sample_at_the_exact_level() -> None:
    loop = _noise(1000)
    scene = NoiseScene(loop, -30.0)
    got = np.concatenate([scene.take(700), scene.take(700), scene.take(600)])
    assert np.array_equal(got[:1000], scene.loop) and np.array_equal(got[1000:], scene.loop)
    y = scene.loop.astype(float)
    assert 10 * np.log10((y @ y) / y.size / 32768**2) == pytest.approx(-30.0, abs=0.01)
    assert scene.describe()["clipped_samples"] == 0
    assert NoiseScene(loop, -1.0).clipped > 0  # counted, not hidden
    with pytest.raises(ConfigError, match="silent"):
        NoiseScene(np.zeros(100, np.int16), -30.0)
    with pytest.raises(ConfigError, match="<= 0"):
        NoiseScene(loop, 3.0)


@pytest.mark.device
def test_noise_arrives_at_the_set_level_on_the_same_clock(tmp_path: Path) -> None:
    jack = pytest.importorskip("jack")
    from tests.device.test_room import _need_jack
    from tests.support.jackroom import portaudio_client_name

    period = _need_jack()
    del jack
    loop = _noise(RATE + 1234)  # 1.03 s: not a whole number of periods
    f = tmp_path / "scene.wav"
    soundfile.write(f, loop, RATE, subtype="PCM_16")
    room = subprocess.Popen(
        [
            sys.executable, "-m", "tests.support.jackroom", "--rig", portaudio_client_name(),
            "--noise-port", "loopback:", "--noise-to", "rig", "--d5", str(D5),
        ],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    assert room.stdout is not None and room.stdin is not None
    assert room.stdout.readline().startswith("room ready")
    try:
        got, noise, t_first = asyncio.run(_capture(f))
    finally:
        room.stdin.close()
        room.wait(5)
    if noise["xruns"]:  # a late period drops noise samples: the loop cannot be compared
        pytest.skip(f"xruns on the noise output (a loaded box): {noise['xruns']}")
    pcm = np.concatenate([g.pcm for g in got])
    first = int(np.flatnonzero(pcm)[0])
    # the scene from its first sample, as played: the same samples (int16 -> float -> int16,
    # PortAudio dithers its float -> int16 conversion by up to 2 LSB)
    scene = NoiseScene(loop, -24.0).loop
    k = min(pcm.size - first, 2 * scene.size)
    want = np.concatenate([scene, scene])[:k]
    assert np.max(np.abs(pcm[first : first + k].astype(int) - want)) <= 2
    # at the set level where it arrives, over whole loops
    seg = pcm[first : first + scene.size].astype(float)
    assert 10 * np.log10((seg @ seg) / seg.size / 32768**2) == pytest.approx(-24.0, abs=0.05)
    # on the rig's clock: it starts where the room puts it after the scene's first sample
    t_arrive = t_first(first)
    expected = noise["start_ns"] + (D5 + period) * 1e9 / RATE
    assert (t_arrive - expected) / 1e6 == pytest.approx(0.0, abs=1.0)
    assert noise["level_dbfs"] == -24.0 and noise["loop_samples"] == scene.size


async def _capture(f: Path) -> tuple[list[DownAudio], dict[str, Any], Any]:
    clock = MonotonicClock()
    t = DeviceTransport(
        DeviceOptions(output="JACK:system", input="JACK:system", lead_ms=20),
        clock,
        calibration="none",
        noise=NoiseOptions(device="JACK:loopback", file=str(f), level_dbfs=-24.0),
    )
    await t.open()
    got: list[DownAudio] = []
    try:
        sent = await t.send_audio(np.zeros(960, np.int16), 0, clock.now_ns())
        async for item in t.receive():
            if isinstance(item, DownAudio):
                got.append(item)
                if item.t_ns > sent + 2_700_000_000:
                    break
        metrics: dict[str, Any] = {"responses": []}
        t.finish_metrics(metrics)
    finally:
        await t.close()
    starts = np.cumsum([0] + [g.pcm.size for g in got])

    def t_of(sample: int) -> float:
        i = int(np.searchsorted(starts, sample, side="right")) - 1
        return got[i].t_ns + (sample - starts[i]) * 1e9 / RATE

    return got, metrics["noise"], t_of
