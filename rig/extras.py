"""Optional parts of the rig and what installs them: the one table the CLI, the docs and the
packaging tests share.

`pip install rig-voice` gives the WebSocket rig, the reference system, reports and scenarios
on the base dependencies alone. Everything else sits behind an extra, so a bare install never
needs a compiler or a media stack it does not use. A command that needs an extra asks for it
up front (`require`) and fails with one line naming it; `as_missing_extra` turns a stray
ModuleNotFoundError into the same message, naming the extra that provides the module.

`MODULES` lists every module under rig/ that cannot be imported without an extra.
tests/test_packaging.py imports every module in a bare install and checks that exactly
these fail, each for a module of its extra: keep the table in step when imports move.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from rig.errors import ConfigError

#: the distribution name on the package index (the import package and command are `rig`;
#: `rig` on PyPI is an unrelated project)
DIST = "rig-voice"


@dataclass(frozen=True, slots=True)
class Extra:
    """One optional-dependency group of pyproject.toml."""

    name: str
    #: requirement strings, exactly as in pyproject.toml's [project.optional-dependencies]
    requires: tuple[str, ...]
    #: top-level import names those requirements provide
    imports: tuple[str, ...]
    #: what needs it, for error messages and docs
    used_by: str
    #: what must be on the machine before pip can install it (empty: wheels only)
    system_needs: str = ""


EXTRAS: dict[str, Extra] = {
    e.name: e
    for e in (
        Extra(
            "webrtc",
            ("aiortc>=1.9", "av>=14"),
            ("aiortc", "aioice", "av"),
            "--transport webrtc (rig run, rig sim)",
        ),
        Extra("opus", ("av>=14",), ("av",), "--dialect moshi (Opus over WebSocket)"),
        Extra(
            "device",
            ("sounddevice>=0.4.6",),
            ("sounddevice",),
            "sound cards: --transport device, rig devices, rig calibrate",
            "the PortAudio library (Debian: libportaudio2; macOS: bundled in the wheel)",
        ),
        Extra(
            "pyaudio",
            ("pyaudio>=0.2.14",),
            ("pyaudio",),
            "--backend pyaudio",
            "a C compiler and PortAudio headers: PyAudio builds from source on Linux "
            "(Debian: gcc python3-dev portaudio19-dev)",
        ),
        Extra("mqtt", ("aiomqtt>=2.0",), ("aiomqtt",), "--mqtt, --device-clock, rig watch"),
        Extra("plot", ("matplotlib>=3.7",), ("matplotlib",), "rig plot"),
        Extra(
            "asr",
            ("faster-whisper>=1.0",),
            ("faster_whisper", "ctranslate2"),
            "word-level onsets (rig run --asr-model)",
        ),
        Extra("ray", ("ray>=2.9",), ("ray",), "rig run --engine ray (docs/scale-out.md)"),
        Extra(
            "conditions",
            (
                "pyloudnorm>=0.1.1",
                "praat-parselmouth>=0.4.3",
                "scipy>=1.10",
                "colorednoise>=2.1",
            ),
            ("pyloudnorm", "parselmouth", "scipy", "colorednoise"),
            "input conditions (target_lufs, pink noise, the phone line) and the reply voice "
            "measures (HNR, voicing: whisper)",
        ),
        Extra(
            "room",
            ("pyroomacoustics>=0.7",),
            ("pyroomacoustics",),
            "rig run --echo ...,room=NAME (a generated room impulse response)",
        ),
        Extra(
            "aec",
            ("speexdsp>=0.1.1",),
            ("speexdsp",),
            "the SpeexDSP own-echo canceller for sound cards (rig.echo.canceller; "
            "not yet wired into rig run)",
            "a C++ compiler, SWIG and the SpeexDSP headers: the binding builds from source "
            "(Debian: g++ swig libspeexdsp-dev; at run time libspeexdsp1)",
        ),
        Extra("analysis", ("pandas>=2",), ("pandas",), "rig.load_run DataFrames"),
        Extra(
            "uvloop",
            ("uvloop>=0.19",),
            ("uvloop",),
            "rig run --loop uvloop, rig sim --loop uvloop (docs/pacing.md)",
        ),
        Extra(
            "otel",
            ("opentelemetry-sdk>=1.20", "opentelemetry-exporter-otlp-proto-http>=1.20"),
            ("opentelemetry",),
            "rig report --otel (OpenTelemetry traces over OTLP)",
        ),
    )
}

#: `pip install 'rig-voice[all]'`: every extra that installs from wheels, except pyaudio
#: (builds from source) and ray (a cluster engine of ~100 MB: asked for by name)
ALL: tuple[str, ...] = (
    "webrtc", "opus", "device", "mqtt", "plot", "asr", "analysis", "otel", "conditions", "room",
    "uvloop",
)  # fmt: skip
#: extras left out of `all` (aec builds from source, as pyaudio does)
NOT_IN_ALL: tuple[str, ...] = ("pyaudio", "ray", "aec")

#: what a command-line choice needs: --transport, --backend (sound cards), --dialect
TRANSPORTS: dict[str, str] = {"webrtc": "webrtc"}  # device: by --backend
BACKENDS: dict[str, str] = {"sounddevice": "device", "pyaudio": "pyaudio"}
DIALECTS: dict[str, str] = {"moshi": "opus"}

#: module under rig/ -> the extra it needs at import time; every other module imports on the
#: base dependencies (checked in a bare install by tests/test_packaging.py)
MODULES: dict[str, str] = {
    "rig.reporting.otel": "otel",
    "rig.sim.webrtc_server": "webrtc",
    "rig.transports.webrtc": "webrtc",
    "rig.transports.webrtc.codec": "webrtc",
    "rig.transports.webrtc.libopus": "webrtc",
    "rig.transports.webrtc.media": "webrtc",
    "rig.transports.webrtc.peer": "webrtc",
    "rig.transports.webrtc.rtp": "webrtc",
    "rig.transports.webrtc.signalling": "webrtc",
    "rig.transports.webrtc.stats": "webrtc",
    "rig.transports.webrtc.transport": "webrtc",
    "rig.scaleout.ray_engine": "ray",
}

#: top-level import name -> the smallest extra that provides it
_BY_IMPORT: dict[str, str] = {}
for _extra in sorted(EXTRAS.values(), key=lambda e: len(e.imports), reverse=True):
    for _name in _extra.imports:
        _BY_IMPORT[_name] = _extra.name


def install_hint(extra: str) -> str:
    """The command that installs `extra`, e.g. pip install 'rig-voice[device]'."""
    return f"pip install '{DIST}[{extra}]'"


class MissingExtra(ConfigError):
    """An option or command needs an optional extra that is not installed."""

    def __init__(self, extra: str, what: str, module: str | None = None) -> None:
        missing = f" (no module named {module!r})" if module else ""
        needs = EXTRAS[extra].system_needs
        super().__init__(
            f"{what} needs the {extra!r} extra{missing}: {install_hint(extra)}"
            + (f"; it needs {needs}" if needs else "")
        )
        self.extra = extra
        self.what = what
        self.module = module


def missing_module(extra: str) -> str | None:
    """The first import of `extra` that cannot be found, or None when all can."""
    for name in EXTRAS[extra].imports:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # blocked (None in sys.modules) or broken
            found = False
        if not found:
            return name
    return None


def require(extra: str, what: str) -> None:
    """Raise MissingExtra (one line, naming the extra) unless `extra` is installed.

    Only looks the modules up (no import), so it costs nothing when they are there."""
    module = missing_module(extra)
    if module is not None:
        raise MissingExtra(extra, what, module)


def as_missing_extra(exc: BaseException, what: str) -> MissingExtra | None:
    """A MissingExtra for an error that is (or was raised from) a ModuleNotFoundError for one
    of an extra's modules; None when the missing module belongs to no extra (a bug)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, MissingExtra):
            return cur
        if isinstance(cur, ModuleNotFoundError) and cur.name:
            extra = _BY_IMPORT.get(cur.name.split(".")[0])
            return None if extra is None else MissingExtra(extra, what, cur.name)
        cur = cur.__cause__ or cur.__context__
    return None
