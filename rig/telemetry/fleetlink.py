"""Telemetry from a fleet's shards to its driver over TCP: one live view for every node.

How this works: a shard (`rig run ... --fleet-feed HOST:PORT`, set by an engine) keeps its
bus exactly as a local run does and hands it to the same `ViewFeed` a local view gets (chunks
coalesced per refresh, a full socket drops and counts, never blocks the audio loop), over a
SOCK_SEQPACKET pair. `FleetUplink`'s thread reads that pair and writes the lines to a TCP
connection to the driver, after one `Hello` line (the run's token, the shard, its node and
clock). A slow or dead link fills the pair, and the feed drops and counts as it would for a
slow view; a link that breaks closes the pair, and the run goes on without telemetry.

The driver's `FleetCollector` (asyncio) accepts the shards, checks each hello's token (the
listening port may be reachable by others: `--fleet-listen 0.0.0.0:P` on a cluster), decodes
every line with the same checks as `rig watch` (rig.telemetry.wire: untrusted input), moves
each event onto the driver's clock (`ClockMap`) and renames its run to the merged run, then
publishes it on the driver's bus: the view and the progress lines read that bus as they
read a local run's.

Clocks: recordings keep each node's own monotonic clock; only the live view needs one time
line. Shards that share the driver's boot (same `boot_id`: one host, one CLOCK_MONOTONIC)
need no mapping. Others get the one-way lower bound: `offset = min(arrival - t_ns)` over the
hello and every event; it errs late by the smallest one-way delay seen (`describe()`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from rig.clock.base import Clock
from rig.errors import ConfigError, ProtocolError
from rig.safejson import object_remote
from rig.telemetry.bus import EventBus
from rig.telemetry.events import TelemetryEvent
from rig.telemetry.lifecycle import StartStop
from rig.telemetry.viewfeed import ViewFeed, socket_pair
from rig.telemetry.wire import MAX_PAYLOAD_BYTES, decode

#: the environment variable that carries the run's token to a shard (never argv: ps shows it)
TOKEN_ENV = "RIG_FLEET_TOKEN"
HELLO_VERSION = 1
MAX_HELLO_BYTES = 4096
HELLO_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 10.0
SEND_TIMEOUT_S = 30.0  # a driver that stops reading this long: the link is given up
RECV_BYTES = 1 << 20


def boot_id() -> str | None:
    """This host's boot id: two processes with the same one share CLOCK_MONOTONIC."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


def parse_address(text: str, what: str = "--fleet-feed") -> tuple[str, int]:
    """`HOST:PORT` (IPv6 as `[::1]:PORT`); ConfigError otherwise."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{what} wants HOST:PORT, got {text!r}")
    return host, int(port)


@dataclass(frozen=True, slots=True)
class Hello:
    """The first line a shard sends: who it is and a reading of its clock."""

    shard: str
    node: str | None
    host: str | None
    boot_id: str | None
    t_ns: int

    def encode(self, token: str) -> bytes:
        body = {
            "rig_fleet": HELLO_VERSION,
            "token": token,
            "shard": self.shard,
            "node": self.node,
            "host": self.host,
            "boot_id": self.boot_id,
            "t_ns": self.t_ns,
        }
        return json.dumps(body, separators=(",", ":")).encode() + b"\n"

    @staticmethod
    def decode(line: bytes, token: str) -> Hello:
        """The hello, if it is one and carries `token`; ProtocolError otherwise."""
        obj = object_remote(line, "fleet hello", max_bytes=MAX_HELLO_BYTES)
        if obj.get("rig_fleet") != HELLO_VERSION:
            raise ProtocolError("not a rig fleet hello (or another version)")
        got = obj.get("token")
        if not isinstance(got, str) or not hmac.compare_digest(got.encode(), token.encode()):
            raise ProtocolError("fleet hello with a wrong token")
        t_ns = obj.get("t_ns")
        if not isinstance(t_ns, int) or isinstance(t_ns, bool):
            raise ProtocolError("fleet hello without an integer t_ns")

        def text(key: str) -> str | None:
            v = obj.get(key)
            return v[:200] if isinstance(v, str) else None

        return Hello(text("shard") or "?", text("node"), text("host"), text("boot_id"), t_ns)


def fleet_hello(shard: str | None, node: str | None, clock: Clock) -> Hello:
    """This process's hello: its shard, node, host and a reading of its clock."""
    return Hello(shard or "?", node, socket.gethostname(), boot_id(), clock.now_ns())


class ClockMap:
    """A shard's monotonic times onto the driver's (sans-I/O: times come in as arguments).

    Same boot: the identity. Otherwise `offset_ns = min(arrival_ns - sent_ns)`: an event is
    sent after it happens and arrives after it is sent, so every sample is the offset plus a
    delay >= 0 and the minimum errs late by the smallest delay seen (the error bound)."""

    def __init__(self, same_clock: bool) -> None:
        self.same_clock = same_clock
        self.offset_ns: int | None = 0 if same_clock else None
        self.samples = 0

    def observe(self, sent_ns: int, arrival_ns: int) -> None:
        self.samples += 1
        if self.same_clock:
            return
        d = arrival_ns - sent_ns
        if self.offset_ns is None or d < self.offset_ns:
            self.offset_ns = d

    def to_local(self, t_ns: int) -> int:
        return t_ns + (self.offset_ns or 0)

    def describe(self) -> dict[str, Any]:
        if self.same_clock:
            return {"method": "same host (boot_id): one CLOCK_MONOTONIC", "offset_ns": 0}
        return {
            "method": "one-way lower bound: min(arrival - event time); late by at most the "
            "smallest one-way delay seen",
            "offset_ns": self.offset_ns,
            "samples": self.samples,
        }


