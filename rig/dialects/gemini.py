"""Gemini Live API (BidiGenerateContent over WebSocket), client side, sans-I/O.

How this works:
  open      one `setup` message (model, AUDIO response modality, and with activity="manual"
            `realtimeInputConfig.automaticActivityDetection.disabled = true`)
  ready     the server's `setupComplete`; no audio is sent before it
  history   text history (scenario `history`) as one `clientContent` (turnComplete false),
            right after `setupComplete`
  uplink    the session's PCM (any rate) goes through ONE stateful streaming resampler to
            16 kHz, then `realtimeInput.audio` = {data: base64 PCM16, mimeType:
            "audio/pcm;rate=16000"}; the send log keeps when each 16 kHz sample left
  turns     manual mode: the session's `turn_start` / `turn_end` become
            `realtimeInput.activityStart` / `activityEnd`; `end` sends `audioStreamEnd`
  downlink  `serverContent.modelTurn.parts[].inlineData` audio (24 kHz PCM16) -> DownAudio;
            `interrupted`, `turnComplete`, `generationComplete`, transcriptions, `goAway`,
            `usageMetadata`, `toolCall` -> DownEvents. Gemini interrupts on its own when it
            hears the user (`interrupted`), so there is no truncate request to send.
Client side (the recording proxy, `decode_client`): `setup` -> session; `realtimeInput.audio`
(and the older `mediaChunks`) -> UpAudio at its MIME rate; `activityStart` / `activityEnd`
-> turn_start / turn_end; `audioStreamEnd` -> end; `clientContent` -> client_content.
Credentials: GEMINI_API_KEY or GOOGLE_API_KEY, sent as the `x-goog-api-key` header only.
Gemini reports errors by closing the socket with a reason; the transport turns that into a
transport error carrying the close code.
"""

from __future__ import annotations

from typing import Any

from rig.audio.pcm import Pcm16
from rig.core.events import DownAudio, DownEvent, Incoming, Outgoing, UpAudio, UpEvent
from rig.dialects._wire import b64_to_pcm, dumps, env_secret, load_object, pcm_to_b64, scrub
from rig.dialects.base import Dialect, Message
from rig.dialects.endpointer import check_ms
from rig.dialects.history import check_history, history_sent
from rig.dialects.resample import ResampleStream
from rig.dialects.sendlog import SendLog
from rig.errors import ConfigError, ProtocolError
from rig.limits import remote_rate

WIRE_IN_RATE = 16_000
OUT_RATE = 24_000
MIME_IN = f"audio/pcm;rate={WIRE_IN_RATE}"

#: serverContent flags -> event kinds
_FLAGS = {
    "interrupted": "interrupted",
    "turnComplete": "turn_complete",
    "generationComplete": "generation_complete",
    "waitingForInput": "waiting_for_input",
}
_TOP_LEVEL = {
    "setupComplete": "setup_complete",
    "goAway": "go_away",
    "usageMetadata": "usage",
    "toolCall": "tool_call",
    "toolCallCancellation": "tool_call_cancellation",
    "sessionResumptionUpdate": "session_resumption",
}
#: setup.realtimeInputConfig.activityHandling values (the API's own names)
ACTIVITY_HANDLING = ("START_OF_ACTIVITY_INTERRUPTS", "NO_INTERRUPTION")
SENSITIVITY = ("high", "low")


def detection_config(
    silence_ms: object, prefix_ms: object, start: object, end: object
) -> dict[str, Any]:
    """`automaticActivityDetection` from the rig's option names (only what was set)."""
    out: dict[str, Any] = {}
    for key, name, v in (
        ("silenceDurationMs", "silence_duration_ms", silence_ms),
        ("prefixPaddingMs", "prefix_padding_ms", prefix_ms),
    ):
        ms = check_ms("gemini", name, v)
        if ms is not None:
            out[key] = ms
    for key, name, v, prefix in (
        ("startOfSpeechSensitivity", "start_sensitivity", start, "START_SENSITIVITY_"),
        ("endOfSpeechSensitivity", "end_sensitivity", end, "END_SENSITIVITY_"),
    ):
        if v is None:
            continue
        if not isinstance(v, str) or v.lower() not in SENSITIVITY:
            raise ConfigError(f"gemini: {name} must be 'high' or 'low', not {v!r}")
        out[key] = prefix + v.upper()
    return out


#: realtimeInput markers from a client -> the rig's kinds
_CLIENT_MARKS = {"activityStart": "turn_start", "activityEnd": "turn_end", "audioStreamEnd": "end"}


