"""A run's rollouts: the scenario resolved into specs, each with its transport factory.

`prepare(config)` is where every run starts (rig run, rig demo, rig.run, a worker, a shard):
the config checked, the scenario resolved at the uplink rate, one `RolloutSpec` per
rollout (items x repeats x sweep settings) and the impairment relay, if any, made (started
by rig.runs.execute). Nothing is written here.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rig.conditions import apply_conditions
from rig.device.calibration import load_calibration, load_echo_response
from rig.device.options import DeviceOptions, open_checked, parse_latency, path_key
from rig.device.roomopts import check_noise_device, noise_options
from rig.dialects import get_dialect
from rig.errors import ConfigError
from rig.redact import redact_url
from rig.runs.config import RunConfig
from rig.runs.relays import relay_for
from rig.runs.runner import RolloutSpec
from rig.runs.sweep import sweep_meta, swept_id, swept_runs
from rig.scenarios import ScenarioItem, resolve
from rig.scenarios.runcheck import check_items, item_dialect_options
from rig.transports.base import Transport
from rig.transports.device import device_factory
from rig.transports.websocket import WebSocketTransport

if TYPE_CHECKING:
    from rig.clock.base import Clock


@dataclass(frozen=True)
class Prepared:
    """A run's rollouts, built and checked before any file is written, with what was
    resolved on the way (recorded in the manifest)."""

    specs: list[RolloutSpec]
    sample_rate: int | None
    #: the impairment relay in front of the target (not started yet), or None
    relay: Any = None

    @property
    def session(self) -> dict[str, Any]:
        """The first rollout's session settings (the manifest's `config.session`)."""
        first = self.specs[0].session_config if self.specs else None
        return first.as_dict() if first is not None else {}


def prepare(config: RunConfig) -> Prepared:
    """Check the config, resolve the scenario and build the rollouts (before any file is
    written): `rig run`, `rig.run` and every worker start here."""
    config.check()
    t = config.target
    if t.transport == "device":
        rate = t.sample_rate or 48_000
    elif t.transport == "webrtc":
        rate = t.sample_rate or 48_000  # Opus runs at 48 kHz: no resampling on the way
    else:
        rate = uplink_rate(t.dialect, t.sample_rate, dict(t.dialect_opt))
    items = resolve(config.scenario, rate)
    apply_conditions(items, config.run_condition(), config.output.seed)  # before any stream
    relay = None
    if t.transport in ("ws", "webrtc") and t.target:
        relay = relay_for(config.impair, t.target, t.transport)
    specs = build_specs(items, config, t.target or "", t.transport, t.dialect, relay)
    return Prepared(specs, rate, relay)


def ws_factory(
    url: str,
    dialect: str,
    sample_rate: int,
    options: dict[str, Any],
    relay: Any = None,
    kernel_stamps: bool = True,
) -> Any:
    """Transports to `url`; through `relay` (an impairment relay, started by then) if given;
    `kernel_stamps`: arrival stamps from the kernel where it can (rig.transports.kstamp)."""

    def make(clock: Clock, gate: asyncio.Semaphore) -> Transport:
        d = get_dialect(
            dialect,
            **({"sample_rate": sample_rate} if dialect in ("rig", "raw") else {}),
            **options,
        )
        via = None if relay is None else relay.address
        return WebSocketTransport(
            url, d, clock, open_gate=gate, connect_via=via, kernel_stamps=kernel_stamps
        )

    return make


WEBRTC_SIGNALLING = {
    "rig": "whip",
    "raw": "whip",
    "whip": "whip",
    "openai": "openai",
    "pipecat": "pipecat",
}


def webrtc_factory(url: str, dialect: str, sample_rate: int, relay: Any = None) -> Any:
    """`--transport webrtc`: `--dialect` picks the signalling (rig/whip, openai, pipecat);
    media through `relay` (a UDP impairment relay, started by then) if given."""
    from rig.transports.webrtc import WebRtcTransport, get_signalling, target_host

    if dialect not in WEBRTC_SIGNALLING:
        raise ConfigError(
            f"--transport webrtc takes --dialect {', '.join(WEBRTC_SIGNALLING)}, not {dialect!r}"
        )

    def make(clock: Clock, gate: asyncio.Semaphore) -> Transport:
        sig = get_signalling(WEBRTC_SIGNALLING[dialect], url)
        return WebRtcTransport(
            sig,
            clock,
            uplink_rate=sample_rate,
            open_gate=gate,
            target_host=target_host(url),
            media_relay=relay,
        )

    return make


def uplink_rate(dialect: str, requested: int | None, options: dict[str, Any] | None = None) -> int:
    if dialect in ("rig", "raw"):
        return requested or 16_000
    d = get_dialect(dialect, **(options or {}))
    return d.uplink_rate


def repeated(items: list[ScenarioItem], repeat: int) -> Iterator[tuple[str, ScenarioItem, int]]:
    """(rollout id, item, repeat index) for every item `repeat` times; ids stay plain when
    there is one repeat, so a run directory's rollouts are named after their items."""
    for rep in range(max(1, repeat)):
        for item in items:
            yield (item.item_id if repeat <= 1 else f"{item.item_id}-r{rep}"), item, rep


