"""Fleet telemetry over real TCP on loopback: a shard's bus → `FleetUplink` → the driver's
`FleetCollector` → the driver's bus, as `rig run --engine ray` wires them."""

from __future__ import annotations

import asyncio
import socket

import pytest

from rig.clock.base import FakeClock, MonotonicClock
from rig.errors import ConfigError, ProtocolError
from rig.telemetry import EventBus, Reducer, events
from rig.telemetry.events import TelemetryEvent
from rig.telemetry.fleetlink import (
    ClockMap,
    FleetCollector,
    FleetUplink,
    Hello,
    boot_id,
    fleet_hello,
    parse_address,
)
from rig.telemetry.wire import encode
from tests.support.wait import until

MS = 1_000_000
TOKEN = "s3cret-token"


def shard_events(run_id: str, rollouts: list[str], t0: int) -> list[TelemetryEvent]:
    out = [events.run(run_id, t0, len(rollouts))]
    for rid in rollouts:
        out.append(events.status(run_id, rid, t0, "running", target="h:1", dialect="rig"))
        for k in range(50):
            out.append(events.chunk(run_id, rid, t0 + k * 20 * MS, "up", k, 320, lateness_ns=MS))
        out.append(events.status(run_id, rid, t0 + 2_000 * MS, "done", status="ok"))
    return out


async def test_two_shards_reach_one_bus_renamed_and_on_one_clock() -> None:
    clock = MonotonicClock()
    driver_bus = EventBus()
    sub = driver_bus.subscribe(100_000)
    seen: list[tuple[str, str]] = []
    collector = FleetCollector(
        driver_bus,
        token=TOKEN,
        run_id="fleet",
        clock=clock,
        on_event=lambda ev, hello: seen.append((hello.shard, ev.rollout_id)),
    )
    host, port = await collector.start()
    assert host == "127.0.0.1"  # loopback unless told otherwise
    try:
        for k, ids in enumerate([["a", "b"], ["c"]]):
            bus = EventBus()
            hello = fleet_hello(f"{k}/2", f"node{k}", clock)
            async with FleetUplink(bus, f"{host}:{port}", hello, token=TOKEN, clock=clock) as up:
                for ev in shard_events(f"fleet-shard-{k}-of-2", ids, clock.now_ns()):
                    bus.publish(ev)
                await asyncio.sleep(0.3)  # one flush period of the feed (4 Hz)
            assert up.error is None and up.sent_bytes > 0
        await until(lambda: collector.stats.connections == 2 and len(seen) >= 6, timeout_s=5)
        await until(lambda: {r for _, r in seen} >= {"a", "b", "c"}, timeout_s=5)
    finally:
        await collector.stop()
    got = sub.drain()
    assert {e.run_id for e in got} == {"fleet"}  # one run, as a local run's view shows it
    assert not [e for e in got if e.kind == "run"]  # the driver publishes the fleet's own
    assert {(s, r) for s, r in seen} >= {("0/2", "a"), ("0/2", "b"), ("1/2", "c")}
    # same host: no clock mapping at all (the driver's clock is the shards' clock)
    assert collector.clocks["0/2"]["offset_ns"] == 0
    reducer = Reducer()
    for e in got:
        reducer.apply(e)
    snap = reducer.snapshot(clock.now_ns())
    assert {r.rollout_id: (r.state, r.status) for r in snap.rollouts} == {
        rid: ("done", "ok") for rid in "abc"
    }
    assert all(r.chunks_up == 50 for r in snap.rollouts)  # coalesced, none lost


async def _raw_client(port: int, lines: list[bytes]) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"".join(lines))
    writer.write_eof()
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 5)  # the collector closes on us
    finally:
        writer.close()


async def test_wrong_token_and_garbage_are_refused_and_counted() -> None:
    clock = FakeClock()
    bus = EventBus()
    sub = bus.subscribe()
    collector = FleetCollector(bus, token=TOKEN, run_id="fleet", clock=clock)
    _, port = await collector.start()
    try:
        good = Hello("0/1", "n", "h", "another-boot", 0)
        ev = encode(events.status("x", "r1", 5, "running"))
        await _raw_client(port, [good.encode("wrong"), ev + b"\n"])
        await _raw_client(port, [b"GET / HTTP/1.1\r\n\r\n"])
        await _raw_client(port, [good.encode(TOKEN), b"{not json\n", b'{"v":3}\n', ev + b"\n"])
        await until(lambda: collector.stats.events == 1, timeout_s=5)
    finally:
        await collector.stop()
    assert collector.stats.refused == 2 and collector.stats.malformed == 2
    assert [e.rollout_id for e in sub.drain()] == ["r1"]


def test_hello_decode_checks_and_clock_map_bounds() -> None:
    h = Hello("1/4", "node", "host", "boot", 123)
    assert Hello.decode(h.encode(TOKEN), TOKEN) == h
    for bad in (h.encode("nope"), b'{"rig_fleet": 2}', b"[1]", b'{"rig_fleet":1,"token":"x"}'):
        with pytest.raises(ProtocolError):
            Hello.decode(bad, TOKEN if b"x" not in bad else "x")
    m = ClockMap(same_clock=False)
    # true offset 1_000 ns; delays 50, 7 and 300 ns: the bound keeps the smallest
    for sent, delay in ((0, 50), (10_000, 7), (20_000, 300)):
        m.observe(sent, sent + 1_000 + delay)
    assert m.offset_ns == 1_007 and m.to_local(5) == 1_012
    assert m.describe()["samples"] == 3 and "lower bound" in m.describe()["method"]
    same = ClockMap(same_clock=True)
    same.observe(0, 9_999)
    assert same.to_local(42) == 42
    assert boot_id()  # Linux: the field the same-host check reads
    assert parse_address("[::1]:80") == ("::1", 80)
    with pytest.raises(ConfigError):
        parse_address("nohost")


async def test_a_driver_that_is_gone_costs_the_shard_nothing() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nobody listens there
    clock = MonotonicClock()
    bus = EventBus()
    async with FleetUplink(
        bus, f"127.0.0.1:{port}", fleet_hello("0/1", None, clock), token=TOKEN, clock=clock
    ) as up:
        await until(lambda: up.feed.closed.is_set(), timeout_s=5)
        for ev in shard_events("r", ["a"], clock.now_ns()):
            bus.publish(ev)  # off the bus: publishing goes nowhere, never blocks or raises
    assert up.error is not None and "refused" in up.error.lower()
