"""A scenario item's `echo` table: validated, canonical, in the item's session and meta."""

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from rig.errors import ScenarioError
from rig.scenarios.fileformat import load_scenario_file

RATE = 16_000


def _file(tmp_path: Path, echo: str) -> str:
    t = np.arange(RATE // 2) / RATE
    sf.write(tmp_path / "a.wav", (np.sin(2 * np.pi * 300 * t) * 0.3).astype(np.float32), RATE)
    path = tmp_path / "s.toml"
    path.write_text(f'[[items]]\nid = "x"\n{echo}\nsteps = [{{ type = "turn", file = "a.wav" }}]\n')
    return str(path)


def test_echo_table_becomes_the_canonical_spec(tmp_path: Path) -> None:
    (tmp_path / "room.wav").write_bytes(b"")
    path = _file(tmp_path, 'echo = { delay_ms = 40, erl_db = 20, rir = "room.wav" }')
    (item,) = load_scenario_file(path, RATE)
    want = f"erl_db=20,delay_ms=40,rir={tmp_path / 'room.wav'}"
    assert item.session["echo"] == item.meta["echo"] == want


def test_no_echo_table_no_echo(tmp_path: Path) -> None:
    (item,) = load_scenario_file(_file(tmp_path, ""), RATE)
    assert "echo" not in item.session and "echo" not in item.meta


@pytest.mark.parametrize(
    ("table", "msg"),
    [
        ("echo = { erl_db = 20 }", "needs delay_ms"),
        ('echo = "erl_db=20"', "must be a table"),
        ("echo = { erl_db = 20, delay_ms = 40, wet = 1 }", "unknown key"),
        ('echo = { erl_db = 20, delay_ms = 40, room = "hall" }', "room must be one of"),
    ],
)
def test_bad_echo_tables_name_the_file_and_field(tmp_path: Path, table: str, msg: str) -> None:
    with pytest.raises(ScenarioError, match=rf"s.toml: items\[0\].echo: .*{msg}"):
        load_scenario_file(_file(tmp_path, table), RATE)
