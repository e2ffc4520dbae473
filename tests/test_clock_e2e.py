"""Latency decomposition end to end: the rig against `rig sim` over real loopback (and, with
`netns`, through a packet-delaying relay), estimates checked against the sim's truth log.

The sim runs as its own process (its event loop does not share our GIL); the rig runs a
Session in this process so the test can read what it observed. CLOCK_MONOTONIC is shared by
both processes (and by network namespaces), so the truth log's `t_ns` and the rig's stamps
are on one clock: per response, the true arrival at the server of the user's speech end is
the `recv_chunk` time of the frame that held it, and the true server-side start is the
`emit_ns` of the onset chunk.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
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

RATE = 16_000
TOL_MS = 5.0


def _plan(turns: int) -> UserPlan:
    b = PlanBuilder(RATE).add_silence(0.3)
    for i in range(turns):
        b.add_turn(tone(300 + 50 * i, 0.5, RATE), f"t{i}").add_silence(1.2)
    return b.build()


def _start_sim(argv_prefix: list[str], truth: Path, *knobs: str) -> tuple[Any, str]:
    proc = subprocess.Popen(
        [*argv_prefix, sys.executable, "-m", "rig", "sim", "--truth-log", str(truth), *knobs],
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(Path(__file__).resolve().parents[1]),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "listening on" in line, line
    return proc, line.split()[-1]


async def _rollout(tmp_path: Path, url: str, turns: int) -> tuple[Session, dict[str, Any]]:
    clock = MonotonicClock()
    writer = RecordingWriter()
    writer.start()
    rec = writer.rollout(str(tmp_path / "r"), RATE)
    transport = WebSocketTransport(url, RawPcmDialect(RATE), clock)
    cfg = SessionConfig(drain_quiet_s=0.6, max_s=30, probe_interval_s=0.1)
    s = Session("r", transport, _plan(turns), rec, clock, cfg)
    try:
        m = await run_alone(s)
    finally:
        writer.close()
    return s, m


def _truth_per_response(s: Session, m: dict[str, Any], truth: list[dict[str, Any]]) -> list[dict]:
    """True uplink/model/downlink (ms) per matched response, on the rig's definitions."""
    recv = {t["seq"]: t["t_ns"] for t in truth if t["event"] == "recv_chunk"}
    chunks = [t for t in truth if t["event"] == "reply_chunk"]
    n = s.pacer_cfg.frame_samples
    out = []
    turns = {t.index: t for t in s.plan.turns}
    for r in m["responses"]:
        if r.get("onset_ns") is None:
            continue
        u = turns[r["turn"]].speech_end_sample
        k = (u - 1) // n
        p1 = recv[k] + (u - k * n) * NS_PER_S // RATE
        assert s.log is not None
        (heard,) = [c for c in s.log.heard if c.seq == r["onset_chunk_seq"]]
        arr_chunk, ts_ms = heard.t_ns, heard.server_ts_ms
        emit = next(c for c in chunks if abs(c["server_ts_ms"] - ts_ms) < 1e-3)
        off_ns = r["onset_arrival_ns"] - arr_chunk
        p2 = emit["emit_ns"] + off_ns
        out.append(
            {
                "uplink_ms": (p1 - r["user_end_ns"]) / 1e6,
                "model_ms": (p2 - p1) / 1e6,
                "downlink_ms": (r["onset_arrival_ns"] - p2) / 1e6,
            }
        )
    return out


def _p95_abs(errs: list[float]) -> float:
    return float(np.percentile(np.abs(errs), 95))


def _check_against_truth(m: dict[str, Any], true: list[dict]) -> dict[str, float]:
    est = [r for r in m["responses"] if r.get("onset_ns") is not None]
    assert len(est) == len(true) >= 3
    errs: dict[str, float] = {}
    for key in ("uplink_ms", "model_ms", "downlink_ms"):
        e = [r[key] - t[key] for r, t in zip(est, true, strict=True)]
        errs[key] = _p95_abs(e)
    for r in est:  # the parts add up to the latency
        total = r["uplink_ms"] + r["model_ms"] + r["downlink_ms"] + r["queue_ms"]
        assert total == pytest.approx(r["latency_ms"], abs=0.01)
    return errs


@pytest.mark.realtime
@pytest.mark.parametrize(
    ("drift_ppm", "offset_ms"),
    [(30_000.0, 12_345.0), (-40_000.0, -250.0)],
)
async def test_loopback_split_matches_truth(tmp_path: Path, drift_ppm: float, offset_ms: float):
    truth_path = tmp_path / "truth.jsonl"
    proc, url = _start_sim(
        [],
        truth_path,
        "--port", "0", "--latency-ms", "250", "--endpoint-silence-ms", "300",
        "--reply-s", "0.3", "--net-delay-ms", "25", "--net-jitter-ms", "2",
        "--clock-offset-ms", str(offset_ms), "--clock-drift-ppm", str(drift_ppm),
    )  # fmt: skip
    try:
        s, m = await _rollout(tmp_path, url, turns=4)
    finally:
        proc.terminate()
        proc.wait(10)
    assert m["status"] == "ok", m
    fit = m["clock_fit"]
    assert fit["method"] == "envelope-two-way" and fit["split"] and fit["drift_fitted"], fit
    assert fit["drift_ppm"] == pytest.approx(drift_ppm, abs=1000.0)  # 0.1 %
    errs = _check_against_truth(m, _truth_per_response(s, m, read_truth(str(truth_path))))
    print(f"p95 |error| ms {errs}, drift {fit['drift_ppm']:.1f} ppm (set {drift_ppm})")
    assert errs["model_ms"] <= TOL_MS, errs
    assert errs["uplink_ms"] <= TOL_MS, errs
    assert errs["downlink_ms"] <= TOL_MS, errs
    on_disk = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert on_disk["responses"][0]["model_err_ms"] is not None
    assert on_disk["clock_fit"]["rtt"]["count"] > 10


