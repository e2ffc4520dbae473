"""The HTML report as a newcomer sees it in headless Chromium: each audio player's name sits
directly above its own player, and the summary's response count is the CDF's n (rollouts
whose own timing failed are left out of both, not of one)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.support.chromium import chromium_path, load
from tests.support.cli import rig
from tests.support.demorun import demo_run

pytestmark = pytest.mark.realtime

#: appended to a copy of the page only: writes each track name's and player's box into the DOM
MEASURE = """<script>
const boxes = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
const names = [];
while (walker.nextNode()) {
  const t = walker.currentNode;
  if (/(user|system)\\.wav\\s*$/.test(t.textContent)) names.push(t);
}
const players = Array.from(document.querySelectorAll("audio"));
names.forEach((t, i) => {
  const r = document.createRange(); r.selectNodeContents(t);
  const a = r.getBoundingClientRect(), b = players[i].getBoundingClientRect();
  boxes.push({name: t.textContent.trim(), label: [a.left, a.top, a.right, a.bottom],
              player: [b.left, b.top, b.right, b.bottom]});
});
document.body.setAttribute("data-boxes", JSON.stringify(boxes));
</script>"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chromium_path()
    return demo_run(tmp_path_factory)


def test_each_track_name_is_directly_above_its_own_player(run: Path, tmp_path: Path) -> None:
    html = tmp_path / "report.html"
    r = rig("report", str(run), "--html", str(html))
    assert r.returncode == 0, r.stderr
    page = tmp_path / "measured.html"
    page.write_text(html.read_text().replace("</body>", MEASURE + "</body>"))
    got = load(page.as_uri(), "--dump-dom", "--window-size=1200,2600")
    m = re.search(r'data-boxes="([^"]*)"', got.stdout)
    assert m, got.stdout[-500:]
    boxes = json.loads(m.group(1).replace("&quot;", '"'))
    assert [b["name"] for b in boxes] == ["user.wav", "system.wav"] * 3
    for b in boxes:
        ll, lb, pl, pt = b["label"][0], b["label"][3], b["player"][0], b["player"][1]
        assert lb <= pt + 1, b  # the name is above its player, not beside or below it
        assert pt - lb < 12, b  # and right above it
        assert abs(ll - pl) < 2, b  # left-aligned with it


def test_summary_responses_are_the_cdfs_n(run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    for rid in ("recipe", "weather"):  # their own timing failed: left out of the aggregates
        path = copy / "rollouts" / rid / "metrics.json"
        metrics = json.loads(path.read_text())
        metrics["timing_valid"] = False
        path.write_text(json.dumps(metrics))
    html = tmp_path / "report.html"
    assert rig("report", str(copy), "--html", str(html)).returncode == 0
    text = html.read_text()
    summary = re.search(r"<td class=\"l\">responses</td><td class=\"l\">(\d+)</td>", text)
    assert summary and summary.group(1) == "1"
    assert "latency (n=1)" in text and "latency (n=3)" not in text
