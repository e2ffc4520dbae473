"""`rig run`'s room options are checked before anything opens (rig.device.roomopts)."""

import pytest

from rig.cli import main as rig_main

WAV = "rig/data/turn_what.wav"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--target", "ws://127.0.0.1:9/x", "--cancel-own-echo"], "works on a sound card"),
        (["--transport", "device", "--cancel-own-echo", "nope.json"], "no such calibration file"),
        (["--transport", "device", "--noise-device", "x"], "needs all of --noise-device"),
        (
            ["--target", "ws://127.0.0.1:9/x", "--noise-device", "x", "--noise", WAV,
             "--noise-level-dbfs", "-30"],
            "plays on a sound card",
        ),
        (
            ["--transport", "device", "--noise-device", "x", "--noise", WAV,
             "--noise-level-dbfs", "6"],
            "-120..0 dBFS",
        ),
        (
            ["--transport", "device", "--noise-device", "x", "--noise", "missing.wav",
             "--noise-level-dbfs", "-30"],
            "no such file",
        ),
    ],
)  # fmt: skip
def test_bad_room_options_are_one_line_errors(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    code = rig_main(["run", WAV, "--headless", "--out", str(tmp_path), *extra])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err
