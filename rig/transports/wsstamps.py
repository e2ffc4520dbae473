"""Arrival stamps on a websockets connection: when each message's last byte came off the socket.

The connection subclasses here read the transport's clock (the injected one, so a FakeClock
run records only fake times) in `data_received`, the moment asyncio hands them bytes from the
socket, and pin that stamp to every complete message parsed from those bytes: as close to
the socket as the library allows; the time a message then waits in the library's queue is
not counted as network delay. Where the kernel can stamp the read (rig.transports.kstamp),
its receive time replaces the loop's, and the message that ended the read is exact.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import socket
from collections.abc import Callable
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.server import ServerConnection
from websockets.frames import Frame, Opcode
from websockets.protocol import Side

from rig.clock.base import Clock
from rig.net.pathsample import PING_PREFIX
from rig.transports import kreader, kstamp, wsframes
from rig.transports.wsdirect import DirectMessages
from rig.transports.wsread import BufferedReads


class ArrivalStamps:
    """Mixin for a websockets connection: remember when each message's last byte came off
    the socket (`stamps`, one per complete data message, in order), read from `now_ns`
    (the injected clock's reader; `stamping(cls, clock)` binds it).

    After `kernel_stamps()` (the real clock, plain TCP on Linux: rig.transports.kstamp; on
    uvloop the rig reads the socket itself, rig.transports.kreader) a read's stamp is the
    kernel's receive time of its last byte, not the loop's. A message whose last byte was
    that read's last byte has an exact stamp, whatever the loop was doing (`exact`, beside
    `stamps`: the transport tells the timing verdict which received audio was stamped so,
    rig.core.selfcheck). Which frame ends where is counted from the read's start, which must
    be a frame boundary: websockets' parser waiting for a new frame (not half way through
    one whose header it consumed already) with nothing buffered. A message that ended
    earlier in its read was there before the stamp by an unknown amount: it is bounded by
    the loop's lag as before.

    Off by default, an option measured and not yet won (`one_frame_reads`): so that no
    messages share a read, each read at a frame boundary asks the socket for one frame
    only. The next frame's header is peeked (`MSG_PEEK`: the bytes stay where they are) and
    the read's buffer cut at its end. Frames that came together then each end a read of
    their own, all exact; a frame whose bytes came in parts is read on to its end, and is
    exact too (its bytes are counted from its header). After the loop's one read, the
    frames already waiting are read in the same callback, one read each (up to
    `MORE_FRAMES`), so a backlog costs a peek and a read per frame (about 4 µs,
    bench/kstamp.py), not a loop pass per frame. Every message was then exact at 200
    rollouts, but those runs held worse than whole reads in 13 of 18 alternated pairs on
    a host that paused (docs/pacing.md, fifteenth pass): not the default until a quiet
    host says which it was.
    """

    #: read one frame per read where the next frame's header can be peeked (see the class)
    one_frame_reads = False

    _rx_ns: int
    stamps: collections.deque[int]
    #: arrival stamp of each pong by its payload (rig.net.pathsample takes them out)
    pong_ns: dict[bytes, int]
    #: each pong's payload and stamp as it arrives (the path sampler's pings written from
    #: the tick); True: taken, not kept in `pong_ns`
    on_pong: Callable[[bytes, int], bool] | None
    #: per stamp in `stamps`: did the kernel take it at that message's own last byte?
    exact: collections.deque[bool]

    def __init__(self, *args: Any, now_ns: Callable[[], int], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._now_ns = now_ns
        self._rx_ns = 0
        self.stamps = collections.deque()
        self.pong_ns = {}
        self.on_pong = None
        self.exact = collections.deque()
        self.kernel = StampStats()
        self._kernel_on = False
        #: bytes of the current read not yet framed, counted from a frame boundary at its
        #: start, when it was kernel stamped; -1: not counted
        self._rx_left = -1
        self._masked = False
        self._sock: Any = None  # the kernel-stamped socket, for peeks
        #: the rig's own reads of the socket, on a loop that reads in C (rig.transports.kreader)
        self._own_reader: kreader.OwnReader | None = None
        #: the frame being read one frame per read: its bytes on the wire (0: none), and
        #: how many of them were read so far
        self._frame_want = 0
        self._frame_got = 0

    def kernel_stamps(self) -> bool:
        """Stamp from the kernel from now on where this connection can (see the class);
        False: the loop's stamps, as before. Call once the handshake is done."""
        if self.protocol.extensions:  # type: ignore[attr-defined]  # payloads rewritten
            return False
        transport = self.transport  # type: ignore[attr-defined]
        if kstamp.enable(transport):
            self._sock = transport._sock  # kstamp.enable's
        else:  # a loop that reads in C (uvloop): the rig reads the socket itself
            reader = kreader.take_over(transport, self)
            if reader is None:
                return False
            self._own_reader = reader
            self._sock = reader.sock
            conn: Any = self  # websockets' Connection: its transport, and its flow control
            conn.transport = kreader.ReadingTransport(transport, reader)
            conn.recv_messages.pause = reader.pause  # bound to the loop's in connection_made
            conn.recv_messages.resume = reader.resume
        self._masked = self.protocol.side is Side.SERVER  # type: ignore[attr-defined]
        self._kernel_on = True
        self.kernel.source = "kernel"
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        if self._own_reader is not None:
            self._own_reader.close()  # its duplicate descriptor would hold the connection
        super().connection_lost(exc)  # type: ignore[misc]

    def get_buffer(self, sizehint: int) -> memoryview:
        view: memoryview = super().get_buffer(sizehint)  # type: ignore[misc]
        if not self._kernel_on or not self.one_frame_reads:
            return view
        if self._frame_want:  # the rest of a frame read in parts
            rest = self._frame_want - self._frame_got
            return view[:rest] if 0 < rest <= len(view) else view
        if self._at_frame_boundary():
            want = peek_frame_bytes(self._sock)
            if 0 < want <= len(view):
                self._frame_want, self._frame_got = want, 0
                return view[:want]
        return view

    def buffer_updated(self, nbytes: int) -> None:
        super().buffer_updated(nbytes)  # type: ignore[misc]
        if not self._kernel_on or not self.one_frame_reads:
            return
        transport = self.transport  # type: ignore[attr-defined]
        for _ in range(MORE_FRAMES):  # frames already waiting: read now, one read each
            if transport.is_closing() or not transport.is_reading():
                return  # closed, or websockets' flow control paused reading
            view = self.get_buffer(-1)
            if not self._frame_want:
                return  # no whole header waiting: the loop reads on when more comes
            try:
                n = self._sock.recv_into(view)
            except OSError:  # nothing more yet (BlockingIOError); errors: the loop's read
                return
            if not n:
                return  # the end of the stream: the loop's next read sees it too
            super().buffer_updated(n)  # type: ignore[misc]

    def data_received(self, data: bytes) -> None:
        real_ns = kstamp.take_real_ns() if self._kernel_on else 0
        # bytes counted from a frame's start to the end of this read: a read of a frame in
        # parts counts from that frame's header; else the read must start at a boundary
        start = self._frame_got if self._frame_want else 0
        if self._frame_want:
            self._frame_got += len(data)
            if self._frame_got >= self._frame_want:
                self._frame_want = self._frame_got = 0
        if real_ns:
            ago = kstamp.pickup_ns(real_ns)  # read before the clock: see rig.transports.kstamp
            now = self._now_ns()
            if ago >= 0:
                # bytes of one stream arrive in order: a later read's stamp is never
                # earlier (each conversion onto the monotonic clock moves by a µs or so)
                self._rx_ns = max(now - ago, self._rx_ns)
                self.kernel.read(ago)
                at_start = start > 0 or self._at_frame_boundary()
                self._rx_left = start + len(data) if at_start else -1
            else:
                self._rx_ns, self._rx_left = now, -1
                self.kernel.refused += 1
        else:
            self._rx_ns = self._now_ns()
            self._rx_left = -1
        super().data_received(data)  # type: ignore[misc]

    def _at_frame_boundary(self) -> bool:
        """Is websockets' parser waiting for the first byte of a frame? (any other shape of
        a future websockets reads as False: no exact stamps, never wrong ones)"""
        return wsframes.at_frame_boundary(self.protocol)  # type: ignore[attr-defined]

    def process_event(self, event: Any) -> None:
        left = self._rx_left
        if left > 0 and isinstance(event, Frame):  # where this frame ends in the read
            left = self._rx_left = left - frame_bytes(len(event.data), self._masked)
        if isinstance(event, Frame) and event.fin and event.opcode in DATA_OPCODES:
            t_ns = self._rx_ns
            self.stamps.append(t_ns)
            self.kernel.messages += 1
            if left == 0:  # its last byte was the read's last byte: the kernel's stamp
                self.exact.append(True)
                self.kernel.exact += 1
            else:  # earlier in its read (with the last one's stamp), or the loop's stamp
                self.exact.append(False)
        elif isinstance(event, Frame) and event.opcode is Opcode.PONG:
            data = bytes(event.data)
            if data.startswith(PING_PREFIX):
                on_pong = self.on_pong
                if on_pong is not None and on_pong(data, self._rx_ns):
                    pass
                elif len(self.pong_ns) < MAX_PONGS:
                    self.pong_ns[data] = self._rx_ns
        super().process_event(event)  # type: ignore[misc]


