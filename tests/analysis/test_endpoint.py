"""Endpointing vs generation from arrivals (rig.analysis.endpoint): units with a known truth,
then the OpenAI fake at two `silence_duration_ms` settings (no server clock)."""

from __future__ import annotations

from typing import Any

import pytest

from rig.analysis.endpoint import (
    METHOD_ARRIVAL,
    METHOD_ARRIVALS,
    METHOD_RTT_HALF,
    NO_DECISION,
    apply_endpointing,
    endpoint_fields,
    loop_lateness_ns,
)
from rig.core.log import SessionLog
from rig.core.records import ServerMark
from rig.core.units import NS_PER_MS
from tests.fakes.harness import run_rollouts, tone_plan
from tests.fakes.openai_server import FakeRealtimeServer

MS = NS_PER_MS
P0 = 10_000 * MS


def _log(marks: list[ServerMark], late_at: int | None = None, late_ns: int = 0) -> SessionLog:
    send = tuple(range(0, 20_000 * MS, 20 * MS))
    late = tuple(late_ns if late_at is not None and abs(t - late_at) < 10 * MS else 0 for t in send)
    return SessionLog(0, 16_000, 320, send_ns=send, lateness_ns=late, marks=tuple(marks))


def _resp(**kw: Any) -> dict[str, Any]:
    return {"user_end_ns": P0, "onset_arrival_ns": P0 + 900 * MS, **kw}


def _rtt(p50: float, lo: float, p95: float) -> dict[str, Any]:
    return {"count": 40, "rtt_min_ms": lo, "rtt_p50_ms": p50, "rtt_p95_ms": p95}


def test_round_trips_give_detect_and_arrivals_give_generation() -> None:
    # truth: up 10 ms, decision 500 ms after arrival, down 10 ms; first audio 380 ms later
    stop = ServerMark("input_audio_buffer.speech_stopped", P0 + 520 * MS, None, 1234.0)
    f = endpoint_fields(_resp(), _log([stop]), _rtt(20.0, 19.0, 23.0))
    assert f["decision_source"] == "input_audio_buffer.speech_stopped"
    assert f["detect_ms"] == pytest.approx(500.0) and f["detect_method"] == METHOD_RTT_HALF
    assert f["detect_err_ms"] == pytest.approx(4.0)  # p95 - min of the round trips
    assert f["generation_ms"] == pytest.approx(380.0)
    assert f["generation_method"] == METHOD_ARRIVALS and f["generation_err_ms"] == 4.0
    # detect + generation + round trip = the latency up to the onset's arrival
    assert f["detect_ms"] + f["generation_ms"] + f["detect_rtt_ms"] == pytest.approx(900.0)


def test_a_model_time_from_any_split_is_cut_at_the_decision() -> None:
    stop = ServerMark("rtvi.user-stopped-speaking", P0 + 600 * MS, None)
    r = _resp(model_ms=870.0, model_err_ms=3.0, clock_method="rtt_half")
    f = endpoint_fields(r, _log([stop]), _rtt(30.0, 28.0, 31.0))
    assert f["generation_ms"] == pytest.approx(300.0)
    assert f["detect_ms"] + f["generation_ms"] == pytest.approx(870.0)
    assert f["detect_err_ms"] == pytest.approx(3.0 + 3.0)


def test_a_busy_loop_at_an_arrival_widens_the_error_bars() -> None:
    stop = ServerMark("speech_stopped", P0 + 520 * MS, None)
    calm = endpoint_fields(_resp(), _log([stop]), _rtt(20.0, 19.0, 23.0))
    busy_log = _log([stop], late_at=P0 + 520 * MS, late_ns=40 * MS)
    assert loop_lateness_ns(busy_log, P0 + 520 * MS) == 40 * MS
    busy = endpoint_fields(_resp(), busy_log, _rtt(20.0, 19.0, 23.0))
    assert busy["detect_err_ms"] == calm["detect_err_ms"] + 40.0
    assert busy["generation_err_ms"] == calm["generation_err_ms"] + 40.0


def test_without_round_trips_detect_is_an_upper_bound_and_says_so() -> None:
    stop = ServerMark("speech_stopped", P0 + 520 * MS, None)
    f = endpoint_fields(_resp(), _log([stop]), None)
    assert f["detect_ms"] == pytest.approx(520.0) and f["detect_method"] == METHOD_ARRIVAL
    assert f["detect_err_ms"] is None and "upper bound" in f["detect_reason"]
    assert f["generation_err_ms"] is None and f["generation_reason"]


