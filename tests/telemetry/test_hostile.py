"""Anyone can publish on the broker (issue #15 row 9): each message is checked, a bad one is
dropped with a counted warning, and the number of rollouts a watcher tracks is capped."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from rig.errors import ProtocolError
from rig.telemetry import EventBus, Reducer, TelemetryEvent, events
from rig.telemetry.mqtt import MqttSubscriber, parse_mqtt_url
from rig.telemetry.snapshot import ReducerConfig
from rig.telemetry.wire import decode, encode, topic
from tests.support.broker import Broker, needs_broker


def _payload(k: str, data: Any, **over: Any) -> bytes:
    obj = {"v": 1, "kind": k, "run": "r", "rollout": "x", "t_ns": 5, "data": data, **over}
    return json.dumps(obj).encode()


BAD = [
    _payload("chunk_batch", {"dir": "up", "n_chunks": "x"}),
    _payload("chunk_batch", {"dir": "up", "n_chunks": 2, "lateness_ns": ["a"]}),
    _payload("chunk_batch", {"dir": "up", "n_chunks": 2, "lateness_ns": 7}),
    _payload("chunk_batch", {"dir": "up", "n_chunks": 2, "level_dbfs": "loud"}),
    _payload("chunk", {"dir": "up", "seq": 0, "n_samples": 1, "lateness_ns": "late"}),
    _payload("chunk", {"dir": "up", "seq": 0, "n_samples": 1, "level_dbfs": [1]}),
    _payload("clock", {"rtt_ms": "x"}),
    _payload("clock", {"offset_ms": {"a": 1}}),
    _payload("response", {"latency_ms": "fast"}),
    _payload("response", {"latency_ms": 5.0, "model_ms": "x"}),
    _payload("status", {"state": 5}),
    _payload("status", {"state": "done", "reason": ["x"]}),
    _payload("activity", {"track": "up", "speech": "yes"}),
    _payload("protocol", {"name": "x", "fields": 5}),
    _payload("status", {"state": "done"}, t_ns=2**80),
    _payload("status", {"state": "done"}, t_ns="soon"),
    _payload("status", {"state": "done"}, rollout="r" * 5000),
    _payload("status", {"state": "done"}, kind=5),
    b'{"v":1,"kind":"status","data":' * 50_000,
    # schema v2 additions
    _payload("status", {"state": "done", "timing_valid": "no"}, v=2),
    _payload("status", {"state": "done", "timing_valid": False, "timing_reason": 3}, v=2),
    _payload("status", {"state": "running", "dialect": ["rig"]}, v=2),
    _payload("status", {"state": "running", "transport": "w" * 100}, v=2),
    _payload("chunk", {"dir": "up", "seq": 0, "n_samples": 1, "stall": "yes"}, v=2),
    _payload("chunk_batch", {"dir": "up", "n_chunks": 2, "n_stalls": -1}, v=2),
    _payload("chunk_batch", {"dir": "up", "n_chunks": 2, "n_stalls": 1.5}, v=2),
    _payload("run", {"total": "many"}, rollout="", v=2),
    _payload("run", {"total": 2**70}, rollout="", v=2),
    _payload("run", {"total": 3, "skipped": -2}, rollout="", v=2),
    _payload("run", {"total": 3, "concurrency": True}, rollout="", v=2),
    _payload("rtt", {"rtt_ms": "x", "method": "probe"}, v=2),
    _payload("rtt", {"rtt_ms": 1e300, "method": "probe"}, v=2),
    _payload("rtt", {"rtt_ms": 3.0, "method": 7}, v=2),
    _payload("rtt", {"rtt_ms": 3.0, "method": "ping", "target": {"h": 1}}, rollout="", v=2),
]


@pytest.mark.parametrize("payload", BAD, ids=range(len(BAD)))
def test_decode_refuses_malformed_fields(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode(payload)


def test_decode_keeps_every_event_the_rig_publishes() -> None:
    good = [
        events.status("r", "x", 1, "done", status="ok", reason=None, target="ws://h/"),
        events.chunk("r", "x", 2, "up", 3, 320, lateness_ns=1000, level_dbfs=-20.5),
        events.activity("r", "x", 3, "down", True),
        events.protocol("r", "x", 4, "response.done", {"a": 1}),
        events.clock("r", "x", 5, offset_ms=1.5, drift_ppm=None, rtt_ms=3.0),
        events.response("r", "x", 6, 700.0, model_ms=500.0, placement="playback"),
        # schema v2: what the live view reads
        events.status(
            "r",
            "x",
            7,
            "done",
            status="ok",
            target="127.0.0.1:8765",
            dialect="rig",
            transport="ws",
            timing_valid=False,
            timing_reason="pacer stalled 3 frames",
        ),
        events.chunk("r", "x", 8, "up", 4, 320, lateness_ns=25_000_000, stall=True),
        events.run("r", 9, 50, skipped=3, concurrency=10),
        events.rtt("r", "x", 10, 2.5, method="probe"),
        events.rtt("r", "", 11, 0.4, method="ping", target="127.0.0.1:8765"),
    ]
    batch = TelemetryEvent(
        "chunk_batch",
        "r",
        "x",
        12,
        {
            "dir": "up",
            "seq_first": 0,
            "seq_last": 1,
            "n_chunks": 2,
            "n_samples": 640,
            "lateness_ns": [1, 2],
            "level_dbfs": None,
            "n_stalls": 1,
        },
    )
    for ev in [*good, batch]:
        assert decode(encode(ev)) == ev


def test_subscriber_drops_bad_messages_with_a_counted_warning() -> None:
    bus = EventBus()
    sub_bus = bus.subscribe()
    warnings: list[str] = []
    sub = MqttSubscriber(bus, parse_mqtt_url("mqtt://127.0.0.1:1"), warn=warnings.append)
    for payload in BAD:
        sub._handle(payload)
    sub._handle(encode(events.status("r", "x", 1, "running")))
    assert sub.stats.malformed == len(BAD)
    assert sub.stats.received == 1
    assert [e.kind for e in sub_bus.drain()] == ["status"]
    # warnings are counted and rate-limited (1st, 10th, 100th...), each naming the count
    assert warnings and "1 malformed" in warnings[0] and len(warnings) <= 3


def test_reducer_caps_tracked_rollouts_evicting_finished_ones_first() -> None:
    r = Reducer(ReducerConfig(max_rollouts=100))
    for i in range(50):
        r.apply(events.status("run", f"live{i}", i, "running"))
    for i in range(20_000):  # a flood of unique ids, finished ones
        r.apply(events.status("run", f"flood{i}", i, "done", status="ok"))
    snap = r.snapshot(30_000)
    assert len(snap.rollouts) == 100
    assert sum(1 for x in snap.rollouts if x.rollout_id.startswith("live")) == 50
    assert r.evicted == 20_000 - 50
    for i in range(200):  # only running ones: new ones are refused, not the old ones evicted
        r.apply(events.status("run", f"new{i}", 40_000 + i, "running"))
    snap = r.snapshot(50_000)
    assert len(snap.rollouts) == 100
    assert sum(1 for x in snap.rollouts if x.rollout_id.startswith("live")) == 50
    assert r.refused > 0


@pytest.mark.mqtt
@needs_broker
async def test_hostile_publisher_on_a_real_broker(broker: Broker) -> None:  # noqa: F811
    import aiomqtt

    bus = EventBus()
    seen = bus.subscribe()
    warnings: list[str] = []
    sub = MqttSubscriber(bus, parse_mqtt_url(broker.url, env={}), warn=warnings.append)
    task = asyncio.create_task(sub.run())
    try:
        await asyncio.wait_for(sub.connected.wait(), 5)
        async with aiomqtt.Client("127.0.0.1", broker.port) as client:
            for payload in BAD:
                await client.publish(topic("r", "x", "status"), payload)
            await client.publish(
                topic("r", "x", "status"), encode(events.status("r", "x", 1, "running"))
            )
        for _ in range(100):
            if sub.stats.received:
                break
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert sub.stats.malformed == len(BAD)
    assert [e.kind for e in seen.drain()] == ["status"]
    assert not task.cancelled() or sub.stats.received == 1


def test_reducer_caps_runs_target_rtts_and_latencies_kept() -> None:
    r = Reducer(ReducerConfig(max_runs=8, max_latencies=4000))
    for i in range(5000):  # a flood of run ids and targets
        r.apply(events.run(f"run{i}", i, 10))
        r.apply(events.rtt("run0", "", i, 1.0, method="ping", target=f"h{i}:1"))
    assert len(r._runs) == 8 and len(r._target_rtt) == 8
    assert r.refused == 2 * (5000 - 8)
    for i in range(10_000):  # latencies 0..9999 ms, in a shuffled order
        r.apply(events.response("run0", "x", i, float((i * 7919) % 10_000)))
    assert len(r._latencies.sorted_ms) == 4000
    s = r.snapshot(10_000).summary
    assert s.n_responses == 10_000
    assert s.latency_p50_ms is not None and s.latency_p95_ms is not None
    # a uniform sample of 4000 out of 0..9999: standard errors 79 ms (p50) and 34 ms (p95);
    # within 4 of them (the seed is fixed, so this is deterministic)
    assert abs(s.latency_p50_ms - 5000) < 4 * 79 and abs(s.latency_p95_ms - 9500) < 4 * 34
