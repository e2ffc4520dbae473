"""Pieces shared by `rig run` and `rig demo`: building rollouts and running them.

Imported when the parser is built, so at module level only the standard library and
rig.errors / rig.extras: the session, runner and transports are imported where used.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from rig.cli.capacity import (
    add_capacity_options,
    concurrency_arg,
)
from rig.cli.sweep import sweep_meta, swept_id, swept_runs
from rig.errors import ConfigError
from rig.extras import BACKENDS, DIALECTS, TRANSPORTS, require

if TYPE_CHECKING:
    from rig.clock.base import Clock
    from rig.runner import RolloutSpec
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
                webrtc_factory(target_url, dialect, item.plan.sample_rate, relay)
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
