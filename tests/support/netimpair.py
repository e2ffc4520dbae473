"""Packet-level network impairment without netem: a netns, two TAP devices and a relay.

How this works:

    root namespace                                     namespace rigimp-<pid>-<n>
    client (rig) ── rimpXXXXh 10.231.a.b+1/30          rimpXXXXn 10.231.a.b+2/30 ── server (sim)
                        │ fd                                │ fd
                        └──────── relay process ────────────┘
                           up:   read host fd, hold, write ns fd
                           down: read ns fd,   hold, write host fd

Both TAP devices are created in the root namespace (IFF_TAP | IFF_NO_PI on /dev/net/tun); one is
then moved into a fresh network namespace, and its file descriptor stays attached. A frame the
kernel sends out of one TAP device is read by the relay and written into the other, which the
kernel on the far side receives as if from a wire. So the two network stacks only talk through
the relay, ARP included.

The relay is a separate process (not a thread of the test), so the test's event loop and GIL add
nothing to the path. It holds every frame until `arrival + delay ± jitter`, but never releases a
frame before the previous one of the same direction (a FIFO link: no reordering), waits on an
absolute CLOCK_MONOTONIC timerfd in epoll (no millisecond rounding), asks for SCHED_FIFO and a
1 ns timer slack, and logs every frame (arrival, sampled delay, target and actual release time,
addresses, a CRC of the transport payload) as JSON lines for ground truth. The delay rule itself
is the sans-I/O `DelaySchedule`. CLOCK_MONOTONIC is shared by every network namespace, so times
stamped inside and outside the namespace are directly comparable.

`python -m tests.support.netimpair --help` lists the commands: `run` (a command inside an
impaired namespace), `measure` (what the relay itself adds), `sweep` (remove stale namespaces).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import dataclasses
import fcntl
import itertools
import json
import os
import random
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal

NETNS_PREFIX = "rigimp-"
"""Every namespace this module creates is named rigimp-<creator pid>-<n>; the sweeper uses it."""
TAP_PREFIX = "rimp"
SUBNET_PREFIX = "10.231."
"""The /16 the links take their /30s from: 16384 links, .1 = root side, .2 = namespace side."""

_REPO_ROOT = Path(__file__).resolve().parents[2]
_LOCK_PATH = Path(tempfile.gettempdir()) / "rig-netimpair.lock"
_TUNSETIFF = 0x400454CA
_TUNGETIFF = 0x800454D2
_IFF_TAP = 0x0002
_IFF_NO_PI = 0x1000
_MAX_FRAME_BYTES = 65536
_MAX_QUEUED_FRAMES = 20000
_COUNTER = itertools.count()

Distribution = Literal["uniform", "normal"]


# --------------------------------------------------------------------------- the delay rule


@dataclasses.dataclass(frozen=True, slots=True)
class Scheduled:
    """When a frame that arrived at `arrival_ns` leaves; `target_ns` >= arrival + sampled."""

    arrival_ns: int
    sampled_delay_ns: int
    target_ns: int


class DelaySchedule:
    """Sans-I/O delay rule of one direction: `arrival + delay ± jitter`, FIFO, optional loss.

    `jitter_ns` is the half-width of a uniform distribution, or the standard deviation of a
    normal one; a sampled delay is never negative. A frame is never released before the one
    that arrived before it: target = max(arrival + sampled, previous target). Seeded: the same
    seed and arrivals give the same schedule.
    """

    def __init__(
        self,
        delay_ns: int,
        jitter_ns: int = 0,
        *,
        distribution: Distribution = "uniform",
        loss: float = 0.0,
        seed: int | str = 0,
    ) -> None:
        if delay_ns < 0 or jitter_ns < 0:
            raise ValueError(f"delay and jitter must be >= 0, got {delay_ns} ns, {jitter_ns} ns")
        if not 0.0 <= loss < 1.0:
            raise ValueError(f"loss must be in [0, 1), got {loss}")
        if distribution not in ("uniform", "normal"):
            raise ValueError(f"distribution must be 'uniform' or 'normal', got {distribution!r}")
        self.delay_ns = delay_ns
        self.jitter_ns = jitter_ns
        self.distribution: Distribution = distribution
        self.loss = loss
        self._delay_rng = random.Random(f"{seed}/delay")
        self._loss_rng = random.Random(f"{seed}/loss")
        self._last_target_ns: int | None = None

    def sample_delay_ns(self) -> int:
        if self.jitter_ns == 0:
            return self.delay_ns
        if self.distribution == "uniform":
            offset = self._delay_rng.uniform(-self.jitter_ns, self.jitter_ns)
        else:
            offset = self._delay_rng.gauss(0.0, self.jitter_ns)
        return max(0, self.delay_ns + round(offset))

    def schedule(self, arrival_ns: int) -> Scheduled | None:
        """The release of a frame arriving at `arrival_ns`, or None if it is lost."""
        if self.loss and self._loss_rng.random() < self.loss:
            return None
        sampled_ns = self.sample_delay_ns()
        target_ns = arrival_ns + sampled_ns
        if self._last_target_ns is not None and target_ns < self._last_target_ns:
            target_ns = self._last_target_ns
        self._last_target_ns = target_ns
        return Scheduled(arrival_ns, sampled_ns, target_ns)


# --------------------------------------------------------------------------- the packet log


@dataclasses.dataclass(frozen=True, slots=True)
class PacketRecord:
    """One frame through the relay. `release_ns` is None for a lost (or overflowed) frame."""

    direction: Literal["up", "down"]
    arrival_ns: int
    sampled_delay_ns: int | None
    target_ns: int | None
    release_ns: int | None
    length: int
    kind: str  # "udp", "tcp", "icmp", "arp", "ipv4", "ipv6", "other"
    src: str | None
    dst: str | None
    sport: int | None
    dport: int | None
    payload_crc32: int | None  # zlib.crc32 of the UDP/TCP payload, None when there is none
    tcp_seq: int | None = None  # TCP: the segment's sequence number (retransmissions repeat it)
    payload_len: int | None = None  # UDP/TCP payload bytes

    @property
    def delay_ns(self) -> int | None:
        """What the frame really spent in the relay: release - arrival."""
        return None if self.release_ns is None else self.release_ns - self.arrival_ns


def describe_frame(frame: bytes) -> dict[str, Any]:
    """Addresses, ports and a payload CRC of an Ethernet frame (for matching with the log)."""
    out: dict[str, Any] = dict(
        kind="other", src=None, dst=None, sport=None, dport=None, payload_crc32=None
    )
    if len(frame) < 14:
        return out
    ethertype = int.from_bytes(frame[12:14], "big")
    if ethertype == 0x0806:
        out["kind"] = "arp"
        return out
    if ethertype == 0x86DD:
        out["kind"] = "ipv6"
        return out
    if ethertype != 0x0800 or len(frame) < 34:
        return out
    ip = frame[14:]
    ihl = (ip[0] & 0x0F) * 4
    total = int.from_bytes(ip[2:4], "big")
    proto = ip[9]
    ip = ip[:total]  # drop Ethernet padding of short frames
    out["src"] = socket.inet_ntoa(ip[12:16])
    out["dst"] = socket.inet_ntoa(ip[16:20])
    l4 = ip[ihl:]
    if proto == 17 and len(l4) >= 8:
        out.update(kind="udp", sport=int.from_bytes(l4[0:2], "big"))
        out["dport"] = int.from_bytes(l4[2:4], "big")
        payload = l4[8:]
    elif proto == 6 and len(l4) >= 20:
        out.update(kind="tcp", sport=int.from_bytes(l4[0:2], "big"))
        out["dport"] = int.from_bytes(l4[2:4], "big")
        out["tcp_seq"] = int.from_bytes(l4[4:8], "big")
        payload = l4[(l4[12] >> 4) * 4 :]
    else:
        out["kind"] = "icmp" if proto == 1 else "ipv4"
        return out
    if payload:
        out["payload_crc32"] = zlib.crc32(payload)
        out["payload_len"] = len(payload)
    return out


def read_packet_log(path: Path) -> list[PacketRecord]:
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                records.append(PacketRecord(**json.loads(line)))
    return records


# --------------------------------------------------------------------------- the relay process


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class _TimerFd:
    """An absolute CLOCK_MONOTONIC timerfd (Python 3.11 has no os.timerfd_create)."""

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self._libc.timerfd_settime.argtypes = [
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(_Itimerspec),
            ctypes.c_void_p,
        ]
        fd = self._libc.timerfd_create(1, os.O_NONBLOCK | os.O_CLOEXEC)  # CLOCK_MONOTONIC
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self.fd: int = fd
        self.armed_ns: int | None = None
        # Wake at the deadline itself, not up to 50 us later (the default timer slack).
        with contextlib.suppress(AttributeError):
            self._libc.prctl(29, ctypes.c_ulong(1), 0, 0, 0)  # PR_SET_TIMERSLACK

    def arm(self, deadline_ns: int | None) -> None:
        if deadline_ns == self.armed_ns:
            return
        spec = _Itimerspec()
        if deadline_ns is not None:
            deadline_ns = max(deadline_ns, 1)
            spec.it_value.tv_sec, spec.it_value.tv_nsec = divmod(deadline_ns, 1_000_000_000)
        if self._libc.timerfd_settime(self.fd, 1, ctypes.byref(spec), None) != 0:  # ABSTIME
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")
        self.armed_ns = deadline_ns

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self.fd, 8)


def _try_realtime_priority() -> bool:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        return True
    except (OSError, AttributeError):
        return False


def run_relay(
    fd_host: int,
    fd_ns: int,
    up: DelaySchedule,
    down: DelaySchedule,
    *,
    control_fd: int,
    ack: IO[str],
    log: IO[str] | None,
) -> None:
    """Relay frames until `control_fd` reaches EOF. b"f" on it flushes the log, then acks."""
    timer = _TimerFd()
    for fd in (fd_host, fd_ns):
        os.set_blocking(fd, False)
    ep = select.epoll()
    for fd in (fd_host, fd_ns, timer.fd, control_fd):
        ep.register(fd, select.EPOLLIN)
    # per input fd: (output fd, schedule, direction, queue of (target, arrival, sampled, frame))
    routes: dict[int, tuple[int, DelaySchedule, str, deque[tuple[int, int, int, bytes]]]] = {
        fd_host: (fd_ns, up, "up", deque()),
        fd_ns: (fd_host, down, "down", deque()),
    }
    pending_log: list[tuple[str, int, int | None, int | None, int | None, bytes]] = []

    def flush_log() -> None:
        if log is None:
            pending_log.clear()
            return
        for direction, arrival, sampled, target, release, frame in pending_log:
            record = dict(
                direction=direction,
                arrival_ns=arrival,
                sampled_delay_ns=sampled,
                target_ns=target,
                release_ns=release,
                length=len(frame),
                **describe_frame(frame),
            )
            log.write(json.dumps(record, separators=(",", ":")) + "\n")
        log.flush()
        pending_log.clear()

    running = True
    while running:
        events = ep.poll()
        for fd, _mask in events:
            if fd == control_fd:
                command = os.read(control_fd, 4096)
                if not command:
                    running = False
                elif b"f" in command:
                    flush_log()
                    ack.write("flushed\n")
                    ack.flush()
            elif fd == timer.fd:
                timer.drain()
            else:
                _out_fd, schedule, direction, queue = routes[fd]
                while True:
                    try:
                        frame = os.read(fd, _MAX_FRAME_BYTES)
                    except BlockingIOError:
                        break
                    arrival_ns = time.monotonic_ns()
                    slot = schedule.schedule(arrival_ns)
                    if slot is None or len(queue) >= _MAX_QUEUED_FRAMES:
                        pending_log.append((direction, arrival_ns, None, None, None, frame))
                        continue
                    queue.append((slot.target_ns, arrival_ns, slot.sampled_delay_ns, frame))
        now_ns = time.monotonic_ns()
        next_ns: int | None = None
        for out_fd, _schedule, direction, queue in routes.values():
            while queue and queue[0][0] <= now_ns:
                target_ns, arrival_ns, sampled_ns, frame = queue.popleft()
                # Stamp before the write: the far side may receive it before write() returns.
                release_ns = time.monotonic_ns()
                with contextlib.suppress(OSError):  # a device going away at shutdown
                    os.write(out_fd, frame)
                pending_log.append(
                    (direction, arrival_ns, sampled_ns, target_ns, release_ns, frame)
                )
                now_ns = time.monotonic_ns()
            if queue and (next_ns is None or queue[0][0] < next_ns):
                next_ns = queue[0][0]
        timer.arm(next_ns)
        if next_ns is None and len(pending_log) >= 256:
            flush_log()  # only while idle, so logging never delays a frame
    flush_log()


def _relay_main(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when the relay stops
    realtime = _try_realtime_priority() if args.realtime else False
    common: dict[str, Any] = dict(distribution=args.distribution, loss=args.loss)
    up = DelaySchedule(args.up_ns, args.jitter_ns, seed=f"{args.seed}/up", **common)
    down = DelaySchedule(args.down_ns, args.jitter_ns, seed=f"{args.seed}/down", **common)
    log = open(args.log, "a", encoding="utf-8") if args.log else None  # noqa: SIM115
    try:
        sys.stdout.write(f"ready realtime={int(realtime)}\n")
        sys.stdout.flush()
        run_relay(
            args.fd_host,
            args.fd_ns,
            up,
            down,
            control_fd=sys.stdin.fileno(),
            ack=sys.stdout,
            log=log,
        )
    finally:
        if log is not None:
            log.close()
    return 0


# --------------------------------------------------------------------------- the link


def unavailable_reason() -> str | None:
    """Why an ImpairedLink cannot be built here (for pytest.skip), or None if it can."""
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "needs root (network namespaces and TAP devices)"
    if shutil.which("ip") is None:
        return "needs the `ip` command (iproute2)"
    try:
        fd = os.open("/dev/net/tun", os.O_RDWR)
    except OSError as exc:
        return f"cannot open /dev/net/tun: {exc.strerror}"
    os.close(fd)
    return None


def _ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    argv = ["ip", *(["-n", netns] if netns else []), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr.strip()}")
    return proc.stdout


def _open_tap(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", name.encode(), _IFF_TAP | _IFF_NO_PI))
    except OSError:
        os.close(fd)
        raise
    return fd


def _tap_name_of(fd: int) -> str:
    ifr = fcntl.ioctl(fd, _TUNGETIFF, bytes(18))
    return ifr[:16].rstrip(b"\0").decode()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale() -> list[str]:
    """Delete namespaces named rigimp-<pid>-<n> whose creating process is gone; their names."""
    removed = []
    for line in _ip("netns", "list", check=False).splitlines():
        name = line.split()[0] if line.strip() else ""
        match = re.fullmatch(re.escape(NETNS_PREFIX) + r"(\d+)-\d+", name)
        if match is None or _pid_alive(int(match.group(1))):
            continue
        for pid in _ip("netns", "pids", name, check=False).split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        _ip("netns", "del", name, check=False)
        removed.append(name)
    return removed


@contextlib.contextmanager
def _allocation_lock() -> Iterator[None]:
    with open(_LOCK_PATH, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _free_subnet_index() -> int:
    """The first /30 of 10.231.0.0/16 with no root-side address and no TAP of that name."""
    used_addrs = set(re.findall(r"inet (10\.231\.\d+\.\d+)/", _ip("-4", "-o", "addr", "show")))
    used_names = set(re.findall(rf"\b({TAP_PREFIX}[0-9a-f]{{4}})[hn]\b", _ip("-o", "link")))
    for index in range(16384):
        if f"{TAP_PREFIX}{index:04x}" in used_names:
            continue
        base = index * 4
        if f"{SUBNET_PREFIX}{base // 256}.{base % 256 + 1}" not in used_addrs:
            return index
    raise RuntimeError("no free /30 left in 10.231.0.0/16")


class ImpairedLink:
    """A network namespace reached from the root namespace through a delaying relay.

    `up` is root -> namespace (the rig's uplink to a sim inside), `down` the way back. Use as a
    context manager; `close()` is idempotent and also runs after a failed `open()`.
    `packet_log()` is the relay's ground truth; after `close()` it is the complete log.
    """

    def __init__(
        self,
        up_delay_ms: float = 0.0,
        down_delay_ms: float = 0.0,
        jitter_ms: float = 0.0,
        seed: int = 0,
        loss: float = 0.0,
        *,
        distribution: Distribution = "uniform",
        log_path: str | os.PathLike[str] | None = None,
        realtime: bool = True,
    ) -> None:
        # Validate now (DelaySchedule raises ValueError) rather than in the relay process.
        for delay_ms in (up_delay_ms, down_delay_ms):
            DelaySchedule(round(delay_ms * 1e6), round(jitter_ms * 1e6), loss=loss,
                          distribution=distribution)  # fmt: skip
        self.up_delay_ms = up_delay_ms
        self.down_delay_ms = down_delay_ms
        self.jitter_ms = jitter_ms
        self.seed = seed
        self.loss = loss
        self.distribution: Distribution = distribution
        self.realtime_requested = realtime
        self.realtime = False  # whether the relay got SCHED_FIFO
        self.netns = f"{NETNS_PREFIX}{os.getpid()}-{next(_COUNTER)}"
        self.host_ifname = ""
        self.ns_ifname = ""
        self.host_addr = ""
        self.ns_addr = ""
        self._tmpdir: str | None = None
        self.log_path: Path
        if log_path is None:
            self._tmpdir = tempfile.mkdtemp(prefix="rig-netimpair-")
            self.log_path = Path(self._tmpdir) / "packets.jsonl"
        else:
            self.log_path = Path(log_path)
        self._fds: list[int] = []
        self._relay: subprocess.Popen[str] | None = None
        self._children: list[subprocess.Popen[Any]] = []
        self._netns_created = False
        self._final_log: list[PacketRecord] | None = None
        self._closed = False

    # -- lifecycle

    def __enter__(self) -> ImpairedLink:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def open(self) -> ImpairedLink:
        reason = unavailable_reason()
        if reason is not None:
            raise RuntimeError(f"cannot build an impaired link: {reason}")
        sweep_stale()
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def _open(self) -> None:
        with _allocation_lock():
            index = _free_subnet_index()
            base = index * 4
            net = f"{SUBNET_PREFIX}{base // 256}."
            self.host_addr = f"{net}{base % 256 + 1}"
            self.ns_addr = f"{net}{base % 256 + 2}"
            self.host_ifname = f"{TAP_PREFIX}{index:04x}h"
            self.ns_ifname = f"{TAP_PREFIX}{index:04x}n"
            fd_host = _open_tap(self.host_ifname)
            self._fds.append(fd_host)
            fd_ns = _open_tap(self.ns_ifname)
            self._fds.append(fd_ns)
            _ip("netns", "add", self.netns)
            self._netns_created = True
            _ip("link", "set", self.ns_ifname, "netns", self.netns)
            # The fd must still be attached to the device that now lives in the namespace.
            if _tap_name_of(fd_ns) != self.ns_ifname:
                raise RuntimeError(f"{self.ns_ifname}: fd detached after moving to {self.netns}")
            _ip("link", "show", self.ns_ifname, netns=self.netns)
            # No IPv6 link-local address: no DAD / router solicitations in the relay log.
            _ip("link", "set", self.host_ifname, "addrgenmode", "none")
            _ip("addr", "add", f"{self.host_addr}/30", "dev", self.host_ifname)
            _ip("link", "set", self.host_ifname, "up")
        _ip("link", "set", self.ns_ifname, "addrgenmode", "none", netns=self.netns)
        _ip("addr", "add", f"{self.ns_addr}/30", "dev", self.ns_ifname, netns=self.netns)
        _ip("link", "set", self.ns_ifname, "up", netns=self.netns)
        _ip("link", "set", "lo", "up", netns=self.netns)
        self._start_relay(fd_host, fd_ns)

    def _start_relay(self, fd_host: int, fd_ns: int) -> None:
        argv = [
            sys.executable,
            "-m",
            "tests.support.netimpair",
            "relay",
            f"--fd-host={fd_host}",
            f"--fd-ns={fd_ns}",
            f"--up-ns={round(self.up_delay_ms * 1e6)}",
            f"--down-ns={round(self.down_delay_ms * 1e6)}",
            f"--jitter-ns={round(self.jitter_ms * 1e6)}",
            f"--distribution={self.distribution}",
            f"--loss={self.loss}",
            f"--seed={self.seed}",
            f"--log={self.log_path}",
            *(["--realtime"] if self.realtime_requested else []),
        ]
        self._relay = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            pass_fds=(fd_host, fd_ns),
            cwd=_REPO_ROOT,
        )
        assert self._relay.stdout is not None
        line = self._readline(timeout_s=10.0)
        if not line.startswith("ready"):
            raise RuntimeError(f"relay did not start (said {line!r})")
        self.realtime = "realtime=1" in line
        # The relay owns the devices now: they vanish when it exits, whatever happens to us.
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()

    def _readline(self, timeout_s: float) -> str:
        assert self._relay is not None and self._relay.stdout is not None
        ready, _, _ = select.select([self._relay.stdout], [], [], timeout_s)
        if not ready:
            raise RuntimeError(f"relay did not answer within {timeout_s} s")
        return self._relay.stdout.readline()

    def close(self) -> None:
        """Stop the processes, the relay, remove the devices and the namespace. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for child in self._children:
            _stop_process(child)
        self._children.clear()
        if self._relay is not None:
            if self._relay.stdin is not None:
                with contextlib.suppress(OSError):
                    self._relay.stdin.close()  # EOF: the relay flushes its log and exits
            _stop_process(self._relay, grace_s=3.0)
            if self._relay.stdout is not None:
                self._relay.stdout.close()
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()
        if self._netns_created:
            for pid in _ip("netns", "pids", self.netns, check=False).split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            _ip("netns", "del", self.netns, check=False)
        if self.log_path.exists():
            self._final_log = read_packet_log(self.log_path)
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)

    # -- using it

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start `argv` inside the namespace; it is stopped (TERM, then KILL) by close()."""
        if self._closed or self._relay is None:
            raise RuntimeError("the link is not open")
        kwargs.setdefault("cwd", _REPO_ROOT)
        proc: subprocess.Popen[Any] = subprocess.Popen(
            ["ip", "netns", "exec", self.netns, *argv], **kwargs
        )
        self._children.append(proc)
        return proc

    def run(self, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        """Run `argv` inside the namespace to completion."""
        kwargs.setdefault("cwd", _REPO_ROOT)
        return subprocess.run(["ip", "netns", "exec", self.netns, *argv], **kwargs)

    def packet_log(self) -> list[PacketRecord]:
        """Every frame the relay has handled so far (flushed on request), in release order."""
        if self._final_log is not None:
            return self._final_log
        if self._relay is None or self._relay.stdin is None or self._closed:
            return []
        self._relay.stdin.write("f")
        self._relay.stdin.flush()
        if self._readline(timeout_s=10.0).strip() != "flushed":
            raise RuntimeError("relay did not flush its log")
        return read_packet_log(self.log_path)

    def __repr__(self) -> str:
        return (
            f"ImpairedLink({self.netns}, {self.host_addr} -> {self.ns_addr}, "
            f"up={self.up_delay_ms} ms, down={self.down_delay_ms} ms, "
            f"jitter={self.jitter_ms} ms {self.distribution}, loss={self.loss})"
        )


def _stop_process(proc: subprocess.Popen[Any], grace_s: float = 2.0) -> None:
    if proc.poll() is None:
        if not (proc.stdin is not None and proc.stdin.closed):
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --------------------------------------------------------------------------- echo servers


def _udp_echo(host: str) -> int:
    """Answer each datagram with itself + (receive ns, send ns) on the shared monotonic clock."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, 0))
    print(sock.getsockname()[1], flush=True)
    while True:
        data, peer = sock.recvfrom(65536)
        rx_ns = time.monotonic_ns()
        sock.sendto(data + struct.pack("!qq", rx_ns, time.monotonic_ns()), peer)


