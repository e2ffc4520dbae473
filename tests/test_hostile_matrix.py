"""The hostile-server matrix (issue #15): every hostile behaviour of tests/support/hostile.py
in the shape of every WebSocket dialect (rig, raw, openai, grok, gemini, pipecat, moshi).

Per dialect, all faults run at once against real servers on loopback (short rollouts). For
each: the status is the one expected and names the fault (never `error`: that would be an
undocumented exception out of a decoder); chunks.jsonl holds one row per chunk counted in
metrics.json and no `invalid` row; events.jsonl parses and ends with `session.end`; then
`rig report` on the run finishes.
"""

from __future__ import annotations

import io
import json
from contextlib import AsyncExitStack, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from rig.audio.source import tone
from rig.cli import main
from rig.core.director import Drain, Pause, Play
from rig.core.plan import UserPlan
from rig.dialects import get_dialect
from rig.errors import ProtocolError
from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
from rig.session import SessionConfig
from rig.transports.websocket import WebSocketTransport
from tests.support.hostile import DIALECTS, FAULTS, MARKUP, HostileServer

pytestmark = pytest.mark.realtime

P, T, OK, TO = "protocol_error", "transport_error", "ok", "timed_out"
#: what every dialect does with the faults it carries the same way
COMMON = {"hangup": T, "flood": f"{OK}|{TO}", "stop_reading": TO, "markup": P}
#: (dialect) -> fault -> expected status ("a|b": either, e.g. a flood that ends in time or not)
EXPECTED: dict[str, dict[str, str]] = {
    "rig": {
        **dict.fromkeys(["nested", "huge_int", "inf_ts", "nan_event", "e400_ts", "big_ts"], P),
        **dict.fromkeys(["rate_huge", "rate_zero", "rate_bool"], P),
    },
    "raw": {
        **dict.fromkeys(["nested", "huge_int", "inf_ts", "nan_event", "e400_ts", "big_ts"], P),
        **dict.fromkeys(["rate_huge", "rate_zero", "rate_bool"], P),
    },
    # audio_start_ms 1e300: finite, kept as an event whose uplink time is null (no send time)
    "openai": {
        **dict.fromkeys(["nested", "huge_int", "inf_ts", "nan_event", "e400_ts"], P),
        "big_ts": OK,
        # the API fixes 24 kHz: the dialect never reads a rate from session.updated
        **dict.fromkeys(["rate_huge", "rate_zero", "rate_bool"], OK),
    },
    # a ping timestamp of 1e300 is kept without a server time (`server_ts_invalid`)
    "grok": {
        **dict.fromkeys(["nested", "huge_int", "inf_ts", "nan_event", "e400_ts"], P),
        "big_ts": OK,
        **dict.fromkeys(["rate_huge", "rate_zero", "rate_bool"], OK),
    },
    # gemini has no timestamps: the number faults sit in usageMetadata; 1e300 is a number
    "gemini": {
        **dict.fromkeys(["nested", "huge_int", "inf_ts", "nan_event", "e400_ts"], P),
        "big_ts": OK,
        **dict.fromkeys(["rate_huge", "rate_zero", "rate_bool"], P),
        "markup": T,  # gemini's errors are close reasons
    },
    # pipecat: JSON faults inside a MessageFrame, pts 2^64-1, audio frames at hostile rates
    # (`true` is the varint 1 on the wire: 1 Hz)
    # pts 2^64-1 ns is 1.8e13 ms: finite and inside the +-1e15 ms bound, kept; `ts` inside an
    # RTVI message is the bot's own data, not a timestamp the dialect reads
    "pipecat": {
        **dict.fromkeys(["nested", "huge_int", "nan_event", "e400_ts"], P),
        **dict.fromkeys(["inf_ts", "big_ts"], OK),
        **dict.fromkeys(["rate_huge", "rate_zero", "rate_bool"], P),
    },
    # moshi: corrupt Ogg, bad UTF-8, unknown kinds; no rate on the wire (good audio instead)
    "moshi": {
        **dict.fromkeys(["nested", "huge_int", "inf_ts", "nan_event", "e400_ts", "big_ts"], P),
        **dict.fromkeys(["rate_huge", "rate_zero", "rate_bool"], OK),
        # without a fast prefill its short script fits in the socket buffers: the script
        # ends, the system never spoke
        "stop_reading": "no_audio",
    },
}
RATE = {"openai": 24_000, "grok": 24_000, "moshi": 24_000}


