"""Latency decomposition on synthetic session logs with a known truth (no clock, no I/O)."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rig.analysis.latency import apply_decomposition, decompose, fit_clock
from rig.core.events import DownAudio, DownEvent
from rig.core.listener import Listener
from rig.core.log import SessionLog
from rig.core.records import HeardChunk, Probe, ServerMark

MS = 1_000_000
S = 1_000_000_000
RATE = 16_000
FRAME = 320  # 20 ms


@dataclass
class World:
    """A server clock and a path with known delays; builds what the rig would have seen."""

    offset_ns: int
    drift_ppm: float
    up_ns: int
    down_ns: int
    jitter_ns: int
    seed: int = 0
    epoch_ns: int = 5 * S

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def peer(self, t_ns: int) -> int:
        return (
            self.epoch_ns
            + self.offset_ns
            + round((t_ns - self.epoch_ns) * (1 + self.drift_ppm / 1e6))
        )

    def up(self) -> int:
        return self.up_ns + self.rng.randrange(0, self.jitter_ns + 1)

    def down(self) -> int:
        return self.down_ns + self.rng.randrange(0, self.jitter_ns + 1)

    def probes(self, t_start: int, n: int, every_ns: int) -> list[Probe]:
        out = []
        self.probe_up: list[tuple[int, int]] = []  # (t0, true uplink delay)
        for k in range(n):
            t0 = t_start + k * every_ns
            up = self.up()
            self.probe_up.append((t0, up))
            t_srv = t0 + up
            hold = 200_000
            out.append(
                Probe(t0, self.peer(t_srv), self.peer(t_srv + hold), t_srv + hold + self.down())
            )
        return out


def _send_log(t0_ns: int, frames: int, late_ns: int = 300_000) -> tuple[int, ...]:
    return tuple(t0_ns + k * 20 * MS + (k * 7919) % late_ns for k in range(frames))


def _scenario(
    w: World, *, model_ns: int = 400 * MS, queue_ns: int = 3 * MS, turns: int = 4
) -> tuple[SessionLog, list[dict[str, Any]], list[dict[str, float]]]:
    """Turns every 2 s; returns the session log, match_responses-style entries, the truth."""
    t0 = 6 * S
    send = _send_log(t0, 500)
    probes = w.probes(t0, 100, 100 * MS)
    marks: list[ServerMark] = []
    pairs: list[tuple[int, int]] = []
    heard: list[HeardChunk] = []
    responses, truth = [], []
    for i in range(turns):
        end_sample = (i * 100 + 40) * FRAME + 123  # inside frame i*100+40
        p0 = sent_ns_of_sample_raw(send, t0, end_sample)
        # the speech-end frame saw what the probe sent nearest it saw: a draw from the path
        up = min(w.probe_up, key=lambda tp: abs(tp[0] - p0))[1]
        p1 = p0 + up
        detect = p1 + 300 * MS
        stop_arr = detect + w.down()
        marks.append(
            ServerMark("speech_stopped", stop_arr, w.peer(detect), end_sample * 1000 / RATE)
        )
        pairs.append((w.peer(detect), stop_arr))
        p2 = p1 + model_ns
        down = w.down()
        p3 = p2 + down
        pairs.append((w.peer(p2), p3))
        p4 = p3 + queue_ns
        heard.append(HeardChunk(i, p3, p4, w.peer(p2) / MS, 640, RATE))
        responses.append(
            {
                "turn": i,
                "user_end_ns": p0,
                "onset_ns": p4,
                "onset_arrival_ns": p3,
                "onset_server_ts_ms": w.peer(p2) / MS,
                "onset_chunk_seq": i,
                "latency_ms": round((p4 - p0) / MS, 3),
            }
        )
        truth.append(
            {
                "uplink_ms": up / MS,
                "model_ms": model_ns / MS,
                "downlink_ms": down / MS,
                "queue_ms": queue_ns / MS,
                "detect_ms": 300.0,
            }
        )
    obs = SessionLog(
        t0_ns=t0,
        sample_rate=RATE,
        frame_samples=FRAME,
        send_ns=send,
        probes=tuple(probes),
        marks=tuple(marks),
        down_pairs=tuple(pairs),
        heard=tuple(heard),
    )
    return obs, responses, truth


def sent_ns_of_sample_raw(send: tuple[int, ...], t0: int, sample: int) -> int:
    k = (sample - 1) // FRAME
    return send[k] + (sample - k * FRAME) * S // RATE


def test_symmetric_path_recovers_every_part() -> None:
    w = World(offset_ns=-7_654 * MS, drift_ppm=35_000, up_ns=30 * MS, down_ns=30 * MS,
              jitter_ns=0)  # fmt: skip
    obs, responses, truth = _scenario(w)
    clock = fit_clock(obs)
    assert clock.fit.method == "envelope-two-way"
    assert clock.as_dict()["drift_ppm"] == pytest.approx(35_000, abs=1)
    for r, t in zip(responses, truth, strict=True):
        d = decompose(r, obs, clock)
        for key in ("uplink_ms", "model_ms", "downlink_ms", "queue_ms", "detect_ms"):
            assert d[key] == pytest.approx(t[key], abs=0.01), key
        assert d["server_start_source"] == "onset_chunk"
        assert d["speech_end_offset_ms"] == pytest.approx(0.0, abs=0.07)  # same sample, rounded ms
        # endpointing vs generation: cut at the mapped decision, adding up to model time
        assert d["generation_ms"] == pytest.approx(t["model_ms"] - 300.0, abs=0.01)
        assert d["detect_method"] == d["generation_method"] == "envelope-two-way"
        assert d["detect_ms"] + d["generation_ms"] == pytest.approx(d["model_ms"], abs=0.002)
        assert d["detect_err_ms"] is not None and d["generation_err_ms"] is not None
        total = d["uplink_ms"] + d["model_ms"] + d["downlink_ms"] + d["queue_ms"]
        assert total == pytest.approx(r["latency_ms"], abs=0.005)


def test_asymmetry_moves_the_network_split_within_its_bound_but_not_model_time() -> None:
    w = World(offset_ns=3 * S, drift_ppm=-20_000, up_ns=10 * MS, down_ns=50 * MS, jitter_ns=0)
    obs, responses, truth = _scenario(w)
    clock = fit_clock(obs)
    for r, t in zip(responses, truth, strict=True):
        d = decompose(r, obs, clock)
        # the two-way midpoint is off by half the asymmetry: (50 - 10) / 2 = 20 ms
        assert d["uplink_ms"] == pytest.approx(t["uplink_ms"] + 20, abs=0.05)
        assert d["downlink_ms"] == pytest.approx(t["downlink_ms"] - 20, abs=0.05)
        assert abs(d["uplink_ms"] - t["uplink_ms"]) <= d["uplink_err_ms"] + 0.01
        assert abs(d["downlink_ms"] - t["downlink_ms"]) <= d["downlink_err_ms"] + 0.01
        # the offset cancels out of model time
        assert d["model_ms"] == pytest.approx(t["model_ms"], abs=0.05)


@settings(max_examples=40, deadline=None)
@given(
    offset_ms=st.floats(-3.6e6, 3.6e6),
    drift_ppm=st.floats(-60_000, 60_000),
    up_ms=st.floats(0, 80),
    down_ms=st.floats(0, 80),
    jitter_ms=st.floats(0, 10),
    seed=st.integers(0, 2**16),
)
def test_truth_lies_within_the_reported_error(
    offset_ms: float, drift_ppm: float, up_ms: float, down_ms: float, jitter_ms: float, seed: int
) -> None:
    w = World(round(offset_ms * MS), drift_ppm, round(up_ms * MS), round(down_ms * MS),
              round(jitter_ms * MS), seed)  # fmt: skip
    obs, responses, truth = _scenario(w)
    clock = fit_clock(obs)
    for r, t in zip(responses, truth, strict=True):
        d = decompose(r, obs, clock)
        for name in ("uplink", "model", "downlink"):
            err = abs(d[f"{name}_ms"] - t[f"{name}_ms"])
            # the frame's uplink delay is one the probes near it saw, so within their range;
            # ms rounding of the output adds up to 1 us
            assert err <= d[f"{name}_err_ms"] + 0.002, (name, d, t)


def test_no_probes_gives_a_one_way_fit_and_reasons() -> None:
    w = World(offset_ns=0, drift_ppm=1000, up_ns=20 * MS, down_ns=20 * MS, jitter_ns=MS)
    obs, responses, _ = _scenario(w)
    obs = replace(obs, probes=())
    clock = fit_clock(obs)
    assert clock.source == "server_ts" and clock.fit.method == "envelope-down"
    d = decompose(responses[0], obs, clock)
    assert d["queue_ms"] == pytest.approx(3.0) and d["queue_err_ms"] == 0.0
    for name in ("uplink", "model", "downlink"):
        assert d[f"{name}_ms"] is None and d[f"{name}_err_ms"] is None
        assert "one-way" in d[f"{name}_reason"]
    assert clock.as_dict()["uplink_delay_ms"] is None


def test_no_server_clock_at_all_still_maps_audio_end_through_the_send_log() -> None:
    w = World(offset_ns=0, drift_ppm=0, up_ns=20 * MS, down_ns=20 * MS, jitter_ns=0)
    obs, responses, _ = _scenario(w)
    # OpenAI style: no probes, no server stamps; speech_stopped says the end is 37 ms later
    r = {**responses[1], "onset_server_ts_ms": None}
    end_sample = (100 + 40) * FRAME + 123 + 37 * RATE // 1000
    stop = ServerMark("input_audio_buffer.speech_stopped", r["user_end_ns"] + 300 * MS, None,
                      end_sample * 1000 / RATE)  # fmt: skip
    obs = replace(obs, probes=(), down_pairs=(), marks=(stop,))
    clock = fit_clock(obs)
    assert clock.fit.as_dict()["refused"] and clock.source == "none"
    d = decompose(r, obs, clock)
    assert d["speech_end_offset_ms"] == pytest.approx(37.0, abs=0.07)
    assert d["model_ms"] is None and d["model_reason"]
    assert "detect_ms" not in d


def test_response_start_event_stands_in_for_an_unstamped_onset_chunk() -> None:
    w = World(offset_ns=MS, drift_ppm=0, up_ns=15 * MS, down_ns=15 * MS, jitter_ns=0)
    obs, responses, truth = _scenario(w)
    r = {**responses[0], "onset_server_ts_ms": None}
    lead_ns = 60 * MS  # the onset chunk left the server 60 ms after response.start
    start_srv = round(r["onset_arrival_ns"] - 15 * MS - lead_ns)
    mark = ServerMark("response.start", start_srv + 15 * MS, w.peer(start_srv))
    obs = replace(obs, marks=(*obs.marks, mark))
    d = decompose(r, obs, fit_clock(obs))
    assert d["server_start_source"] == "response.start"
    assert d["model_ms"] == pytest.approx(truth[0]["model_ms"] - 60, abs=0.05)
    assert d["downlink_ms"] == pytest.approx(truth[0]["downlink_ms"] + 60, abs=0.05)


def test_unmatched_response_gets_nulls_with_its_reason() -> None:
    w = World(offset_ns=0, drift_ppm=0, up_ns=MS, down_ns=MS, jitter_ns=0)
    obs, _, _ = _scenario(w)
    r = {"turn": 0, "user_end_ns": 7 * S, "onset_ns": None, "latency_ms": None,
         "reason": "no system speech after this turn"}  # fmt: skip
    d = decompose(r, obs, fit_clock(obs))
    for name in ("uplink", "model", "downlink", "queue"):
        assert d[f"{name}_ms"] is None
        assert d[f"{name}_reason"] == "no system speech after this turn"


def test_too_few_probes_for_drift_is_a_refusal_not_a_guess() -> None:
    w = World(offset_ns=0, drift_ppm=50_000, up_ns=5 * MS, down_ns=5 * MS, jitter_ns=0)
    obs, responses, _ = _scenario(w)
    obs = replace(obs, probes=obs.probes[:3])
    d = decompose(responses[0], obs, fit_clock(obs))
    assert d["model_ms"] is None and "drift" in d["model_reason"]


def test_sample_positions_map_through_the_actual_send_times() -> None:
    send = (1000 * MS, 1025 * MS, 1041 * MS)  # frame 1 went out 5 ms late
    obs = SessionLog(t0_ns=1000 * MS, sample_rate=RATE, frame_samples=FRAME, send_ns=send)
    assert obs.sent_ns_of_sample(FRAME + 160) == 1025 * MS + 10 * MS
    assert obs.sent_ns_of_sample(2 * FRAME) == 1025 * MS + 20 * MS  # end-exclusive
    assert obs.sent_ns_of_sample(0) == 1000 * MS
    assert obs.sent_ns_of_sample(10 * FRAME) == 1000 * MS + 200 * MS  # never sent: timeline


def test_the_listeners_log_feeds_the_split() -> None:
    """What the listener heard (probe replies, stamped events, stamped audio) is what the
    split reads: the same answer as the synthetic log."""
    w = World(offset_ns=-2 * S, drift_ppm=10_000, up_ns=12 * MS, down_ns=12 * MS, jitter_ns=0)
    obs, responses, truth = _scenario(w)
    listener = Listener(obs.t0_ns)
    for k, p in enumerate(obs.probes):
        data = {
            "id": k,
            "t0_ns": p.t0_ns,
            "t1_server_ns": p.t1_peer_ns,
            "t2_server_ns": p.t2_peer_ns,
        }
        listener.on_event(DownEvent("probe_reply", p.t3_ns, data))
    listener.on_event(DownEvent("probe_reply", 0, {"id": "bad"}))  # malformed: no exchange
    for m in obs.marks:
        assert m.server_ns is not None
        stamp_ms = m.server_ns / MS
        listener.on_event(DownEvent(m.kind, m.t_ns, {"audio_end_ms": m.audio_end_ms}, stamp_ms))
    for c in obs.heard:
        pcm = np.zeros(c.n_samples, np.int16)
        listener.on_audio(DownAudio(pcm, c.sample_rate, c.t_ns, c.server_ts_ms))
    log = SessionLog(
        t0_ns=obs.t0_ns,
        sample_rate=RATE,
        frame_samples=FRAME,
        send_ns=obs.send_ns,
        probes=tuple(listener.probes),
        marks=tuple(listener.marks),
        down_pairs=tuple(listener.down_pairs),
    )
    assert len(log.probes) == len(obs.probes)
    assert sorted(log.down_pairs) == sorted(obs.down_pairs)
    out = apply_decomposition({"responses": responses}, log)
    fit = out["clock_fit"]
    assert fit["method"] == "envelope-two-way" and fit["rtt"]["count"] == len(obs.probes)
    assert fit["uplink_delay_ms"]["p50"] == pytest.approx(12, abs=0.01)
    for r, t in zip(out["responses"], truth, strict=True):
        assert r["model_ms"] == pytest.approx(t["model_ms"], abs=0.01)
        assert r["latency_ms"] is not None
