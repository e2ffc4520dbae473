"""`rig plot`: picture and Audacity labels of a handmade rollout directory."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from rig.analysis.rollout import load_rollout, read_track
from rig.cli import main
from rig.errors import AudioInputError

pytest.importorskip("matplotlib")

RATE = 16000
T0 = 7_000_000_000


def noise(dur_s: float, seed: int) -> np.ndarray:
    return 0.2 * np.random.default_rng(seed).standard_normal(round(dur_s * RATE))


def make_rollout(root: Path) -> Path:
    d = root / "rollouts" / "r000"
    d.mkdir(parents=True)
    user = np.zeros(8 * RATE)
    system = np.zeros(8 * RATE)
    user[RATE : 3 * RATE] = noise(2.0, 1)  # turn 1.0-3.0 s
    system[round(3.6 * RATE) : 6 * RATE] = noise(2.4, 2)  # reply 3.6 s
    user[round(5.0 * RATE) : round(5.4 * RATE)] = noise(0.4, 3)  # barge-in 5.0 s
    sf.write(d / "user.wav", user, RATE, subtype="PCM_16")
    sf.write(d / "system.wav", system, RATE, subtype="PCM_16")
    ns = 1_000_000_000
    events = [
        {"kind": "session.start", "t_ns": T0, "t0_ns": T0, "source": "rig"},
        {"kind": "turn.start", "t_ns": T0 + 1 * ns, "source": "rig"},
        {"kind": "turn.end", "t_ns": T0 + 3 * ns, "source": "rig"},
        {"kind": "inject", "t_ns": T0 + 5 * ns, "injection": "interruption", "source": "rig"},
    ]
    lines = "".join(json.dumps(e) + "\n" for e in events) + '{"kind": "turn.st'  # torn line
    (d / "events.jsonl").write_text(lines)
    metrics = {
        "status": "ok",
        "t0_ns": T0,
        "sample_rate": RATE,
        "responses": [
            {"user_end_ns": T0 + 3 * ns, "onset_ns": T0 + 3_600_000_000, "latency_ms": 600.0}
        ],
    }
    (d / "metrics.json").write_text(json.dumps(metrics))
    return d


def test_rig_plot_writes_png_and_labels(tmp_path: Path) -> None:
    d = make_rollout(tmp_path)
    png, labels = tmp_path / "t.png", tmp_path / "labels.txt"
    assert main(["plot", str(d), "-o", str(png), "--labels", str(labels)]) == 0
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    rows = [line.split("\t") for line in labels.read_text().splitlines()]
    by_label = {r[2]: (float(r[0]), float(r[1])) for r in rows}
    assert by_label["turn 0 start"] == (1.0, 1.0)
    assert by_label["turn 0 end"] == (3.0, 3.0)
    assert by_label["inject interruption"] == (5.0, 5.0)
    assert by_label["latency 600 ms"] == (3.0, 3.6)
    user_speech = [v for k, v in by_label.items() if k == "user speech"]
    assert user_speech  # computed here: metrics.json carries no activity
    starts = sorted(float(r[0]) for r in rows if r[2] == "system speech")
    assert starts[0] == pytest.approx(3.6, abs=0.03)


def test_endpointing_is_drawn_and_labelled_where_the_decision_fell(tmp_path: Path) -> None:
    d = make_rollout(tmp_path)
    m = json.loads((d / "metrics.json").read_text())
    m["responses"][0].update(uplink_ms=10.0, detect_ms=400.0, generation_ms=170.0)
    (d / "metrics.json").write_text(json.dumps(m))
    (r,) = load_rollout(d).responses
    assert r.decision_s == pytest.approx(3.41) and r.generation_ms == 170.0
    png, labels = tmp_path / "t.png", tmp_path / "labels.txt"
    assert main(["plot", str(d), "-o", str(png), "--labels", str(labels)]) == 0
    rows = [line.split("\t") for line in labels.read_text().splitlines()]
    by_label = {r[2]: (float(r[0]), float(r[1])) for r in rows}
    assert by_label["detect 400 ms, generation 170 ms"] == pytest.approx((3.0, 3.41))
    # without an uplink estimate: half the round trip the split used
    m["responses"][0].update(uplink_ms=None, detect_rtt_ms=30.0)
    (d / "metrics.json").write_text(json.dumps(m))
    (r,) = load_rollout(d).responses
    assert r.decision_s == pytest.approx(3.415)


def test_default_output_is_inside_the_rollout(tmp_path: Path) -> None:
    d = make_rollout(tmp_path)
    assert main(["plot", str(d)]) == 0
    assert (d / "timeline.png").stat().st_size > 20_000


def test_recorded_activity_is_used_when_present(tmp_path: Path) -> None:
    from rig.reporting.plot import activity_of

    d = make_rollout(tmp_path)
    m = json.loads((d / "metrics.json").read_text())
    m["timing"] = {"activity": {"user": [[1.0, 3.0]], "system": [[3.6, 6.0]]}}
    (d / "metrics.json").write_text(json.dumps(m))
    assert activity_of(load_rollout(d)) == ([(1.0, 3.0)], [(3.6, 6.0)])


def test_stale_wav_header_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "x.wav"
    x = (np.arange(1000) % 100).astype(np.int16)
    sf.write(path, x, RATE, subtype="PCM_16")
    with path.open("ab") as f:  # a writer appended after its last header rewrite
        f.write(struct.pack("<500h", *([7] * 500)))
    y, rate = read_track(path)
    assert rate == RATE and y.size == 1500
    assert np.allclose(y[-500:], 7 / 32768)


def test_missing_tracks_are_a_clear_error(tmp_path: Path) -> None:
    d = tmp_path / "r"
    d.mkdir()
    with pytest.raises(AudioInputError):
        load_rollout(d)
    assert main(["plot", str(d)]) == 2
    (d / "user.wav").write_bytes(b"not a wav")
    with pytest.raises(AudioInputError):
        load_rollout(d)


def _has_color(png: Path, hex_color: str) -> bool:
    import matplotlib.image as mpimg

    img = mpimg.imread(str(png))[..., :3]
    want = np.array([int(hex_color[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    return bool(np.any(np.all(np.abs(img - want) < 0.02, axis=-1)))


def test_split_of_each_response_is_drawn_on_the_timeline(tmp_path: Path) -> None:
    from rig.reporting.plot import SPLIT_COLORS

    d = make_rollout(tmp_path)
    bare = tmp_path / "bare.png"
    assert main(["plot", str(d), "-o", str(bare)]) == 0
    metrics = json.loads((d / "metrics.json").read_text())
    metrics["responses"][0].update(
        uplink_ms=40.0, model_ms=480.0, downlink_ms=40.0, queue_ms=40.0, clock_method="rtt_half"
    )
    (d / "metrics.json").write_text(json.dumps(metrics))
    split = tmp_path / "split.png"
    assert main(["plot", str(d), "-o", str(split)]) == 0
    model_color = SPLIT_COLORS[1]
    assert _has_color(split, model_color) and not _has_color(bare, model_color)


def test_reference_marks_are_drawn_and_labelled(tmp_path: Path) -> None:
    d = make_rollout(tmp_path)
    ns = 1_000_000_000
    marks = [
        {
            "kind": "mark",
            "t_ns": T0 + 2 * ns,
            "end_ns": T0 + ns * 5 // 2,
            "mark": "pause",
            "label": None,
            "step": 0,
            "source": "rig",
        },
        {
            "kind": "mark",
            "t_ns": T0 + 3 * ns,
            "end_ns": None,
            "mark": "eot",
            "label": None,
            "step": 0,
            "source": "rig",
        },
        {
            "kind": "mark",
            "t_ns": T0 + ns * 11 // 4,
            "end_ns": None,
            "mark": "anchor",
            "label": "coast",
            "step": 0,
            "source": "rig",
        },
    ]
    with (d / "events.jsonl").open("a") as f:
        f.write("\n" + "".join(json.dumps(e) + "\n" for e in marks))
    view = load_rollout(d)
    refs = [(m.kind, m.t_s, m.end_s, m.label) for m in view.marks if m.kind.startswith("ref.")]
    assert refs == [
        ("ref.pause", 2.0, 2.5, "pause"),
        ("ref.eot", 3.0, None, "eot"),
        ("ref.anchor", 2.75, None, "anchor: coast"),
    ]
    png, labels = tmp_path / "t.png", tmp_path / "labels.txt"
    assert main(["plot", str(d), "-o", str(png), "--labels", str(labels)]) == 0
    rows = {r.split("\t")[2]: r.split("\t")[:2] for r in labels.read_text().splitlines()}
    assert rows["pause"] == ["2.000000", "2.500000"] or [float(x) for x in rows["pause"]] == [
        2.0,
        2.5,
    ]
    assert [float(x) for x in rows["anchor: coast"]] == [2.75, 2.75]
