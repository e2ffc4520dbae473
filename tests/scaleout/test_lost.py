"""A dead shard's unfinished rollouts are marked; finished ones keep their status."""

from __future__ import annotations

import json
from pathlib import Path

from rig.cli import build_parser
from rig.cli.runopts import config_from_args
from rig.runs.engine import shard_config
from rig.runs.runner import rollout_done
from rig.scaleout.lost import mark_lost


def test_mark_lost(tmp_path) -> None:
    shard = tmp_path / "run-shard-0-of-2"
    (shard / "rollouts" / "done").mkdir(parents=True)
    (shard / "rollouts" / "done" / "metrics.json").write_text(json.dumps({"status": "ok"}))
    (shard / "rollouts" / "failed").mkdir()
    (shard / "rollouts" / "failed" / "metrics.json").write_text(
        json.dumps({"status": "transport_error"})
    )
    (shard / "rollouts" / "mid").mkdir()
    (shard / "rollouts" / "mid" / "events.jsonl").write_text("{}\n")
    (shard / "manifest.json").write_text(json.dumps({"status": "running"}))
    placement = {"host": "h", "node": "n1", "shard": "0/2"}
    marked = mark_lost(str(shard), ["done", "failed", "mid", "never"], "node lost: x", placement)
    assert marked == ["mid", "never"]

    def m(rid: str) -> dict:
        return json.loads((shard / "rollouts" / rid / "metrics.json").read_text())

    assert m("done")["status"] == "ok" and m("failed")["status"] == "transport_error"
    assert m("mid")["reason"] == "node lost: x (mid-rollout)" and m("mid")["node"] == "n1"
    assert m("never")["reason"] == "node lost: x (before it started)"
    assert m("never")["status"] == "error" and not rollout_done(str(shard / "rollouts" / "never"))
    manifest = json.loads((shard / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["stop_reason"] == "node lost: x"


def test_shard_config_drops_what_the_driver_sets() -> None:
    argv = [
        "run", "builtin:demo", "--target", "ws://h:1/", "--engine", "ray", "--ray-address=a:1",
        "--out", "o", "--run-id", "r", "--shards", "3", "--headless", "--concurrency", "2",
        "--ray-cpus-per-shard", "1", "--results", "object-store", "--fleet-listen=0.0.0.0:1",
        "--detail", "x",
    ]  # fmt: skip
    driver = config_from_args(build_parser().parse_args(argv))
    shard = shard_config(driver, "127.0.0.1:5")
    plain = config_from_args(
        build_parser().parse_args(
            ["run", "builtin:demo", "--target", "ws://h:1/", "--concurrency", "2", "--headless",
             "--out", "o", "--run-id", "r"]
        )
    )  # fmt: skip
    assert shard.engine == plain.engine  # the shard runs locally (the driver's engine dropped)
    assert shard.live.detail is None and shard.live.headless
    assert shard.live.fleet_feed == "127.0.0.1:5"
    assert shard.replace(live__fleet_feed=None, output__argv=None) == plain


def test_dead_shard_rollouts_are_redone_by_a_rerun(tmp_path: Path) -> None:
    """What a rerun sees: the marked rollout is not done (redone), the finished one is."""
    shard = tmp_path / "s"
    (shard / "rollouts" / "a").mkdir(parents=True)
    (shard / "rollouts" / "a" / "metrics.json").write_text(json.dumps({"status": "ok"}))
    mark_lost(str(shard), ["a", "b"], "node lost: y", {})
    assert rollout_done(str(shard / "rollouts" / "a"))
    assert not rollout_done(str(shard / "rollouts" / "b"))


def test_a_rerun_keeps_the_split_it_started_with(tmp_path: Path) -> None:
    import pytest

    from rig.errors import ConfigError
    from rig.runs.engine import previous_count

    assert previous_count(str(tmp_path / "nothing"), "r") is None
    (tmp_path / "r-shard-0-of-3").mkdir()
    (tmp_path / "r-shard-2-of-3").mkdir()
    (tmp_path / "rr-shard-0-of-5").mkdir()  # another run id
    (tmp_path / "r").mkdir()  # the merged run
    assert previous_count(str(tmp_path), "r") == 3
    (tmp_path / "r-shard-1-of-2").mkdir()
    with pytest.raises(ConfigError, match="split"):
        previous_count(str(tmp_path), "r")


def test_a_shard_killed_by_a_signal_is_lost_an_exit_status_is_not() -> None:
    import pytest

    pytest.importorskip("ray")
    from rig.scaleout.ray_engine import _lost_reason

    assert _lost_reason(-9) == "node lost: the shard process was killed by SIGKILL"
    assert _lost_reason(0) is None and _lost_reason(3) is None and _lost_reason(1) is None
