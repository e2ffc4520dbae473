import dataclasses
import json

import pytest

from rig.core.records import ChunkRecord, EventRecord


def test_chunk_record_contract_fields() -> None:
    up = ChunkRecord("up", 3, 320, 16000, 1_000, 900, 100, level_dbfs=-20.0)
    d = up.to_json()
    for key in ("dir", "seq", "n_samples", "sample_rate", "t_ns", "t_sched_ns", "server_ts_ms"):
        assert key in d
    assert d["lateness_ns"] == 100
    down = ChunkRecord("down", 0, 960, 24000, 5, server_ts_ms=12.5, extra={"rtp_ts": 7})
    d = down.to_json()
    assert d["t_sched_ns"] is None and d["server_ts_ms"] == 12.5 and d["rtp_ts"] == 7
    json.dumps(d)


def test_records_are_frozen() -> None:
    e = EventRecord("stall", 1, {"seq": 2})
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.kind = "x"  # type: ignore[misc]
    assert e.to_json() == {"kind": "stall", "t_ns": 1, "source": "rig", "seq": 2}


def test_an_uplink_chunk_level_is_computed_by_whoever_writes_it() -> None:
    """The session leaves an uplink frame's level to the writer thread (`pcm`, no
    `level_dbfs`): the JSON line (both encoders) and the live view carry the same level."""
    import numpy as np

    from rig.audio.pcm import level_dbfs
    from rig.recordings.lines import chunk_line
    from rig.recordings.sink import _chunk_view

    pcm = (np.sin(np.arange(320) / 5) * 8000).astype(np.int16)
    up = ChunkRecord("up", 3, 320, 16000, 10, 9, 1, pcm=pcm)
    want = level_dbfs(pcm)
    assert up.level == want and up.to_json()["level_dbfs"] == want
    assert chunk_line(up) == json.dumps(up.to_json(), separators=(",", ":")) + "\n"
    assert _chunk_view(up).level_dbfs == want
    assert up == ChunkRecord("up", 3, 320, 16000, 10, 9, 1, pcm=pcm.copy())  # not compared
    assert ChunkRecord("up", 3, 320, 16000, 10, 9, 1, level_dbfs=-3.0, pcm=pcm).level == -3.0
