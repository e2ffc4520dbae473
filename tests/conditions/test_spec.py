"""What a condition may say, in files and on the command line, and how layers merge."""

from __future__ import annotations

import pytest

from rig.conditions.spec import Condition, Line, Noise, merge, parse, parse_cli
from rig.errors import ConfigError


def fail(field: str, reason: str) -> ValueError:
    return ValueError(f"{field}: {reason}")


def test_tables_parse_into_the_three_parts() -> None:
    c = parse(
        {"target_rms_dbfs": -35, "noise": {"kind": "pink", "snr_db": 5}, "line": "phone"},
        "c",
        fail,
    )
    assert c == Condition(("target_rms_dbfs", -35.0), Noise(5.0, "pink"), Line("phone"))
    assert c.as_dict() == {
        "target_rms_dbfs": -35.0,
        "noise": {"kind": "pink", "snr_db": 5.0},
        "line": {"kind": "phone"},
    }


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"gain_db": 1, "target_rms_dbfs": -3}, "give one level"),
        ({"volume": 3}, "c.volume: unknown key"),
        ({"target_peak_dbfs": 3}, r"c.target_peak_dbfs: must be in \[-90, 0\]"),
        ({"noise": {"kind": "brown", "snr_db": 5}}, "c.noise.kind: 'brown'"),
        ({"noise": {"kind": "pink"}}, "c.noise.snr_db: required"),
        ({"noise": {"file": "nope.wav", "snr_db": 5}}, "audio file not found"),
        ({"line": "fax"}, "c.line.kind: 'fax'"),
        ({"line": {"kind": "lossy"}}, "c.line.loss: required"),
        ({"line": {"kind": "lossy", "loss": 2}}, r"c.line.loss: must be in \[0, 1\]"),
        ({"line": {"kind": "phone", "loss": 0.1}}, "only with kind"),
    ],
)
def test_bad_conditions_are_one_line_errors_naming_the_field(raw: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse(raw, "c", fail)


def test_inner_layers_win_part_by_part() -> None:
    run = Condition(("gain_db", -6.0), Noise(10.0, "white"))
    item = Condition(line=Line("phone"))
    step = Condition(("target_peak_dbfs", -1.0))
    assert merge(run, item, step) == Condition(
        ("target_peak_dbfs", -1.0), Noise(10.0, "white"), Line("phone")
    )
    assert merge(None, None).empty


def test_the_command_line_form() -> None:
    c = parse_cli(["noise.kind=pink,noise.snr_db=5", "line=phone", "target_rms_dbfs=-35"])
    assert c == Condition(("target_rms_dbfs", -35.0), Noise(5.0, "pink"), Line("phone"))
    c = parse_cli(["line.kind=lossy,line.loss=0.05,line.conceal=repeat,line.seed=3"])
    assert c == Condition(line=Line("lossy", 0.05, 3, "repeat"))
    assert parse_cli(None) is None
    with pytest.raises(ConfigError, match="--condition wants KEY=VALUE"):
        parse_cli(["pink"])
    with pytest.raises(ConfigError, match="--condition noise.kind: 'grey'"):
        parse_cli(["noise.kind=grey,noise.snr_db=3"])


def test_rig_run_refuses_a_bad_condition_in_one_line_before_connecting(tmp_path) -> None:
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "rig", "run", "builtin:timing", "--target", "ws://127.0.0.1:9",
         "--out", str(tmp_path), "--condition", "noise.kind=pink"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("rig run: error: --condition noise.snr_db")
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_missing_extra_is_the_usual_one_line_error(monkeypatch) -> None:
    import importlib.util

    from rig.conditions import apply_conditions
    from rig.extras import MissingExtra
    from rig.scenarios import resolve

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "colorednoise" else real(n, *a)
    )
    items = resolve("builtin:demo", 16_000)
    with pytest.raises(MissingExtra, match=r"pip install 'rig-voice\[conditions\]'"):
        apply_conditions(items, parse_cli(["noise.kind=pink,noise.snr_db=5"]), 0)
