"""Roll many rollouts' metrics.json up into a report, per scenario and per item.

How this works
--------------
`load_run` reads `manifest.json` and every `rollouts/*/metrics.json`, never failing on one
bad rollout: a missing file counts as status `missing`, an unparseable one as `corrupt`
(with the reason in `problems`). Attempts moved aside on resume (`<id>.failed-N`) are not
rollouts: they count as that rollout's `retries`. `aggregate` groups rollouts by the
`scenario` and `item` fields of their metrics (absent: `default`) and reports, per group:
n, status counts, response latency (median, IQR, bootstrap CI of the median; p90 and p95
with percentile-bootstrap CIs), rates with Wilson intervals (pass rate of the category's
rule, interruption success per barge-in, backchannel rate per `backchannel` rollout; a
rollout whose rule could not tell, `pass: null` with a rule, is counted apart as `n_a` and
left out of the rate: rig.analysis.verdicts), and
the latency decomposition components when present. Per
scenario the CI resamples whole items (cluster bootstrap), so repeats of one item do not
pass for independent data.
Latencies come only from rollouts whose status is in `statuses` (default: `ok`) and whose
own timing held (`timing_valid` not false: rig.core.selfcheck); rollouts the rig judged
invalid are counted per group (`timing_invalid`) and shown, and kept out of every latency,
component and pass rate unless `include_invalid_timing`.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig.analysis.rollout import read_json
from rig.analysis.selfecho import run_rate
from rig.analysis.stats import median, rate, summarize, tail_percentiles
from rig.analysis.sweep import turn_taking
from rig.analysis.tagkeys import cluster_of, tags_of
from rig.analysis.verdicts import count_na, verdict_of
from rig.analysis.voicereport import voice_summary
from rig.errors import ConfigError
from rig.ids import count_retries, rollout_of_attempt

COMPONENTS: tuple[str, ...] = ("uplink_ms", "model_ms", "downlink_ms", "queue_ms")
#: endpointing vs generation (rig.analysis.endpoint), and where the system put the speech end
ENDPOINT_PARTS: tuple[str, ...] = ("detect_ms", "generation_ms", "speech_end_offset_ms")
DEFAULT = "default"


@dataclass(frozen=True, slots=True)
class RolloutMetrics:
    rollout_id: str
    status: str
    metrics: dict[str, Any]
    problem: str | None = None
    retries: int = 0  # earlier attempts moved aside as <id>.failed-N


@dataclass(frozen=True, slots=True)
class RunData:
    run_dir: Path
    manifest: dict[str, Any] | None
    rollouts: list[RolloutMetrics]


def load_run(run_dir: str | Path) -> RunData:
    root = Path(run_dir)
    if not root.is_dir():
        raise ConfigError(f"{root}: not a run directory")
    manifest = read_json(root / "manifest.json")
    rollouts: list[RolloutMetrics] = []
    base = root / "rollouts"
    dirs = sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
    retries = count_retries(d.name for d in dirs)
    for d in dirs:
        if rollout_of_attempt(d.name) is not None:
            continue
        n = retries.get(d.name, 0)
        path = d / "metrics.json"
        if not path.exists():
            rollouts.append(RolloutMetrics(d.name, "missing", {}, "no metrics.json", n))
            continue
        m = read_json(path)
        if m is None:
            problem = "metrics.json does not parse (or is not a JSON object)"
            rollouts.append(RolloutMetrics(d.name, "corrupt", {}, problem, n))
            continue
        status = m.get("status")
        status = status if isinstance(status, str) else "unknown"
        rollouts.append(RolloutMetrics(d.name, status, m, None, n))
    return RunData(root, manifest, rollouts)


def _label(m: dict[str, Any], key: str) -> str:
    v = m.get(key)
    return str(v) if v not in (None, "") else DEFAULT


def _latencies(m: dict[str, Any]) -> list[float]:
    out = []
    for r in m.get("responses") or []:
        if isinstance(r, dict) and isinstance(r.get("latency_ms"), int | float):
            out.append(float(r["latency_ms"]))
    return out


def _verdict(m: dict[str, Any]) -> bool | None:
    v = m.get("pass")
    if v is None and isinstance(m.get("timing"), dict):
        v = m["timing"].get("pass")
    return v if isinstance(v, bool) else None


def _component_values(m: dict[str, Any], key: str) -> tuple[list[float], list[float]]:
    vals, errs = [], []
    stem = key[: -len("_ms")]
    for r in m.get("responses") or []:
        if not isinstance(r, dict) or not isinstance(r.get(key), int | float):
            continue
        vals.append(float(r[key]))
        err = r.get(f"{stem}_err_ms", r.get(f"{key}_err_ms"))
        if isinstance(err, int | float):
            errs.append(float(err))
    return vals, errs


def timing_invalid(r: RolloutMetrics) -> bool:
    """The rig judged its own timing failed for this rollout (absent or null: not judged)."""
    return r.metrics.get("timing_valid") is False


def _methods(rows: list[RolloutMetrics], key: str) -> dict[str, int]:
    """How many of the group's values each method gave (`<part>_method` fields)."""
    field = f"{key[: -len('_ms')]}_method"
    counts: Counter[str] = Counter()
    for r in rows:
        for resp in r.metrics.get("responses") or []:
            if isinstance(resp, dict) and isinstance(resp.get(key), int | float):
                method = resp.get(field)
                if isinstance(method, str):
                    counts[method] += 1
    return dict(counts)


