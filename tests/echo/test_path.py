"""The uplink frame hook: the playback track as heard, delayed, attenuated, through a room."""

from typing import Any

import numpy as np
import pytest

from rig.core.events import DownAudio
from rig.core.listener import Listener
from rig.core.records import SystemAudio, TrackAudio
from rig.core.uplink import Frame
from rig.echo.path import EchoPath
from rig.echo.spec import EchoSpec
from rig.errors import ConfigError

RATE, N = 16_000, 320
NS = 1_000_000_000


def _frames(path: EchoPath, user: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sent, echo = [], []
    for k in range(user.size // N):
        sent.append(path.apply(user[k * N : (k + 1) * N], k * N))
        echo += [r.pcm for r in path.take() if isinstance(r, TrackAudio)]
    return np.concatenate(sent), np.concatenate(echo)


def test_the_echo_is_the_playback_delayed_and_attenuated_exactly() -> None:
    path = EchoPath(EchoSpec(erl_db=20, delay_ms=40), RATE, N)
    reply = np.rint(np.sin(np.arange(8000) * 0.05) * 20_000).astype(np.int16)
    path.hear(SystemAudio(RATE, 1600, reply))  # played from 0.1 s
    user = np.full(RATE, 7, np.int16)
    sent, echo = _frames(path, user)
    want = np.zeros(RATE)
    want[1600 + 640 : 1600 + 640 + 8000] = reply * 0.1
    assert np.abs(echo - np.rint(want)).max() <= 1
    assert np.array_equal(sent, user + echo)  # user.wav is what was sent
    d = path.describe()
    assert d["spec"] == "erl_db=20,delay_ms=40" and d["frames"] == RATE // N
    assert d["peak_dbfs"] == pytest.approx(-20 + 20 * np.log10(20_000 / 32768), abs=0.1)


def test_audio_dropped_at_a_barge_in_is_never_echoed() -> None:
    """Through a real listener: the echo hears what played, truncation included."""
    listener = Listener(0)
    path = EchoPath(EchoSpec(erl_db=0, delay_ms=40), RATE, N)
    reply = np.full(RATE, 1000, np.int16)  # 1 s, all arriving at once at t = 0
    listener.on_audio(DownAudio(reply, RATE, 0))
    played = [r for r in listener.release(NS // 4) if isinstance(r, SystemAudio)]
    played += [r for r in listener.barge_in(0, NS // 2) if isinstance(r, SystemAudio)]
    for r in played:
        path.hear(r)
    _, echo = _frames(path, np.zeros(RATE, np.int16))
    loud = np.flatnonzero(echo)
    assert loud[0] == 640 and loud[-1] == RATE // 2 + 640 - 1  # 0.5 s played, 40 ms later


def test_a_silent_frame_with_echo_in_it_is_not_silent_any_more() -> None:
    """`Frame.silent` lets the writer skip measuring a frame's level: not once echo is in it."""

    class Sink:  # the session's sink as the echo path uses it: playback goes to `played`
        played: Any = None

        def put_all(self, records: list[Any]) -> None:
            for r in records:
                self.played(r)

    listener = Listener(0)
    path = EchoPath(EchoSpec(erl_db=0, delay_ms=40), RATE, N)
    sink = Sink()
    path._sink, sink.played = sink, path.tap  # type: ignore[assignment]
    listener.on_audio(DownAudio(np.full(RATE, 1000, np.int16), RATE, 0))
    for k in range(5):
        frame = Frame(k, k * 20_000_000, np.zeros(N, np.int16), (), silent=True)
        out = path.on_frame(frame, listener, k * 20_000_000)
        assert not out.silent and (k < 2 or out.pcm.any())  # echo from 40 ms on


def test_a_room_spreads_the_echo_with_unit_energy(tmp_path) -> None:
    import soundfile as sf

    h = np.zeros(800)
    h[0], h[400] = 0.6, 0.8  # two paths, energy 1
    sf.write(tmp_path / "rir.wav", h, RATE, subtype="FLOAT")
    path = EchoPath.build(f"erl_db=0,delay_ms=40,rir={tmp_path / 'rir.wav'}", RATE, N)
    click = np.zeros(N, np.int16)
    click[0] = 10_000
    path.hear(SystemAudio(RATE, 0, click))
    _, echo = _frames(path, np.zeros(4 * N, np.int16))
    assert echo[640] == 6000 and echo[1040] == 8000
    assert np.count_nonzero(echo) == 2


def test_a_generated_room_is_the_same_every_time() -> None:
    pytest.importorskip("pyroomacoustics")
    from rig.echo.rir import room_rir

    a = room_rir.__wrapped__("small", 1.0, RATE)
    b = room_rir.__wrapped__("small", 1.0, RATE)
    assert np.array_equal(a, b) and np.sum(a * a) == pytest.approx(1.0)
    assert int(np.argmax(np.abs(a))) == pytest.approx(1.0 / 343 * RATE, abs=2)  # direct path


def test_build_refuses_a_delay_under_one_frame() -> None:
    with pytest.raises(ConfigError, match="delay_ms >= 22"):
        EchoPath.build("erl_db=10,delay_ms=10", RATE, N)
