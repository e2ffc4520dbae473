"""Untrusted text is shown as plain text, never as rich markup (issue #15 row 8).

A server's error message `[/]` used to end `rig run` with a MarkupError traceback, and
`rig report` on that run always crashed; markup in MQTT `run`/`rollout`/`target` broke the
dashboard. Every such string now reaches rich as `Text`, shown verbatim.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

from rich.console import Console

from rig.analysis.render import format_report
from rig.cli import main
from rig.clock import FakeClock
from rig.dashboard import Dashboard, render
from rig.reporting.summary import summary_table
from rig.telemetry import EventBus, Reducer, events
from rig.telemetry.events import TelemetryEvent

S = 1_000_000_000

HOSTILE = ["[/]", "[bold red]x[/bold red]", "[link=file:///etc]y", "[/nope]", "\\[z]"]


def _text(renderable: object) -> str:
    console = Console(record=True, width=200, color_system=None, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_summary_table_shows_markup_verbatim() -> None:
    rollouts = [
        {"rollout_id": h, "status": "protocol_error", "reason": f"server error: {h}"}
        for h in HOSTILE
    ]
    out = _text(summary_table(rollouts))
    for h in HOSTILE:
        assert h in out


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "[/]run"
    for i, h in enumerate(HOSTILE):
        d = run / "rollouts" / f"r{i}"
        d.mkdir(parents=True)
        m = {
            "status": "protocol_error",
            "reason": f"server error: {h}",
            "rollout_id": f"r{i}",
            "scenario": h,
            "item": h,
            "responses": [],
            "clock_fit": {"method": h, "reason": h},
        }
        (d / "metrics.json").write_text(json.dumps(m))
    (run / "rollouts" / "bad").mkdir()
    (run / "rollouts" / "bad" / "metrics.json").write_text("{")  # a problem line
    (run / "manifest.json").write_text(json.dumps({"run_id": "[/]"}))
    return run


def test_rig_report_on_a_run_with_markup_in_every_field(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # no wrapping inside the strings looked for
    run = _run_dir(tmp_path)
    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(["report", str(run)])
    assert code == 0
    out = buf.getvalue()
    assert "server error: [/]" in out
    assert "[bold red]x[/bold red]" in out
    text = format_report(__import__("rig.analysis.aggregate").analysis.aggregate.aggregate(run))
    assert "[/nope]" in text


def test_dashboard_renders_markup_from_the_broker_as_text() -> None:
    r = Reducer()
    for i, h in enumerate(HOSTILE):
        r.apply(events.status(h, f"{h}{i}", 1, "connecting", target=f"ws://x/{h}"))
        r.apply(events.status(h, f"{h}{i}", 2, "done", status=h, reason=h))
    snap = r.snapshot(10)
    for i, h in enumerate(HOSTILE):
        out = _text(render(snap, detail=f"{h}{i}"))
        assert f"{h}{i}" in out


async def test_headless_lines_show_markup_verbatim() -> None:
    clock = FakeClock(start_ns=1_000 * S)
    console = Console(record=True, width=300, color_system=None, file=io.StringIO())
    bus = EventBus()
    dash = Dashboard(bus, console=console, headless=True, clock=clock, summary_every_s=1.0)
    dash.start(pump=False)
    for i, h in enumerate(HOSTILE):  # as a broker delivers them: any state string
        data = {"state": h, "target": f"ws://x/{h}", "reason": h}
        bus.publish(TelemetryEvent("status", h, f"r{i}", clock.now_ns(), data))
    clock.advance(2 * S)
    dash.step()  # status lines, then a summary line with the states counted by name
    await dash.stop()
    out = console.export_text()
    assert "summary" in out and "[/]=1" in out and "[/nope]=1" in out
