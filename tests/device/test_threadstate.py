"""PortAudio's audio thread keeps one Python thread state across callbacks, with either binding.

A fresh thread state per callback (what PyAudio does on its own) costs an mmap/munmap and two
interpreter-lock round trips on the real-time thread every callback, and made the JACK client
miss cycles. A `threading.local` lives in the thread state, so a callback that finds its mark
gone is running on a new one: at most one new state per audio thread is allowed. Each case runs
in its own process: PortAudio and its JACK thread are shared by everything loaded in a process,
and a thread that cffi (sounddevice) has already given a lasting state would hide the fault.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from rig.clock.base import MonotonicClock
from rig.device.callbacks import Callbacks, Playout
from rig.device.model import Block, StreamEnded, StreamSettings
from rig.device.stream import DeviceStream, get_backend
from rig.errors import DeviceError

pytestmark = pytest.mark.device

RATE = 48_000
_mark = threading.local()


class _StateCounter(Callbacks):
    """Counts the callbacks that found a Python thread state they had not seen before."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(MonotonicClock(), loop, self._drop, Playout())
        self.calls = 0
        self.new_states = 0
        self.threads: set[int] = set()

    def _drop(self, item: Block | StreamEnded) -> None:
        pass

    def _count(self) -> None:
        self.calls += 1
        self.threads.add(threading.get_ident())
        if not getattr(_mark, "seen", False):
            _mark.seen = True
            self.new_states += 1

    def on_input(self, *args: Any, **kw: Any) -> None:
        self._count()
        super().on_input(*args, **kw)

    def on_output(self, *args: Any, **kw: Any) -> None:
        self._count()
        super().on_output(*args, **kw)


async def count_states(backend: str, duplex: bool) -> dict[str, int]:
    """Stream the JACK loopback for 0.5 s; callbacks, new thread states, audio threads."""
    settings = StreamSettings(RATE, "JACK:loopback", "JACK:loopback", duplex=duplex)
    be = get_backend(backend)
    stream = DeviceStream(be, settings)  # resolves and checks the devices
    assert stream.input is not None and stream.output is not None
    counter = _StateCounter(asyncio.get_running_loop())
    streams = be.open(settings, stream.input, stream.output, counter)
    try:
        for s in streams:
            s.start()
        await asyncio.sleep(0.5)  # ~94 JACK periods of 256 frames
    finally:
        for s in streams:
            s.stop()
            s.close()
    return {"calls": counter.calls, "new": counter.new_states, "threads": len(counter.threads)}


@pytest.mark.parametrize("backend", ["sounddevice", "pyaudio"])
@pytest.mark.parametrize("duplex", [True, False], ids=["duplex", "split"])
def test_callbacks_reuse_their_thread_state(backend: str, duplex: bool) -> None:
    try:
        get_backend(backend).devices()
        DeviceStream(get_backend(backend), StreamSettings(RATE, "JACK:loopback", "JACK:loopback"))
    except DeviceError as exc:
        pytest.skip(f"JACK loopback via {backend} not available ({exc}): scripts/ci/audio-up.sh")
    root = str(Path(__file__).resolve().parents[2])
    code = (
        f"import sys, asyncio, json; sys.path.append({root!r}); "
        "from tests.device.test_threadstate import count_states; "
        f"print(json.dumps(asyncio.run(count_states({backend!r}, {duplex!r}))))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-1500:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["calls"] >= 40, got
    assert got["new"] <= got["threads"], got
