"""rig.shard: a stable, process-independent, disjoint and covering assignment."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rig.errors import ConfigError
from rig.shard import Shard, ids_digest, parse_shard, shard_index, split

IDS = st.lists(st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,20}\Z"), unique=True, max_size=60)


def test_assignment_is_sha256_of_the_id() -> None:
    # the rule is part of the contract (pods must agree): pinned here
    import hashlib

    digest = hashlib.sha256(b"what-r0").digest()
    assert shard_index("what-r0", 7) == int.from_bytes(digest[:8], "big") % 7
    assert shard_index("anything", 1) == 0


def test_same_in_another_process_with_another_hash_seed() -> None:
    ids = [f"item-{i}-r{r}" for i in range(20) for r in range(3)]
    code = (
        "import sys; from rig.shard import shard_index;"
        "print(','.join(str(shard_index(i, 5)) for i in sys.argv[1:]))"
    )
    out = []
    for seed in ("1", "987"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        r = subprocess.run(
            [sys.executable, "-c", code, *ids], capture_output=True, text=True, env=env, check=True
        )
        out.append(r.stdout.strip())
    assert out[0] == out[1] == ",".join(str(shard_index(i, 5)) for i in ids)


@given(IDS, st.integers(1, 9))
def test_shards_are_disjoint_and_cover_every_rollout(ids: list[str], n: int) -> None:
    parts = split(ids, n)
    assert sorted(x for p in parts for x in p) == sorted(ids)
    for k, part in enumerate(parts):
        assert all(Shard(k, n).owns(rid) for rid in part)
        assert not any(Shard(k, n).owns(rid) for j, p in enumerate(parts) if j != k for rid in p)


@given(IDS)
def test_digest_ignores_order(ids: list[str]) -> None:
    assert ids_digest(ids) == ids_digest(list(reversed(ids)))


def test_parse() -> None:
    assert parse_shard("2/5") == Shard(2, 5)
    assert parse_shard(" 0 / 1 ") == Shard(0, 1)
    assert Shard(2, 5).label == "2/5" and Shard(2, 5).dir_suffix == "shard-2-of-5"
    for bad in ("5/5", "1/0", "-1/3", "a/b", "3", "1/2/3", "1/1000000"):
        with pytest.raises(ConfigError, match="--shard"):
            parse_shard(bad)


def test_describe_names_the_plan() -> None:
    ids = ["a", "b", "c", "d"]
    d = Shard(1, 2).describe(ids)
    assert d["plan_rollouts"] == 4 and d["plan_digest"] == ids_digest(ids)
    assert d["rollouts"] == len(split(ids, 2)[1])
