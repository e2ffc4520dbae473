"""Telemetry tasks that must end when cancelled, even when the cancel lands in the same loop
tick as what they await (3.11's `asyncio.wait_for` dropped it there: rig/aio.py). Each test
fails on the wait_for version of its site: the task ran on and its close waited for ever."""

from __future__ import annotations

import asyncio

from rig.clock.base import FakeClock
from rig.telemetry import EventBus
from rig.telemetry.deviceclock import DeviceClockProbe
from rig.telemetry.fleetlink import FleetCollector, Hello
from rig.telemetry.mqtt import MqttPublisher, parse_mqtt_url
from tests.support.broker import Broker, needs_broker
from tests.support.cancelrace import awaiting, complete_and_cancel, settle

TOKEN = "s3cret-token"


async def test_a_shard_hello_arriving_as_the_collector_stops_does_not_serve_on() -> None:
    """stop() cancels each link and then awaits it: a link that lost its cancel at the hello
    went on to read the shard's events until EOF, so stop() waited on a live shard."""
    collector = FleetCollector(EventBus(), token=TOKEN, run_id="fleet", clock=FakeClock(0))
    reader = asyncio.StreamReader()
    link = asyncio.create_task(collector._serve(reader))
    await settle(5)  # waiting for the hello line
    hello = Hello("0/1", "node", "host", None, 0).encode(TOKEN)
    complete_and_cancel(link, lambda: reader.feed_data(hello))
    await settle()
    assert link.cancelled(), "the link lost its cancel and reads on"
    assert collector.stats.connections == 0


@needs_broker
async def test_device_clock_probing_stops_when_the_reply_lands_with_the_cancel(
    broker: Broker,
) -> None:
    """probe_every runs 'until cancelled': with the cancel lost at a probe's reply it probed
    for ever and the run's close waited on it."""
    config = parse_mqtt_url(broker.url, env={})
    async with DeviceClockProbe(config, "run1", "dev0") as probe:
        task = asyncio.create_task(probe.probe_every(0.001, timeout_s=30))
        for _ in range(200):  # the probe's publish goes through the broker client
            if probe._replies:
                break
            await asyncio.sleep(0.01)
        ((t0, reply),) = probe._replies.items()
        await awaiting(task, lambda: not reply.done())
        complete_and_cancel(task, lambda: reply.set_result((t0, t0 + 5, t0 + 6, t0 + 10)))
        await settle()
        assert task.cancelled(), "probe_every lost its cancel and probes on"


@needs_broker
async def test_a_cancelled_publisher_stop_still_stops_and_passes_the_cancel_on(
    broker: Broker,
) -> None:
    """stop() swallowed its caller's cancel (`except CancelledError: pass`): the cancelled
    caller carried on as if nothing had happened."""
    bus = EventBus()
    pub = MqttPublisher(bus, parse_mqtt_url(broker.url, env={}))
    pub.start()
    for _ in range(200):
        if pub.stats.connected:
            break
        await asyncio.sleep(0.01)
    run = pub._task
    assert run is not None
    stopper = asyncio.create_task(pub.stop(flush_timeout_s=30))
    await settle(1)
    stopper.cancel()
    await settle()
    assert stopper.cancelled(), "stop() swallowed its caller's cancel"
    assert run.done() and pub._task is None
