"""How a WebRTC peer finds its far end: one offer/answer exchange, plus data-channel habits.

Each adapter posts our SDP offer (ICE candidates inline: aiortc gathers before answering, no
trickle) and returns the answer. It may also open data channels before the offer, decode
what arrives on them into `DownEvent`s, encode the rig's control events, and ask for a
periodic keep-alive message.

- `whip`    plain HTTP offer/answer in the WHIP style: `POST` the SDP (`application/sdp`),
            201/200 with the answer SDP; the `Location` resource is `DELETE`d on close.
- `openai`  OpenAI Realtime over WebRTC: SDP to the calls endpoint with a bearer key from
            the environment, JSON events on the `oai-events` data channel.
- `pipecat` Pipecat SmallWebRTC: `POST /api/offer` with JSON `{sdp, type, pc_id}`, a data
            channel that carries `ping` keep-alives (the bot drops peers silent for 3 s).

HTTP runs in a worker thread (`urllib`): signalling happens once, before any audio, and
keeps the rig free of an HTTP client dependency.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urljoin, urlsplit

from rig import safejson
from rig.core.events import DownEvent, Incoming
from rig.dialects import get_dialect
from rig.errors import ConfigError, DeadlineError, ProtocolError, TransportError
from rig.redact import redact_url

#: signalling replies (SDP answers, pipecat's JSON answer) and data-channel messages
MAX_ANSWER_BYTES = 1 << 20
MAX_CHANNEL_MESSAGE_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class HttpReply:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def _http_blocking(
    method: str, url: str, body: bytes | None, headers: dict[str, str], timeout_s: float
) -> HttpReply:
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - URL is ours
            return HttpReply(
                resp.status,
                _read_capped(resp, url),
                {k.lower(): v for k, v in resp.headers.items()},
            )
    except urllib.error.HTTPError as exc:
        body = _read_capped(exc, url)
        return HttpReply(exc.code, body, {k.lower(): v for k, v in exc.headers.items()})
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise TransportError(f"signalling to {redact_url(url)} failed: {exc}") from exc


def _read_capped(resp: Any, url: str) -> bytes:
    """A reply body of at most MAX_ANSWER_BYTES (an SDP answer is a few kB)."""
    body: bytes = resp.read(MAX_ANSWER_BYTES + 1)
    if len(body) > MAX_ANSWER_BYTES:
        raise ProtocolError(
            f"signalling reply from {redact_url(url)} is over {MAX_ANSWER_BYTES >> 20} MiB"
        )
    return body


async def http(
    method: str,
    url: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = 10.0,
) -> HttpReply:
    """One HTTP request in a worker thread, within `timeout_s` on the wall clock (urllib's
    timeout is per socket operation: a server that trickles bytes would never hit it)."""
    call = asyncio.to_thread(_http_blocking, method, url, body, headers or {}, timeout_s)
    try:
        async with asyncio.timeout(timeout_s):
            return await call
    except TimeoutError:
        raise DeadlineError(
            f"signalling to {redact_url(url)}: no whole answer within {timeout_s:g} s"
        ) from None


class Signalling(Protocol):
    name: str
    #: data channels to open before the offer (label list)
    channels: tuple[str, ...]
    #: (interval_s, message) for a keep-alive on the first channel, or None
    keepalive: tuple[float, str] | None

    async def exchange(self, offer_sdp: str) -> str:
        """Post the offer, return the answer SDP. TransportError/ProtocolError on failure."""

    def decode(self, label: str, message: str | bytes, t_ns: int) -> list[Incoming]:
        """A data-channel message as events."""

    def encode_event(self, kind: str, data: dict[str, Any]) -> list[str]:
        """A rig control event as data-channel messages (often none)."""

    async def close(self) -> None:
        """Tear down the signalling resource, if any."""

    def describe(self) -> dict[str, Any]:
        """Settings for the manifest, never secrets."""


def _json_events(label: str, message: str | bytes, t_ns: int) -> list[Incoming]:
    """A data-channel message as events: JSON (through rig.safejson: deep nesting, huge
    integers, NaN never get through) or, when it is not usable JSON, its text."""
    text = message.decode("utf-8", "replace") if isinstance(message, bytes) else message
    try:
        obj = safejson.parse(text, max_bytes=MAX_CHANNEL_MESSAGE_BYTES)
    except safejson.JsonInputError as exc:
        data: dict[str, Any] = {"label": label, "text": text[:500]}
        if text.lstrip()[:1] in ("{", "["):
            data["json_error"] = exc.reason
        return [DownEvent("datachannel.text", t_ns, data)]
    if isinstance(obj, dict):
        kind = str(obj.get("type") or obj.get("label") or "message")
        return [DownEvent(kind, t_ns, {"label": label, **obj})]
    return [DownEvent("datachannel.json", t_ns, {"label": label, "value": obj})]


def pipecat_answer(body: bytes) -> tuple[str, str | None]:
    """(sdp, pc_id) of a pipecat `/api/offer` JSON answer; anything else is a ProtocolError."""
    obj = safejson.object_remote(body, "offer answer", max_bytes=MAX_ANSWER_BYTES)
    sdp, pc_id = obj.get("sdp"), obj.get("pc_id")
    if not isinstance(sdp, str) or not (pc_id is None or isinstance(pc_id, str)):
        raise ProtocolError("offer answer is not {sdp, type}", safejson.excerpt(body))
    return sdp, pc_id


def _check_answer(reply: HttpReply, url: str) -> None:
    if reply.status not in (200, 201):
        raise TransportError(
            f"offer rejected by {redact_url(url)}: HTTP {reply.status} "
            f"{reply.body[:200].decode('utf-8', 'replace')}"
        )


class WhipSignalling:
    """WHIP-style: SDP in, SDP out, over one HTTP POST."""

    name = "whip"
    keepalive: tuple[float, str] | None = None

    def __init__(
        self,
        url: str,
        *,
        token_env: str | None = None,
        channels: tuple[str, ...] = (),
        timeout_s: float = 10.0,
    ) -> None:
        self.url = url
        self.token_env = token_env
        self.channels = channels
        self.timeout_s = timeout_s
        self.resource_url: str | None = None

    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/sdp", "Accept": "application/sdp"}
        if self.token_env:
            token = os.environ.get(self.token_env)
            if not token:
                raise ConfigError(f"${self.token_env} is not set")
            h["Authorization"] = f"Bearer {token}"
        return h

    async def exchange(self, offer_sdp: str) -> str:
        reply = await http("POST", self.url, offer_sdp.encode(), self._headers(), self.timeout_s)
        _check_answer(reply, self.url)
        loc = reply.headers.get("location")
        self.resource_url = urljoin(self.url, loc) if loc else None
        answer = reply.body.decode("utf-8", "replace")
        if not answer.startswith("v=0"):
            raise ProtocolError("answer is not an SDP document", answer[:200])
        return answer

    def decode(self, label: str, message: str | bytes, t_ns: int) -> list[Incoming]:
        return _json_events(label, message, t_ns)

    def encode_event(self, kind: str, data: dict[str, Any]) -> list[str]:
        return []

    async def close(self) -> None:
        if self.resource_url:
            url, self.resource_url = self.resource_url, None
            try:
                await http("DELETE", url, None, self._headers(), 2.0)
            except (TransportError, ConfigError):
                pass

    def describe(self) -> dict[str, Any]:
        return {"kind": self.name, "url": redact_url(self.url), "token_env": self.token_env}


OPENAI_CALLS_URL = "https://api.openai.com/v1/realtime/calls"


class OpenAISignalling:
    """OpenAI Realtime over WebRTC: SDP to the calls endpoint, events on `oai-events`.

    Event JSON goes through the OpenAI WebSocket dialect's decoder when `rig.dialects.openai`
    is present (same event handling as over WebSocket); audio itself arrives as RTP.
    """

    name = "openai"
    channels = ("oai-events",)
    keepalive: tuple[float, str] | None = None

    def __init__(
        self,
        url: str = OPENAI_CALLS_URL,
        *,
        model: str | None = None,
        key_env: str = "OPENAI_API_KEY",
        session: dict[str, Any] | None = None,
        timeout_s: float = 15.0,
    ) -> None:
        self.url = url
        self.model = model
        self.key_env = key_env
        self.session = session
        self.timeout_s = timeout_s
        self._dialect: Any = None
        try:
            self._dialect = get_dialect("openai")
        except Exception:  # noqa: BLE001 - the dialect is optional; minimal decode below
            self._dialect = None

    async def exchange(self, offer_sdp: str) -> str:
        key = os.environ.get(self.key_env)
        if not key:
            raise ConfigError(f"${self.key_env} is not set (OpenAI Realtime needs a key)")
        url = self.url
        if self.model and "model=" not in url:
            url += ("&" if "?" in url else "?") + f"model={self.model}"
        headers = {"Content-Type": "application/sdp", "Authorization": f"Bearer {key}"}
        reply = await http("POST", url, offer_sdp.encode(), headers, self.timeout_s)
        _check_answer(reply, url)
        return reply.body.decode("utf-8", "replace")

    def decode(self, label: str, message: str | bytes, t_ns: int) -> list[Incoming]:
        if self._dialect is not None:
            try:
                items: list[Incoming] = self._dialect.decode(message, t_ns)
                return [i for i in items if isinstance(i, DownEvent)]
            except ProtocolError:
                raise
            except Exception:  # noqa: BLE001 - fall back to the plain JSON decode
                pass
        return _json_events(label, message, t_ns)

    def encode_event(self, kind: str, data: dict[str, Any]) -> list[str]:
        if kind == "open" and self.session:
            return [json.dumps({"type": "session.update", "session": self.session})]
        return []

    async def close(self) -> None:
        return None

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.name,
            "url": redact_url(self.url),
            "model": self.model,
            "key_env": self.key_env,
            "dialect_events": self._dialect is not None,
        }


class PipecatSignalling:
    """Pipecat SmallWebRTC: JSON offer to `/api/offer`, `ping` keep-alives on a data channel."""

    name = "pipecat"
    channels = ("rig",)

    def __init__(
        self,
        url: str,
        *,
        ping_interval_s: float = 1.0,
        request_data: dict[str, Any] | None = None,
        timeout_s: float = 15.0,
    ) -> None:
        parts = urlsplit(url)
        self.url = url if parts.path not in ("", "/") else urljoin(url, "/api/offer")
        self.keepalive = (ping_interval_s, "ping") if ping_interval_s > 0 else None
        self.request_data = request_data
        self.timeout_s = timeout_s
        self.pc_id: str | None = None

    async def exchange(self, offer_sdp: str) -> str:
        body: dict[str, Any] = {"sdp": offer_sdp, "type": "offer", "pc_id": None}
        if self.request_data is not None:
            body["request_data"] = self.request_data
        reply = await http(
            "POST",
            self.url,
            json.dumps(body).encode(),
            {"Content-Type": "application/json"},
            self.timeout_s,
        )
        _check_answer(reply, self.url)
        sdp, self.pc_id = pipecat_answer(reply.body)
        return sdp

    def decode(self, label: str, message: str | bytes, t_ns: int) -> list[Incoming]:
        return _json_events(label, message, t_ns)

    def encode_event(self, kind: str, data: dict[str, Any]) -> list[str]:
        return []

    async def close(self) -> None:
        return None

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.name,
            "url": redact_url(self.url),
            "ping_interval_s": self.keepalive[0] if self.keepalive else None,
        }


SIGNALLING = {"whip": WhipSignalling, "openai": OpenAISignalling, "pipecat": PipecatSignalling}


def get_signalling(name: str, url: str, **options: Any) -> Signalling:
    try:
        cls = SIGNALLING[name]
    except KeyError:
        raise ConfigError(
            f"unknown WebRTC signalling {name!r}; choose one of {', '.join(SIGNALLING)}"
        ) from None
    obj: Signalling = cls(url, **options)
    return obj
