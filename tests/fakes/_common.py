"""Pieces the fake hosted-API servers share: an energy VAD over the audio they receive,
the reply audio they speak, and per-connection fault injection from the URL query."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

import numpy as np


def tone(duration_s: float, rate: int, hz: float = 440.0, level: float = 0.3) -> np.ndarray:
    t = np.arange(round(duration_s * rate)) / rate
    return (np.sin(2 * np.pi * hz * t) * level * 32767).astype(np.int16)


def b64(pcm: np.ndarray) -> str:
    return base64.b64encode(pcm.astype("<i2").tobytes()).decode()


def unb64(s: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), dtype="<i2").astype(np.int16)


def unb64_proto(s: str) -> np.ndarray:
    """PCM16 from protobuf-JSON bytes: standard or URL-safe base64, padding optional (what
    Google's parsers accept; the google-genai client sends URL-safe)."""
    s = s.replace("-", "+").replace("_", "/")
    raw = base64.b64decode(s + "=" * (-len(s) % 4), validate=True)
    return np.frombuffer(raw, dtype="<i2").astype(np.int16)


def pget(obj: object, name: str) -> object:
    """A protobuf-JSON field by its lowerCamelCase JSON name or its snake_case proto name
    (Google's parsers accept both): `pget(msg, "realtimeInput")` finds `realtime_input`."""
    if not isinstance(obj, dict):
        return None
    if name in obj:
        return obj[name]
    return obj.get("".join("_" + c.lower() if c.isupper() else c for c in name))


def faults(path: str) -> dict[str, str]:
    """?fault=malformed&at_s=0.5 on the connect URL selects a fault for that connection."""
    q = parse_qs(urlsplit(path).query)
    return {k: v[-1] for k, v in q.items()}


@dataclass
class VadEvent:
    kind: str  # "start" | "stop"
    ms: float  # position in the received audio stream


class EnergyVad:
    """Speech = RMS over a threshold; a stop after `silence_ms` of quiet (server_vad-like).

    `detect_ms`: a start is only reported once speech has lasted that long (it still names the
    onset), as real server VADs do: their `speech_started` comes after the audio it points at."""

    def __init__(
        self, rate: int, threshold: float = 600.0, silence_ms: float = 400.0, detect_ms: float = 0.0
    ):
        self.rate = rate
        self.threshold = threshold
        self.silence_ms = silence_ms
        self.detect_ms = detect_ms
        self.samples = 0
        self.speaking = False
        self._quiet_since: float | None = None
        self._loud_since: float | None = None

    def feed(self, pcm: np.ndarray) -> list[VadEvent]:
        out = []
        start_ms = self.samples * 1000 / self.rate
        self.samples += pcm.size
        end_ms = self.samples * 1000 / self.rate
        loud = (
            pcm.size > 0 and float(np.sqrt(np.mean(pcm.astype(np.float64) ** 2))) > self.threshold
        )
        if loud:
            self._quiet_since = None
            if not self.speaking:
                if self._loud_since is None:
                    self._loud_since = start_ms
                if end_ms - self._loud_since >= self.detect_ms:
                    self.speaking = True
                    out.append(VadEvent("start", self._loud_since))
                    self._loud_since = None
        elif self.speaking:
            if self._quiet_since is None:
                self._quiet_since = start_ms
            if end_ms - self._quiet_since >= self.silence_ms:
                self.speaking = False
                out.append(VadEvent("stop", self._quiet_since))
                self._quiet_since = None
        else:
            self._loud_since = None
        return out
