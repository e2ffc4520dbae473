"""The UDP (WebRTC media) relay as a child process, and the handles the rig holds.

`UdpRelay` is the process (one per run, like `TcpRelay`: rig.relay.process says why a process);
`MediaRoute` is one peer connection's flow through it, the hook `WebRtcTransport` calls while
it carries the offer and the answer (rig.net.sdpcand rewrites the candidates). The rig talks
to the child over a SOCK_SEQPACKET socket pair (rig.relay.datagram has the messages).

Protocol on stdout: `ready` once the child serves; when the control socket closes (or on
SIGTERM) it flushes impair.jsonl and prints `done FLOWS DATAGRAMS STRAY ERRORS`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import signal
import socket
import subprocess
from typing import IO, Any

from rig.childproc import die_with_parent
from rig.clock.base import MonotonicClock
from rig.errors import TransportError
from rig.net.impair import Impairment, parse_impair
from rig.net.sdpcand import candidates, check_bundled, pick_far, route_through
from rig.relay import child
from rig.relay.child import DEFAULT_RT_PRIORITY
from rig.relay.datagram import CONTROL_BYTES, DatagramRelay

CONTROL_TIMEOUT_S = 5.0


def far_bind_address(target_ip: str) -> str:
    """The local address the far end can reach us on: loopback for a loopback target, else
    the source address the kernel routes towards it (a UDP connect sends nothing)."""
    if ipaddress.ip_address(target_ip).is_loopback:
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((target_ip, 9))
        return str(s.getsockname()[0])


class UdpRelay:
    """Handle of one UDP relay process: `start(log_path)`, `open_route(...)`, `stop()`."""

    kind = "udp"

    def __init__(self, impairment: Impairment, *, rt_priority: int = DEFAULT_RT_PRIORITY) -> None:
        self.impairment = impairment
        self.rt_priority = rt_priority
        self.flows = 0
        self.datagrams = 0
        self.stray = 0
        self.errors = 0
        self._proc: subprocess.Popen[str] | None = None
        self._control: socket.socket | None = None
        self._lock: asyncio.Lock | None = None

    def start(self, log_path: str | None = None) -> None:
        """Start the child (blocking until it serves). From the main thread: the child dies
        with the thread that started it (prctl)."""
        if self._proc is not None:
            raise RuntimeError("relay already started")
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        args = ["udp", "--spec", self.impairment.spec, "--control-fd", str(theirs.fileno())]
        with theirs:
            self._proc = child.spawn(
                args, rt_priority=self.rt_priority, log_path=log_path, pass_fds=(theirs.fileno(),)
            )
        try:
            child.first_line(self._proc, lambda ln: ln.strip() == "ready", "UDP impair relay")
        except OSError:
            mine.close()
            raise
        mine.setblocking(False)
        self._control = mine

    async def call(self, **cmd: Any) -> dict[str, Any]:
        """One control request and its reply (TransportError when the relay refuses or is gone)."""
        if self._control is None:
            raise TransportError("the UDP impair relay is not running")
        if self._lock is None:
            self._lock = asyncio.Lock()
        loop = asyncio.get_running_loop()
        async with self._lock, asyncio.timeout(CONTROL_TIMEOUT_S):
            await loop.sock_sendall(self._control, json.dumps(cmd).encode())
            raw = await loop.sock_recv(self._control, CONTROL_BYTES)
        if not raw:
            raise TransportError("the UDP impair relay went away")
        reply: dict[str, Any] = json.loads(raw)
        if not reply.get("ok"):
            raise TransportError(f"UDP impair relay: {reply.get('error')}")
        return reply

    async def open_route(self, target_host: str | None) -> MediaRoute:
        """A route for one peer connection towards `target_host` (the signalling URL's)."""
        target_ip = "127.0.0.1"
        if target_host:
            infos = await asyncio.get_running_loop().getaddrinfo(
                target_host, None, family=socket.AF_INET, type=socket.SOCK_DGRAM
            )
            target_ip = str(infos[0][4][0])
        return MediaRoute(self, target_ip)

    def answer_route(self, host: str) -> AnswerRoute:
        """A route for one peer connection `rig sim` answers on `host` (its --host)."""
        return AnswerRoute(self, host)

    def stop(self) -> None:
        """Stop the child (its log flushed); safe twice."""
        proc, self._proc = self._proc, None
        if self._control is not None:
            self._control.close()
            self._control = None
        if proc is None:
            return
        # the control socket's end is the child's cue: it flushes the log and exits
        counts = child.reap(proc, [None, signal.SIGTERM], 5)
        if len(counts) == 4:
            self.flows, self.datagrams, self.stray, self.errors = counts

    def __enter__(self) -> UdpRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def describe(self) -> dict[str, Any]:
        return {"kind": "udp", **self.impairment.as_dict()}


class _Flow:
    """One flow through the relay, either side: `close()` ends it (once; quiet when the
    relay is gone already, as at the end of a run)."""

    def __init__(self, relay: UdpRelay) -> None:
        self.relay = relay
        self.flow: int | None = None

    async def close(self) -> None:
        if self.flow is not None:
            flow, self.flow = self.flow, None
            try:
                await self.relay.call(op="close", flow=flow)
            except (TransportError, TimeoutError, OSError):
                pass


class MediaRoute(_Flow):
    """One peer connection through the relay: rewrite the offer out, the answer in."""

    def __init__(self, relay: UdpRelay, target_ip: str) -> None:
        super().__init__(relay)
        self.target_ip = target_ip
        self.flow_id: int | None = None  # kept after close, for the manifest
        self.rig_side: tuple[str, int] | None = None
        self.far: tuple[str, int] | None = None

    async def route_offer(self, offer_sdp: str) -> str:
        """The rig's offer as the far end should see it: its only candidate is the relay."""
        rig_addr = pick_far(candidates(offer_sdp), "127.0.0.1")
        reply = await self.relay.call(
            op="open", rig=list(rig_addr), far_bind=far_bind_address(self.target_ip)
        )
        self.flow = self.flow_id = int(reply["flow"])
        self.rig_side = (str(reply["rig_side"][0]), int(reply["rig_side"][1]))
        far_side = reply["far_side"]
        return route_through(offer_sdp, str(far_side[0]), int(far_side[1]))

    async def route_answer(self, answer_sdp: str) -> str:
        """The far end's answer as the rig's peer should see it: its only candidate is the
        relay's rig-facing socket, which forwards to the far end's chosen candidate."""
        assert self.flow is not None and self.rig_side is not None, "route_offer first"
        check_bundled(answer_sdp, "the far end's answer")
        self.far = pick_far(candidates(answer_sdp), self.target_ip)
        await self.relay.call(op="far", flow=self.flow, addr=list(self.far))
        return route_through(answer_sdp, *self.rig_side)

    def describe(self) -> dict[str, Any]:
        return {
            "flow": self.flow_id,
            "far": None if self.far is None else f"{self.far[0]}:{self.far[1]}",
        }


class AnswerRoute(_Flow):
    """The answering side (`rig sim --transport webrtc --impair`): the offer that came in is
    rewritten for the sim's own peer, the answer going out for the rig, so the rig's
    datagrams cross the relay ("up") and the sim's come back through it ("down")."""

    def __init__(self, relay: UdpRelay, host: str) -> None:
        super().__init__(relay)
        self.host = host
        self.local_side: tuple[str, int] | None = None
        self.far_side: tuple[str, int] | None = None

    async def route_offer_in(self, offer_sdp: str) -> str:
        check_bundled(offer_sdp, "the offer")
        far = pick_far(candidates(offer_sdp), None)
        reply = await self.relay.call(
            op="open", rig=None, far_bind=self.host, local_bind=self.host, flip=True
        )
        self.flow = int(reply["flow"])
        self.local_side = (str(reply["rig_side"][0]), int(reply["rig_side"][1]))
        self.far_side = (str(reply["far_side"][0]), int(reply["far_side"][1]))
        await self.relay.call(op="far", flow=self.flow, addr=list(far))
        return route_through(offer_sdp, *self.local_side)

    async def route_answer_out(self, answer_sdp: str) -> str:
        assert self.flow is not None and self.far_side is not None, "route_offer_in first"
        local = pick_far(candidates(answer_sdp), self.host)
        await self.relay.call(op="local", flow=self.flow, addr=list(local))
        return route_through(answer_sdp, *self.far_side)


def main(argv: list[str]) -> int:
    p = child.arguments("python -m rig.relay udp")
    p.add_argument("--control-fd", type=int, required=True)
    args = p.parse_args(argv)
    if args.parent:
        die_with_parent(args.parent)
    control = socket.socket(fileno=args.control_fd)
    log: IO[str] | None = open(args.log, "a", buffering=1, encoding="utf-8") if args.log else None  # noqa: SIM115
    relay = DatagramRelay(parse_impair(args.spec), MonotonicClock(), log)

    async def body(stop: asyncio.Event) -> None:
        print("ready", flush=True)
        await relay.serve(control, stop)

    try:
        child.serve(args.rt_priority, body)
    finally:
        if log is not None:
            log.close()
        control.close()
    print(f"done {relay.opened} {relay.datagrams} {relay.stray} {len(relay.errors)}", flush=True)
    return 0
