"""`--echo` specs and scenario `echo` tables: canonical text, one-line refusals."""

import pytest

from rig.echo.spec import EchoSpec, check_delay, min_delay_ms, scenario_echo
from rig.errors import ConfigError


def test_canonical_text_round_trips() -> None:
    s = EchoSpec.parse("delay_ms=40, erl_db=20")
    assert s.text == "erl_db=20,delay_ms=40"
    assert EchoSpec.parse(s.text) == s
    r = EchoSpec.parse("erl_db=6,delay_ms=30,room=small,distance_m=0.5")
    assert EchoSpec.parse(r.text) == r
    assert r.as_dict()["rt60_s"] == 0.3
    assert s.gain == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("text", "msg"),
    [
        ("erl_db=20", "needs delay_ms"),
        ("erl_db=20,delay_ms=40,loud=1", "unknown key 'loud'"),
        ("erl_db=-3,delay_ms=40", "erl_db must be in"),
        ("erl_db=x,delay_ms=40", "erl_db must be a number"),
        ("erl_db=10,delay_ms=40,room=hall", "room must be one of"),
        ("erl_db=10,delay_ms=40,rir=/nonexistent.wav", "no such file"),
        ("erl_db=10,delay_ms=40,rir=/x,room=small", "not both"),
        ("erl_db", "KEY=VALUE"),
    ],
)
def test_bad_specs_are_refused_in_one_line(text: str, msg: str) -> None:
    with pytest.raises(ConfigError, match=msg) as info:
        EchoSpec.parse(text)
    assert "\n" not in str(info.value)


def test_a_delay_shorter_than_a_frame_is_refused_with_the_minimum() -> None:
    assert min_delay_ms(20.0) == 22.0
    check_delay(EchoSpec(10, 22), 20.0)
    with pytest.raises(ConfigError, match=r"shorter than the 22 ms .* delay_ms >= 22"):
        check_delay(EchoSpec(10, 15), 20.0)
    check_delay(EchoSpec(10, 15), 10.0)  # shorter frames: shorter delays


def test_scenario_tables_resolve_files_next_to_the_scenario(tmp_path) -> None:
    (tmp_path / "room.wav").write_bytes(b"")
    text = scenario_echo({"erl_db": 12, "delay_ms": 50, "rir": "room.wav"}, str(tmp_path))
    assert text == f"erl_db=12,delay_ms=50,rir={tmp_path / 'room.wav'}"
    with pytest.raises(ConfigError, match="must be a table"):
        scenario_echo("erl_db=1", str(tmp_path))
