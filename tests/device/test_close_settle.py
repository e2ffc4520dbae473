"""Closing streams on JACK leaves libjack's notification thread time between port changes.

libjack walks the client's port list for every latency notification while an unregister
erases from it, unlocked (jackaudio/jack2#216): a close right after a stop, or right after
another close, crashed the process now and then (rig.device.stream._stop_all). These use a
backend that records when each stream was stopped and closed, on the clock `time` uses.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from rig.device import stream as stream_mod
from rig.device.callbacks import Callbacks
from rig.device.model import DeviceInfo, HostApiInfo, OpenedLatency, StreamSettings
from rig.device.stream import DeviceStream

SETTLE_S = 0.05


class _Raw:
    def __init__(self, kind: str, log: list[tuple[str, str, float]]) -> None:
        self.kind = kind
        self._log = log

    def start(self) -> None:
        self._log.append(("start", self.kind, time.monotonic()))

    def stop(self) -> None:
        self._log.append(("stop", self.kind, time.monotonic()))

    def close(self) -> None:
        self._log.append(("close", self.kind, time.monotonic()))

    def latency(self) -> OpenedLatency:
        s = 0.01
        return OpenedLatency(s if self.kind == "in" else None, s if self.kind == "out" else None)


class _Backend:
    name = "fake"

    def __init__(self, hostapi: str) -> None:
        self.hostapi = hostapi
        self.log: list[tuple[str, str, float]] = []

    def hostapis(self) -> list[HostApiInfo]:
        return [HostApiInfo(0, self.hostapi, 0, 0)]

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo(0, "loopback", self.hostapi, 2, 2, 48_000.0, 0.01, 0.1, 0.01, 0.1)]

    def check(self, device: DeviceInfo, kind: Any, channels: int, rate: int) -> None:
        pass

    def open(self, settings: StreamSettings, inp: Any, out: Any, callbacks: Callbacks) -> list[Any]:
        return [_Raw("in", self.log), _Raw("out", self.log)]


async def _open_and_close(backend: _Backend) -> list[tuple[str, str, float]]:
    async with DeviceStream(backend, StreamSettings(48_000, 0, 0)):  # type: ignore[arg-type]
        pass
    return [e for e in backend.log if e[0] != "start"]


async def test_on_jack_every_close_waits_after_the_last_port_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stream_mod, "JACK_SETTLE_S", SETTLE_S)
    backend = _Backend("JACK Audio Connection Kit")
    t0 = time.monotonic()
    log = await _open_and_close(backend)
    elapsed = time.monotonic() - t0
    # both streams are stopped (ports disconnected) before either is closed (unregistered)
    assert [(op, kind) for op, kind, _ in log] == [
        ("stop", "in"),
        ("stop", "out"),
        ("close", "in"),
        ("close", "out"),
    ]
    times = [t for *_, t in log]
    assert times[2] - times[1] >= SETTLE_S  # first unregister: a settle after the stops
    assert times[3] - times[2] >= SETTLE_S  # and after the first unregister
    # and close() returns only after the last unregister has settled too: a next open in
    # this process registers ports only then
    assert elapsed >= 3 * SETTLE_S


async def test_other_host_apis_close_without_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream_mod, "JACK_SETTLE_S", 1.0)  # would show as seconds if used
    t0 = time.monotonic()
    log = await _open_and_close(_Backend("ALSA"))
    assert [(op, kind) for op, kind, _ in log] == [
        ("stop", "in"),
        ("stop", "out"),
        ("close", "in"),
        ("close", "out"),
    ]
    assert time.monotonic() - t0 < 0.9


async def test_a_stop_that_fails_still_closes_every_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stream_mod, "JACK_SETTLE_S", 0.0)
    backend = _Backend("ALSA")
    boom = _Raw("in", backend.log)

    def fail() -> None:
        raise RuntimeError("PortAudio said no")

    boom.stop = fail  # type: ignore[method-assign]
    other = _Raw("out", backend.log)
    with pytest.raises(RuntimeError):
        stream_mod._stop_all([boom, other])
    assert [(op, kind) for op, kind, _ in backend.log] == [("close", "in"), ("close", "out")]
