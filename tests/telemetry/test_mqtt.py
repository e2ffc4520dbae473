"""MQTT bridge: URL parsing and payloads (pure), then a real mosquitto on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from rig.clock import MonotonicClock
from rig.errors import ConfigError, ProtocolError
from rig.telemetry import EventBus, Subscription, TelemetryEvent, events
from rig.telemetry.coalesce import ChunkCoalescer
from rig.telemetry.deviceclock import DeviceClockProbe, SimulatedDevice, sample_offset_rtt_ns
from rig.telemetry.mqtt import MqttPublisher, MqttSubscriber, backoff, parse_mqtt_url
from rig.telemetry.wire import decode, encode, topic
from tests.support.broker import Broker, needs_broker
from tests.support.wait import until

MS = 1_000_000
S = 1_000_000_000
REPO = Path(__file__).resolve().parents[2]

# -- pure ------------------------------------------------------------------------------------


def test_parse_url_password_from_url_or_env_never_in_repr() -> None:
    c = parse_mqtt_url("mqtts://ann:s3cr%40t@broker.example:8884?insecure=1", env={})
    assert (c.host, c.port, c.username, c.password, c.tls, c.tls_insecure) == (
        "broker.example",
        8884,
        "ann",
        "s3cr@t",
        True,
        True,
    )
    assert "s3cr" not in repr(c) and "s3cr" not in c.redacted()
    assert c.redacted() == "mqtts://ann:***@broker.example:8884"
    env = {"RIG_MQTT_PASSWORD": "fromenv"}
    c = parse_mqtt_url("mqtt://bob@127.0.0.1", env=env)
    assert (c.port, c.password, c.tls) == (1883, "fromenv", False)
    assert parse_mqtt_url("mqtts://h", env={}).port == 8883
    for bad in ("http://h", "mqtt://", "mqtt://h:99999", "mqtt://h?color=red"):
        with pytest.raises(ConfigError):
            parse_mqtt_url(bad, env={})


def test_payloads_are_versioned_and_carry_no_secrets() -> None:
    ev = events.status("run/1", "r#0", 5, "connecting", target="wss://user:hunter2@api.x/v1?a=b")
    assert topic(ev.run_id, ev.rollout_id, ev.kind) == "rig/run_1/r_0/status"
    raw = encode(ev)
    assert b'"v":3' in raw and b"hunter2" not in raw
    back = decode(raw)
    assert back.data["target"] == "wss://api.x/v1?<redacted>"  # a query may hold a key
    assert back.run_id == "run/1"
    # version 1 payloads (an older rig publishing) are still read
    old = decode(
        b'{"v":1,"kind":"status","run":"r","rollout":"a","t_ns":1,"data":{"state":"done"}}'
    )
    assert old.data == {"state": "done"}
    for bad in (b"nope", b"[1]", b'{"v": 4, "kind": "status"}', b'{"v": 1, "kind": "x"}'):
        with pytest.raises(ProtocolError):
            decode(bad)


def test_coalescer_rate_limits_per_rollout() -> None:
    co = ChunkCoalescer(100 * MS)
    for k in range(10):  # 10 chunks in 90 ms for two rollouts
        for rid in ("a", "b"):
            co.add(events.chunk("run", rid, k * 10 * MS, "up", k, 320, lateness_ns=k))
        batches = co.flush(k * 10 * MS)
        assert len(batches) == (2 if k == 0 else 0)
    batches = co.flush(100 * MS)
    assert sorted((b.rollout_id, b.data["seq_first"], b.data["seq_last"]) for b in batches) == [
        ("a", 1, 9),
        ("b", 1, 9),
    ]
    assert batches[0].data["lateness_ns"] == list(range(1, 10))
    assert _take(backoff(0.5, 3.0), 5) == [
        0.5,
        1.0,
        2.0,
        3.0,
        3.0,
    ]


def _take(it: Iterator[float], n: int) -> list[float]:
    return [next(it) for _ in range(n)]


# -- real broker -------------------------------------------------------------------------------


async def _collector(url: str, bus: EventBus) -> AsyncIterator[MqttSubscriber]:
    sub = MqttSubscriber(bus, parse_mqtt_url(url, env={}), retry_initial_s=0.05, retry_max_s=0.2)
    task = asyncio.create_task(sub.run())
    await asyncio.wait_for(sub.connected.wait(), 5)
    try:
        yield sub
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _pace(bus: EventBus, rid: str, n: int, seq0: int = 0, frame_ms: int = 20) -> None:
    """A small real pacer: absolute 20 ms deadlines, one chunk event per frame."""
    clock = MonotonicClock()
    t0 = clock.now_ns()
    for k in range(n):
        deadline = t0 + k * frame_ms * MS
        await clock.sleep_until(deadline)
        now = clock.now_ns()
        bus.publish(
            events.chunk(
                "run1", rid, now, "up", seq0 + k, 320, lateness_ns=now - deadline, level_dbfs=-20.0
            )
        )


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=False).stdout


async def tmux(*args: str) -> str:
    return await asyncio.to_thread(_tmux, *args)


async def wait_file(path: Path, timeout_s: float = 10.0) -> str | None:
    """The file's text once it exists, or None after `timeout_s`."""
    try:
        await until(path.exists, timeout_s=timeout_s, every_s=0.1, what=str(path))
    except AssertionError:
        return None
    return await asyncio.to_thread(path.read_text)


