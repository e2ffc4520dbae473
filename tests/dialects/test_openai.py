"""OpenAI Realtime and Grok dialects: sans-I/O units, then real rollouts at the fake server."""

import json
import os

import numpy as np
import pytest

from rig.dialects import get_dialect
from rig.dialects.grok import GrokDialect
from rig.dialects.openai import OpenAIDialect
from rig.errors import ConfigError, ProtocolError
from tests.fakes.harness import run_rollouts, speech_plan, tone_plan
from tests.fakes.openai_server import FakeRealtimeServer

RATE = 24_000


def _sent(msgs):
    return [json.loads(m) for m in msgs]


def test_session_update_shapes_per_api_and_turn_mode() -> None:
    (ga,) = _sent(OpenAIDialect(turn_detection="semantic_vad", eagerness="low").open_messages())
    inp = ga["session"]["audio"]["input"]
    assert ga["type"] == "session.update" and ga["session"]["type"] == "realtime"
    assert inp["format"] == {"type": "audio/pcm", "rate": 24000}
    assert inp["turn_detection"] == {"type": "semantic_vad", "eagerness": "low"}
    (beta,) = _sent(OpenAIDialect(api="beta", turn_detection="manual").open_messages())
    assert beta["session"]["turn_detection"] is None
    assert beta["session"]["input_audio_format"] == "pcm16"
    (grok,) = _sent(GrokDialect(turn_detection="manual").open_messages())
    assert grok["session"]["turn_detection"] == {"type": None}
    with pytest.raises(ConfigError):
        OpenAIDialect(turn_detection="push_to_talk")


def test_audio_append_and_speech_events_map_through_the_send_log() -> None:
    d = OpenAIDialect()
    pcm = np.arange(480, dtype=np.int16)
    t0 = 1_000_000_000
    for k in range(10):  # 10 frames of 20 ms, each sent 1 ms late
        (msg,) = _sent(d.encode_audio(pcm, k, 0, t0 + k * 20_000_000 + 1_000_000))
        assert msg["type"] == "input_audio_buffer.append"
    assert np.array_equal(np.frombuffer(__import__("base64").b64decode(msg["audio"]), "<i2"), pcm)
    (ev,) = d.decode(
        json.dumps({"type": "input_audio_buffer.speech_stopped", "audio_end_ms": 50}), 7
    )
    # 50 ms = frame 2 (sent at t0 + 41 ms) + 10 ms into it
    assert ev.data["audio_end_uplink_t_ns"] == t0 + 51_000_000
    (late,) = d.decode(
        json.dumps({"type": "input_audio_buffer.speech_started", "audio_start_ms": 900}), 8
    )
    assert late.data["audio_start_uplink_t_ns"] is None  # never sent: no made-up time


def test_beta_names_decode_to_ga_and_truncate_targets_the_playing_item() -> None:
    d = OpenAIDialect(api="beta")
    for item, n in (("a", 2400), ("b", 4800)):
        b64 = __import__("base64").b64encode(np.ones(n, "<i2").tobytes()).decode()
        (audio,) = d.decode(
            json.dumps(
                {"type": "response.audio.delta", "item_id": item, "content_index": 0, "delta": b64}
            ),
            1,
        )
        assert audio.extra["item_id"] == item and audio.sample_rate == RATE
    (ev,) = d.decode(json.dumps({"type": "response.audio_transcript.delta", "delta": "hi"}), 2)
    assert ev.kind == "response.output_audio_transcript.delta" and ev.data["delta"] == "hi"
    # heard all of item a (2400) and 1200 samples of item b -> b truncated at 50 ms
    (msg,) = _sent(d.encode_event("truncate", {"played_samples": 3600, "sample_rate": RATE}, 0))
    assert msg == {
        "type": "conversation.item.truncate",
        "item_id": "b",
        "content_index": 0,
        "audio_end_ms": 50,
    }
    assert d.encode_event("truncate", {"played_samples": 7200, "sample_rate": RATE}, 0) == []


def test_error_events_are_protocol_errors_and_garbage_is_refused() -> None:
    d = OpenAIDialect()
    with pytest.raises(ProtocolError, match="rate_limit"):
        d.decode(
            json.dumps({"type": "error", "error": {"type": "rate_limit", "message": "slow down"}}),
            0,
        )
    for bad in ("{nope", "[1, 2]", json.dumps({"no": "type"}), b"\x00\x01"):
        with pytest.raises(ProtocolError):
            d.decode(bad, 0)
    assert (
        OpenAIDialect(errors_fatal=False)
        .decode(json.dumps({"type": "error", "error": {"message": "x"}}), 0)[0]
        .kind
        == "error"
    )