def test_no_decision_event_or_no_onset_gives_reasons() -> None:
    late = ServerMark("speech_stopped", P0 + 950 * MS, None)  # after the onset: not this one
    f = endpoint_fields(_resp(), _log([late]), _rtt(20.0, 19.0, 23.0))
    assert f["detect_ms"] is None and f["detect_reason"] == NO_DECISION
    assert f["generation_ms"] is None and f["generation_reason"] == NO_DECISION
    g = endpoint_fields({"user_end_ns": P0, "reason": "no reply"}, _log([]), None)
    assert g["detect_ms"] is None and g["detect_reason"] == "no reply"


def test_apply_keeps_a_split_already_made_from_the_server_clock() -> None:
    stop = ServerMark("speech_stopped", P0 + 520 * MS, None)
    done = _resp(detect_ms=499.0, generation_ms=381.0, detect_method="envelope-two-way")
    m = apply_endpointing({"responses": [done, _resp()], "clock_fit": {"rtt": None}}, _log([stop]))
    assert m["responses"][0] == done
    assert m["responses"][1]["detect_method"] == METHOD_ARRIVAL
    assert apply_endpointing({"responses": [done]}, None) == {"responses": [done]}


# --- the OpenAI fake: speech_stopped without a server clock ---------------------------------


def _send_lateness_ms(chunks: list[dict[str, Any]], lo_ns: int, hi_ns: int) -> float:
    """The largest lateness of the uplink frames the rig sent between lo_ns and hi_ns."""
    near = [
        c.get("lateness_ns") or 0
        for c in chunks
        if c["dir"] == "up" and lo_ns <= c["t_ns"] <= hi_ns
    ]
    return max([0, *near]) / MS


RATE = 24_000


@pytest.mark.realtime
async def test_openai_fake_detect_follows_silence_duration_ms(tmp_path) -> None:
    """Two `silence_duration_ms` settings: detect_ms moves by their difference (the fake's
    VAD decides on whole 20 ms blocks of appended audio), generation stays the fake's model
    delay (150 ms) plus its response bookkeeping."""
    settings = (300, 700)
    async with FakeRealtimeServer(reply_s=0.4, model_delay_s=0.15) as srv:
        jobs = [
            (f"s{ms}", srv.url, "openai", {"silence_duration_ms": ms}, tone_plan(RATE, 2))
            for ms in settings
        ]
        out = await run_rollouts(str(tmp_path), jobs)
    detect: dict[int, list[float]] = {}
    for ms in settings:
        m = out[f"s{ms}"].metrics
        assert m["status"] == "ok", m
        rs = [r for r in m["responses"] if r.get("onset_ns") is not None]
        assert len(rs) == 2, m["responses"]
        for r in rs:
            assert r["decision_source"] == "input_audio_buffer.speech_stopped"
            assert r["detect_method"] in (METHOD_ARRIVAL, METHOD_RTT_HALF)
            assert r["generation_method"] == METHOD_ARRIVALS
            # a frame of audio arrives at once: the decision can fall up to one frame early;
            # a speech-end frame the rig sent late (a busy shared box) shortens it by as much
            # and a loop busy when the decision arrived stamps it late by as much
            ro = out[f"s{ms}"]
            late_ms = _send_lateness_ms(ro.chunks, r["user_end_ns"] - 60 * MS, r["user_end_ns"])
            (stop,) = [
                e
                for e in ro.find("server.input_audio_buffer.speech_stopped")
                if r["user_end_ns"] <= e["t_ns"] <= r["onset_arrival_ns"]
            ]
            stop_late_ms = _send_lateness_ms(
                ro.chunks, stop["t_ns"] - 60 * MS, stop["t_ns"] + 60 * MS
            )
            assert ms - 25 - late_ms <= r["detect_ms"] <= ms + 5 + stop_late_ms, (r, late_ms)
            assert 150 <= r["generation_ms"] <= 250, r
            assert r["speech_end_offset_ms"] is not None
        detect[ms] = [r["detect_ms"] for r in rs]
    shift = min(detect[700]) - max(detect[300])
    assert 400 - 60 <= shift <= 400 + 60, detect
