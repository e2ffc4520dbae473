"""The rig's own share of a WebRTC onset (rig.analysis.webrtc) and the codec's onset error in
the times that end at that onset: model (rtt_half split) and generation (endpointing)."""

from __future__ import annotations

from typing import Any

import pytest

from rig.analysis.endpoint import endpoint_fields
from rig.analysis.netsplit import rtt_split
from rig.analysis.webrtc import OPUS_LOOKAHEAD_MS, OPUS_ONSET_LEAD_MS, receive_path
from rig.core.log import SessionLog
from rig.core.records import HeardChunk, RttSample, ServerMark
from rig.core.units import NS_PER_MS

MS = NS_PER_MS
P0 = 10_000 * MS
ONSET = P0 + 700 * MS


def _log(jb_ms: float | None, marks: tuple[ServerMark, ...] = ()) -> SessionLog:
    # the onset frame: released 80 ms after its packet arrived (WebRTC) or no jitter buffer
    heard = (HeardChunk(0, ONSET - 5 * MS, ONSET - 5 * MS, None, 960, 48_000, jb_ms),)
    rtt = tuple(RttSample(P0 + k * 500 * MS, 50 * MS, "rtcp") for k in range(-3, 4))
    return SessionLog(0, 48_000, 960, heard=heard, rtt=rtt, marks=marks)


def _resp() -> dict[str, Any]:
    return {"user_end_ns": P0, "onset_arrival_ns": ONSET, "onset_ns": ONSET + 10 * MS}


def test_a_webrtc_onset_has_a_receive_path_and_a_codec_error_other_audio_has_neither() -> None:
    path = receive_path(_resp(), _log(80.0))
    assert path.delay_ns == round((80.0 + OPUS_LOOKAHEAD_MS) * MS)
    assert path.onset_err_ns == round(OPUS_ONSET_LEAD_MS * MS)
    assert tuple(receive_path(_resp(), _log(None))) == (0, 0)
    assert tuple(receive_path({"user_end_ns": P0}, _log(80.0))) == (0, 0)


def test_model_time_at_a_webrtc_onset_carries_the_codec_lead_in_its_error() -> None:
    plain, webrtc = rtt_split(_resp(), _log(None)), rtt_split(_resp(), _log(80.0))
    assert plain is not None and webrtc is not None
    assert "codec_onset_err_ms" not in plain
    assert webrtc["codec_onset_err_ms"] == OPUS_ONSET_LEAD_MS
    assert webrtc["model_err_ms"] == pytest.approx(plain["model_err_ms"] + OPUS_ONSET_LEAD_MS)
    # the receive path moved out of model time into the queue; the parts still add up
    local = 80.0 + OPUS_LOOKAHEAD_MS
    assert webrtc["model_ms"] == pytest.approx(plain["model_ms"] - local, abs=0.002)
    assert webrtc["queue_ms"] == pytest.approx(plain["queue_ms"] + local, abs=0.002)


def test_generation_at_a_webrtc_onset_carries_it_too_detect_only_through_model() -> None:
    stop = (ServerMark("speech_stopped", P0 + 300 * MS, None),)
    rtt = {"count": 7, "rtt_min_ms": 50.0, "rtt_p50_ms": 50.0, "rtt_p95_ms": 51.0}
    plain = endpoint_fields(_resp(), _log(None, stop), rtt)
    webrtc = endpoint_fields(_resp(), _log(80.0, stop), rtt)
    assert webrtc["generation_err_ms"] == pytest.approx(
        plain["generation_err_ms"] + OPUS_ONSET_LEAD_MS
    )
    # detect = model - generation: the onset's lead cancels there, so it is not added again
    with_model = {**_resp(), "model_ms": 600.0, "model_err_ms": 8.0, "clock_method": "rtt_half"}
    a = endpoint_fields(with_model, _log(None, stop), rtt)
    b = endpoint_fields(with_model, _log(80.0, stop), rtt)
    assert a["detect_err_ms"] == b["detect_err_ms"]
