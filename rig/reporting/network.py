"""`rig report`'s network tables: round trips per rollout and the split of every response.

Why its own tables: the decomposition table aggregates; these say per rollout how the path
was measured (ping/pong, TCP_INFO, RTCP, probes) and per response which method split it,
so a number is never read as more certain than it is.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

PARTS = ("uplink", "model", "downlink", "queue")


def _f(x: Any, nd: int = 1) -> str:
    return "-" if not isinstance(x, int | float) or isinstance(x, bool) else f"{x:.{nd}f}"


def rtt_table(rollouts: list[dict[str, Any]]) -> Table | None:
    """Per rollout and RTT source: count, min / p50 / p95 ms; pings lost; send backlog.
    None when no rollout measured a round trip."""
    t = Table(title="round trips (RTT, ms)", title_justify="left")
    for col in ("rollout", "source", "n", "min", "p50", "p95", "lost", "backlog max B"):
        t.add_column(col, justify="left" if col in ("rollout", "source") else "right")
    rows = 0
    for m in rollouts:
        fit = m.get("clock_fit")
        if not isinstance(fit, dict):
            continue
        by_source = fit.get("rtt_by_source")
        sources = dict(by_source) if isinstance(by_source, dict) else {}
        rtt = fit.get("rtt")
        if isinstance(rtt, dict) and rtt.get("count") and rtt.get("source") not in sources:
            sources = {str(rtt.get("source")): rtt, **sources}
        backlog = fit.get("send_backlog")
        back = backlog.get("max_bytes") if isinstance(backlog, dict) else None
        for i, (source, s) in enumerate(sources.items()):
            if not isinstance(s, dict) or not s.get("count"):
                continue
            rows += 1
            t.add_row(
                Text(str(m.get("rollout_id")) if i == 0 else ""),
                Text(source),
                str(s.get("count")),
                _f(s.get("rtt_min_ms"), 2),
                _f(s.get("rtt_p50_ms"), 2),
                _f(s.get("rtt_p95_ms"), 2),
                str(fit.get("pings_lost", "-")) if source == "ws_ping" else "",
                "-" if back is None or i else str(back),
            )
    return t if rows else None


def rtt_legend(rollouts: list[dict[str, Any]]) -> tuple[str, ...]:
    """Under the RTT table when the kernel's TCP_INFO RTT is in it: why it can read ~20 ms on
    loopback beside a sub-millisecond ws_ping (delayed ACKs of a mostly one-way stream)."""
    for m in rollouts:
        fit = m.get("clock_fit")
        by_source = fit.get("rtt_by_source") if isinstance(fit, dict) else None
        if isinstance(by_source, dict) and "tcp_info" in by_source:
            return (
                "tcp_info: the kernel's smoothed RTT, inflated by delayed ACKs while the "
                "stream flows mostly one way (~20 ms even on loopback); ws_ping and probe "
                "are round trips the rig timed itself; the split prefers them "
                "(docs/network.md)",
            )
    return ()


def turn_numbers(responses: list[Any]) -> dict[Any, int]:
    """The session log's turn index (which counts injections too: 0, 2) -> the user turn's
    number as the timing analysis counts them (0, 1), for display."""
    idx = sorted(
        {r["turn"] for r in responses if isinstance(r, dict) and isinstance(r.get("turn"), int)}
    )
    return {t: k for k, t in enumerate(idx)}


def split_table(rollouts: list[dict[str, Any]]) -> Table | None:
    """Per response: latency and its uplink / model / downlink / queue ± error, with the
    method (clock_method, and the round trips' source where RTT/2 split it)."""
    t = Table(title="network share per response (ms ± error)", title_justify="left")
    for col in ("rollout", "turn", "latency", *PARTS, "method"):
        t.add_column(col, justify="left" if col in ("rollout", "method") else "right")
    rows = 0
    for m in rollouts:
        responses = m.get("responses")
        responses = responses if isinstance(responses, list) else []
        number = turn_numbers(responses)
        for r in responses:
            if not isinstance(r, dict) or r.get("latency_ms") is None:
                continue
            rows += 1
            cells = []
            for p in PARTS:
                v, e = r.get(f"{p}_ms"), r.get(f"{p}_err_ms")
                cells.append("n/a" if v is None else f"{_f(v)} ±{_f(e)}")
            method = str(r.get("clock_method", "-"))
            if r.get("rtt_source"):
                method += f" ({r['rtt_source']}, RTT {_f(r.get('rtt_ms'))})"
            if r.get("send_backlog_ms"):
                method += f"; send backlog {_f(r['send_backlog_ms'])} ms"
            t.add_row(
                Text(str(m.get("rollout_id"))),
                str(number.get(r.get("turn"), r.get("turn", "-"))),
                _f(r.get("latency_ms")),
                *cells,
                Text(method),
            )
    return t if rows else None
