"""The driver's view of a whole fleet: every shard's telemetry, one live view or progress.

How this works: `FleetMonitor.start()` runs an event loop in a thread of the driver (its
main thread waits on the engine), with a `FleetCollector` listening on `--fleet-listen`
(127.0.0.1 and a free port by default) for the shards' telemetry (rig.telemetry.fleetlink).
Events land on one bus, renamed to the merged run and moved onto the driver's clock, and that
bus feeds the same out-of-process view a local run starts (rig.telemetry.viewproc), or, when
headless, the same lines as a local run: one per finished rollout and a progress line
(done/total, rate, ETA: rig.reporting.progress) every `--progress-interval-s`.
The driver itself streams no audio: nothing here competes with a shard's loop.

`rig run --workers N` uses the same monitor for its worker processes (shards on one host:
one clock). With `mqtt` the monitor also publishes the merged bus to the broker
(rig.telemetry.mqtt.MqttPublisher): one MQTT client, one retained `run` message with the
fleet's total, every worker's rollouts under the run's topic (docs/telemetry.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import threading
from collections.abc import Callable, Mapping
from typing import Any

from rig.clock.base import MonotonicClock
from rig.errors import ConfigError
from rig.reporting.progress import progress_lines
from rig.telemetry import events as ev
from rig.telemetry.bus import EventBus
from rig.telemetry.events import TelemetryEvent
from rig.telemetry.fleetlink import CollectorStats, FleetCollector, Hello
from rig.telemetry.mqtt import MqttConfig, MqttPublisher
from rig.telemetry.viewproc import VIEW_CLOSED, ViewProcess, closed_by_user

START_TIMEOUT_S = 30.0


class FleetMonitor:
    """Start before the shards, stop after them. `address` is what the shards connect to,
    `token` what they must show (handed to them through the engine, never on a command line)."""

    def __init__(
        self,
        run_id: str,
        rollout_ids: list[str],
        done_before: Mapping[str, str],
        *,
        listen: tuple[str, int] = ("127.0.0.1", 0),
        advertise: str | None = None,
        headless: bool = True,
        progress_interval_s: float = 10.0,
        emit: Callable[[str], None],
        detail: str | None = None,
        rollout_lines: bool = True,
        mqtt: MqttConfig | None = None,
    ) -> None:
        self.run_id = run_id
        self.total = len(rollout_ids)
        self.token = secrets.token_urlsafe(24)
        self.listen = listen
        self.advertise = advertise
        self.headless = headless
        self.progress_interval_s = progress_interval_s
        self.detail = detail
        #: a line per finished rollout from its telemetry (off where the shards' own lines
        #: reach the terminal: rig run --workers passes its workers' stderr through `line`)
        self.rollout_lines = rollout_lines
        self.mqtt = mqtt  # publish the merged bus to this broker
        self.address: str | None = None
        self.error: str | None = None
        #: rollout id -> {"status": ...}: done before the run, then as shards report them
        self.results: dict[str, dict[str, Any]] = {
            rid: {"status": s} for rid, s in done_before.items()
        }
        self.stats = CollectorStats()
        self.clocks: dict[str, dict[str, Any]] = {}
        self._skipped = len(self.results)
        self._emit = emit
        self._view: Any = None
        self._held: list[str] = []
        self._thread = threading.Thread(target=self._thread_main, name="fleet-view", daemon=True)
        self._started = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._announce: asyncio.Future[None] | None = None

    @property
    def view_alive(self) -> bool:
        return self._view is not None and bool(self._view.alive)

    def line(self, text: str) -> None:
        """A progress line, printed unless the live view is drawing."""
        if not self.view_alive:
            self._emit(text)

    def notice(self, text: str) -> None:
        """A line that must be read (a shard lost, its last output): printed now, or once
        the live view has closed."""
        if self.view_alive:
            self._held.append(text)
        else:
            self._emit(text)

    def start(self) -> str:
        """Listen (and start the view); the HOST:PORT the shards send to."""
        self._thread.start()
        if not self._started.wait(START_TIMEOUT_S) or self.address is None:
            self.stop()
            raise ConfigError(f"the fleet view did not start: {self.error or 'timed out'}")
        return self.address

    def stop(self) -> None:
        """The shards are done: last frame, view closed, listener closed."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop already ended
                pass
        if self._thread.is_alive():
            self._thread.join(START_TIMEOUT_S)
        held, self._held = self._held, []
        for text in held:
            self._emit(text)

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception as exc:  # noqa: BLE001 - the fleet still runs; it says why
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self._started.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        clock = MonotonicClock()
        bus = EventBus()
        collector = FleetCollector(
            bus,
            token=self.token,
            run_id=self.run_id,
            clock=clock,
            host=self.listen[0],
            port=self.listen[1],
            on_event=self._on_event,
        )
        self.stats = collector.stats
        self.clocks = collector.clocks
        host, port = await collector.start()
        shown = self.advertise or host
        self.address = f"[{shown}]:{port}" if ":" in shown else f"{shown}:{port}"
        async with contextlib.AsyncExitStack() as stack:
            # closed in reverse: the shards' last events are read, then published, then drawn
            stack.push_async_callback(self._close_view)
            stack.push_async_callback(collector.stop)
            if not self.headless:
                await self._open_view(bus, clock)
            if self.mqtt is not None:
                await stack.enter_async_context(MqttPublisher(bus, self.mqtt, clock=clock))
            bus.publish(
                ev.run(
                    self.run_id, clock.now_ns(), self.total - self._skipped, skipped=self._skipped
                )
            )
            self._started.set()
            ticker = asyncio.ensure_future(
                progress_lines(
                    self.results,
                    self.total,
                    self._skipped,
                    clock,
                    self.progress_interval_s,
                    self.line,
                )
            )
            stack.callback(ticker.cancel)
            await self._stop.wait()
            await collector.stop()  # before the publisher and the view close (again: a no-op)

    async def _open_view(self, bus: EventBus, clock: MonotonicClock) -> None:
        view = ViewProcess(
            bus, detail=self.detail, refresh_hz=4.0 if self.total <= 10 else 2.0, clock=clock
        )
        if not await view.start():
            self._emit(f"rig: {view.error}; plain progress lines instead")
            return
        self._view = view

        async def announce() -> None:
            if await closed_by_user(view):
                self._emit(VIEW_CLOSED)

        self._announce = asyncio.ensure_future(announce())

    async def _close_view(self) -> None:
        if self._announce is not None:
            self._announce.cancel()
        if self._view is not None:
            view, self._view = self._view, None
            await view.stop()

    def _on_event(self, event: TelemetryEvent, hello: Hello) -> None:
        d = event.data
        if event.kind != "status" or d.get("state") != "done" or not event.rollout_id:
            return
        status = str(d.get("status") or "?")
        self.results[event.rollout_id] = {"status": status}
        reason = d.get("reason")
        if not self.rollout_lines:
            return
        self.line(
            f"{event.rollout_id}: {status}"
            + (f" ({reason})" if reason else "")
            + f" [shard {hello.shard}]"
        )
