"""Item tags (and the censored flag) in JUnit properties and the HTML rollout sections."""

from pathlib import Path

from rig.reporting.html import _rollout_section
from rig.reporting.junit import build_junit


def test_junit_cases_carry_tags_as_properties() -> None:
    rollouts = [
        {"rollout_id": "c1-pause", "scenario": "s", "status": "ok", "pass": True,
         "tags": {"conversation": "c1", "speaker": "A"}, "censored": True},
        {"rollout_id": "plain", "scenario": "s", "status": "ok", "pass": True},
    ]  # fmt: skip
    root = build_junit(rollouts)
    cases = {c.get("name"): c for c in root.iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases["c1-pause"].iter("property")}
    assert props == {"tag.conversation": "c1", "tag.speaker": "A", "censored": "true"}
    assert "tag.conversation=c1" in (cases["c1-pause"].find("system-out").text or "")
    assert cases["plain"].find("properties") is None


def test_html_rollout_section_shows_tags(tmp_path: Path) -> None:
    m = {"rollout_id": "r", "status": "ok", "tags": {"conversation": "c<1>"}, "censored": True}
    html = _rollout_section(m, tmp_path / "missing", "none", tmp_path)
    assert "conversation=c&lt;1&gt;" in html and "censored" in html
