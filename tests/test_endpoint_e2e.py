"""Endpointing vs generation end to end against `rig sim` (own process, real loopback), with
the sim's endpoint silence X and model time Y as ground truth, a drifting server clock and
packet delay with jitter; then the same with the sim's clock withheld (round trips only).

Truth per response from the sim's log, on the shared monotonic clock: the decision is the
`speech_end` record, the user's speech end as it reached the sim is the `recv_chunk` of the
frame holding it (plus its offset), the first reply audio leaving is the onset chunk's
`emit_ns`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rig.audio.source import tone
from rig.clock.base import MonotonicClock
from rig.core.plan import PlanBuilder, UserPlan
from rig.core.units import NS_PER_S
from rig.dialects.rawpcm import RawPcmDialect
from rig.recordings.writer import RecordingWriter
from rig.runs.metricsfile import run_alone
from rig.session import Session, SessionConfig
from rig.sim.truth import read_truth
from rig.transports.websocket import WebSocketTransport
from tests.test_clock_e2e import _start_sim

RATE = 16_000


def _plan(turns: int, gap_s: float) -> UserPlan:
    b = PlanBuilder(RATE).add_silence(0.3)
    for i in range(turns):
        b.add_turn(tone(300 + 50 * i, 0.4, RATE), f"t{i}").add_silence(gap_s)
    return b.build()


async def _run(tmp_path: Path, x_ms: int, y_ms: int, *knobs: str) -> tuple[Session, dict, list]:
    truth_path = tmp_path / "truth.jsonl"
    proc, url = _start_sim(
        [], truth_path, "--port", "0", "--endpoint-silence-ms", str(x_ms),
        "--latency-ms", str(y_ms), "--reply-s", "0.2", "--clock-drift-ppm", "20000",
        "--clock-offset-ms", "-3210", "--net-delay-ms", "8", "--net-jitter-ms", "1", *knobs,
    )  # fmt: skip
    try:
        clock = MonotonicClock()
        writer = RecordingWriter()
        writer.start()
        rec = writer.rollout(str(tmp_path / "r"), RATE)
        transport = WebSocketTransport(url, RawPcmDialect(RATE), clock)
        cfg = SessionConfig(drain_quiet_s=0.5, max_s=30, probe_interval_s=0.1)
        gap_s = (x_ms + y_ms) / 1000 + 0.6
        s = Session("r", transport, _plan(3, gap_s), rec, clock, cfg)
        try:
            m = await run_alone(s)
        finally:
            writer.close()
    finally:
        proc.terminate()
        proc.wait(10)
    assert m["status"] == "ok", m
    return s, m, read_truth(str(truth_path))


def _truth(s: Session, m: dict[str, Any], truth: list[dict[str, Any]]) -> list[dict[str, float]]:
    """True detect/generation (ms) per matched response."""
    recv = {t["seq"]: t["t_ns"] for t in truth if t["event"] == "recv_chunk"}
    ends = [t["t_ns"] for t in truth if t["event"] == "speech_end"]
    emits = [t for t in truth if t["event"] == "reply_chunk" and t["loud"]]
    n = s.pacer_cfg.frame_samples
    turns = {t.index: t for t in s.plan.turns}
    out = []
    for r in m["responses"]:
        if r.get("onset_ns") is None:
            continue
        u = turns[r["turn"]].speech_end_sample
        k = (u - 1) // n
        p1 = recv[k] + (u - k * n) * NS_PER_S // RATE
        dec = next(t for t in ends if t >= p1)
        emit = next(e["emit_ns"] for e in emits if e["emit_ns"] >= dec)
        late_ms = s.log.lateness_ns[k] / 1e6 if s.log and k < len(s.log.lateness_ns) else 0.0
        out.append(
            {"detect_ms": (dec - p1) / 1e6, "generation_ms": (emit - dec) / 1e6, "late_ms": late_ms}
        )
    return out


def _matched(m: dict[str, Any]) -> list[dict[str, Any]]:
    est = [r for r in m["responses"] if r.get("onset_ns") is not None]
    assert len(est) == 3, m["responses"]
    return est


@pytest.mark.realtime
@pytest.mark.parametrize(("x_ms", "y_ms"), [(200, 800), (1000, 100), (500, 350)])
async def test_sim_grid_detect_and_generation_match_the_knobs(
    tmp_path: Path, x_ms: int, y_ms: int
) -> None:
    s, m, truth = await _run(tmp_path, x_ms, y_ms)
    frame_ms = s.pacer_cfg.frame_samples * 1000 / RATE
    for r, t in zip(_matched(m), _truth(s, m, truth), strict=True):
        assert r["detect_method"] == r["generation_method"] == "envelope-two-way", r
        assert r["decision_source"] == "speech_stopped"
        # the sim decides on whole frames, X after the last loud sample it received; a frame
        # the rig sent late (a stalled loop on a shared box) shortens the wait it saw by that
        assert abs(r["detect_ms"] - x_ms) <= frame_ms + 2 + t["late_ms"], (r, t, x_ms)
        assert abs(r["generation_ms"] - y_ms) <= 2, (r, y_ms)
        # the truth's own stamp is late by the sim's recorded lateness at its decision
        assert abs(r["detect_ms"] - t["detect_ms"]) <= r["detect_err_ms"] + 0.5 + t["late_ms"], (
            r,
            t,
        )
        assert abs(r["generation_ms"] - t["generation_ms"]) <= r["generation_err_ms"] + 0.5
        # the parts add up to the latency; detect + generation is the model time
        parts = ("uplink_ms", "detect_ms", "generation_ms", "downlink_ms", "queue_ms")
        assert sum(r[p] for p in parts) == pytest.approx(r["latency_ms"], abs=0.01)
        assert r["detect_ms"] + r["generation_ms"] == pytest.approx(r["model_ms"], abs=0.01)
        assert r["speech_end_offset_ms"] is not None


@pytest.mark.realtime
@pytest.mark.parametrize(("x_ms", "y_ms"), [(300, 600), (800, 200)])
async def test_sim_without_a_server_clock_is_within_the_error_bars(
    tmp_path: Path, x_ms: int, y_ms: int
) -> None:
    s, m, truth = await _run(tmp_path, x_ms, y_ms, "--withhold-stamps")
    assert m["clock_fit"]["source"] == "none"
    rtt = m["clock_fit"]["rtt"]
    assert rtt["source"] == "probe_echo" and rtt["count"] > 10, rtt
    for r, t in zip(_matched(m), _truth(s, m, truth), strict=True):
        assert r["generation_method"] == "arrivals", r
        assert r["detect_method"] in ("rtt_half", r.get("clock_method")), r
        # the loop stamps both arrivals: allow its scheduling on a shared box (0.5 ms)
        # the truth's own stamp is late by the sim's recorded lateness at its decision
        assert abs(r["detect_ms"] - t["detect_ms"]) <= r["detect_err_ms"] + 0.5 + t["late_ms"], (
            r,
            t,
        )
        assert abs(r["generation_ms"] - t["generation_ms"]) <= r["generation_err_ms"] + 0.5
        assert abs(r["generation_ms"] - y_ms) <= r["generation_err_ms"] + 2
        # detect + generation + the round trip + queue = the latency
        rtt_ms = r.get("detect_rtt_ms", rtt["rtt_p50_ms"])
        total = r["detect_ms"] + r["generation_ms"] + rtt_ms + r["queue_ms"]
        assert total == pytest.approx(r["latency_ms"], abs=0.01)
