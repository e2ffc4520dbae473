"""Lines between the user and the system: a narrow-band phone call, a lossy packet link.

phone  resample to 8 kHz (soxr, as every rate change in rig), band-limit to 300-3400 Hz
       (a 4th-order Butterworth band-pass from scipy.signal, run forwards and backwards so
       nothing moves in time: the turn marks stay on the speech), the G.711 mu-law round
       trip (libsndfile's encoder and decoder through soundfile, applied as a 65536-entry
       table built once from every int16 value), then back to the uplink rate (soxr).
lossy  the audio in 20 ms frames, each lost with probability `loss` (a seeded generator);
       a lost frame is `zero`ed (silence) or concealed by `repeat`: the last frame that got
       through is played again, 6 dB quieter for every further frame lost in a row (the
       first step of G.711 Appendix I's concealment, without its pitch search).
Offline, on whole arrays: a turn's audio before pacing, a noise loop (circularly) once.
"""

from __future__ import annotations

import functools
import io

import numpy as np
import numpy.typing as npt
import soundfile as sf
import soxr

from rig.audio.pcm import Pcm16, to_int16
from rig.extras import require

F64 = npt.NDArray[np.float64]
PHONE_RATE = 8000
PHONE_BAND_HZ = (300.0, 3400.0)
PHONE_ORDER = 4
FRAME_MS = 20
REPEAT_STEP = 0.5  # -6 dB per further lost frame in a row


@functools.lru_cache(maxsize=1)
def ulaw_table() -> Pcm16:
    """int16 -> int16 through a G.711 mu-law encode/decode (libsndfile's codec)."""
    every = np.arange(-32768, 32768, dtype=np.int16)
    buf = io.BytesIO()
    sf.write(buf, every, PHONE_RATE, subtype="ULAW", format="WAV")
    buf.seek(0)
    out, _ = sf.read(buf, dtype="int16")
    table: Pcm16 = np.asarray(out, dtype=np.int16)
    return table


def ulaw(pcm: Pcm16) -> Pcm16:
    out: Pcm16 = ulaw_table()[pcm.astype(np.int32) + 32768]
    return out


@functools.lru_cache(maxsize=1)
def _band() -> npt.NDArray[np.float64]:
    require("conditions", 'line = "phone" (the 300-3400 Hz band-pass)')
    from scipy.signal import butter

    sos: npt.NDArray[np.float64] = butter(
        PHONE_ORDER, PHONE_BAND_HZ, btype="bandpass", fs=PHONE_RATE, output="sos"
    )
    return sos


def phone(x: F64, rate: int) -> F64:
    """The phone line on float audio at `rate` (same length out; clipped to int16 range)."""
    from scipy.signal import sosfiltfilt

    narrow = soxr.resample(x, rate, PHONE_RATE, quality="HQ") if rate != PHONE_RATE else x
    if narrow.size > 3 * (2 * len(_band()) + 1):
        narrow = sosfiltfilt(_band(), narrow)
    narrow = ulaw(to_int16(narrow)).astype(np.float64) / 32768.0
    wide = soxr.resample(narrow, PHONE_RATE, rate, quality="HQ") if rate != PHONE_RATE else narrow
    out = np.zeros(x.size)
    n = min(x.size, wide.size)
    out[:n] = wide[:n]
    return out


def phone_loop(loop: F64, rate: int) -> F64:
    """The phone line on a loop, circularly (three copies, the middle kept: no seam)."""
    n = loop.size
    return phone(np.tile(loop, 3), rate)[n : 2 * n]


def lost_frames(
    n_samples: int, rate: int, loss: float, gen: np.random.Generator
) -> npt.NDArray[np.bool_]:
    frame = rate * FRAME_MS // 1000
    n_frames = -(-n_samples // frame)
    lost: npt.NDArray[np.bool_] = gen.random(n_frames) < loss
    return lost


def lossy(pcm: Pcm16, rate: int, lost: npt.NDArray[np.bool_], conceal: str) -> Pcm16:
    """`pcm` with the frames marked in `lost` zeroed or concealed (a copy)."""
    frame = rate * FRAME_MS // 1000
    out = pcm.copy()
    last: npt.NDArray[np.float64] | None = None
    run = 0
    for i, gone in enumerate(lost):
        a, b = i * frame, min((i + 1) * frame, out.size)
        if not gone:
            last = out[a:b].astype(np.float64)
            run = 0
            continue
        run += 1
        if conceal == "repeat" and last is not None:
            rep = np.resize(last, b - a) * REPEAT_STEP ** (run - 1)
            out[a:b] = np.rint(rep).astype(np.int16)
        else:
            out[a:b] = 0
    return out
