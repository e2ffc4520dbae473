"""Clock probes and path samples from the clock's tick (rig.sessionchores).

The chores must do what the loops of rig.sessionlink did: a probe every interval with its
own id, a path sample (TCP state + one ping) every interval whose round trip is stamped
at the pong's arrival, a ping unanswered past its timeout recorded as lost; whatever cannot
be written now goes the awaited way, one at a time; nothing after the chores are stopped.
Here they run on a virtual clock (deadlines, ids, fallbacks) and on a real loopback
WebSocket connection (the pong's stamp from the socket read).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.server import serve

from rig.audio.source import tone
from rig.clock.base import FakeClock, MonotonicClock
from rig.core.director import Drain, Pause, Play
from rig.core.events import DownEvent
from rig.core.plan import UserPlan
from rig.dialects.rawpcm import RawPcmDialect
from rig.net.pathsample import PING_PREFIX, PathSampler
from rig.recordings.writer import RecordingWriter
from rig.runs.metricsfile import run_alone
from rig.session import Session, SessionConfig
from rig.sim.engine import SimConfig
from rig.transports.websocket import WebSocketTransport
from tests.test_session_tick import NowSystem

RATE = 16_000


class ChoreSystem(NowSystem):
    """The tick's in-memory system, with non-waiting probes and path samples whose pings are
    answered `pong_after_ns` later (None: never); `refuse_events` refuses probes now."""

    samples_path = True

    def __init__(self, *a: Any, pong_after_ns: int | None = 1_000_000, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.refuse_events = False
        self.now_events: list[tuple[str, dict[str, Any], int]] = []
        self.slow_round_trips = 0
        self.sampler = PathSampler(
            _NoSocket(), self.clock, ping_timeout_s=0.5, ping_now=self._ping_now
        )
        self.pong_after_ns = pong_after_ns
        self.refuse_pings = False

    def send_event_now(self, kind: str, data: dict[str, Any]) -> bool:
        if self.refuse_events:
            return False
        self.now_events.append((kind, dict(data), self.clock.now_ns()))
        return True

    def _ping_now(self, payload: bytes) -> bool:
        if self.refuse_pings:
            return False
        if self.pong_after_ns is not None:
            t = self.clock.now_ns() + self.pong_after_ns
            asyncio.get_running_loop().create_task(self._pong(payload, t))
        return True

    async def _pong(self, payload: bytes, t_ns: int) -> None:
        await self.clock.sleep_until(t_ns)
        self.sampler.pong(payload, self.clock.now_ns())

    def sample_path_now(self, emit: Any) -> bool:
        return self.sampler.sample_now(emit)

    async def path_round_trip(self) -> list[DownEvent]:
        self.slow_round_trips += 1
        t = self.clock.now_ns()
        return [DownEvent("net.rtt", t, {"source": "ws_ping", "id": -1, "rtt_ms": 0.0}, "rig")]


class _NoSocket:
    """A connection with no TCP socket under it (no `net.tcp`), pongs by callback only."""

    pong_ns: dict[bytes, int] = {}
    on_pong = None
    transport = None

    async def ping(self, data: bytes | None = None) -> Any:
        raise AssertionError("the awaited ping is not used here")


def _plan(seconds: float = 3.0) -> UserPlan:
    steps = [Pause(0.2), Play(tone(300, seconds, RATE).pcm, "t", "turn"), Drain(2.0, 20.0)]
    return UserPlan(np.zeros(0, np.int16), RATE, [], [], steps=steps)


async def _session(tmp_path, system: ChoreSystem, clock: FakeClock, **cfg: Any):
    writer = RecordingWriter()
    writer.start()
    rec = writer.rollout(str(tmp_path / "r"), RATE)
    config = SessionConfig(start_lead_ms=0, probe_interval_s=0.5, path_interval_s=1.0, **cfg)
    s = Session("r", system, _plan(), rec, clock, config)
    m = await run_alone(s)
    writer.close()
    return s, m


async def test_probes_and_pings_go_from_the_tick_on_frame_deadlines(tmp_path) -> None:
    clock = FakeClock(1_000_000_000)
    system = ChoreSystem(clock, SimConfig(latency_ms=300, endpoint_silence_ms=400))
    s, m = await _session(tmp_path, system, clock)
    assert m["status"] == "ok"
    assert s.uplink is not None
    t0, frame_ns = s.uplink.pacer.t0_ns, 20_000_000
    probes = [(d["id"], t) for kind, d, t in system.now_events if kind == "probe"]
    assert [k for k, _ in probes] == list(range(len(probes)))  # one id each, in order
    span_s = (system.sent[-1][1] - t0) / 1e9
    assert len(probes) >= int(span_s / 0.5) - 1
    for _, t in probes:  # 1 ns after one of the stream's frame deadlines: the same wake
        assert (t - 1 - t0) % frame_ns == 0
    gaps = np.diff([t for _, t in probes])
    assert gaps.min() >= 500_000_000 and gaps.max() < 500_000_000 + frame_ns
    events = (tmp_path / "r" / "events.jsonl").read_text().splitlines()
    pings = [e for e in events if '"net.rtt"' in e]
    assert len(pings) >= int(span_s) - 1
    assert all('"rtt_ms":1.0' in e for e in pings), pings  # stamped at the pong's arrival
    assert system.slow_round_trips == 0


async def test_what_cannot_go_now_goes_the_awaited_way(tmp_path) -> None:
    clock = FakeClock(1_000_000_000)
    system = ChoreSystem(clock, SimConfig(latency_ms=300, endpoint_silence_ms=400))
    system.refuse_events = True
    system.refuse_pings = True
    _, m = await _session(tmp_path, system, clock)
    assert m["status"] == "ok"
    assert not system.now_events
    slow = [e for e in system.events if e[0] == "probe"]
    assert len(slow) >= 5  # every probe through the awaited send_event
    assert system.slow_round_trips >= 3


async def test_an_unanswered_ping_is_lost_after_its_timeout() -> None:
    clock = FakeClock(0)
    written: list[bytes] = []

    def ping_now(payload: bytes) -> bool:
        written.append(payload)
        return True

    sampler = PathSampler(_NoSocket(), clock, ping_timeout_s=0.5, ping_now=ping_now)
    got: list[DownEvent] = []
    assert sampler.sample_now(got.extend)
    clock.advance(400_000_000)
    assert sampler.sample_now(got.extend)
    assert got == []  # nothing yet: the first is 0.4 s old
    clock.advance(200_000_000)
    assert sampler.sample_now(got.extend)
    assert [(e.kind, e.data) for e in got] == [
        ("net.rtt", {"source": "ws_ping", "id": 0, "lost": True})
    ]
    assert sampler.lost == 1 and sampler.sent == 3
    # a pong to the latest answers the one before it too (websockets' rule)
    got.clear()
    clock.advance(1_000_000)
    assert sampler.pong(written[2], clock.now_ns())
    assert sorted(e.data["id"] for e in got) == [1, 2]
    assert all(e.t_ns == clock.now_ns() for e in got)
    assert not sampler.pong(written[1], clock.now_ns())  # already answered: not ours now
    assert not sampler.pong(PING_PREFIX + b"99", clock.now_ns())


async def test_a_failing_record_is_reported_not_raised_into_the_read(tmp_path) -> None:
    clock = FakeClock(0)
    sampler = PathSampler(_NoSocket(), clock, ping_now=lambda p: True)
    from rig.sessionchores import Chores

    class Boom:
        def on_event(self, item: DownEvent) -> list[Any]:
            raise RuntimeError("boom")

    class Sink:
        def put_all(self, records: list[Any]) -> None:
            raise AssertionError("nothing to record")

    class L:
        sink = Sink()

    seen: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, ctx: seen.append(ctx))
    try:
        chores = Chores.__new__(Chores)
        chores.link = L()  # type: ignore[assignment]
        chores.listener = Boom()  # type: ignore[assignment]
        assert sampler.sample_now(chores.emit)
        assert sampler.pong(PING_PREFIX + b"0", 5)  # the record fails: reported, not raised
    finally:
        loop.set_exception_handler(None)
    assert len(seen) == 1 and isinstance(seen[0]["exception"], RuntimeError)


async def test_nothing_is_sent_once_the_chores_are_stopped(tmp_path) -> None:
    clock = FakeClock(1_000_000_000)
    system = ChoreSystem(clock, SimConfig(latency_ms=300, endpoint_silence_ms=400))
    s, m = await _session(tmp_path, system, clock)
    assert m["status"] == "ok"
    last = max(t for _, _, t in system.now_events)
    end = [t for kind, t in system.events if kind == "end"]
    assert end and last < end[0]  # no probe after the end
    n = len(system.now_events)
    clock.advance(5_000_000_000)
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(system.now_events) == n


@pytest.mark.realtime
async def test_a_ping_from_the_tick_is_stamped_by_the_socket_read() -> None:
    """On a real loopback connection: the ping written at once, its pong taken from the
    connection's read (not left in `pong_ns`), the round trip from the two stamps."""

    async def handler(ws: Any) -> None:
        await ws.recv()  # the rig dialect's hello: answer it
        await ws.send(json.dumps({"type": "ready", "sample_rate": RATE}))
        async for _ in ws:
            pass

    async with serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        clock = MonotonicClock()
        t = WebSocketTransport(f"ws://127.0.0.1:{port}", RawPcmDialect(RATE), clock)
        await t.open()
        try:
            got: list[DownEvent] = []
            done = asyncio.Event()

            def emit(items: list[DownEvent]) -> None:
                got.extend(items)
                if any(e.kind == "net.rtt" for e in items):
                    done.set()

            t0 = clock.now_ns()
            assert t.sample_path_now(emit)
            assert [e.kind for e in got] == ["net.tcp"]
            # nothing awaits a message here: the pong is taken in the socket's read
            await asyncio.wait_for(done.wait(), 5)
            rtt = [e for e in got if e.kind == "net.rtt"][0]
            assert t0 <= rtt.data["t_send_ns"] < rtt.t_ns <= clock.now_ns()
            assert rtt.data["rtt_ms"] == pytest.approx(
                (rtt.t_ns - rtt.data["t_send_ns"]) / 1e6, abs=1e-4
            )
            assert t._require().pong_ns == {}
        finally:
            await t.close()
