"""rig report --html on a real run, rendered in headless Chromium: content, a screenshot of
the right size with the tracks drawn, no console errors, no network requests."""

from __future__ import annotations

import base64
import io
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.support.chromium import chromium_path, load
from tests.support.demorun import broken_copy, demo_run

pytestmark = pytest.mark.realtime


class Dom(HTMLParser):
    """Tags with their attributes, and the page's text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(html: str) -> Dom:
    d = Dom()
    d.feed(html)
    return d


def report_html(run: Path, out: Path, *args: str) -> Path:
    r = subprocess.run(
        [sys.executable, "-m", "rig", "report", str(run), "--html", str(out), *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode in (0, 1, 3), r.stderr
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chromium_path()
    return demo_run(tmp_path_factory)


def test_the_tripwire_sees_fetches_and_console_errors(tmp_path: Path) -> None:
    """The negative control: a page that fetches and logs is caught by both checks."""
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><img src="http://example.invalid/x.png">'
                    '<script>console.error("boom")</script>')  # fmt: skip
    got = load(page.as_uri(), "--dump-dom")
    assert "http://example.invalid/x.png" in got.requests
    assert any('"boom"' in line for line in got.console)


def test_html_report_renders_in_chromium(run: Path, tmp_path: Path) -> None:
    broken = broken_copy(run, tmp_path / "run")
    html = report_html(broken, tmp_path / "report.html", "--fail-under", "pass_rate=0.9")
    got = load(html.as_uri(), "--dump-dom")
    assert got.console == [] and got.requests == []
    dom = parse(got.stdout)
    text = " ".join(dom.text)
    assert "rig run demo" in text
    for heading in ("Summary", "Gates", "Per item", "Latency CDFs", "Latency split per response",
                    "Timing validity", "Rollouts"):  # fmt: skip
        assert heading in text, heading
    assert "pass_rate >= 0.9" in text and "FAILED" in text  # 1 of 2 evaluated passes
    assert "TransportError: connection refused" in text
    assert "turn_taking: every turn answered within 0.5 s <&>" in text  # escaped, shown
    svgs = [a for t, a in dom.tags if t == "svg"]
    assert sum(a.get("class") == "timeline" for a in svgs) == 3
    assert sum(a.get("class") == "cdf" for a in svgs) == 1
    assert sum(a.get("class") == "split" for a in svgs) == 2  # the errored rollout has none
    # audio players: every track embedded as a WAV that decodes to the recorded samples
    audio = [a["src"] for t, a in dom.tags if t == "audio" and a.get("src")]
    assert len(audio) == 6
    for src in audio:
        assert src.startswith("data:audio/wav;base64,")
        x, rate = sf.read(io.BytesIO(base64.b64decode(src.split(",", 1)[1])))
        assert rate == 16000 and len(x) > rate
    recorded, _ = sf.read(broken / "rollouts" / "what" / "user.wav")
    assert any(
        np.array_equal(sf.read(io.BytesIO(base64.b64decode(s.split(",", 1)[1])))[0], recorded)
        for s in audio
    )
    # nothing outside the page: every src/href is a data: URI or an in-page anchor
    for tag, attrs in dom.tags:
        for key in ("src", "href"):
            v = attrs.get(key)
            assert v is None or v.startswith(("data:", "#")), (tag, v)


def test_screenshot_shows_the_page(run: Path, tmp_path: Path) -> None:
    from PIL import Image

    html = report_html(run, tmp_path / "report.html")
    shot = tmp_path / "shot.png"
    got = load(html.as_uri(), f"--screenshot={shot}", "--window-size=1200,2600")
    assert got.console == [] and got.requests == []
    img = Image.open(shot).convert("RGB")
    assert img.size == (1200, 2600)
    px = np.asarray(img).reshape(-1, 3).astype(int)

    # the tracks are drawn: the system's red (#d62728) and the user's blue (#1f77b4), both
    # at opacity 0.75 over white
    def drawn(rgb: tuple[int, int, int]) -> int:
        want = np.array([0.75 * c + 0.25 * 255 for c in rgb])
        return int((np.abs(px - want).max(axis=1) < 20).sum())

    red, blue = drawn((0xD6, 0x27, 0x28)), drawn((0x1F, 0x77, 0xB4))
    assert red > 2000 and blue > 2000, (red, blue)
    assert len(np.unique(px[::7], axis=0)) > 50  # not a blank page


def test_linked_audio_is_relative_to_the_html_file(run: Path, tmp_path: Path) -> None:
    html = report_html(run, tmp_path / "out" / "r.html", "--html-audio", "link")
    srcs = re.findall(r'<audio[^>]* src="([^"]+)"', html.read_text())
    assert len(srcs) == 6 and all(not s.startswith(("data:", "/")) for s in srcs)
    assert all((html.parent / s).resolve().is_file() for s in srcs)
    small = report_html(run, tmp_path / "cap.html", "--html-embed-max-mb", "0.01")
    assert "audio linked, not embedded" in small.read_text()
    assert "data:audio" not in small.read_text()
