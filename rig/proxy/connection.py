"""One proxied connection's accounting: both directions decoded into the rig's own core.

How this works: the proxy's pumps forward each message first and only then hand it here
with two stamps (`t_in`: its last byte came off the socket, `t_fwd`: handed to the other
side). The dialect decodes it (`decode_client` for the client's side, `decode` for the
system's); client audio goes to the `ClientUplink` (user.wav, turns), system audio and events
to the `Listener` (playback placement, onsets, received.wav), exactly as in a rig session;
records go to one `RolloutSink` (the writer thread; nothing here touches the disk). A
client's `truncate` / `cancel` is a barge-in: the listener cuts its playback there, as the
client did. At the end `session_log()` freezes the same `SessionLog` a session makes.

Garbage from either side never stops the forwarding: the message is counted as a protocol
error of this connection (its status becomes `protocol_error`, the first error is the
reason, every one is an event), and the proxy goes on with the next message.

Without `record_audio` (the default) no audio is written and events keep their kind, time
and sizes only: payloads may carry personal content.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rig.core.clientside import ClientUplink
from rig.core.events import ControlRequest, DownAudio, DownEvent, UpAudio, UpEvent
from rig.core.listener import Listener
from rig.core.live import LiveStatus
from rig.core.log import SessionLog
from rig.core.records import (
    EventRecord,
    ReceivedAudio,
    Record,
    RttSample,
    SystemAudio,
    SystemPad,
    UserAudio,
)
from rig.core.responses import lateness_summary
from rig.core.units import NS_PER_MS, NS_PER_S
from rig.dialects.base import Dialect, Message
from rig.errors import ProtocolError
from rig.recordings.sink import Publish, RolloutSink
from rig.recordings.writer import RecordingWriter
from rig.redact import redact_text
from rig.safejson import JsonInputError, parse

AUDIO_RECORDS = (UserAudio, SystemAudio, SystemPad, ReceivedAudio)
#: event data kept without --record-audio (numbers about the path, never content)
PATH_EVENTS = ("net.rtt", "net.tcp", "net.client.rtt", "net.client.tcp")
MAX_ERROR_EVENTS = 100


@dataclass
class Traffic:
    """Message counts, bytes and the proxy's own forwarding delay, per direction."""

    counts: dict[str, int] = field(default_factory=lambda: {"up": 0, "down": 0})
    bytes: dict[str, int] = field(default_factory=lambda: {"up": 0, "down": 0})
    forward_ns: dict[str, list[int]] = field(default_factory=lambda: {"up": [], "down": []})


