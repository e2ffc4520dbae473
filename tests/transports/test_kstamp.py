"""Arrival stamps from the kernel (rig/transports/kstamp.py, ArrivalStamps in
rig/transports/websocket.py), over real loopback TCP: a stamp the kernel took does not move
when the loop is blocked, only a message that ended a read is called exact (reads of one
frame each, an option, make that every message), a read that began inside a frame is exact
only when the rig counted that frame from its header; on asyncio's loop and on uvloop (where
the rig reads a duplicate of the socket itself: rig/transports/kreader.py, which lets go of
it however the connection ends and follows websockets' flow control)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.frames import Frame, Opcode

from rig.clock.base import MonotonicClock
from rig.transports import kstamp
from rig.transports.websocket import StampedConnection, frame_bytes, stamping
from rig.transports.wsstamps import ArrivalStamps, peek_frame_bytes

pytestmark = pytest.mark.skipif(not kstamp.supported(), reason="kernel stamps: Linux only")

MS = 1_000_000


@pytest.fixture(autouse=True, scope="module")
def _stamping_on() -> None:
    """The kernel switches receive stamping on in deferred work: once, before the tests."""
    kstamp.keep_on()
    time.sleep(0.1)


class _Server:
    """A websockets server on its own thread and loop (a blocked client loop must not block
    it); `handler(ws, sent)` appends the monotonic time just before each write to `sent`."""

    def __init__(self, handler: Callable[[ServerConnection, list[int]], Awaitable[None]]) -> None:
        self.handler = handler
        self.sent: list[int] = []
        self.port = 0
        self._ready = threading.Event()
        self._stop: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = self._loop.create_future()

        async def handle(ws: ServerConnection) -> None:
            await self.handler(ws, self.sent)

        async with serve(handle, "127.0.0.1", 0, compression=None) as server:
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()
            await self._stop

    def __enter__(self) -> _Server:
        self._thread.start()
        assert self._ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set_result, None)
        self._thread.join(5)


LOOPS = ["asyncio"] + (["uvloop"] if importlib.util.find_spec("uvloop") else [])


@pytest.fixture(params=LOOPS)
def run(request: pytest.FixtureRequest) -> Callable[[Any], Any]:
    """Run a coroutine on asyncio's selector loop (kstamp's socket subclass) or on uvloop
    (the rig's own reads of a duplicate descriptor: rig.transports.kreader)."""
    if request.param == "uvloop":
        import uvloop

        return uvloop.run
    return asyncio.run


async def _client(port: int) -> Any:
    return await connect(
        f"ws://127.0.0.1:{port}",
        create_connection=stamping(StampedConnection, MonotonicClock()),
        compression=None,
    )


def test_a_blocked_loop_does_not_move_the_kernels_stamp(run: Callable[[Any], Any]) -> None:
    async def handler(ws: ServerConnection, sent: list[int]) -> None:
        await ws.recv()  # "go"
        sent.append(time.monotonic_ns())
        await ws.send(b"\x01" * 1280)
        await ws.wait_closed()

    async def main(port: int) -> tuple[int, bool, int]:
        ws = await _client(port)
        assert ws.kernel_stamps()
        await ws.send("go")
        time.sleep(0.05)  # noqa: ASYNC251 - the loop is blocked while the reply arrives
        t_unblocked = time.monotonic_ns()
        await ws.recv()
        t_ns, exact = ws.stamps.popleft(), ws.exact.popleft()
        assert ws.kernel.reads >= 1 and ws.kernel.max_pickup_ns > 30 * MS, ws.kernel.as_dict()
        await ws.close()
        return t_ns, exact, t_unblocked

    with _Server(handler) as server:
        t_ns, exact, t_unblocked = run(main(server.port))
    (sent,) = server.sent
    assert exact
    # stamped where the bytes arrived (loopback: inside the server's send), not 50 ms later
    assert -0.2 * MS <= t_ns - sent <= 3 * MS, (t_ns - sent) / MS
    assert t_unblocked - t_ns > 30 * MS


@pytest.mark.parametrize("one_frame", [False, True], ids=["whole-reads", "one-frame-reads"])
def test_only_the_message_that_ended_the_read_is_exact(
    one_frame: bool, monkeypatch: pytest.MonkeyPatch, run: Callable[[Any], Any]
) -> None:
    """Two frames in one segment: read whole, only the second ends the read; read one frame
    at a time (the default), each ends a read of its own, with the segment's stamp."""
    monkeypatch.setattr(ArrivalStamps, "one_frame_reads", one_frame)
    two = Frame(Opcode.BINARY, b"\x02" * 300).serialize(mask=False, extensions=[])
    text = Frame(Opcode.TEXT, b'{"type":"x"}').serialize(mask=False, extensions=[])

    async def handler(ws: ServerConnection, sent: list[int]) -> None:
        await ws.recv()
        sent.append(time.monotonic_ns())
        ws.transport.write(text + two)  # one write: one segment
        await ws.wait_closed()

    async def main(port: int) -> tuple[list[tuple[int, bool]], int]:
        ws = await _client(port)
        assert ws.kernel_stamps()
        await ws.send("go")
        time.sleep(0.03)  # noqa: ASYNC251 - blocked: both frames are there at the next read
        got = [await ws.recv(), await ws.recv()]
        assert got == ['{"type":"x"}', b"\x02" * 300]
        out = [(ws.stamps.popleft(), ws.exact.popleft()) for _ in got]
        reads = ws.kernel.reads
        await ws.close()
        return out, reads

    with _Server(handler) as server:
        ((t1, e1), (t2, e2)), reads = run(main(server.port))
    (sent,) = server.sent
    # both carry the segment's stamp (read twice onto the monotonic clock: a few µs apart)
    assert abs(t1 - t2) <= 0.05 * MS, (t1 - t2) / MS
    assert -0.2 * MS <= t1 - sent <= 3 * MS, (t1 - sent) / MS
    if one_frame:
        assert reads == 2 and (e1, e2) == (True, True)  # ... each ended its own read
    else:
        assert reads == 1 and (e1, e2) == (False, True)  # ... exact only for the last


@pytest.mark.parametrize("one_frame", [False, True], ids=["whole-reads", "one-frame-reads"])
def test_a_read_that_begins_inside_a_frame_is_exact_only_when_counted_from_its_header(
    one_frame: bool, monkeypatch: pytest.MonkeyPatch, run: Callable[[Any], Any]
) -> None:
    """The frame's header comes alone, then its payload with the next frame's header.
    Read whole, the second read is exactly as long as the first frame but began inside it
    (websockets had consumed the header), so nothing is exact. Read one frame at a time, the
    rig knows the frame's length from its header: the read that ends it is exact."""
    monkeypatch.setattr(ArrivalStamps, "one_frame_reads", one_frame)
    first = Frame(Opcode.BINARY, b"\x03" * 300).serialize(mask=False, extensions=[])
    second = Frame(Opcode.BINARY, b"\x04" * 300).serialize(mask=False, extensions=[])
    head = 4  # 300 bytes: a 16-bit length
    assert len(first) == frame_bytes(300, masked=False) == head + 300
    # reads after each part: whole, 1 / 2 / 3; one frame at a time, the second part's
    # payload and the next header are two reads
    after = (1, 3, 4) if one_frame else (1, 2, 3)

    async def handler(ws: ServerConnection, sent: list[int]) -> None:
        await ws.recv()
        sock = ws.transport.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle: a segment each
        for part in (first[:head], first[head:] + second[:head], second[head:]):
            ws.transport.write(part)
            await ws.recv()  # the client read it all

    async def main(port: int) -> list[bool]:
        ws = await _client(port)
        assert ws.kernel_stamps()
        await ws.send("go")
        for reads in after:
            while ws.kernel.reads < reads:  # noqa: ASYNC110 - polls a counter, not an event
                await asyncio.sleep(0.002)
            await ws.send("read")
        got = [await ws.recv(), await ws.recv()]
        assert got == [b"\x03" * 300, b"\x04" * 300]
        flags = [ws.exact.popleft() for _ in got]
        assert ws.kernel.reads == after[-1]
        await ws.close()
        return flags

    with _Server(handler) as server:
        flags = run(main(server.port))
    assert flags == ([True, True] if one_frame else [False, False])


@pytest.mark.parametrize("max_queue", [None, 4], ids=["no-limit", "flow-control"])
def test_a_backlog_of_frames_is_read_a_frame_a_read_all_exact_and_in_order(
    max_queue: int | None, monkeypatch: pytest.MonkeyPatch, run: Callable[[Any], Any]
) -> None:
    """40 frames in one segment while the loop is blocked: more than one read callback
    takes (MORE_FRAMES), and with a small `max_queue` websockets pauses reading on the way;
    every message still arrives, in order, each stamped exactly with the segment's time."""
    monkeypatch.setattr(ArrivalStamps, "one_frame_reads", True)
    frames = [bytes([k]) * (200 + k) for k in range(40)]
    wire = b"".join(Frame(Opcode.BINARY, f).serialize(mask=False, extensions=[]) for f in frames)

    async def handler(ws: ServerConnection, sent: list[int]) -> None:
        await ws.recv()
        sent.append(time.monotonic_ns())
        ws.transport.write(wire)
        await ws.wait_closed()

    async def main(port: int) -> tuple[list[bytes], list[int], list[bool]]:
        ws = await connect(
            f"ws://127.0.0.1:{port}",
            create_connection=stamping(StampedConnection, MonotonicClock()),
            compression=None,
            max_queue=max_queue,
        )
        assert ws.kernel_stamps()
        await ws.send("go")
        time.sleep(0.03)  # noqa: ASYNC251 - blocked: the whole segment is there
        got = [await ws.recv() for _ in frames]
        stamps = [ws.stamps.popleft() for _ in frames]
        exact = [ws.exact.popleft() for _ in frames]
        await ws.close()
        return got, stamps, exact

    with _Server(handler) as server:
        got, stamps, exact = run(main(server.port))
    (sent,) = server.sent
    assert got == frames, [len(g) for g in got]
    assert all(exact), exact
    spread = max(stamps) - min(stamps)
    assert spread <= 0.1 * MS, spread / MS  # one segment: one kernel stamp
    assert -0.2 * MS <= stamps[0] - sent <= 3 * MS, (stamps[0] - sent) / MS


def test_a_peek_reads_a_frames_size_from_its_header_or_says_0() -> None:
    class Sock:
        def __init__(self, head: bytes) -> None:
            self.head = head

        def recv(self, n: int, flags: int) -> bytes:
            assert flags == socket.MSG_PEEK
            return self.head[:n]

    for payload, masked in ((0, False), (125, False), (126, True), (65_535, False), (65_536, True)):
        wire = Frame(Opcode.BINARY, b"x" * payload).serialize(mask=masked, extensions=[])
        assert peek_frame_bytes(Sock(wire)) == len(wire) == frame_bytes(payload, masked)
        head = 2 if payload < 126 else 4 if payload < 65_536 else 10
        assert peek_frame_bytes(Sock(wire[: head - 1])) == 0  # the header not all there
    assert peek_frame_bytes(None) == 0
    a, b = socket.socketpair()
    a.setblocking(False)
    assert peek_frame_bytes(a) == 0  # nothing there: BlockingIOError
    a.close()
    b.close()


def _fds_of(inode: int) -> int:
    """This process's descriptors open on the socket with `inode`."""
    links = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the listing's own descriptor, gone already
            pass
    return links.count(f"socket:[{inode}]")


@pytest.mark.skipif(not importlib.util.find_spec("uvloop"), reason="uvloop not installed")
@pytest.mark.parametrize("ending", ["close", "peer-close", "peer-abort"])
def test_on_uvloop_the_rig_reads_the_socket_and_lets_go_of_it_when_the_connection_ends(
    ending: str,
) -> None:
    """uvloop reads in C, so the rig reads a duplicate of the socket itself: the connection
    writes through the loop's transport as before, its stamps are the kernel's, and however
    the connection ends (a close from either side, or the peer dropping TCP without one),
    the end reaches the connection and the duplicate descriptor is closed with it (held
    open, it would keep the TCP connection up)."""
    import uvloop

    from rig.transports.kreader import ReadingTransport

    async def handler(ws: ServerConnection, sent: list[int]) -> None:
        await ws.recv()
        sent.append(time.monotonic_ns())
        await ws.send(b"\x05" * 640)
        if ending != "close":
            await ws.recv()  # the client has read the message
        if ending == "peer-close":
            await ws.close()
        elif ending == "peer-abort":
            ws.transport.abort()  # RST, no close frame
        await ws.wait_closed()

    async def main(port: int) -> tuple[int, str, float]:
        ws = await _client(port)
        inode = os.fstat(ws.transport.get_extra_info("socket").fileno()).st_ino
        assert ws.kernel_stamps()
        assert isinstance(ws.transport, ReadingTransport) and ws.transport.is_reading()
        assert _fds_of(inode) == 2  # the loop's descriptor and the rig's duplicate
        await ws.send("go")
        time.sleep(0.03)  # noqa: ASYNC251 - blocked: the kernel's stamp must not move
        t_unblocked = time.monotonic_ns()
        assert await ws.recv() == b"\x05" * 640
        assert ws.exact.popleft() is True and ws.kernel.source == "kernel"
        t_ns = ws.stamps.popleft()
        if ending == "close":
            await ws.close()
        else:
            await ws.send("end it")
        await asyncio.wait_for(ws.wait_closed(), 5)
        await asyncio.sleep(0.05)  # the loop's transport closes its descriptor after the call
        assert _fds_of(inode) == 0, "a descriptor outlived the connection"
        return t_ns, type(ws.close_exc).__name__, (t_unblocked - t_ns) / MS

    with _Server(handler) as server:
        t_ns, close_exc, lag_ms = uvloop.run(main(server.port))
    (sent,) = server.sent
    assert -0.2 * MS <= t_ns - sent <= 3 * MS, (t_ns - sent) / MS
    assert lag_ms > 20, lag_ms  # the loop read it 30 ms later; the stamp is the kernel's
    expected = "ConnectionClosedError" if ending == "peer-abort" else "ConnectionClosedOK"
    assert close_exc == expected


@pytest.mark.skipif(not importlib.util.find_spec("uvloop"), reason="uvloop not installed")
def test_on_uvloop_websockets_flow_control_pauses_the_rigs_own_reads() -> None:
    """With a queue of 4 messages nobody takes, websockets pauses reading: on uvloop that
    must pause the rig's reader (not the loop's transport, paused for good already), so
    the rest stays in the socket until the messages are taken, then all arrive in order."""
    import uvloop

    frames = [bytes([k]) * 300 for k in range(60)]

    async def handler(ws: ServerConnection, sent: list[int]) -> None:
        await ws.recv()
        for f in frames:
            await ws.send(f)
        await ws.wait_closed()

    async def main(port: int) -> tuple[list[bytes], bool]:
        ws = await connect(
            f"ws://127.0.0.1:{port}",
            create_connection=stamping(StampedConnection, MonotonicClock()),
            compression=None,
            max_queue=4,
        )
        assert ws.kernel_stamps()
        await ws.send("go")
        await asyncio.sleep(0.1)  # everything sent; websockets' queue filled up
        paused = not ws.transport.is_reading()
        got = [await ws.recv() for _ in frames]
        await ws.close()
        return got, paused

    with _Server(handler) as server:
        got, paused = uvloop.run(main(server.port))
    assert paused
    assert got == frames


def test_frame_bytes_follow_rfc6455() -> None:
    for n in (0, 125, 126, 65_535, 65_536):
        for masked in (False, True):
            frame = Frame(Opcode.BINARY, b"\x00" * n).serialize(mask=masked, extensions=[])
            assert frame_bytes(n, masked) == len(frame)


@pytest.mark.realtime
@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "loop"])
async def test_a_rollouts_onsets_are_exact_with_the_kernels_stamps_end_to_end(
    tmp_path: Any, kernel: bool
) -> None:
    """Transport, session and verdict together, against the reference system over loopback:
    with the kernel's stamps the reply onset's bound is 0 and metrics say how it was stamped;
    with `--arrival-stamps loop` (kernel_stamps=False) the loop's bound (at least 1 ms)."""
    await _rollout_onsets(tmp_path, kernel)


