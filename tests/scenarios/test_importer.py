"""`rig import`: a points table (CSV or JSONL) becomes a scenario suite that the scenario
file's own validation accepts; the two formats give the same suite; a bad point is one line
naming its row and column, and nothing is written."""

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from rig.errors import ScenarioError
from rig.scenarios.fileformat import load_scenario_file
from rig.scenarios.importer import read_points, suite_document

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "corpus"


def rig(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rig", *args], capture_output=True, text=True, timeout=60
    )


def test_csv_and_jsonl_give_the_same_suite(tmp_path) -> None:
    docs = {}
    for ext in ("csv", "jsonl"):
        out = tmp_path / ext / "suite.toml"
        out.parent.mkdir()
        r = rig("import", str(CORPUS / f"points.{ext}"), "-o", str(out))
        assert r.returncode == 0, r.stderr
        assert "4 items" in r.stdout
        docs[ext] = tomllib.loads(out.read_text())
        items = load_scenario_file(str(out), 16_000)  # paths relative to the suite file
        assert [i.meta["tags"]["conversation"] for i in items] == ["c1", "c1", "c2", "c2"]
    assert docs["csv"]["items"] == docs["jsonl"]["items"]
    first = docs["csv"]["items"][0]
    assert first["options"] == {"silence_duration_ms": 300}
    assert first["steps"][0]["channel"] == 0 and first["steps"][1]["wait_first_s"] == 2.0


def test_an_existing_suite_is_not_overwritten(tmp_path) -> None:
    out = tmp_path / "s.toml"
    out.write_text("keep")
    r = rig("import", str(CORPUS / "points.csv"), "-o", str(out))
    assert r.returncode == 2 and "exists (--force overwrites it)" in r.stderr
    assert out.read_text() == "keep"


BAD_ROWS = [
    ({"marks": [{"kind": "eot", "t_s": 99}]}, "row 2 (p): marks[0].t_s: 99 s is past the end"),
    ({"channel": 5}, "row 2 (p): channel: no channel 5"),
    ({"tags": {"conversation": 3}}, "row 2 (p): tags.conversation: must be a string"),
    ({"drain_wait_first_s": -1}, "row 2 (p): drain_wait_first_s: must be >= 0"),
    ({"when": 1}, "row 1: when: unknown column"),
]


@pytest.mark.parametrize(("extra", "message"), BAD_ROWS)
def test_a_bad_point_names_its_row_and_column(tmp_path, extra, message) -> None:
    shutil.copy(CORPUS / "c1.flac", tmp_path / "c1.flac")
    row = {"id": "p", "audio": "c1.flac", "start_s": 0.1, "end_s": 2.0, **extra}
    if "when" not in extra:  # JSONL rows are numbered from 1; a header makes CSV's start at 2
        (tmp_path / "points.jsonl").write_text(
            "{}\n".replace("{}", json.dumps({"id": "q", "audio": "c1.flac"}))
            + json.dumps(row)
            + "\n"
        )
    else:
        (tmp_path / "points.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(ScenarioError) as exc:
        suite_document(
            read_points(str(tmp_path / "points.jsonl")),
            str(tmp_path / "points.jsonl"),
            str(tmp_path / "s.toml"),
        )
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_csv_cells_are_typed_and_checked(tmp_path) -> None:
    shutil.copy(CORPUS / "c1.flac", tmp_path / "c1.flac")
    p = tmp_path / "points.csv"
    p.write_text(
        "id,audio,channel,start_s,end_s,marks,tag.conversation,opt.voice\n"
        'a,c1.flac,mean,0.1,2,"[{""kind"": ""eot"", ""t_s"": 1.5}]",17,alloy\n'
        "b,c1.flac,1,zero,2,,c1,\n"
    )
    with pytest.raises(ScenarioError, match="row 3: start_s: must be a number, got 'zero'"):
        read_points(str(p))
    p.write_text(p.read_text().replace("zero", "0.5"))
    doc = suite_document(read_points(str(p)), str(p), str(tmp_path / "s.toml"))
    a, b = doc["items"]
    assert a["tags"] == {"conversation": "17"} and a["options"] == {"voice": "alloy"}
    assert a["steps"][0]["channel"] == "mean" and b["steps"][0]["channel"] == 1
    assert a["steps"][0]["marks"] == [{"kind": "eot", "t_s": 1.5}]
