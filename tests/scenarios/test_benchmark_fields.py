"""The benchmark fields of a scenario file: marks, slices and channels, two-channel prefill,
tags, options, reference, drain wait_first_s. Good values build what they say (slices read
after a seek, the channel picked); every bad value is one ScenarioError line naming the
field, raised before any audio is decoded."""

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from rig.audio.source import load_channels, load_wav
from rig.core.director import Drain, Play
from rig.errors import AudioInputError, ScenarioError
from rig.scenarios.fileformat import load_scenario_file

RATE = 16_000


@pytest.fixture
def stereo(tmp_path: Path) -> Path:
    """4 s, two channels: a ramp of sample numbers on 0, their negation on 1."""
    n = 4 * RATE
    x = np.stack([np.arange(n) % 20_000 + 500, -(np.arange(n) % 20_000) - 500], axis=1)
    path = tmp_path / "conv.wav"
    sf.write(path, x.astype(np.int16), RATE, subtype="PCM_16")
    return path


def suite(tmp_path: Path, item: str, steps: str = "") -> Path:
    steps = steps or "{type = 'turn', file = 'conv.wav', start_s = 1.0, end_s = 2.0, channel = 1}"
    p = tmp_path / "s.toml"
    p.write_text(f"[[items]]\nid = 'x'\n{item}\nsteps = [{steps}]\n")
    return p


def test_a_slice_plays_that_part_of_that_channel(tmp_path, stereo) -> None:
    marks = "marks = [{kind = 'eot', t_s = 1.0}, {kind = 'pause', start_s = 0.2, end_s = 0.5}]"
    steps = (
        "{type = 'turn', file = 'conv.wav', start_s = 1.0, end_s = 2.0, channel = 1, "
        f"pad_before_s = 0, {marks}}}, {{type = 'drain', wait_first_s = 8, quiet_s = 3}}"
    )
    item = (
        "tags = {conversation = 'c17', speaker = 'B'}\n"
        "options = {silence_duration_ms = 300, instructions = 'be brief'}\n"
        "reference = {text = 'sure thing', file = 'conv.wav', start_s = 2, end_s = 3.5}"
    )
    (it,) = load_scenario_file(str(suite(tmp_path, item, steps)), RATE)
    play = next(s for s in it.plan.steps if isinstance(s, Play))
    want = -(np.arange(RATE, 2 * RATE) % 20_000) - 500
    assert np.array_equal(play.pcm, want.astype(np.int16))
    assert [(m.mark, m.start, m.end, m.step) for m in play.marks] == [
        ("pause", 3200, 8000, 0),
        ("eot", 16000, None, 0),
    ]
    drain = it.plan.steps[-1]
    assert isinstance(drain, Drain) and (drain.quiet_s, drain.wait_first_s) == (3.0, 8.0)
    assert it.meta["tags"] == {"conversation": "c17", "speaker": "B"}
    assert it.meta["options"] == {"silence_duration_ms": 300, "instructions": "be brief"}
    assert it.meta["reference"]["words"] == 2 and it.meta["reference"]["duration_s"] == 1.5
    described = it.plan.describe()["steps"][0]
    assert described["marks"][0] == {
        "mark": "pause",
        "t_s": 0.2,
        "end_s": 0.5,
        "label": None,
        "step": 0,
    }
    assert it.plan.sources[0]["channel"] == 1 and it.plan.sources[0]["start_s"] == 1.0


def test_a_two_channel_prefill_keeps_the_own_track_apart(tmp_path, stereo) -> None:
    item = (
        "prefill = 'conv.wav'\nprefill_channels = ['own', 'user']\nprefill_end_s = 1.0\n"
        "prefill_marks = [{kind = 'anchor', t_s = 0.5, label = 'hello'}]"
    )
    (it,) = load_scenario_file(str(suite(tmp_path, item)), RATE)
    prefill = it.plan.steps[0]
    assert isinstance(prefill, Play) and prefill.role == "prefill"
    assert np.array_equal(prefill.pcm, (-(np.arange(RATE)) - 500).astype(np.int16))  # channel 1
    assert it.own_track is not None
    assert np.array_equal(it.own_track, (np.arange(RATE) + 500).astype(np.int16))  # channel 0
    assert prefill.marks[0].label == "hello" and prefill.marks[0].step == -1
    assert it.meta["prefill_channels"] == ["own", "user"]


def test_slices_are_read_after_a_seek_not_whole(stereo, monkeypatch) -> None:
    import soundfile

    reads: list[int] = []
    real = soundfile.SoundFile.read

    def counting(self, frames=-1, *a, **k):  # type: ignore[no-untyped-def]
        out = real(self, frames, *a, **k)
        reads.append(len(out))
        return out

    monkeypatch.setattr(soundfile.SoundFile, "read", counting)
    got = load_wav(str(stereo), RATE, start_s=3.0, end_s=3.5, channel=0)
    assert got.pcm.size == RATE // 2 and sum(reads) == RATE // 2  # 0.5 s read, not 4 s
    assert got.describe()["start_frame"] == 3 * RATE and got.describe()["channel"] == 0
    with pytest.raises(AudioInputError, match="no channel 2"):
        load_channels(str(stereo), RATE, [2])


