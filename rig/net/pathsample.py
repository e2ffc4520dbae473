"""Round trips and send-side queueing of one WebSocket connection, with no help from the
server: WebSocket ping/pong (every compliant server answers a ping) and the kernel's TCP_INFO.

How this works
--------------
Each `sample()` sends one ping carrying its own id (`rig-rtt-<k>`), stamped on the shared
clock just before it is written; the connection stamps the pong when its bytes come off the
socket (`PongStamps.pong_ns`, filled in `data_received`, so a busy event loop does not add to
the round trip). The same call reads TCP_INFO and SIOCOUTQ (one syscall each) plus the bytes
asyncio still holds in user space: together, how much uplink data waits to leave. Results are
`DownEvent`s of source "rig" (`net.rtt`, `net.tcp`): the listener keeps them in the session
log and they land in events.jsonl like everything else.

Not tied to a session: the recording proxy can run one per leg.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, Protocol

from rig.clock.base import Clock
from rig.core.events import DownEvent
from rig.core.units import NS_PER_MS
from rig.net.tcpinfo import read_tcp_info, send_queue_bytes

PING_PREFIX = b"rig-rtt-"
SOURCE_PING = "ws_ping"
SOURCE_TCP = "tcp_info"


class PongStamps(Protocol):
    """A websockets connection that stamps pongs on arrival (rig.transports.websocket)."""

    pong_ns: dict[bytes, int]

    async def ping(self, data: bytes | None = None) -> Awaitable[float]: ...

    @property
    def transport(self) -> asyncio.Transport: ...


class PathSampler:
    """One connection's ping round trips and TCP state, one sample per call."""

    def __init__(self, conn: PongStamps, clock: Clock, *, ping_timeout_s: float = 5.0) -> None:
        self.conn = conn
        self.clock = clock
        self.ping_timeout_s = ping_timeout_s
        self.next_id = 0
        self.sent = 0
        self.lost = 0

    async def sample(self) -> list[DownEvent]:
        """TCP state now, then one ping round trip (waits for its pong up to the timeout)."""
        out: list[DownEvent] = []
        tcp = self.tcp_event()
        if tcp is not None:
            out.append(tcp)
        k = self.next_id
        self.next_id += 1
        payload = PING_PREFIX + str(k).encode()
        t_send = self.clock.now_ns()
        try:
            waiter = await self.conn.ping(payload)
            self.sent += 1
            # asyncio.timeout, not wait_for: 3.11's wait_for returns the result and drops a
            # cancel that lands as the pong arrives, and the session's path task then ran on
            # for ever at its close (a rollout hung in CI)
            async with asyncio.timeout(self.ping_timeout_s):
                await asyncio.shield(waiter)
        except TimeoutError:
            self.lost += 1
            self.conn.pong_ns.pop(payload, None)
            data: dict[str, Any] = {"source": SOURCE_PING, "id": k, "lost": True}
            out.append(DownEvent("net.rtt", self.clock.now_ns(), data, source="rig"))
            return out
        except Exception:  # noqa: BLE001 - a closed connection: the receive loop reports it
            return out
        t_pong = self.conn.pong_ns.pop(payload, None)
        if t_pong is None:  # acknowledged by a later pong (websockets acks in order)
            t_pong = self.clock.now_ns()
        rtt_ns = max(0, t_pong - t_send)
        data = {
            "source": SOURCE_PING,
            "id": k,
            "t_send_ns": t_send,
            "rtt_ms": round(rtt_ns / NS_PER_MS, 4),
        }
        out.append(DownEvent("net.rtt", t_pong, data, source="rig"))
        return out

    def tcp_event(self) -> DownEvent | None:
        """`net.tcp`: the kernel's RTT estimate and what still waits to be sent (None: no
        TCP socket under this connection, e.g. a Unix socket)."""
        try:
            transport = self.conn.transport
            sock = transport.get_extra_info("socket")
        except Exception:  # noqa: BLE001 - no transport: nothing to read
            return None
        if sock is None:  # asyncio hands a TransportSocket: a socket.socket look-alike
            return None
        t_ns = self.clock.now_ns()
        info = read_tcp_info(sock)
        if info is None:
            return None
        app = transport.get_write_buffer_size()
        outq = send_queue_bytes(sock)
        notsent = info.notsent_bytes
        data: dict[str, Any] = {
            "source": SOURCE_TCP,
            "srtt_ms": info.rtt_us / 1000,
            "rttvar_ms": info.rttvar_us / 1000,
            "min_rtt_ms": None if info.min_rtt_us is None else info.min_rtt_us / 1000,
            "retransmits": info.retransmits,
            "total_retrans": info.total_retrans,
            "lost": info.lost,
            "unacked": info.unacked,
            "notsent_bytes": notsent,
            "send_queue_bytes": outq,
            "app_buffer_bytes": app,
            # bytes the rig handed over that have not left: asyncio's buffer + kernel unsent
            "backlog_bytes": app + (notsent or 0),
            "delivery_rate_bps": info.delivery_rate_bps,
        }
        return DownEvent("net.tcp", t_ns, data, source="rig")
