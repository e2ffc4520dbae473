"""The UDP relay's asyncio core: flows of two sockets, each datagram held as its link decides.

How this works
--------------
A *flow* is one WebRTC media path: a rig-facing socket (the rig's peer sends to it: the far
end's only candidate in the answer the rig sees) and a far-facing socket (the far end sends
to it: the rig's only candidate in the offer the far end sees; rig.net.sdpcand). A datagram
from the rig's address on the rig side goes up, out of the far side to the far end's chosen
candidate; one from that candidate on the far side goes down, out of the rig side. Anything
from another source is dropped and counted (`stray`). ICE, DTLS and SRTP pass through
untouched: the relay cannot read media, only the plain RTP/RTCP headers, which it logs.

Each datagram is stamped on arrival (shared monotonic clock) and given to its direction's
`DatagramLink` (rig.net.impair, sans-I/O, seeded per flow and direction): lost, delivered
once or duplicated, each copy at its own release time (a timerfd wake-up, rig.clock), in
order unless `reorder` lets it overtake. Every datagram is one line of impair.jsonl:
`proto` "udp", `conn` (flow), `dir`, `seq` (per flow and direction), `bytes`, `kind`
(stun | dtls | rtp | rtcp | other, RFC 7983), `t_in_ns`, `target_ns`, `t_out_ns` (null
when lost), `delay_ns`, `fate` (delivered | duplicated | lost | queue_drop), `extra_ns`,
and for RTP `ssrc`, `rtp_seq`, `rtp_ts`, `pt`; for RTCP `ssrc`, `rtcp_pt`.

Control (from the rig, over a SOCK_SEQPACKET socket, one JSON object per message):
`{"op": "open", "rig": [host, port] | null, "far_bind": host, "local_bind": host, "flip":
bool}` -> `{"flow", "rig_side", "far_side"}`; `{"op": "far" | "local", "flow", "addr": [host,
port]}` (the far end's candidate, the local peer's when it was not known at open);
`{"op": "close", "flow"}`; replies carry `"ok": true` or `"error"`. `flip` is for `rig sim`,
whose local peer is the system: its datagrams go "down" (towards the rig).
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import struct
from dataclasses import dataclass, field
from typing import IO, Any

from rig.clock.base import Clock
from rig.net.impair import DatagramLink, Fate, Impairment

CONTROL_BYTES = 65536


def classify(data: bytes) -> dict[str, Any]:
    """The kind of a WebRTC datagram by its first byte (RFC 7983) and its plain header."""
    if not data:
        return {"kind": "other"}
    b0 = data[0]
    if b0 <= 3:
        return {"kind": "stun"}
    if 20 <= b0 <= 63:
        return {"kind": "dtls"}
    if 128 <= b0 <= 191 and len(data) >= 12:
        b1 = data[1]
        if 192 <= b1 <= 223:  # RTCP packet types 192-223 (RFC 5761)
            return {"kind": "rtcp", "rtcp_pt": b1, "ssrc": struct.unpack_from("!I", data, 4)[0]}
        seq, ts, ssrc = struct.unpack_from("!HII", data, 2)
        return {"kind": "rtp", "pt": b1 & 0x7F, "rtp_seq": seq, "rtp_ts": ts, "ssrc": ssrc}
    return {"kind": "other"}


class _Side(asyncio.DatagramProtocol):
    def __init__(self, relay: DatagramRelay, flow: Flow, side: str) -> None:
        self.relay, self.flow, self.side = relay, flow, side

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.relay.arrived(self.flow, self.side, data, (addr[0], addr[1]))

    def error_received(self, exc: Exception) -> None:
        self.flow.errors += 1  # ICMP unreachable after a peer closed: not the relay's fault


@dataclass(eq=False)
class Flow:
    """One peer connection: the local peer (the rig's, or with `flip` the sim's) behind the
    local side, the far end behind the far side. `up` is always towards the system."""

    flow_id: int
    rig_addr: tuple[str, int] | None  # the local peer's candidate (None until told)
    up: DatagramLink
    down: DatagramLink
    flip: bool = False  # the local peer is the system (rig sim): local -> far is "down"
    far_addr: tuple[str, int] | None = None
    rig_side: asyncio.DatagramTransport | None = None  # faces the local peer
    far_side: asyncio.DatagramTransport | None = None  # faces the far end
    seq: dict[str, int] = field(default_factory=lambda: {"up": 0, "down": 0})
    stray: int = 0
    errors: int = 0
    closed: bool = False


class DatagramRelay:
    """Serves flows opened over the control socket until `stop` is set."""

    def __init__(self, impairment: Impairment, clock: Clock, log: IO[str] | None = None) -> None:
        self.impairment = impairment
        self.clock = clock
        self.log = log
        self.flows: dict[int, Flow] = {}
        self.datagrams = 0
        self.stray = 0
        self.errors: list[str] = []
        self.opened = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def serve(self, control: socket.socket, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        control.setblocking(False)
        reader = asyncio.ensure_future(self._control(loop, control))
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait([reader, stopping], return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        reader.cancel()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for flow in list(self.flows.values()):
            self._close(flow)

    async def _control(self, loop: asyncio.AbstractEventLoop, control: socket.socket) -> None:
        while True:
            msg = await loop.sock_recv(control, CONTROL_BYTES)
            if not msg:
                return  # the rig closed its end (or died): stop serving
            try:
                reply = await self._command(json.loads(msg))
            except (ValueError, KeyError, TypeError, OSError) as exc:
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            await loop.sock_sendall(control, json.dumps(reply).encode())

    async def _command(self, cmd: dict[str, Any]) -> dict[str, Any]:
        op = cmd["op"]
        if op not in ("open", "far", "local", "close"):
            raise ValueError(f"unknown op {op!r}")
        if op == "open":
            rig = cmd.get("rig")
            return await self._open(
                None if rig is None else (str(rig[0]), int(rig[1])),
                str(cmd["far_bind"]),
                str(cmd.get("local_bind") or "127.0.0.1"),
                bool(cmd.get("flip")),
            )
        flow = self.flows[int(cmd["flow"])]
        if op in ("far", "local"):
            addr = (str(cmd["addr"][0]), int(cmd["addr"][1]))
            if op == "far":
                flow.far_addr = addr
            else:
                flow.rig_addr = addr
            return {"ok": True}
        self._close(flow)  # op == "close"
        return {"ok": True, "stray": flow.stray}

    async def _open(
        self, rig_addr: tuple[str, int] | None, far_bind: str, local_bind: str, flip: bool
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        n = self.opened
        self.opened += 1
        imp = self.impairment
        flow = Flow(
            n,
            rig_addr,
            DatagramLink(imp.up, random.Random(f"{imp.seed}:{n}:up")),
            DatagramLink(imp.down, random.Random(f"{imp.seed}:{n}:down")),
            flip,
        )
        rig_side, _ = await loop.create_datagram_endpoint(
            lambda: _Side(self, flow, "local"), local_addr=(local_bind, 0)
        )
        far_side, _ = await loop.create_datagram_endpoint(
            lambda: _Side(self, flow, "far"), local_addr=(far_bind, 0)
        )
        flow.rig_side, flow.far_side = rig_side, far_side
        self.flows[n] = flow
        return {
            "ok": True,
            "flow": n,
            "rig_side": list(rig_side.get_extra_info("sockname")[:2]),
            "far_side": list(far_side.get_extra_info("sockname")[:2]),
        }

    def _close(self, flow: Flow) -> None:
        flow.closed = True
        self.stray += flow.stray
        flow.stray = 0
        for t in (flow.rig_side, flow.far_side):
            if t is not None:
                t.close()
        self.flows.pop(flow.flow_id, None)

    # --- the packet path ----------------------------------------------------------------

    def arrived(self, flow: Flow, side: str, data: bytes, src: tuple[str, int]) -> None:
        t_in = self.clock.now_ns()
        expected = flow.rig_addr if side == "local" else flow.far_addr
        if flow.closed or src != expected:
            flow.stray += 1
            return
        direction = "up" if (side == "local") != flow.flip else "down"
        link = flow.up if direction == "up" else flow.down
        seq = flow.seq[direction]
        flow.seq[direction] = seq + 1
        self.datagrams += 1
        head = classify(data)
        for fate in link.admit(t_in, len(data)):
            if fate.fate in ("lost", "queue_drop"):
                self._record(flow, direction, seq, data, head, fate, None)
                continue
            task = asyncio.ensure_future(
                self._release(flow, side, direction, seq, data, head, fate)
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _release(
        self,
        flow: Flow,
        side: str,
        direction: str,
        seq: int,
        data: bytes,
        head: dict[str, Any],
        fate: Fate,
    ) -> None:
        await self.clock.sleep_until(fate.release_ns)
        if flow.closed:
            return
        out, dest = (
            (flow.far_side, flow.far_addr) if side == "local" else (flow.rig_side, flow.rig_addr)
        )
        if out is None or dest is None:
            return
        t_out = self.clock.now_ns()  # handed to the kernel now
        out.sendto(data, dest)
        self._record(flow, direction, seq, data, head, fate, t_out)

    def _record(
        self,
        flow: Flow,
        direction: str,
        seq: int,
        data: bytes,
        head: dict[str, Any],
        fate: Fate,
        t_out: int | None,
    ) -> None:
        if self.log is None:
            return
        row = {
            "proto": "udp",
            "conn": flow.flow_id,
            "dir": direction,
            "seq": seq,
            "bytes": len(data),
            **head,
            "t_in_ns": fate.t_in_ns,
            "target_ns": fate.release_ns,
            "t_out_ns": t_out,
            "delay_ns": fate.delay_ns,
            "fate": fate.fate,
            "extra_ns": fate.extra_ns,
        }
        self.log.write(json.dumps(row, separators=(",", ":")) + "\n")
