"""Kernel-stamped reads where the loop reads sockets in C (uvloop): the rig reads the socket.

Why: uvloop's transports read with libuv's read(2), which carries no control messages, and
TCP keeps no per-socket stamp to ask for afterwards (SIOCGSTAMPNS says ENOENT). So on
uvloop every arrival was stamped by the loop, bounded by the loop's lag, and at 100
rollouts at once the uplink held while a few reply onsets' bounds flagged their rollouts
(issue #32, docs/pacing.md, twentieth pass). uvloop is the cheaper loop per frame; with
this it keeps the kernel's stamps too.

How: once the handshake is done, the loop's transport stops reading for good
(`pause_reading`) and the rig watches a duplicate of its socket's descriptor
(`loop.add_reader`): one read per readiness into the protocol's `get_buffer`, then
`buffer_updated`, as asyncio's selector transport reads, with the kernel's stamp taken as
there (rig.transports.kstamp.keep_stamp, as KernelStampedSocket's read does).
Writing, closing and write errors stay the loop's transport's. The connection is handed a
`ReadingTransport` in its place: the same transport for everything but `pause_reading` /
`resume_reading` / `is_reading`, which act on the rig's reader (websockets' flow control).
The end of the stream is handed on as the transport would (`eof_received`, then close unless
the protocol keeps it open). The duplicate is closed when the connection is lost: held open,
it would keep the TCP connection up after the loop's transport closed its own descriptor.

Cost: ~3-5 µs more per received message than libuv's own reads, less than asyncio's
(bench/readpath.py); `--arrival-stamps loop` keeps libuv's reads (docs/pacing.md).
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

from rig.transports import kstamp
from rig.transports.kstamp import ANC_BYTES


class OwnReader:
    """Reads one connection's socket (a duplicate descriptor, kernel stamped) on the loop."""

    __slots__ = (
        "_closed",
        "_fd",
        "_loop",
        "_protocol",
        "_recvmsg_into",
        "_transport",
        "reading",
        "sock",
    )

    def __init__(
        self, loop: asyncio.AbstractEventLoop, transport: Any, protocol: Any, sock: socket.socket
    ) -> None:
        self._loop = loop
        self._transport = transport  # the loop's own, for closing
        self._protocol = protocol  # an asyncio.BufferedProtocol
        self.sock = sock
        self._fd = sock.fileno()
        self._recvmsg_into = sock.recvmsg_into
        self.reading = False
        self._closed = False

    def resume(self) -> None:
        if not self.reading and not self._closed:
            self._loop.add_reader(self._fd, self._on_readable)
            self.reading = True

    def pause(self) -> None:
        if self.reading:
            self._loop.remove_reader(self._fd)
            self.reading = False

    def close(self) -> None:
        """Stop reading and close the duplicate (from `connection_lost`); idempotent."""
        if self._closed:
            return
        self.pause()
        self._closed = True
        self.sock.close()

    def _on_readable(self) -> None:
        protocol = self._protocol
        try:  # as KernelStampedSocket.recv_into, without its buffer slicing: once per message
            n, anc, _flags, _addr = self._recvmsg_into((protocol.get_buffer(-1),), ANC_BYTES)
        except (BlockingIOError, InterruptedError):
            return  # woken for nothing (another read took it)
        except OSError:  # reset, or the like: the loop's transport ends the connection
            self._abort()
            return
        except Exception as exc:  # the protocol's get_buffer: a bug, said once, not spun on
            self._fail("protocol.get_buffer() failed", exc)
            return
        kstamp.keep_stamp(anc)
        if not n:
            self.pause()
            if not protocol.eof_received():
                self._transport.close()
            return
        try:
            protocol.buffer_updated(n)
        except Exception as exc:
            self._fail("protocol.buffer_updated() failed", exc)

    def _abort(self) -> None:
        self.pause()
        self._transport.abort()

    def _fail(self, message: str, exc: Exception) -> None:
        self._abort()
        self._loop.call_exception_handler(
            {"message": message, "exception": exc, "protocol": self._protocol}
        )


class ReadingTransport:
    """The loop's transport as the connection sees it while the rig reads its socket: the
    same for writing and closing (bound once: the tick writes through it every frame),
    reading paused and resumed on the rig's reader."""

    __slots__ = ("_inner", "_reader", "abort", "close", "is_closing", "write")

    def __init__(self, inner: Any, reader: OwnReader) -> None:
        self._inner = inner
        self._reader = reader
        self.write = inner.write
        self.is_closing = inner.is_closing
        self.abort = inner.abort
        self.close = inner.close

    def pause_reading(self) -> None:
        self._reader.pause()

    def resume_reading(self) -> None:
        self._reader.resume()

    def is_reading(self) -> bool:
        return self._reader.reading

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def take_over(transport: Any, protocol: Any) -> OwnReader | None:
    """Read `transport`'s socket with kernel stamps from now on (see the module); None
    where that cannot be done (not Linux, TLS, not TCP, not reading, no descriptor): then
    nothing changed. The caller puts `ReadingTransport(transport, reader)` in its place."""
    if not kstamp.supported() or transport.is_closing() or not transport.is_reading():
        return None
    if transport.get_extra_info("ssl_object") is not None:  # bytes come out of TLS, not read
        return None
    raw = transport.get_extra_info("socket")
    if raw is None or raw.type != socket.SOCK_STREAM:
        return None
    if raw.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    try:
        sock = socket.socket(fileno=os.dup(raw.fileno()))
    except OSError:
        return None
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, kstamp.SO_TIMESTAMPNS, 1)
    except OSError:
        sock.close()
        return None
    kstamp.keep_on()
    sock.__class__ = kstamp.KernelStampedSocket
    reader = OwnReader(asyncio.get_running_loop(), transport, protocol, sock)
    transport.pause_reading()
    reader.resume()
    return reader
