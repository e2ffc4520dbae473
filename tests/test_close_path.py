"""Issue #15: the session's close path runs for every exception.

Whatever escapes a transport or a dialect mid-stream (a ProtocolError, an OSError, a stray
CancelledError, a bug's RuntimeError, from the send side or the receive side) or cancels the
rollout from outside, the rollout ends with `session.end` in events.jsonl, its uplink stats
and responses so far, a status naming the fault, closed files, and no task left running.
Real WebSocket connections to the reference system; the fault is injected by a thin wrapper
around the real transport at frame 15, on both send paths (the tick's `send_audio_now` and
the awaited `send_audio`): each case runs with the tick and with `tick=False`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from rig.audio.pcm import Pcm16
from rig.audio.source import tone
from rig.clock.base import MonotonicClock
from rig.core.events import Incoming
from rig.core.plan import PlanBuilder
from rig.dialects.rawpcm import RawPcmDialect
from rig.errors import ProtocolError
from rig.recordings.wav import read_wav
from rig.recordings.writer import RecordingWriter
from rig.runs.metricsfile import run_alone
from rig.session import Session, SessionConfig
from rig.sim.server import SimConfig, SimServer
from rig.transports.websocket import WebSocketTransport
from tests.support.wait import client_tasks

pytestmark = pytest.mark.realtime

AT_FRAME = 15


class Faulty(WebSocketTransport):
    """The real transport, with one exception raised from `side` at frame AT_FRAME."""

    def __init__(self, url: str, clock: MonotonicClock, side: str, exc: BaseException) -> None:
        super().__init__(url, RawPcmDialect(16_000), clock, retries=0)
        self.side = side
        self.exc = exc
        self.sent = 0

    async def send_audio(self, pcm: Pcm16, seq: int, t_sched_ns: int) -> int:
        if self.side == "send" and seq == AT_FRAME:
            raise self.exc
        self.sent += 1
        return await super().send_audio(pcm, seq, t_sched_ns)

    def send_audio_now(self, pcm: Pcm16, seq: int, t_sched_ns: int) -> int | None:
        """The tick's send path (rig.sessiontick): the same fault at the same frame."""
        if self.side == "send" and seq == AT_FRAME:
            raise self.exc
        t = super().send_audio_now(pcm, seq, t_sched_ns)
        if t is not None:
            self.sent += 1
        return t

    async def receive(self) -> AsyncIterator[Incoming]:
        async for item in super().receive():
            if self.side == "recv" and self.sent >= AT_FRAME:
                raise self.exc
            yield item


FAULTS = {
    "send-protocol": ("send", ProtocolError("bad frame from the dialect"), "protocol_error"),
    "send-oserror": ("send", ConnectionResetError(104, "reset by peer"), "transport_error"),
    "send-timeout": ("send", TimeoutError(), "transport_error"),
    "send-cancelled": ("send", asyncio.CancelledError("inner deadline"), "error"),
    "send-bug": ("send", RuntimeError("a bug"), "error"),
    "recv-bug": ("recv", KeyError("missing"), "error"),
    "recv-oserror": ("recv", OSError(5, "I/O error"), "transport_error"),
}


@pytest.fixture
async def sim_url() -> AsyncIterator[str]:
    sim = SimServer(SimConfig(latency_ms=100, endpoint_silence_ms=300, reply_s=0.3))
    url = await sim.start()
    yield url
    await sim.stop()


async def _session(
    tmp_path: Path, url: str, side: str, exc: BaseException, tick: bool = True
) -> tuple[Session, Any]:
    clock = MonotonicClock()
    writer = RecordingWriter()
    writer.start()
    rec = writer.rollout(str(tmp_path / "r"), 16_000)
    plan = PlanBuilder(16_000).add_silence(0.2).add_turn(tone(300, 1.0, 16_000)).build()
    cfg = SessionConfig(drain_quiet_s=0.5, max_s=5, tick=tick)
    return Session("r", Faulty(url, clock, side, exc), plan, rec, clock, cfg), writer


def _check(d: Path, m: dict[str, Any], status: str) -> None:
    events = [json.loads(x) for x in (d / "events.jsonl").read_text().splitlines()]
    assert events[-1]["kind"] == "session.end", events[-1]
    assert events[-1]["status"] == status
    rows = [json.loads(x) for x in (d / "chunks.jsonl").read_text().splitlines()]
    assert sum(r["dir"] == "up" for r in rows) == m["uplink"]["frames"] >= AT_FRAME - 1
    assert sum(r["dir"] == "down" for r in rows) == m["downlink"]["chunks"]
    assert "responses" in m
    pcm, rate = read_wav(str(d / "user.wav"))  # closed: the header matches the data
    assert rate == 16_000 and len(pcm) == m["uplink"]["frames"] * 320


@pytest.mark.parametrize("tick", [True, False], ids=["tick", "awaited"])
@pytest.mark.parametrize("name", list(FAULTS))
async def test_every_exception_goes_through_the_close_path(
    tmp_path: Path, sim_url: str, name: str, tick: bool
) -> None:
    side, exc, status = FAULTS[name]
    session, writer = await _session(tmp_path, sim_url, side, exc, tick)
    m = await run_alone(session)
    writer.close()
    assert m["status"] == status, m.get("reason")
    assert type(exc).__name__ in m["reason"] or str(exc) in m["reason"], m["reason"]
    _check(tmp_path / "r", m, status)
    assert json.loads((tmp_path / "r" / "metrics.json").read_text())["status"] == status
    assert client_tasks() == []


async def test_a_cancelled_rollout_closes_then_passes_the_cancel_on(
    tmp_path: Path, sim_url: str
) -> None:
    session, writer = await _session(tmp_path, sim_url, "none", RuntimeError())
    task = asyncio.create_task(session.run())
    await asyncio.sleep(0.6)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    writer.close()
    assert session.outcome.status == "cancelled"
    d = tmp_path / "r"
    events = [json.loads(x) for x in (d / "events.jsonl").read_text().splitlines()]
    assert events[-1]["kind"] == "session.end" and events[-1]["status"] == "cancelled"
    assert client_tasks() == []
