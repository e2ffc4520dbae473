"""The floor client's peer (bench/floorclient.py): a WebSocket server in its own process that
takes every uplink frame and sends a paced 20 ms reply frame down on every stream all the
time, so the client carries more downlink than a rollout does.

    python bench/floorserver.py [--uvloop]    # prints ws://127.0.0.1:PORT, then serves

Cheap on purpose, so it is never the bottleneck: websockets' sans-I/O protocol straight over
`asyncio.Protocol` (no task per connection or message) and one timer for all streams (a
timerfd, bench/floortimer.py) at absolute deadlines `t0 + k * 20 ms` on `time.monotonic_ns()`.
Each reply frame is 640 bytes of PCM16 whose first 16 bytes carry the frame's seq and its
deadline (two little-endian uint64), so the client can tell downlink delay without a second
clock. On SIGTERM it prints one JSON line (frames up and down, its own tick lateness p99)
and exits.
"""

from __future__ import annotations

import array
import asyncio
import json
import math
import os
import signal
import struct
import sys
import time
from typing import cast

from websockets.frames import Frame, Opcode
from websockets.http11 import Request
from websockets.server import ServerProtocol

# its sibling modules, also when run as a script under PYTHONSAFEPATH (the test suite)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from floortimer import TickTimer  # noqa: E402

FRAME_NS = 20_000_000
FRAME_BYTES = 640  # 20 ms of PCM16 at 16 kHz
HEADER = struct.Struct("<QQ")  # seq, deadline_ns


def tone_frame(hz: float = 400.0, rate: int = 16_000) -> bytes:
    """20 ms of a tone, whole cycles long (400 Hz: 8), so frames join without a click."""
    n = FRAME_BYTES // 2
    pcm = array.array("h", (int(8000 * math.sin(2 * math.pi * hz * i / rate)) for i in range(n)))
    return pcm.tobytes()


class Conn(asyncio.Protocol):
    """One client: uplink frames counted and dropped, reply frames written by the tick."""

    def __init__(self, server: FloorServer) -> None:
        self.server = server
        self.ws = ServerProtocol(max_size=None)
        self.seq = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        ws = self.ws
        ws.receive_data(data)
        for ev in ws.events_received():
            if type(ev) is Frame:
                if ev.opcode is Opcode.BINARY:
                    self.server.frames_up += 1
            elif isinstance(ev, Request):
                ws.send_response(ws.accept(ev))
                self.server.open.add(self)
        self.flush()

    def flush(self) -> None:
        assert self.transport is not None
        for chunk in self.ws.data_to_send():
            if chunk:
                self.transport.write(chunk)
            else:  # the protocol's end of stream: the close handshake is done
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.open.discard(self)


class FloorServer:
    """One 20 ms tick for every open stream: cheap, and nothing to wake per stream."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.open: set[Conn] = set()
        self.frames_up = 0
        self.frames_down = 0
        self.late_ns = array.array("q")
        self.pcm = tone_frame()[HEADER.size :]
        self.t0_ns = time.monotonic_ns()
        self.k = 0
        self.timer = TickTimer(loop, self.tick)

    def arm(self) -> None:
        self.k += 1
        self.timer.arm(self.t0_ns + self.k * FRAME_NS)

    def tick(self) -> None:
        due_ns = self.t0_ns + self.k * FRAME_NS
        now_ns = time.monotonic_ns()
        if now_ns < due_ns:  # woken early (call_at's float seconds): never send early
            self.timer.arm(due_ns)
            return
        self.late_ns.append(now_ns - due_ns)
        for c in list(self.open):
            c.ws.send_binary(HEADER.pack(c.seq, due_ns) + self.pcm)
            c.seq += 1
            c.flush()
        self.frames_down += len(self.open)
        self.arm()

    def stats(self) -> dict[str, float | int | None]:
        late = sorted(self.late_ns)
        p99 = late[min(len(late) - 1, int(0.99 * len(late)))] / 1e6 if late else None
        return {"frames_up": self.frames_up, "frames_down": self.frames_down, "tick_p99_ms": p99}


async def serve() -> None:
    loop = asyncio.get_running_loop()
    floor = FloorServer(loop)
    server = await loop.create_server(lambda: Conn(floor), "127.0.0.1", 0, backlog=1024)
    print(f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/", flush=True)
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, stop.set_result, None)
    floor.arm()
    await stop
    print(json.dumps(floor.stats()), flush=True)


def main() -> None:
    if "--uvloop" in sys.argv[1:]:
        import uvloop

        uvloop.run(serve())
    else:
        asyncio.run(serve())


if __name__ == "__main__":
    main()
