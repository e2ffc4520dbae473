"""`rig proxy`: a recording WebSocket proxy between a client and a voice system.

How this works: every client connection gets its own upstream connection (the upstream URL,
with the client's path and query appended when the upstream URL has none). Two pump tasks
forward messages unchanged, one per direction. Each message is stamped on the shared clock
when it came off the socket (the same stamping connection the rig's transport uses on its
own client side) and again right after it was handed on, so the log shows both when things
happened and what the proxy itself added. Records go to the writer thread: the pumps never
wait on the disk.

Only metadata is logged (direction, sizes, times, the JSON `type` of text messages): payloads
can carry credentials or personal audio. Credentials in the client's handshake headers
(Authorization, api-key headers) are passed upstream and never written anywhere (nor to
another origin when the upstream redirects).

Limits: a message over `max_message_bytes` (16 MiB) closes that connection with 1009; a
connection with no message either way for `idle_timeout_s` (300 s) is closed with 1001. A
connection's `messages.jsonl` and `summary.json` are written however it ends (`finally`),
with `closed_by` (client, upstream, limit, idle, proxy) and `error` saying why.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from rig.clock.base import Clock, MonotonicClock
from rig.core.responses import lateness_summary
from rig.recordings.writer import write_json_atomic
from rig.redact import redact, redact_text, redact_url
from rig.safejson import JsonInputError, parse
from rig.transports.websocket import (
    SafeConnect,
    StampedConnection,
    StampedServerConnection,
    stamping,
)

#: handshake headers passed from the client to the upstream system (never logged)
FORWARDED_HEADERS = (
    "authorization",
    "openai-beta",
    "x-api-key",
    "x-goog-api-key",
    "api-key",
    "user-agent",
)


@dataclass
class ConnectionLog:
    conn: int
    dir: str
    path: str
    messages: int = 0
    proxy_delay_ns: dict[str, list[int]] = field(default_factory=lambda: {"up": [], "down": []})
    counts: dict[str, int] = field(default_factory=lambda: {"up": 0, "down": 0})
    bytes: dict[str, int] = field(default_factory=lambda: {"up": 0, "down": 0})
    closed_by: str | None = None
    error: str | None = None


def upstream_for(upstream: str, client_path: str) -> str:
    """The upstream URL for a client: the client's path and query when upstream has none."""
    up = urlsplit(upstream)
    if up.path not in ("", "/") or up.query:
        return upstream
    cp = urlsplit(client_path)
    return urlunsplit((up.scheme, up.netloc, cp.path or "/", cp.query, ""))


def message_meta(message: str | bytes) -> dict[str, Any]:
    if isinstance(message, bytes):
        return {"kind": "binary", "bytes": len(message)}
    meta: dict[str, Any] = {"kind": "text", "bytes": len(message.encode("utf-8"))}
    with contextlib.suppress(JsonInputError):
        obj = parse(message)
        if isinstance(obj, dict) and isinstance(obj.get("type"), str):
            meta["type"] = obj["type"][:200]
    return meta


