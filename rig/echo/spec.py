"""The echo condition as a value: `erl_db=20,delay_ms=40[,rir=FILE|room=small[,distance_m=1]]`.

Why a spec string: the same text comes from `rig run --echo`, from a scenario item's
`echo = {...}` table and from the manifest; its canonical form (`EchoSpec.text`) is what a
session config carries, what resume compares, and what `EchoSpec.parse` reads back.

Delay: the uplink frame k is sent at its start (its deadline), when the playback track is
final only up to that instant, so an echo can only be made of audio that has already played:
the delay must cover one uplink frame, plus the resampler's look-ahead when the system's rate
differs from the uplink's (`MIN_LOOKAHEAD_MS` covers every rate down to 8 kHz). A shorter
delay is refused (`check_delay`), never approximated.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from rig.errors import ConfigError

#: the resampler's look-ahead (rig.echo.resample: 16 taps of the downlink rate) at 8 kHz
MIN_LOOKAHEAD_MS = 2.0
MAX_DELAY_MS = 2000.0
#: named rooms (pyroomacoustics shoebox): size (m) and reverberation time RT60 (s)
ROOMS: dict[str, tuple[tuple[float, float, float], float]] = {
    "small": ((4.0, 3.0, 2.5), 0.3),
    "medium": ((6.0, 5.0, 3.0), 0.5),
    "large": ((10.0, 8.0, 3.5), 0.8),
}
KEYS = ("erl_db", "delay_ms", "rir", "room", "distance_m")


@dataclass(frozen=True, slots=True)
class EchoSpec:
    """Echo return loss (dB, >= 0: the echo is this much below the playback), delay (ms),
    and optionally a room: an impulse response file or a generated named room."""

    erl_db: float
    delay_ms: float
    rir: str | None = None
    room: str | None = None
    distance_m: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.erl_db) and 0.0 <= self.erl_db <= 120.0):
            raise ConfigError(f"echo erl_db must be in [0, 120] dB, got {self.erl_db:g}")
        if not (math.isfinite(self.delay_ms) and 0.0 <= self.delay_ms <= MAX_DELAY_MS):
            raise ConfigError(
                f"echo delay_ms must be in [0, {MAX_DELAY_MS:g}] ms, got {self.delay_ms:g}"
            )
        if self.rir is not None and self.room is not None:
            raise ConfigError("echo takes rir=FILE or room=NAME, not both")
        if self.room is not None and self.room not in ROOMS:
            raise ConfigError(f"echo room must be one of {', '.join(ROOMS)}, got {self.room!r}")
        if not (math.isfinite(self.distance_m) and 0.1 <= self.distance_m <= 5.0):
            raise ConfigError(f"echo distance_m must be in [0.1, 5] m, got {self.distance_m:g}")
        if self.rir is not None and not os.path.isfile(self.rir):
            raise ConfigError(f"echo rir: no such file: {self.rir}")

    @property
    def gain(self) -> float:
        return float(10.0 ** (-self.erl_db / 20.0))

    @property
    def text(self) -> str:
        """The canonical spec (what the session config carries and parse() reads)."""
        parts = [f"erl_db={self.erl_db:g}", f"delay_ms={self.delay_ms:g}"]
        if self.rir is not None:
            parts.append(f"rir={self.rir}")
        if self.room is not None:
            parts += [f"room={self.room}", f"distance_m={self.distance_m:g}"]
        return ",".join(parts)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"erl_db": self.erl_db, "delay_ms": self.delay_ms}
        if self.rir is not None:
            out["rir"] = self.rir
        if self.room is not None:
            size, rt60 = ROOMS[self.room]
            out |= {"room": self.room, "distance_m": self.distance_m}
            out |= {"room_size_m": list(size), "rt60_s": rt60}
        return out

    @classmethod
    def parse(cls, text: str) -> EchoSpec:
        """`erl_db=20,delay_ms=40[,rir=FILE|room=small[,distance_m=1]]` -> an EchoSpec."""
        fields: dict[str, str] = {}
        for part in text.split(","):
            key, eq, value = part.strip().partition("=")
            if not eq or not value.strip():
                raise ConfigError(
                    f"--echo wants KEY=VALUE pairs (erl_db=20,delay_ms=40), got {part!r}"
                )
            if key not in KEYS:
                raise ConfigError(f"--echo: unknown key {key!r}; known: {', '.join(KEYS)}")
            fields[key] = value.strip()
        return cls.from_table(fields, "--echo")

    @classmethod
    def from_table(cls, table: dict[str, Any], where: str = "echo") -> EchoSpec:
        """A scenario's `echo = {erl_db = 20, delay_ms = 40}` (or parsed --echo pairs)."""
        unknown = sorted(set(table) - set(KEYS))
        if unknown:
            raise ConfigError(
                f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(KEYS)}"
            )
        for need in ("erl_db", "delay_ms"):
            if need not in table:
                raise ConfigError(f"{where}: needs {need} (e.g. erl_db=20,delay_ms=40)")

        def num(key: str, default: float | None = None) -> float:
            v = table.get(key, default)
            if isinstance(v, bool):
                raise ConfigError(f"{where}: {key} must be a number, got {v!r}")
            try:
                return float(v)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                raise ConfigError(f"{where}: {key} must be a number, got {v!r}") from None

        def text(key: str) -> str | None:
            v = table.get(key)
            if v is None:
                return None
            if not isinstance(v, str) or not v:
                raise ConfigError(f"{where}: {key} must be a non-empty string, got {v!r}")
            return v

        return cls(
            num("erl_db"), num("delay_ms"), text("rir"), text("room"), num("distance_m", 1.0)
        )


def min_delay_ms(frame_ms: float) -> float:
    """The shortest echo delay a rollout with `frame_ms` uplink frames can make (module doc)."""
    return frame_ms + MIN_LOOKAHEAD_MS


def check_delay(spec: EchoSpec, frame_ms: float) -> None:
    """Refuse a delay the real-time path cannot make (the audio has not played yet)."""
    low = min_delay_ms(frame_ms)
    if spec.delay_ms < low:
        raise ConfigError(
            f"echo delay_ms={spec.delay_ms:g} is shorter than the {low:g} ms this rollout can "
            f"make: uplink frame k ({frame_ms:g} ms) is sent at its start, when only audio "
            f"played before it exists, plus {MIN_LOOKAHEAD_MS:g} ms of resampler look-ahead; "
            f"use delay_ms >= {low:g} or a shorter --frame-ms"
        )


def scenario_echo(raw: Any, base_dir: str) -> str:
    """A scenario item's `echo = {erl_db = 20, delay_ms = 40, rir = "room.wav"}` -> the
    canonical spec (`rir` relative to the scenario file); ConfigError names what is wrong."""
    if not isinstance(raw, dict):
        raise ConfigError(f"must be a table such as {{erl_db = 20, delay_ms = 40}}, got {raw!r}")
    table = dict(raw)
    rir = table.get("rir")
    if isinstance(rir, str) and rir and not os.path.isabs(rir):
        table["rir"] = os.path.normpath(os.path.join(base_dir, rir))
    try:
        return EchoSpec.from_table(table, "echo").text
    except ConfigError as exc:
        raise ConfigError(str(exc).removeprefix("echo: ")) from None