def _tcp_echo(host: str) -> int:
    """Echo every TCP connection byte for byte, one connection at a time."""
    server = socket.create_server((host, 0))
    print(server.getsockname()[1], flush=True)
    while True:
        conn, _ = server.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)


def start_echo(link: ImpairedLink, protocol: Literal["udp", "tcp"]) -> int:
    """Start an echo server inside the link's namespace on ns_addr; its port."""
    proc = link.popen(
        [sys.executable, "-m", "tests.support.netimpair", f"{protocol}-echo", link.ns_addr],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 10.0)
    line = proc.stdout.readline() if ready else ""
    if not line.strip().isdigit():
        raise RuntimeError(f"{protocol} echo server did not start inside {link.netns}")
    return int(line)


def udp_round_trips(
    host: str, port: int, count: int, interval_s: float
) -> list[tuple[int, int, int, int]]:
    """(client send, server receive, server send, client receive) ns per answered probe.

    In sending order (probe i is the datagram b"!q" i), whatever order the answers came in.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect((host, port))
    sent: dict[int, int] = {}
    samples: list[tuple[int, int, int, int]] = []
    start_ns = time.monotonic_ns()
    deadline_ns = start_ns + int((count * interval_s + 2.0) * 1e9)
    seq = 0
    while len(samples) < count and time.monotonic_ns() < deadline_ns:
        next_send_ns = start_ns + int(seq * interval_s * 1e9) if seq < count else deadline_ns
        timeout_s = max(0.0, (next_send_ns - time.monotonic_ns()) / 1e9)
        ready, _, _ = select.select([sock], [], [], timeout_s)
        if ready:
            data = sock.recv(65536)
            rx_ns = time.monotonic_ns()
            (probe,) = struct.unpack("!q", data[:8])
            srv_rx_ns, srv_tx_ns = struct.unpack("!qq", data[-16:])
            samples.append((sent[probe], srv_rx_ns, srv_tx_ns, rx_ns))
        elif seq < count:
            sent[seq] = time.monotonic_ns()
            sock.send(struct.pack("!q", seq))
            seq += 1
    sock.close()
    return sorted(samples)


# --------------------------------------------------------------------------- commands


def _percentiles_us(values_ns: Sequence[int]) -> str:
    ordered = sorted(values_ns)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e3

    return f"min {ordered[0] / 1e3:.0f}  p50 {pick(0.5):.0f}  p99 {pick(0.99):.0f} us"


def _measure(args: argparse.Namespace) -> int:
    """What the relay adds: RTT through the relay at delay 0 and at a set delay."""
    print(f"{args.count} UDP round trips every {args.interval_ms} ms")
    for delay_ms in (0.0, args.delay_ms):
        with ImpairedLink(delay_ms, delay_ms, realtime=not args.no_realtime) as link:
            port = start_echo(link, "udp")
            udp_round_trips(link.ns_addr, port, 5, 0.01)  # ARP, page cache, warm-up
            samples = udp_round_trips(link.ns_addr, port, args.count, args.interval_ms / 1e3)
            log = [r for r in link.packet_log() if r.kind == "udp" and r.release_ns is not None]
        excess = [
            (rx - tx) - (srv_tx - srv_rx) - round(2 * delay_ms * 1e6)
            for tx, srv_rx, srv_tx, rx in samples
        ]
        late = [r.release_ns - r.target_ns for r in log if r.release_ns and r.target_ns]
        print(f"delay {delay_ms} ms each way (SCHED_FIFO={link.realtime}):")
        print(f"  RTT - 2*delay        {_percentiles_us(excess)}")
        print(f"  release - target     {_percentiles_us(late)}  (relay timer lateness)")
    return 0


def _run(args: argparse.Namespace) -> int:
    with ImpairedLink(
        args.up_ms, args.down_ms, args.jitter_ms, args.seed, args.loss, log_path=args.log
    ) as link:
        print(f"{link!r}: host {link.host_addr}, namespace {link.ns_addr}", file=sys.stderr)
        env = dict(os.environ, RIG_NETNS_HOST_ADDR=link.host_addr, RIG_NETNS_ADDR=link.ns_addr)
        proc = link.popen(args.command, env=env)
        try:
            return proc.wait()
        except KeyboardInterrupt:
            return 130


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.netimpair", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="command_name", required=True)
    run = sub.add_parser("run", help="run COMMAND inside an impaired namespace")
    run.add_argument("--up-ms", type=float, default=0.0)
    run.add_argument("--down-ms", type=float, default=0.0)
    run.add_argument("--jitter-ms", type=float, default=0.0)
    run.add_argument("--loss", type=float, default=0.0)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--log", help="keep the per-packet JSON-lines log here")
    run.add_argument("command", nargs="+")
    measure = sub.add_parser("measure", help="measure what the relay itself adds")
    measure.add_argument("--count", type=int, default=300)
    measure.add_argument("--interval-ms", type=float, default=5.0)
    measure.add_argument("--delay-ms", type=float, default=20.0)
    measure.add_argument("--no-realtime", action="store_true")
    sub.add_parser("sweep", help="delete namespaces left behind by dead processes")
    relay = sub.add_parser("relay", help="(internal) the relay process")
    relay.add_argument("--fd-host", type=int, required=True)
    relay.add_argument("--fd-ns", type=int, required=True)
    relay.add_argument("--up-ns", type=int, default=0)
    relay.add_argument("--down-ns", type=int, default=0)
    relay.add_argument("--jitter-ns", type=int, default=0)
    relay.add_argument("--distribution", choices=("uniform", "normal"), default="uniform")
    relay.add_argument("--loss", type=float, default=0.0)
    relay.add_argument("--seed", default="0")
    relay.add_argument("--log")
    relay.add_argument("--realtime", action="store_true")
    for name in ("udp-echo", "tcp-echo"):
        echo = sub.add_parser(name, help=f"(internal) {name} server, prints its port")
        echo.add_argument("host")
    args = parser.parse_args(argv)
    if args.command_name == "relay":
        return _relay_main(args)
    if args.command_name == "udp-echo":
        return _udp_echo(args.host)
    if args.command_name == "tcp-echo":
        return _tcp_echo(args.host)
    if args.command_name == "sweep":
        for name in sweep_stale():
            print(f"removed {name}")
        return 0
    reason = unavailable_reason()
    if reason is not None:
        print(f"netimpair: {reason}", file=sys.stderr)
        return 2
    if args.command_name == "measure":
        return _measure(args)
    return _run(args)


if __name__ == "__main__":
    sys.exit(main())
