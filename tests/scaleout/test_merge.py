"""rig merge on shard run directories written here: checks, duplicates, missing, links."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from rig.analysis.aggregate import aggregate
from rig.cli import main
from rig.errors import ConfigError
from rig.scaleout.merge import merge
from rig.shard import Shard, split

IDS = [f"item{i}-r{r}" for i in range(6) for r in range(2)]
N = 3


def _shard_dir(
    root: Path, k: int, *, n: int = N, ids: list[str] | None = None, **manifest: Any
) -> Path:
    d = root / f"run-shard-{k}-of-{n}"
    mine = ids if ids is not None else split(IDS, n)[k]
    for rid in mine:
        (d / "rollouts" / rid).mkdir(parents=True)
        item = rid.split("-")[0]
        metrics = {
            "status": "ok",
            "rollout_id": rid,
            "scenario": "s",
            "item": item,
            "responses": [{"latency_ms": 500.0 + 10 * IDS.index(rid)}],
            "host": f"host{k}",
            "node": f"node{k}",
            "shard": f"{k}/{n}",
        }
        (d / "rollouts" / rid / "metrics.json").write_text(json.dumps(metrics))
        (d / "rollouts" / rid / "user.wav").write_bytes(b"RIFF....WAVE")
    base = {
        "run_id": d.name,
        "rig_version": "1.0",
        "git_sha": "abc",
        "seed": 7,
        "host": f"host{k}",
        "node": f"node{k}",
        "cpu_count": 2,
        "config": {"scenario": "builtin:demo", "concurrency": 1},
        "targets": [{"url": "ws://127.0.0.1:1/"}],
        "rollouts": {rid: {"meta": {}, "plan": {}} for rid in mine},
        "shard": Shard(k, n).describe(IDS),
        "status": "done",
        "started_ns": 123,
    }
    (d / "manifest.json").write_text(json.dumps({**base, **manifest}))
    return d


def _shards(root: Path) -> list[str]:
    return [str(_shard_dir(root, k)) for k in range(N)]


def test_merge_links_files_and_keeps_shard_manifests(tmp_path) -> None:
    shards = _shards(tmp_path)
    out = tmp_path / "merged"
    result = merge(str(out), shards)
    assert result.complete and result.status_counts == {"ok": len(IDS)}
    assert sorted(os.listdir(out / "rollouts")) == sorted(IDS)
    src = Path(shards[0]) / "rollouts" / split(IDS, N)[0][0] / "user.wav"
    dst = out / "rollouts" / src.parent.name / "user.wav"
    assert os.path.samefile(src, dst) and src.exists()  # linked, never moved
    assert result.linked == 2 * len(IDS) and result.copied == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["seed"] == 7 and m["status"] == "done"
    assert m["started_ns"] is None  # monotonic times are per node: none for the merged run
    assert sorted(os.listdir(out / "manifests")) == sorted(f"{Path(s).name}.json" for s in shards)
    for k in range(N):
        for rid in split(IDS, N)[k]:
            assert m["rollout_nodes"][rid] == {
                "host": f"host{k}",
                "node": f"node{k}",
                "shard": f"{k}/{N}",
            }
    assert set(m["nodes"]) == {f"node{k}" for k in range(N)}
    assert m["nodes"]["node1"]["shards"][0]["shard"] == f"1/{N}"


def test_report_of_merged_run_equals_report_of_one_run(tmp_path) -> None:
    merged = tmp_path / "merged"
    merge(str(merged), _shards(tmp_path / "s"))
    one = _shard_dir(tmp_path / "one", 0, n=1, ids=IDS)  # the same rollouts, unsharded
    a, b = aggregate(merged), aggregate(one)
    for key in ("run_dir", "run_id"):
        a.pop(key), b.pop(key)
    assert a == b


def test_mismatched_config_seed_or_code_is_refused_unless_forced(tmp_path) -> None:
    shards = _shards(tmp_path)
    odd = _shard_dir(tmp_path / "odd", 2, config={"scenario": "other.toml", "concurrency": 1})
    with pytest.raises(ConfigError, match=r"config\.scenario"):
        merge(str(tmp_path / "m1"), [*shards[:2], str(odd)])
    for field, value in (("seed", 8), ("git_sha", "def"), ("rig_version", "2.0")):
        other = _shard_dir(tmp_path / field, 2, **{field: value})
        with pytest.raises(ConfigError, match=field):
            merge(str(tmp_path / f"m-{field}"), [*shards[:2], str(other)])
    assert not (tmp_path / "m1").exists()
    # operational settings are no difference
    busy = _shard_dir(tmp_path / "busy", 2, config={"scenario": "builtin:demo", "concurrency": 8})
    assert merge(str(tmp_path / "m2"), [*shards[:2], str(busy)]).changes == []
    forced = merge(str(tmp_path / "m3"), [*shards[:2], str(odd)], force=True)
    m = json.loads((tmp_path / "m3" / "manifest.json").read_text())
    assert m["merge"]["forced"] is True
    assert [c["field"] for c in forced.changes] == ["config.scenario"]
    assert m["merge"]["changes"][0]["after"] == "other.toml"


def test_shards_of_different_splits_are_refused(tmp_path) -> None:
    a = _shard_dir(tmp_path / "a", 0, n=2)
    b = _shard_dir(tmp_path / "b", 1, n=3)
    with pytest.raises(ConfigError, match=r"shard\.count"):
        merge(str(tmp_path / "m"), [str(a), str(b)])


def test_duplicates_and_missing_are_reported(tmp_path, capsys) -> None:
    shards = _shards(tmp_path)
    extra = split(IDS, N)[0][0]
    # shard 1 also holds (a failed copy of) one of shard 0's rollouts
    dup = Path(shards[1]) / "rollouts" / extra
    dup.mkdir()
    (dup / "metrics.json").write_text(json.dumps({"status": "error", "item": "x"}))
    # shard 2 planned a rollout it never started
    m2 = json.loads((Path(shards[2]) / "manifest.json").read_text())
    m2["rollouts"]["never-ran"] = {"meta": {}, "plan": {}}
    (Path(shards[2]) / "manifest.json").write_text(json.dumps(m2))
    out = tmp_path / "merged"
    code = main(["merge", str(out), *shards])
    assert code == 3
    err = capsys.readouterr().err
    assert f"duplicate: {extra}" in err and "missing: never-ran" in err
    m = json.loads((out / "manifest.json").read_text())
    assert m["merge"]["duplicates"] == {extra: [shards[0], shards[1]]}
    assert m["merge"]["missing"] == ["never-ran"] and m["status"] == "incomplete"
    kept = json.loads((out / "rollouts" / extra / "metrics.json").read_text())
    assert kept["status"] == "ok"  # the finished copy wins


def test_a_missing_shard_is_reported(tmp_path, capsys) -> None:
    shards = _shards(tmp_path)
    assert main(["merge", str(tmp_path / "m"), shards[0], shards[2]]) == 3
    assert "shard(s) 1 of the split" in capsys.readouterr().err
    m = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert m["merge"]["missing_shards"] == [1]


def test_merge_again_after_a_shard_rerun_and_out_rules(tmp_path, capsys) -> None:
    shards = _shards(tmp_path)
    out = tmp_path / "merged"
    assert main(["merge", str(out), *shards]) == 0
    # a rerun replaced one rollout's metrics (atomic rename): the new merge shows it
    rid = split(IDS, N)[1][0]
    src = Path(shards[1]) / "rollouts" / rid / "metrics.json"
    new = json.loads(src.read_text()) | {"status": "timed_out"}
    src.with_suffix(".tmp").write_text(json.dumps(new))
    os.replace(src.with_suffix(".tmp"), src)
    old = json.loads((out / "rollouts" / rid / "metrics.json").read_text())
    assert old["status"] == "ok"  # the earlier merge's link still holds the earlier file
    assert main(["merge", str(out), *shards]) == 3
    assert (
        json.loads((out / "rollouts" / rid / "metrics.json").read_text())["status"] == "timed_out"
    )
    assert not [n for n in os.listdir(out) if n.startswith(".")]  # no temp dirs left
    # refused: OUT holding something else, OUT inside a shard, no shard dirs
    other = tmp_path / "other"
    (other / "x").mkdir(parents=True)
    assert main(["merge", str(other), *shards]) == 2
    assert main(["merge", str(Path(shards[0]) / "m"), *shards]) == 2
    assert main(["merge", str(tmp_path / "m4"), str(tmp_path / "nope")]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_copies_where_links_are_refused(tmp_path, monkeypatch) -> None:
    """Another file system (EXDEV): the merge copies, the shards are untouched."""
    import errno

    shards = _shards(tmp_path)

    def no_link(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    result = merge(str(tmp_path / "m"), shards)
    assert result.linked == 0 and result.copied == 2 * len(IDS)
    rid = split(IDS, N)[0][0]
    src = Path(shards[0]) / "rollouts" / rid / "user.wav"
    dst = tmp_path / "m" / "rollouts" / rid / "user.wav"
    assert not os.path.samefile(src, dst) and src.read_bytes() == dst.read_bytes()
