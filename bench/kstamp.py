"""What a kernel arrival stamp costs per read (rig.transports.kstamp): the plain
`socket.recv_into` asyncio's transport makes, against `KernelStampedSocket.recv_into` (a
`recvmsg_into` with the stamp's control message) plus the stamp's conversion onto the
monotonic clock (`take_real_ns`, `pickup_ns`, one clock read), and against that plus the
peek at the next frame's header that cuts each read at one frame (`peek_frame_bytes`, what
`ArrivalStamps.one_frame_reads` adds), on loopback TCP with one WebSocket-sized message
waiting per read. Alternated in rounds in one run; best and median of the rounds, µs per read.

    python bench/kstamp.py [--reads 20000] [--rounds 7] [--bytes 1290]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time

from rig.transports import kstamp
from rig.transports.wsstamps import peek_frame_bytes

VARIANTS = ("recv_into", "kernel stamp", "stamp + peek")


def pair(stamped: bool) -> tuple[socket.socket, socket.socket]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    rx = socket.create_connection(srv.getsockname())
    tx, _ = srv.accept()
    srv.close()
    tx.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if stamped:
        rx.setsockopt(socket.SOL_SOCKET, kstamp.SO_TIMESTAMPNS, 1)
        rx.__class__ = kstamp.KernelStampedSocket
    return rx, tx


def per_read_us(variant: str, reads: int, size: int) -> float:
    """µs per read: the write that queues the message is timed apart and taken out."""
    stamped, peek = variant != "recv_into", variant == "stamp + peek"
    rx, tx = pair(stamped)
    head = bytes([0x82, 126]) + (size - 4).to_bytes(2, "big")  # a binary frame's header
    msg = head + os.urandom(size - 4)
    view = memoryview(bytearray(256 * 1024))
    clock = time.monotonic_ns
    spent = 0
    try:
        for _ in range(reads):
            tx.send(msg)
            t0 = time.perf_counter_ns()
            if peek:
                want = peek_frame_bytes(rx)
                rx.recv_into(view[:want] if want else view)
            else:
                rx.recv_into(view)
            if stamped:
                real = kstamp.take_real_ns()
                age = kstamp.pickup_ns(real)
                clock() - age
            spent += time.perf_counter_ns() - t0
    finally:
        rx.close()
        tx.close()
    return spent / reads / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reads", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--bytes", type=int, default=1290, help="a 20 ms PCM16 frame at 16 kHz + head")
    a = ap.parse_args()
    if not kstamp.supported():
        raise SystemExit("kernel stamps need Linux on a machine with asm-generic socket options")
    kstamp.keep_on()
    time.sleep(0.1)
    print(f"load before {os.getloadavg()[0]:.2f}")
    got: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(a.rounds):
        for v in VARIANTS:
            got[v].append(per_read_us(v, a.reads, a.bytes))
    base = statistics.median(got["recv_into"])
    for name, xs in got.items():
        med = statistics.median(xs)
        ratio = med / base
        print(f"{name:>13}: best {min(xs):.2f} µs, median {med:.2f} µs per read ({ratio:.2f}x)")
    print(f"load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