async def screen_with(session: str, text: str, timeout_s: float = 10.0) -> str:
    """The tmux session's screen once `text` shows on it."""

    async def shown() -> str:
        screen = await tmux("capture-pane", "-p", "-t", session)
        return screen if text in screen else ""

    try:
        return await until(shown, timeout_s=timeout_s, every_s=0.1, what=repr(text))
    except AssertionError:
        screen = await tmux("capture-pane", "-p", "-t", session)
        raise AssertionError(f"{text!r} never appeared:\n{screen}") from None


async def collect_until(
    sub: Subscription, done: Callable[[list[TelemetryEvent]], bool], what: str
) -> list[TelemetryEvent]:
    """Events from `sub` until `done` says all that is expected has arrived."""
    got: list[TelemetryEvent] = []

    def arrived() -> bool:
        got.extend(sub.drain())
        return done(got)

    await until(arrived, timeout_s=5, what=what)
    return got


def _has(events: list[TelemetryEvent], rid: str, mark: int | str) -> bool:
    """A chunk batch of rollout `rid` ending at seq `mark` (int), or its status `mark`."""
    if isinstance(mark, int):
        return any(
            e.kind == "chunk_batch" and e.rollout_id == rid and e.data["seq_last"] == mark
            for e in events
        )
    return any(
        e.kind == "status" and e.rollout_id == rid and e.data["state"] == mark for e in events
    )


def _lifecycle(bus: EventBus, rid: str, state: str, **kw: str) -> None:
    bus.publish(events.status("run1", rid, time.monotonic_ns(), state, **kw))  # type: ignore[arg-type]


@pytest.mark.mqtt
@needs_broker
async def test_run_published_and_watched_from_a_second_process(broker: Broker) -> None:
    watcher = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rig",
        "watch",
        "--mqtt",
        broker.url,
        "--run",
        "run1",
        "--headless",
        "--exit-when-done",
        "--duration",
        "30",
        "--summary-every",
        "0.5",
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert watcher.stdout is not None and watcher.stderr is not None
        head = b""
        while b"subscribed" not in head:
            line = await asyncio.wait_for(watcher.stdout.readline(), 10)
            assert line, (await watcher.stderr.read()).decode()
            head += line
        bus = EventBus()
        seen = EventBus()
        async for _sub in _collector(broker.url, seen):
            check = seen.subscribe()
            async with MqttPublisher(bus, parse_mqtt_url(broker.url, env={})) as pub:
                for rid in ("a", "b"):
                    _lifecycle(bus, rid, "pending", target="ws://127.0.0.1:1/x")
                    _lifecycle(bus, rid, "connecting")
                    _lifecycle(bus, rid, "running")
                await asyncio.gather(_pace(bus, "a", 40), _pace(bus, "b", 40))
                bus.publish(
                    events.response("run1", "a", time.monotonic_ns(), 612.0, model_ms=500.0)
                )
                for rid in ("a", "b"):
                    _lifecycle(bus, rid, "draining")
                    _lifecycle(bus, rid, "done", status="ok")
            assert pub.dropped == 0 and pub.stats.sent > 0
            got = await collect_until(
                check,
                lambda g: all(_has(g, r, "done") and _has(g, r, 39) for r in ("a", "b")),
                "every event back from the broker",
            )
        out_b, err_b = await asyncio.wait_for(watcher.communicate(), 20)
        out, err = out_b.decode(), err_b.decode()
    finally:
        if watcher.returncode is None:
            watcher.kill()
            await watcher.wait()
    assert watcher.returncode == 0, err
    # in-process subscriber: every status in order, chunk batches contiguous and complete
    for rid in ("a", "b"):
        states = [e.data["state"] for e in got if e.kind == "status" and e.rollout_id == rid]
        assert states == ["pending", "connecting", "running", "draining", "done"]
        batches = [e for e in got if e.kind == "chunk_batch" and e.rollout_id == rid]
        seqs = [(b.data["seq_first"], b.data["seq_last"]) for b in batches]
        assert seqs[0][0] == 0 and seqs[-1][1] == 39
        assert all(b[0] == a[1] + 1 for a, b in zip(seqs, seqs[1:], strict=False))
        assert len(batches) < 40  # coalesced, not one message per chunk
    # the second process saw the same lifecycle, in order, and the response
    for rid in ("a", "b"):
        lines = [ln for ln in out.splitlines() if f"run1/{rid} " in ln]
        assert [ln.split(f"run1/{rid} ")[1].split()[0] for ln in lines] == [
            "pending",
            "connecting",
            "running",
            "draining",
            "done",
        ]
    assert "summary done=2" in out and "resp median 612 ms" in out


