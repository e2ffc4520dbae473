"""Event bus, event constructors and the snapshot reducer (all on virtual time)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rig.core.live import LiveChunk, LiveRtt, LiveStatus
from rig.telemetry import EventBus, Reducer, events
from rig.telemetry.bus import Subscription
from rig.telemetry.coalesce import ChunkCoalescer
from rig.telemetry.events import KINDS, SCHEMA_VERSION, TelemetryEvent
from rig.telemetry.snapshot import ReducerConfig
from rig.telemetry.wire import decode, encode

MS = 1_000_000
S = 1_000_000_000


def up(k: int, t_ns: int, lateness_ns: int, level: float = -20.0) -> TelemetryEvent:
    return events.chunk("run", "r0", t_ns, "up", k, 320, lateness_ns=lateness_ns, level_dbfs=level)


def test_publish_fans_out_in_order_to_every_subscriber() -> None:
    bus = EventBus()
    a, b = bus.subscribe(), bus.subscribe()
    evs = [up(k, k * 20 * MS, 0) for k in range(5)]
    for ev in evs:
        bus.publish(ev)
    assert a.drain() == evs
    assert b.drain() == evs
    assert a.drain() == [] and a.dropped == 0


def test_full_subscription_drops_oldest_and_counts_without_touching_others() -> None:
    bus = EventBus()
    slow = bus.subscribe(maxlen=3)
    fast = bus.subscribe(maxlen=100)
    for k in range(10):
        bus.publish(up(k, k, 0))
    assert [e.data["seq"] for e in slow.drain()] == [7, 8, 9]
    assert slow.dropped == 7
    assert len(fast.drain()) == 10 and fast.dropped == 0


def test_kind_filter() -> None:
    bus = EventBus()
    statuses = bus.subscribe(kinds=["status"])
    bus.publish(up(0, 0, 0))
    bus.publish(events.status("run", "r0", 1, "running"))
    assert [e.kind for e in statuses.drain()] == ["status"]


def test_publish_never_raises_even_if_a_subscriber_breaks() -> None:
    class Broken(Subscription):
        __slots__ = ()

        def _put(self, event: TelemetryEvent) -> None:
            raise RuntimeError("boom")

    bus = EventBus()
    good = bus.subscribe()
    bus._subs = (Broken(bus, 4, None), *bus._subs)
    bus.publish(up(0, 0, 0))
    assert bus.errors == 1
    assert len(good.drain()) == 1


async def test_next_batch_wakes_on_publish_and_close_ends_it() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    waiter = asyncio.ensure_future(sub.next_batch())
    await asyncio.sleep(0)
    assert not waiter.done()
    bus.publish(up(0, 0, 0))
    assert [e.data["seq"] for e in await waiter] == [0]
    waiter = asyncio.ensure_future(sub.next_batch())
    await asyncio.sleep(0)
    sub.close()
    assert await waiter == []
    bus.publish(up(1, 1, 0))  # closed subscriptions no longer receive
    assert len(sub) == 0 and bus.subscriptions == ()


async def test_publish_threadsafe_from_another_thread() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    loop = asyncio.get_running_loop()
    t = threading.Thread(
        target=lambda: [bus.publish_threadsafe(loop, up(k, k, 0)) for k in range(50)]
    )
    t.start()
    got: list[TelemetryEvent] = []
    while len(got) < 50:
        got += await sub.next_batch()
    t.join()
    assert [e.data["seq"] for e in got] == list(range(50))


def test_status_rejects_unknown_state_and_every_kind_is_documented() -> None:
    with pytest.raises(ValueError, match="unknown state"):
        events.status("run", "r0", 0, "runing")
    ev = events.response("run", "r0", 5, 800.0, model_ms=650.0)
    assert ev.v == SCHEMA_VERSION
    assert set(ev.data) == set(KINDS["response"])
    for make in (
        lambda: events.status("r", "x", 0, "done", status="ok", target="t"),
        lambda: events.chunk("r", "x", 0, "down", 1, 320),
        lambda: events.activity("r", "x", 0, "down", True),
        lambda: events.protocol("r", "x", 0, "session.created", {"a": 1}),
        lambda: events.clock("r", "x", 0, rtt_ms=3.0),
    ):
        e = make()
        assert set(e.data) <= set(KINDS[e.kind]), e.kind
        assert decode(encode(e)) == e


def test_reducer_lateness_percentiles_window_and_stalls() -> None:
    r = Reducer(ReducerConfig(lateness_window_ns=1 * S, stall_threshold_ns=20 * MS))
    r.apply(events.status("run", "r0", 0, "running", target="ws://x"))
    # 1 s of chunks with lateness 0..49 ms... first 50 chunks are old, next 50 are in window
    for k in range(50):
        r.apply(up(k, k * 20 * MS, 100 * MS))  # all stalls, outside the window later
    for k in range(50, 100):
        r.apply(up(k, k * 20 * MS, (k - 50) * MS))
    snap = r.snapshot(99 * 20 * MS).rollout("r0")
    assert snap is not None
    # window = last 1 s: chunks 50..99 -> lateness 0..49 ms; nearest-rank p50 = 24, p99 = 49
    assert snap.lateness_p50_ms == 24.0
    assert snap.lateness_p99_ms == 49.0
    assert snap.stalls == 50 + 29  # the 100 ms ones plus 21..49 ms
    assert snap.chunks_up == 100 and snap.state == "running" and snap.target == "ws://x"
    assert snap.elapsed_s == pytest.approx(1.98)


def test_a_rollout_run_again_shows_its_new_attempt_not_the_sum() -> None:
    """`--retry-invalid`: the same rollout id starts again after a done with timing not valid;
    the row shows the new attempt's stalls and verdict, and the fleet counts it once."""
    r = Reducer(ReducerConfig(stall_threshold_ns=20 * MS))
    r.apply(events.status("run", "r0", 0, "running", target="ws://x"))
    for k in range(3):
        r.apply(up(k, k * 20 * MS, 60 * MS))  # three stalls
    bad = "3 stalled frames"
    r.apply(events.status("run", "r0", S, "done", status="ok", timing_valid=False,
                          timing_reason=bad))  # fmt: skip
    first = r.snapshot(S).rollout("r0")
    assert first is not None and first.stalls == 3 and first.timing_valid is False
    r.apply(events.status("run", "r0", 2 * S, "connecting", target="ws://x"))
    again = r.snapshot(2 * S).rollout("r0")
    assert again is not None and again.state == "connecting"
    assert again.stalls == 0 and again.timing_valid is None and again.target == "ws://x"
    for k in range(3):
        r.apply(up(k, 2 * S + k * 20 * MS, 1 * MS))
    r.apply(events.status("run", "r0", 3 * S, "done", status="ok", timing_valid=True))
    snap = r.snapshot(3 * S)
    final = snap.rollout("r0")
    assert final is not None and final.stalls == 0 and final.timing_valid is True
    assert snap.summary.done == 1 and snap.summary.timing_invalid == 0 and snap.summary.stalls == 0


