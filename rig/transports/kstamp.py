"""Arrival stamps from the kernel: when a read's last byte reached the host, not when the
event loop got round to reading it.

Why: a stamp taken in `data_received` is late by however long the loop was busy elsewhere
(another rollout's frame, a close's metrics, a wait for the GIL). The timing verdict bounds
that delay by the loop's lag near the stamp, and at 200 rollouts per process one 4.7 ms busy
stretch on a reply onset was enough to flag two rollouts (issue #32, docs/pacing.md). The
kernel stamps every received packet anyway (`SO_TIMESTAMPNS`, software receive time, before
TCP sees it); read with the data, that stamp does not move with the loop at all.

How: on Linux, for a TCP socket read by asyncio's selector transport (which reads with
`self._sock.recv_into`), `enable` turns on `SO_TIMESTAMPNS` and gives the socket object a
subclass whose `recv_into` is a `recvmsg_into` that keeps the stamp of the read's last
segment for the protocol's `data_received`, called synchronously from the same read on the
same thread (`take_real_ns`). The stamp is on CLOCK_REALTIME: `pickup_ns` says how long ago
it was on that clock, read just before the shared monotonic clock, so the arrival is the
clock's reading minus that (the two reads are well under a microsecond apart); a step of the
wall clock shows as an impossible age and that one stamp is refused.

What it cannot do, and then the loop's stamp stands as before: uvloop (libuv reads in C;
there the rig reads the socket itself with this class: rig.transports.kreader), TLS (the
application's bytes come out of the SSL layer, not a socket read), other platforms, and a
fake clock (tests: fake times only). Which messages' stamps are exact (the message's last
byte was the read's last byte: rig.transports.websocket) is the caller's business.
"""

from __future__ import annotations

import platform
import socket
import struct
import sys
import threading
import time
from typing import Any

#: SO_TIMESTAMPNS and its control message type (asm-generic/socket.h; Python does not name them)
SO_TIMESTAMPNS = 35
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
#: machines whose socket option numbers are asm-generic's (sparc, parisc, alpha and mips differ)
GENERIC_MACHINES = frozenset(
    {"x86_64", "amd64", "i386", "i686", "aarch64", "arm64", "armv7l", "riscv64", "ppc64le", "s390x"}
)
#: a timespec as the control message carries it, and the room its control message needs
TIMESPEC = struct.Struct("@qq")
ANC_BYTES = socket.CMSG_SPACE(TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
#: a kernel stamp more than this before the read (or after it) is refused: a wall-clock step
MAX_PICKUP_NS = 10_000_000_000


class _Last(threading.local):
    real_ns = 0


LAST = _Last()  # the stamp of the read this thread just made (rig.transports.kreader sets it)


class KernelStampedSocket(socket.socket):
    """A TCP socket whose `recv_into` also keeps the kernel's receive stamp of what it read
    (the last segment's), for `take_real_ns`. Same layout as socket.socket: assigned as the
    class of an open socket by `enable`."""

    __slots__ = ()

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        if nbytes:
            buffer = memoryview(buffer)[:nbytes]
        n, anc, _flags, _addr = self.recvmsg_into((buffer,), ANC_BYTES, flags)
        keep_stamp(anc)
        return n


def keep_stamp(anc: list[tuple[int, int, bytes]]) -> None:
    """Keep the kernel's stamp in a read's control messages for `take_real_ns` (0: none,
    the loop's stamp for that read: the first after stamping began)."""
    stamp = 0
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = TIMESPEC.unpack_from(data)
            stamp = sec * 1_000_000_000 + nsec
    LAST.real_ns = stamp


def supported() -> bool:
    """Can this platform stamp reads in the kernel the way `enable` does?"""
    return sys.platform == "linux" and ANC_BYTES > 0 and platform.machine() in GENERIC_MACHINES


def enable(transport: Any) -> bool:
    """Stamp the reads of `transport` (an asyncio transport) in the kernel from now on; False
    where that cannot be done (uvloop, TLS, not TCP, not Linux): nothing changed."""
    sock = getattr(transport, "_sock", None)  # asyncio's selector transports keep it here
    if not supported() or type(sock) is not socket.socket or sock.type != socket.SOCK_STREAM:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    keep_on()
    sock.__class__ = KernelStampedSocket
    return True


_KEEP: list[socket.socket] = []


def keep_on() -> None:
    """Keep the host's receive stamping switched on for the life of this process.

    The kernel stamps received packets only while some socket asks for stamps, and it
    switches that on and off in deferred work: the first packets after the first socket
    asked (or after the last one closed, between rollouts) come unstamped, and their reads
    fall back to the loop's stamps. One idle UDP socket that asks, opened once, keeps it on."""
    if _KEEP or not supported():
        return
    keeper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        keeper.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        keeper.close()
        return
    _KEEP.append(keeper)


def take_real_ns() -> int:
    """The kernel's stamp (CLOCK_REALTIME ns) of the read this thread made last, once; 0 when
    that read was not stamped (or was taken already)."""
    stamp = LAST.real_ns
    if stamp:
        LAST.real_ns = 0
    return stamp


def pickup_ns(real_ns: int) -> int:
    """How long ago the kernel stamped `real_ns`, read now on CLOCK_REALTIME; -1 when that
    cannot be right (a wall-clock step: in the future, or absurdly far back)."""
    ago = time.clock_gettime_ns(time.CLOCK_REALTIME) - real_ns
    return ago if 0 <= ago <= MAX_PICKUP_NS else -1
