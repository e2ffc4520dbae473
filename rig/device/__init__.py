"""Sound cards: PortAudio streams stamped on the shared clock, and loopback calibration.

    backend.py            one small interface over sounddevice and PyAudio (the I/O shell)
    timeinfo.py           sans-I/O: stream frame -> shared clock, and whether PortAudio's
                          own ADC/DAC times can be trusted
    calibrate.py          sans-I/O: probe signals, cross-correlation, repeat statistics
    loopback.py           asyncio shell: play a probe train through a loopback and time it
    calibration_store.py  stored calibrations per device pair (JSON)

`sounddevice` and `pyaudio` are imported only when a backend is opened, so the pure parts
work without PortAudio.
"""

from __future__ import annotations

from rig.device.backend import (
    BACKENDS,
    Block,
    DeviceInfo,
    DeviceStream,
    HostApiInfo,
    StreamSettings,
    get_backend,
    resolve_device,
)

__all__ = [
    "BACKENDS",
    "Block",
    "DeviceInfo",
    "DeviceStream",
    "HostApiInfo",
    "StreamSettings",
    "get_backend",
    "resolve_device",
]
