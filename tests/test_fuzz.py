"""Fuzzing in the suite (issue #15): every decoder and every file reader, a few hundred
hypothesis examples each, may only return usable data or raise its documented error.

Two generators: seeds mutated by a hypothesis-drawn `Random` (byte flips, truncation,
hostile JSON tokens spliced in: NaN, 1e400, 5000-digit ints, deep nesting, markup), and
JSON documents built by hypothesis (any nesting, huge ints, NaN/inf floats) wrapped in each
protocol's envelope. `bench/fuzz.py` runs the same targets 10^4+ times each.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.fuzzing import (
    Target,
    all_targets,
    decoder_targets,
    random_input,
    run_one,
    webrtc_targets,
)

TARGETS = all_targets()
FUZZ = settings(
    max_examples=250,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_mutated_inputs_raise_only_documented_errors(target: Target) -> None:
    @FUZZ
    @given(st.randoms(use_true_random=False))
    def one(rng: Any) -> None:
        data = random_input(rng, target.seeds)
        bad = run_one(target, data)
        assert bad is None, f"{target.name}: {bad} on {data[:300]!r}"

    one()


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=30,
)
ENVELOPES = [
    lambda v: {"type": "ready", "sample_rate": v},
    lambda v: {"type": "speech_started", "server_ts_ms": v, "audio_start_ms": v},
    lambda v: {"type": "probe_reply", "id": 1, "t0_ns": v, "t1_server_ns": v, "t2_server_ns": v},
    lambda v: {"type": "response.output_audio.delta", "item_id": v, "delta": v},
    lambda v: {"type": "input_audio_buffer.speech_started", "audio_start_ms": v},
    lambda v: {"type": "ping", "timestamp": v},
    lambda v: {"serverContent": {"modelTurn": {"parts": [{"inlineData": v}]}}},
    lambda v: {"serverContent": v, "setupComplete": v},
    lambda v: {"v": 1, "kind": "chunk_batch", "run": "r", "rollout": "x", "t_ns": 1, "data": v},
    lambda v: {"v": 1, "kind": "status", "run": v, "rollout": "x", "t_ns": 1, "data": {"a": v}},
    lambda v: {"v": 1, "id": 0, "t0_ns": 5, "t1_ns": v, "t2_ns": v},
    lambda v: v,
]
JSON_TARGETS = [t for t in decoder_targets() if t.name not in ("rig:decode_audio",)]
JSON_TARGETS += [t for t in webrtc_targets() if t.name != "file:calibration_store"]


@pytest.mark.parametrize("target", JSON_TARGETS, ids=[t.name for t in JSON_TARGETS])
def test_generated_json_documents_raise_only_documented_errors(target: Target) -> None:
    @FUZZ
    @given(st.sampled_from(range(len(ENVELOPES))), json_values, st.booleans())
    def one(envelope: int, value: Any, as_bytes: bool) -> None:
        text = json.dumps(ENVELOPES[envelope](value), allow_nan=True)
        data: str | bytes = text.encode() if as_bytes else text
        if target.name == "dialect:pipecat":
            from tests.support.fuzzing import message_frame_raw

            data = message_frame_raw(text)
        bad = run_one(target, data)
        assert bad is None, f"{target.name}: {bad} on {text[:300]!r}"

    one()
