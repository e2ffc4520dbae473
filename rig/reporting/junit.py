"""JUnit XML for CI: one test case per rollout, and one per gate.

A rollout that did not finish (`error`, `write_error`, `missing`, ...) is an `<error>`; one
that finished but failed its timing rule (or heard no audio) is a `<failure>` with the rule;
`timing_valid: false` (the rig's own timing did not hold) is a failure too, since its numbers
cannot be trusted. A rule that cannot tell for this system (`pass: null`, docs/metrics.md)
is `<skipped>` with its reason: neither a pass nor a failure. Gates go in their own suite,
`rig.gates`. Every text comes from files and
peers: ElementTree escapes it, and characters XML cannot carry are replaced.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from rig.analysis.gates import GateResult
from rig.analysis.tables import timing_reason
from rig.analysis.verdicts import NA, na_reason, verdict_of
from rig.status import is_done

#: XML 1.0 cannot carry these (a server's error text might)
_BAD_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _text(x: Any) -> str:
    return _BAD_XML.sub("\ufffd", str(x))


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _verdict(m: dict[str, Any]) -> tuple[str, str, str] | None:
    """(element, type, message) for a rollout that is not a pass, None for a pass."""
    status = str(m.get("status", "unknown"))
    reason = m.get("reason")
    timing = m.get("timing") if isinstance(m.get("timing"), dict) else {}
    rule = timing.get("rule") if isinstance(timing, dict) else None
    passed = m.get("pass", timing.get("pass") if isinstance(timing, dict) else None)
    if not is_done(status):
        return "error", status, f"{status}: {reason}" if reason else status
    if status == "no_audio":
        return "failure", "no_audio", reason or "the system sent no audio"
    if m.get("timing_valid") is False:
        why = timing_reason(m) or "the rig's own timing did not hold"
        return "failure", "timing_invalid", str(why)
    if passed is False:
        return "failure", "timing_rule", str(rule or "the item's timing rule failed")
    if verdict_of(m) == NA:  # the rule cannot tell for this system: not a pass, not a fail
        return "skipped", "cannot_tell", str(na_reason(m))
    return None


def _duration_s(m: dict[str, Any]) -> float:
    up = m.get("uplink") if isinstance(m.get("uplink"), dict) else {}
    return _num(up.get("audio_s") if isinstance(up, dict) else None) or 0.0


def build_junit(
    rollouts: list[dict[str, Any]],
    gates: list[GateResult] | None = None,
    *,
    run_id: str = "",
    extra_suites: list[ET.Element] | None = None,
) -> ET.Element:
    """`extra_suites` (the scorers' suites, rig.scoring.render) are appended as they are."""
    root = ET.Element("testsuites", name=_text(f"rig run {run_id}".strip()))
    suites: dict[str, list[dict[str, Any]]] = {}
    for m in rollouts:
        suites.setdefault(str(m.get("scenario") or "default"), []).append(m)
    for scenario, ms in sorted(suites.items()):
        suite = ET.SubElement(root, "testsuite", name=_text(f"rig.{scenario}"))
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        total_s = 0.0
        for m in ms:
            dur = _duration_s(m)
            total_s += dur
            case = ET.SubElement(
                suite,
                "testcase",
                classname=_text(f"rig.{scenario}"),
                name=_text(m.get("rollout_id")),
                time=f"{dur:.3f}",
            )
            counts["tests"] += 1
            raw_tags = m.get("tags")
            tags: dict[str, Any] = raw_tags if isinstance(raw_tags, dict) else {}
            if tags or m.get("censored"):
                props = ET.SubElement(case, "properties")
                for k, tv in sorted(tags.items()):
                    ET.SubElement(props, "property", name=_text(f"tag.{k}"), value=_text(tv))
                if m.get("censored"):
                    ET.SubElement(props, "property", name="censored", value="true")
            v = _verdict(m)
            if v is not None:
                tag, kind, message = v
                el = ET.SubElement(case, tag, type=_text(kind), message=_text(message))
                el.text = _text(message)
                if tag != "skipped":
                    counts["failures" if tag == "failure" else "errors"] += 1
                else:
                    counts["skipped"] += 1
            lat = [
                r.get("latency_ms")
                for r in (m.get("responses") or [])
                if isinstance(r, dict) and _num(r.get("latency_ms")) is not None
            ]
            out = ET.SubElement(case, "system-out")
            out.text = _text(
                f"status={m.get('status')} latency_ms={lat} pass={m.get('pass')} "
                f"timing_valid={m.get('timing_valid')}"
                + "".join(f" tag.{k}={tv}" for k, tv in sorted(tags.items()))
            )
        suite.set("tests", str(counts["tests"]))
        suite.set("failures", str(counts["failures"]))
        suite.set("errors", str(counts["errors"]))
        suite.set("skipped", str(counts["skipped"]))
        suite.set("time", f"{total_s:.3f}")
    if gates:
        suite = ET.SubElement(root, "testsuite", name="rig.gates")
        failed = 0
        for g in gates:
            case = ET.SubElement(suite, "testcase", classname="rig.gates", name=g.gate.describe())
            if not g.passed:
                failed += 1
                el = ET.SubElement(case, "failure", type="gate", message=_text(g.line()))
                el.text = _text(g.line())
        suite.set("tests", str(len(gates)))
        suite.set("failures", str(failed))
        suite.set("errors", "0")
    root.extend(extra_suites or [])
    return root


def write_junit(
    path: str | Path,
    rollouts: list[dict[str, Any]],
    gates: list[GateResult] | None = None,
    *,
    run_id: str = "",
    extra_suites: list[ET.Element] | None = None,
) -> None:
    tree = ET.ElementTree(build_junit(rollouts, gates, run_id=run_id, extra_suites=extra_suites))
    ET.indent(tree)
    tree.write(Path(path), encoding="utf-8", xml_declaration=True)
