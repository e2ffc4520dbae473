"""The settings of one rollout's session (recorded in `session.start` and compared on resume).

Why apart from rig.session: a plain frozen value that the CLI, the runner and the tests build
without pulling in the asyncio shell.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class SessionConfig:
    frame_ms: float = 20.0
    start_lead_ms: float = 50.0
    drain_quiet_s: float = 1.5
    max_s: float = 120.0
    onset_threshold_dbfs: float = -40.0
    onset_gap_ms: float = 300.0
    send_end: bool = True
    truncate_on_barge_in: bool = True
    probe_interval_s: float = 0.0
    #: path samples (ping round trip + TCP_INFO) every N s where the transport has them; 0 off
    path_interval_s: float = 1.0
    #: leading `prefill` audio goes out this many times faster than real time where the
    #: transport can carry it (WebSocket); sound cards and WebRTC play it in real time
    prefill_speed: float = 1.0
    #: a send (audio frame or control message) blocked longer than this ends the rollout
    #: `timed_out`: the peer stopped reading
    send_timeout_s: float = 2.0
    #: a backstop on closing the transport: each bounds its own close (WebSocket 2 s, a
    #: sound card 3 s, WebRTC 5 s) and must get to finish it (the device path marks a wedged
    #: PortAudio when its stop does not return); this only catches one that does not
    close_timeout_s: float = 10.0
    #: the echo condition (rig.echo.spec canonical text: `erl_db=20,delay_ms=40`), or None
    echo: str | None = None
    #: send frames from the clock's shared tick where the transport can (rig.sessiontick);
    #: False: the send loop awaits every deadline itself (one wake-up per stream per frame)
    tick: bool = True

    def as_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        if out["echo"] is None:  # absent when off: run directories from before compare equal
            del out["echo"]
        if out["tick"]:  # absent when on (the default): older run directories compare equal
            del out["tick"]
        return out
