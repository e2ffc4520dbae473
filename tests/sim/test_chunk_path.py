"""The sim's per-chunk wire path after its shortcuts: a frame's timestamp is checked as
before (the error message built only for a bad one), and a truth line is the JSON it was."""

import json
import math

import numpy as np
import pytest

from rig.errors import ProtocolError
from rig.protocol import rawpcm
from rig.sim.truth import TruthLog, read_truth

PCM = np.arange(-160, 160, dtype=np.int16) * 100


@pytest.mark.parametrize("ts", [0.0, -5.5, 1e15, -1e15, 123456.789])
def test_a_good_stamp_comes_through(ts: float) -> None:
    f = rawpcm.decode_audio(rawpcm.encode_audio(PCM, 7, ts), "rig1")
    assert f.ts_ms == ts and type(f.ts_ms) is float and f.seq == 7
    assert np.array_equal(f.pcm, PCM)


def test_no_stamp_is_none() -> None:
    assert rawpcm.decode_audio(rawpcm.encode_audio(PCM, 1, None), "rig1").ts_ms is None


@pytest.mark.parametrize("ts", [math.inf, -math.inf, 1.0000001e15, -2e300])
def test_a_bad_stamp_is_refused_with_the_frame_named(ts: float) -> None:
    with pytest.raises(ProtocolError, match="audio frame 9: timestamp"):
        rawpcm.decode_audio(rawpcm.encode_audio(PCM, 9, ts), "rig1")


def test_truth_lines_are_the_json_they_were(tmp_path) -> None:
    rec = {"conn": 3, "seq": 12, "client_ts_ms": 1.5, "server_ts_ms": None, "x": "é\n"}
    log = TruthLog(str(tmp_path / "t.jsonl"))
    assert log.enabled and not TruthLog(None).enabled
    log.write("recv_chunk", 99, **rec)
    log.close()
    line = (tmp_path / "t.jsonl").read_text(encoding="utf-8")
    want = {"event": "recv_chunk", "t_ns": 99, **rec}
    assert line == json.dumps(want, separators=(",", ":")) + "\n"
    assert read_truth(str(tmp_path / "t.jsonl")) == [want]