def rate_of(mime: object) -> int | None:
    """16000 from 'audio/pcm;rate=16000' (None if the MIME type says no rate); a rate outside
    8-192 kHz or not a number is a ProtocolError."""
    if not isinstance(mime, str) or not mime.startswith("audio/pcm"):
        return None
    for part in mime.split(";")[1:]:
        k, _, v = part.strip().partition("=")
        if k == "rate":
            if not (v.isascii() and v.isdigit() and len(v) <= 9):
                raise ProtocolError(f"gemini: mimeType {mime[:80]!r} has no usable sample rate")
            return remote_rate(int(v), "gemini mimeType")
    return None


class GeminiDialect(Dialect):
    name = "gemini"
    key_env = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
    default_url = (
        "wss://generativelanguage.googleapis.com/ws/"
        "google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
    )

    def __init__(
        self,
        *,
        model: str = "models/gemini-live-2.5-flash-preview",
        sample_rate: int = WIRE_IN_RATE,
        activity: str = "auto",
        silence_duration_ms: int | None = None,
        prefix_padding_ms: int | None = None,
        start_sensitivity: str | None = None,
        end_sensitivity: str | None = None,
        activity_handling: str | None = None,
        voice: str | None = None,
        instructions: str | None = None,
        history: list[dict[str, str]] | None = None,
    ) -> None:
        if activity not in ("auto", "manual"):
            raise ConfigError(f"gemini: activity must be 'auto' or 'manual', not {activity!r}")
        self.model = model
        self.uplink_rate = sample_rate  # the session's rate; resampled to 16 kHz on the wire
        self.downlink_rate = OUT_RATE
        self.activity = activity
        self.detection = detection_config(
            silence_duration_ms, prefix_padding_ms, start_sensitivity, end_sensitivity
        )
        if self.detection and activity == "manual":
            raise ConfigError("gemini: endpointer settings need activity='auto' (the server's)")
        if activity_handling is not None and activity_handling not in ACTIVITY_HANDLING:
            raise ConfigError(
                f"gemini: activity_handling must be one of {', '.join(ACTIVITY_HANDLING)}, "
                f"not {activity_handling!r}"
            )
        self.activity_handling = activity_handling
        self.voice = voice
        self.instructions = instructions
        self.history = check_history(history) if history else []
        self._outgoing: list[Message] = []
        self.resampler = ResampleStream(sample_rate, WIRE_IN_RATE)
        self.sendlog = SendLog(WIRE_IN_RATE)
        self._ready = False

    def headers(self) -> dict[str, str]:
        key = env_secret(*self.key_env)
        return {"x-goog-api-key": key} if key else {}

    def setup(self) -> dict[str, Any]:
        gen: dict[str, Any] = {"responseModalities": ["AUDIO"]}
        if self.voice:
            gen["speechConfig"] = {
                "voiceConfig": {"prebuiltVoiceConfig": {"voiceName": self.voice}}
            }
        s: dict[str, Any] = {"model": self.model, "generationConfig": gen}
        ric: dict[str, Any] = {}
        if self.activity == "manual":
            ric["automaticActivityDetection"] = {"disabled": True}
        elif self.detection:
            ric["automaticActivityDetection"] = dict(self.detection)
        if self.activity_handling:
            ric["activityHandling"] = self.activity_handling
        if ric:
            s["realtimeInputConfig"] = ric
        if self.instructions:
            s["systemInstruction"] = {"parts": [{"text": self.instructions}]}
        return {"setup": s}

    def open_messages(self) -> list[Message]:
        return [dumps(self.setup())]

    @property
    def ready(self) -> bool:
        return self._ready

    def history_message(self) -> Message:
        """The history as one `clientContent` with `turnComplete: false`: context only, the
        model does not answer it. System entries become user turns (Gemini turns are user or
        model; the system instruction belongs in `instructions`)."""
        turns = [
            {
                "role": "model" if h["role"] == "assistant" else "user",
                "parts": [{"text": h["text"]}],
            }
            for h in self.history
        ]
        return dumps({"clientContent": {"turns": turns, "turnComplete": False}})

    def take_outgoing(self) -> list[Message]:
        out, self._outgoing = self._outgoing, []
        return out

    def encode_audio(self, pcm: Pcm16, seq: int, t_sched_ns: int, t_now_ns: int) -> list[Message]:
        wire = self.resampler.process(pcm)
        self.sendlog.record(int(wire.size), t_now_ns)
        if wire.size == 0:
            return []  # the resampler is still filling its filter
        return [
            dumps({"realtimeInput": {"audio": {"data": pcm_to_b64(wire), "mimeType": MIME_IN}}})
        ]

    def encode_event(self, kind: str, data: dict[str, Any], t_now_ns: int) -> list[Message]:
        if self.activity == "manual" and kind == "turn_start":
            return [dumps({"realtimeInput": {"activityStart": {}}})]
        if self.activity == "manual" and kind == "turn_end":
            return [dumps({"realtimeInput": {"activityEnd": {}}})]
        if kind == "end" and self.activity == "auto":
            return [dumps({"realtimeInput": {"audioStreamEnd": True}})]
        return []

    def decode(self, message: Message, t_ns: int) -> list[Incoming]:
        msg = load_object(message)  # Gemini sends its JSON in text or binary frames
        out: list[Incoming] = []
        for key, kind in _TOP_LEVEL.items():
            if key in msg:
                out.append(DownEvent(kind, t_ns, scrub({key: msg[key]})))
                if key == "setupComplete" and not self._ready:
                    self._ready = True
                    if self.history:  # before the transport lets audio flow
                        self._outgoing.append(self.history_message())
                        out.append(history_sent(self.history, t_ns))
        content = msg.get("serverContent")
        if content is not None:
            if not isinstance(content, dict):
                raise ProtocolError("gemini: serverContent is not an object", str(msg)[:200])
            out.extend(self._content(content, t_ns) or [DownEvent("server_content", t_ns, {})])
        if not out:
            if "error" in msg:
                raise ProtocolError(f"gemini server error: {msg['error']}", scrub(msg))
            raise ProtocolError(
                f"gemini: message with none of the known fields ({', '.join(msg)[:100]})",
                str(msg)[:200],
            )
        return out

    def _content(self, content: dict[str, Any], t_ns: int) -> list[Incoming]:
        out: list[Incoming] = []
        turn = content.get("modelTurn")
        if isinstance(turn, dict):
            for part in turn.get("parts") or []:
                blob = part.get("inlineData") if isinstance(part, dict) else None
                if isinstance(blob, dict):
                    rate = rate_of(blob.get("mimeType")) or OUT_RATE
                    out.append(DownAudio(b64_to_pcm(blob.get("data")), rate, t_ns, None, None))
                elif isinstance(part, dict) and isinstance(part.get("text"), str):
                    out.append(DownEvent("text", t_ns, {"text": part["text"]}))
        for key, kind in _FLAGS.items():
            if content.get(key):
                out.append(DownEvent(kind, t_ns, {}))
        for key, kind in (
            ("inputTranscription", "input_transcription"),
            ("outputTranscription", "output_transcription"),
        ):
            if isinstance(content.get(key), dict):
                out.append(DownEvent(kind, t_ns, {"text": content[key].get("text")}))
        return out

    def decode_client(self, message: Message, t_ns: int) -> list[Outgoing]:
        msg = load_object(message)
        out: list[Outgoing] = []
        if "setup" in msg:
            out.append(UpEvent("session", t_ns, {"setup": scrub(msg["setup"])}))
        if "clientContent" in msg:
            out.append(UpEvent("client_content", t_ns, {}))
        rt = msg.get("realtimeInput")
        if rt is not None:
            if not isinstance(rt, dict):
                raise ProtocolError("gemini: realtimeInput is not an object", str(msg)[:200])
            blobs = [rt["audio"]] if isinstance(rt.get("audio"), dict) else []
            chunks = rt.get("mediaChunks")
            if isinstance(chunks, list):
                blobs += [c for c in chunks if isinstance(c, dict)]
            for blob in blobs:
                rate = rate_of(blob.get("mimeType")) or WIRE_IN_RATE
                out.append(UpAudio(b64_to_pcm(blob.get("data")), rate, t_ns, None))
            for key, kind in _CLIENT_MARKS.items():
                if key in rt:
                    out.append(UpEvent(kind, t_ns, {}))
        if not out:
            raise ProtocolError(
                f"gemini: client message with none of the known fields ({', '.join(msg)[:100]})",
                str(msg)[:200],
            )
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.model,
            "session_rate": self.uplink_rate,
            "wire_input": MIME_IN,
            "resampler": (
                None
                if self.uplink_rate == WIRE_IN_RATE
                else f"soxr stream {self.uplink_rate}->{WIRE_IN_RATE} {self.resampler.quality}"
            ),
            "resampler_delay_ms": round(self.resampler.delay_ms, 3),
            "output_rate": OUT_RATE,
            "activity": self.activity,
            "activity_detection": self.detection or None,
            "activity_handling": self.activity_handling,
            "voice": self.voice,
            "credentials_from": "|".join(self.key_env),
            "history_items": len(self.history),
        }


def create(**options: Any) -> GeminiDialect:
    return GeminiDialect(**options)