class StampStats:
    """How a connection's arrivals were stamped, for metrics.json (`arrival_stamps`)."""

    __slots__ = ("exact", "late_5ms", "max_pickup_ns", "messages", "reads", "refused", "source")

    def __init__(self) -> None:
        self.source = "loop"  # or "kernel" (rig.transports.kstamp)
        self.messages = 0  # data messages received
        self.reads = 0  # kernel-stamped reads
        self.exact = 0  # data messages stamped exactly (the last in their read)
        self.refused = 0  # kernel stamps refused (a wall-clock step)
        self.max_pickup_ns = 0  # the longest a read waited for the loop
        self.late_5ms = 0  # reads the loop got to more than 5 ms after they arrived

    def read(self, pickup_ns: int) -> None:
        self.reads += 1
        if pickup_ns > self.max_pickup_ns:
            self.max_pickup_ns = pickup_ns
        if pickup_ns > 5_000_000:
            self.late_5ms += 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "messages": self.messages,
            "exact": self.exact,
            "reads": self.reads,
            "refused": self.refused,
            "pickup_max_ms": round(self.max_pickup_ns / 1e6, 3),
            "pickups_over_5ms": self.late_5ms,
        }


def peek_frame_bytes(sock: Any) -> int:
    """Bytes on the wire of the frame whose header waits at the head of `sock`'s receive
    queue, left there (`MSG_PEEK`); 0 when its header has not fully come (or no socket)."""
    try:
        head: bytes = sock.recv(14, socket.MSG_PEEK)
    except (OSError, AttributeError):  # nothing there yet (BlockingIOError), closed, none
        return 0
    if len(head) < 2:
        return 0
    n, at = head[1] & 0x7F, 2
    if n == 126:
        if len(head) < 4:
            return 0
        n, at = int.from_bytes(head[2:4], "big"), 4
    elif n == 127:
        if len(head) < 10:
            return 0
        n, at = int.from_bytes(head[2:10], "big"), 10
    return at + (4 if head[1] & 0x80 else 0) + n


