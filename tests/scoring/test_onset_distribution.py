"""onset_distribution and --compare on hand-built runs: offsets, no-response mass, the
TACT scores against a direct evaluation, and the Jensen-Shannon distance of two runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rig.scoring.compare import compare
from rig.scoring.kernels import PRESETS, Domain, empirical_cdf, reference, tw_crps
from rig.scoring.measures import CI
from rig.scoring.onset_distribution import Params
from rig.scoring.registry import score_dir
from rig.scoring.rundir import read_run
from tests.support.scoringrun import mark, rollout


def _four(run: Path, intent: str = "ans") -> None:
    te = [mark("turn_end", 5.0)]
    tags = {"intent": intent}
    rollout(run, "a", system=[(5.2, 6.0)], marks=te, tags=tags)  # +0.2 s
    rollout(run, "b", system=[(5.4, 6.0)], marks=te, tags=tags)  # +0.4 s
    rollout(run, "c", system=[(10.5, 11.0)], marks=te, tags=tags)  # after 5 s: none
    rollout(run, "d", system=[(2.5, 6.0)], marks=te, tags=tags)  # under way at 3.0: -2.0


def test_offsets_no_response_and_tact_scores(tmp_path: Path) -> None:
    _four(tmp_path)
    entry = score_dir(tmp_path, ["onset_distribution"])["scorers"]["onset_distribution"]
    u = {x["rollout"]: x for x in entry["units"]}
    assert [u[k]["offset_s"] for k in "abcd"] == [0.2, 0.4, None, -2.0]
    assert all(x["kernel"] == "ans" for x in u.values())  # from the `intent` tag
    m = entry["groups"][0]["metrics"]
    assert (m["no_response_rate"]["k"], m["no_response_rate"]["n"]) == (1, 4)
    assert m["onset_offset_ms"]["value"] == 200.0  # median of -2000, 200, 400
    ref = reference(PRESETS["ans"], Domain())
    ys: list[float | None] = [0.2, 0.4, None, -2.0]
    scores = [1.0 - tw_crps(ref, ref.H, y) / ref.W for y in ys]
    assert m["episode_score"]["value"] == pytest.approx(float(np.mean(scores)), abs=1e-4)
    # S = 1 - integral w (P - H)^2 / W, P the empirical sub-CDF (1/4 per onset)
    P = empirical_cdf(ref.t, ys)
    want = 1.0 - float(np.sum(((ref.w * (P - ref.H) ** 2)[1:] + (ref.w * (P - ref.H) ** 2)[:-1])
                              * np.diff(ref.t)) / 2) / ref.W  # fmt: skip
    assert m["timing_score"]["value"] == pytest.approx(want, abs=1e-9)
    assert m["timing_score"]["ci_low"] <= want <= m["timing_score"]["ci_high"]
    # the histogram has 70 bins of 100 ms over [-2, 5] s and a no-response bin
    h = entry["groups"][0]["histogram"]["p"]
    assert len(h) == 71 and h[-1] == 0.25 and h[0] == 0.25 and sum(h) == pytest.approx(1.0)
    assert entry["kernels"]["ans"]["beta"] == 0.05


def test_kernel_option_file_and_mixed_groups(tmp_path: Path) -> None:
    _four(tmp_path)
    rollout(tmp_path, "e", system=[], marks=[mark("turn_end", 5.0)], tags={"intent": "hold"})
    entry = score_dir(tmp_path, ["onset_distribution"], by=["intent"])["scorers"][
        "onset_distribution"
    ]
    allm = entry["groups"][0]["metrics"]
    assert allm["timing_score"]["value"] is None and "mixed kernels" in allm["timing_score"]["why"]
    hold = next(g for g in entry["groups"] if g["group"] == {"intent": "hold"})["metrics"]
    assert hold["timing_score"]["value"] is not None
    kf = tmp_path / "k.json"
    kf.write_text('{"default": "exgauss:mu=0.3,sigma=0.1,tau=0.2,beta=0.1"}')
    doc = score_dir(tmp_path, ["onset_distribution"], [f"kernel_file={kf}", "kernel_tag=none"])
    units = doc["scorers"]["onset_distribution"]["units"]
    assert {x["kernel"] for x in units} == {"exgauss:mu=0.3,sigma=0.1,tau=0.2,beta=0.1"}


def _compare(a: Path, b: Path, by: list[str] | None = None) -> dict[str, Any]:
    ci = CI(n_resamples=200)
    return compare(read_run(a), read_run(b), Params(), ci, by or [])


def test_compare_same_items_js_distance(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    _four(a)
    _four(b)
    for rid in "abcd":  # c: the same items, the system never answers
        rollout(c, rid, system=[], marks=[mark("turn_end", 5.0)], tags={"intent": "ans"})
    same = _compare(a, b)
    assert same["n_items_common"] == 4
    assert same["groups"][0]["metrics"]["js_distance"]["value"] == 0.0
    # a: 1/4 in each of three bins and 1/4 no response; c: all no response.
    # m = (1/8, 1/8, 1/8, 5/8); KL(a||m) = 3/4 log2 2 + 1/4 log2(2/5) = 0.41952,
    # KL(c||m) = log2(8/5) = 0.67807; JSD = 0.54879, distance 0.74080
    far = _compare(a, c)["groups"][0]["metrics"]["js_distance"]
    assert far["value"] == pytest.approx(0.74080, abs=1e-4)
    assert far["ci_low"] <= far["value"] <= far["ci_high"]
    # items only one run has are left out and counted
    rollout(b, "z", system=[], marks=[mark("turn_end", 5.0)])
    assert _compare(a, b)["only_in_b"] == 1