def _setting_order(entry: tuple[tuple[str, str], list[RolloutMetrics]]) -> tuple[Any, ...]:
    """Scenario, then the swept values themselves (numbers by value: 200 before 1000)."""
    (sc, label), rows = entry
    sweep = rows[0].metrics.get("sweep")
    values = sweep.values() if isinstance(sweep, dict) else [label]
    key = tuple(
        (0, v, "") if isinstance(v, int | float) and not isinstance(v, bool) else (1, 0, str(v))
        for v in values
    )
    return (sc, key)


def _group_report(
    rows: list[RolloutMetrics],
    statuses: Iterable[str],
    seed: int,
    per_item: bool,
    include_invalid: bool = False,
    cluster: str | None = None,
    **ci: Any,
) -> dict[str, Any]:
    keep = set(statuses)
    used = [r for r in rows if r.status in keep and (include_invalid or not timing_invalid(r))]
    lat: list[float] = []
    clusters: list[str] = []
    for r in used:
        vals = _latencies(r.metrics)
        lat += vals
        clusters += [_cluster(r, cluster)] * len(vals)
    verdicts = [v for v in (_verdict(r.metrics) for r in used) if v is not None]
    na = count_na(r.metrics for r in used)  # the rule could not tell: not in the rate
    valid = [v for r in rows if isinstance(v := r.metrics.get("timing_valid"), bool)]
    yielded, bc, yield_na = _event_rates(used)
    level = ci.get("confidence", 0.95)
    components: dict[str, Any] = {}
    for key in (*COMPONENTS, *ENDPOINT_PARTS):
        vals, errs = [], []
        for r in used:
            v, e = _component_values(r.metrics, key)
            vals += v
            errs += e
        if vals:
            s = summarize(vals, seed=seed, **ci)
            s["err_ms_median"] = median(errs)
            methods = _methods(used, key)
            if methods:
                s["methods"] = methods
            components[key] = s
    # one item: resampling whole items says nothing (a zero-width CI); its rollouts' spread is
    # all there is, as in the item's own row
    cl = None if per_item or len(set(clusters)) <= 1 else clusters
    latency = summarize(lat, seed=seed, clusters=cl, **ci)
    if lat:
        latency |= tail_percentiles(lat, seed=seed, clusters=cl, **ci)
    return {
        "n": len(rows),
        "status_counts": dict(Counter(r.status for r in rows)),
        "timing_invalid": sum(timing_invalid(r) for r in rows),
        # cut by a drain's cap or the rollout's while the system was still talking
        "censored": sum(r.metrics.get("censored") is True for r in rows),
        "latency_ms": latency,
        "n_items": len(set(_label(r.metrics, "item") for r in rows)),
        "pass": {**rate(sum(verdicts), len(verdicts), level), "n_a": na},
        "interruption_success": {**rate(sum(yielded), len(yielded), level), "n_a": yield_na},
        "backchannel_rate": rate(sum(bc), len(bc), level),
        # responses that yielded to their own echo (the echo condition; rig.analysis.selfecho)
        "self_interruption": rate(*run_rate([r.metrics for r in used]), level),
        "components": components,
        # did the rig's own timing hold (recorded per rollout by runs that check it)
        "timing_valid": {
            "evaluated": len(valid),
            "valid": sum(valid),
            "rate": (sum(valid) / len(valid)) if valid else None,
        },
    }


