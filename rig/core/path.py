"""What the transport measured about the path, kept from the `net.*` / `rtcp.rr` events.

Why a separate accumulator: the listener sees every event; round trips and send backlog are
not conversation, so they are picked out here into plain records (`RttSample`,
`SendBacklog`) that the session log freezes and the latency split reads
(rig.analysis.netsplit). Malformed values are skipped (the event is still recorded).
"""

from __future__ import annotations

import math
from typing import Any

from rig.core.events import DownEvent
from rig.core.records import RttSample, SendBacklog
from rig.core.units import NS_PER_MS

#: an RTT above this is not a measurement of a live path (10 minutes)
MAX_RTT_MS = 600_000.0


def _ms_ns(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0 or value > MAX_RTT_MS:
        return None
    return round(value * NS_PER_MS)


class PathLog:
    """Round trips by source and the uplink send backlog over one rollout."""

    def __init__(self) -> None:
        self.rtt: list[RttSample] = []
        self.backlog: list[SendBacklog] = []
        self.pings_lost = 0

    def on_event(self, item: DownEvent) -> None:
        data = item.data
        if item.kind == "net.rtt":
            if data.get("lost") is True:
                self.pings_lost += 1
                return
            rtt = _ms_ns(data.get("rtt_ms"))
            if rtt is not None:
                self.rtt.append(RttSample(item.t_ns, rtt, str(data.get("source", "ws_ping"))))
        elif item.kind == "net.tcp":
            srtt = _ms_ns(data.get("srtt_ms"))
            if srtt is not None and srtt > 0:  # 0: no ACK yet, no estimate
                self.rtt.append(RttSample(item.t_ns, srtt, "tcp_info"))
            backlog = data.get("backlog_bytes")
            rate = data.get("delivery_rate_bps")
            if isinstance(backlog, int) and not isinstance(backlog, bool) and backlog >= 0:
                ok_rate = isinstance(rate, int) and not isinstance(rate, bool) and rate > 0
                self.backlog.append(SendBacklog(item.t_ns, backlog, rate if ok_rate else None))
        elif item.kind == "rtcp.rr":
            rtt = _ms_ns(data.get("rtt_ms"))
            if rtt is not None:
                self.rtt.append(RttSample(item.t_ns, rtt, "rtcp"))
