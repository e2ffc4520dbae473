"""Pieces shared by `rig run` and `rig demo`: building rollouts and running them.

Imported when the parser is built, so at module level only the standard library and
rig.errors / rig.extras: the session, runner and transports are imported where used.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from rig.cli.capacity import (
    add_capacity_options,
    be_worker,
    concurrency_arg,
    runner_concurrency,
    tolerance_of,
)
from rig.cli.sweep import sweep_meta, swept_id, swept_runs
from rig.errors import ConfigError
from rig.extras import BACKENDS, DIALECTS, TRANSPORTS, require

if TYPE_CHECKING:
    from rig.clock.base import Clock
    from rig.runner import RolloutSpec, Runner
    from rig.scenarios import ScenarioItem
    from rig.session import SessionConfig
    from rig.transports.base import Transport


def add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="recordings", help="output folder (default: recordings/)")
    p.add_argument("--run-id", help="run directory name (reuse one to resume)")
    p.add_argument("--headless", action="store_true", help="plain progress lines, no live view")
    p.add_argument(
        "--concurrency",
        type=concurrency_arg,
        default=1,
        help="rollouts at once (in total), or auto: as many as the event loop paces within "
        "its lag budget (AIMD; docs/pacing.md)",
    )
    add_capacity_options(p)
    p.add_argument("--connect-concurrency", type=int, default=8, help="simultaneous connects")
    p.add_argument("--repeat", type=int, default=1, help="run every item N times")
    p.add_argument(
        "--rt-priority",
        type=int,
        default=3,
        help="SCHED_FIFO priority for the audio loop's thread, if permitted (0: normal "
        "scheduling; the default 3 sits under JACK's and PulseAudio's audio threads and over "
        "every normal process); what was obtained is in the manifest",
    )
    p.add_argument(
        "--frame-ms",
        type=float,
        default=None,
        help="uplink frame (20; the dialect's own, e.g. moshi 80)",
    )
    p.add_argument(
        "--drain-quiet-s",
        type=float,
        default=1.5,
        help="after the plan, stop once the system was quiet this long (playback)",
    )
    p.add_argument(
        "--max-s",
        type=float,
        default=120.0,
        help="cap per rollout, s: the script stops max_s after its first frame, and anything "
        "stuck (connect, a send the peer never reads) is cut max_s + 1 s after the start: "
        "status timed_out",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--asr-model",
        metavar="NAME|PATH",
        help="word-level onsets: transcribe both tracks after each rollout, in the analysis "
        "worker, with this faster-whisper model (a size name such as tiny.en, or a local "
        "CTranslate2 model directory); needs the asr extra (docs/metrics.md)",
    )
    p.add_argument(
        "--force-resume",
        action="store_true",
        help="resume into a run directory recorded with another target or configuration "
        "(refused otherwise; the differences are recorded in the manifest)",
    )
    p.add_argument(
        "--mqtt",
        help="publish telemetry to mqtt://[user[:pass]@]host[:port] (mqtts:// for TLS; "
        "password also from RIG_MQTT_PASSWORD)",
    )
    p.add_argument("--detail", help="rollout shown in the live view's detail panel")
    p.add_argument(
        "--progress-interval-s",
        type=float,
        default=10.0,
        help="without the live view: a progress line (counts, rate, ETA) every N s (0: off)",
    )
    p.add_argument(
        "--device-clock",
        metavar="DEVICE_ID",
        help="probe this device's clock over MQTT (needs --mqtt) and fit it onto the shared "
        "clock; writes device_clock.json into the run directory",
    )
    p.add_argument("--device-probe-interval-s", type=float, default=0.5)
    p.add_argument(
        "--probe-interval-s",
        type=float,
        default=0.5,
        help="four-timestamp clock probes every N s, for the latency split (peers that do "
        "not answer them ignore them; 0 = off; default 0.5)",
    )
    p.add_argument(
        "--path-interval-s",
        type=float,
        default=1.0,
        help="measure the path every N s with no help from the server: a WebSocket ping "
        "round trip and the kernel's TCP_INFO (RTT, send backlog); 0 = off; default 1",
    )
    from rig.cli.netopts import add_impair_option

    add_impair_option(p)


def require_extras(args: argparse.Namespace, transport: str, dialect: str | None) -> None:
    """Fail up front, in one line naming the extra, when an option needs one that is missing
    (before any rollout starts or any file is written)."""
    if transport in TRANSPORTS:
        require(TRANSPORTS[transport], f"--transport {transport}")
    if transport == "device":
        backend = getattr(args, "backend", None) or "sounddevice"
        require(BACKENDS[backend], f"--transport device --backend {backend}")
    if transport == "ws" and dialect in DIALECTS:
        require(DIALECTS[dialect], f"--dialect {dialect}")
    if getattr(args, "mqtt", None):
        require("mqtt", "--mqtt")


def check_run_options(args: argparse.Namespace) -> None:
    """Range-check `rig run`/`rig demo` options before anything is opened or written: a typo
    (`--max-s 1e300`, `--concurrency 0`, `--run-id ../../x`) is a clear error, never a
    MemoryError, a silent clamp or a directory outside `--out`."""
    from rig.ids import check_id
    from rig.limits import bounded, local_rate

    if getattr(args, "run_id", None) is not None:
        check_id(args.run_id, "--run-id")
    ints = (
        ("--concurrency", "concurrency", 1, 100_000),  # or auto
        ("--connect-concurrency", "connect_concurrency", 1, 100_000),
        ("--repeat", "repeat", 1, 1_000_000),
        ("--rt-priority", "rt_priority", 0, 99),
        ("--workers", "workers", 1, 256),
    )
    for flag, name, lo, hi in ints:
        v = getattr(args, name, None)
        if v is not None and v != "auto" and not lo <= v <= hi:
            raise ConfigError(f"{flag} must be an integer in [{lo}, {hi}], got {v}")
    floats = (
        ("--frame-ms", "frame_ms", 2.5, 1000.0),
        ("--drain-quiet-s", "drain_quiet_s", 0.0, 3600.0),
        ("--max-s", "max_s", 0.001, 86_400.0),
        ("--probe-interval-s", "probe_interval_s", 0.0, 3600.0),
        ("--timing-tolerance-ms", "timing_tolerance_ms", 0.01, 60_000.0),
        ("--loop-lag-max-ms", "loop_lag_max_ms", 0.01, 60_000.0),
        ("--path-interval-s", "path_interval_s", 0.0, 3600.0),
        ("--device-probe-interval-s", "device_probe_interval_s", 0.001, 3600.0),
        ("--progress-interval-s", "progress_interval_s", 0.0, 86_400.0),
    )
    for flag, name, flo, fhi in floats:
        v = getattr(args, name, None)
        if v is not None:
            bounded(v, flo, fhi, flag)
    if getattr(args, "sample_rate", None) is not None:
        local_rate(args.sample_rate, "--sample-rate")


def session_config(
    args: argparse.Namespace, overrides: dict[str, Any] | None = None
) -> SessionConfig:
    from rig.session import SessionConfig

    base = dict(
        frame_ms=args.frame_ms if args.frame_ms is not None else 20.0,
        drain_quiet_s=args.drain_quiet_s,
        max_s=args.max_s,
        probe_interval_s=args.probe_interval_s,
        path_interval_s=getattr(args, "path_interval_s", 1.0),
    )
    base.update(overrides or {})
    return SessionConfig(**base)


def ws_factory(
    url: str, dialect: str, sample_rate: int, options: dict[str, Any], relay: Any = None
) -> Any:
    """Transports to `url`; through `relay` (an impairment relay, started by then) if given."""
    from rig.dialects import get_dialect
    from rig.transports.websocket import WebSocketTransport

    def make(clock: Clock, gate: asyncio.Semaphore) -> Transport:
        d = get_dialect(
            dialect,
            **({"sample_rate": sample_rate} if dialect in ("rig", "raw") else {}),
            **options,
        )
        via = None if relay is None else relay.address
        return WebSocketTransport(url, d, clock, open_gate=gate, connect_via=via)

    return make


WEBRTC_SIGNALLING = {
    "rig": "whip",
    "raw": "whip",
    "whip": "whip",
    "openai": "openai",
    "pipecat": "pipecat",
}


def webrtc_factory(url: str, dialect: str, sample_rate: int) -> Any:
    """`--transport webrtc`: `--dialect` picks the signalling (rig/whip, openai, pipecat)."""
    from rig.transports.webrtc import WebRtcTransport, get_signalling, target_host

    if dialect not in WEBRTC_SIGNALLING:
        raise ConfigError(
            f"--transport webrtc takes --dialect {', '.join(WEBRTC_SIGNALLING)}, not {dialect!r}"
        )

    def make(clock: Clock, gate: asyncio.Semaphore) -> Transport:
        sig = get_signalling(WEBRTC_SIGNALLING[dialect], url)
        return WebRtcTransport(
            sig, clock, uplink_rate=sample_rate, open_gate=gate, target_host=target_host(url)
        )

    return make


def uplink_rate(dialect: str, requested: int | None, options: dict[str, Any] | None = None) -> int:
    from rig.dialects import get_dialect

    if dialect in ("rig", "raw"):
        return requested or 16_000
    d = get_dialect(dialect, **(options or {}))
    return d.uplink_rate


def parse_dialect_options(pairs: list[str] | None) -> dict[str, Any]:
    """`--dialect-opt KEY=VALUE` pairs; values are JSON where they parse (numbers, true,
    null, lists), plain strings otherwise. Credentials never go here: they come from env."""
    from rig import safejson

    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"--dialect-opt wants KEY=VALUE, got {pair!r}")
        try:
            out[key.strip()] = safejson.parse(value)
        except ValueError:  # not JSON (or NaN, 10^5-deep...): the plain string
            out[key.strip()] = value
    return out


def repeated(items: list[ScenarioItem], repeat: int) -> Iterator[tuple[str, ScenarioItem, int]]:
    """(rollout id, item, repeat index) for every item `repeat` times; ids stay plain when
    there is one repeat, so a run directory's rollouts are named after their items."""
    for rep in range(max(1, repeat)):
        for item in items:
            yield (item.item_id if repeat <= 1 else f"{item.item_id}-r{rep}"), item, rep