def frame_bytes(payload: int, masked: bool) -> int:
    """Bytes on the wire of one WebSocket frame with `payload` bytes (RFC 6455 5.2)."""
    head = 2 if payload < 126 else 4 if payload < 65536 else 10
    return head + payload + (4 if masked else 0)


class StampedConnection(
    ArrivalStamps, BufferedReads, DirectMessages, ClientConnection, asyncio.BufferedProtocol
):
    """A client connection that remembers when each message's last byte came off the socket
    (read into a buffer per thread: rig.transports.wsread) and can hand its data messages
    over inside `data_received` (rig.transports.wsdirect)."""


class StampedServerConnection(
    ArrivalStamps, BufferedReads, ServerConnection, asyncio.BufferedProtocol
):
    """The server side of the same stamping (the recording proxy's client-facing end)."""


def stamping(cls: type[ArrivalStamps], clock: Clock) -> Any:
    """A websockets `create_connection` factory: `cls` stamping on `clock` (typed Any:
    websockets annotates a class, and calls it like one)."""
    return functools.partial(cls, now_ns=clock.now_ns)


DATA_OPCODES = (Opcode.TEXT, Opcode.BINARY, Opcode.CONT)
#: frames read in one read callback after the loop's own read (the rest wait a loop pass)
MORE_FRAMES = 32
#: pong stamps kept at most (a peer echoing made-up pongs cannot grow memory)
MAX_PONGS = 64
