"""Network conditions on demand, sans-I/O: the `--impair` spec, named profiles, and the two
link models the relay (rig.relay.process) applies per direction.

Spec: comma-separated `key=value` tokens, each for both directions unless prefixed `up:` or
`down:` (up = rig -> system), optionally led by a profile name whose values the tokens then
override: `delay=75ms,jitter=10ms,loss=1%,rate=256kbit`, `intercontinental,down:loss=2%`,
`up:delay=20ms,down:delay=80ms`. Keys: delay, jitter (time: `75ms`, `0.5s`, `250us`; a bare
number is ms), loss, reorder, duplicate (percent: `1%`), rate (tc units: bit, kbit, mbit,
gbit per second; bps, kbps, mbps are bytes per second), seed (an integer).

Links (both deterministic for a seed, time passed in):

`StreamLink` (TCP: a WebSocket) delays and throttles bytes in order. TCP cannot reorder or
lose bytes; a lost segment is resent and arrives late, holding back everything behind it.
The model: each segment (1448 bytes) is lost with probability `loss`; a chunk holding a lost
segment is released one round trip of the impaired path later plus FAST_RETX_WAIT (the
duplicate ACKs that trigger fast retransmit) -- not a tail-loss timeout (RTO >= 200 ms),
which a continuous audio stream rarely hits. Jitter never reorders (release times are
monotone). Rate: a chunk occupies the link for bytes*8/rate; what is queued behind it waits.

`DatagramLink` (UDP: WebRTC media) delays, jitters, drops, duplicates and (optionally)
reorders datagrams; with a rate, a queue longer than QUEUE_LIMIT drops at the tail.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from rig.core.units import NS_PER_MS, NS_PER_S
from rig.errors import ConfigError

MSS_BYTES = 1448
FAST_RETX_WAIT_NS = 20 * NS_PER_MS
#: datagrams queued behind a rate limit longer than this are dropped (a router's buffer)
QUEUE_LIMIT_NS = 500 * NS_PER_MS
MAX_DELAY_MS = 60_000.0


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """One direction's conditions."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss: float = 0.0  # probability, 0..1 (per TCP segment or per datagram)
    reorder: float = 0.0  # datagrams only: probability of skipping the FIFO
    duplicate: float = 0.0  # datagrams only
    rate_bps: float | None = None  # bits per second, None unlimited

    @property
    def active(self) -> bool:
        return any((self.delay_ms, self.jitter_ms, self.loss, self.reorder, self.duplicate)) or (
            self.rate_bps is not None
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Impairment:
    """Both directions (up = rig -> system) and the random seed."""

    up: LinkSpec = field(default_factory=LinkSpec)
    down: LinkSpec = field(default_factory=LinkSpec)
    seed: int = 0
    profile: str | None = None
    spec: str = ""

    @property
    def active(self) -> bool:
        return self.up.active or self.down.active

    def as_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "profile": self.profile,
            "seed": self.seed,
            "up": self.up.as_dict(),
            "down": self.down.as_dict(),
            "tcp_loss_model": "segment resent after one impaired round trip + "
            f"{FAST_RETX_WAIT_NS / NS_PER_MS:g} ms (fast retransmit); head-of-line blocking",
        }


#: named profiles: (up, down). One table, documented in docs/network.md.
PROFILES: dict[str, tuple[LinkSpec, LinkSpec]] = {
    "lan": (LinkSpec(0.5, 0.1), LinkSpec(0.5, 0.1)),
    "broadband": (LinkSpec(10, 2, rate_bps=20e6), LinkSpec(10, 2, rate_bps=100e6)),
    "mobile-4g": (
        LinkSpec(35, 10, 0.005, rate_bps=5e6),
        LinkSpec(30, 8, 0.002, rate_bps=20e6),
    ),
    "mobile-3g": (
        LinkSpec(90, 30, 0.01, rate_bps=384e3),
        LinkSpec(80, 25, 0.01, rate_bps=1.6e6),
    ),
    "lossy-wifi": (LinkSpec(4, 15, 0.03), LinkSpec(4, 15, 0.03)),
    "intercontinental": (LinkSpec(75, 3, 0.001), LinkSpec(75, 3, 0.001)),
    "satellite-geo": (LinkSpec(300, 10, 0.005, rate_bps=2e6), LinkSpec(300, 10, 0.005)),
}