def _dialect_options(dialect: str) -> dict[str, Any]:
    if dialect in ("rig", "raw", "pipecat", "gemini"):
        return {"sample_rate": RATE.get(dialect, 16_000)}
    return {}


def _spec(dialect: str, fault: str, url: str) -> RolloutSpec:
    rate = RATE.get(dialect, 16_000)
    steps: list[Any] = [Pause(0.2), Play(tone(300, 0.6, rate).pcm, "turn"), Drain(0.4, 5.0)]
    speed = 1.0
    # history at 100x fills the socket buffers in about a second (not moshi: 1,500 Opus
    # encodes at once would stall every other rollout of the matrix)
    if fault == "stop_reading" and dialect != "moshi":
        steps.insert(0, Play(tone(200, 120.0, rate).pcm, "history", role="prefill"))
        speed = 100.0
    plan = UserPlan(tone(300, 0.6, rate).pcm, rate)
    plan.steps = steps

    def make(clock, gate):  # type: ignore[no-untyped-def]
        d = get_dialect(dialect, **_dialect_options(dialect))
        return WebSocketTransport(url, d, clock, open_gate=gate, retries=0, ready_timeout_s=3)

    cfg = SessionConfig(drain_quiet_s=0.4, max_s=5.0, prefill_speed=speed)
    return RolloutSpec(fault, plan, make, {"url": url}, {"item": fault}, cfg)


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_every_fault_in_every_dialect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dialect: str
) -> None:
    for env in ("OPENAI_API_KEY", "XAI_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(env, "sk-test-not-a-secret")
    monkeypatch.setenv("COLUMNS", "250")  # the report table unwrapped
    expected = {**COMMON, **EXPECTED[dialect]}
    assert set(expected) == set(FAULTS)
    async with AsyncExitStack() as stack:
        servers = {
            f: await stack.enter_async_context(HostileServer(f, dialect=dialect)) for f in FAULTS
        }
        runner = Runner(
            str(tmp_path), RunnerSettings(run_id="h", concurrency=len(FAULTS), analyze=False)
        )
        result = await runner.run([_spec(dialect, f, s.url) for f, s in servers.items()])
    got = {f: result["results"][f]["status"] for f in FAULTS}
    wrong = {
        f: (got[f], result["results"][f].get("reason"))
        for f in FAULTS
        if got[f] not in expected[f].split("|")
    }
    assert wrong == {}, wrong
    for fault in FAULTS:
        m = result["results"][fault]
        if m["status"] != OK:
            assert m.get("reason"), fault  # the status names the fault
        d = tmp_path / "h" / "rollouts" / fault
        rows = [json.loads(x) for x in (d / "chunks.jsonl").read_text().splitlines()]
        assert not any("invalid" in r for r in rows), fault
        assert sum(r["dir"] == "up" for r in rows) == m.get("uplink", {}).get("frames", 0), fault
        down = sum(r["dir"] == "down" for r in rows)
        assert down == m.get("downlink", {}).get("chunks", 0), fault
        events = [json.loads(x) for x in (d / "events.jsonl").read_text().splitlines()]
        assert events[-1]["kind"] == "session.end", (fault, events[-1])
        assert json.loads((d / "metrics.json").read_text())["status"] == m["status"]
    if expected["markup"] != OK:
        assert MARKUP[:3] in result["results"]["markup"]["reason"]
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["report", str(tmp_path / "h")]) == 0


