"""`rig report RUN_A --compare RUN_B`: do two runs time their onsets alike on the same items?

TACT's memory-swap ablation asks whether a change (a swapped history, another endpointer)
moves the onset distribution. Both runs are scored with the same `onset_distribution`
parameters; only items both ran count (matched by scenario and item id, all repeats
pooled). Per group (the `--by` tags of run A's items): the Jensen-Shannon distance (base 2,
in [0, 1]; its square is TACT's JSD_2) between the two histograms of offsets over T plus
a no-response bin, with a percentile bootstrap that resamples the common items (both runs
together: the comparison is paired).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rig.scoring.kernels import histogram, js_distance
from rig.scoring.measures import CI, Unit, grouped
from rig.scoring.onset_distribution import Kernels, Params, units_of
from rig.scoring.rundir import ScoringRun


def _key(run: ScoringRun, u: Unit) -> str:
    sc = next((r.scenario for r in run.rollouts if r.rollout_id == u["rollout"]), "default")
    return f"{sc}/{u['item']}"


def compare(a: ScoringRun, b: ScoringRun, p: Params, ci: CI, by: list[str]) -> dict[str, Any]:
    d = p.domain()
    ua = units_of(a, p, ci, Kernels(p, d))
    ub = units_of(b, p, ci, Kernels(p, d))
    items_a = {_key(a, u) for u in ua}
    items_b = {_key(b, u) for u in ub}
    common = sorted(items_a & items_b)
    per_b: dict[str, list[float | None]] = {}
    for u in ub:
        per_b.setdefault(_key(b, u), []).append(u["offset_s"])
    groups = []
    shared = set(common)
    for g, us in grouped([u for u in ua if _key(a, u) in shared], by):
        per_a: dict[str, list[float | None]] = {}
        for u in us:
            per_a.setdefault(_key(a, u), []).append(u["offset_s"])
        keys = sorted(per_a)

        def dist(ks: list[str], per_a: dict[str, list[float | None]] = per_a) -> float:
            ya = [y for k in ks for y in per_a[k]]
            yb = [y for k in ks for y in per_b.get(k, [])]
            return js_distance(histogram(ya, d, p.bin_ms), histogram(yb, d, p.bin_ms))

        row: dict[str, Any] = {"group": g, "n_items": len(keys)}
        if keys:
            rng = np.random.default_rng(ci.seed)
            boot = [
                dist([keys[j] for j in rng.integers(0, len(keys), size=len(keys))])
                for _ in range(ci.n_resamples)
            ]
            alpha = (1.0 - ci.confidence) / 2.0
            lo, hi = np.quantile(np.asarray(boot), [alpha, 1.0 - alpha])
            value = dist(keys)
            row["metrics"] = {
                "js_distance": {"value": value, "n": len(keys), "ci_low": float(lo),
                                "ci_high": float(hi),
                                "ci_method": "percentile bootstrap over common items"},
                "js_divergence": {"value": value * value, "n": len(keys),
                                  "ci_low": float(lo) ** 2, "ci_high": float(hi) ** 2,
                                  "ci_method": "percentile bootstrap over common items"},
            }  # fmt: skip
        else:
            row["metrics"] = {}
        groups.append(row)
    return {
        "run_b": str(b.run_dir),
        "n_items_common": len(common),
        "only_in_a": len(items_a - items_b),
        "only_in_b": len(items_b - items_a),
        "groups": groups,
    }