_TIME = re.compile(r"^([0-9]*\.?[0-9]+)\s*(us|ms|s)?$")
_RATE = re.compile(r"^([0-9]*\.?[0-9]+)\s*(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$", re.I)
_RATE_BITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
_RATE_BYTES = {"bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}


def _time_ms(key: str, text: str) -> float:
    m = _TIME.match(text.strip().lower())
    if m is None:
        raise ConfigError(f"--impair {key}={text}: want a time such as 75ms, 0.5s or 250us")
    value = float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3, None: 1.0}[m.group(2)]
    if not value <= MAX_DELAY_MS:
        raise ConfigError(f"--impair {key}={text}: at most {MAX_DELAY_MS / 1000:g} s")
    return value


def _fraction(key: str, text: str) -> float:
    t = text.strip()
    if not t.endswith("%"):
        raise ConfigError(f"--impair {key}={text}: want a percentage such as 1%")
    try:
        v = float(t[:-1]) / 100
    except ValueError:
        raise ConfigError(f"--impair {key}={text}: want a percentage such as 1%") from None
    if not 0.0 <= v <= 1.0:
        raise ConfigError(f"--impair {key}={text}: a percentage between 0% and 100%")
    return v


def _rate(key: str, text: str) -> float:
    m = _RATE.match(text.strip())
    if m is None:
        raise ConfigError(f"--impair {key}={text}: want a rate such as 256kbit or 2mbit")
    unit = m.group(2).lower()
    v = float(m.group(1)) * (_RATE_BITS.get(unit) or _RATE_BYTES[unit])
    if not v >= 1000:
        raise ConfigError(f"--impair {key}={text}: at least 1kbit")
    return v


_KEYS = {
    "delay": ("delay_ms", _time_ms),
    "jitter": ("jitter_ms", _time_ms),
    "loss": ("loss", _fraction),
    "reorder": ("reorder", _fraction),
    "duplicate": ("duplicate", _fraction),
    "rate": ("rate_bps", _rate),
}


def parse_impair(spec: str) -> Impairment:
    """`--impair` text -> Impairment (ConfigError naming the bad token)."""
    up, down = LinkSpec(), LinkSpec()
    seed, profile = 0, None
    tokens = [t.strip() for t in spec.split(",") if t.strip()]
    if not tokens:
        raise ConfigError("--impair wants key=value settings or a profile name")
    for i, token in enumerate(tokens):
        if "=" not in token:
            if i != 0 or token not in PROFILES:
                known = ", ".join(PROFILES)
                raise ConfigError(f"--impair: unknown profile {token!r} (known: {known})")
            profile = token
            up, down = PROFILES[token]
            continue
        where, _, kv = token.rpartition(":")
        key, _, value = kv.partition("=")
        key = key.strip().lower()
        if where not in ("", "up", "down"):
            raise ConfigError(f"--impair {token}: a direction is up: or down:")
        if key == "seed" and not where:
            try:
                seed = int(value)
            except ValueError:
                raise ConfigError(f"--impair seed={value}: want an integer") from None
            continue
        if key not in _KEYS:
            raise ConfigError(f"--impair {token}: unknown key (known: {', '.join(_KEYS)}, seed)")
        name, conv = _KEYS[key]
        v = conv(key, value)
        if where in ("", "up"):
            up = replace(up, **{name: v})
        if where in ("", "down"):
            down = replace(down, **{name: v})
    return Impairment(up, down, seed, profile, spec)


def shorthand(delay_up_ms: float, delay_down_ms: float, jitter_ms: float) -> Impairment | None:
    """`rig sim`'s --net-delay-* / --net-jitter-ms knobs as an Impairment (None: all zero)."""
    if not (delay_up_ms or delay_down_ms or jitter_ms):
        return None
    spec = f"up:delay={delay_up_ms}ms,down:delay={delay_down_ms}ms,jitter={jitter_ms}ms"
    return parse_impair(spec)