class ProxyConnection:
    """The accounting of one client connection (one rollout of the proxy's run)."""

    def __init__(
        self,
        rollout_id: str,
        rollout_dir: str,
        dialect: Dialect,
        writer: RecordingWriter,
        t0_ns: int,
        *,
        record_audio: bool = False,
        publish: Publish | None = None,
    ) -> None:
        self.rollout_id = rollout_id
        #: live telemetry (rig.telemetry.session_bridge): the same events a session publishes
        self.publish = publish
        self.dir = rollout_dir
        self.dialect = dialect
        self.writer = writer
        self.t0_ns = t0_ns
        self.record_audio = record_audio
        self.client = ClientUplink(t0_ns)
        self.listener = Listener(t0_ns)
        self.traffic = Traffic()
        #: per leg ("client", "upstream"): how its arrivals are stamped (StampStats)
        self.arrival_stamps: dict[str, Any] = {}
        self.sink: RolloutSink | None = None
        self._pending: list[Record] = []
        self.errors = 0
        self.first_error: str | None = None
        self.bug: str | None = None
        #: (first input sample, forwarding delay) of each client audio chunk
        self.up_forward_ns: list[tuple[int, int]] = []
        self.down_forward_ns: list[int] = []  # per downlink audio chunk (its seq)
        self.client_rtt: list[RttSample] = []
        self._probe_in: dict[Any, int] = {}  # client probe id -> when it passed the proxy
        self.turns_cut = 0

    # --- the two directions ---------------------------------------------------------------

    def up(self, message: Message, t_in: int, t_fwd: int) -> None:
        """A client message, already forwarded upstream (never raises: a bug is recorded)."""
        try:
            self._up(message, t_in, t_fwd)
        except Exception as exc:  # noqa: BLE001 - accounting must never stop the proxy
            self.bug = self.bug or f"{type(exc).__name__}: {redact_text(str(exc))[:300]}"

    def down(self, message: Message, t_in: int, t_fwd: int) -> None:
        """A system message, already forwarded to the client (never raises)."""
        try:
            self._down(message, t_in, t_fwd)
        except Exception as exc:  # noqa: BLE001 - accounting must never stop the proxy
            self.bug = self.bug or f"{type(exc).__name__}: {redact_text(str(exc))[:300]}"

    def _up(self, message: Message, t_in: int, t_fwd: int) -> None:
        self._count("up", message, t_in, t_fwd)
        try:
            items = self.dialect.decode_client(message, t_in)
        except ProtocolError as exc:
            self._protocol_error("client", exc, t_in, message)
            return
        for item in items:
            if isinstance(item, UpAudio):
                if self.client.rate is None and self.listener.playback is None:
                    # both tracks start with the client's first audio, as a rig session's
                    # start with its first frame: input sample k is then the system's k-th
                    self.client.t0_ns = self.listener.t0_ns = item.t_ns
                start = self.client.end_sample
                extra = {**(item.extra or {}), "t_fwd_ns": t_fwd}
                recs = self._guard(self.client.on_audio, item.pcm, item.sample_rate, t_in, extra)
                if self.client.chunks:
                    start = self.client.chunks[-1].start_sample
                self.up_forward_ns.append((start, t_fwd - t_in))
                self._put(recs)
            else:
                self._client_event(item)

    def _down(self, message: Message, t_in: int, t_fwd: int) -> None:
        self._count("down", message, t_in, t_fwd)
        try:
            items = self.dialect.decode(message, t_in)
        except ProtocolError as exc:
            self._protocol_error("upstream", exc, t_in, message)
            return
        for item in items:
            if isinstance(item, DownAudio):
                extra = {**(item.extra or {}), "t_fwd_ns": t_fwd}
                audio = DownAudio(item.pcm, item.sample_rate, item.t_ns, item.server_ts_ms, extra)
                self._put(self._guard(self.listener.on_audio, audio))
                self.down_forward_ns.append(t_fwd - t_in)
            else:
                self._put(self._guard(self.listener.on_event, self._proxied(item)))
        self._put(self.listener.release(t_in))

    def path(self, leg: str, events: list[DownEvent]) -> None:
        """Round trips and TCP state of one leg (rig.net.pathsample): the upstream leg's go
        to the listener's path log (the latency split reads them), the client leg's are kept
        apart for the client-leg split (rig.analysis.proxysplit)."""
        for ev in events:
            if leg == "upstream":
                self._put(self.listener.on_event(ev))
                continue
            kind = ev.kind.replace("net.", "net.client.", 1)
            self._put([EventRecord(kind, ev.t_ns, dict(ev.data), "rig")])
            rtt = ev.data.get("rtt_ms")
            if ev.kind == "net.rtt" and isinstance(rtt, int | float) and not ev.data.get("lost"):
                self.client_rtt.append(RttSample(ev.t_ns, round(rtt * NS_PER_MS), "ws_ping"))

    # --- helpers --------------------------------------------------------------------------

    def _client_event(self, item: UpEvent) -> None:
        data = dict(item.data)
        if item.kind == "probe" and "id" in data:
            try:
                self._probe_in[data["id"]] = item.t_ns
            except TypeError:  # an unhashable id: nothing to map
                pass
        self._put([EventRecord(f"client.{item.kind}", item.t_ns, data, "rig")])
        if item.kind in ("truncate", "cancel"):
            # the client stopped playing the reply: cut the listener's playback here too
            self.turns_cut += 1
            outs = self._guard(self.listener.barge_in, self.turns_cut - 1, item.t_ns)
            self._put([o for o in outs if not isinstance(o, ControlRequest)])

    def _proxied(self, item: DownEvent) -> DownEvent:
        """A probe reply times the path from the *proxy*: its t0 becomes the time the
        client's probe passed here (the client's own stamp is on the client's clock)."""
        if item.kind != "probe_reply" or "id" not in item.data:
            return item
        try:
            t_in = self._probe_in.pop(item.data["id"], None)
        except TypeError:
            t_in = None
        if t_in is None:
            return item
        data = {**item.data, "t0_ns": t_in, "client_t0_ns": item.data.get("t0_ns")}
        return DownEvent(item.kind, item.t_ns, data, item.server_ts_ms, item.source)

    def _count(self, direction: str, message: Message, t_in: int, t_fwd: int) -> None:
        t = self.traffic
        t.counts[direction] += 1
        t.bytes[direction] += len(message)
        t.forward_ns[direction].append(t_fwd - t_in)

    def _guard(self, fn: Any, *args: Any) -> list[Any]:
        """Call the core; bad content (a rate change, a malformed probe) is a protocol
        error of this connection, a bug is recorded as one: neither stops the proxy."""
        try:
            out: list[Any] = fn(*args)
            return out
        except ProtocolError as exc:
            self._protocol_error("content", exc, args[-1] if isinstance(args[-1], int) else 0)
        except Exception as exc:  # noqa: BLE001 - a bug in accounting must not stop forwarding
            self.bug = self.bug or f"{type(exc).__name__}: {redact_text(str(exc))[:300]}"
        return []

    def _protocol_error(
        self, side: str, exc: ProtocolError, t_ns: int, message: Message | None = None
    ) -> None:
        self.errors += 1
        text = f"{side}: {redact_text(str(exc))[:300]}"
        if self.first_error is None:
            self.first_error = text
        if self.errors <= MAX_ERROR_EVENTS:
            data = {"from": side, "error": text}
            if message is not None:
                data |= {f"message_{k}": v for k, v in message_meta(message).items()}
            self._put([EventRecord("proxy.protocol_error", t_ns, data)])

    def _put(self, records: list[Any]) -> None:
        for r in records:
            if isinstance(r, ControlRequest):
                continue  # the client speaks for itself: the proxy never sends requests
            if not self.record_audio:
                if isinstance(r, AUDIO_RECORDS):
                    continue
                if isinstance(r, EventRecord) and r.kind not in PATH_EVENTS and r.data:
                    r = EventRecord(r.kind, r.t_ns, _metadata(r.data), r.source)
            if self.sink is None:
                if self.client.rate is None:
                    self._pending.append(r)
                    continue
                self.open(self.client.rate)
            assert self.sink is not None
            self.sink.put(r)

    def open(self, user_rate: int) -> None:
        """Open the rollout's files (once the user track's rate is known, or at the end)."""
        if self.sink is None:
            self.sink = RolloutSink(self.writer.rollout(self.dir, user_rate), self.publish)
            pending, self._pending = self._pending, []
            self.sink.put_all(pending)

    def status(self, state: str, **data: Any) -> None:
        """A state change for live views (never raises)."""
        if self.publish is not None:
            try:
                self.publish(LiveStatus(state, **data))
            except Exception:  # noqa: BLE001, S110 - telemetry must never hurt the proxy
                pass

    # --- the end --------------------------------------------------------------------------

    def finish(self, now_ns: int) -> SessionLog:
        """Release what played by `now_ns`, pad system.wav, and freeze the session log."""
        rate = self.client.rate or self.dialect.uplink_rate
        user_ns = self.client.end_sample * NS_PER_S / rate
        self._put(self.listener.finish(now_ns, user_ns))
        self.open(rate)
        return self.client.log(self.listener)

    def summary(self) -> dict[str, Any]:
        """The proxy's own numbers for metrics.json `proxy`."""
        t = self.traffic
        return {
            "messages": dict(t.counts),
            "bytes": dict(t.bytes),
            "forward_delay_ms": {k: lateness_summary(v) for k, v in t.forward_ns.items()},
            "forward_method": "socket arrival (last byte) to hand-over to the other side",
            "protocol_errors": self.errors,
            "record_audio": self.record_audio,
            "client_truncations": self.turns_cut,
        }


def message_meta(message: Message) -> dict[str, Any]:
    """What a message was, without its content: kind, size, and the JSON `type` of text."""
    if isinstance(message, bytes):
        return {"kind": "binary", "bytes": len(message)}
    meta: dict[str, Any] = {"kind": "text", "bytes": len(message.encode("utf-8", "replace"))}
    try:
        obj = parse(message)
    except JsonInputError:
        return meta
    if isinstance(obj, dict) and isinstance(obj.get("type"), str):
        meta["type"] = obj["type"][:200]
    return meta


def _metadata(data: dict[str, Any]) -> dict[str, Any]:
    """What an event keeps without --record-audio: numbers and short names, no text."""
    keep: dict[str, Any] = {}
    for k, v in data.items():
        if isinstance(v, bool | int | float) or v is None:
            keep[k] = v
        elif isinstance(v, str) and k in (
            "wire_type",
            "from",
            "item_id",
            "framing",
            "error",
            "message_kind",
            "message_type",
        ):
            keep[k] = v[:200]
    return keep
