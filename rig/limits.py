"""Sane ranges for numbers that size buffers or enter clock arithmetic (sans-I/O).

Why: a peer's `sample_rate` of 20,000,000 turns a 2-sample chunk into a 175 MB track, and a
server timestamp of 1e300 overflows the clock fit. Numbers from a peer are checked here and
refused with `ProtocolError`; numbers from the user (options, scenario files) with
`ConfigError`. One place, so every decoder refuses the same things with the same words.
"""

from __future__ import annotations

import math
from typing import Any

from rig.errors import ConfigError, ProtocolError

MIN_RATE_HZ = 8_000
MAX_RATE_HZ = 192_000
MAX_CHANNELS = 32
#: |server timestamp| in ms: ~31,700 years. Epoch milliseconds today are ~1.8e12.
MAX_TS_MS = 1e15
#: |server clock reading| in ns for integer fields (probe replies): int64 with headroom
MAX_TS_NS = 1 << 62


def is_number(value: Any) -> bool:
    """An int or float that is not a bool (JSON `true` is an int to Python)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def rate_problem(value: Any) -> str | None:
    """Why `value` is not a usable sample rate (None: it is one)."""
    if not isinstance(value, int) or isinstance(value, bool):
        return f"sample rate must be an integer number of Hz, got {value!r}"[:120]
    if not MIN_RATE_HZ <= value <= MAX_RATE_HZ:
        return f"sample rate {value} Hz is outside {MIN_RATE_HZ}-{MAX_RATE_HZ} Hz"
    return None


def remote_rate(value: Any, what: str) -> int:
    """A sample rate a peer announced; `ProtocolError` outside 8 kHz - 192 kHz."""
    problem = rate_problem(value)
    if problem is not None:
        raise ProtocolError(f"{what}: {problem}")
    return int(value)


def local_rate(value: Any, what: str) -> int:
    """A sample rate the user asked for; `ConfigError` outside 8 kHz - 192 kHz."""
    problem = rate_problem(value)
    if problem is not None:
        raise ConfigError(f"{what}: {problem}")
    return int(value)


def ts_ms_problem(value: Any) -> str | None:
    """Why `value` is not a usable server timestamp in ms (None: it is one)."""
    if not is_number(value):
        return f"timestamp is not a number: {value!r}"[:120]
    if not math.isfinite(value) or abs(value) > MAX_TS_MS:
        return f"timestamp {value!r} ms is not finite or beyond {MAX_TS_MS:g} ms"[:120]
    return None


def remote_ts_ms(value: Any, what: str) -> float:
    """A server timestamp (ms) a protocol requires to be valid; `ProtocolError` otherwise."""
    problem = ts_ms_problem(value)
    if problem is not None:
        raise ProtocolError(f"{what}: {problem}")
    return float(value)


def remote_ts_ns(value: Any, what: str) -> int:
    """An integer server clock reading (ns); `ProtocolError` if not an int within int64."""
    if not isinstance(value, int) or isinstance(value, bool) or abs(value) > MAX_TS_NS:
        raise ProtocolError(f"{what}: must be an integer within +-2^62 ns, got {value!r}"[:160])
    return value


def bounded(value: float, lo: float, hi: float, what: str) -> float:
    """A user-given number in [lo, hi] (finite); `ConfigError` naming `what` otherwise."""
    if not is_number(value) or not math.isfinite(value) or not lo <= value <= hi:
        raise ConfigError(f"{what} must be a number in [{lo:g}, {hi:g}], got {value!r}")
    return value
