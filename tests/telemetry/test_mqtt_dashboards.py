"""MQTT payloads for dashboards people already run (schema v3): a wall-clock `epoch_ns` on
every payload, flat numeric fields, and scalar summaries beside chunk_batch.lateness_ns.

Read off a real mosquitto with a plain MQTT client, as Telegraf's mqtt_consumer would."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from rig.clock import MonotonicClock
from rig.clock.wall import epoch_offset_ns, wall_ns
from rig.telemetry import EventBus, events
from rig.telemetry.coalesce import ChunkCoalescer
from rig.telemetry.mqtt import MqttPublisher, parse_mqtt_url
from rig.telemetry.wire import decode, encode
from tests.support.broker import Broker, needs_broker
from tests.support.wait import until

MS = 1_000_000


def test_epoch_offset_maps_the_shared_clock_onto_the_wall_clock() -> None:
    clock = MonotonicClock()
    offset = epoch_offset_ns(clock)
    assert abs(clock.now_ns() + offset - wall_ns()) < 5 * MS


def test_payload_v3_carries_epoch_and_old_versions_still_read() -> None:
    ev = events.response("r", "a", 1_000, 812.5, model_ms=700.0)
    raw = json.loads(encode(ev, epoch_offset_ns=1_700_000_000_000_000_000))
    assert raw["v"] == 3 and raw["epoch_ns"] == 1_700_000_000_000_001_000
    assert decode(encode(ev, 5)).data == ev.data
    assert "epoch_ns" not in json.loads(encode(ev))  # the view feed: no wall clock needed
    bad = dict(raw, epoch_ns="yesterday")
    with pytest.raises(Exception, match="epoch_ns"):
        decode(json.dumps(bad))


def test_chunk_batch_summarises_every_chunk_not_only_the_kept_list() -> None:
    co = ChunkCoalescer(100 * MS)
    late = [1000 * k for k in range(1200)]  # more than the list keeps (500)
    for k, x in enumerate(late):
        co.add(events.chunk("r", "a", k, "up", k, 320, lateness_ns=x))
    co.add(events.chunk("r", "a", 0, "down", 0, 320))
    batches = {b.data["dir"]: b.data for b in co.flush(10**9, force=True)}
    up = batches["up"]
    assert len(up["lateness_ns"]) == 500 and up["lateness_max_ns"] == max(late)
    assert up["lateness_mean_ns"] == round(sum(late) / len(late))
    assert "lateness_max_ns" not in batches["down"]  # no lateness downlink: left out


def _flat_numbers(payload: dict[str, Any]) -> None:
    """What a Telegraf json_v2 / Grafana MQTT source charts: scalar fields, no nesting."""
    for key, v in payload["data"].items():
        if payload["kind"] == "chunk_batch" and key == "lateness_ns":
            continue  # the one array, summarised by lateness_max_ns / lateness_mean_ns
        if payload["kind"] == "protocol" and key == "fields":
            continue  # free-form protocol fields (text for humans, not a chart)
        assert v is None or isinstance(v, str | int | float | bool), (payload["kind"], key, v)


@pytest.mark.mqtt
@needs_broker
async def test_every_payload_on_the_broker_has_wall_time_and_flat_fields(
    broker: Broker,
) -> None:
    import aiomqtt

    bus = EventBus()
    clock = MonotonicClock()
    got: list[dict[str, Any]] = []
    async with aiomqtt.Client("127.0.0.1", broker.port) as client:
        await client.subscribe("rig/#")

        async def read() -> None:
            async for msg in client.messages:
                got.append(json.loads(bytes(msg.payload)))  # type: ignore[arg-type]

        reader = asyncio.create_task(read())
        wall_before = wall_ns()
        async with MqttPublisher(bus, parse_mqtt_url(broker.url, env={}), clock=clock):
            bus.publish(events.run("run1", clock.now_ns(), 1, skipped=0, concurrency=1))
            bus.publish(events.status("run1", "a", clock.now_ns(), "running"))
            t0 = clock.now_ns()
            for k in range(30):
                deadline = t0 + k * 20 * MS
                await clock.sleep_until(deadline)
                now = clock.now_ns()
                bus.publish(events.chunk("run1", "a", now, "up", k, 320,
                                         lateness_ns=now - deadline, level_dbfs=-20.0))  # fmt: skip
            bus.publish(events.response("run1", "a", clock.now_ns(), 640.0, uplink_ms=1.0))
            bus.publish(events.status("run1", "a", clock.now_ns(), "done", status="ok"))
            await until(lambda: any(p["kind"] == "response" for p in got), timeout_s=5,
                        what="the response on the broker")  # fmt: skip
        wall_after = wall_ns()
        await until(lambda: any(p["kind"] == "status" and p["data"]["state"] == "done"
                                for p in got), timeout_s=5, what="done")  # fmt: skip
        reader.cancel()
    kinds = {p["kind"] for p in got}
    assert {"run", "status", "chunk_batch", "response"} <= kinds
    for p in got:
        assert p["v"] == 3
        # the event's own time on the wall clock: inside the test's wall-clock window
        assert wall_before - 50 * MS <= p["epoch_ns"] <= wall_after + 50 * MS, p
        _flat_numbers(p)
    batches = [p["data"] for p in got if p["kind"] == "chunk_batch"]
    assert sum(b["n_chunks"] for b in batches) == 30
    for b in batches:
        assert b["lateness_max_ns"] == max(b["lateness_ns"])
        assert min(b["lateness_ns"]) <= b["lateness_mean_ns"] <= b["lateness_max_ns"]