BAD = [
    # marks
    ("", "marks = [{kind = 'gold', t_s = 0.1}]", "steps[0].marks[0].kind: 'gold': one of"),
    ("", "marks = [{kind = 'eot', start_s = 0, end_s = 0.2}]", "a eot mark is a point: give t_s"),
    ("", "marks = [{kind = 'pause', t_s = 0.2}]", "a pause mark is a span: give start_s and end_s"),
    ("", "marks = [{kind = 'pause', start_s = 0.5, end_s = 0.2}]", "end_s: must be after start_s"),
    ("", "marks = [{kind = 'eot', t_s = 1.5}]", "past the end of the step's audio (1 s)"),
    ("", "marks = [{kind = 'eot', t_s = -1}]", "marks[0].t_s: must be >= 0"),
    ("", "marks = [{kind = 'eot', t_s = 'x'}]", "marks[0].t_s: must be a number of seconds"),
    ("", "marks = [{kind = 'anchor', t_s = 0.2}]", "an anchor mark needs a label"),
    ("", "marks = [{kind = 'eot', t_s = 0.2, when = 1}]", "marks[0].when: unknown key"),
    ("", "marks = [{kind = 'eot', t_s = 0.2, start_s = 0.1, end_s = 0.3}]", "not both"),
    (
        "",
        "marks = [{kind = 'negative', start_s = 0, end_s = 0.5}, "
        "{kind = 'negative', start_s = 0.4, end_s = 0.6}]",
        "marks[1]: negative span overlaps",
    ),
    (
        "",
        "marks = [{kind = 'negative', start_s = 0, end_s = 0.5}, {kind = 'eot', t_s = 0.3}]",
        "marks[1]: an end of turn inside negative span",
    ),
    ("", "marks = 'eot'", "steps[0].marks: must be a list of mark tables"),
    # slices and channels
    ("", "!start_s = 5", "steps[0].start_s: 5 s is past the end of the file (4 s)"),
    ("", "!end_s = 9", "steps[0].end_s: 9 s is past the end of the file (4 s)"),
    ("", "!start_s = 2, end_s = 1", "steps[0].end_s: must be after start_s (2 s), got 1"),
    ("", "channel = 2", "steps[0].channel: no channel 2: the file has 2 (0-1)"),
    ("", "channel = 'left'", 'steps[0].channel: must be a channel index or "mean"'),
    ("", "!start_s = -1", "steps[0].start_s: must be >= 0"),
    # item fields
    ("tags = {conversation = 17}", "", "items[0].tags.conversation: must be a string"),
    ("tags = {'bad name' = 'x'}", "", "items[0].tags.bad name: tag names"),
    ("tags = 'c17'", "", "items[0].tags: must be a table of strings"),
    ("options = {history = 'x'}", "", "items[0].options.history: not an item option"),
    ("options = 'fast'", "", "items[0].options: must be a table of dialect options"),
    ("reference = {text = 'a', when = 1}", "", "items[0].reference.when: unknown key"),
    ("reference = {words = -1}", "", "items[0].reference.words: must be an integer >= 0"),
    ("reference = {file = 'conv.wav', end_s = 7}", "", "items[0].reference.end_s: 7 s is past"),
    ("reference = {start_s = 1}", "", "items[0].reference.start_s: only with `file`"),
    ("prefill_channel = 0", "", "items[0].prefill_channel: only with `prefill`"),
    ("prefill = 'conv.wav'\nprefill_channels = ['user', 'user']", "", 'exactly one "user"'),
    (
        "prefill = 'conv.wav'\nprefill_channels = ['user', 'own', 'none']",
        "",
        "names 3 channels; the prefill file has 2",
    ),
    (
        "prefill = 'conv.wav'\nprefill_channels = ['user', 'own']\nprefill_channel = 0",
        "",
        "not both",
    ),
    (
        "prefill = 'conv.wav'\nprefill_marks = [{kind = 'eot', t_s = 9}]",
        "",
        "prefill_marks[0].t_s: 9 s is past the end",
    ),
]


@pytest.mark.parametrize(("item", "turn", "message"), BAD)
def test_every_bad_value_is_one_line_naming_its_field(tmp_path, stereo, item, turn, message):
    # "!": the row gives the slice itself
    base = "" if turn.startswith("!") else ", start_s = 1.0, end_s = 2.0"
    extra = f", {turn.lstrip('!')}" if turn else ""
    steps = f"{{type = 'turn', file = 'conv.wav'{base}{extra}}}"
    with pytest.raises(ScenarioError) as exc:
        load_scenario_file(str(suite(tmp_path, item, steps)), RATE)
    text = str(exc.value)
    assert message in text and "\n" not in text and text.startswith(str(tmp_path / "s.toml"))


def test_drain_wait_first_s_is_checked(tmp_path, stereo) -> None:
    steps = "{type = 'turn', file = 'conv.wav'}, {type = 'drain', wait_first_s = -2}"
    with pytest.raises(ScenarioError, match=r"steps\[1\]\.wait_first_s: must be >= 0"):
        load_scenario_file(str(suite(tmp_path, "", steps)), RATE)
    with pytest.raises(ScenarioError, match=r"steps\[0\]\.start_s: only with `file`"):
        load_scenario_file(
            str(suite(tmp_path, "", "{type = 'turn', files = ['conv.wav'], start_s = 1}")), RATE
        )