@pytest.mark.mqtt
@needs_broker
async def test_broker_outage_does_not_block_the_bus_and_the_bridge_resumes(
    broker: Broker,
) -> None:
    bus = EventBus()
    seen = EventBus()
    config = parse_mqtt_url(broker.url, env={})
    async for _sub in _collector(broker.url, seen):
        check = seen.subscribe()
        pub = MqttPublisher(
            bus, config, retry_initial_s=0.05, retry_max_s=0.2, publish_timeout_s=0.5
        )
        async with pub:
            _lifecycle(bus, "a", "running")
            await _pace(bus, "a", 25)  # 0.5 s connected
            got = await collect_until(check, lambda g: _has(g, "a", 24), "chunks 0-24")
            before = [e for e in got if e.kind == "chunk_batch"]
            assert before[-1].data["seq_last"] == 24
            broker.stop()
            published = bus.published
            await _pace(bus, "a", 50, seq0=25)  # 1 s of chunks with the broker gone
            assert bus.published == published + 50  # the pacer was never held up
            assert not pub.stats.connected
            broker.start()
            # both ends reconnect by themselves (publisher and the test's own subscriber):
            # chunks published before the subscriber is back are not the bridge's to keep
            await until(
                lambda p=pub, s=_sub: p.stats.connected and s.stats.connected,
                what="both ends reconnected",
            )
            await _pace(bus, "a", 75, seq0=75)  # 1.5 s after the bridge reconnected
            _lifecycle(bus, "a", "done", status="ok")
        assert pub.stats.reconnects >= 1
        assert pub.dropped > 0  # what could not be sent was dropped and counted
        after = await collect_until(
            check, lambda g: _has(g, "a", 149) and _has(g, "a", "done"), "the last chunk, done"
        )
    batches = [e for e in after if e.kind == "chunk_batch"]
    assert batches and batches[-1].data["seq_last"] == 149  # resumed up to the last chunk
    assert [e.data["state"] for e in after if e.kind == "status"][-1] == "done"


