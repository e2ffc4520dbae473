"""Simulated one-way network delay with jitter, without reordering (sans-I/O).

Each message gets `delay + U(-jitter, +jitter)` (clamped at 0), and is released no earlier
than the previous one: a TCP stream cannot overtake itself, so neither can this.
"""

from __future__ import annotations

import random

from rig.clock.base import NS_PER_MS


class DelayLine:
    def __init__(self, delay_ms: float, jitter_ms: float, rng: random.Random) -> None:
        self.delay_ns = round(delay_ms * NS_PER_MS)
        self.jitter_ns = round(jitter_ms * NS_PER_MS)
        self.rng = rng
        self._last_release_ns = 0

    @property
    def active(self) -> bool:
        return self.delay_ns > 0 or self.jitter_ns > 0

    def release_ns(self, t_ns: int) -> int:
        d = self.delay_ns
        if self.jitter_ns:
            d += round(self.rng.uniform(-self.jitter_ns, self.jitter_ns))
        release = max(t_ns + max(0, d), self._last_release_ns)
        self._last_release_ns = release
        return release
