"""chunks.jsonl fast lines are byte for byte what json.dumps of the record's dict gives."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from rig.core.records import ChunkRecord
from rig.recordings.jsonwrite import _json_line
from rig.recordings.lines import chunk_line

ints = st.integers(min_value=-(2**70), max_value=2**70)
floats = st.floats(allow_nan=False, allow_infinity=False)


@given(
    direction=st.sampled_from(["up", "down"]),
    seq=ints,
    n=ints,
    rate=ints,
    t_ns=ints,
    t_sched=st.none() | ints,
    late=st.none() | ints,
    server=st.none() | floats | ints,
    play=st.none() | ints,
    level=st.none() | floats,
    extra=st.none()
    | st.dictionaries(
        st.sampled_from(["pts", "rtp_ts", "pkt_arrival_ns", "jb_ms", "x_1", "ok"]),
        st.none() | st.booleans() | ints | floats,
        max_size=4,
    ),
)
def test_fast_line_equals_json_dumps(
    direction: str,
    seq: int,
    n: int,
    rate: int,
    t_ns: int,
    t_sched: int | None,
    late: int | None,
    server: float | None,
    play: int | None,
    level: float | None,
    extra: dict[str, object] | None,
) -> None:
    rec = ChunkRecord(direction, seq, n, rate, t_ns, t_sched, late, server, play, level, extra)  # type: ignore[arg-type]
    line = chunk_line(rec)
    assert line == json.dumps(rec.to_json(), separators=(",", ":"), allow_nan=False) + "\n"
    assert line == _json_line(rec.to_json())


def test_anything_unusual_takes_the_general_path() -> None:
    base = dict(dir="up", seq=1, n_samples=320, sample_rate=16000, t_ns=5)
    odd = [
        ChunkRecord(**base, level_dbfs=float("nan")),  # type: ignore[arg-type]
        ChunkRecord(**base, server_ts_ms=float("inf")),  # type: ignore[arg-type]
        ChunkRecord(**base, play_ns=np.int64(7)),  # type: ignore[arg-type]
        ChunkRecord(**base, extra={"jb_ms": float("nan")}),  # type: ignore[arg-type]
        ChunkRecord(**base, extra={"note": "a string"}),  # type: ignore[arg-type]
        ChunkRecord(**base, extra={"t_ns": 9}),  # type: ignore[arg-type]  (replaces in place)
        ChunkRecord(**base, extra={"bad key": 1}),  # type: ignore[arg-type]
        ChunkRecord(**base, extra={"é": 1}),  # type: ignore[arg-type]
        ChunkRecord(**{**base, "seq": True}),  # type: ignore[arg-type]
        ChunkRecord(**{**base, "t_ns": 10**5000}),  # type: ignore[arg-type]
    ]
    for rec in odd:
        assert chunk_line(rec) is None
        # and the general path still writes the row (bad values as null, named)
        assert json.loads(_json_line(rec.to_json()))["seq"] in (1, True)
