"""`rig proxy`: a measuring WebSocket proxy between a real client and a voice system.

How this works: every client connection gets its own upstream connection (the upstream URL,
with the client's path and query appended when the upstream URL has none) and becomes one
rollout of the proxy's run directory (`rollouts/conn-NNNN/`). Two pump tasks forward messages
unchanged, one per direction: each message is stamped on the shared clock when its last byte
came off the socket (the stamping connection the rig's own transport uses) and again right
after it was handed on, and only then decoded and accounted (rig.proxy.connection: the
dialect's two sides, the core's listener and client uplink, the writer thread). A path
sampler per leg (rig.net.pathsample: ping/pong + TCP_INFO every `path_interval_s`) measures
the round trips to the client and to the upstream. When a connection ends, its session log
goes through the same analysis worker as a rig run's (clock fit, latency split, timing) plus
the client-leg split (rig.analysis.proxysplit), and metrics.json is written once.

Credentials in the client's handshake headers (Authorization, api-key headers) are passed
upstream and never written anywhere (nor sent to another origin when the upstream
redirects). Audio and event contents are written only with `record_audio`.

Limits: a message over `max_message_bytes` (16 MiB) closes that connection with 1009; a
connection with no message either way for `idle_timeout_s` (300 s) is closed with 1001.
Every connection's metrics.json is written however it ends, with `proxy.closed_by`
(client, upstream, limit, idle, proxy) and `proxy.error` saying why.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import itertools
import os
from collections import Counter
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from rig.analysis.outcome import settle_analysis
from rig.analysis.proxysplit import finish_proxied
from rig.childproc import AnalysisWorker, analysis_pool
from rig.clock.base import Clock, MonotonicClock
from rig.core.metrics import Outcome, build_metrics
from rig.dialects import get_dialect
from rig.net.pathsample import PathSampler
from rig.proxy.connection import ProxyConnection
from rig.recordings.jsonwrite import write_json_atomic
from rig.recordings.manifest import build_manifest, utc_now
from rig.recordings.sink import Publish
from rig.recordings.writer import RecordingWriter
from rig.redact import redact_text, redact_url
from rig.transports.websocket import (
    ArrivalStamps,
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


def upstream_for(upstream: str, client_path: str) -> str:
    """The upstream URL for a client: the client's path and query when upstream has none."""
    up = urlsplit(upstream)
    if up.path not in ("", "/") or up.query:
        return upstream
    cp = urlsplit(client_path)
    return urlunsplit((up.scheme, up.netloc, cp.path or "/", cp.query, ""))


