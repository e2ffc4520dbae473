"""What `rig run` refuses or warns about before anything runs: per-item options the dialect
rejects, a two-channel prefill where the dialect or transport cannot take the system's own
track, a fast prefill to a server that steps in real time (Moshi)."""

from pathlib import Path

import pytest

from rig.errors import ConfigError
from rig.scenarios.fileformat import load_scenario_file
from rig.scenarios.runcheck import check_items

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "corpus"
TURN = f"steps = [{{type = 'turn', file = '{CORPUS / 'c1.flac'}', channel = 0, end_s = 2}}]\n"


def items(tmp_path: Path, item: str) -> list:
    p = tmp_path / "s.toml"
    p.write_text(f"[[items]]\nid = 'x'\n{item}\n{TURN}")
    return load_scenario_file(str(p), 16_000)


TWO = f"prefill = '{CORPUS / 'c1.flac'}'\nprefill_channels = ['user', 'own']\nprefill_end_s = 2"


def test_a_two_channel_prefill_goes_only_where_the_own_track_can(tmp_path) -> None:
    its = items(tmp_path, TWO)
    assert check_items(its, dialect="rig", transport="ws", options={}) == []
    for dialect in ("openai", "gemini", "moshi"):
        with pytest.raises(
            ConfigError,
            match=f"item x: dialect '{dialect}' cannot take the system's own past track",
        ):
            check_items(its, dialect=dialect, transport="ws", options={})
    with pytest.raises(ConfigError, match="--transport webrtc carries one channel"):
        check_items(its, dialect="rig", transport="webrtc", options={})


@pytest.mark.parametrize(
    ("dialect", "options", "message"),
    [
        ("openai", "{threshold = 2}", "item x: options: openai: threshold must be a number"),
        ("rig", "{voice = 'alloy'}", "item x: dialect 'rig' does not take these options"),
        ("gemini", "{end_sensitivity = 'mid'}", "end_sensitivity must be 'high' or 'low'"),
    ],
)
def test_per_item_options_are_checked_by_the_dialect(tmp_path, dialect, options, message):
    its = items(tmp_path, f"options = {options}")
    with pytest.raises(ConfigError) as exc:
        check_items(its, dialect=dialect, transport="ws", options={})
    assert message in str(exc.value)


def test_item_options_override_the_runs(tmp_path) -> None:
    its = items(tmp_path, "options = {silence_duration_ms = 300}")
    check_items(its, dialect="openai", transport="ws", options={"silence_duration_ms": 9e9})
    with pytest.raises(ConfigError, match="need --transport ws"):
        check_items(its, dialect="rig", transport="webrtc", options={})


def test_a_fast_prefill_to_moshi_is_a_recorded_warning(tmp_path) -> None:
    its = items(tmp_path, f"prefill = '{CORPUS / 'c1.flac'}'\nprefill_end_s = 2\nprefill_speed = 4")
    (w,) = check_items(its, dialect="moshi", transport="ws", options={})
    assert "steps through its input in real time" in w and its[0].meta["warnings"] == [w]
    slow = items(tmp_path, f"prefill = '{CORPUS / 'c1.flac'}'\nprefill_speed = 1")
    assert check_items(slow, dialect="moshi", transport="ws", options={}) == []
    assert check_items(its, dialect="rig", transport="ws", options={}) == []
