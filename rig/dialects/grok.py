"""xAI Grok Voice Agent API: the OpenAI Realtime layout with Grok's differences (sans-I/O).

Differences handled here (everything else is rig.dialects.openai):
  credentials  XAI_API_KEY
  session      Grok's `session.update` carries `turn_detection` at the session level; its
               VAD-off form is `{"type": null}` (not `null`)
  manual turns `turn_end` sends `input_audio_buffer.commit` only; `response.create` follows
               when the server confirms with `input_audio_buffer.committed` (asking earlier
               can race the commit and answer an empty buffer)
  ping         the server's `ping` events carry a server timestamp (ms); it is surfaced as
               DownEvent.server_ts_ms so the session hands it to the clock fit
"""

from __future__ import annotations

from typing import Any

from rig.dialects._wire import dumps
from rig.dialects.base import Message
from rig.dialects.openai import RATE, OpenAIDialect
from rig.limits import is_number, ts_ms_problem

#: keys a Grok `ping` may carry its server time under, in the order they are tried
PING_TIME_KEYS = ("timestamp", "timestamp_ms", "server_ts_ms", "time")


class GrokDialect(OpenAIDialect):
    name = "grok"
    key_env = ("XAI_API_KEY",)
    default_url = "wss://api.x.ai/v1/realtime?model=grok-voice-latest"

    def __init__(self, **options: Any) -> None:
        options.setdefault("api", "ga")
        super().__init__(**options)
        self.awaiting_commit = 0

    def headers(self) -> dict[str, str]:
        h = super().headers()
        h.pop("OpenAI-Beta", None)
        return h

    def session_config(self) -> dict[str, Any]:
        fmt = {"type": "audio/pcm", "rate": RATE}
        s: dict[str, Any] = {
            "turn_detection": self.turn_detection_config() or {"type": None},
            "audio": {"input": {"format": fmt}, "output": {"format": fmt}},
        }
        if self.voice:
            s["voice"] = self.voice
        if self.instructions:
            s["instructions"] = self.instructions
        return s

    def request_response(self) -> list[Message]:
        self.awaiting_commit += 1
        return [dumps({"type": "input_audio_buffer.commit"})]

    def on_event(self, kind: str, msg: dict[str, Any], data: dict[str, Any]) -> None:
        super().on_event(kind, msg, data)
        if kind == "input_audio_buffer.committed" and self.awaiting_commit > 0:
            self.awaiting_commit -= 1
            self._outgoing.append(dumps({"type": "response.create"}))

    def server_ts_ms(self, kind: str, msg: dict[str, Any]) -> float | None:
        if kind != "ping":
            return None
        for key in PING_TIME_KEYS:
            v = msg.get(key)
            if isinstance(v, int | float) and is_number(v):
                return None if ts_ms_problem(v) else float(v)
        return None

    def _event_data(self, kind: str, wire: str, msg: dict[str, Any]) -> dict[str, Any]:
        data = super()._event_data(kind, wire, msg)
        if kind == "ping":
            for key in PING_TIME_KEYS:
                if is_number(msg.get(key)):
                    problem = ts_ms_problem(msg[key])
                    if problem:  # kept as an event, without a server time: said why
                        data["server_ts_invalid"] = f"{key}: {problem}"
                    break
        return data


def create(**options: Any) -> GrokDialect:
    return GrokDialect(**options)
