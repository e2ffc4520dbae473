"""The kernel's own view of one TCP connection: `getsockopt(TCP_INFO)` and `SIOCOUTQ`.

Why: the kernel already estimates the round trip of every TCP connection (smoothed RTT, its
variance, the minimum seen) from the ACKs of data the rig sends anyway, and knows how many
bytes still wait in the send buffer. Reading that is one syscall, no message on the wire and
no help from the server; a send buffer that grows is uplink queueing (the path or the peer
cannot keep up), which explains a late response that would otherwise be blamed on the model.

`parse_tcp_info` is pure (bytes in, record out) so the layout is tested without a socket;
`read_tcp_info` is the syscall. Offsets follow `struct tcp_info` in linux/tcp.h; fields newer
than the running kernel's struct come back as None.
"""

from __future__ import annotations

import ctypes
import fcntl
import socket
import struct
from dataclasses import asdict, dataclass
from typing import Any

from rig.procread import gil_keeping_libc

#: bytes asked of the kernel; it returns min(this, sizeof(struct tcp_info))
TCP_INFO_LEN = 232
#: SIOCOUTQ == TIOCOUTQ on Linux: bytes in the send queue, sent-but-unacked plus unsent
SIOCOUTQ = 0x5411

# (name, struct format, offset) in struct tcp_info (linux/tcp.h), little-endian host order
_FIELDS: tuple[tuple[str, str, int], ...] = (
    ("state", "B", 0),
    ("retransmits", "B", 2),
    ("rto_us", "I", 8),
    ("unacked", "I", 24),
    ("lost", "I", 32),
    ("retrans", "I", 36),
    ("rtt_us", "I", 68),
    ("rttvar_us", "I", 72),
    ("snd_cwnd", "I", 80),
    ("total_retrans", "I", 100),
    ("bytes_acked", "Q", 120),
    ("notsent_bytes", "I", 144),
    ("min_rtt_us", "I", 148),
    ("delivery_rate_bps", "Q", 160),  # bytes per second, despite the name's habit
)


@dataclass(frozen=True, slots=True)
class TcpInfo:
    """What the kernel says about one connection at one moment (times in µs, as it keeps
    them; `None`: this kernel's struct is too short to hold the field)."""

    state: int
    retransmits: int
    rto_us: int
    unacked: int
    lost: int
    retrans: int
    rtt_us: int  # smoothed RTT (srtt)
    rttvar_us: int
    snd_cwnd: int
    total_retrans: int
    bytes_acked: int | None
    notsent_bytes: int | None
    min_rtt_us: int | None
    delivery_rate_bps: int | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


#: every field in one unpack (pad bytes between them), for a struct long enough to hold all
_ALL = struct.Struct(
    "="
    + "".join(
        f"{off - end}x{fmt}" if off > end else fmt
        for (_, fmt, off), end in zip(
            _FIELDS, [0] + [o + struct.calcsize(f) for _, f, o in _FIELDS[:-1]], strict=True
        )
    )
)


def parse_tcp_info(raw: bytes) -> TcpInfo:
    """`struct tcp_info` bytes -> TcpInfo (ValueError if too short for even the basics)."""
    if len(raw) >= _ALL.size:  # today's kernels: one unpack (a path sample runs per second
        return TcpInfo(*_ALL.unpack_from(raw))  # per rollout, on the event loop)
    values: dict[str, int | None] = {}
    for name, fmt, off in _FIELDS:
        size = struct.calcsize(fmt)
        if off + size <= len(raw):
            values[name] = struct.unpack_from("=" + fmt, raw, off)[0]
        elif off < 104:  # everything up to total_retrans exists since Linux 2.6
            raise ValueError(f"tcp_info of {len(raw)} bytes is too short (need {off + size})")
        else:
            values[name] = None
    return TcpInfo(**values)  # type: ignore[arg-type]


def read_tcp_info(sock: Any) -> TcpInfo | None:
    """TCP_INFO of a connected TCP socket; None where the platform or socket has none."""
    opt = getattr(socket, "TCP_INFO", None)
    if opt is None or sock.type != socket.SOCK_STREAM:
        return None
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, opt, TCP_INFO_LEN)
    except OSError:
        return None
    try:
        return parse_tcp_info(raw)
    except ValueError:
        return None


def _load_ioctl() -> Any:
    """libc's ioctl keeping the GIL (`fcntl.ioctl` lets go of it, and a path sample runs on
    the audio loop's thread, which then waits to get it back from the writer); SIOCOUTQ
    never blocks. None: not Linux, or no libc found."""
    libc = gil_keeping_libc()
    try:
        fn = libc.ioctl if libc is not None else None
    except AttributeError:
        return None
    if fn is not None:
        fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.POINTER(ctypes.c_int)]
        fn.restype = ctypes.c_int
    return fn


_IOCTL = _load_ioctl()


def send_queue_bytes(sock: Any) -> int | None:
    """Bytes in the kernel's send queue (unacked + not yet sent): SIOCOUTQ; None if unknown."""
    try:
        fd = sock.fileno()
    except OSError:
        return None
    if _IOCTL is not None:
        out = ctypes.c_int(0)
        if _IOCTL(fd, SIOCOUTQ, ctypes.byref(out)) != 0:
            return None
        return int(out.value)
    try:
        buf = fcntl.ioctl(fd, SIOCOUTQ, b"\0\0\0\0")
    except OSError:
        return None
    return int(struct.unpack("=i", buf)[0])