def build_specs(
    items: list[ScenarioItem],
    args: argparse.Namespace,
    target_url: str,
    transport: str,
    dialect: str,
) -> list[RolloutSpec]:
    from rig.dialects import get_dialect
    from rig.redact import redact_url
    from rig.runner import RolloutSpec

    for item in items:
        if item.meta.get("history") and transport != "ws":
            raise ConfigError(
                f"item {item.item_id}: text history goes to a WebSocket dialect that takes "
                "text (openai, grok, gemini); use prefill audio over other transports"
            )
    if transport == "device":
        return device_specs(items, args)
    if transport not in ("ws", "webrtc"):
        raise ConfigError(f"transport {transport!r} is not available in this build")
    from rig.cli.netopts import relay_for

    relay = args.impair_relay = relay_for(args, target_url, transport)
    specs = []
    options = parse_dialect_options(getattr(args, "dialect_opt", None))
    runs = swept_runs(args, transport, dialect, options, repeated(items, args.repeat))
    try:
        probe = get_dialect(dialect, **options) if transport == "ws" else get_dialect(dialect)
    except TypeError as exc:
        raise ConfigError(f"dialect {dialect!r} does not take these options: {exc}") from exc
    preferred = probe.frame_ms  # e.g. Moshi's 80 ms
    frame = {"frame_ms": preferred} if args.frame_ms is None and preferred else {}
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
        item_options = {
            **options,
            **setting,
            **({"history": item.meta["history"]} if item.meta.get("history") else {}),
        }
        specs.append(
            RolloutSpec(
                swept_id(rid, setting),
                item.plan,
                webrtc_factory(target_url, dialect, item.plan.sample_rate)
                if transport == "webrtc"
                else ws_factory(target_url, dialect, item.plan.sample_rate, item_options, relay),
                {"url": redact_url(target_url), "transport": transport, "dialect": dialect},
                {**item.meta, "repeat": rep, **sweep_meta(setting)},
                session_config(args, {**frame, **(item.session or {})}),
            )
        )
    return specs