class RecordingProxy:
    """The proxy: `start()` listens, each connection is one rollout, `stop()` finishes."""

    def __init__(
        self,
        upstream: str,
        out_dir: str,
        *,
        dialect: str = "rig",
        dialect_options: dict[str, Any] | None = None,
        record_audio: bool = False,
        connect_timeout_s: float = 10.0,
        clock: Clock | None = None,
        max_message_bytes: int = 16 << 20,
        idle_timeout_s: float = 300.0,
        connect_via: tuple[str, int] | None = None,
        path_interval_s: float = 1.0,
        analysis_timeout_s: float = 120.0,
        config: dict[str, Any] | None = None,
        publish_factory: Callable[[str], Publish] | None = None,
    ) -> None:
        self.clock: Clock = clock or MonotonicClock()
        #: TCP address to reach the upstream through (an impairment relay, rig.relay.process)
        self.connect_via = connect_via
        self.upstream = upstream
        self.out_dir = out_dir
        self.dialect = dialect
        self.dialect_options = dict(dialect_options or {})
        get_dialect(dialect, **self.dialect_options)  # a bad name or option fails here, early
        self.record_audio = record_audio
        self.connect_timeout_s = connect_timeout_s
        self.max_message_bytes = max_message_bytes
        self.idle_timeout_s = idle_timeout_s
        self.path_interval_s = path_interval_s
        self.analysis_timeout_s = analysis_timeout_s
        self.config = dict(config or {})
        #: rollout id -> live telemetry for it (rig.telemetry.session_bridge), as the runner's
        self.publish_factory = publish_factory
        self._ids = itertools.count(1)
        self._server: Server | None = None
        self._writer = RecordingWriter()
        self._pool: AnalysisWorker | None = None
        self._manifest: dict[str, Any] = {}
        self.run_id = os.path.basename(os.path.normpath(out_dir))
        self.results: dict[str, dict[str, Any]] = {}
        os.makedirs(out_dir, exist_ok=True)

    @property
    def manifest_path(self) -> str:
        return os.path.join(self.out_dir, "manifest.json")

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._writer.start()
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
        self._manifest = build_manifest(
            self.run_id,
            config={
                "command": "proxy",
                "listen": f"{bound[0]}:{bound[1]}",
                "dialect": self.dialect,
                "dialect_options": self.dialect_options,
                "record_audio": self.record_audio,
                "max_message_bytes": self.max_message_bytes,
                "idle_timeout_s": self.idle_timeout_s,
                "path_interval_s": self.path_interval_s,
                **self.config,
            },
            targets=[{"url": redact_url(self.upstream), "dialect": self.dialect}],
            seed=0,
            started_ns=self.clock.now_ns(),
        )
        await asyncio.to_thread(write_json_atomic, self.manifest_path, self._manifest)
        return f"ws://{bound[0]}:{bound[1]}"

    async def stop(self) -> None:
        """Close every connection, wait for their metrics, close the run."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        counts = Counter(str(m.get("status")) for m in self.results.values())
        self._manifest.update(
            ended_utc=utc_now(),
            ended_ns=self.clock.now_ns(),
            status="done",
            status_counts=dict(counts),
            rollouts=len(self.results),
        )
        await asyncio.to_thread(write_json_atomic, self.manifest_path, self._manifest)
        await asyncio.to_thread(self._writer.close, 10.0)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def manifest_counts(self) -> dict[str, int]:
        """Rollouts per status so far."""
        return dict(Counter(str(m.get("status")) for m in self.results.values()))

    # --- one connection -------------------------------------------------------------------

    async def _handle(self, client: ServerConnection) -> None:
        rid = f"conn-{next(self._ids):04d}"
        path = client.request.path if client.request is not None else "/"
        d = os.path.join(self.out_dir, "rollouts", rid)
        pc = ProxyConnection(
            rid,
            d,
            get_dialect(self.dialect, **self.dialect_options),
            self._writer,
            self.clock.now_ns(),
            record_audio=self.record_audio,
            publish=self.publish_factory(rid) if self.publish_factory else None,
        )
        pc.status("running", t0_ns=pc.t0_ns)
        headers = {
            k: v
            for k, v in (client.request.headers.raw_items() if client.request else [])
            if k.lower() in FORWARDED_HEADERS
        }
        end: dict[str, str | None] = {"closed_by": None, "error": None, "connect": None}
        try:
            await self._relay(client, headers, path, pc, end)
        except Exception as exc:  # noqa: BLE001 - a bug in one connection is recorded, not lost
            end["closed_by"] = end["closed_by"] or "proxy"
            end["error"] = end["error"] or (
                f"proxy error: {type(exc).__name__}: {redact_text(str(exc))}"
            )
            with contextlib.suppress(Exception):
                await client.close(1011, "proxy error")
        finally:
            await self._finish(pc, urlsplit(path).path, end)

    async def _relay(
        self,
        client: ServerConnection,
        headers: dict[str, str],
        path: str,
        pc: ProxyConnection,
        end: dict[str, str | None],
    ) -> None:
        via: dict[str, Any] = {}
        if self.connect_via is not None:
            via = {"host": self.connect_via[0], "port": self.connect_via[1], "proxy": None}
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                upstream = await SafeConnect(
                    upstream_for(self.upstream, path),
                    additional_headers=headers or None,
                    create_connection=stamping(StampedConnection, self.clock),
                    max_size=self.max_message_bytes,
                    compression=None,
                    ping_interval=None,
                    **via,
                )
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI, ValueError) as exc:
            end["error"] = f"upstream connect failed: {type(exc).__name__}: {redact_text(str(exc))}"
            end["connect"] = "failed"
            await client.close(1011, "upstream unavailable")
            return
        if isinstance(self.clock, MonotonicClock):  # the kernel's receive times, both legs
            for ws, leg in ((client, "client"), (upstream, "upstream")):
                if isinstance(ws, ArrivalStamps):
                    ws.kernel_stamps()
                    pc.arrival_stamps[leg] = ws.kernel
        activity = [self.clock.now_ns()]
        async with upstream:
            pumps = [
                asyncio.create_task(self._pump(client, upstream, "up", pc, end, activity)),
                asyncio.create_task(self._pump(upstream, client, "down", pc, end, activity)),
                asyncio.create_task(self._idle_watch(client, upstream, end, activity)),
            ]
            legs: list[tuple[Any, str]] = [(client, "client"), (upstream, "upstream")]
            samplers = [
                asyncio.create_task(self._sample(PathSampler(ws, self.clock), leg, pc))
                for ws, leg in legs
            ]
            try:
                done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in pumps + samplers:
                    t.cancel()
                await asyncio.gather(*pumps, *samplers, return_exceptions=True)
            for t in done:
                t.result()  # surface a bug in a pump (recorded by the caller)
        await client.close()

    async def _sample(self, sampler: PathSampler, leg: str, pc: ProxyConnection) -> None:
        """One leg's round trips and TCP state, every `path_interval_s`."""
        while True:
            pc.path(leg, await sampler.sample())
            await asyncio.sleep(self.path_interval_s)

    async def _idle_watch(
        self, client: Any, upstream: Any, end: dict[str, str | None], activity: list[int]
    ) -> None:
        """Close both sides once no message went either way for `idle_timeout_s`."""
        while True:
            left = self.idle_timeout_s - (self.clock.now_ns() - activity[0]) / 1e9
            if left <= 0:
                end["closed_by"] = end["closed_by"] or "idle"
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
        pc: ProxyConnection,
        end: dict[str, str | None],
        activity: list[int],
    ) -> str:
        """Forward until one side closes, accounting each message after it went on;
        returns who closed ("client" or "upstream")."""
        closer = "client" if direction == "up" else "upstream"
        account = pc.up if direction == "up" else pc.down
        call_soon = asyncio.get_running_loop().call_soon
        while True:
            try:
                message = await src.recv()
            except ConnectionClosed as exc:
                if exc.sent is not None and exc.sent.code == 1009:  # we refused a message
                    closer = "limit"
                    end["error"] = end["error"] or (
                        f"message too big: over {self.max_message_bytes} bytes "
                        f"({'from the client' if direction == 'up' else 'from upstream'})"
                    )
                    with contextlib.suppress(ConnectionClosed):
                        await dst.close(1009, "message too big")
                end["closed_by"] = end["closed_by"] or closer  # the first side to go
                with contextlib.suppress(ConnectionClosed):
                    await dst.close()
                return closer
            if src.stamps:
                t_in = src.stamps.popleft()
                src.exact.popleft()  # the proxy's records bound no figure (a run's verdict)
            else:
                t_in = self.clock.now_ns()
            activity[0] = t_in
            try:
                await dst.send(message)
            except ConnectionClosed:
                other = "upstream" if direction == "up" else "client"
                end["closed_by"] = end["closed_by"] or other
                return other
            # forwarded first, accounted after: a burst already buffered (replies sent faster
            # than real time) is forwarded whole before any of it is decoded, since recv and
            # send do not yield while data is at hand; call_soon keeps both directions in
            # the order they were forwarded
            call_soon(account, message, t_in, self.clock.now_ns())

    # --- the end of a connection ----------------------------------------------------------

    async def _finish(self, pc: ProxyConnection, path: str, end: dict[str, str | None]) -> None:
        """Freeze the connection's log, analyse it in the worker, write metrics.json."""
        await asyncio.sleep(0)  # the accounting still queued behind the last forwards runs first
        log = pc.finish(self.clock.now_ns())
        if end["connect"] == "failed":
            outcome = Outcome("transport_error", end["error"])
        elif pc.first_error is not None:
            outcome = Outcome("protocol_error", pc.first_error)
        elif pc.bug is not None:
            outcome = Outcome("error", f"proxy accounting: {pc.bug}")
        else:
            outcome = Outcome("ok").settled(log)
        meta = {"item": pc.rollout_id, "scenario": "proxied", "path": path[:200]}
        metrics = build_metrics(
            log,
            outcome,
            rollout_id=pc.rollout_id,
            meta=meta,
            transport={"kind": "proxy", "dialect": pc.dialect.describe()},
            writer_high_water=self._writer.high_water,
        )
        metrics["proxy"] = {**pc.summary(), "closed_by": end["closed_by"], "error": end["error"]}
        if pc.arrival_stamps:  # how each leg's arrivals were stamped (rig.transports.kstamp)
            metrics["arrival_stamps"] = {k: v.as_dict() for k, v in pc.arrival_stamps.items()}
        assert pc.sink is not None
        pc.sink.close()
        loop = asyncio.get_running_loop()
        try:
            await self._writer.written(self.analysis_timeout_s)
            write_error = self._writer.rollout_error(pc.dir)
            if write_error is not None:
                metrics.update(status="write_error", reason=f"recording failed: {write_error}")
            async with asyncio.timeout(self.analysis_timeout_s):
                metrics = await loop.run_in_executor(
                    self._analysis_pool(),
                    functools.partial(
                        finish_proxied,
                        pc.dir,
                        metrics,
                        log,
                        tuple(pc.client_rtt),
                        tuple(pc.up_forward_ns),
                        tuple(pc.down_forward_ns),
                        analyze=self.record_audio and write_error is None,
                    ),
                )
        except Exception as exc:  # noqa: BLE001 - analysis failing must not lose the rollout
            if isinstance(exc, concurrent.futures.BrokenExecutor):
                self._pool = None
            metrics = {**metrics, "timing": {"error": f"{type(exc).__name__}: {exc}"}}
        metrics = settle_analysis(metrics)
        if isinstance(metrics.get("reason"), str):
            metrics["reason"] = redact_text(metrics["reason"])
        self.results[pc.rollout_id] = metrics
        pc.status("done", status=metrics.get("status"), reason=metrics.get("reason"))
        pc.sink.results(metrics)
        try:
            await asyncio.to_thread(
                write_json_atomic, os.path.join(pc.dir, "metrics.json"), metrics
            )
        except OSError as exc:
            self.results[pc.rollout_id] = {**metrics, "status": "write_error", "reason": str(exc)}

    def _analysis_pool(self) -> AnalysisWorker:
        if self._pool is None:
            self._pool = analysis_pool(__name__)
        return self._pool
