"""Hostile servers end to end over the rig dialect (issue #15 rows 5-8; the matrix over every
dialect and transport is the second pass): the status names the fault, chunks.jsonl holds
one row per chunk counted in metrics.json, and `rig report` and the summary finish."""

from __future__ import annotations

import io
import json
from contextlib import AsyncExitStack, redirect_stdout
from pathlib import Path

import pytest

from rig.audio.source import tone
from rig.cli import main
from rig.core.plan import PlanBuilder
from rig.dialects.rawpcm import RawPcmDialect
from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
from rig.session import SessionConfig
from rig.transports.websocket import WebSocketTransport
from tests.support.hostile import HostileServer

pytestmark = pytest.mark.realtime

EXPECTED = {
    "nested": "protocol_error",
    "huge_int": "protocol_error",
    "inf_ts": "protocol_error",
    "nan_event": "protocol_error",
    "big_ts": "protocol_error",
    "rate_huge": "protocol_error",
    "rate_zero": "protocol_error",
    "rate_bool": "protocol_error",
    "markup": "protocol_error",
    "hangup": "transport_error",
    "flood": "ok|timed_out",
}


def _spec(fault: str, url: str) -> RolloutSpec:
    plan = PlanBuilder(16_000).add_silence(0.2).add_turn(tone(300, 0.6, 16_000)).add_silence(0.6)

    def make(clock, gate):  # type: ignore[no-untyped-def]
        return WebSocketTransport(
            url, RawPcmDialect(16_000), clock, open_gate=gate, retries=0, ready_timeout_s=3
        )

    cfg = SessionConfig(drain_quiet_s=0.4, max_s=4.0)
    return RolloutSpec(fault, plan.build(), make, {"url": url}, {"item": fault}, cfg)


async def test_every_fault_is_named_and_nothing_recorded_is_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # the report table unwrapped
    async with AsyncExitStack() as stack:
        servers = {f: await stack.enter_async_context(HostileServer(f)) for f in EXPECTED}
        result = await Runner(
            str(tmp_path), RunnerSettings(run_id="h", concurrency=len(EXPECTED), analyze=False)
        ).run([_spec(f, s.url) for f, s in servers.items()])
    for fault, want in EXPECTED.items():
        m = result["results"][fault]
        assert m["status"] in want.split("|"), (fault, m["status"], m.get("reason"))
        d = tmp_path / "h" / "rollouts" / fault
        rows = [json.loads(x) for x in (d / "chunks.jsonl").read_text().splitlines()]
        assert not any("invalid" in r for r in rows), fault
        up = sum(r["dir"] == "up" for r in rows)
        down = sum(r["dir"] == "down" for r in rows)
        assert up == m.get("uplink", {}).get("frames", 0), fault
        assert down == m.get("downlink", {}).get("chunks", 0), fault
        for line in (d / "events.jsonl").read_text().splitlines():
            json.loads(line)
        assert json.loads((d / "metrics.json").read_text())["status"] == m["status"]
    assert "[/]" in result["results"]["markup"]["reason"]
    assert "sample rate" in result["results"]["rate_huge"]["reason"]
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["report", str(tmp_path / "h")]) == 0
    assert "protocol_error" in out.getvalue()
