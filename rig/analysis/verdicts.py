"""Verdicts of a rollout's rule: pass, fail, or "cannot tell" (n/a), and the words for each.

Why: a rule whose measure does not exist for a rollout cannot fail it. A system that sends
its whole reply before the barge-in and no acknowledgement shows no yield in its stream,
whether it honoured the barge-in or not; calling that `fail` puts it beside a system that
talked on for six seconds. Such a rollout records `pass: null` with the reason, reports count
it apart (`n/a`), pass rates leave it out, and gates treat it as missing data.

`verdict_of(metrics)` reads any metrics.json: `"pass"`, `"fail"`, `"n/a"` (the item has a
rule and it could not tell), or None (no rule: `kind` free, or no timing analysis). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

PASS, FAIL, NA = "pass", "fail", "n/a"


def interruption_verdict(
    yields: Sequence[dict[str, Any]], yield_from: str, yield_max_s: float
) -> tuple[bool | None, str]:
    """The `interruption` rule over its barge-ins: fail if any yield measured too slow or
    not at all where it could be; else "cannot tell" if any measure cannot exist; else pass.
    (Yields from before `pass` was recorded: a missing yield fails, as it did then.)"""
    head = f"interruption: system yields within {yield_max_s:g} s of barge-in"
    ys = [y.get("yield_ms") for y in yields]
    verdicts = [y.get("pass", _legacy(y, yield_max_s)) for y in yields]
    why = "; ".join(str(y["why_none"]) for y in yields if y.get("why_none"))
    if any(v is False for v in verdicts) or (verdicts and all(v is True for v in verdicts)):
        ok = all(v is True for v in verdicts)
        return ok, f"{head} ({yield_from}: {ys}{'; ' + why if why else ''})"
    hint = _ack_hint(yields, yield_from)
    return None, f"{head}: cannot tell by {yield_from}: {why or 'no measure'}{hint}"


def _legacy(y: dict[str, Any], yield_max_s: float) -> bool | None:
    if y.get("why_none") == "no received.wav":
        return None
    ms = y.get("yield_ms")
    return isinstance(ms, int | float) and ms <= yield_max_s * 1000.0


def _ack_hint(yields: Sequence[dict[str, Any]], yield_from: str) -> str:
    """Where the stream cannot tell but the server acknowledged: say how to judge it."""
    if yield_from == "ack":
        return ""
    acks = [(y.get("ack") or {}).get("yield_ms") for y in yields]
    if acks and all(isinstance(a, int | float) for a in acks):
        return f" (the server acknowledged after {acks} ms: judge by rules yield_from = 'ack')"
    return " (no acknowledgement from the server either: docs/metrics.md, who can be judged how)"


def _timing(m: dict[str, Any]) -> dict[str, Any] | None:
    t = m.get("timing")
    return t if isinstance(t, dict) else None


def verdict_of(m: dict[str, Any]) -> str | None:
    """`pass`, `fail`, `n/a` (the rule could not tell) or None (no rule, no analysis)."""
    v = m.get("pass")
    t = _timing(m)
    if v is None and t is not None:
        v = t.get("pass")
    if v is True:
        return PASS
    if v is False:
        return FAIL
    if t is None or "error" in t or t.get("kind") in (None, "free"):
        return None
    return NA


def na_reason(m: dict[str, Any]) -> str | None:
    """Why the rule could not tell (its `rule` text), for a rollout whose verdict is n/a."""
    if verdict_of(m) != NA:
        return None
    t = _timing(m) or {}
    return str(t.get("rule") or "cannot tell")


def count_na(rows: Iterable[dict[str, Any]]) -> int:
    return sum(1 for m in rows if verdict_of(m) == NA)
