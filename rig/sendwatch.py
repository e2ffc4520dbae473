"""A watchdog for uplink sends that block (issue #15 row 2), outside the paced loop.

Why not `asyncio.timeout` around every send: it arms and cancels a loop timer per frame,
about 10 µs a frame measured (bench below, docs/reliability.md), i.e. 2.5 % of a core at
50 streams. Here the session only bumps a counter and sets a flag per send; this task wakes
every quarter of the deadline and, when the same send has been in flight for the whole
deadline, records why and cancels the session's task (which turns that into `timed_out`).
A blocked send is therefore cut between `timeout_s` and 1.25 x `timeout_s` after it began.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class SendWatch:
    """The session sets `sending` around each send and bumps `n`; `run` watches them."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.sending = False
        self.n = 0
        #: why the watch cancelled the session (None: it never did)
        self.fired: str | None = None

    async def run(self, task: asyncio.Task[object], reason: Callable[[], str]) -> None:
        period_s = self.timeout_s / 4
        seen, stuck_s = -1, 0.0
        while True:
            await asyncio.sleep(period_s)  # asyncio's clock: a wall-clock limit, not a stamp
            if not self.sending or self.n != seen:
                seen, stuck_s = self.n, 0.0
                continue
            stuck_s += period_s
            if stuck_s >= self.timeout_s * 0.999:
                self.fired = reason()
                task.cancel()
                return
