"""Device clock over MQTT: collect the samples that fit a device's clock onto the shared one.

How this works: a device under test publishes its own timestamped events on
`rig/<run>/device/<id>/events` (`{"v": 1, "t_ns": <device clock>, ...}`) and answers clock
probes. The rig publishes `{"v": 1, "id", "t0_ns"}` on `rig/<run>/device/<id>/probe` (t0 on
the shared clock); the device replies on `.../probe_reply` with `{"v": 1, "id", "t0_ns",
"t1_ns", "t2_ns"}` (t1 = probe arrival, t2 = reply departure, both on *its* clock); the rig
stamps t3 on arrival. `DeviceClockCollector` (pure) turns messages into NTP-style
`(t0_ns, t1_ns, t2_ns, t3_ns)` samples and `(device_ts_ns, local_arrival_ns)` event pairs,
which rig.clockfit.fit turns into offset + drift. `DeviceClockProbe` is the asyncio shell;
`SimulatedDevice` is a device with a configurable offset and drift, for tests and demos
(`python -m rig.telemetry.deviceclock --mqtt URL --run R --device D --offset-ms 250`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rig.aio import raise_if_cancelling
from rig.clock import NS_PER_MS, Clock, MonotonicClock
from rig.clockfit.fit import METHOD_TWO_WAY, fit_two_way
from rig.clockfit.mapping import ClockMap, FitRefusal
from rig.clockfit.steps import (
    EARLIEST_NS,
    LATEST_NS,
    ClockStep,
    segment_at,
    split_fit,
    stretch_bounds_dict,
)
from rig.errors import ProtocolError
from rig.limits import remote_ts_ns
from rig.safejson import object_remote
from rig.telemetry import events
from rig.telemetry.bus import EventBus
from rig.telemetry.lifecycle import StartStop
from rig.telemetry.mqtt import MqttConfig, _client, parse_mqtt_url
from rig.telemetry.wire import topic_part

#: The device protocol's own version (probe, probe_reply, events); devices speak it, so it
#: does not follow the telemetry schema's version.
SCHEMA_VERSION = 1

ProbeSample = tuple[int, int, int, int]  # (t0_ns, t1_ns, t2_ns, t3_ns)
EventPair = tuple[int, int]  # (device_ts_ns, local_arrival_ns)


def device_topic(run_id: str, device_id: str, leaf: str) -> str:
    return f"rig/{topic_part(run_id)}/device/{topic_part(device_id)}/{leaf}"


def sample_offset_rtt_ns(s: ProbeSample) -> tuple[float, int]:
    """NTP estimates from one sample: (device minus shared clock offset, round-trip delay)."""
    t0, t1, t2, t3 = s
    return ((t1 - t0) + (t2 - t3)) / 2, (t3 - t0) - (t2 - t1)


@dataclass(slots=True)
class DeviceClockCollector:
    """Pure bookkeeping of probes, replies and device events (times come in as arguments)."""

    run_id: str
    device_id: str
    samples: list[ProbeSample] = field(default_factory=list)
    events: list[EventPair] = field(default_factory=list)
    event_payloads: list[dict[str, Any]] = field(default_factory=list)
    unmatched: int = 0
    _next_id: int = 0
    _pending: dict[int, int] = field(default_factory=dict)

    @property
    def probe_topic(self) -> str:
        return device_topic(self.run_id, self.device_id, "probe")

    @property
    def reply_topic(self) -> str:
        return device_topic(self.run_id, self.device_id, "probe_reply")

    @property
    def events_topic(self) -> str:
        return device_topic(self.run_id, self.device_id, "events")

    def make_probe(self, t0_ns: int) -> tuple[int, bytes]:
        """A probe sent at `t0_ns`: (probe id, payload)."""
        pid = self._next_id
        self._next_id += 1
        self._pending[pid] = t0_ns
        return pid, json.dumps({"v": SCHEMA_VERSION, "id": pid, "t0_ns": t0_ns}).encode()

    def on_message(self, topic: str, payload: bytes, arrival_ns: int) -> ProbeSample | None:
        """Record a reply or device event that arrived at `arrival_ns`; return a new sample."""
        obj = object_remote(payload, "device message", max_bytes=1 << 20)
        if obj.get("v") != SCHEMA_VERSION:
            raise ProtocolError("device message is not a v1 object", obj)
        try:
            if topic == self.reply_topic:
                t0 = self._pending.pop(int(obj["id"]), None)
                if t0 is None or t0 != int(obj["t0_ns"]):
                    self.unmatched += 1
                    return None
                t1 = remote_ts_ns(obj["t1_ns"], "device probe_reply.t1_ns")
                t2 = remote_ts_ns(obj["t2_ns"], "device probe_reply.t2_ns")
                sample = (t0, t1, t2, arrival_ns)
                self.samples.append(sample)
                return sample
            if topic == self.events_topic:
                self.events.append((remote_ts_ns(obj["t_ns"], "device event.t_ns"), arrival_ns))
                self.event_payloads.append(obj)
                return None
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"malformed device message: {exc}", obj) from exc
        return None


class DeviceClockProbe(StartStop):
    """Asyncio shell: probes a device over MQTT and collects samples and event pairs.

    If `bus` is given, each probe result is also published as a `clock` event (rtt_ms and
    the single-sample offset_ms), under rollout id `rollout_id` (default `device:<id>`).
    """

    def __init__(
        self,
        config: MqttConfig,
        run_id: str,
        device_id: str,
        *,
        clock: Clock | None = None,
        bus: EventBus | None = None,
        rollout_id: str | None = None,
    ) -> None:
        self.config = config
        self.collector = DeviceClockCollector(run_id, device_id)
        self.clock: Clock = clock or MonotonicClock()
        self.malformed = 0
        self._bus = bus
        self._rollout_id = rollout_id or f"device:{device_id}"
        self._client: Any = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._reader: asyncio.Task[None] | None = None
        self._replies: dict[int, asyncio.Future[ProbeSample]] = {}

    @property
    def samples(self) -> list[ProbeSample]:
        return self.collector.samples

    @property
    def events(self) -> list[EventPair]:
        return self.collector.events

    async def start(self) -> None:
        self._stack = contextlib.AsyncExitStack()
        self._client = await self._stack.enter_async_context(_client(self.config, timeout=5.0))
        await self._client.subscribe(self.collector.reply_topic, qos=0)
        await self._client.subscribe(self.collector.events_topic, qos=0)
        self._reader = asyncio.get_running_loop().create_task(self._read(), name="device-clock")

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        if self._stack is not None:
            with contextlib.suppress(Exception):
                await self._stack.aclose()

    async def _read(self) -> None:
        async for msg in self._client.messages:
            t3 = self.clock.now_ns()
            try:
                sample = self.collector.on_message(str(msg.topic), bytes(msg.payload), t3)
            except ProtocolError:
                self.malformed += 1
                continue
            if sample is None:
                continue
            fut = self._replies.pop(self._id_of(sample), None)
            if fut is not None and not fut.done():
                fut.set_result(sample)

    def _id_of(self, sample: ProbeSample) -> int:
        return sample[0]  # t0_ns is unique per probe; the future is keyed by it

    async def probe(self, timeout_s: float = 1.0) -> ProbeSample | None:
        """One round trip; None if the device did not answer within `timeout_s`."""
        t0 = self.clock.now_ns()
        while t0 in self._replies:  # keep keys unique even on a coarse clock
            t0 += 1
        _, payload = self.collector.make_probe(t0)
        fut: asyncio.Future[ProbeSample] = asyncio.get_running_loop().create_future()
        self._replies[t0] = fut
        await self._client.publish(self.collector.probe_topic, payload, qos=0)
        try:
            async with asyncio.timeout(timeout_s):
                sample = await fut
        except TimeoutError:
            self._replies.pop(t0, None)
            return None
        if self._bus is not None:
            offset_ns, rtt_ns = sample_offset_rtt_ns(sample)
            self._bus.publish(
                events.clock(
                    self.collector.run_id,
                    self._rollout_id,
                    sample[3],
                    offset_ms=offset_ns / NS_PER_MS,
                    rtt_ms=rtt_ns / NS_PER_MS,
                    source=f"device:{self.collector.device_id}",
                )
            )
        return sample

    def fit(self) -> ClockMap | FitRefusal:
        """The device clock fitted onto the shared clock: the two one-way envelopes of the
        four-timestamp exchanges (offset and drift, uncertainty half the minimum round trip),
        exactly as a server clock is fitted. If the device clock stepped (an NTP sync after
        boot is typical), the fit of the longest stretch between steps; see `fits()`."""
        _, fits = self.fits()
        return max(fits, key=lambda f: f[2].n_samples)[2]

    def fits(self) -> tuple[list[ClockStep], list[tuple[int, int, ClockMap | FitRefusal]]]:
        """Steps the probes prove (rig/clockfit/steps.py) and one fit per local-time stretch."""
        s = self.samples
        if not s:
            return [], [
                (EARLIEST_NS, LATEST_NS, FitRefusal(METHOD_TWO_WAY, 0, "no probe was answered"))
            ]
        t0, t1, t2, t3 = (np.asarray(col, dtype=np.int64) for col in zip(*s, strict=True))
        order = np.argsort(t0, kind="stable")  # send order, as the steps count
        t0, t1, t2, t3 = t0[order], t1[order], t2[order], t3[order]
        return split_fit(t0, t1, t2, t3, lambda k, lo, hi: fit_two_way(t2[k], t3[k], t0[k], t1[k]))

    def mapped_events(self, fit: ClockMap | FitRefusal | None = None) -> list[dict[str, Any]]:
        """The device's own events on the shared clock (`t_ns`), beside their arrival time;
        each through the fit of the stretch (between clock steps) it arrived in, unless
        `fit` is given."""
        steps, fits = self.fits() if fit is None else ([], [(EARLIEST_NS, LATEST_NS, fit)])
        out = []
        for (dev_ts, arrival), payload in zip(
            self.collector.events, self.collector.event_payloads, strict=False
        ):
            f = segment_at(steps, fits, arrival, dev_ts, lambda m: m)
            local = f.to_local(dev_ts) if isinstance(f, ClockMap) else None
            out.append({**payload, "device_ts_ns": dev_ts, "t_ns": local, "arrival_ns": arrival})
        return out

    def summary(self) -> dict[str, Any]:
        """What a run records about the device clock (device_clock.json)."""
        steps, fits = self.fits()
        out = {
            "device_id": self.collector.device_id,
            "probes_answered": len(self.samples),
            "malformed": self.malformed,
            "fit": max(fits, key=lambda f: f[2].n_samples)[2].as_dict(),
            "events": self.mapped_events(),
        }
        if steps:
            out["steps"] = [st.as_dict() for st in steps]
            out["segments"] = [{**stretch_bounds_dict(lo, hi), **f.as_dict()} for lo, hi, f in fits]
        return out

    async def probe_every(self, interval_s: float, timeout_s: float = 1.0) -> None:
        """Probe until cancelled (for the length of a run)."""
        while True:
            await self.probe(timeout_s)
            raise_if_cancelling()  # a cancel an await inside lost: stop all the same
            await asyncio.sleep(interval_s)

    async def probe_many(self, n: int, interval_s: float = 0.05, timeout_s: float = 1.0) -> int:
        """`n` probes `interval_s` apart; returns how many were answered."""
        answered = 0
        for i in range(n):
            if i:
                await asyncio.sleep(interval_s)
            if await self.probe(timeout_s) is not None:
                answered += 1
        return answered


class SimulatedDevice:
    """A device whose clock reads `t + offset + drift*(t - t_ref)` of the shared clock `t`.

    Answers probes (with an optional processing delay between t1 and t2) and can emit
    timestamped events. Only for tests and demos: it runs on the same host clock.
    """

    def __init__(
        self,
        config: MqttConfig,
        run_id: str,
        device_id: str,
        *,
        offset_ns: int = 0,
        drift_ppm: float = 0.0,
        hold_s: float = 0.0,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.run_id = run_id
        self.device_id = device_id
        self.offset_ns = offset_ns
        self.drift_ppm = drift_ppm
        self.hold_s = hold_s
        self.clock: Clock = clock or MonotonicClock()
        self.t_ref_ns = self.clock.now_ns()
        self.answered = 0
        self.ready = asyncio.Event()
        self._client: Any = None

    def device_ns(self, t_ns: int) -> int:
        """The device clock reading at shared-clock time `t_ns`."""
        return t_ns + self.offset_ns + round((t_ns - self.t_ref_ns) * self.drift_ppm * 1e-6)

    async def run(self) -> None:
        """Answer probes until cancelled."""
        probe_topic = device_topic(self.run_id, self.device_id, "probe")
        reply_topic = device_topic(self.run_id, self.device_id, "probe_reply")
        async with _client(self.config, timeout=5.0) as client:
            self._client = client
            await client.subscribe(probe_topic, qos=0)
            self.ready.set()
            async for msg in client.messages:
                t1 = self.device_ns(self.clock.now_ns())
                try:
                    obj = object_remote(bytes(msg.payload), "probe", max_bytes=1 << 16)
                    pid, t0 = int(obj["id"]), remote_ts_ns(obj["t0_ns"], "probe.t0_ns")
                except (ProtocolError, ValueError, KeyError, TypeError):
                    continue
                if self.hold_s:
                    await asyncio.sleep(self.hold_s)
                t2 = self.device_ns(self.clock.now_ns())
                reply = {"v": SCHEMA_VERSION, "id": pid, "t0_ns": t0, "t1_ns": t1, "t2_ns": t2}
                await client.publish(reply_topic, json.dumps(reply).encode(), qos=0)
                self.answered += 1

    async def emit(self, name: str, **fields: Any) -> int:
        """Publish a device event stamped on the device clock; returns its device time."""
        if self._client is None:
            raise RuntimeError("SimulatedDevice.emit before run() connected")
        t_dev = self.device_ns(self.clock.now_ns())
        body = {"v": SCHEMA_VERSION, "t_ns": t_dev, "name": name, **fields}
        topic = device_topic(self.run_id, self.device_id, "events")
        await self._client.publish(topic, json.dumps(body).encode(), qos=0)
        return t_dev


def main(argv: list[str] | None = None) -> int:
    """Run a simulated device until interrupted."""
    parser = argparse.ArgumentParser(description="simulated MQTT device with an offset clock")
    parser.add_argument("--mqtt", required=True, help="mqtt://[user@]host:port")
    parser.add_argument("--run", required=True)
    parser.add_argument("--device", default="sim")
    parser.add_argument("--offset-ms", type=float, default=0.0)
    parser.add_argument("--drift-ppm", type=float, default=0.0)
    parser.add_argument("--event-every-s", type=float, default=0.0)
    args = parser.parse_args(argv)
    config = parse_mqtt_url(args.mqtt)

    async def go() -> None:
        dev = SimulatedDevice(
            config,
            args.run,
            args.device,
            offset_ns=round(args.offset_ms * NS_PER_MS),
            drift_ppm=args.drift_ppm,
        )
        task = asyncio.create_task(dev.run())
        await dev.ready.wait()
        n = 0
        while args.event_every_s > 0 and not task.done():
            await asyncio.sleep(args.event_every_s)
            await dev.emit("tick", n=n)
            n += 1
        await task

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(go())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
