"""The calibration a run subtracts: the device path's round trip, and where it came from.

`load_calibration` finds the one for exactly this path (`auto`: the store; a file: it must
have been measured on this path), or none. `compose_calibration` builds a path's round trip
from two cables' loopback measurements (rig.device.loopback). See docs/devices.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig import safejson
from rig.device.calibration_store import CalibrationStore, PathKey
from rig.device.response import ImpulseResponse
from rig.errors import ConfigError

#: a calibration file is a few hundred bytes; anything near this is not one
MAX_CALIBRATION_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class Calibration:
    """The round trip subtracted from the device path, and where it came from."""

    round_trip_ms: float
    source: str
    key: dict[str, Any]
    spread_ms: float | None = None
    measured_at: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "round_trip_ms": self.round_trip_ms,
            "source": self.source,
            "key": self.key,
            "spread_ms": self.spread_ms,
            "measured_at": self.measured_at,
        }


def load_calibration(
    spec: str, key: PathKey, store_root: str | Path | None = None
) -> Calibration | None:
    """`none`: no correction. `auto`: the stored calibration for exactly this path, if any.
    FILE: a stored calibration or `rig calibrate --json` output; it must match the path."""
    if spec == "none":
        return None
    if spec == "auto":
        store = CalibrationStore(store_root)
        doc = store.load(key)
        if doc is None:
            return None
        return _from_doc(doc["calibration"], str(store.path_for(key)), doc.get("measured_at"))
    path = Path(spec)
    try:
        doc = safejson.parse(path.read_bytes(), max_bytes=MAX_CALIBRATION_BYTES)
    except (OSError, ValueError) as exc:  # safejson.JsonInputError is a ValueError
        raise ConfigError(f"cannot read calibration {spec}: {exc}") from exc
    result = doc.get("calibration", doc) if isinstance(doc, dict) else None
    if not isinstance(result, dict) or "round_trip_ms" not in result:
        raise ConfigError(f"{spec}: not a calibration (no round_trip_ms)")
    try:
        got = PathKey.from_result(result)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{spec}: calibration without its device path ({exc})") from exc
    diffs = [
        f"{name} {getattr(got, name)!r} != {getattr(key, name)!r}"
        for name in key.__dataclass_fields__
        if name != "hostapi" and getattr(got, name) != getattr(key, name)
    ]
    if diffs:
        raise ConfigError(
            f"{spec} was measured on another path ({'; '.join(diffs)}): calibrate with the "
            "devices and --rate/--blocksize/--latency/--duplex/--backend you run with"
        )
    return _from_doc(result, str(path), doc.get("measured_at"))


def _from_doc(result: dict[str, Any], source: str, measured_at: object) -> Calibration:
    try:
        rt = float(result["round_trip_ms"])
        spread = result.get("spread_ms")
        spread_ms = None if spread is None else float(spread)
        key = PathKey.from_result(result).as_dict()
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"{source}: not a usable calibration ({exc})") from None
    if not math.isfinite(rt) or (spread_ms is not None and not math.isfinite(spread_ms)):
        raise ConfigError(f"{source}: round_trip_ms / spread_ms is not a finite number")
    return Calibration(
        round_trip_ms=rt,
        source=source,
        key=key,
        spread_ms=spread_ms,
        measured_at=measured_at if isinstance(measured_at, str) else None,
    )


def compose_calibration(
    out_cable: dict[str, Any], in_cable: dict[str, Any], *, name: str = "composed"
) -> dict[str, Any]:
    """A path calibration for output = `out_cable`'s output, input = `in_cable`'s input.

    With two cables (rig -> system on one, system -> rig on the other) the device path's
    round trip is the sum of both cables' loopback round trips: each holds one rig half and
    one system half, and the system's halves are taken out with them. Both results
    (`LoopbackResult.as_dict()`) must share rate, blocksize, latency, duplex and backend.
    """
    for k in ("backend", "rate", "blocksize", "latency", "duplex"):
        if out_cable[k] != in_cable[k]:
            raise ConfigError(f"cannot compose calibrations that differ in {k}")
    spreads = [c.get("spread_ms") for c in (out_cable, in_cable)]
    return {
        **{k: out_cable[k] for k in ("backend", "hostapi", "rate", "blocksize", "latency")},
        "duplex": out_cable["duplex"],
        "input": in_cable["input"],
        "output": out_cable["output"],
        "round_trip_ms": float(out_cable["round_trip_ms"]) + float(in_cable["round_trip_ms"]),
        "spread_ms": None if None in spreads else float(sum(s for s in spreads if s)),
        "repeats": min(int(out_cable["repeats"]), int(in_cable["repeats"])),
        "reported_latency_ms": None,
        "composed_from": [out_cable, in_cable],
        "probe": name,
    }


@dataclass(frozen=True, slots=True)
class EchoCalibration:
    """The rig's own playback -> capture response a run's canceller is seeded with."""

    response: ImpulseResponse
    round_trip_ms: float
    source: str
    #: the calibration's input-minus-output stamp skew of one cycle (JACK), ns; None: unknown
    in_out_skew_ns: float | None = None

    def as_dict(self) -> dict[str, Any]:
        d = self.response.as_dict()
        del d["taps"]
        return {**d, "round_trip_ms": self.round_trip_ms, "source": self.source}


def load_echo_response(
    spec: str, key: PathKey, store_root: str | Path | None = None
) -> EchoCalibration:
    """`auto`: the impulse response stored with this path's calibration; FILE: one from
    `rig calibrate --json` measured on this path. None found is a ConfigError that says how
    to measure one."""
    if spec == "auto":
        doc = CalibrationStore(store_root).load(key)
        if doc is None:
            raise ConfigError(
                f"--cancel-own-echo: no stored calibration for {key.slug()}: run `rig calibrate "
                "--input IN --output OUT` on this path (same rate/blocksize/latency/duplex/"
                "backend) with the device under test silent"
            )
        result, source = doc["calibration"], str(CalibrationStore(store_root).path_for(key))
    else:
        cal = load_calibration(spec, key)  # a file: it must match the path
        assert cal is not None
        path = Path(spec)
        doc = safejson.parse(path.read_bytes(), max_bytes=MAX_CALIBRATION_BYTES)
        result, source = doc.get("calibration", doc), spec
    ir = result.get("impulse_response") if isinstance(result, dict) else None
    if not isinstance(ir, dict):
        raise ConfigError(
            f"{source}: this calibration has no impulse response (measured before rig kept "
            "one): run `rig calibrate` on this path again"
        )
    try:
        response = ImpulseResponse.from_dict(ir)
        rt = float(result["round_trip_ms"])
        skew_us = result.get("in_out_skew_us")
        skew_ns = None if skew_us is None else float(skew_us) * 1e3
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: unusable impulse response ({exc})") from None
    if response.rate != key.rate:
        raise ConfigError(
            f"{source}: impulse response at {response.rate} Hz, the run at {key.rate}"
        )
    return EchoCalibration(response, rt, source, skew_ns)