@pytest.mark.mqtt
@needs_broker
async def test_device_clock_probe_round_trip(broker: Broker) -> None:
    config = parse_mqtt_url(broker.url, env={})
    offset_ns, drift_ppm = 250 * MS + 123_457, 80.0
    device = SimulatedDevice(
        config, "run1", "dev0", offset_ns=offset_ns, drift_ppm=drift_ppm, hold_s=0.002
    )
    task = asyncio.create_task(device.run())
    await asyncio.wait_for(device.ready.wait(), 5)
    bus = EventBus()
    clocks = bus.subscribe(kinds=["clock"])
    try:
        async with DeviceClockProbe(config, "run1", "dev0", bus=bus) as probe:
            assert await probe.probe_many(10, interval_s=0.01) == 10
            sent = [await device.emit("button", n=i) for i in range(3)]
            await until(lambda: len(probe.events) == 3, timeout_s=5, what="3 device events")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert len(probe.samples) == 10 and device.answered == 10
    for t0, t1, t2, t3 in probe.samples:
        # ground truth: the device stamped t1 and t2 between our t0 and t3
        assert device.device_ns(t0) <= t1 <= t2 <= device.device_ns(t3)
        assert t2 - t1 >= 2 * MS  # the device's hold time is on its side of the exchange
        est, rtt = sample_offset_rtt_ns((t0, t1, t2, t3))
        true = device.device_ns((t0 + t3) // 2) - (t0 + t3) // 2
        assert rtt >= 0 and abs(est - true) <= rtt / 2 + 1_000
    assert [d for d, _ in probe.events] == sent
    for dev_ts, arrival in probe.events:
        assert dev_ts <= device.device_ns(arrival)
    clock_events = clocks.drain()
    assert len(clock_events) == 10
    assert clock_events[0].rollout_id == "device:dev0"
    assert clock_events[0].data["offset_ms"] == pytest.approx(offset_ns / MS, abs=50)


@pytest.mark.mqtt
@needs_broker
async def test_device_clock_step_after_an_ntp_sync_splits_the_fit(broker: Broker) -> None:
    """A device that syncs NTP mid-run jumps its clock: the probes prove the step, and each
    event goes through the fit of its own side of it."""
    config = parse_mqtt_url(broker.url, env={})
    device = SimulatedDevice(config, "run1", "dev0", offset_ns=-3 * S)
    task = asyncio.create_task(device.run())
    await asyncio.wait_for(device.ready.wait(), 5)
    truth: list[tuple[int, int]] = []  # (device stamp, true local time)
    try:
        async with DeviceClockProbe(config, "run1", "dev0") as probe:
            for step_ns in (0, 700 * MS):
                device.offset_ns += step_ns  # the sync: the device clock jumps forward
                assert await probe.probe_many(12, interval_s=0.03) == 12
                for i in range(2):
                    dev_ts = await device.emit("button", n=i)
                    truth.append((dev_ts, dev_ts - device.offset_ns))
            await until(lambda: len(probe.events) == 4, timeout_s=5, what="4 device events")
            summary = probe.summary()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    (step,) = summary["steps"]
    assert step["probe_index"] == 12
    assert step["step_ms"] == pytest.approx(700, abs=step["bound_ms"])
    assert len(summary["segments"]) == 2
    mapped = {e["device_ts_ns"]: e["t_ns"] for e in summary["events"]}
    for dev_ts, t_true in truth:  # within the probes' round trips on either side
        assert abs(mapped[dev_ts] - t_true) < 20 * MS


@pytest.mark.mqtt
@needs_broker
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
async def test_watch_in_tmux_starts_updates_and_quits(broker: Broker, tmp_path: Path) -> None:
    session = f"rigwatch{os.getpid()}"
    done = tmp_path / "exit"
    cmd = (
        f"cd {REPO} && {sys.executable} -m rig watch --mqtt {broker.url} --refresh-hz 10; "
        f"echo $? > {done}"
    )
    await tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "50", cmd)

    async def wait_for(text: str, timeout_s: float = 10.0) -> str:
        return await screen_with(session, text, timeout_s)

    bus = EventBus()
    try:
        await wait_for("no rollouts")
        async with MqttPublisher(bus, parse_mqtt_url(broker.url, env={})):
            _lifecycle(bus, "tmuxroll", "running", target="ws://x")
            screen = await wait_for("tmuxroll")
            assert "running" in screen
            bus.publish(events.response("run1", "tmuxroll", time.monotonic_ns(), 987.0))
            await wait_for("987 ms (arrival")
            _lifecycle(bus, "tmuxroll", "done", status="ok")
            await wait_for("done:ok")
        await tmux("send-keys", "-t", session, "q")
        code = await wait_file(done)
        assert code is not None, await tmux("capture-pane", "-p", "-t", session)
        assert code.strip() == "0"
    finally:
        await tmux("kill-session", "-t", session)


@pytest.mark.mqtt
@needs_broker
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
async def test_watch_in_tmux_exits_on_ctrl_c(broker: Broker, tmp_path: Path) -> None:
    session = f"rigwatchc{os.getpid()}"
    done = tmp_path / "exit"
    cmd = f"cd {REPO} && {sys.executable} -m rig watch --mqtt {broker.url}; echo $? > {done}"
    await tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "50", cmd)
    try:
        await screen_with(session, "no rollouts")
        await tmux("send-keys", "-t", session, "C-c")
        code = await wait_file(done)
        out = await tmux("capture-pane", "-p", "-t", session)
        assert code is not None and code.strip() in ("0", "130"), out
        assert "Traceback" not in out
    finally:
        await tmux("kill-session", "-t", session)