def test_credentials_only_in_headers(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-unit-secret")
    monkeypatch.setenv("XAI_API_KEY", "xai-unit-secret")
    o, g = get_dialect("openai"), get_dialect("grok")
    assert o.headers()["Authorization"] == "Bearer sk-unit-secret"
    assert g.headers() == {"Authorization": "Bearer xai-unit-secret"}
    assert "secret" not in json.dumps([o.describe(), g.describe(), o.open_messages()])


def test_grok_waits_for_committed_before_response_create_and_surfaces_ping_time() -> None:
    d = GrokDialect(turn_detection="manual")
    assert _sent(d.encode_event("turn_end", {"turn": 0}, 0)) == [
        {"type": "input_audio_buffer.commit"}
    ]
    assert d.take_outgoing() == []
    d.decode(json.dumps({"type": "input_audio_buffer.committed", "item_id": "i1"}), 5)
    assert _sent(d.take_outgoing()) == [{"type": "response.create"}]
    (ping,) = d.decode(json.dumps({"type": "ping", "timestamp": 1234.5}), 9)
    assert ping.server_ts_ms == 1234.5


# --- rollouts at the fake servers (real time, loopback) -----------------------------------


@pytest.mark.realtime
async def test_server_vad_rollout_records_reply_and_maps_speech_events(tmp_path) -> None:
    async with FakeRealtimeServer(reply_s=0.8) as srv:
        r = (
            await run_rollouts(
                str(tmp_path),
                [
                    ("ga", srv.url, "openai", {}, speech_plan(RATE)),
                ],
            )
        )["ga"]
    m = r.metrics
    assert m["status"] == "ok", m
    assert m["downlink"]["audio_s"] == pytest.approx(0.8, abs=0.01)
    (resp,) = [x for x in m["responses"] if x.get("latency_ms") is not None]
    # fake: 400 ms VAD silence + 150 ms model delay (+ VAD frame granularity, network)
    assert 450 < resp["latency_ms"] < 1200
    (started,) = r.find("server.input_audio_buffer.speech_started")
    (stopped,) = r.find("server.input_audio_buffer.speech_stopped")
    t_start, t_stop = started["audio_start_uplink_t_ns"], stopped["audio_end_uplink_t_ns"]
    assert t_start is not None and t_stop is not None and t_start < t_stop
    # the server heard the speech end at the time our send log says that audio left
    assert t_stop <= stopped["t_ns"]
    (conn,) = srv.conns
    assert not conn.errors_sent and not conn.first_append_before_update
    assert conn.appended_samples == sum(c["n_samples"] for c in r.chunks if c["dir"] == "up")


@pytest.mark.realtime
async def test_barge_in_sends_truncate_with_the_ms_actually_played(tmp_path) -> None:
    # the server's VAD takes 200 ms to report the barge-in (the rig cuts playback at once): the
    # cut item keeps streaming meanwhile, as it does from the real API
    async with FakeRealtimeServer(reply_s=3.0, silence_ms=300, vad_detect_ms=200) as srv:
        r = (
            await run_rollouts(
                str(tmp_path),
                [
                    ("barge", srv.url, "openai", {}, tone_plan(RATE, turns=2, gap_s=1.2)),
                ],
            )
        )["barge"]
    assert r.metrics["status"] == "ok", r.metrics
    (ctl,) = r.find("control.truncate")
    (conn,) = srv.conns
    assert not conn.errors_sent, conn.errors_sent
    (tr,) = conn.truncates
    assert tr["audio_end_ms"] == ctl["played_samples"] * 1000 // RATE  # one item so far
    assert 100 < tr["audio_end_ms"] < tr["sent_ms"]
    (pb,) = r.find("playback.truncate")
    assert pb["dropped_samples"] > 0
    # the cut item kept streaming (2x real time) until the server noticed the barge-in: like a
    # real client the listener flushed it, so none of that audio was placed or played
    down = r.metrics["downlink"]
    assert len(down["truncated_items"]) == 1
    assert down["dropped_after_truncate_samples"] > 0


@pytest.mark.realtime
async def test_manual_and_beta_and_grok_rollouts(tmp_path) -> None:
    async with (
        FakeRealtimeServer(reply_s=0.6) as ga,
        FakeRealtimeServer("openai-beta", reply_s=0.6) as beta,
        FakeRealtimeServer("grok", reply_s=0.6, commit_delay_s=0.15) as grok,
    ):
        rs = await run_rollouts(
            str(tmp_path),
            [
                ("manual", ga.url, "openai", {"turn_detection": "manual"}, tone_plan(RATE)),
                ("beta", beta.url, "openai", {"api": "beta"}, tone_plan(RATE)),
                ("grok", grok.url, "grok", {"turn_detection": "manual"}, tone_plan(RATE)),
            ],
        )
    for rid, r in rs.items():
        assert r.metrics["status"] == "ok", (rid, r.metrics)
        assert r.metrics["downlink"]["audio_s"] == pytest.approx(0.6, abs=0.01), rid
    kinds = [e["type"] for e in ga.conns[0].events if e["type"] != "input_audio_buffer.append"]
    assert kinds == ["session.update", "input_audio_buffer.commit", "response.create"]
    # Grok: commit, then (only after `committed`, 150 ms later) response.create; no error
    g = grok.conns[0]
    assert not g.errors_sent, g.errors_sent
    assert [e["type"] for e in g.events if e["type"] != "input_audio_buffer.append"] == [
        "session.update",
        "input_audio_buffer.commit",
        "response.create",
    ]
    pings = rs["grok"].find("server.ping")
    assert len(pings) >= 3 and all(p["server_ts_ms"] > 5_000_000 for p in pings)
    assert any(e.get("wire_type") == "response.audio.done" for e in rs["beta"].events)


@pytest.mark.realtime
async def test_disconnect_malformed_and_error_end_only_their_rollout(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-rollout-secret-123")
    async with FakeRealtimeServer(reply_s=0.6) as srv:
        rs = await run_rollouts(
            str(tmp_path),
            [
                ("dead", srv.url + "?fault=disconnect&at_s=1.0", "openai", {}, tone_plan(RATE)),
                ("junk", srv.url + "?fault=malformed&at_s=0.8", "openai", {}, tone_plan(RATE)),
                ("err", srv.url + "?fault=error&at_s=0.8", "openai", {}, tone_plan(RATE)),
                ("fine", srv.url, "openai", {}, tone_plan(RATE)),
            ],
        )
    assert rs["dead"].metrics["status"] == "transport_error"
    assert rs["junk"].metrics["status"] == "protocol_error"
    assert "JSON" in rs["junk"].metrics["reason"]
    assert rs["err"].metrics["status"] == "protocol_error"
    assert "server_error" in rs["err"].metrics["reason"]
    assert rs["fine"].metrics["status"] == "ok", rs["fine"].metrics
    dead = rs["dead"]
    assert os.path.getsize(os.path.join(dead.dir, "user.wav")) > 44  # noqa: ASYNC240
    assert sum(c["dir"] == "up" for c in dead.chunks) >= 40  # ~1 s of 20 ms frames kept
    assert all(c.headers.get("authorization") == "Bearer sk-rollout-secret-123" for c in srv.conns)
    for root, _, files in os.walk(tmp_path):  # the key never reaches a file
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:  # noqa: ASYNC230
                assert b"sk-rollout-secret" not in fh.read(), f


HISTORY = [
    {"role": "system", "text": "You are a terse assistant."},
    {"role": "user", "text": "My name is Ada."},
    {"role": "assistant", "text": "Nice to meet you, Ada."},
]


def test_history_items_per_layout_and_refusals() -> None:
    ga = OpenAIDialect(history=HISTORY)
    items = [json.loads(m)["item"] for m in ga.history_messages()]
    assert [i["role"] for i in items] == ["system", "user", "assistant"]
    assert [i["content"][0]["type"] for i in items] == ["input_text", "input_text", "output_text"]
    beta = OpenAIDialect(api="beta", history=HISTORY)
    assert json.loads(beta.history_messages()[2])["item"]["content"][0]["type"] == "text"
    with pytest.raises(ConfigError, match=r"history\[0\]\.role"):
        OpenAIDialect(history=[{"role": "robot", "text": "hi"}])
    with pytest.raises(ConfigError, match=r"history\[0\]\.text"):
        OpenAIDialect(history=[{"role": "user", "text": "  "}])
    # nothing goes out before the session is configured; then the history, before any audio
    assert ga.take_outgoing() == []
    out = ga.decode(json.dumps({"type": "session.updated", "session": {}}), 5)
    assert [e.kind for e in out] == ["session.updated", "history.sent"]
    assert out[1].data == {"items": 3, "roles": ["system", "user", "assistant"]}
    assert len(ga.take_outgoing()) == 3


@pytest.mark.realtime
async def test_text_history_reaches_the_server_before_the_first_audio(tmp_path) -> None:
    async with (
        FakeRealtimeServer(reply_s=0.6) as ga,
        FakeRealtimeServer("openai-beta", reply_s=0.6) as beta,
    ):
        rs = await run_rollouts(
            str(tmp_path),
            [
                ("ga", ga.url, "openai", {"history": HISTORY}, tone_plan(RATE)),
                ("beta", beta.url, "openai", {"api": "beta", "history": HISTORY}, tone_plan(RATE)),
            ],
        )
    for srv, rid in ((ga, "ga"), (beta, "beta")):
        r = rs[rid]
        assert r.metrics["status"] == "ok", r.metrics
        (conn,) = srv.conns
        assert not conn.errors_sent, conn.errors_sent
        assert [i["content"][0]["text"] for i in conn.history] == [h["text"] for h in HISTORY]
        kinds = [e["type"] for e in conn.events]
        first_item = kinds.index("conversation.item.create")
        assert kinds[0] == "session.update"
        assert conn.first_append_index is not None and first_item < conn.first_append_index
        (sent,) = r.find("history.sent")
        assert sent["items"] == 3
        assert r.metrics["downlink"]["audio_s"] == pytest.approx(0.6, abs=0.01)
