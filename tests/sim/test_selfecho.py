"""The reference system's own echo: ignored by default, yielded to when self-echo-sensitive.

A rig and the sim in virtual time: reply chunks leave the sim late by a random amount, the
rig's playback queue places them, the echo condition's frame hook adds the playback 40 ms
later at -10 dB, and uplink frames reach the sim with jitter."""

import numpy as np
import pytest

from rig.core.placement import PlaybackQueue
from rig.core.records import SystemAudio
from rig.echo.path import EchoPath
from rig.echo.spec import EchoSpec
from rig.sim.engine import SimConfig, SimEngine
from rig.sim.selfecho import OwnEchoCanceller

NS = 1_000_000_000
RATE, N = 16_000, 320


def _converse(sensitive: bool, seed: int, *, barge_at_s: float | None = None) -> list[str]:
    rng = np.random.default_rng(seed)
    eng = SimEngine(SimConfig(self_echo_sensitive=sensitive, reply_s=1.5))
    user = np.zeros(RATE * 5, np.int16)
    t = np.arange(RATE) / RATE
    user[8000 : 8000 + RATE] = (np.sin(2 * np.pi * 220 * t) * 8000).astype(np.int16)
    if barge_at_s is not None:  # the user talks over the reply: a real barge-in
        i = int(barge_at_s * RATE)
        user[i : i + RATE // 2] = (np.sin(2 * np.pi * 300 * t[: RATE // 2]) * 8000).astype(np.int16)
    pb = PlaybackQueue(0, RATE)
    echo = EchoPath(EchoSpec(erl_db=10, delay_ms=40), RATE, N)
    pending: list[tuple[int, np.ndarray]] = []
    events = []
    for k in range(user.size // N):
        tk = k * N * NS // RATE
        emits, truths = eng.poll(tk)
        events += truths
        for e in emits:
            t_send = max(tk, e.t_ns) + int(rng.uniform(0, 15) * 1e6)
            eng.said(t_send, e.pcm)
            pending.append((t_send + 200_000, e.pcm))
        pending.sort(key=lambda p: p[0])
        while pending and pending[0][0] <= tk:
            t_arr, pcm = pending.pop(0)
            pb.push(pcm, t_arr)
        for p in pb.release(tk):
            echo.hear(SystemAudio(RATE, p.start_sample, p.pcm))
        frame = echo.apply(user[k * N : (k + 1) * N], k * N)
        events += eng.on_audio(frame, tk + int(rng.uniform(0, 10) * 1e6) + 300_000)
    return [e.event for e in events]


@pytest.mark.parametrize("seed", range(4))
def test_the_default_ignores_its_own_echo(seed: int) -> None:
    events = _converse(False, seed)
    assert events.count("speech_start") == 1 and "reply_cancel" not in events
    assert events.count("reply_start") == 1


@pytest.mark.parametrize("seed", range(2))
def test_self_echo_sensitive_yields_to_it(seed: int) -> None:
    events = _converse(True, seed)
    assert events.count("reply_cancel") >= 2  # it yields, answers its echo, yields again


def test_the_default_still_hears_a_user_barging_in() -> None:
    events = _converse(False, 0, barge_at_s=3.0)
    assert "reply_cancel" in events  # reply from ~2.4 s; the user speaks at 3.0 s


def test_without_any_reply_the_input_passes_unchanged() -> None:
    c = OwnEchoCanceller(RATE)
    x = (np.random.default_rng(0).standard_normal(N) * 3000).astype(np.int16)
    for k in range(20):
        assert np.array_equal(c.clean(x, k * 20_000_000), x)
