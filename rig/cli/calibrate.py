"""`rig calibrate`: measure a sound-card loopback's round-trip latency and store it."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
from typing import Any

from rig.errors import ConfigError
from rig.extras import BACKENDS, require

#: --probe choices (rig.device.loopback.PROBES; tests/test_packaging.py keeps them equal)
PROBES = ("chirp", "mls")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "calibrate",
        help="measure sound-card round-trip latency",
        description="Play a probe N times through a loopback (cable or virtual card), "
        "cross-correlate, and store the round trip for `rig run` to subtract.",
    )
    p.add_argument("--device", help="one device for both directions (name, index, or HOSTAPI:NAME)")
    p.add_argument("--input", help="input device (with --output)")
    p.add_argument("--output", help="output device (with --input)")
    p.add_argument("--repeats", type=int, default=5, help="probes played, for the spread")
    p.add_argument("--rate", type=int, default=48000, help="sample rate opened, Hz")
    p.add_argument("--blocksize", type=int, default=0, help="frames per callback (0: auto)")
    p.add_argument("--latency", default="high", help="PortAudio latency: low, high or seconds")
    p.add_argument(
        "--duplex",
        action="store_true",
        help="one full-duplex stream (default: separate input/output streams)",
    )
    p.add_argument("--channels", type=int, default=1, help="channels opened")
    p.add_argument(
        "--backend", choices=sorted(BACKENDS), default="sounddevice", help="PortAudio binding"
    )
    p.add_argument("--probe", choices=PROBES, default="chirp", help="test signal")
    p.add_argument(
        "--max-latency-ms", type=float, default=500.0, help="longest round trip to search for"
    )
    p.add_argument(
        "--max-spread-ms",
        type=float,
        default=1.0,
        help="refuse when repeats disagree by more than this",
    )
    p.add_argument(
        "--attempts",
        type=int,
        default=3,
        help="measure again when the repeats disagree, up to this many measurements in all; "
        "the refused ones are listed and kept in the JSON (default: 3)",
    )
    p.add_argument("--store", help="calibration directory (default ~/.config/rig/calibrations)")
    p.add_argument("--no-store", action="store_true", help="measure only")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _latency(text: str) -> str | float:
    if text in ("low", "high"):
        return text
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"--latency must be low, high or seconds, got {text!r}") from None


def run(args: argparse.Namespace) -> int:
    require(BACKENDS[args.backend], f"rig calibrate --backend {args.backend}")
    from rig.device.calibration_store import CalibrationStore
    from rig.device.loopback import measure_round_trip
    from rig.device.model import StreamSettings
    from rig.device.stream import get_backend

    if args.device and (args.input or args.output):
        raise ConfigError("use --device, or --input with --output, not both")
    inp = args.input or args.device
    out = args.output or args.device
    if not inp or not out:
        raise ConfigError("name the loopback: --device NAME, or --input NAME --output NAME")
    if args.repeats < 3:
        raise ConfigError("--repeats must be at least 3 (the spread needs repeats)")
    if args.attempts < 1:
        raise ConfigError("--attempts must be at least 1")
    settings = StreamSettings(
        rate=args.rate,
        input=inp,
        output=out,
        in_channels=args.channels,
        out_channels=args.channels,
        blocksize=args.blocksize,
        latency=_latency(args.latency),
        duplex=args.duplex,
    )
    backend = get_backend(args.backend)
    result = asyncio.run(
        measure_round_trip(
            backend,
            settings,
            repeats=args.repeats,
            probe=args.probe,
            max_latency_s=args.max_latency_ms / 1e3,
            max_spread_ms=args.max_spread_ms,
            attempts=args.attempts,
        )
    )
    doc = result.as_dict()
    if not args.no_store:
        stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        doc["stored_at"] = str(
            CalibrationStore(args.store).save(result.as_dict(), measured_at=stamp)
        )
    if args.json:
        print(json.dumps(doc))
        return 0
    print(
        f"{doc['input']} -> {doc['output']} ({doc['hostapi']}, {doc['backend']}, {doc['rate']} Hz)"
    )
    print(
        f"round trip  {doc['round_trip_ms']:.3f} ms  (spread {doc['spread_ms']:.3f} ms, "
        f"std {doc['std_ms']:.3f} ms over {doc['repeats']} repeats)"
    )
    rep = doc["reported_latency_ms"]
    print(
        f"reported    {rep:.3f} ms by PortAudio (input + output)"
        if rep is not None
        else "reported    n/a"
    )
    for side in ("in", "out"):
        c = doc[f"pa_clock_{side}"]
        verdict = "consistent" if c["consistent"] else f"not used: {c['reason']}"
        print(f"PortAudio {side:>3} times: {verdict}")
    ir = doc.get("impulse_response")
    if ir is not None:
        print(
            f"echo path   gain {ir['gain_db']:.1f} dB, peak at {ir['peak_ms']:.3f} ms, "
            f"99.9 % of its energy within {ir['length_ms']:.1f} ms of {ir['t0_ms']:.3f} ms "
            "(kept for --cancel-own-echo)"
        )
    for k, why in enumerate(doc["refused_attempts"], 1):
        print(f"attempt {k} refused: {why}")
    if doc["xruns"]:
        print("xruns: " + ", ".join(f"{k} {v}" for k, v in doc["xruns"].items()))
    if "stored_at" in doc:
        print(f"stored      {doc['stored_at']}")
    return 0
