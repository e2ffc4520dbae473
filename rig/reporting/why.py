"""Why a run is not ok, in words: one line per rollout that is not, and one for the exit code.

Why: a run can fail while every status reads `ok` (the rig's own timing was flagged), and
an `assert result.ok, result.statuses` then prints nothing useful. `rollout_why` gives the
one-line reason of a rollout (its status and reason, or the timing flag with its reasons);
`exit_line` says why the run exits as it does, e.g. "exit 3: 1 rollout analysis_error; 2
rollouts flagged for the rig's own timing (ask for fewer at once)". The CLI prints it last,
`rig.RunResult` carries both. Pure: metrics dicts in, text out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from rig.analysis.tables import timing_reason

#: at most this many rollout lines; the rest are counted
MAX_LINES = 20


def rollout_why(m: dict[str, Any]) -> str | None:
    """The reason this rollout is not ok (None when it is)."""
    status = str(m.get("status", "unknown"))
    reason = m.get("reason")
    if status != "ok":
        return f"{status}: {reason}" if reason else status
    if m.get("timing_valid") is False:
        why = timing_reason(m) or "no reason recorded"
        return f"flagged for the rig's own timing ({why})"
    return None


def _n(k: int, what: str) -> str:
    return f"{k} rollout{'s' if k != 1 else ''} {what}"


def exit_reasons(
    rollouts: Sequence[dict[str, Any]], *, stop_reason: str | None = None, expected: int = 0
) -> list[str]:
    """Each cause of a non-zero exit (empty: the run is ok)."""
    out: list[str] = []
    if stop_reason:
        out.append(f"the run stopped early ({stop_reason})")
    counts = Counter(str(m.get("status", "unknown")) for m in rollouts)
    out += [_n(k, status) for status, k in sorted(counts.items()) if status != "ok"]
    flagged = sum(1 for m in rollouts if m.get("status") == "ok" and m.get("timing_valid") is False)
    if flagged:
        out.append(_n(flagged, "flagged for the rig's own timing (ask for fewer at once)"))
    if expected > len(rollouts):
        out.append(_n(expected - len(rollouts), "never finished"))
    return out


def exit_line(
    code: int,
    rollouts: Sequence[dict[str, Any]],
    *,
    stop_reason: str | None = None,
    expected: int = 0,
) -> str:
    """The last line of `rig run`: the exit code and why."""
    reasons = exit_reasons(rollouts, stop_reason=stop_reason, expected=expected)
    if code == 0 or not reasons:
        n = len(rollouts)
        done = ("all " if n > 1 else "") + _n(n, "ok")
        return f"exit {code}: " + ("the run did not succeed" if code else done)
    return f"exit {code}: " + "; ".join(reasons)


def why_text(
    rollouts: Sequence[dict[str, Any]], *, stop_reason: str | None = None, expected: int = 0
) -> str:
    """What is wrong with a run, one line each: the exit line's causes, then every rollout
    that is not ok with its reason (empty when the run is ok)."""
    reasons = exit_reasons(rollouts, stop_reason=stop_reason, expected=expected)
    if not reasons:
        return ""
    lines = ["; ".join(reasons)]
    bad = [(str(m.get("rollout_id")), w) for m in rollouts if (w := rollout_why(m)) is not None]
    lines += [f"{rid}: {w}" for rid, w in bad[:MAX_LINES]]
    if len(bad) > MAX_LINES:
        lines.append(f"... and {len(bad) - MAX_LINES} more")
    return "\n".join(lines)
