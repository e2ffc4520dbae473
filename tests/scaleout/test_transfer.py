"""Results through the object store, without Ray: a node's `Outbox` packs what has ended, the
driver's `Inbox` puts whole rollouts in place, and a cut transfer leaves nothing that looks
done (the Ray end-to-end test is tests/test_scaleout_ray_results.py)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from rig.errors import ConfigError, DataFileError
from rig.recordings.rundir import rollout_done
from rig.scaleout.transfer import INCOMING, Inbox, Outbox, Piece, pack, plant, seed


def _rollout(base: Path, rid: str, status: str | None = "ok", wav_bytes: int = 1000) -> Path:
    d = base / "rollouts" / rid
    d.mkdir(parents=True)
    (d / "user.wav").write_bytes(os.urandom(wav_bytes))
    (d / "chunks.jsonl").write_text('{"dir":"up","seq":0}\n')
    if status is not None:
        (d / "metrics.json").write_text(json.dumps({"status": status, "rollout_id": rid}))
    return d


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_what_ended_travels_in_pieces_and_lands_whole(tmp_path: Path) -> None:
    node = tmp_path / "node" / "run-shard-0-of-2"
    driver = tmp_path / "driver" / "run-shard-0-of-2"
    (node).mkdir(parents=True)
    (node / "manifest.json").write_text('{"status": "running"}')
    (node / "manifest.json.tmp.1.2").write_text('{"status": "half')  # mid atomic write
    big = _rollout(node, "big", wav_bytes=300_000)
    _rollout(node, "small", status="error")  # ended with a status of its own: sent too
    _rollout(node, "streaming", status=None)  # no metrics.json yet: not sent
    outbox = Outbox(str(node))
    pieces = [p for p in outbox.poll() if p.kind == "rollout"]
    # pack() with a small chunk: several pieces, each at most the chunk
    parts = list(pack(str(big), "big", chunk_bytes=64 << 10))
    assert len(parts) > 3 and all(len(p.data) <= 64 << 10 for p in parts)
    assert [p.last for p in parts] == [False] * (len(parts) - 1) + [True]
    inbox = Inbox(str(driver))
    done = [inbox.take(p) for p in parts]
    assert done[-1] == "big" and set(done[:-1]) == {None}
    for p in pieces:
        inbox.take(p)
    for p in outbox.poll():  # nothing new since: only nothing, or the unchanged top skipped
        assert p.kind != "rollout"
    assert _tree(driver / "rollouts" / "big") == _tree(big)
    assert sorted(os.listdir(driver / "rollouts")) == ["big", "small"]
    # the stream ends: the rollout that was still going, once it ends, and the manifest
    (node / "rollouts" / "streaming" / "metrics.json").write_text('{"status": "ok"}')
    (node / "manifest.json").write_text('{"status": "done"}')
    for p in outbox.poll(final=True):
        inbox.take(p)
    inbox.close()
    assert sorted(os.listdir(driver / "rollouts")) == ["big", "small", "streaming"]
    assert json.loads((driver / "manifest.json").read_text()) == {"status": "done"}
    assert sorted(os.listdir(driver)) == ["manifest.json", "rollouts"]  # no temp file came
    assert not (driver / INCOMING).exists()
    assert inbox.stats.rollouts == 3 and inbox.stats.bytes > 300_000


def test_a_cut_transfer_never_looks_done_and_is_cleared(tmp_path: Path) -> None:
    node = tmp_path / "node"
    driver = tmp_path / "driver"
    _rollout(node, "r1", wav_bytes=200_000)
    parts = list(pack(str(node / "rollouts" / "r1"), "r1", chunk_bytes=32 << 10))
    inbox = Inbox(str(driver))
    for p in parts[:-1]:  # the node dies before the last piece
        assert inbox.take(p) is None
    assert not (driver / "rollouts" / "r1").exists()
    assert not rollout_done(str(driver / "rollouts" / "r1"))
    assert os.listdir(driver / INCOMING)  # the partial tar sits beside, not in rollouts/
    Inbox(str(driver))  # the next run's inbox: leftovers cleared
    assert os.listdir(driver / INCOMING) == []
    with pytest.raises(DataFileError, match="piece 1 of r1 where 0 was due"):
        Inbox(str(driver)).take(parts[1])


def test_redone_attempts_move_aside_and_finished_ones_stay(tmp_path: Path) -> None:
    node = tmp_path / "node"
    driver = tmp_path / "driver"
    _rollout(driver, "lost", status="error")  # marked "node lost" by the last run
    kept = _rollout(driver, "done", status="ok")
    before = _tree(kept)
    _rollout(node, "lost", status="ok")
    _rollout(node, "done", status="ok")
    inbox = Inbox(str(driver))
    for p in Outbox(str(node)).poll():
        inbox.take(p)
    names = sorted(os.listdir(driver / "rollouts"))
    assert names == ["done", "lost", "lost.failed-1"]  # as a rerun on a shared disk leaves
    assert rollout_done(str(driver / "rollouts" / "lost"))
    assert _tree(kept) == before and inbox.stats.duplicates == ["done"]


def test_seed_plants_what_a_resume_needs_and_is_not_sent_back(tmp_path: Path) -> None:
    driver = tmp_path / "driver"
    driver.mkdir()
    (driver / "manifest.json").write_text('{"seed": 7}')
    _rollout(driver, "ok1", status="ok")
    _rollout(driver, "bad", status="error")  # to be redone: not seeded
    files = seed(str(driver))
    assert sorted(files) == ["manifest.json", "rollouts/ok1/metrics.json"]
    node = tmp_path / "node"
    ids = plant(str(node), files)
    assert ids == {"ok1"} and rollout_done(str(node / "rollouts" / "ok1"))
    _rollout(node, "bad", status="ok")
    sent = {p.name for p in Outbox(str(node), seeded=ids).poll() if p.kind == "rollout"}
    assert sent == {"bad"}
    with pytest.raises(ConfigError):
        plant(str(node), {"../../etc/x": b""})


def test_hostile_pieces_are_refused(tmp_path: Path) -> None:
    inbox = Inbox(str(tmp_path / "driver"))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("r1/../../escaped")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(DataFileError):
        inbox.take(Piece("rollout", "r1", buf.getvalue()))
    assert not (tmp_path / "escaped").exists()
    for name in ("../x", ".incoming", "rollouts", "a/b"):
        with pytest.raises(DataFileError):
            inbox.take(Piece("file", name, b"{}"))
    with pytest.raises(ConfigError):
        inbox.take(Piece("rollout", "../x", b""))
