"""The live side of a run in this process: the view process, MQTT, the device clock probe,
the fleet uplink to a driver, and plain progress lines.

Why apart from rig.runs.execute: what a run shows and publishes is not how it runs; each
piece is optional and set up from the config's `live` record, entered on the run's exit
stack so every one is closed however the run ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from contextlib import AsyncExitStack
from typing import Any

from rich.console import Console

from rig.clock.base import Clock
from rig.recordings.jsonwrite import write_json_atomic
from rig.runs.config import RunConfig
from rig.runs.records import Role
from rig.telemetry.bus import EventBus
from rig.telemetry.deviceclock import DeviceClockProbe
from rig.telemetry.fleetlink import FleetUplink, fleet_hello
from rig.telemetry.mqtt import MqttPublisher, parse_mqtt_url
from rig.telemetry.viewproc import VIEW_CLOSED, ViewProcess, closed_by_user


def is_headless(config: RunConfig, role: Role) -> bool:
    """Plain lines instead of the live view: asked, not a terminal, or a worker."""
    # only to ask whether stderr is a terminal: the live view draws in its own process
    return bool(config.live.headless) or not Console(stderr=True).is_terminal or role.is_worker


class LiveFeed:
    """Set up before the first rollout (`start`), told when the run ended (`after_run`,
    `finish`); `progress` is the runner's line printer (quiet while the view draws)."""

    def __init__(
        self, config: RunConfig, role: Role, bus: EventBus, clock: Clock, *, n_rollouts: int
    ) -> None:
        self.config = config
        self.role = role
        self.bus = bus
        self.clock = clock
        self.n_rollouts = n_rollouts
        self.view: Any = None
        self.uplink: Any = None
        self.device_probe: Any = None
        self.publisher: Any = None
        self._probing: asyncio.Task[Any] | None = None

    def progress(self, line: str) -> None:
        if self.view is None or not self.view.alive:
            print(line, file=sys.stderr, flush=True)

    async def start(self, stack: AsyncExitStack, run_id: str) -> None:
        live = self.config.live
        if not is_headless(self.config, self.role):
            # big fleets: half the drawing (the view's CPU competes with the run's threads)
            view = ViewProcess(
                self.bus,
                detail=live.detail,
                refresh_hz=4.0 if self.n_rollouts <= 10 else 2.0,
                clock=self.clock,
            )
            if await view.start():
                self.view = view
                stack.push_async_callback(_close_view, view)
                view_closed = asyncio.ensure_future(_announce_view_closed(view))
                stack.callback(view_closed.cancel)
            else:
                print(f"rig: {view.error}; plain progress lines instead", file=sys.stderr)
        if live.mqtt:
            self.publisher = MqttPublisher(
                self.bus,
                parse_mqtt_url(live.mqtt),
                clock=self.clock,
                on_error=lambda s: self.progress(f"rig: {s}"),
            )
            await stack.enter_async_context(self.publisher)
            if live.device_clock:
                self.device_probe = await stack.enter_async_context(
                    DeviceClockProbe(
                        parse_mqtt_url(live.mqtt), run_id, live.device_clock, bus=self.bus
                    )
                )
        if live.fleet_feed:  # a shard or worker: telemetry to its driver
            k = self.role.worker_index
            shard = self.config.scale.shard
            self.uplink = await stack.enter_async_context(
                FleetUplink(
                    self.bus,
                    live.fleet_feed,
                    fleet_hello(
                        shard.label
                        if shard is not None
                        else (f"worker-{k}" if k is not None else None),
                        self.role.node_id,
                        self.clock,
                    ),
                    clock=self.clock,
                )
            )
        if self.device_probe is not None:
            self._probing = asyncio.create_task(
                self.device_probe.probe_every(live.device_probe_interval_s)
            )

    def after_run(self) -> None:
        if self.uplink is not None and self.uplink.error:
            self.progress(f"rig: {self.uplink.error} (the run went on without it)")

    async def finish(self, run_dir: str) -> None:
        """The device clock's summary into the run directory (device_clock.json)."""
        if self._probing is None or self.device_probe is None:
            return
        self._probing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._probing
        await asyncio.to_thread(
            write_json_atomic,
            os.path.join(run_dir, "device_clock.json"),
            self.device_probe.summary(),
        )

    def after_close(self) -> None:
        """After the run, the view closed: telemetry that never reached the broker is said,
        not silent."""
        p = self.publisher
        if p is not None and p.stats.connects == 0:
            print(
                f"rig: no telemetry was published: never reached the MQTT broker at "
                f"{p.config.redacted()} ({p.stats.last_error or 'no answer'}); "
                "the recordings are complete",
                file=sys.stderr,
            )


async def _close_view(view: Any) -> None:
    """The run is over: the view draws its final frame and exits before the summary prints."""
    await view.stop()
    stats = view.feed.stats
    if stats.dropped or stats.dropped_queue:
        print(
            f"rig: the live view fell behind: {stats.dropped + stats.dropped_queue} telemetry "
            "events were not shown (the recordings are complete)",
            file=sys.stderr,
        )


async def _announce_view_closed(view: Any) -> None:
    """`q` in the view closes the view, not the run: say so, then plain progress lines."""
    if await closed_by_user(view):
        print(VIEW_CLOSED, file=sys.stderr, flush=True)
