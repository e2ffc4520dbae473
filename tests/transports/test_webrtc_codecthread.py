"""The Opus codec thread: frames come back decoded, in order per lane, off the loop thread;
a closed lane gets nothing more and the thread stops after its last lane; a frame that fails
to decode comes back as its error, in its place, and ends a real rollout with that message."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rig.errors import ProtocolError
from rig.sim.engine import SimConfig
from rig.sim.webrtc_server import WebRtcSimServer
from rig.transports.webrtc.codec import FRAME_SAMPLES, OpusFrameDecoder, OpusFrameEncoder
from rig.transports.webrtc.codecthread import CodecThread, Decoded, DecodeLane
from rig.transports.webrtc.rtp import BufferedFrame
from tests.support.webrtc import webrtc_rollout


def _payloads(n: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    enc = OpusFrameEncoder()
    out: list[bytes] = []
    for _ in range(n):
        out += enc.encode((rng.standard_normal(FRAME_SAMPLES) * 3000).astype(np.int16))
    return out


def _frames(payloads: list[bytes]) -> list[BufferedFrame]:
    return [BufferedFrame(k, 960 * k, p, k, k) for k, p in enumerate(payloads)]


class _Recording:
    """A decoder that notes which thread decoded each payload."""

    def __init__(self) -> None:
        self.inner = OpusFrameDecoder()
        self.threads: set[str] = set()

    def decode(self, payload: bytes) -> Any:
        self.threads.add(threading.current_thread().name)
        return self.inner.decode(payload)


class _Sink(list[Decoded]):
    """Delivered results, and an event to wait for them."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = asyncio.Event()

    def __call__(self, decoded: list[Decoded]) -> None:
        self.extend(decoded)
        self.changed.set()

    async def wait_for(self, n: int, timeout_s: float = 10.0) -> None:
        async with asyncio.timeout(timeout_s):
            while len(self) < n:
                self.changed.clear()
                await self.changed.wait()


async def test_lanes_get_their_frames_decoded_in_order_off_the_loop_thread() -> None:
    loop = asyncio.get_running_loop()
    pa, pb = _payloads(60, 1), _payloads(60, 2)
    got_a = _Sink()
    got_b = _Sink()
    dec_a, dec_b = _Recording(), _Recording()
    a = DecodeLane(dec_a, got_a, loop)
    b = DecodeLane(dec_b, got_b, loop)
    try:
        fa, fb = _frames(pa), _frames(pb)
        for k in range(0, 60, 3):  # interleaved batches of 3 and single frames
            a.submit(fa[k : k + 3])
            for f in fb[k : k + 3]:
                b.submit([f])
        await got_a.wait_for(60)
        await got_b.wait_for(60)
    finally:
        a.close()
        b.close()
    ref_a, ref_b = OpusFrameDecoder(), OpusFrameDecoder()  # the same stream decoded inline
    assert [d.frame for d in got_a] == fa and [d.frame for d in got_b] == fb
    for got, ref, pl in ((got_a, ref_a, pa), (got_b, ref_b, pb)):
        for d, p in zip(got, pl, strict=True):
            assert d.error is None and d.pcm is not None
            want = ref.decode(p)
            assert np.array_equal(d.pcm, want)  # decoder state carried in order
            assert d.peak == max(int(want.max()), -int(want.min()))
    assert dec_a.threads == dec_b.threads == {"rig-opus-decode"}


async def test_closed_lane_gets_nothing_and_the_thread_stops_after_the_last_lane() -> None:
    loop = asyncio.get_running_loop()
    got_a = _Sink()
    got_b = _Sink()
    a = DecodeLane(OpusFrameDecoder(), got_a, loop)
    b = DecodeLane(OpusFrameDecoder(), got_b, loop)
    ct = CodecThread._current
    assert ct is not None and ct.thread.is_alive()
    frames = _frames(_payloads(40, 3))
    a.submit(frames)
    a.close()  # whatever was pending for a is dropped (in the thread or on the way back)
    b.submit(frames)
    await got_b.wait_for(40)
    a.submit(frames)  # after close: ignored
    await asyncio.sleep(0.1)
    assert got_a == [] and len(got_b) == 40 and ct.thread.is_alive()
    b.close()
    await asyncio.to_thread(ct.thread.join, 5.0)
    assert not ct.thread.is_alive()  # the last lane closed: the thread ended
    c_got = _Sink()
    c = DecodeLane(OpusFrameDecoder(), c_got, loop)  # a new lane starts a new thread
    try:
        assert CodecThread._current is not ct
        c.submit(frames[:5])
        await c_got.wait_for(5)
    finally:
        c.close()


async def test_a_frame_that_fails_to_decode_comes_back_as_its_error_in_order() -> None:
    loop = asyncio.get_running_loop()
    got = _Sink()
    lane = DecodeLane(OpusFrameDecoder(), got, loop)
    good = _payloads(4, 4)
    try:
        lane.submit(_frames([good[0], good[1], b"\xff\xff\xff", good[2], b"", good[3]]))
        await got.wait_for(6)
    finally:
        lane.close()
    assert [d.error is None for d in got] == [True, True, False, True, True, True]
    assert isinstance(got[2].error, ProtocolError) and "undecodable Opus" in str(got[2].error)
    assert got[4].pcm is not None and got[4].pcm.size == 0  # empty payload: no flush
    assert got[5].pcm is not None and got[5].pcm.size == FRAME_SAMPLES  # still decoding


@pytest.mark.realtime
async def test_a_decode_error_ends_a_real_rollout_with_that_message(tmp_path: Path) -> None:
    """Against the WebRTC sim: the 30th frame's decode fails on the codec thread."""

    class Failing(OpusFrameDecoder):
        calls = 0

        def decode(self, payload: bytes) -> Any:
            Failing.calls += 1
            if Failing.calls == 30:
                raise ProtocolError("undecodable Opus packet: injected by the test")
            return super().decode(payload)

    sim = WebRtcSimServer(SimConfig(latency_ms=200.0, endpoint_silence_ms=300.0, reply_s=0.3))
    url = await sim.start("127.0.0.1", 0)
    try:
        import rig.transports.webrtc.transport as tmod

        orig = tmod.OpusFrameDecoder
        tmod.OpusFrameDecoder = Failing  # type: ignore[misc]
        try:
            metrics, _, _ = await webrtc_rollout(url, tmp_path)
        finally:
            tmod.OpusFrameDecoder = orig  # type: ignore[misc]
    finally:
        await sim.stop()
    assert Failing.calls >= 30
    assert metrics["status"] == "protocol_error", metrics
    assert "injected by the test" in metrics["reason"]
