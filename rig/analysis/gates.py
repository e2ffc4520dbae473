"""CI gates on a run report: `pass_rate>=0.9`, `latency_p95_ms<=1200`, one line per failure.

`gate_values(report)` names every number a gate can read, from the aggregate's `overall`
group (all rollouts; latencies from the statuses the report counts); `check_gates` compares.
A gate whose value does not exist (no responses, no timing verdicts) fails: a CI gate that
passes because nothing was measured would hide the problem it exists to catch. Rollouts whose
rule could not tell (`n/a`, rig.analysis.verdicts) are missing data, not failures: left out
of `pass_rate`, counted in `n_na`, and every pass-rate gate's line says how many.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rig.errors import ConfigError

STATS = ("median", "p25", "p75", "p90", "p95", "p99", "mean", "min", "max")
SPLIT = ("uplink", "model", "downlink", "queue")


@dataclass(frozen=True, slots=True)
class Gate:
    metric: str
    op: str  # ">=" (--fail-under: fail when below) or "<=" (--max: fail when above)
    threshold: float

    def describe(self) -> str:
        return f"{self.metric} {self.op} {self.threshold:g}"


@dataclass(frozen=True, slots=True)
class GateResult:
    gate: Gate
    value: float | None
    passed: bool
    note: str | None = None  # what the value left out (n/a rollouts)

    def line(self) -> str:
        got = "no value (nothing measured)" if self.value is None else f"{self.value:.6g}"
        verdict = "ok" if self.passed else "FAILED"
        return (
            f"gate {verdict}: {self.gate.metric} = {got}, wanted {self.gate.op} "
            f"{self.gate.threshold:g}" + (f" ({self.note})" if self.note else "")
        )


def _num(x: Any) -> float | None:
    ok = isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
    return float(x) if ok else None


def gate_values(report: dict[str, Any]) -> dict[str, float | None]:
    """Every gate metric of a report (rig.analysis.aggregate) -> its value or None."""
    g = report.get("overall") or {}
    counts: dict[str, int] = report.get("status_counts") or {}
    n = int(report.get("n_rollouts") or 0)
    ok = counts.get("ok", 0)
    out: dict[str, float | None] = {
        "n_rollouts": float(n),
        "n_ok": float(ok),
        "n_not_ok": float(n - ok),
        "ok_rate": ok / n if n else None,
        "pass_rate": _num((g.get("pass") or {}).get("rate")),
        "n_na": float((g.get("pass") or {}).get("n_a") or 0),
        "timing_valid_rate": _num((g.get("timing_valid") or {}).get("rate")),
        # only runs with an echo condition have it (rig.analysis.selfecho)
        "self_interruption_rate": _num((g.get("self_interruption") or {}).get("rate")),
    }
    voice = report.get("voice") or {}
    out["whisper_rate"] = _num((voice.get("whisper") or {}).get("rate"))
    out["lowered_rate"] = _num((voice.get("lowered") or {}).get("rate"))
    out["reply_rel_db_median"] = _num(voice.get("conditioned_rel_db_median"))
    lat = g.get("latency_ms") or {}
    out["n_responses"] = float(lat.get("n") or 0)
    for st in STATS:
        out[f"latency_{st}_ms"] = _num(lat.get(st))
    out["latency_p50_ms"] = out["latency_median_ms"]
    comps = g.get("components") or {}
    for c in SPLIT:
        comp = comps.get(f"{c}_ms") or {}
        for st in STATS:
            out[f"{c}_{st}_ms"] = _num(comp.get(st))
        out[f"{c}_p50_ms"] = out[f"{c}_median_ms"]
    return out


def parse_gate(text: str, op: str, flag: str, known: set[str]) -> Gate:
    """`METRIC=NUMBER` -> a Gate; a usage error names the flag and the metrics there are."""
    metric, eq, raw = text.partition("=")
    metric = metric.strip()
    if not eq or not metric:
        raise ConfigError(f"{flag} wants METRIC=NUMBER (e.g. pass_rate=0.9), got {text!r}")
    if metric not in known:
        raise ConfigError(f"{flag}: unknown metric {metric!r}; known: {', '.join(sorted(known))}")
    try:
        threshold = float(raw)
    except ValueError:
        raise ConfigError(f"{flag} {metric}: {raw!r} is not a number") from None
    if not math.isfinite(threshold):
        raise ConfigError(f"{flag} {metric}: the threshold must be finite, got {raw!r}")
    return Gate(metric, op, threshold)


def parse_gates(fail_under: list[str] | None, maximum: list[str] | None) -> list[Gate]:
    known = set(gate_values({}))
    return [parse_gate(t, ">=", "--fail-under", known) for t in fail_under or []] + [
        parse_gate(t, "<=", "--max", known) for t in maximum or []
    ]


def gate_notes(report: dict[str, Any]) -> dict[str, str]:
    """What a gate's value leaves out, by metric: the rollouts whose rule could not tell."""
    na = int(((report.get("overall") or {}).get("pass") or {}).get("n_a") or 0)
    if not na:
        return {}
    what = (
        f"{na} rollout{'s' if na != 1 else ''} n/a: the rule cannot tell, left out as missing data"
    )
    return {"pass_rate": what}


def check_gates(report: dict[str, Any], gates: list[Gate]) -> list[GateResult]:
    values = gate_values(report)
    notes = gate_notes(report)
    out = []
    for gate in gates:
        v = values.get(gate.metric)
        if v is None:
            passed = False
        elif gate.op == ">=":
            passed = v >= gate.threshold
        else:
            passed = v <= gate.threshold
        out.append(GateResult(gate, v, passed, notes.get(gate.metric)))
    return out