@dataclass(slots=True)
class CollectorStats:
    connections: int = 0
    refused: int = 0  # bad hello, wrong token, too many shards
    events: int = 0
    malformed: int = 0


class FleetCollector:
    """The driver's end: accept shards, check and restamp their events, publish them.

    `run_id`: every event's run becomes the merged run; shards' own `run` events are left out
    (the driver publishes the fleet's). `on_event` sees each event after it is published."""

    def __init__(
        self,
        bus: EventBus,
        *,
        token: str,
        run_id: str,
        clock: Clock,
        host: str = "127.0.0.1",
        port: int = 0,
        max_shards: int = 1024,
        on_event: Callable[[TelemetryEvent, Hello], None] | None = None,
    ) -> None:
        self.bus = bus
        self.token = token
        self.run_id = run_id
        self.clock = clock
        self.host = host
        self.port = port
        self.max_shards = max_shards
        self.on_event = on_event
        self.stats = CollectorStats()
        self.clocks: dict[str, dict[str, Any]] = {}  # shard -> ClockMap.describe()
        self._server: asyncio.Server | None = None
        self._boot_id = boot_id()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> tuple[str, int]:
        """Listen; the (host, port) bound."""
        self._server = await asyncio.start_server(
            self._client, self.host, self.port, limit=MAX_PAYLOAD_BYTES + 2
        )
        addr = self._server.sockets[0].getsockname()
        return str(addr[0]), int(addr[1])

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop listening; read what the shards sent before they ended (their links are at
        EOF, or will be within `grace_s`), then drop what is left."""
        if self._server is not None:
            self._server.close()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace_s)
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self._server is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await self._server.wait_closed()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._serve(reader)
        except (OSError, asyncio.IncompleteReadError, ValueError, ProtocolError, TimeoutError):
            pass  # a broken or hostile link: it ends; the run and the other shards go on
        except asyncio.CancelledError:
            pass  # stop(): ends quietly (asyncio's server callback reads the task's result)
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def _serve(self, reader: asyncio.StreamReader) -> None:
        if self.stats.connections >= self.max_shards:
            self.stats.refused += 1
            return
        async with asyncio.timeout(HELLO_TIMEOUT_S):
            line = await reader.readline()
        try:
            hello = Hello.decode(line, self.token)
        except ProtocolError:
            self.stats.refused += 1
            raise
        self.stats.connections += 1
        clock = ClockMap(self._boot_id is not None and hello.boot_id == self._boot_id)
        clock.observe(hello.t_ns, self.clock.now_ns())
        self.clocks[hello.shard] = clock.describe()
        while line := await reader.readline():
            if not line.endswith(b"\n"):
                return  # cut mid-line: the link ended
            if not line.strip():
                continue
            try:
                ev = decode(line)
            except ProtocolError:
                self.stats.malformed += 1
                continue
            clock.observe(ev.t_ns, self.clock.now_ns())
            if ev.kind == "run":
                continue
            ev = replace(ev, run_id=self.run_id, t_ns=clock.to_local(ev.t_ns))
            self.stats.events += 1
            self.bus.publish(ev)
            if self.on_event is not None:
                self.on_event(ev, hello)
        self.clocks[hello.shard] = clock.describe()


class FleetUplink(StartStop):
    """The shard's end: `async with FleetUplink(bus, "HOST:PORT", hello):` sends the bus's
    telemetry to the driver for as long as the run streams. See the module docstring."""

    def __init__(
        self,
        bus: EventBus,
        address: str,
        hello: Hello,
        *,
        token: str | None = None,
        flush_hz: float = 4.0,
        clock: Clock | None = None,
    ) -> None:
        self.address = parse_address(address)
        self.hello = hello
        self.token = token if token is not None else os.environ.get(TOKEN_ENV, "")
        self.error: str | None = None
        self.sent_bytes = 0
        self._ours, self._theirs = socket_pair()
        self.feed = ViewFeed(bus, self._ours, flush_hz=flush_hz, clock=clock)
        self._thread = threading.Thread(target=self._forward, name="fleet-uplink", daemon=True)

    async def start(self) -> None:
        self.feed.start()
        self._thread.start()
        # let the feed's periodic task reach its first wait: ViewFeed.stop sends the last frame
        # from there (a task that never ran would send nothing: a shard that ends at once)
        await asyncio.sleep(0)

    async def stop(self) -> None:
        await self.feed.stop()  # the last frame, then EOF on the pair: the thread ends
        await asyncio.to_thread(self._thread.join, SEND_TIMEOUT_S)

    def _forward(self) -> None:
        """Pair -> TCP, blocking, in this thread (never on the audio loop)."""
        try:
            with socket.create_connection(self.address, timeout=CONNECT_TIMEOUT_S) as conn:
                conn.settimeout(SEND_TIMEOUT_S)
                conn.sendall(self.hello.encode(self.token))
                while data := self._theirs.recv(RECV_BYTES):
                    conn.sendall(data)
                    self.sent_bytes += len(data)
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_WR)
        except OSError as exc:
            self.error = f"fleet telemetry to {self.address[0]}:{self.address[1]}: {exc}"
        finally:
            self._theirs.close()  # the feed sees EOF and stops sending: the run goes on
