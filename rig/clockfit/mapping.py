"""A fitted mapping from a peer clock onto the shared clock, and the refusal to give one.

How this works
--------------
A peer (a server, a device) stamps events in integer ns on its own clock. A `ClockMap`
carries a straight line from that clock onto the shared local monotonic clock:

    local_ns = local_ref_ns + (peer_ns - peer_ref_ns) * rate

`rate` is d(local)/d(peer). A peer clock that runs fast against ours ticks more than one
peer ns per local ns, so rate < 1 and `drift_ppm` = (1 / rate - 1) * 1e6 is positive.
The reference point sits in the middle of the samples, where the fit is tightest; away
from it the error grows by `drift_err_ppm` per second (`local_err_ns`). Both references
stay integers, so hour-scale offsets and epoch-scale peer stamps lose no precision: only
the (small) distance from the reference is multiplied by a float.

`split` says whether the offset is separated from the network path delay. A one-way fit
alone cannot do that (its line is the true mapping shifted by the minimum path delay);
`reason` then says so in words fit for metrics.json. Where the data cannot support a map
at all the fitters return a `FitRefusal` instead; `refusal_reason` answers "can I use
this fit for X?" for either record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from rig.core.units import NS_PER_MS, NS_PER_S

PPM = 1_000_000


@dataclass(frozen=True, slots=True)
class ClockMap:
    """Peer clock -> shared local clock, with how it was fitted and how well."""

    local_ref_ns: int
    peer_ref_ns: int
    rate: float
    method: str
    n_samples: int
    peer_first_ns: int
    peer_last_ns: int
    residual_p50_ns: float
    residual_p95_ns: float
    residual_max_ns: float
    offset_err_ns: float
    drift_err_ppm: float | None
    split: bool
    drift_fitted: bool
    reason: str | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ValueError(f"clock rate must be finite and positive, got {self.rate!r}")

    # --- mapping -------------------------------------------------------------------------

    def to_local(self, peer_ns: int) -> int:
        """The shared-clock time of a peer timestamp (rounded to the ns)."""
        return self.local_ref_ns + round((peer_ns - self.peer_ref_ns) * self.rate)

    def to_peer(self, local_ns: int) -> int:
        """The peer-clock time of a shared-clock timestamp (inverse of `to_local`)."""
        return self.peer_ref_ns + round((local_ns - self.local_ref_ns) / self.rate)

    def to_local_array(self, peer_ns: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Vectorised `to_local` for int64 arrays (the subtraction stays in integers)."""
        dt = np.asarray(peer_ns, dtype=np.int64) - np.int64(self.peer_ref_ns)
        out: npt.NDArray[np.int64] = np.rint(dt * self.rate).astype(np.int64)
        return out + np.int64(self.local_ref_ns)

    # --- derived numbers -----------------------------------------------------------------

    @property
    def drift_ppm(self) -> float:
        """Peer clock rate against ours: positive when the peer clock runs fast."""
        return (1.0 / self.rate - 1.0) * PPM

    @property
    def offset_ns(self) -> int:
        """local - peer at the reference point (includes the path delay unless `split`)."""
        return self.local_ref_ns - self.peer_ref_ns

    def offset_at(self, peer_ns: int) -> int:
        """local - peer at a given peer time (moves with drift)."""
        return self.to_local(peer_ns) - peer_ns

    @property
    def span_ns(self) -> int:
        """Peer-clock time covered by the samples."""
        return self.peer_last_ns - self.peer_first_ns

    def local_err_ns(self, peer_ns: int) -> float:
        """Uncertainty of `to_local(peer_ns)`: offset error plus drift error times distance.

        Without a fitted drift the distance term is unknown, so the answer is infinite
        away from the reference.
        """
        dt_s = abs(peer_ns - self.peer_ref_ns) / NS_PER_S
        if dt_s == 0:
            return self.offset_err_ns
        if self.drift_err_ppm is None:
            return math.inf
        return self.offset_err_ns + self.drift_err_ppm * 1e-6 * dt_s * NS_PER_S

    # --- records -------------------------------------------------------------------------

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (metrics.json): exact integer references plus readable ms/ppm numbers."""
        return {
            "method": self.method,
            "n_samples": self.n_samples,
            "refused": False,
            "split": self.split,
            "drift_fitted": self.drift_fitted,
            "reason": self.reason,
            "local_ref_ns": self.local_ref_ns,
            "peer_ref_ns": self.peer_ref_ns,
            "peer_first_ns": self.peer_first_ns,
            "peer_last_ns": self.peer_last_ns,
            "rate": self.rate,
            "offset_ms": self.offset_ns / NS_PER_MS,
            "offset_err_ms": _finite_or_none(self.offset_err_ns / NS_PER_MS),
            "drift_ppm": self.drift_ppm,
            "drift_err_ppm": _finite_or_none(self.drift_err_ppm),
            "span_s": self.span_ns / NS_PER_S,
            "residual_p50_ms": self.residual_p50_ns / NS_PER_MS,
            "residual_p95_ms": self.residual_p95_ns / NS_PER_MS,
            "residual_max_ms": self.residual_max_ns / NS_PER_MS,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClockMap:
        """Rebuild a map from `as_dict()` output (e.g. when reading metrics.json)."""
        offset_err_ms = d["offset_err_ms"]
        return cls(
            local_ref_ns=int(d["local_ref_ns"]),
            peer_ref_ns=int(d["peer_ref_ns"]),
            rate=float(d["rate"]),
            method=str(d["method"]),
            n_samples=int(d["n_samples"]),
            peer_first_ns=int(d["peer_first_ns"]),
            peer_last_ns=int(d["peer_last_ns"]),
            residual_p50_ns=float(d["residual_p50_ms"]) * NS_PER_MS,
            residual_p95_ns=float(d["residual_p95_ms"]) * NS_PER_MS,
            residual_max_ns=float(d["residual_max_ms"]) * NS_PER_MS,
            offset_err_ns=math.inf if offset_err_ms is None else float(offset_err_ms) * NS_PER_MS,
            drift_err_ppm=None if d["drift_err_ppm"] is None else float(d["drift_err_ppm"]),
            split=bool(d["split"]),
            drift_fitted=bool(d["drift_fitted"]),
            reason=d.get("reason"),
        )


@dataclass(frozen=True, slots=True)
class FitRefusal:
    """No map: the data cannot support one. `reason` is meant for humans and metrics.json."""

    method: str
    n_samples: int
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "n_samples": self.n_samples,
            "refused": True,
            "reason": self.reason,
        }


def refusal_reason(
    fit: ClockMap | FitRefusal, *, need_split: bool = True, need_drift: bool = False
) -> str | None:
    """Why `fit` cannot be used for what the caller needs, or None if it can.

    need_split: the offset must be separated from path delay (a true server-clock time,
    an uplink/downlink split). need_drift: the rate must have been fitted, not assumed.
    """
    if isinstance(fit, FitRefusal):
        return fit.reason
    if need_split and not fit.split:
        return fit.reason or f"{fit.method}: offset not separated from path delay"
    if need_drift and not fit.drift_fitted:
        return fit.reason or f"{fit.method}: drift not fitted"
    return None


def _finite_or_none(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def join_reasons(*reasons: str | None) -> str | None:
    """Join the non-empty reasons with '; ' (None when there are none)."""
    parts = [r for r in reasons if r]
    return "; ".join(parts) if parts else None