# --- the link models ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fate:
    """What the link does with one chunk/datagram that arrived at `t_in_ns`."""

    t_in_ns: int
    release_ns: int  # when it leaves the relay (target; the relay logs the actual time)
    fate: str  # "delivered" | "retransmitted" | "lost" | "duplicated" | "queue_drop"
    extra_ns: int = 0  # of the delay, what loss (a resend) added

    @property
    def delay_ns(self) -> int:
        return self.release_ns - self.t_in_ns


class StreamLink:
    """One direction of a TCP relay: bytes in order, delayed, throttled, resent on loss."""

    def __init__(self, spec: LinkSpec, rng: random.Random, reverse_delay_ms: float) -> None:
        self.spec = spec
        self.rng = rng
        self.delay_ns = round(spec.delay_ms * NS_PER_MS)
        self.jitter_ns = round(spec.jitter_ms * NS_PER_MS)
        self.retx_ns = self.delay_ns + round(reverse_delay_ms * NS_PER_MS) + FAST_RETX_WAIT_NS
        self._free_ns = 0  # when the rate-limited link is free again
        self._last_ns = 0  # last release: nothing overtakes it

    def admit(self, t_ns: int, n_bytes: int) -> Fate:
        start = max(t_ns, self._free_ns)
        if self.spec.rate_bps:
            self._free_ns = start + math.ceil(n_bytes * 8 * NS_PER_S / self.spec.rate_bps)
        else:
            self._free_ns = start
        d = self.delay_ns
        if self.jitter_ns:
            d = max(0, d + round(self.rng.uniform(-self.jitter_ns, self.jitter_ns)))
        extra, fate = 0, "delivered"
        if self.spec.loss > 0:
            segments = max(1, math.ceil(n_bytes / MSS_BYTES))
            if self.rng.random() < 1 - (1 - self.spec.loss) ** segments:
                extra, fate = self.retx_ns, "retransmitted"
        release = max(self._free_ns + d + extra, self._last_ns)
        self._last_ns = release
        return Fate(t_ns, release, fate, extra)


class DatagramLink:
    """One direction of a UDP relay: each datagram delayed, maybe dropped/duplicated/reordered."""

    def __init__(self, spec: LinkSpec, rng: random.Random) -> None:
        self.spec = spec
        self.rng = rng
        self.delay_ns = round(spec.delay_ms * NS_PER_MS)
        self.jitter_ns = round(spec.jitter_ms * NS_PER_MS)
        self._free_ns = 0
        self._last_ns = 0

    def admit(self, t_ns: int, n_bytes: int) -> list[Fate]:
        """Zero (lost), one or two (duplicated) releases for a datagram arriving at t_ns."""
        s = self.spec
        start = max(t_ns, self._free_ns)
        if s.rate_bps:
            if start - t_ns > QUEUE_LIMIT_NS:
                return [Fate(t_ns, t_ns, "queue_drop")]
            self._free_ns = start + math.ceil(n_bytes * 8 * NS_PER_S / s.rate_bps)
        else:
            self._free_ns = start
        if s.loss and self.rng.random() < s.loss:
            return [Fate(t_ns, t_ns, "lost")]
        out = [self._one(t_ns, "delivered")]
        if s.duplicate and self.rng.random() < s.duplicate:
            out.append(self._one(t_ns, "duplicated"))
        return out

    def _one(self, t_ns: int, fate: str) -> Fate:
        d = self.delay_ns
        if self.jitter_ns:
            d = max(0, d + round(self.rng.uniform(-self.jitter_ns, self.jitter_ns)))
        release = self._free_ns + d
        if not (self.spec.reorder and self.rng.random() < self.spec.reorder):
            release = max(release, self._last_ns)  # FIFO unless this one may overtake
        self._last_ns = max(self._last_ns, release)
        return Fate(t_ns, release, fate)
