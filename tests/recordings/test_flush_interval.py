"""The writer's flush interval: records reach the disk within `flush_every_s`, and a barrier
(what `written()` awaits before analysis reads a rollout's files) sees everything queued
before it on disk, not only in the writer's buffers."""

from __future__ import annotations

import json
import os
import threading
import time

import numpy as np

from rig.core.records import ChunkRecord
from rig.recordings.wav import read_wav
from rig.recordings.writer import RecordingWriter


def _chunk(seq: int) -> ChunkRecord:
    return ChunkRecord("up", seq, 320, 16000, 1_000 + seq, 1_000 + seq, 0, level_dbfs=-20.0)


def _lines(path: str) -> list[dict[str, object]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_a_barrier_sees_every_record_before_it_on_disk(tmp_path) -> None:
    # a long interval: only the barrier can have written them
    w = RecordingWriter(flush_every_s=60.0)
    w.start()
    d = str(tmp_path / "r0")
    rec = w.rollout(d, 16000)
    pcm = np.arange(320, dtype=np.int16)
    for seq in range(30):
        rec.gather()
        rec.user_audio(pcm)
        rec.chunk(_chunk(seq))
        rec.hand_off()
    seen: dict[str, object] = {}
    done = threading.Event()

    def look() -> None:  # in the writer thread, as the barrier runs
        seen["lines"] = len(_lines(os.path.join(d, "chunks.jsonl")))
        seen["samples"] = len(read_wav(os.path.join(d, "user.wav"))[0])
        done.set()

    w.barrier(look)
    assert done.wait(5)
    w.close(5)
    assert seen == {"lines": 30, "samples": 30 * 320}


def test_records_reach_the_disk_within_the_interval_while_the_rollout_runs(tmp_path) -> None:
    w = RecordingWriter(flush_every_s=0.05)
    w.start()
    d = str(tmp_path / "r0")
    rec = w.rollout(d, 16000)
    rec.chunk(_chunk(0))
    path = os.path.join(d, "chunks.jsonl")
    t0 = time.monotonic()
    while time.monotonic() - t0 < 5 and not (os.path.exists(path) and os.path.getsize(path)):
        time.sleep(0.005)
    # no later put woke the writer: the due flush came from the interval alone
    assert [c["seq"] for c in _lines(path)] == [0]
    w.close(5)


def test_wav_appends_of_any_layout_are_written_as_given(tmp_path) -> None:
    w = RecordingWriter()
    w.start()
    d = str(tmp_path / "r0")
    rec = w.rollout(d, 16000)
    base = np.arange(-300, 340, dtype=np.int16)
    strided = base[::2]  # not contiguous
    big_endian = base[:100].astype(">i2")
    rec.user_audio(strided)
    rec.user_audio(big_endian)
    rec.close()
    w.close(5)
    pcm, rate = read_wav(os.path.join(d, "user.wav"))
    assert rate == 16000
    assert np.array_equal(pcm, np.concatenate([strided, base[:100]]))