def build_specs(
    items: list[ScenarioItem],
    config: RunConfig,
    target_url: str,
    transport: str,
    dialect: str,
    relay: Any = None,
) -> list[RolloutSpec]:
    """One spec per rollout (items x repeats x sweep settings); `relay`: the impairment
    relay the transports connect through (started before the first rollout)."""
    for item in items:
        if item.meta.get("history") and transport != "ws":
            raise ConfigError(
                f"item {item.item_id}: text history goes to a WebSocket dialect that takes "
                "text (openai, grok, gemini); use prefill audio over other transports"
            )
    base_options = dict(config.target.dialect_opt)
    for line in check_items(items, dialect=dialect, transport=transport, options=base_options):
        print(f"rig run: warning: {line}", file=sys.stderr)
    if transport == "device":
        return device_specs(items, config)
    if transport not in ("ws", "webrtc"):
        raise ConfigError(f"transport {transport!r} is not available in this build")
    specs = []
    options = dict(config.target.dialect_opt)
    runs = swept_runs(
        list(config.sweep), transport, dialect, options, repeated(items, config.scale.repeat)
    )
    try:
        probe = get_dialect(dialect, **options) if transport == "ws" else get_dialect(dialect)
    except TypeError as exc:
        raise ConfigError(f"dialect {dialect!r} does not take these options: {exc}") from exc
    preferred = probe.frame_ms  # e.g. Moshi's 80 ms
    frame = {"frame_ms": preferred} if config.session.frame_ms is None and preferred else {}
    for item in items:
        if item.meta.get("history") and transport == "ws":
            try:
                get_dialect(dialect, **options, history=item.meta["history"])
            except TypeError as exc:
                raise ConfigError(
                    f"item {item.item_id}: dialect {dialect!r} takes no text history; "
                    "give the history as prefill audio"
                ) from exc
    for setting, rid, item, rep in runs:
        item_options = {**options, **item_dialect_options(item), **setting}
        recorded = {k: v for k, v in item_options.items() if k not in ("history", "own_track")}
        specs.append(
            RolloutSpec(
                swept_id(rid, setting),
                item.plan,
                webrtc_factory(target_url, dialect, item.plan.sample_rate, relay)
                if transport == "webrtc"
                else ws_factory(
                    target_url,
                    dialect,
                    item.plan.sample_rate,
                    item_options,
                    relay,
                    config.target.arrival_stamps == "kernel",
                ),
                {"url": redact_url(target_url), "transport": transport, "dialect": dialect},
                {
                    **item.meta,
                    "repeat": rep,
                    **sweep_meta(setting),
                    **({"dialect_options": recorded} if recorded and transport == "ws" else {}),
                },
                config.session.session_config({**frame, **(item.session or {})}),
            )
        )
    return specs


def device_specs(items: list[ScenarioItem], config: RunConfig) -> list[RolloutSpec]:
    """Rollouts over a sound card; devices, format and calibration are checked up front."""
    dev = config.device
    if not dev.output or not dev.input:
        raise ConfigError("--transport device needs --output DEV and --input DEV")
    if config.scale.concurrency != 1:
        raise ConfigError("one sound card carries one conversation: --concurrency must be 1")
    opts = DeviceOptions(
        output=dev.output,
        input=dev.input,
        rate=config.target.sample_rate or 48_000,
        channels=dev.channels,
        blocksize=dev.blocksize,
        latency=parse_latency(dev.latency),
        duplex=dev.duplex,
        backend=dev.backend,
    )
    stream = open_checked(opts)  # DeviceError: missing device, unsupported rate/channels
    key = path_key(stream, opts)
    cal = load_calibration(dev.calibration, key)
    # the room (docs/devices.md): the echo response and the noise output, checked up front
    echo = None if dev.cancel_own_echo is None else load_echo_response(dev.cancel_own_echo, key)
    noise = noise_options(
        dev.noise_device,
        dev.noise,
        dev.noise_level_dbfs,
        rate=opts.rate,
        backend=opts.backend,
        latency=opts.latency,
    )
    target = {
        "transport": "device",
        **key.as_dict(),
        "channels": opts.channels,
        "calibration": None if cal is None else cal.as_dict(),
        "device_round_trip_ms": None if cal is None else cal.round_trip_ms,
        "cancel_own_echo": None if echo is None else echo.as_dict(),
        "noise": None
        if noise is None
        else {**noise.as_dict(), "device_name": check_noise_device(noise)},
    }
    specs = []
    for rid, item, rep in repeated(items, config.scale.repeat):
        specs.append(
            RolloutSpec(
                rid,
                item.plan,
                device_factory(
                    opts, dev.calibration, cancel_own_echo=dev.cancel_own_echo, noise=noise
                ),
                target,
                {**item.meta, "repeat": rep},
                config.session.session_config(item.session),
            )
        )
    return specs
