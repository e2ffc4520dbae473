"""What a condition asks for: level, noise, line. Parsed from scenario tables and `--condition`.

How this works: a condition is a frozen value with four independent parts, each optional:
  level   one of gain_db | target_rms_dbfs | target_peak_dbfs | target_lufs
  noise   {kind = white | pink | babble, snr_db} or {file, snr_db, start_s}
  line    "phone" | {kind = "lossy", loss, seed, conceal = zero | repeat}
Conditions nest run (`rig run --condition`) < item (`condition` of an item) < step
(`condition` of a turn or inject step): `merge` takes each part from the innermost layer
that sets it (the level keys are one part: a step's target replaces an item's gain).
Parsing only checks types and ranges; nothing here decodes audio or needs an extra.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from rig.errors import ConfigError

LEVEL_KEYS = ("gain_db", "target_rms_dbfs", "target_peak_dbfs", "target_lufs")
KEYS = frozenset({*LEVEL_KEYS, "noise", "line"})
NOISE_KINDS = ("white", "pink", "babble")
NOISE_KEYS = frozenset({"kind", "file", "snr_db", "start_s"})
LINE_KINDS = ("phone", "lossy")
LINE_KEYS = frozenset({"kind", "loss", "seed", "conceal"})
CONCEAL = ("zero", "repeat")
#: the ranges a value must lie in (beyond them a typo, not a condition)
LEVEL_RANGE = {
    "gain_db": (-120.0, 60.0),
    "target_rms_dbfs": (-90.0, 0.0),
    "target_peak_dbfs": (-90.0, 0.0),
    "target_lufs": (-90.0, 0.0),
}
SNR_RANGE = (-30.0, 80.0)

Fail = Callable[[str, str], Exception]


@dataclass(frozen=True, slots=True)
class Noise:
    snr_db: float
    kind: str = "file"  # white | pink | babble | file
    file: str | None = None
    start_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "snr_db": self.snr_db}
        if self.file is not None:
            out |= {"file": self.file, "start_s": self.start_s}
        return out


@dataclass(frozen=True, slots=True)
class Line:
    kind: str  # phone | lossy
    loss: float = 0.0
    seed: int | None = None  # None: from the run's seed
    conceal: str = "zero"

    def as_dict(self) -> dict[str, Any]:
        if self.kind == "phone":
            return {"kind": "phone"}
        return {"kind": self.kind, "loss": self.loss, "seed": self.seed, "conceal": self.conceal}


@dataclass(frozen=True, slots=True)
class Condition:
    level: tuple[str, float] | None = None  # (one of LEVEL_KEYS, value)
    noise: Noise | None = None
    line: Line | None = None

    @property
    def empty(self) -> bool:
        return self.level is None and self.noise is None and self.line is None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.level is not None:
            out[self.level[0]] = self.level[1]
        if self.noise is not None:
            out["noise"] = self.noise.as_dict()
        if self.line is not None:
            out["line"] = self.line.as_dict()
        return out


NONE = Condition()


def merge(*layers: Condition | None) -> Condition:
    """Outermost first: each part from the innermost layer that sets it."""
    out = NONE
    for c in layers:
        if c is None:
            continue
        out = replace(
            out,
            level=c.level if c.level is not None else out.level,
            noise=c.noise if c.noise is not None else out.noise,
            line=c.line if c.line is not None else out.line,
        )
    return out


def _number(v: Any, where: str, fail: Fail, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise fail(where, f"must be a number, got {type(v).__name__}")
    if not lo <= v <= hi:
        raise fail(where, f"must be in [{lo:g}, {hi:g}], got {v:g}")
    return float(v)


def parse(raw: Any, where: str, fail: Fail, base_dir: str | None = None) -> Condition:
    """A `condition` table (scenario file or --condition) -> Condition; `fail(field, why)`
    builds the caller's one-line error. Relative noise files resolve against `base_dir`."""
    if not isinstance(raw, dict):
        raise fail(where, f"must be a table, got {type(raw).__name__}")
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        raise fail(f"{where}.{unknown[0]}", f"unknown key; allowed here: {', '.join(sorted(KEYS))}")
    levels = [k for k in LEVEL_KEYS if k in raw]
    if len(levels) > 1:
        raise fail(where, f"give one level ({', '.join(LEVEL_KEYS)}), got {' and '.join(levels)}")
    level = None
    if levels:
        key = levels[0]
        level = (key, _number(raw[key], f"{where}.{key}", fail, *LEVEL_RANGE[key]))
    noise = _noise(raw["noise"], f"{where}.noise", fail, base_dir) if "noise" in raw else None
    line = _line(raw["line"], f"{where}.line", fail) if "line" in raw else None
    return Condition(level, noise, line)


