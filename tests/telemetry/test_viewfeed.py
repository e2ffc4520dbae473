"""The view feed: bus → coalesced frames → a real Unix socket pair → the view's bus."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from rig.telemetry import EventBus, Reducer, events
from rig.telemetry.viewfeed import FEED_MODES, FrameReader, ViewFeed, socket_pair
from rig.telemetry.wire import encode

MS = 1_000_000
S = 1_000_000_000


def fleet_events(n_rollouts: int, n_frames: int, t0: int = 0) -> list[events.TelemetryEvent]:
    out = [events.run("run", t0, n_rollouts, concurrency=n_rollouts)]
    for i in range(n_rollouts):
        out.append(events.status("run", f"r{i}", t0, "running", target="h:1", dialect="rig"))
    for k in range(n_frames):
        t = t0 + k * 20 * MS
        for i in range(n_rollouts):
            late = (25 if (k + i) % 50 == 0 else 1) * MS
            out.append(
                events.chunk(
                    "run",
                    f"r{i}",
                    t,
                    "up",
                    k,
                    320,
                    lateness_ns=late,
                    level_dbfs=-20.0,
                    stall=late > 20 * MS,
                )
            )
            out.append(events.chunk("run", f"r{i}", t, "down", k, 320, level_dbfs=-30.0))
    for i in range(n_rollouts):
        out.append(events.status("run", f"r{i}", t0 + n_frames * 20 * MS, "done", status="ok"))
    return out


def drain_socket(sock: socket.socket) -> list[bytes]:
    got = []
    while True:
        try:
            data = sock.recv(1 << 20)
        except BlockingIOError:
            return got
        if not data:
            return got
        got.append(data)


@pytest.mark.parametrize("mode", FEED_MODES)
async def test_frames_through_the_socket_reduce_like_the_raw_events(mode: str) -> None:
    bus = EventBus()
    ours, theirs = socket_pair()
    theirs.setblocking(False)
    feed = ViewFeed(bus, ours, flush_hz=4, mode=mode)
    feed.start()
    view_bus = EventBus()
    got = view_bus.subscribe()
    reader = FrameReader(view_bus)
    raw = Reducer()
    evs = fleet_events(5, 100)
    for ev in evs:
        raw.apply(ev)
    # publish in three bursts (three refreshes), reading the socket as the view would
    third = len(evs) // 3
    for part in (evs[:third], evs[third : 2 * third], evs[2 * third :]):
        for ev in part:
            bus.publish(ev)
        if mode == "thread":
            await asyncio.to_thread(feed._flush_sync)
        else:
            await feed.flush()
        for message in drain_socket(theirs):
            assert message.endswith(b"\n")  # whole lines only: a message never tears a line
            reader.feed(message)
    await feed.stop()
    assert theirs.recv(10) == b""  # our end closed: the view sees EOF
    view = Reducer()
    received = got.drain()
    for ev in received:
        view.apply(ev)
    # coalesced: one batch per rollout, direction and refresh instead of one event per chunk
    assert sum(e.kind == "chunk_batch" for e in received) == 5 * 2 * 3
    assert feed.stats.dropped == 0 and reader.malformed == 0
    now = 100 * 20 * MS
    a, b = raw.snapshot(now), view.snapshot(now)
    for ra, rb in zip(a.rollouts, b.rollouts, strict=True):
        assert (ra.rollout_id, ra.chunks_up, ra.chunks_down, ra.stalls) == (
            rb.rollout_id,
            rb.chunks_up,
            rb.chunks_down,
            rb.stalls,
        )
        assert (ra.lateness_p50_ms, ra.lateness_p99_ms) == (rb.lateness_p50_ms, rb.lateness_p99_ms)
        assert rb.stalls == 2 and rb.target == "h:1" and rb.state == "done"
    assert b.summary.total == 5 and b.summary.done == 5 and b.summary.stalls == 10


async def test_a_view_that_stops_reading_never_blocks_the_loop_and_catches_up() -> None:
    bus = EventBus()
    ours, theirs = socket_pair()
    theirs.setblocking(False)
    feed = ViewFeed(bus, ours, flush_hz=4, max_message=4096)
    feed.start()
    t0 = time.monotonic_ns()
    # many refreshes' worth of statuses and chunk batches; nobody reads the other end
    for round_ in range(40):
        for i in range(50):
            bus.publish(events.status("run", f"r{i}", round_, "running", reason=f"round {round_}"))
            bus.publish(events.chunk("run", f"r{i}", round_, "up", round_, 320, lateness_ns=0))
        t = time.perf_counter_ns()
        await feed.flush()
        assert time.perf_counter_ns() - t < 200 * MS  # a full socket is skipped, never waited on
    assert feed.stats.dropped > 0  # counted
    assert time.monotonic_ns() - t0 < 10 * S
    # the view reads again: the latest status of every rollout still arrives
    reader_bus = EventBus()
    sub = reader_bus.subscribe()
    reader = FrameReader(reader_bus)
    for message in drain_socket(theirs):
        reader.feed(message)
    bus.publish(events.chunk("run", "r0", 99, "up", 99, 320, lateness_ns=0))
    await feed.flush()
    for message in drain_socket(theirs):
        reader.feed(message)
    view = Reducer()
    for ev in sub.drain():
        view.apply(ev)
    snap = view.snapshot(100)
    assert len(snap.rollouts) == 50
    assert {r.reason for r in snap.rollouts} == {"round 39"}
    await feed.stop()


async def test_the_view_going_away_ends_the_feed_not_the_publisher() -> None:
    bus = EventBus()
    ours, theirs = socket_pair()
    feed = ViewFeed(bus, ours, flush_hz=50)
    feed.start()
    theirs.send(b"ready")
    await asyncio.wait_for(feed.ready.wait(), 5)
    theirs.close()  # `q` in the view
    await asyncio.wait_for(feed.closed.wait(), 5)
    assert not feed.alive
    assert bus.subscriptions == ()  # off the bus at once: publishing costs nothing more
    for k in range(100):
        bus.publish(events.chunk("run", "r0", k, "up", k, 320, lateness_ns=0))  # never raises
    await feed.flush()
    assert bus.errors == 0
    await feed.stop()
    assert bus.subscriptions == ()


def test_frame_reader_keeps_partial_lines_and_counts_garbage() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    reader = FrameReader(bus)

    line = encode(events.status("run", "a", 1, "running"))
    assert reader.feed(line[:10]) == 0
    assert reader.feed(line[10:] + b"\n{not json}\n" + b'{"v": 99}\n\n') == 1
    assert reader.malformed == 2
    (ev,) = sub.drain()
    assert ev.rollout_id == "a" and ev.data["state"] == "running"


async def test_feed_rejects_bad_settings() -> None:
    ours, theirs = socket_pair()
    with pytest.raises(ValueError, match="mode"):
        ViewFeed(EventBus(), ours, mode="fast")
    with pytest.raises(ValueError, match="flush_hz"):
        ViewFeed(EventBus(), ours, flush_hz=0)
    ours.close()
    theirs.close()