def _cluster(r: RolloutMetrics, tag: str | None) -> str:
    """What the bootstrap resamples: the item, or the value of a tag (`--cluster TAG`;
    a rollout without that tag is a cluster of its own)."""
    item = _label(r.metrics, "item")
    return cluster_of(tags_of(r.metrics), tag, item=item, rollout=r.rollout_id)


def _event_rates(used: list[RolloutMetrics]) -> tuple[list[bool], list[bool], int]:
    """Per barge-in: yielded within the rollout's yield_max_s (by its yield_from; a barge-in
    whose yield cannot be told is counted apart); per rollout of kind `backchannel`: at
    least one system backchannel."""
    yielded: list[bool] = []
    bc: list[bool] = []
    na = 0
    for r in used:
        t = r.metrics.get("timing")
        if not isinstance(t, dict) or "error" in t:
            continue
        raw = t.get("params")
        params: dict[str, Any] = raw if isinstance(raw, dict) else {}
        max_ms = 1000.0 * float(params.get("yield_max_s", 1.0))
        for y in t.get("yields") or []:
            if isinstance(y, dict) and "pass" in y:  # recorded: True, False or cannot tell
                if isinstance(y["pass"], bool):
                    yielded.append(y["pass"])
                else:
                    na += 1
            elif isinstance(y, dict):
                ms = y.get("yield_ms")
                yielded.append(isinstance(ms, int | float) and ms <= max_ms)
        if t.get("kind") == "backchannel":
            bc.append(bool(t.get("backchannels")))
    return yielded, bc, na


def aggregate(
    run: str | Path | RunData,
    *,
    statuses: Iterable[str] = ("ok",),
    seed: int | None = None,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    include_invalid_timing: bool = False,
    cluster: str | None = None,
) -> dict[str, Any]:
    """JSON-able report of a run directory. `seed` defaults to the manifest's seed (or 0).
    `cluster`: a tag whose values the scenario-level bootstraps resample (default: items)."""
    data = run if isinstance(run, RunData) else load_run(run)
    manifest = data.manifest or {}
    if seed is None:
        m_seed = manifest.get("seed")
        seed = m_seed if isinstance(m_seed, int) else 0
    statuses = tuple(statuses)
    ci: dict[str, Any] = {"confidence": confidence, "n_resamples": n_resamples, "cluster": cluster}
    inv = include_invalid_timing
    by_scenario: dict[str, list[RolloutMetrics]] = {}
    by_item: dict[tuple[str, str], list[RolloutMetrics]] = {}
    by_setting: dict[tuple[str, str], list[RolloutMetrics]] = {}
    for r in data.rollouts:
        sc, it = _label(r.metrics, "scenario"), _label(r.metrics, "item")
        by_scenario.setdefault(sc, []).append(r)
        by_item.setdefault((sc, it), []).append(r)
        if isinstance(r.metrics.get("setting"), str):  # rig run --sweep
            by_setting.setdefault((sc, r.metrics["setting"]), []).append(r)
    settings = [
        {
            "scenario": sc,
            "setting": st,
            **_group_report(rows, statuses, seed, False, inv, **ci),
            "turn_taking": turn_taking(r.metrics for r in rows if r.status in statuses),
        }
        for (sc, st), rows in sorted(by_setting.items(), key=_setting_order)
    ]
    return {
        "run_dir": str(data.run_dir),
        "run_id": manifest.get("run_id", data.run_dir.name),
        "seed": seed,
        "statuses_used": list(statuses),
        "manifest_ok": data.manifest is not None,
        "n_rollouts": len(data.rollouts),
        "status_counts": dict(Counter(r.status for r in data.rollouts)),
        "retries": {r.rollout_id: r.retries for r in data.rollouts if r.retries},
        "timing_invalid": sorted(r.rollout_id for r in data.rollouts if timing_invalid(r)),
        "timing_invalid_excluded": not inv,
        "cluster": cluster or "item",
        # the rule could not tell (pass null with a rule): counted apart, never a failure
        "cannot_tell": sorted(
            r.rollout_id
            for r in data.rollouts
            if r.status in statuses and verdict_of(r.metrics) == "n/a"
        ),
        "problems": [
            {"rollout": r.rollout_id, "status": r.status, "problem": r.problem}
            for r in data.rollouts
            if r.problem
        ],
        # every rollout as one group (CI resampled over items): what rig report's gates read
        "overall": _group_report(data.rollouts, statuses, seed, False, inv, **ci),
        "scenarios": [
            {"scenario": sc, **_group_report(rows, statuses, seed, False, inv, **ci)}
            for sc, rows in sorted(by_scenario.items())
        ],
        "items": [
            {"scenario": sc, "item": it, **_group_report(rows, statuses, seed, True, inv, **ci)}
            for (sc, it), rows in sorted(by_item.items())
        ],
        **({"settings": settings} if settings else {}),
        # reply level relative to the system's own, whisper verdicts (rig.analysis.voicereport)
        "voice": voice_summary(
            (r for r in data.rollouts if r.status in statuses and (inv or not timing_invalid(r))),
            confidence,
        ),
    }