@pytest.mark.realtime
@pytest.mark.skipif(not importlib.util.find_spec("uvloop"), reason="uvloop not installed")
def test_on_uvloop_a_rollouts_onsets_are_exact_with_the_kernels_stamps_end_to_end(
    tmp_path: Any,
) -> None:
    """The same rollout with the rig on uvloop (`rig run --loop uvloop`): its reads are the
    rig's own (rig.transports.kreader), and the reply onset's bound is 0 there too."""
    import uvloop

    uvloop.run(_rollout_onsets(tmp_path, True))


async def _rollout_onsets(tmp_path: Any, kernel: bool) -> None:
    import json

    from rig.audio.source import tone
    from rig.core.plan import PlanBuilder
    from rig.dialects.rawpcm import RawPcmDialect
    from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
    from rig.session import SessionConfig
    from rig.sim.engine import SimConfig
    from rig.sim.server import SimServer
    from rig.sim.thread import SimThread
    from rig.transports.websocket import WebSocketTransport

    plan = PlanBuilder(16_000).add_silence(0.2).add_turn(tone(300, 0.6, 16_000)).add_silence(0.2)

    def make(clock: Any, gate: Any) -> WebSocketTransport:
        return WebSocketTransport(
            url, RawPcmDialect(16_000), clock, open_gate=gate, kernel_stamps=kernel
        )

    sim = SimThread(SimServer(SimConfig(latency_ms=50, endpoint_silence_ms=200, reply_s=0.3)))
    url = await asyncio.to_thread(sim.start)
    try:
        cfg = SessionConfig(drain_quiet_s=0.3, max_s=10.0)
        spec = RolloutSpec("r", plan.build(), make, {"url": "ws://sim/"}, {}, cfg)
        await Runner(str(tmp_path), RunnerSettings(run_id="x", analyze=False)).run([spec])
    finally:
        await asyncio.to_thread(sim.stop)
    m = json.loads((tmp_path / "x" / "rollouts" / "r" / "metrics.json").read_text())
    stamps = m["arrival_stamps"]
    onsets = m["rig_timing"]["figures"]["onsets"]
    assert onsets, m["rig_timing"]
    if kernel:
        assert stamps["source"] == "kernel" and stamps["reads"] > 0 and stamps["refused"] == 0
        assert 0 < stamps["exact"] <= stamps["messages"]
        assert [o["stamp_ms"] for o in onsets] == [0.0] * len(onsets)
        assert m["transport"]["arrival_stamps"] == "kernel"
    else:
        assert stamps["source"] == "loop" and stamps["exact"] == stamps["reads"] == 0
        assert all(o["stamp_ms"] >= 1.0 for o in onsets)