@pytest.mark.realtime
async def test_a_server_clock_step_mid_run_is_found_and_each_side_fitted(tmp_path: Path):
    """The sim's clock jumps 250 ms forward mid-conversation (an NTP step): the probes prove
    it, each stretch gets its own fit, and the split still matches the truth on both sides."""
    truth_path = tmp_path / "truth.jsonl"
    proc, url = _start_sim(
        [],
        truth_path,
        "--port", "0", "--latency-ms", "250", "--endpoint-silence-ms", "300",
        "--reply-s", "0.3", "--net-delay-ms", "15", "--net-jitter-ms", "1",
        "--clock-offset-ms", "777", "--clock-drift-ppm", "20000",
        "--clock-step-ms", "250", "--clock-step-at-s", "4.2",
    )  # fmt: skip
    try:
        s, m = await _rollout(tmp_path, url, turns=5)
    finally:
        proc.terminate()
        proc.wait(10)
    assert m["status"] == "ok", m
    fit = m["clock_fit"]
    (step,) = fit["steps"]
    assert step["step_ms"] == pytest.approx(250, abs=step["bound_ms"])
    assert len(fit["segments"]) == 2 and all(seg["split"] for seg in fit["segments"])
    assert fit["drift_ppm"] == pytest.approx(20_000, abs=1000.0)
    est = [r for r in m["responses"] if r.get("onset_ns") is not None]
    assert min(r["onset_ns"] for r in est) < step["local_ns"] < max(r["onset_ns"] for r in est)
    errs = _check_against_truth(m, _truth_per_response(s, m, read_truth(str(truth_path))))
    print(f"clock step: p95 |error| ms {errs}, step {step}")
    assert max(errs.values()) <= TOL_MS, errs


@pytest.mark.realtime
async def test_without_probes_the_split_is_refused_with_a_reason(tmp_path: Path) -> None:
    truth_path = tmp_path / "truth.jsonl"
    proc, url = _start_sim(
        [], truth_path, "--port", "0", "--latency-ms", "200", "--endpoint-silence-ms", "300",
        "--reply-s", "0.3", "--net-delay-ms", "10", "--clock-drift-ppm", "20000",
    )  # fmt: skip
    try:
        clock = MonotonicClock()
        writer = RecordingWriter()
        writer.start()
        rec = writer.rollout(str(tmp_path / "r"), RATE)
        transport = WebSocketTransport(url, RawPcmDialect(RATE), clock)
        cfg = SessionConfig(drain_quiet_s=0.6, max_s=30, probe_interval_s=0.0)
        m = await run_alone(Session("r", transport, _plan(2), rec, clock, cfg))
        writer.close()
    finally:
        proc.terminate()
        proc.wait(10)
    assert m["clock_fit"]["method"] == "envelope-down" and not m["clock_fit"]["split"]
    for r in m["responses"]:
        assert r["queue_ms"] is not None and r["queue_err_ms"] == 0.0
        # the server clock cannot split it (one-way samples only) and says why; the round
        # trips then do, labelled as such (docs/latency-decomposition.md). The sim's
        # --net-delay-ms lives in its application, where WebSocket pings never go: the ping
        # round trip is loopback's, and the simulated network lands in model time
        assert "one-way" in r["server_clock_reason"]
        assert r["clock_method"] == "rtt_half" and r["rtt_source"] == "ws_ping"
        assert r["rtt_ms"] < 5.0 and r["uplink_ms"] == pytest.approx(r["rtt_ms"] / 2, abs=0.01)


@pytest.mark.netns
async def test_netns_one_way_estimates_match_the_relay(tmp_path: Path) -> None:
    from tests.support import netimpair
    from tests.support.netimpair import ImpairedLink

    reason = netimpair.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    delay_ms = 25.0
    truth_path = tmp_path / "truth.jsonl"
    with ImpairedLink(up_delay_ms=delay_ms, down_delay_ms=delay_ms, jitter_ms=2, seed=7) as link:
        proc = link.popen(
            [sys.executable, "-m", "rig", "sim", "--host", link.ns_addr, "--port", "0",
             "--truth-log", str(truth_path), "--latency-ms", "250", "--endpoint-silence-ms",
             "300", "--reply-s", "0.3", "--clock-offset-ms", "-4321",
             "--clock-drift-ppm", "25000"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on" in line, line
        s, m = await _rollout(tmp_path, line.split()[-1], turns=4)
    assert m["status"] == "ok", m
    fit = m["clock_fit"]
    assert fit["split"] and fit["drift_ppm"] == pytest.approx(25_000, abs=1000.0)
    est = [r for r in m["responses"] if r.get("onset_ns") is not None]
    up = [r["uplink_ms"] - delay_ms for r in est]
    down = [r["downlink_ms"] - delay_ms for r in est]
    print(f"netns: uplink-set {up}, downlink-set {down}, fit {fit['uplink_delay_ms']}")
    assert _p95_abs(up) <= TOL_MS and _p95_abs(down) <= TOL_MS
    assert fit["uplink_delay_ms"]["p50"] == pytest.approx(delay_ms, abs=TOL_MS)
    assert fit["downlink_delay_ms"]["p50"] == pytest.approx(delay_ms, abs=TOL_MS)
    errs = _check_against_truth(m, _truth_per_response(s, m, read_truth(str(truth_path))))
    print(f"netns p95 |error| vs truth log, ms: {errs}")
    assert errs["model_ms"] <= TOL_MS, errs
