"""The reference system's WebSocket downlink: replies through a delay line, in order.

Why a module of its own: the sim's per-chunk cost shares the cores with the rig on one
machine (issue #32), so a reply goes out with as little as possible in between. When the
line holds nothing (no simulated delay, nothing queued before it) and the socket takes the
message without waiting, it is framed and written where it was made (websockets' sans-I/O
protocol, rig.transports.wssend): no queue, no task step, no timer. Otherwise it waits in a
bounded queue for `run`, which sleeps until its release and sends, keeping the order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from rig.clock.base import Clock
from rig.errors import ProtocolError
from rig.sim.netdelay import DelayLine
from rig.transports.wssend import can_write_now, send_message, write_now

Make = Callable[[], str | bytes]
#: what happens once a reply is out (its truth record); None: nothing
Sent = Callable[[dict[str, Any] | None], None]


class Downlink:
    def __init__(
        self, ws: ServerConnection, line: DelayLine, clock: Clock, maxsize: int, sent: Sent
    ) -> None:
        self.ws = ws
        self.line = line
        self.clock = clock
        self._sent = sent
        # bounded (a probe flood): full means the client floods requests, a protocol error
        self.q: asyncio.Queue[tuple[int, Make, dict[str, Any] | None] | None] = asyncio.Queue(
            maxsize=maxsize
        )
        self.held = 0  # replies queued or being sent (a later one must not overtake them)

    def send_later(self, t_ns: int, make: Make, truth: dict[str, Any] | None = None) -> None:
        """Out at the line's release of `t_ns`: now if nothing is held, else queued."""
        release = self.line.release_ns(t_ns)
        if self.held == 0 and release <= self.clock.now_ns() and can_write_now(self.ws):
            try:
                write_now(self.ws, [make()])
            except ConnectionClosed:
                return  # the reader sees the close
            self._sent(truth)
            return
        try:
            self.q.put_nowait((release, make, truth))
        except asyncio.QueueFull:
            raise ProtocolError(
                f"more than {self.q.maxsize} replies pending: the client floods requests"
            ) from None
        self.held += 1

    async def run(self) -> None:
        """Send what was queued, each at its release, in order (cancelled at the end)."""
        while True:
            item = await self.q.get()
            if item is None:
                return
            release, make, truth = item
            if release > self.clock.now_ns():
                await self.clock.sleep_until(release)
            try:
                await send_message(self.ws, make())
            except ConnectionClosed:
                return
            self.held -= 1
            self._sent(truth)
