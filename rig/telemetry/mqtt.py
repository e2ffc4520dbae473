"""MQTT bridge (aiomqtt): publish the bus to a broker, or feed a bus from one.

How this works:
- Topics and payloads are `rig.telemetry.wire`'s (`rig/<run>/<rollout>/<kind>`, JSON schema
  v2, v1 still read, every message checked). Status and run messages are retained, so a
  watcher that starts late still sees every rollout's state and the run's size.
- `MqttPublisher` subscribes to the bus with its own bounded queue and wakes `flush_hz`
  times a second: non-chunk events go out as they are, per-chunk events are coalesced per
  rollout and direction into one `chunk_batch` per flush (`rig.telemetry.coalesce`).
  It never blocks the bus: when the broker is slow or gone, the queue drops its oldest events
  (counted); the publisher reconnects with capped exponential backoff and, once back,
  republishes the latest status of every rollout.
- `MqttSubscriber` is the other end: it decodes messages and publishes them on a local bus,
  so `rig watch --mqtt URL` renders the same dashboard from another process.
- Secrets: the password comes from the URL or RIG_MQTT_PASSWORD; `MqttConfig.__repr__` and
  `redacted()` hide it, payloads never carry it, and URLs in a status `target` lose their
  userinfo before they are published.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from rig.aio import finish_or_cancel
from rig.clock.base import Clock, MonotonicClock
from rig.clock.wall import epoch_offset_ns
from rig.errors import ConfigError, ProtocolError
from rig.redact import redact_url
from rig.telemetry.bus import EventBus, Subscription
from rig.telemetry.coalesce import ChunkCoalescer
from rig.telemetry.events import TelemetryEvent
from rig.telemetry.lifecycle import StartStop
from rig.telemetry.wire import RETAINED_KINDS, decode, encode, subscription_filter, topic

PASSWORD_ENV = "RIG_MQTT_PASSWORD"
SLICE = 256  # events handled between two yields to the loop


# -- configuration -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MqttConfig:
    """Where the broker is and how to log in. The password never appears in repr()."""

    host: str
    port: int
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False
    cafile: str | None = None
    tls_insecure: bool = False
    client_id: str | None = None

    def redacted(self) -> str:
        scheme = "mqtts" if self.tls else "mqtt"
        user = ""
        if self.username:
            user = self.username + (":***" if self.password else "") + "@"
        return f"{scheme}://{user}{self.host}:{self.port}"

    def tls_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        ctx = ssl.create_default_context(cafile=self.cafile)
        if self.tls_insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx


def parse_mqtt_url(url: str, env: Mapping[str, str] | None = None) -> MqttConfig:
    """`mqtt://[user[:pass]@]host[:port]`, `mqtts://...` for TLS (`?cafile=PATH&insecure=1`).

    The password may instead come from RIG_MQTT_PASSWORD (the URL wins when it has one).
    """
    env = os.environ if env is None else env
    parts = urlsplit(url)
    if parts.scheme not in ("mqtt", "mqtts"):
        shown = redact_url(url)
        hint = f" (e.g. mqtt://{shown})" if "://" not in url else ""
        raise ConfigError(f"MQTT URL must start with mqtt:// or mqtts://, got {shown!r}{hint}")
    if not parts.hostname:
        raise ConfigError("MQTT URL has no host")
    tls = parts.scheme == "mqtts"
    try:
        port = parts.port or (8883 if tls else 1883)
    except ValueError as exc:
        raise ConfigError(f"MQTT URL has a bad port: {exc}") from exc
    query = parse_qs(parts.query)
    unknown = set(query) - {"cafile", "insecure", "client_id"}
    if unknown:
        raise ConfigError(f"unknown MQTT URL option(s): {', '.join(sorted(unknown))}")
    password = unquote(parts.password) if parts.password else env.get(PASSWORD_ENV) or None
    return MqttConfig(
        host=parts.hostname,
        port=port,
        username=unquote(parts.username) if parts.username else None,
        password=password,
        tls=tls,
        cafile=query.get("cafile", [None])[0],
        tls_insecure=query.get("insecure", ["0"])[0] in ("1", "true", "yes"),
        client_id=query.get("client_id", [None])[0],
    )


def _client(config: MqttConfig, **kw: Any) -> Any:
    import aiomqtt

    return aiomqtt.Client(
        config.host,
        config.port,
        username=config.username,
        password=config.password,
        identifier=config.client_id,
        tls_context=config.tls_context(),
        tls_insecure=config.tls_insecure if config.tls else None,
        **kw,
    )


def backoff(initial_s: float = 0.2, max_s: float = 5.0, factor: float = 2.0) -> Iterator[float]:
    """Reconnect delays: initial, doubling, capped. The I/O layer sleeps them."""
    delay = initial_s
    while True:
        yield delay
        delay = min(max_s, delay * factor)


# -- publisher -----------------------------------------------------------------------------------


@dataclass(slots=True)
class BridgeStats:
    sent: int = 0
    dropped_offline: int = 0  # taken from the queue but not sent (broker gone)
    reconnects: int = 0
    connects: int = 0
    connected: bool = False
    last_error: str | None = None


class MqttPublisher(StartStop):
    """Forwards the bus to a broker. `async with MqttPublisher(bus, config): ...`."""

    def __init__(
        self,
        bus: EventBus,
        config: MqttConfig,
        *,
        flush_hz: float = 10.0,
        queue_size: int = 16384,
        retry_initial_s: float = 0.2,
        retry_max_s: float = 5.0,
        publish_timeout_s: float = 2.0,
        keepalive_s: int = 10,
        clock: Clock | None = None,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        """`on_error`: told once per outage that the broker cannot be reached (a line for
        the user: telemetry is not getting through), again after it was reached."""
        self.config = config
        self._on_error = on_error
        self._clock: Clock = clock or MonotonicClock()  # batches chunk events by its time
        self._epoch_offset_ns = epoch_offset_ns(self._clock)  # wall minus shared clock
        self.stats = BridgeStats()
        self.flush_period_s = 1.0 / flush_hz
        self._bus = bus
        self._queue_size = queue_size
        self._retry = (retry_initial_s, retry_max_s)
        self._timeout_s = publish_timeout_s
        self._keepalive_s = keepalive_s
        self._coalescer = ChunkCoalescer(int(1e9 / flush_hz))
        self._last_status: dict[tuple[str, str], TelemetryEvent] = {}
        self._sub: Subscription | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    @property
    def dropped(self) -> int:
        """Events that never reached the broker: queue overflow plus offline drops."""
        queue = self._sub.dropped if self._sub is not None else 0
        return queue + self.stats.dropped_offline

    def start(self) -> None:
        self._sub = self._bus.subscribe(self._queue_size)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="mqtt-publisher")

    async def stop(self, flush_timeout_s: float = 2.0) -> None:
        """Send what is queued (if connected, within `flush_timeout_s`), then disconnect."""
        self._stopping.set()
        if self._task is None:
            return
        try:
            await finish_or_cancel(self._task, flush_timeout_s)  # a cancel of ours: raised
        finally:
            self._task = None
            if self._sub is not None:
                self._sub.close()

    async def _run(self) -> None:
        import aiomqtt

        delays = backoff(*self._retry)
        while True:
            try:
                async with _client(
                    self.config, keepalive=self._keepalive_s, timeout=self._timeout_s
                ) as client:
                    self.stats.connected = True
                    self.stats.last_error = None
                    self.stats.connects += 1
                    if self.stats.connects > 1:
                        self.stats.reconnects += 1
                    delays = backoff(*self._retry)
                    for ev in list(self._last_status.values()):
                        await self._publish(client, ev)
                    while not self._stopping.is_set():
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(self.flush_period_s):
                                await self._stopping.wait()
                        await self._send_pending(client, force=self._stopping.is_set())
                    return
            except aiomqtt.MqttError as exc:
                _tell_outage(self._on_error, self.config, self.stats.last_error, exc)
                self.stats.last_error = str(exc)
            finally:
                self.stats.connected = False
            # Offline: discard what we cannot send so the backlog cannot grow stale; the
            # latest status per rollout is kept and republished on reconnect.
            self._discard_offline()
            if self._stopping.is_set():
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(next(delays)):
                    await self._stopping.wait()

    def _discard_offline(self) -> None:
        if self._sub is None:
            return
        for ev in self._sub.drain():
            if ev.kind in RETAINED_KINDS:
                self._last_status[(ev.run_id, ev.rollout_id)] = ev
            self.stats.dropped_offline += 1
        self.stats.dropped_offline += sum(
            int(b.data.get("n_chunks", 1)) for b in self._coalescer.flush(0, force=True)
        )

    async def _send_pending(self, client: Any, force: bool = False) -> None:
        # Work in slices with a yield in between: this task shares the loop with the audio.
        assert self._sub is not None
        now_ns = self._clock.now_ns()
        # payloads carry wall-clock times (v3); re-read every flush: the wall clock can step
        self._epoch_offset_ns = epoch_offset_ns(self._clock)
        while len(self._sub) > 0:
            for ev in self._coalescer.fold_from(self._sub, SLICE):
                if ev.kind in RETAINED_KINDS:
                    self._last_status[(ev.run_id, ev.rollout_id)] = ev
                await self._publish(client, ev)
            await asyncio.sleep(0)
        for i, batch in enumerate(self._coalescer.flush(now_ns, force=force)):
            await self._publish(client, batch)
            if i % 16 == 15:
                await asyncio.sleep(0)

    async def _publish(self, client: Any, ev: TelemetryEvent) -> None:
        try:
            await client.publish(
                topic(ev.run_id, ev.rollout_id, ev.kind),
                encode(ev, self._epoch_offset_ns),
                qos=0,
                retain=ev.kind in RETAINED_KINDS,
                timeout=self._timeout_s,
            )
        except Exception:
            self.stats.dropped_offline += int(ev.data.get("n_chunks", 1))
            raise
        self.stats.sent += 1


# -- subscriber ----------------------------------------------------------------------------------


@dataclass(slots=True)
class SubscriberStats:
    received: int = 0
    malformed: int = 0  # dropped: not a valid telemetry event (see last_malformed)
    last_malformed: str | None = None
    connects: int = 0
    connected: bool = False
    last_error: str | None = None


class MqttSubscriber:
    """Feeds a local bus from the broker (the `rig watch --mqtt` side)."""

    def __init__(
        self,
        bus: EventBus,
        config: MqttConfig,
        *,
        run_id: str | None = None,
        retry_initial_s: float = 0.2,
        retry_max_s: float = 5.0,
        warn: Callable[[str], None] | None = None,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        """`on_error`: as MqttPublisher's (once per outage, a line for the user)."""
        self.config = config
        self.run_id = run_id
        self._on_error = on_error
        self.stats = SubscriberStats()
        #: where "dropped N malformed messages" warnings go (1st, 10th, 100th...: counted,
        #: never a flood); default: the `rig.telemetry` logger
        self._warn = warn or logging.getLogger("rig.telemetry").warning
        self.connected = asyncio.Event()
        self._bus = bus
        self._retry = (retry_initial_s, retry_max_s)

    async def run(self) -> None:
        """Subscribe and forward until cancelled, reconnecting with backoff."""
        import aiomqtt

        delays = backoff(*self._retry)
        while True:
            try:
                async with _client(self.config, keepalive=10, timeout=5.0) as client:
                    await client.subscribe(subscription_filter(self.run_id), qos=0)
                    self.stats.connects += 1
                    self.stats.connected = True
                    self.stats.last_error = None
                    self.connected.set()
                    delays = backoff(*self._retry)
                    async for msg in client.messages:
                        self._handle(msg.payload)
            except aiomqtt.MqttError as exc:
                _tell_outage(self._on_error, self.config, self.stats.last_error, exc)
                self.stats.last_error = str(exc)
            finally:
                self.stats.connected = False
                self.connected.clear()
            await asyncio.sleep(next(delays))

    def _handle(self, payload: Any) -> None:
        """One broker message: checked, then published; a bad one is dropped and counted."""
        try:
            ev = decode(payload)
        except Exception as exc:  # noqa: BLE001 - any publisher on the broker: never fatal
            self.stats.malformed += 1
            reason = exc.reason if isinstance(exc, ProtocolError) else f"{type(exc).__name__}"
            self.stats.last_malformed = reason[:200]
            n = self.stats.malformed
            if _power_of_ten(n):
                self._warn(
                    f"telemetry: dropped {n} malformed message(s) so far; last: {reason[:200]}"
                )
            return
        self.stats.received += 1
        self._bus.publish(ev)


def _tell_outage(
    on_error: Callable[[str], None] | None, config: MqttConfig, last: str | None, exc: Exception
) -> None:
    """The first failure of an outage, told once (the client retries with backoff)."""
    if on_error is not None and last is None:
        on_error(f"cannot reach the MQTT broker at {config.redacted()}: {exc}; retrying")


def _power_of_ten(n: int) -> bool:
    while n >= 10 and n % 10 == 0:
        n //= 10
    return n == 1
