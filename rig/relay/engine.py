"""The relay's asyncio core: accept, connect to the target, one pump per direction.

How this works
--------------
Each accepted connection opens one to the target and runs one pump per direction: a reader
stamps each chunk on arrival on the shared monotonic clock and asks the direction's
`StreamLink` (rig.net.impair, sans-I/O) when to release it; a writer waits for that time
(timerfd, rig.clock) and hands it to the kernel. At most MAX_QUEUED_BYTES wait per
direction: beyond that the reader stops reading, so a throttled path pushes back into the
sender's socket buffer as real TCP would (the rig sees it as send backlog:
rig.net.pathsample). Every chunk is one line of impair.jsonl: conn, dir (up = towards the
target), seq, bytes, t_in_ns, target_ns (the release the model chose), t_out_ns (when it was
handed to the kernel: the truth, late by however long the machine kept the relay from
running), delay_ns (target - in), fate ("delivered" | "retransmitted"), extra_ns (the
resend's share).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import random
from collections.abc import Callable
from typing import IO

from rig.clock.base import Clock
from rig.net.impair import Impairment, StreamLink

MAX_QUEUED_BYTES = 64 * 1024
READ_BYTES = 65536


class RelayEngine:
    """Serves one listening socket until `stop` is set."""

    def __init__(
        self,
        target: tuple[str, int],
        impairment: Impairment,
        clock: Clock,
        log: IO[str] | None = None,
    ) -> None:
        self.target = target
        self.impairment = impairment
        self.clock = clock
        self.log = log
        self.connections = 0
        self.chunks = 0
        self.errors: list[str] = []

    async def serve(
        self,
        listen: tuple[str, int],
        ready: Callable[[tuple[str, int]], None],
        stop: asyncio.Event,
    ) -> None:
        tasks: set[asyncio.Task[None]] = set()

        def accept(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            t = asyncio.create_task(self._connection(r, w))
            tasks.add(t)
            t.add_done_callback(tasks.discard)

        server = await asyncio.start_server(accept, *listen)
        sock = server.sockets[0].getsockname()
        ready((sock[0], sock[1]))
        async with server:
            await stop.wait()
        for t in list(tasks):
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _connection(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        conn = self.connections
        self.connections += 1
        try:
            ur, uw = await asyncio.open_connection(*self.target)
        except OSError as exc:
            self.errors.append(f"conn {conn}: cannot reach target: {exc}")
            cw.close()
            return
        imp = self.impairment
        up = StreamLink(imp.up, random.Random(f"{imp.seed}:{conn}:up"), imp.down.delay_ms)
        down = StreamLink(imp.down, random.Random(f"{imp.seed}:{conn}:down"), imp.up.delay_ms)
        pumps = [
            asyncio.create_task(self._pump(conn, "up", cr, uw, up)),
            asyncio.create_task(self._pump(conn, "down", ur, cw, down)),
        ]
        try:
            # one side closing ends the connection (as closing the socket ends both ways)
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            await asyncio.wait(pumps, timeout=2.0)
        finally:
            for p in pumps:
                p.cancel()
            for w in (cw, uw):
                w.close()

    async def _pump(
        self,
        conn: int,
        direction: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        link: StreamLink,
    ) -> None:
        queue: collections.deque[tuple[int, int, int, str, int, bytes]] = collections.deque()
        queued = 0
        more = asyncio.Event()
        room = asyncio.Event()
        room.set()
        eof = False

        async def read() -> None:
            nonlocal queued, eof
            seq = 0
            while True:
                await room.wait()
                try:
                    data = await reader.read(READ_BYTES)
                except (ConnectionError, OSError):
                    data = b""
                if not data:
                    eof = True
                    more.set()
                    return
                t_in = self.clock.now_ns()
                fate = link.admit(t_in, len(data))
                queue.append((seq, t_in, fate.release_ns, fate.fate, fate.extra_ns, data))
                seq += 1
                queued += len(data)
                if queued >= MAX_QUEUED_BYTES:
                    room.clear()
                more.set()

        reading = asyncio.create_task(read())
        try:
            while True:
                if not queue:
                    if eof:
                        break
                    more.clear()
                    await more.wait()
                    continue
                seq, t_in, target, fate, extra, data = queue[0]
                await self.clock.sleep_until(target)
                queue.popleft()
                t_out = self.clock.now_ns()  # handed to the kernel now
                writer.write(data)
                queued -= len(data)
                if queued < MAX_QUEUED_BYTES:
                    room.set()
                self._record(conn, direction, seq, len(data), t_in, target, t_out, fate, extra)
                await writer.drain()
            if writer.can_write_eof():
                with contextlib.suppress(OSError):
                    writer.write_eof()
        except (ConnectionError, OSError):
            pass
        finally:
            reading.cancel()

    def _record(
        self,
        conn: int,
        direction: str,
        seq: int,
        n: int,
        t_in: int,
        target: int,
        t_out: int,
        fate: str,
        extra: int,
    ) -> None:
        self.chunks += 1
        if self.log is None:
            return
        row = {
            "conn": conn,
            "dir": direction,
            "seq": seq,
            "bytes": n,
            "t_in_ns": t_in,
            "target_ns": target,
            "t_out_ns": t_out,
            "delay_ns": target - t_in,
            "fate": fate,
            "extra_ns": extra,
        }
        self.log.write(json.dumps(row, separators=(",", ":")) + "\n")