# -- export ----------------------------------------------------------------------------------

CSV_FIELDS: tuple[str, ...] = (
    "scenario",
    "item",
    "n",
    "n_items",
    "status_counts",
    "n_latency",
    "latency_median_ms",
    "latency_p25_ms",
    "latency_p75_ms",
    "latency_iqr_ms",
    "latency_ci_low_ms",
    "latency_ci_high_ms",
    "latency_p90_ms",
    "latency_p95_ms",
    "pass_evaluated",
    "pass_rate",
    "pass_ci_low",
    "pass_ci_high",
    "pass_na",
    *(f"{c[:-3]}_median_ms" for c in COMPONENTS),
    *(f"{c[:-3]}_err_median_ms" for c in COMPONENTS),
    *(f"{c[:-3]}_{q}_ms" for c in ENDPOINT_PARTS for q in ("median", "iqr", "err_median")),
)


def csv_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per scenario (item `*`) and per scenario/item."""
    rows = []
    for g in report["scenarios"] + report["items"]:
        lat = g["latency_ms"]
        row: dict[str, Any] = {
            "scenario": g["scenario"],
            "item": g.get("item", "*"),
            "n": g["n"],
            "n_items": g["n_items"],
            "status_counts": ";".join(f"{k}={v}" for k, v in sorted(g["status_counts"].items())),
            "n_latency": lat["n"],
            "latency_median_ms": lat.get("median"),
            "latency_p25_ms": lat.get("p25"),
            "latency_p75_ms": lat.get("p75"),
            "latency_iqr_ms": lat.get("iqr"),
            "latency_ci_low_ms": lat.get("ci_low"),
            "latency_ci_high_ms": lat.get("ci_high"),
            "latency_p90_ms": lat.get("p90"),
            "latency_p95_ms": lat.get("p95"),
            "pass_evaluated": g["pass"]["evaluated"],
            "pass_rate": g["pass"]["rate"],
            "pass_ci_low": g["pass"].get("ci_low"),
            "pass_ci_high": g["pass"].get("ci_high"),
            "pass_na": g["pass"].get("n_a", 0),
        }
        for c in COMPONENTS:
            comp = g["components"].get(c, {})
            row[f"{c[:-3]}_median_ms"] = comp.get("median")
            row[f"{c[:-3]}_err_median_ms"] = comp.get("err_ms_median")
        for c in ENDPOINT_PARTS:
            comp = g["components"].get(c, {})
            row[f"{c[:-3]}_median_ms"] = comp.get("median")
            row[f"{c[:-3]}_iqr_ms"] = comp.get("iqr")
            row[f"{c[:-3]}_err_median_ms"] = comp.get("err_ms_median")
        rows.append(row)
    return rows


def to_csv(report: dict[str, Any]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(CSV_FIELDS), lineterminator="\n")
    w.writeheader()
    for row in csv_rows(report):
        w.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buf.getvalue()


def write_csv(report: dict[str, Any], path: str | Path) -> None:
    Path(path).write_text(to_csv(report), encoding="utf-8")


def write_json(report: dict[str, Any], path: str | Path) -> None:
    Path(path).write_text(json.dumps(report, indent=2, allow_nan=False) + "\n", encoding="utf-8")


# -- rendering -------------------------------------------------------------------------------
