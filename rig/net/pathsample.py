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

`sample_now(emit)` is the same sample without awaiting, for the session's tick
(rig.sessionchores): the TCP state and a ping written at once (`ping_now`, the caller's
non-waiting write); the connection hands each pong to `pong()` as it comes off the socket,
which emits its `net.rtt` there, and a ping still unanswered `ping_timeout_s` later is
emitted as lost at the next sample. The records are the same as `sample()`'s.

Not tied to a session: the recording proxy can run one per leg.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
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
    #: called with each pong's payload and arrival stamp; True: taken (not kept in pong_ns)
    on_pong: Callable[[bytes, int], bool] | None

    async def ping(self, data: bytes | None = None) -> Awaitable[float]: ...

    @property
    def transport(self) -> asyncio.Transport: ...


class PathSampler:
    """One connection's ping round trips and TCP state, one sample per call."""

    def __init__(
        self,
        conn: PongStamps,
        clock: Clock,
        *,
        ping_timeout_s: float = 5.0,
        ping_now: Callable[[bytes], bool] | None = None,
    ) -> None:
        self.conn = conn
        self.clock = clock
        self.ping_timeout_s = ping_timeout_s
        self.next_id = 0
        self.sent = 0
        self.lost = 0
        self._ping_now = ping_now
        #: pings written by `sample_now` and not answered yet: payload -> (id, send stamp)
        self._pending: dict[bytes, tuple[int, int]] = {}
        self._emit: Callable[[list[DownEvent]], None] | None = None

    async def sample(self) -> list[DownEvent]:
        """TCP state now, then one ping round trip (waits for its pong up to the timeout)."""
        out: list[DownEvent] = []
        tcp = self.tcp_event()
        if tcp is not None:
            out.append(tcp)
        return out + await self.round_trip()

    def sample_now(self, emit: Callable[[list[DownEvent]], None]) -> bool:
        """`sample()` without waiting: pings unanswered past the timeout emitted as lost,
        the TCP state emitted, a ping written now; its `net.rtt` is emitted by `pong()`.
        False: the ping cannot be written now (nothing of it sent; the TCP state and the
        lost pings were emitted): the caller awaits `round_trip()` for it instead."""
        if self._ping_now is None:
            return False
        self._emit = emit
        now = self.clock.now_ns()
        timeout_ns = round(self.ping_timeout_s * 1e9)
        lost = [p for p, (_, t) in self._pending.items() if now - t >= timeout_ns]
        out = [self._lost_event(self._pending.pop(p)[0], now) for p in lost]
        tcp = self.tcp_event()
        if tcp is not None:
            out.append(tcp)
        if out:
            emit(out)
        k = self.next_id
        payload = PING_PREFIX + str(k).encode()
        t_send = self.clock.now_ns()
        try:
            if not self._ping_now(payload):
                return False
        except Exception:  # noqa: BLE001 - a closed connection: the receive loop reports it
            return True
        self.next_id += 1
        self.sent += 1
        self._pending[payload] = (k, t_send)
        return True

    def pong(self, payload: bytes, t_ns: int) -> bool:
        """A pong came off the socket at `t_ns`: the `net.rtt` of its ping (and of earlier
        pings still unanswered: a peer may answer only the latest), emitted at once. False:
        not one of `sample_now`'s pings."""
        got = self._pending.pop(payload, None)
        if got is None:
            return False
        k = got[0]
        answered = [got, *(v for v in self._pending.values() if v[0] < k)]
        self._pending = {p: v for p, v in self._pending.items() if v[0] > k}
        if self._emit is not None:
            self._emit([self._rtt_event(i, t_send, t_ns) for i, t_send in answered])
        return True

    def _lost_event(self, k: int, t_ns: int) -> DownEvent:
        self.lost += 1
        data: dict[str, Any] = {"source": SOURCE_PING, "id": k, "lost": True}
        return DownEvent("net.rtt", t_ns, data, source="rig")

    def _rtt_event(self, k: int, t_send: int, t_pong: int) -> DownEvent:
        rtt_ns = max(0, t_pong - t_send)
        data = {
            "source": SOURCE_PING,
            "id": k,
            "t_send_ns": t_send,
            "rtt_ms": round(rtt_ns / NS_PER_MS, 4),
        }
        return DownEvent("net.rtt", t_pong, data, source="rig")

    async def round_trip(self) -> list[DownEvent]:
        """One ping round trip, awaited (its pong up to the timeout): `net.rtt`."""
        out: list[DownEvent] = []
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
            self.conn.pong_ns.pop(payload, None)
            out.append(self._lost_event(k, self.clock.now_ns()))
            return out
        except Exception:  # noqa: BLE001 - a closed connection: the receive loop reports it
            return out
        t_pong = self.conn.pong_ns.pop(payload, None)
        if t_pong is None:  # acknowledged by a later pong (websockets acks in order)
            t_pong = self.clock.now_ns()
        out.append(self._rtt_event(k, t_send, t_pong))
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