class RecordingProxy:
    def __init__(
        self,
        upstream: str,
        out_dir: str,
        *,
        connect_timeout_s: float = 10.0,
        clock: Clock | None = None,
        max_message_bytes: int = 16 << 20,
        idle_timeout_s: float = 300.0,
        connect_via: tuple[str, int] | None = None,
    ) -> None:
        self.clock: Clock = clock or MonotonicClock()
        #: TCP address to reach the upstream through (an impairment relay, rig.relay.process)
        self.connect_via = connect_via
        self.upstream = upstream
        self.out_dir = out_dir
        self.connect_timeout_s = connect_timeout_s
        self.max_message_bytes = max_message_bytes
        self.idle_timeout_s = idle_timeout_s
        self._ids = itertools.count(1)
        self._server: Server | None = None
        self.logs: list[ConnectionLog] = []
        os.makedirs(out_dir, exist_ok=True)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._server = await serve(
            self._handle,
            host,
            port,
            create_connection=stamping(StampedServerConnection, self.clock),
            max_size=self.max_message_bytes,
            compression=None,
            ping_interval=None,
        )
        bound = next(iter(self._server.sockets)).getsockname()
        write_json_atomic(
            os.path.join(self.out_dir, "manifest.json"),
            redact(
                {
                    "command": "proxy",
                    "upstream": redact_url(self.upstream),
                    "listen": f"{bound[0]}:{bound[1]}",
                    "started_ns": self.clock.now_ns(),
                    "max_message_bytes": self.max_message_bytes,
                    "idle_timeout_s": self.idle_timeout_s,
                }
            ),
        )
        return f"ws://{bound[0]}:{bound[1]}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, client: ServerConnection) -> None:
        conn = next(self._ids)
        path = client.request.path if client.request is not None else "/"
        d = os.path.join(self.out_dir, "connections", f"{conn:04d}")
        os.makedirs(d, exist_ok=True)
        log = ConnectionLog(conn, d, urlsplit(path).path)
        self.logs.append(log)
        headers = {
            k: v
            for k, v in (client.request.headers.raw_items() if client.request else [])
            if k.lower() in FORWARDED_HEADERS
        }
        lines: list[str] = []
        try:
            await self._relay(client, headers, path, log, lines)
        except Exception as exc:  # noqa: BLE001 - a bug in one connection is recorded, not lost
            log.closed_by = log.closed_by or "proxy"
            log.error = log.error or f"proxy error: {type(exc).__name__}: {redact_text(str(exc))}"
            with contextlib.suppress(Exception):
                await client.close(1011, "proxy error")
        finally:
            self._finish(log, lines)

    async def _relay(
        self,
        client: ServerConnection,
        headers: dict[str, str],
        path: str,
        log: ConnectionLog,
        lines: list[str],
    ) -> None:
        via: dict[str, Any] = {}
        if self.connect_via is not None:
            via = {"host": self.connect_via[0], "port": self.connect_via[1], "proxy": None}
        try:
            upstream = await asyncio.wait_for(
                SafeConnect(
                    upstream_for(self.upstream, path),
                    additional_headers=headers or None,
                    create_connection=stamping(StampedConnection, self.clock),
                    max_size=self.max_message_bytes,
                    compression=None,
                    ping_interval=None,
                    **via,
                ),
                self.connect_timeout_s,
            )
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI, ValueError) as exc:
            log.error = f"upstream connect failed: {type(exc).__name__}: {redact_text(str(exc))}"
            await client.close(1011, "upstream unavailable")
            return
        activity = [self.clock.now_ns()]
        async with upstream:
            tasks = [
                asyncio.create_task(self._pump(client, upstream, "up", log, lines, activity)),
                asyncio.create_task(self._pump(upstream, client, "down", log, lines, activity)),
                asyncio.create_task(self._idle_watch(client, upstream, log, activity)),
            ]
            try:
                done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            for t in done:
                t.result()  # surface a bug in a pump (recorded by the caller)
        await client.close()

    async def _idle_watch(
        self, client: Any, upstream: Any, log: ConnectionLog, activity: list[int]
    ) -> None:
        """Close both sides once no message went either way for `idle_timeout_s`."""
        while True:
            left = self.idle_timeout_s - (self.clock.now_ns() - activity[0]) / 1e9
            if left <= 0:
                log.closed_by = log.closed_by or "idle"
                reason = f"idle for {self.idle_timeout_s:g} s"
                for ws in (client, upstream):
                    with contextlib.suppress(Exception):
                        await ws.close(1001, reason)
                return
            await asyncio.sleep(left)

    async def _pump(
        self,
        src: Any,
        dst: Any,
        direction: str,
        log: ConnectionLog,
        lines: list[str],
        activity: list[int],
    ) -> str:
        """Forward until one side closes; returns who closed ("client" or "upstream")."""
        closer = "client" if direction == "up" else "upstream"
        while True:
            try:
                message = await src.recv()
            except ConnectionClosed as exc:
                if exc.sent is not None and exc.sent.code == 1009:  # we refused a message
                    closer = "limit"
                    log.error = log.error or (
                        f"message too big: over {self.max_message_bytes} bytes "
                        f"({'from the client' if direction == 'up' else 'from upstream'})"
                    )
                    with contextlib.suppress(ConnectionClosed):
                        await dst.close(1009, "message too big")
                log.closed_by = log.closed_by or closer  # the first side to go
                with contextlib.suppress(ConnectionClosed):
                    await dst.close()
                return closer
            activity[0] = self.clock.now_ns()
            t_in = src.stamps.popleft() if src.stamps else self.clock.now_ns()
            try:
                await dst.send(message)
            except ConnectionClosed:
                other = "upstream" if direction == "up" else "client"
                log.closed_by = log.closed_by or other
                return other
            t_out = self.clock.now_ns()
            log.counts[direction] += 1
            meta = message_meta(message)
            log.bytes[direction] += meta["bytes"]
            log.proxy_delay_ns[direction].append(t_out - t_in)
            lines.append(
                json.dumps(
                    {
                        "dir": direction,
                        "seq": log.counts[direction] - 1,
                        "t_ns": t_in,
                        "t_fwd_ns": t_out,
                        **meta,
                    },
                    separators=(",", ":"),
                )
                + "\n"
            )
            if len(lines) >= 256:
                self._flush(log, lines)

    def _flush(self, log: ConnectionLog, lines: list[str]) -> None:
        batch, lines[:] = list(lines), []
        path = os.path.join(log.dir, "messages.jsonl")
        # a plain append of whole lines, off the loop
        asyncio.get_running_loop().run_in_executor(None, _append, path, "".join(batch))

    def _finish(self, log: ConnectionLog, lines: list[str]) -> None:
        if lines:
            self._flush(log, lines)
        summary = {
            "conn": log.conn,
            "path": log.path,
            "closed_by": log.closed_by,
            "error": log.error,
            "messages": log.counts,
            "bytes": log.bytes,
            "proxy_delay_ms": {k: lateness_summary(v) for k, v in log.proxy_delay_ns.items()},
        }
        asyncio.get_running_loop().run_in_executor(
            None, write_json_atomic, os.path.join(log.dir, "summary.json"), summary
        )


def _append(path: str, text: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
