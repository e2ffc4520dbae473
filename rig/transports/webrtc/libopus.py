"""libopus called directly (ctypes): one C call per 20 ms frame each way, GIL released.

Why: PyAV's codec contexts cost ~40 us per encode and ~17 us per decode on top of libopus
itself here (frame and packet objects, pts/time-base arithmetic with `Fraction`s, the
send/receive state machine; measured in docs/webrtc.md). The library is the one PyAV ships
(its wheel bundles libopus under `av.libs/`), so the `webrtc` extra needs nothing more;
a system `libopus.so.0` is the fallback. `load()` returns None when neither loads, and the
codec then goes through PyAV as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from typing import Any

import numpy as np

from rig.audio.pcm import Pcm16

OPUS_APPLICATION_VOIP = 2048
OPUS_APPLICATION_AUDIO = 2049
OPUS_SET_BITRATE = 4002
OPUS_SET_VBR = 4006
OPUS_SET_COMPLEXITY = 4010
OPUS_SET_DTX = 4016
OPUS_SET_VBR_CONSTRAINT = 4020
OPUS_GET_LOOKAHEAD = 4027
MAX_PACKET = 4000  # bytes; libopus's recommended upper bound for one packet
MAX_FRAME = 5760  # samples per channel: 120 ms at 48 kHz, the longest Opus packet

_lib: ctypes.CDLL | None = None
_tried = False


def _candidates() -> list[str]:
    import av  # the webrtc extra: its wheel bundles libopus

    base = os.path.dirname(os.path.dirname(os.path.abspath(av.__file__)))
    found = sorted(glob.glob(os.path.join(base, "av.libs", "libopus-*.so*")))
    system = ctypes.util.find_library("opus")
    return found + ([system] if system else [])


def load() -> ctypes.CDLL | None:
    """The libopus shared library with its prototypes set, or None (then PyAV is used)."""
    global _lib, _tried
    if _tried:
        return _lib
    _tried = True
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            _prototypes(lib)
        except (OSError, AttributeError):
            continue
        _lib = lib
        break
    return _lib


def _prototypes(lib: ctypes.CDLL) -> None:
    c_int, vp = ctypes.c_int, ctypes.c_void_p
    lib.opus_encoder_create.restype = vp
    lib.opus_encoder_create.argtypes = [ctypes.c_int32, c_int, c_int, ctypes.POINTER(c_int)]
    lib.opus_encode.restype = ctypes.c_int32
    lib.opus_encode.argtypes = [vp, vp, c_int, vp, ctypes.c_int32]
    lib.opus_encoder_destroy.argtypes = [vp]
    lib.opus_encoder_ctl.restype = c_int  # variadic: arguments passed as c_int / pointer
    lib.opus_decoder_create.restype = vp
    lib.opus_decoder_create.argtypes = [ctypes.c_int32, c_int, ctypes.POINTER(c_int)]
    lib.opus_decode.restype = c_int
    lib.opus_decode.argtypes = [vp, ctypes.c_char_p, ctypes.c_int32, vp, c_int, c_int]
    lib.opus_decoder_destroy.argtypes = [vp]
    lib.opus_strerror.restype = ctypes.c_char_p
    lib.opus_strerror.argtypes = [c_int]


def strerror(lib: ctypes.CDLL, code: int) -> str:
    return str(lib.opus_strerror(code).decode(errors="replace"))


class Encoder:
    """One mono libopus encoder at `rate`; `encode(pcm)` takes exactly one frame."""

    def __init__(
        self, lib: ctypes.CDLL, rate: int, application: int, settings: dict[int, int]
    ) -> None:
        err = ctypes.c_int()
        handle = lib.opus_encoder_create(rate, 1, application, ctypes.byref(err))
        if err.value != 0 or not handle:
            raise ValueError(f"opus_encoder_create: {strerror(lib, err.value)}")
        self._lib, self._h = lib, ctypes.c_void_p(handle)
        for request, value in settings.items():
            rc = lib.opus_encoder_ctl(self._h, ctypes.c_int(request), ctypes.c_int(value))
            if rc != 0:
                raise ValueError(f"opus_encoder_ctl({request}, {value}): {strerror(lib, rc)}")
        self._out = ctypes.create_string_buffer(MAX_PACKET)

    def lookahead(self) -> int:
        v = ctypes.c_int()
        self._lib.opus_encoder_ctl(self._h, ctypes.c_int(OPUS_GET_LOOKAHEAD), ctypes.byref(v))
        return v.value

    def encode(self, pcm: Pcm16) -> bytes:
        frame = np.ascontiguousarray(pcm, np.int16)
        n = self._lib.opus_encode(self._h, frame.ctypes.data, frame.size, self._out, MAX_PACKET)
        if n < 0:
            raise ValueError(f"opus_encode: {strerror(self._lib, n)}")
        return self._out.raw[:n]

    def __del__(self) -> None:
        h = getattr(self, "_h", None)
        if h is not None and h.value:
            self._lib.opus_encoder_destroy(h)


class Decoder:
    """One mono libopus decoder at `rate`; `decode(payload)` returns a new int16 array."""

    def __init__(self, lib: ctypes.CDLL, rate: int) -> None:
        err = ctypes.c_int()
        handle = lib.opus_decoder_create(rate, 1, ctypes.byref(err))
        if err.value != 0 or not handle:
            raise ValueError(f"opus_decoder_create: {strerror(lib, err.value)}")
        self._lib, self._h = lib, ctypes.c_void_p(handle)
        self._pcm = np.zeros(MAX_FRAME, np.int16)
        self._ptr: Any = self._pcm.ctypes.data

    def decode(self, payload: bytes) -> Pcm16:
        """Decoded samples; ValueError (libopus's message) for a packet it refuses."""
        n = self._lib.opus_decode(self._h, payload, len(payload), self._ptr, MAX_FRAME, 0)
        if n < 0:
            raise ValueError(strerror(self._lib, n))
        return self._pcm[:n].copy()

    def __del__(self) -> None:
        h = getattr(self, "_h", None)
        if h is not None and h.value:
            self._lib.opus_decoder_destroy(h)
