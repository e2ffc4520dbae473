"""Sound cards: PortAudio streams stamped on the shared clock, and loopback calibration.

    model.py                devices, host APIs, stream settings, one callback's `Block`
    callbacks.py            the real-time callback bodies (PortAudio's thread; the rules)
    binding.py              what a PortAudio binding provides (`Backend`, `RawStream`)
    sounddevice_binding.py  sounddevice (the `device` extra)
    pyaudio_binding.py      PyAudio (the `pyaudio` extra)
    threadstate.py          one lasting Python thread state for PyAudio's callback thread
    stream.py               DeviceStream: the asyncio shell over the raw streams
    timeinfo.py             sans-I/O: stream frame -> shared clock (exact and live), which
                            output frame each queued sample played at, and whether
                            PortAudio's own ADC/DAC times can be trusted
    options.py              the device path a run opens, checked before anything streams
    link.py                 DeviceLink: one open path, steady start, placements, xruns
    calibrate.py            sans-I/O: probe signals, cross-correlation, repeat statistics
    loopback.py             asyncio shell: play a probe train through a loopback and time it
    calibration_store.py    stored calibrations per device path (JSON)
    calibration.py          the calibration a run subtracts (stored, from a file, composed)

`sounddevice` and `pyaudio` are imported only when a backend is created, so the pure parts
work without PortAudio.
"""

from __future__ import annotations

from rig.device.model import Block, DeviceInfo, HostApiInfo, StreamSettings, resolve_device
from rig.device.stream import BACKENDS, DeviceStream, get_backend

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