def device_specs(items: list[ScenarioItem], args: argparse.Namespace) -> list[RolloutSpec]:
    """Rollouts over a sound card; devices, format and calibration are checked up front."""
    from rig.device.calibration import load_calibration
    from rig.device.options import DeviceOptions, open_checked, parse_latency, path_key
    from rig.runner import RolloutSpec
    from rig.transports.device import device_factory

    if not args.output or not args.input:
        raise ConfigError("--transport device needs --output DEV and --input DEV")
    if args.concurrency != 1:
        raise ConfigError("one sound card carries one conversation: --concurrency must be 1")
    opts = DeviceOptions(
        output=args.output,
        input=args.input,
        rate=args.sample_rate or 48_000,
        channels=args.channels,
        blocksize=args.blocksize,
        latency=parse_latency(args.latency),
        duplex=args.duplex,
        backend=args.backend,
    )
    stream = open_checked(opts)  # DeviceError: missing device, unsupported rate/channels
    key = path_key(stream, opts)
    cal = load_calibration(args.calibration, key)
    target = {
        "transport": "device",
        **key.as_dict(),
        "channels": opts.channels,
        "calibration": None if cal is None else cal.as_dict(),
        "device_round_trip_ms": None if cal is None else cal.round_trip_ms,
    }
    specs = []
    for rid, item, rep in repeated(items, args.repeat):
        specs.append(
            RolloutSpec(
                rid,
                item.plan,
                device_factory(opts, args.calibration),
                target,
                {**item.meta, "repeat": rep},
                session_config(args, item.session),
            )
        )
    return specs


