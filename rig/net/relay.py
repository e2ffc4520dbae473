"""The impairment relay: a TCP relay between the rig and a target that delays, throttles and
"loses" (resends late) bytes per direction, logging every chunk's fate as ground truth.

How this works
--------------
`TcpRelay(target_host, target_port, impairment).start(log_path)` runs its own asyncio loop on
its own thread (never on the audio loop: the rig's pacing does not pay for it; bench/) and
listens on 127.0.0.1. Each accepted connection opens one to the target and runs one pump per
direction: a reader stamps each chunk on arrival on the shared monotonic clock and asks the
direction's `StreamLink` (rig.net.impair, sans-I/O) when to release it; a writer waits for that
time (timerfd, rig.clock) and writes. At most MAX_QUEUED_BYTES wait per direction: beyond
that the reader stops reading, so a throttled path pushes back into the sender's socket
buffer as real TCP would (the rig sees it as send backlog: rig.net.pathsample).

`impair.jsonl` (one line per chunk, written from the relay thread): conn, dir (up = towards
the target), seq, bytes, t_in_ns, target_ns (the release the model chose), t_out_ns (when
it was handed to the kernel), delay_ns (target - in), fate ("delivered" | "retransmitted"), extra_ns
(the resend's share). WebSocket clients connect through it with `connect_via` (the URL, Host
header and TLS name stay the target's).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import random
import threading
from typing import IO, Any

from rig.clock.base import Clock, MonotonicClock
from rig.net.impair import Impairment, StreamLink

MAX_QUEUED_BYTES = 64 * 1024
READ_BYTES = 65536


class TcpRelay:
    """One listening relay; every connection through it gets its own pair of links."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        impairment: Impairment,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        clock: Clock | None = None,
    ) -> None:
        self.target = (target_host, target_port)
        self.impairment = impairment
        self.listen = (listen_host, listen_port)
        self.clock = clock or MonotonicClock()
        self.address: tuple[str, int] | None = None
        self.connections = 0
        self.chunks = 0
        self.errors: list[str] = []
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._log: IO[str] | None = None
        self._startup_error: BaseException | None = None

    # --- lifecycle (called from any thread) ----------------------------------------------

    def start(self, log_path: str | None = None) -> tuple[str, int]:
        """Start the relay thread; returns the (host, port) it listens on."""
        if self._thread is not None:
            raise RuntimeError("relay already started")
        if log_path is not None:
            self._log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - closed in stop
        self._thread = threading.Thread(target=self._run, name="rig-impair-relay", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._startup_error is not None:
            raise OSError(f"impair relay could not listen: {self._startup_error}")
        assert self.address is not None
        return self.address

    def stop(self) -> None:
        """Stop listening, drop open connections, flush the log; safe twice."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> TcpRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def describe(self) -> dict[str, Any]:
        return {"kind": "tcp", **self.impairment.as_dict(), "connections": self.connections}

    # --- the relay thread ---------------------------------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported to start() or kept
            self._startup_error = self._startup_error or exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        tasks: set[asyncio.Task[None]] = set()

        def accept(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            t = asyncio.create_task(self._connection(r, w))
            tasks.add(t)
            t.add_done_callback(tasks.discard)

        try:
            server = await asyncio.start_server(accept, *self.listen)
        except OSError as exc:
            self._startup_error = exc
            self._ready.set()
            return
        sock = server.sockets[0].getsockname()
        self.address = (sock[0], sock[1])
        self._ready.set()
        async with server:
            await self._stop.wait()
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
        if self._log is None:
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
        self._log.write(json.dumps(row, separators=(",", ":")) + "\n")
