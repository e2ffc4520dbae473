"""The room options of a sound-card run, checked in one place: `--cancel-own-echo [auto|FILE]`
and `--noise-device NAME --noise FILE --noise-level-dbfs X` (docs/devices.md). The CLI and
the run config both call `check_room_options`; `noise_options` builds what the transport
takes. A bad combination is one ConfigError line, before anything streams."""

from __future__ import annotations

import math
from pathlib import Path

from rig.device.model import StreamSettings
from rig.device.noise import NoiseOptions
from rig.device.stream import DeviceStream, get_backend
from rig.errors import ConfigError
from rig.extras import require


def check_room_options(
    transport: str,
    cancel_own_echo: str | None,
    noise_device: str | None,
    noise: str | None,
    noise_level_dbfs: float | None,
) -> None:
    if cancel_own_echo is not None:
        if transport != "device":
            raise ConfigError("--cancel-own-echo works on a sound card: --transport device")
        if cancel_own_echo != "auto" and not Path(cancel_own_echo).is_file():
            raise ConfigError(
                f"--cancel-own-echo {cancel_own_echo}: no such calibration file (or `auto`: "
                "the one stored for this path)"
            )
        require("aec", "--cancel-own-echo")
    given = [v is not None for v in (noise_device, noise, noise_level_dbfs)]
    if any(given):
        if not all(given):
            raise ConfigError(
                "a noise scene needs all of --noise-device NAME --noise FILE --noise-level-dbfs X"
            )
        if transport != "device":
            raise ConfigError("--noise-device plays on a sound card: --transport device")
        assert noise is not None and noise_level_dbfs is not None
        if not Path(noise).is_file():
            raise ConfigError(f"--noise {noise}: no such file")
        if not math.isfinite(noise_level_dbfs) or not -120.0 <= noise_level_dbfs <= 0.0:
            raise ConfigError(
                f"--noise-level-dbfs must be -120..0 dBFS (RMS re full scale), got "
                f"{noise_level_dbfs:g}"
            )


def noise_options(
    noise_device: str | None,
    noise: str | None,
    noise_level_dbfs: float | None,
    *,
    rate: int,
    backend: str,
    latency: str | float,
) -> NoiseOptions | None:
    """What the device transport plays on its second output (None: no noise scene)."""
    if noise_device is None or noise is None or noise_level_dbfs is None:
        return None
    return NoiseOptions(
        device=noise_device,
        file=noise,
        level_dbfs=float(noise_level_dbfs),
        rate=rate,
        backend=backend,
        latency=latency,
    )


def check_noise_device(opts: NoiseOptions) -> str:
    """Resolve the noise output and check its format (no stream started): its name, or
    DeviceError naming what is wrong."""
    stream = DeviceStream(
        get_backend(opts.backend), StreamSettings(opts.rate, None, opts.device, out_channels=1)
    )
    assert stream.output is not None
    return f"{stream.output.hostapi}:{stream.output.name}"