@pytest.mark.parametrize("dialect", DIALECTS)
def test_each_hostile_message_decodes_or_raises_protocol_error(
    monkeypatch: pytest.MonkeyPatch, dialect: str
) -> None:
    """Straight into the decoder (no socket): every hostile message of the dialect's shape
    either decodes (to finite, serialisable items) or raises ProtocolError, nothing else."""
    for env in ("OPENAI_API_KEY", "XAI_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(env, "sk-test-not-a-secret")
    outcomes: dict[str, str] = {}
    for fault in FAULTS:
        srv = HostileServer(fault, dialect=dialect)
        messages = [srv._audio(0.0), srv._nested(), srv._inf_ts(), srv._error() or "{}"]
        messages += [srv._event_with(n) for n in ("NaN", "1e400", "1e300", "9" * 5000)]
        if fault in ("rate_huge", "rate_zero", "rate_bool"):
            messages.append(srv._rate_fault())
        d = get_dialect(dialect, **_dialect_options(dialect))
        for k, msg in enumerate(messages):
            try:
                items = d.decode(msg, 1_000_000)
            except ProtocolError as exc:
                outcomes[f"{fault}/{k}"] = f"ProtocolError: {exc.reason[:60]}"
                continue
            for item in items:
                json.dumps(getattr(item, "data", None) or {}, allow_nan=False, default=str)
            outcomes[f"{fault}/{k}"] = "decoded"
    assert "ProtocolError" in " ".join(outcomes.values())


SIGNALLING_EXPECTED = {
    # (shape, fault) -> status. WHIP answers are SDP text: one that is not SDP at all is a
    # protocol error; an SDP line aiortc cannot parse fails the negotiation (transport)
    **{("pipecat", f): P for f in ("nested", "huge_int", "nan_event", "flood")},
    **{("whip", f): P for f in ("nested", "nan_event", "flood")},
    ("whip", "huge_int"): T,
    **{(s, "markup"): T for s in ("whip", "pipecat")},
    **{(s, "hangup"): T for s in ("whip", "pipecat")},
    **{(s, "stop_reading"): TO for s in ("whip", "pipecat")},
}


@pytest.mark.parametrize("shape", ["whip", "pipecat"])
async def test_every_fault_in_webrtc_signalling(tmp_path: Path, shape: str) -> None:
    """The aiortc offer/answer exchange against hostile signalling servers, through the
    Runner: each rollout ends with a status naming the fault (a server that never answers:
    the wall-clock cap), `session.end` is written, `rig report` finishes."""
    pytest.importorskip("aiortc")
    from rig.transports.webrtc import WebRtcTransport, get_signalling
    from tests.support.hostile_http import MARKUP as HTTP_MARKUP
    from tests.support.hostile_http import SIGNALLING_FAULTS, HostileSignalling

    def spec(fault: str, url: str) -> RolloutSpec:
        def make(clock, gate):  # type: ignore[no-untyped-def]
            return WebRtcTransport(get_signalling(shape, url), clock, open_gate=gate)

        plan = UserPlan(tone(300, 0.4, 48_000).pcm, 48_000)
        plan.steps = [Play(plan.pcm, "turn"), Drain(0.3, 2.0)]
        cfg = SessionConfig(drain_quiet_s=0.3, max_s=2.0)
        return RolloutSpec(fault, plan, make, {"url": url}, {"item": fault}, cfg)

    async with AsyncExitStack() as stack:
        servers = {
            f: await stack.enter_async_context(HostileSignalling(f, shape=shape))
            for f in SIGNALLING_FAULTS
        }
        runner = Runner(
            str(tmp_path), RunnerSettings(run_id="w", concurrency=len(servers), analyze=False)
        )
        result = await runner.run([spec(f, s.url) for f, s in servers.items()])
    got = {f: (result["results"][f]["status"], result["results"][f].get("reason")) for f in servers}
    wrong = {f: g for f, g in got.items() if g[0] != SIGNALLING_EXPECTED[(shape, f)]}
    assert wrong == {}, wrong
    assert HTTP_MARKUP in got["markup"][1]
    assert "wall-clock cap" in got["stop_reading"][1] or "signalling" in got["stop_reading"][1]
    for fault in servers:
        d = tmp_path / "w" / "rollouts" / fault
        events = [json.loads(x) for x in (d / "events.jsonl").read_text().splitlines()]
        assert events[-1]["kind"] == "session.end", (fault, events[-1])
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["report", str(tmp_path / "w")]) == 0