def test_reducer_timeline_strip_marks_speech_cells() -> None:
    cfg = ReducerConfig(timeline_span_ns=10 * S, timeline_cells=10)
    r = Reducer(cfg)
    r.apply(events.activity("run", "r0", 2 * S, "up", True))
    r.apply(events.activity("run", "r0", 4 * S + 1, "up", False))
    r.apply(events.activity("run", "r0", 8 * S, "down", True))  # still speaking at now
    snap = r.snapshot(10 * S).rollout("r0")
    assert snap is not None
    assert snap.up_timeline == (False,) * 2 + (True,) * 3 + (False,) * 5
    assert snap.down_timeline == (False,) * 8 + (True,) * 2
    assert snap.down_speech and not snap.up_speech
    later = r.snapshot(25 * S).rollout("r0")
    assert later is not None and not any(later.up_timeline) and all(later.down_timeline)


@settings(max_examples=40, deadline=None)
@given(
    lateness_ms=st.lists(st.integers(min_value=0, max_value=60), min_size=1, max_size=300),
    period_ms=st.sampled_from([50, 100, 250]),
)
def test_coalesced_batches_reduce_like_raw_chunks(lateness_ms: list[int], period_ms: int) -> None:
    """What `rig watch` shows from the broker equals what the in-process dashboard shows."""
    raw, coalesced = Reducer(), Reducer()
    co = ChunkCoalescer(period_ms * MS)
    for k, late in enumerate(lateness_ms):
        ev = up(k, k * 20 * MS, late * MS)
        raw.apply(ev)
        co.add(ev)
        for b in co.flush(k * 20 * MS):
            coalesced.apply(b)
    for b in co.flush(len(lateness_ms) * 20 * MS, force=True):
        coalesced.apply(b)
    now = len(lateness_ms) * 20 * MS
    a, b = raw.snapshot(now).rollouts[0], coalesced.snapshot(now).rollouts[0]
    assert (a.chunks_up, a.stalls) == (b.chunks_up, b.stalls)
    assert (a.lateness_p50_ms, a.lateness_p99_ms) == (b.lateness_p50_ms, b.lateness_p99_ms)


def test_every_event_field_is_documented_and_every_documented_field_exists() -> None:
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "telemetry.md").read_text()
    kinds_part = doc.split("## Event kinds (schema version 3)", 1)[1].split("\n## ", 1)[0]
    documented: dict[str, set[str]] = {}
    for block in kinds_part.split("### `")[1:]:
        kind = block.split("`", 1)[0]
        documented[kind] = set(re.findall(r"^\| `(\w+)` \|", block, flags=re.M))
    assert documented == {k: set(v) for k, v in KINDS.items()}


