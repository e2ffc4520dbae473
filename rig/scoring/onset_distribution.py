"""`onset_distribution`: the distribution of onset offsets around reference marks (TACT).

At each decision point (a `turn_end` or `eot` mark at t, a `pause` mark's start), the
outcome y is the offset of the system's first word-bearing onset in T = [t - pre_s,
t + horizon_s] (speech already under way at t - pre_s counts as -pre_s; nothing inside T:
no response). Per group: the onsets' distribution (median offset, the no-response mass,
and a histogram over T with a no-response bin), and against a reference kernel
(rig.scoring.kernels):

* `episode_score`: the mean over points of s = 1 - twCRPS(h, y) / W (TACT's per-episode
  score: the reference law as the forecast, the system's onset as the outcome);
* `timing_score`: S = 1 - d(P || h) / W with P the group's empirical sub-CDF (TACT's
  population score, equation 4), when every point of the group has the same kernel.

The kernel of a point: the `kernel` option (for every point), else the item's `kernel` tag
(a kernel spec), else the entry of `kernel_file` (JSON: tag value -> spec, or "default")
for its `kernel_tag` value, else the preset named by its `kernel_tag` value (TACT intents:
ans, bck, abn, ref, rhe, hold). Points without a kernel get the distribution only.
`rig report RUN_A --compare RUN_B` adds the Jensen-Shannon distance between the two runs'
distributions over the items both ran (rig.scoring.compare).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rig.errors import ConfigError
from rig.scoring.kernels import (
    PRESETS,
    Domain,
    Kernel,
    Reference,
    divergence,
    empirical_cdf,
    histogram,
    parse_kernel,
    reference,
    tw_crps,
)
from rig.scoring.measures import CI, Unit, clusters, grouped, r4, rate_metric, stat_metric, unit
from rig.scoring.rundir import Rollout, ScoringRun, clip_to_regions


@dataclass(frozen=True, slots=True)
class Params:
    """onset_distribution parameters (published defaults: TACT)."""

    marks: str = "turn_end,eot,pause"
    kernel: str = ""
    kernel_tag: str = "intent"
    kernel_file: str = ""
    pre_s: float = 2.0
    horizon_s: float = 5.0
    gamma: float = 0.7
    eps: float = 0.02
    grid_ms: float = 1.0
    bin_ms: float = 100.0

    def domain(self) -> Domain:
        if self.pre_s < 0 or self.horizon_s <= 0 or not 0 <= self.eps < 1 or self.gamma <= 0:
            raise ConfigError("onset_distribution: need pre_s >= 0, horizon_s > 0, gamma > 0, "
                              "0 <= eps < 1")  # fmt: skip
        return Domain(self.pre_s, self.horizon_s, self.gamma, self.eps, self.grid_ms)


def onset_offset(r: Rollout, t: float, d: Domain) -> float | None:
    """Offset of the first word-bearing onset in [t - pre, t + horizon], or None."""
    live = [i for i in clip_to_regions(r, r.worded()) if i.end_s > t - d.pre_s]
    if not live:
        return None
    y = max(min(i.start_s for i in live) - t, -d.pre_s)
    return None if y > d.horizon_s else y


class Kernels:
    """Finds each point's kernel and caches its evaluation on the domain."""

    def __init__(self, p: Params, d: Domain) -> None:
        self.p, self.d = p, d
        self.table: dict[str, str] = {}
        if p.kernel_file:
            try:
                raw = json.loads(Path(p.kernel_file).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise ConfigError(f"kernel_file {p.kernel_file}: cannot read: {exc}") from exc
            if not isinstance(raw, dict):
                raise ConfigError(f"kernel_file {p.kernel_file}: want an object of specs")
            self.table = {str(k): str(v) for k, v in raw.items()}
        self.cache: dict[str, Reference] = {}
        self.fixed = parse_kernel(p.kernel) if p.kernel else None

    def spec_of(self, r: Rollout) -> str | None:
        if self.p.kernel:
            return self.p.kernel
        if "kernel" in r.tags:
            return r.tags["kernel"]
        value = r.tags.get(self.p.kernel_tag)
        if value is not None and value in self.table:
            return self.table[value]
        if "default" in self.table:
            return self.table["default"]
        return value if value in PRESETS else None

    def ref(self, spec: str) -> Reference:
        if spec not in self.cache:
            self.cache[spec] = reference(parse_kernel(spec), self.d)
        return self.cache[spec]


def units_of(run: ScoringRun, p: Params, ci: CI, kernels: Kernels) -> list[Unit]:
    d = kernels.d
    kinds = [k.strip() for k in p.marks.split(",") if k.strip()]
    out: list[Unit] = []
    for r in run.rollouts:
        spec = kernels.spec_of(r)
        for m in r.marks_of(*kinds):
            y = onset_offset(r, m.t_s, d)
            u = unit(r, ci, mark=m.mark, t_s=r4(m.t_s), offset_s=r4(y), kernel=spec)
            if spec is not None:
                ref = kernels.ref(spec)
                u["tw_crps"] = r4(tw_crps(ref, ref.H, y))
                u["episode_score"] = r4(1.0 - tw_crps(ref, ref.H, y) / ref.W)
            out.append(u)
    return out


def score(run: ScoringRun, p: Params, ci: CI, by: list[str]) -> dict[str, Any]:
    d = p.domain()
    kernels = Kernels(p, d)
    units = units_of(run, p, ci, kernels)
    groups = [
        {"group": g, "metrics": group_metrics(us, kernels, ci), "histogram": _hist(us, d, p)}
        for g, us in grouped(units, by)
    ]
    used = sorted({str(u["kernel"]) for u in units if u["kernel"]})
    return {
        "groups": groups,
        "units": units,
        "kernels": {s: kernels.ref(s).kernel.as_dict() for s in used},
    }


def _hist(us: list[Unit], d: Domain, p: Params) -> dict[str, Any]:
    probs = histogram([u["offset_s"] for u in us], d, p.bin_ms)
    return {"bin_ms": p.bin_ms, "from_s": -d.pre_s, "to_s": d.horizon_s,
            "p": [round(float(x), 6) for x in probs], "last_bin": "no response"}  # fmt: skip


def group_metrics(us: list[Unit], kernels: Kernels, ci: CI) -> dict[str, Any]:
    cl = clusters(us)
    resp = [u for u in us if u["offset_s"] is not None]
    out: dict[str, Any] = {
        "no_response_rate": rate_metric([u["offset_s"] is None for u in us], cl, ci),
        "onset_offset_ms": stat_metric(
            [1000.0 * float(u["offset_s"]) for u in resp], clusters(resp), ci
        ),
    }
    scored = [u for u in us if "episode_score" in u]
    if scored:
        out["episode_score"] = stat_metric(
            [float(u["episode_score"]) for u in scored], clusters(scored), ci, stat="mean"
        )
    specs = {u["kernel"] for u in us}
    if len(specs) == 1 and None not in specs and us:
        out["timing_score"] = _timing_score(us, kernels.ref(str(next(iter(specs)))), ci)
    elif scored:
        out["timing_score"] = {"value": None, "n": len(us), "ci_low": None, "ci_high": None,
                               "ci_method": "none", "why": "mixed kernels: group by the "
                               "kernel tag (--by)"}  # fmt: skip
    return out


def _timing_score(us: list[Unit], ref: Reference, ci: CI) -> dict[str, Any]:
    """S = 1 - d(P || h) / W, with a percentile bootstrap over clusters."""
    ys = [u["offset_s"] for u in us]

    def s_of(sample: list[float | None]) -> float:
        return 1.0 - divergence(ref, empirical_cdf(ref.t, sample)) / ref.W

    by_cluster: dict[str, list[float | None]] = {}
    for u in us:
        by_cluster.setdefault(str(u["cluster"]), []).append(u["offset_s"])
    parts = list(by_cluster.values())
    rng = np.random.default_rng(ci.seed)
    stats = []
    for _ in range(ci.n_resamples):
        pick = rng.integers(0, len(parts), size=len(parts))
        stats.append(s_of([y for j in pick for y in parts[j]]))
    alpha = (1.0 - ci.confidence) / 2.0
    lo, hi = np.quantile(np.asarray(stats), [alpha, 1.0 - alpha])
    return {"value": s_of(ys), "n": len(ys), "ci_low": float(lo), "ci_high": float(hi),
            "ci_method": f"percentile bootstrap over {ci.over}",
            "kernel": ref.kernel.as_dict()}  # fmt: skip


__all__ = ["Kernel", "Params", "score", "units_of"]
