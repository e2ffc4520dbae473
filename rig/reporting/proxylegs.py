"""`rig report` on a `rig proxy` run: the latency each client saw, split into its legs.

metrics.json of a proxied connection carries `client_seen_latency_ms` and its parts
(rig.analysis.proxysplit); without this table they were in the JSON only, and they are the
proxy's headline numbers: what the client's user waited, and where that time went.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

#: under the table: what each leg is (docs/proxy.md)
LEGEND = (
    "client-seen: the client's wait, end of speech to reply onset, as the client heard it · "
    "client leg: client <-> proxy (RTT/2 each way) · proxy: the proxy's own forwarding · "
    "upstream leg: proxy <-> system · system: the rest (docs/proxy.md)",
)


def _f(x: Any, nd: int = 1) -> str:
    return "-" if not isinstance(x, int | float) or isinstance(x, bool) else f"{x:.{nd}f}"


def proxy_table(rollouts: list[dict[str, Any]]) -> Table | None:
    """Per proxied response: client-seen latency ± error and its legs, ms. None when no
    response of the run was seen through the proxy."""
    t = Table(title="client-seen latency through rig proxy (ms)", title_justify="left")
    for col in ("rollout", "turn", "client-seen", "client leg", "proxy", "upstream leg", "system"):
        t.add_column(col, justify="left" if col == "rollout" else "right")
    rows = 0
    for m in rollouts:
        responses = m.get("responses")
        for r in responses if isinstance(responses, list) else []:
            if not isinstance(r, dict) or "client_seen_latency_ms" not in r:
                continue
            rows += 1
            seen = r.get("client_seen_latency_ms")
            if seen is None:
                cells = [Text(str(r.get("client_leg_reason") or "not measured"))] + [""] * 4
            else:
                cells = [
                    Text(f"{_f(seen)} ±{_f(r.get('client_seen_err_ms'))}"),
                    Text(f"{_f(r.get('client_leg_ms'))} ±{_f(r.get('client_leg_err_ms'))}"),
                    Text(_f(r.get("proxy_ms"), 2)),
                    Text(_f(r.get("upstream_leg_ms"))),
                    Text(_f(r.get("system_ms"))),
                ]
            t.add_row(Text(str(m.get("rollout_id"))), str(r.get("turn", "-")), *cells)
    return t if rows else None
