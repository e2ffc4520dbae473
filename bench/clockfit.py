"""Clock-fit accuracy against ground truth, and the cost of a fit of 10^5 samples.

    python bench/clockfit.py [--trials 20] [--n 1000] [--span-s 120] [--seed 1]

Synthetic truth as in tests/clockfit/test_fit.py: the peer clock reads P0 + (t - T0)(1 + drift)
when ours reads t; delays are a minimum per direction plus exponential or Lomax (heavy-tail)
queuing. For each setting and method it prints the offset error (p50 / p95 of |error| over
trials), how often the truth fell within the reported offset_err_ns ("cov"), and the same
for drift. Down = downlink envelope, judged against truth + d_min_down (what it claims);
two-way = both envelopes; ntp = four-timestamp exchanges; ls = least squares on the
downlink samples, judged like down, for contrast. Output is a markdown table.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from rig.clockfit.fit import fit_downlink, fit_two_way, fit_uplink
from rig.clockfit.mapping import ClockMap
from rig.clockfit.ntp import fit_ntp

I64 = npt.NDArray[np.int64]
MS = 1_000_000
S = 1_000_000_000
T0 = 5_000 * S


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown"
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


class World:
    """One synthetic trial: truth, delays, and the four kinds of samples."""

    def __init__(
        self,
        rng: np.random.Generator,
        n: int,
        span_s: float,
        drift_ppm: float,
        dmin_down_ms: float,
        dmin_up_ms: float,
        jitter_ms: float,
        kind: str,
    ) -> None:
        self.drift = drift_ppm * 1e-6
        self.offset_ns = int(rng.integers(-3 * 3600 * S, 3 * 3600 * S))
        self.dmin_down = int(dmin_down_ms * MS)
        self.dmin_up = int(dmin_up_ms * MS)

        def q() -> I64:
            j = jitter_ms * MS
            x = rng.exponential(j, n) if kind == "exp" else j * rng.pareto(1.5, n)
            out: I64 = np.rint(x).astype(np.int64)
            return out

        self.t0 = np.sort(rng.integers(T0, T0 + int(span_s * S), n))
        d_up = self.dmin_up + q()
        d_down = self.dmin_down + q()
        hold = rng.integers(0, 5 * MS, n)
        self.t1 = self.peer(self.t0 + d_up)
        self.t2 = self.t1 + hold
        self.t3 = np.rint(self.local(self.t2)).astype(np.int64) + d_down

    def peer(self, local_ns: I64) -> I64:
        out: I64 = np.rint((local_ns - T0) * (1 + self.drift)).astype(np.int64)
        return out + (T0 + self.offset_ns)

    def local(self, peer_ns: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        out: npt.NDArray[np.float64] = T0 + (peer_ns - T0 - self.offset_ns) / (1 + self.drift)
        return out


def least_squares(peer: I64, local: I64) -> ClockMap:
    x = (peer - peer[0]).astype(np.float64)
    z = ((local - local[0]) - (peer - peer[0])).astype(np.float64)
    c, a = np.polyfit(x, z, 1)
    ref = int(x.max()) // 2
    return ClockMap(
        local_ref_ns=int(local[0]) + ref + round(a + c * ref),
        peer_ref_ns=int(peer[0]) + ref,
        rate=1 + c,
        method="ls",
        n_samples=peer.size,
        peer_first_ns=int(peer[0]),
        peer_last_ns=int(peer[-1]),
        residual_p50_ns=0.0,
        residual_p95_ns=0.0,
        residual_max_ns=0.0,
        offset_err_ns=0.0,
        drift_err_ppm=0.0,
        split=False,
        drift_fitted=True,
    )


Method = Callable[[World], tuple[ClockMap, int]]  # the map and the shift it claims


def m_down(w: World) -> tuple[ClockMap, int]:
    fit = fit_downlink(w.t2, w.t3)
    assert isinstance(fit, ClockMap)
    return fit, w.dmin_down


def m_two_way(w: World) -> tuple[ClockMap, int]:
    fit = fit_two_way(w.t2, w.t3, w.t0, w.t1)
    assert isinstance(fit, ClockMap)
    return fit, 0


def m_ntp(w: World) -> tuple[ClockMap, int]:
    fit = fit_ntp(w.t0, w.t1, w.t2, w.t3)
    assert isinstance(fit, ClockMap)
    return fit, 0


def m_ls(w: World) -> tuple[ClockMap, int]:
    return least_squares(w.t2, w.t3), w.dmin_down


METHODS: dict[str, Method] = {"down": m_down, "two-way": m_two_way, "ntp": m_ntp, "ls": m_ls}


def accuracy(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(args.seed)
    print(
        "| delay down/up ms | jitter | drift ppm | method | offset err p50/p95 ms | cov "
        "| drift err p50/p95 ppm | cov |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for dmin_down, dmin_up in ((5.0, 5.0), (20.0, 40.0)):
        for jitter_ms, kind in ((1.0, "exp"), (20.0, "exp"), (20.0, "lomax")):
            for drift_ppm in (-50_000.0, 100.0, 50_000.0):
                errs: dict[str, list[tuple[float, float, float, float]]] = {k: [] for k in METHODS}
                for _ in range(args.trials):
                    w = World(
                        rng, args.n, args.span_s, drift_ppm, dmin_down, dmin_up, jitter_ms, kind
                    )
                    for name, method in METHODS.items():
                        fit, shift = method(w)
                        truth = float(w.local(np.array([fit.peer_ref_ns]))[0]) + shift
                        e_off = abs(fit.to_local(fit.peer_ref_ns) - truth)
                        e_drift = abs(fit.drift_ppm - drift_ppm)
                        errs[name].append(
                            (e_off, fit.offset_err_ns, e_drift, fit.drift_err_ppm or 0.0)
                        )
                for name, rows in errs.items():
                    a = np.array(rows)
                    o50, o95 = np.percentile(a[:, 0], [50, 95]) / MS
                    d50, d95 = np.percentile(a[:, 2], [50, 95])
                    cov_o = np.mean(a[:, 0] <= a[:, 1]) if name != "ls" else float("nan")
                    cov_d = np.mean(a[:, 2] <= a[:, 3]) if name != "ls" else float("nan")
                    print(
                        f"| {dmin_down:g}/{dmin_up:g} | {jitter_ms:g} ms {kind} | {drift_ppm:+g} "
                        f"| {name} | {o50:.3f} / {o95:.3f} | {_pct(cov_o)} "
                        f"| {d50:.2f} / {d95:.2f} | {_pct(cov_d)} |"
                    )


def _pct(x: float | np.floating[Any]) -> str:
    return "-" if x != x else f"{100 * x:.0f}%"


def cost(args: argparse.Namespace) -> None:
    n = 100_000
    rng = np.random.default_rng(args.seed + 1)
    w = World(rng, n, 3600.0, 50_000.0, 20.0, 40.0, 20.0, "exp")
    runs: dict[str, Callable[[], object]] = {
        "fit_downlink": lambda: fit_downlink(w.t2, w.t3),
        "fit_uplink": lambda: fit_uplink(w.t0, w.t1),
        "fit_two_way": lambda: fit_two_way(w.t2, w.t3, w.t0, w.t1),
        "fit_ntp": lambda: fit_ntp(w.t0, w.t1, w.t2, w.t3),
        "least squares (contrast)": lambda: least_squares(w.t2, w.t3),
    }
    print(f"\nCost per fit of 10^5 samples (median of {args.repeats}), {cpu_model()}, ", end="")
    print(f"{len(__import__('os').sched_getaffinity(0))} cores, numpy {np.__version__}:\n")
    print("| fit | ms |")
    print("|---|---|")
    for name, run in runs.items():
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            run()
            times.append(time.perf_counter() - t)
        print(f"| {name} | {1e3 * float(np.median(times)):.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--n", type=int, default=1000, help="samples (exchanges) per trial")
    ap.add_argument("--span-s", type=float, default=120.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    print(f"{args.n} samples over {args.span_s:g} s, {args.trials} trials per row\n")
    accuracy(args)
    cost(args)


if __name__ == "__main__":
    main()