def run_specs(args: argparse.Namespace, specs: list[RolloutSpec], config: dict[str, Any]) -> Runner:
    """Run the rollouts with the live view (or plain lines) and the optional MQTT bridge."""
    return asyncio.run(_run_specs(args, specs, config))


async def run_specs_async(
    args: argparse.Namespace, specs: list[RolloutSpec], config: dict[str, Any]
) -> Runner:
    """The same run inside an event loop that is already running (rig.run_async)."""
    return await _run_specs(args, specs, config)


async def _run_specs(
    args: argparse.Namespace, specs: list[RolloutSpec], config: dict[str, Any]
) -> Runner:
    from contextlib import AsyncExitStack

    from rich.console import Console

    from rig import workers
    from rig.cli.netopts import impair_config
    from rig.clock.base import MonotonicClock
    from rig.runner import Runner, rollout_done
    from rig.shard import parse_shard
    from rig.telemetry import events as ev
    from rig.telemetry.bus import EventBus
    from rig.telemetry.session_bridge import session_publisher, target_fields

    asr_model = getattr(args, "asr_model", None)
    if asr_model:
        from rig.extras import require

        require("asr", "--asr-model")
        config = {**config, "asr_model": asr_model}
    shard = parse_shard(args.shard) if getattr(args, "shard", None) else None
    clock = MonotonicClock()
    bus = EventBus()
    # only to ask whether stderr is a terminal: the live view draws in its own process
    k, n = getattr(args, "worker_index", None), getattr(args, "workers", 1)
    headless = bool(args.headless) or not Console(stderr=True).is_terminal or k is not None
    if k is not None:  # one worker of a sharded run: its share, its own manifest
        be_worker(args)
        specs = workers.shard(specs, k, n)
        config = {
            **config,
            "concurrency": args.concurrency,
            "connect_concurrency": args.connect_concurrency,
        }
    # the runner takes the whole plan (its manifest describes the slice within it); the
    # live view counts this process's slice
    mine = [s for s in specs if shard is None or shard.owns(s.rollout_id)]
    view: Any = None

    def progress(line: str) -> None:
        if view is None or not view.alive:
            print(line, file=sys.stderr, flush=True)

    runner = Runner(
        args.out,
        run_id=args.run_id,
        concurrency=runner_concurrency(args)
        if k is None or args.concurrency == "auto"  # auto: each worker finds its own
        else workers.share(args.concurrency, k, n),
        connect_concurrency=args.connect_concurrency
        if k is None
        else workers.share(args.connect_concurrency, k, n),
        manifest_name="manifest.json" if k is None else workers.worker_manifest_name(k),
        rt_priority=args.rt_priority,
        force_resume=bool(getattr(args, "force_resume", False)),
        tolerance=tolerance_of(args),
        shard=shard,
        node=getattr(args, "node_id", None),
        clock=clock,
        seed=args.seed,
        config={
            **config,
            "mqtt": bool(getattr(args, "mqtt", None)),
            "headless": headless,
            **impair_config(args),
        },
        progress=progress,
        asr_model=asr_model,
    )
    targets = {s.rollout_id: target_fields(s.target) for s in mine}
    runner.publish_factory = session_publisher(bus, runner.run_id, clock, targets=targets)
    skipped = sum(
        rollout_done(os.path.join(runner.run_dir, "rollouts", s.rollout_id)) for s in mine
    )
    relay = getattr(args, "impair_relay", None)
    async with AsyncExitStack() as stack:
        if relay is not None:  # its own process: the audio loop never runs the relay
            from rig.cli.netopts import impair_log_path

            relay.start(impair_log_path(runner.run_dir))  # main thread, before any rollout
            stack.push_async_callback(asyncio.to_thread, relay.stop)
        if not headless:
            from rig.telemetry.viewproc import ViewProcess

            # big fleets: half the drawing (the view's CPU competes with the run's other threads)
            view = ViewProcess(
                bus,
                detail=getattr(args, "detail", None),
                refresh_hz=4.0 if len(mine) <= 10 else 2.0,
                clock=clock,
            )
            if await view.start():
                stack.push_async_callback(_close_view, view)
            else:
                print(f"rig: {view.error}; plain progress lines instead", file=sys.stderr)
                view = None
        device_probe = None
        if getattr(args, "mqtt", None):
            from rig.telemetry.mqtt import MqttPublisher, parse_mqtt_url

            await stack.enter_async_context(
                MqttPublisher(bus, parse_mqtt_url(args.mqtt), clock=clock)
            )
            if getattr(args, "device_clock", None):
                from rig.telemetry.deviceclock import DeviceClockProbe

                device_probe = await stack.enter_async_context(
                    DeviceClockProbe(
                        parse_mqtt_url(args.mqtt), runner.run_id, args.device_clock, bus=bus
                    )
                )
        elif getattr(args, "device_clock", None):
            raise ConfigError("--device-clock needs --mqtt URL (the device answers over MQTT)")
        bus.publish(
            ev.run(
                runner.run_id,
                clock.now_ns(),
                len(mine) - skipped,
                skipped=skipped,
                concurrency=runner.concurrency,
            )
        )
        probing = (
            asyncio.create_task(device_probe.probe_every(args.device_probe_interval_s))
            if device_probe is not None
            else None
        )
        if view is not None:
            view_closed = asyncio.ensure_future(_announce_view_closed(view))
            stack.callback(view_closed.cancel)
        from rig.reporting.progress import progress_lines

        every_s = getattr(args, "progress_interval_s", 10.0)
        ticker = asyncio.ensure_future(
            progress_lines(runner.results, len(specs), skipped, clock, every_s, progress)
        )
        stack.callback(ticker.cancel)
        try:
            await runner.run(specs)
        finally:
            if probing is not None and device_probe is not None:
                probing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await probing
                from rig.recordings.writer import write_json_atomic

                await asyncio.to_thread(
                    write_json_atomic,
                    os.path.join(runner.run_dir, "device_clock.json"),
                    device_probe.summary(),
                )
    return runner


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
    """`q` in the view closes the view, not the run: say so, then plain progress lines. (A
    view that ends on Ctrl-C exits 130: the run is stopping too, nothing to announce.)"""
    await view.feed.closed.wait()
    proc = view.proc
    if proc is not None:
        with contextlib.suppress(TimeoutError):
            if await asyncio.wait_for(proc.wait(), 1.0) == 130:
                return
    print(
        "rig: live view closed; the run goes on (plain progress lines follow, Ctrl-C stops it)",
        file=sys.stderr,
        flush=True,
    )