def _noise(raw: Any, where: str, fail: Fail, base_dir: str | None) -> Noise:
    if not isinstance(raw, dict):
        raise fail(where, 'must be a table: {kind = "pink", snr_db = 5} or {file = ..., snr_db}')
    unknown = sorted(set(raw) - NOISE_KEYS)
    if unknown:
        allowed = ", ".join(sorted(NOISE_KEYS))
        raise fail(f"{where}.{unknown[0]}", f"unknown key; allowed here: {allowed}")
    if "snr_db" not in raw:
        raise fail(f"{where}.snr_db", "required (the SNR over the step's speech, dB)")
    snr = _number(raw["snr_db"], f"{where}.snr_db", fail, *SNR_RANGE)
    if ("kind" in raw) == ("file" in raw):
        raise fail(where, f"give exactly one of `kind` ({', '.join(NOISE_KINDS)}) or `file`")
    if "file" in raw:
        path = raw["file"]
        if not isinstance(path, str) or not path:
            raise fail(f"{where}.file", "must be an audio file path")
        if base_dir is not None and not os.path.isabs(path):
            path = os.path.join(base_dir, path)
        if not os.path.isfile(path):
            raise fail(f"{where}.file", f"audio file not found: {path}")
        start = _number(raw.get("start_s", 0.0), f"{where}.start_s", fail, 0.0, 86_400.0)
        return Noise(snr, "file", path, start)
    kind = raw["kind"]
    if kind not in NOISE_KINDS:
        raise fail(f"{where}.kind", f"{kind!r}: one of {', '.join(NOISE_KINDS)}")
    if "start_s" in raw:
        raise fail(f"{where}.start_s", "only with `file`")
    return Noise(snr, kind)


def _line(raw: Any, where: str, fail: Fail) -> Line:
    if isinstance(raw, str):
        raw = {"kind": raw}
    if not isinstance(raw, dict):
        raise fail(where, 'must be "phone" or a table {kind = "lossy", loss = 0.05}')
    unknown = sorted(set(raw) - LINE_KEYS)
    if unknown:
        allowed = ", ".join(sorted(LINE_KEYS))
        raise fail(f"{where}.{unknown[0]}", f"unknown key; allowed here: {allowed}")
    kind = raw.get("kind")
    if kind not in LINE_KINDS:
        raise fail(f"{where}.kind", f"{kind!r}: one of {', '.join(LINE_KINDS)}")
    if kind == "phone":
        extra = sorted(set(raw) - {"kind"})
        if extra:
            raise fail(f"{where}.{extra[0]}", 'only with kind = "lossy"')
        return Line("phone")
    if "loss" not in raw:
        raise fail(f"{where}.loss", "required (the share of 20 ms frames lost, 0..1)")
    loss = _number(raw["loss"], f"{where}.loss", fail, 0.0, 1.0)
    seed = raw.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise fail(f"{where}.seed", f"must be an integer >= 0, got {seed!r}")
    conceal = raw.get("conceal", "zero")
    if conceal not in CONCEAL:
        raise fail(f"{where}.conceal", f"{conceal!r}: one of {', '.join(CONCEAL)}")
    return Line("lossy", loss, seed, conceal)


# -- the command line --------------------------------------------------------------------------


def _value(text: str) -> Any:
    try:
        f = float(text)
    except ValueError:
        return text
    return int(f) if f.is_integer() and "." not in text and "e" not in text.lower() else f


def parse_cli(specs: list[str] | None) -> Condition | None:
    """`--condition` (repeatable): comma-separated KEY=VALUE with dotted keys for tables:
    `target_rms_dbfs=-35`, `noise.kind=pink,noise.snr_db=5`, `line=phone`,
    `line.kind=lossy,line.loss=0.05,line.conceal=repeat`, `noise.file=cafe.wav,...`."""
    if not specs:
        return None
    table: dict[str, Any] = {}
    for spec in specs:
        for pair in spec.split(","):
            key, eq, value = pair.strip().partition("=")
            key = key.strip()
            if not eq or not key:
                raise ConfigError(f"--condition wants KEY=VALUE[,KEY=VALUE...], got {pair!r}")
            head, dot, sub = key.partition(".")
            if dot:
                part = table.setdefault(head, {})
                if not isinstance(part, dict):
                    part = table[head] = {"kind": part}
                part[sub] = _value(value.strip())
            elif head == "line" and isinstance(table.get("line"), dict):
                table["line"]["kind"] = value.strip()
            else:
                table[head] = _value(value.strip())

    def fail(field: str, reason: str) -> ConfigError:
        return ConfigError(f"--condition {field.removeprefix('condition.')}: {reason}")

    cond = parse(table, "condition", fail, os.getcwd())
    return None if cond.empty else cond
