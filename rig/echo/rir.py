"""Room impulse responses for the echo condition: a WAV file, or a named room generated
deterministically with pyroomacoustics (the `room` extra).

Both are normalised to unit energy, so the echo return loss keeps its meaning with a room:
the echo's power is the playback's power less `erl_db` (exactly for white noise, near it for
speech). A generated room is a shoebox (rig.echo.spec.ROOMS: size and RT60, wall absorption
by Sabine's formula), image sources only (no random ray tracing: the same response on every
machine), the loudspeaker `distance_m` from the microphone, both 1.2 m high, off the room's
centre so that no two wall paths coincide. The propagation delay of the direct path is kept
(it adds to `delay_ms`); pyroomacoustics' fractional-delay filter lead is removed. Files and
rooms are cached per process: the session builds its echo path off the event loop.
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt
import soundfile as sf
import soxr

from rig.echo.spec import ROOMS
from rig.errors import ConfigError
from rig.extras import MissingExtra

F64 = npt.NDArray[np.float64]
#: responses are cut where they have decayed by 60 dB, and at most this long
MAX_RIR_S = 1.0


def unit_energy(h: F64) -> F64:
    e = float(np.sqrt(np.sum(h * h)))
    if e <= 0.0 or not np.isfinite(e):
        raise ConfigError("echo: the room impulse response is silent")
    return np.asarray(h / e, dtype=np.float64)


@functools.lru_cache(maxsize=8)
def load_rir(path: str, sample_rate: int) -> F64:
    """An impulse response from a sound file (first channel), at `sample_rate`."""
    try:
        x, rate = sf.read(path, dtype="float64", always_2d=True)
    except (OSError, RuntimeError, sf.LibsndfileError) as exc:
        raise ConfigError(f"echo rir: cannot read {path}: {exc}") from None
    h = np.asarray(x[:, 0], dtype=np.float64)
    if rate != sample_rate and h.size:
        h = np.asarray(soxr.resample(h, rate, sample_rate), dtype=np.float64)
    h = h[: int(MAX_RIR_S * sample_rate)]
    if h.size == 0:
        raise ConfigError(f"echo rir: {path} holds no samples")
    return unit_energy(h)


@functools.lru_cache(maxsize=8)
def room_rir(room: str, distance_m: float, sample_rate: int) -> F64:
    """The response of a named room from a loudspeaker `distance_m` from the microphone."""
    try:
        import pyroomacoustics as pra
    except ModuleNotFoundError as exc:
        raise MissingExtra("room", f"echo room={room}", exc.name) from None
    size, rt60 = ROOMS[room]
    absorption, max_order = pra.inverse_sabine(rt60, list(size))
    shoebox = pra.ShoeBox(
        list(size),
        fs=sample_rate,
        materials=pra.Material(absorption),
        max_order=max_order,
        use_rand_ism=False,
        air_absorption=False,
    )
    mic = np.array([size[0] * 0.43, size[1] * 0.47, 1.2])
    src = mic + np.array([distance_m * 0.8, distance_m * 0.6, 0.0])
    if not np.all((src > 0.05) & (src < np.array(size) - 0.05)):
        raise ConfigError(f"echo distance_m={distance_m:g} does not fit in the {room} room")
    shoebox.add_source(src.tolist())
    shoebox.add_microphone(mic.tolist())
    shoebox.compute_rir()
    h = np.asarray(shoebox.rir[0][0], dtype=np.float64)
    lead = int(pra.constants.get("frac_delay_length")) // 2
    h = h[lead:]
    return unit_energy(_cut(h, sample_rate))


def _cut(h: F64, sample_rate: int) -> F64:
    """Up to where the energy left is 60 dB below the total (Schroeder), at most MAX_RIR_S."""
    tail = np.cumsum((h * h)[::-1])[::-1]
    below = np.flatnonzero(tail < tail[0] * 1e-6)
    n = int(below[0]) if below.size else h.size
    return h[: max(1, min(n, int(MAX_RIR_S * sample_rate)))]


def rir_for(rir: str | None, room: str | None, distance_m: float, sample_rate: int) -> F64 | None:
    if rir is not None:
        return load_rir(rir, sample_rate)
    if room is not None:
        return room_rir(room, distance_m, sample_rate)
    return None
