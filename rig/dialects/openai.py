"""OpenAI Realtime API over WebSocket (client side, sans-I/O).

How this works:
  open      `session.update` (GA layout by default, the beta layout with api="beta"): PCM16
            24 kHz both ways and the turn detection: server_vad, semantic_vad or manual (null)
  ready     once the server answers `session.updated`: the configuration is in force before
            the first audio byte
  uplink    every frame is one `input_audio_buffer.append` (base64 PCM16); the send log keeps
            which shared-clock time each input sample left, so the server's
            `audio_start_ms` / `audio_end_ms` map onto the shared clock (`uplink_t_ns`)
  history   text history (scenario `history`) as `conversation.item.create` items, sent
            right after `session.updated` and before the first audio frame
  turns     manual mode: the session's `turn_end` becomes `input_audio_buffer.commit` +
            `response.create`
  downlink  `response.output_audio.delta` (GA) / `response.audio.delta` (beta) -> DownAudio;
            every other server event -> DownEvent under its GA name (wire name kept in data)
  barge-in  the session's `truncate` says how many received samples the listener heard; the
            dialect finds the item that was playing and sends `conversation.item.truncate`
            with the milliseconds of that item actually played
  client    (the recording proxy, `decode_client`) `input_audio_buffer.append` -> UpAudio;
            `conversation.item.truncate` -> truncate (item_id, audio_end_ms);
            `response.cancel` -> cancel; `input_audio_buffer.commit` -> turn_end;
            `session.update` -> session (scrubbed); anything else keeps its name
  errors    an `error` event raises ProtocolError (the rollout ends `protocol_error` with the
            server's message), unless errors_fatal=False (then it is only recorded)
The API key comes from the environment and only ever goes into the Authorization header.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rig.audio.pcm import Pcm16
from rig.core.events import DownAudio, DownEvent, Incoming, Outgoing, UpAudio, UpEvent
from rig.dialects._wire import b64_to_pcm, dumps, env_secret, load_object, pcm_to_b64, scrub
from rig.dialects.base import Dialect, Message
from rig.dialects.endpointer import check_ms
from rig.dialects.history import check_history, history_sent
from rig.dialects.sendlog import SendLog
from rig.errors import ConfigError, ProtocolError

RATE = 24_000
TURN_MODES = ("server_vad", "semantic_vad", "manual")
EAGERNESS = ("low", "medium", "high", "auto")

#: beta event names -> GA names (only where they differ)
BETA_TO_GA = {
    "response.audio.delta": "response.output_audio.delta",
    "response.audio.done": "response.output_audio.done",
    "response.audio_transcript.delta": "response.output_audio_transcript.delta",
    "response.audio_transcript.done": "response.output_audio_transcript.done",
    "response.text.delta": "response.output_text.delta",
    "response.text.done": "response.output_text.done",
    "conversation.item.created": "conversation.item.added",
}
AUDIO_DELTA = "response.output_audio.delta"
#: client event names -> the rig's kinds (rig.core.events.UpEvent)
CLIENT_KINDS = {
    "response.cancel": "cancel",
    "input_audio_buffer.commit": "turn_end",
    "session.update": "session",
}


@dataclass(slots=True)
class _Item:
    item_id: str
    content_index: int
    start_sample: int  # first sample of this item in the received downlink stream
    n_samples: int


class OpenAIDialect(Dialect):
    name = "openai"
    key_env: tuple[str, ...] = ("OPENAI_API_KEY",)
    default_url = "wss://api.openai.com/v1/realtime?model=gpt-realtime"

    def __init__(
        self,
        *,
        api: str = "ga",
        turn_detection: str = "server_vad",
        silence_duration_ms: int | None = None,
        threshold: float | None = None,
        prefix_padding_ms: int | None = None,
        eagerness: str | None = None,
        voice: str | None = None,
        instructions: str | None = None,
        errors_fatal: bool = True,
        history: list[dict[str, str]] | None = None,
    ) -> None:
        if api not in ("ga", "beta"):
            raise ConfigError(f"{self.name}: api must be 'ga' or 'beta', not {api!r}")
        if turn_detection not in TURN_MODES:
            raise ConfigError(f"{self.name}: turn_detection must be one of {', '.join(TURN_MODES)}")
        self.uplink_rate = RATE
        self.downlink_rate = RATE
        self.api = api
        self.turn_detection = turn_detection
        self.silence_duration_ms = check_ms(self.name, "silence_duration_ms", silence_duration_ms)
        self.prefix_padding_ms = check_ms(self.name, "prefix_padding_ms", prefix_padding_ms)
        if threshold is not None and (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or not 0.0 <= threshold <= 1.0
        ):
            raise ConfigError(
                f"{self.name}: threshold must be a number in [0, 1], got {threshold!r}"
            )
        self.threshold = threshold
        if eagerness is not None and eagerness not in EAGERNESS:
            raise ConfigError(f"{self.name}: eagerness must be one of {', '.join(EAGERNESS)}")
        self.eagerness = eagerness
        self.voice = voice
        self.instructions = instructions
        self.errors_fatal = errors_fatal
        self.history = check_history(history) if history else []
        self.sendlog = SendLog(RATE)
        self._ready = False
        self._down_samples = 0
        self._items: list[_Item] = []
        self._outgoing: list[Message] = []

    # --- handshake ----------------------------------------------------------------------

    def headers(self) -> dict[str, str]:
        h = {}
        key = env_secret(*self.key_env)
        if key:
            h["Authorization"] = f"Bearer {key}"
        if self.api == "beta":
            h["OpenAI-Beta"] = "realtime=v1"
        return h

    def turn_detection_config(self) -> dict[str, Any] | None:
        if self.turn_detection == "manual":
            return None
        td: dict[str, Any] = {"type": self.turn_detection}
        if self.turn_detection == "server_vad":
            for key in ("threshold", "prefix_padding_ms", "silence_duration_ms"):
                if getattr(self, key) is not None:
                    td[key] = getattr(self, key)
        if self.turn_detection == "semantic_vad" and self.eagerness is not None:
            td["eagerness"] = self.eagerness
        return td

    def session_config(self) -> dict[str, Any]:
        td = self.turn_detection_config()
        if self.api == "beta":
            s: dict[str, Any] = {
                "modalities": ["audio", "text"],
                "input_audio_format": "pcm16",
                "output_audio_format": "pcm16",
                "turn_detection": td,
            }
            if self.voice:
                s["voice"] = self.voice
        else:
            fmt = {"type": "audio/pcm", "rate": RATE}
            output: dict[str, Any] = {"format": fmt}
            if self.voice:
                output["voice"] = self.voice
            s = {
                "type": "realtime",
                "output_modalities": ["audio"],
                "audio": {"input": {"format": fmt, "turn_detection": td}, "output": output},
            }
        if self.instructions:
            s["instructions"] = self.instructions
        return s

    def open_messages(self) -> list[Message]:
        return [dumps({"type": "session.update", "session": self.session_config()})]

    @property
    def ready(self) -> bool:
        return self._ready

    def history_messages(self) -> list[Message]:
        """One `conversation.item.create` per history entry (assistant text is `output_text`
        in the GA layout, `text` in the beta one)."""
        out: list[Message] = []
        for h in self.history:
            if h["role"] == "assistant":
                part = "text" if self.api == "beta" else "output_text"
            else:
                part = "input_text"
            item = {
                "type": "message",
                "role": h["role"],
                "content": [{"type": part, "text": h["text"]}],
            }
            out.append(dumps({"type": "conversation.item.create", "item": item}))
        return out

    # --- uplink ---------------------------------------------------------------------------

    def encode_audio(self, pcm: Pcm16, seq: int, t_sched_ns: int, t_now_ns: int) -> list[Message]:
        self.sendlog.record(int(pcm.size), t_now_ns)
        return [dumps({"type": "input_audio_buffer.append", "audio": pcm_to_b64(pcm)})]

    def encode_event(self, kind: str, data: dict[str, Any], t_now_ns: int) -> list[Message]:
        if kind == "turn_end" and self.turn_detection == "manual":
            return self.request_response()
        if kind == "truncate":
            msg = self.truncate_message(data)
            return [] if msg is None else [dumps(msg)]
        return []

    def request_response(self) -> list[Message]:
        """Manual turn end: commit what was appended and ask for a response."""
        return [
            dumps({"type": "input_audio_buffer.commit"}),
            dumps({"type": "response.create"}),
        ]

    def truncate_message(self, data: dict[str, Any]) -> dict[str, Any] | None:
        """`conversation.item.truncate` for the item the listener was hearing, or None."""
        played = data.get("played_samples")
        rate = data.get("sample_rate", RATE)
        if not isinstance(played, int) or rate != self.downlink_rate:
            return None
        for item in reversed(self._items):
            if item.start_sample <= played:
                heard = min(played - item.start_sample, item.n_samples)
                if heard >= item.n_samples:
                    return None  # heard to the end: nothing to cut
                return {
                    "type": "conversation.item.truncate",
                    "item_id": item.item_id,
                    "content_index": item.content_index,
                    "audio_end_ms": heard * 1000 // self.downlink_rate,
                }
        return None

    def take_outgoing(self) -> list[Message]:
        out, self._outgoing = self._outgoing, []
        return out

    # --- downlink -------------------------------------------------------------------------

    def decode(self, message: Message, t_ns: int) -> list[Incoming]:
        if isinstance(message, bytes):
            raise ProtocolError(f"{self.name}: unexpected binary message ({len(message)} bytes)")
        msg = load_object(message)
        wire = msg.get("type")
        if not isinstance(wire, str):
            raise ProtocolError(f"{self.name}: event without a type", str(msg)[:200])
        kind = BETA_TO_GA.get(wire, wire)
        if kind == AUDIO_DELTA:
            return [self._audio(msg, t_ns)]
        if kind == "error":
            raw_err = msg.get("error")
            err: dict[str, Any] = raw_err if isinstance(raw_err, dict) else {}
            text = f"{err.get('type', 'error')}: {err.get('message', msg)}"
            if self.errors_fatal:
                raise ProtocolError(f"{self.name} server error: {text}", scrub(msg))
        data = self._event_data(kind, wire, msg)
        was_ready = self._ready
        self.on_event(kind, msg, data)
        out: list[Incoming] = [DownEvent(kind, t_ns, data, self.server_ts_ms(kind, msg))]
        if self._ready and not was_ready and self.history:
            # configured: the history goes out now, before the transport lets audio flow
            self._outgoing.extend(self.history_messages())
            out.append(history_sent(self.history, t_ns))
        return out

    def _audio(self, msg: dict[str, Any], t_ns: int) -> DownAudio:
        pcm = b64_to_pcm(msg.get("delta"))
        item_id = str(msg.get("item_id", ""))
        content_index = msg.get("content_index", 0)
        last = self._items[-1] if self._items else None
        if last is None or last.item_id != item_id:
            last = _Item(
                item_id,
                content_index if isinstance(content_index, int) else 0,
                self._down_samples,
                0,
            )
            self._items.append(last)
        last.n_samples += int(pcm.size)
        self._down_samples += int(pcm.size)
        extra = {"item_id": item_id, "response_id": msg.get("response_id")}
        return DownAudio(pcm, self.downlink_rate, t_ns, None, extra)

    def _event_data(self, kind: str, wire: str, msg: dict[str, Any]) -> dict[str, Any]:
        data = {k: v for k, v in msg.items() if k not in ("type", "audio")}
        if wire != kind:
            data["wire_type"] = wire
        for key in ("audio_start_ms", "audio_end_ms"):
            ms = msg.get(key)
            if isinstance(ms, int | float) and kind.startswith("input_audio_buffer.speech_"):
                data[key.replace("_ms", "_uplink_t_ns")] = self.sendlog.time_of_ms(ms)
        return scrub(data)  # type: ignore[no-any-return]

    def on_event(self, kind: str, msg: dict[str, Any], data: dict[str, Any]) -> None:
        """State changes on server events (subclasses add their own)."""
        if kind == "session.updated":
            self._ready = True

    # --- the client side (recording proxy) ---------------------------------------------

    def decode_client(self, message: Message, t_ns: int) -> list[Outgoing]:
        if isinstance(message, bytes):
            raise ProtocolError(f"{self.name}: unexpected binary message from the client")
        msg = load_object(message)
        wire = msg.get("type")
        if not isinstance(wire, str):
            raise ProtocolError(f"{self.name}: client event without a type", str(msg)[:200])
        if wire == "input_audio_buffer.append":
            return [UpAudio(b64_to_pcm(msg.get("audio")), self.uplink_rate, t_ns, None)]
        if wire == "conversation.item.truncate":
            end = msg.get("audio_end_ms")
            data = {
                "item_id": str(msg.get("item_id", ""))[:200],
                "audio_end_ms": end if isinstance(end, int | float) else None,
            }
            return [UpEvent("truncate", t_ns, data)]
        kind = CLIENT_KINDS.get(wire, wire)
        data = {"wire_type": wire} if kind != wire else {}
        if kind == "session":
            data["session"] = scrub(msg.get("session"))
        return [UpEvent(kind, t_ns, data)]

    def server_ts_ms(self, kind: str, msg: dict[str, Any]) -> float | None:
        return None  # the OpenAI Realtime API stamps nothing with a server clock

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "api": self.api,
            "sample_rate": RATE,
            "turn_detection": self.turn_detection_config() or "manual",
            "voice": self.voice,
            "credentials_from": "|".join(self.key_env),
            "errors_fatal": self.errors_fatal,
            "history_items": len(self.history),
        }


def create(**options: Any) -> OpenAIDialect:
    return OpenAIDialect(**options)