def test_every_status_carries_the_redacted_target_dialect_and_transport() -> None:
    from rig.clock import FakeClock
    from rig.telemetry.session_bridge import session_publisher, target_fields

    secret = {"url": "wss://bob:hunter2@api.x.com:8443/v1/realtime?key=sk-123", "dialect": "openai"}
    fields = target_fields({**secret, "transport": "ws"})
    assert fields == {"target": "api.x.com:8443", "dialect": "openai", "transport": "ws"}
    assert target_fields({"url": "ws://[::1]:9000/x", "transport": "ws"})["target"] == "[::1]:9000"
    card = {"transport": "device", "output": "Loopback out", "input": "Loopback in"}
    assert target_fields(card) == {"transport": "device", "target": "Loopback out"}
    bus = EventBus()
    sub = bus.subscribe()
    publish = session_publisher(bus, "run", FakeClock(), targets={"a": fields})("a")
    publish(LiveStatus("connecting"))
    publish(LiveChunk("up", 0, 320, 0, lateness_ns=5, stall=False))
    publish(LiveStatus("done", status="ok", timing_valid=False, timing_reason="x"))
    publish(LiveRtt(12.5, "probe"))
    got = sub.drain()
    statuses = [e.data for e in got if e.kind == "status"]
    assert all(d["target"] == "api.x.com:8443" and d["dialect"] == "openai" for d in statuses)
    assert statuses[-1]["timing_valid"] is False and statuses[-1]["timing_reason"] == "x"
    assert "hunter2" not in repr(got) and "sk-123" not in repr(got)
    chunk = next(e for e in got if e.kind == "chunk")
    assert chunk.data["stall"] is False
    rtt = next(e for e in got if e.kind == "rtt")
    assert rtt.data == {"rtt_ms": 12.5, "method": "probe"}


@settings(max_examples=60, deadline=None)
@given(
    chunks=st.lists(
        st.tuples(
            st.sampled_from(["up", "down"]),
            st.integers(0, 2**31),
            st.integers(0, 4800),
            st.one_of(st.none(), st.integers(-(10**6), 10**9)),
            st.one_of(st.none(), st.floats(-120, 0)),
            st.sampled_from([None, False, True]),
        ),
        max_size=40,
    )
)
def test_publish_chunk_is_publishing_the_chunk_event(chunks) -> None:
    """The per-frame lane (`publish_chunk`, `RolloutPublish.chunk`) gives every subscriber what
    publishing the event gives: a queueing subscription the same events, a folding one (the
    view feed's) the same batches, a filtered one nothing; a raising one counts an error."""
    from rig.clock import FakeClock
    from rig.telemetry.session_bridge import session_publisher
    from rig.telemetry.viewfeed import _FoldingSubscription

    class Broken(Subscription):
        def _put(self, event: TelemetryEvent) -> None:
            raise RuntimeError("boom")

    def subscribers(bus: EventBus):
        plain = bus.subscribe(maxlen=1000)
        other = bus.subscribe(maxlen=1000, kinds=["status"])
        folding = bus.attach(_FoldingSubscription(bus, 1000, ChunkCoalescer(10**9)))
        bus.attach(Broken(bus, 10, None))
        return plain, other, folding

    a, b = EventBus(), EventBus()
    sa, sb = subscribers(a), subscribers(b)
    for t, (d, seq, n, late, level, stall) in enumerate(chunks, start=1):
        ev = events.chunk("r", "x", t, d, seq, n, lateness_ns=late, level_dbfs=level, stall=stall)
        a.publish(ev)
        b.publish_chunk("r", "x", t, d, seq, n, late, level, stall)
    assert a.published == b.published and a.errors == b.errors == len(chunks)
    assert sa[0].drain() == sb[0].drain()
    assert sa[1].drain() == sb[1].drain() == []
    assert sa[2].coalescer.flush(0, force=True) == sb[2].coalescer.flush(0, force=True)
    assert sa[2].received == sb[2].received

    # the rollout's publish function: its lane and a LiveChunk through __call__ agree
    c, d2 = EventBus(), EventBus()
    sc, sd = c.subscribe(maxlen=1000), d2.subscribe(maxlen=1000)
    fields = {"target": "t", "dialect": "rig", "transport": "ws"}
    pc = session_publisher(c, "run", FakeClock(), targets={"x": fields})("x")
    pd = session_publisher(d2, "run", FakeClock(), targets={"x": fields})("x")
    for t, (d, seq, n, late, level, _) in enumerate(chunks, start=1):
        pc(LiveChunk(d, seq, n, t, lateness_ns=late, level_dbfs=level))
        pd.chunk(d, seq, n, t, late, level)  # type: ignore[attr-defined]
    assert sc.drain() == sd.drain()
