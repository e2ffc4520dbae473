"""Stored calibrations: one JSON file per device path, so `rig run` can subtract it later.

A calibration is only valid for the path it measured: backend, host API, input and output
device, rate, blocksize, latency setting and duplex mode (the round trip includes the
callback blocks). That tuple is the key; the file name is a readable slug of it. The
store lives in `$RIG_CALIBRATIONS`, else `$XDG_CONFIG_HOME/rig/calibrations`, else
`~/.config/rig/calibrations`. Files are written whole to a temporary name and renamed, so
a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig import safejson
from rig.errors import ConfigError

FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class PathKey:
    """What a calibration is valid for."""

    backend: str
    hostapi: str
    input: str
    output: str
    rate: int
    blocksize: int
    latency: str
    duplex: bool

    def slug(self) -> str:
        mode = "duplex" if self.duplex else "split"
        raw = (
            f"{self.backend}_{self.hostapi}_{self.input}__{self.output}_{self.rate}"
            f"_b{self.blocksize}_{self.latency}_{mode}"
        )
        return re.sub(r"[^A-Za-z0-9._-]+", "-", raw).strip("-")

    def as_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "hostapi": self.hostapi,
            "input": self.input,
            "output": self.output,
            "rate": self.rate,
            "blocksize": self.blocksize,
            "latency": self.latency,
            "duplex": self.duplex,
        }

    @classmethod
    def from_result(cls, result: dict[str, Any]) -> PathKey:
        """The key of a `LoopbackResult.as_dict()`."""
        return cls(
            backend=str(result["backend"]),
            hostapi=str(result["hostapi"]),
            input=str(result["input"]),
            output=str(result["output"]),
            rate=int(result["rate"]),
            blocksize=int(result["blocksize"]),
            latency=str(result["latency"]),
            duplex=bool(result["duplex"]),
        )


def default_root() -> Path:
    env = os.environ.get("RIG_CALIBRATIONS")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "rig" / "calibrations"


class CalibrationStore:
    """Calibrations on disk, one file per `PathKey`."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    def path_for(self, key: PathKey) -> Path:
        return self.root / f"{key.slug()}.json"

    def save(self, result: dict[str, Any], *, measured_at: str | None = None) -> Path:
        """Store a `LoopbackResult.as_dict()`; returns the file written."""
        key = PathKey.from_result(result)
        doc = {
            "format": FORMAT_VERSION,
            "key": key.as_dict(),
            "measured_at": measured_at,
            "calibration": result,
        }
        path = self.path_for(key)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
            os.replace(tmp, path)
        except OSError as exc:
            raise ConfigError(f"cannot write calibration to {path}: {exc}") from exc
        return path

    def load(self, key: PathKey) -> dict[str, Any] | None:
        """The stored calibration for exactly this path, or None."""
        path = self.path_for(key)
        if not path.exists():
            return None
        return self._read(path)

    def find(self, input: str, output: str, backend: str | None = None) -> list[dict[str, Any]]:
        """Every stored calibration for this device pair (any rate/blocksize/mode)."""
        if not self.root.is_dir():
            return []
        found = []
        for path in sorted(self.root.glob("*.json")):
            doc = self._read(path)
            k = doc["key"]
            if (
                k["input"] == input
                and k["output"] == output
                and (backend is None or k["backend"] == backend)
            ):
                found.append(doc)
        return found

    @staticmethod
    def _read(path: Path) -> dict[str, Any]:
        try:
            doc = safejson.parse(path.read_bytes(), max_bytes=1 << 20)
        except (OSError, ValueError) as exc:  # safejson.JsonInputError is a ValueError
            raise ConfigError(f"cannot read calibration {path}: {exc}") from exc
        if not isinstance(doc, dict):
            raise ConfigError(f"{path}: not a rig calibration (not a JSON object)")
        if doc.get("format") != FORMAT_VERSION or "key" not in doc or "calibration" not in doc:
            raise ConfigError(f"{path}: not a rig calibration (format {doc.get('format')!r})")
        return doc
