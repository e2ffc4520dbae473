"""OpenTelemetry traces of a real run: the SDK's in-memory exporter, and `rig report --otel`
over OTLP/HTTP to a real receiver decoding the protobuf requests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.demorun import broken_copy, demo_run

pytest.importorskip("opentelemetry.sdk")
pytestmark = pytest.mark.realtime


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_run(tmp_path_factory)


def test_spans_in_memory(run: Path, tmp_path: Path) -> None:
    from opentelemetry.trace import StatusCode

    from rig.reporting.otel import build_spans

    spans = build_spans(broken_copy(run, tmp_path / "b"))
    roots = {s.attributes["rig.rollout_id"]: s for s in spans if s.name == "rig.rollout"}
    assert set(roots) == {"recipe", "weather", "what"}
    assert len({s.context.trace_id for s in roots.values()}) == 3  # a trace per rollout
    assert all(s.parent is None for s in roots.values())
    assert roots["recipe"].status.status_code is StatusCode.ERROR
    assert "connection refused" in (roots["recipe"].status.description or "")
    assert roots["weather"].attributes["rig.pass"] is False
    responses = [s for s in spans if s.name == "rig.response"]
    assert len(responses) == 2
    for resp in responses:
        a = resp.attributes
        root = roots[str(a["rig.rollout_id"])]
        assert resp.parent is not None and resp.parent.span_id == root.context.span_id
        assert resp.context.trace_id == root.context.trace_id
        # the span is the latency: turn end to onset, exactly (integer ns)
        assert abs((resp.end_time - resp.start_time) / 1e6 - a["rig.latency_ms"]) < 0.01
        for key in ("rig.uplink_ms", "rig.model_ms", "rig.downlink_ms", "rig.queue_ms",
                    "rig.uplink_err_ms", "rig.model_err_ms", "rig.status"):  # fmt: skip
            assert key in a, key
        assert root.start_time <= resp.start_time and resp.end_time <= root.end_time
        kids = [
            s for s in spans if s.parent is not None and s.parent.span_id == resp.context.span_id
        ]
        assert [k.name for k in kids] == ["rig.uplink", "rig.model", "rig.downlink", "rig.queue"]
        assert kids[0].start_time == resp.start_time
        assert abs(kids[-1].end_time - resp.end_time) < 5_000  # rounding, ns
    # epoch times: within the run's manifest start and end
    import json
    from datetime import datetime

    man = json.loads((run / "manifest.json").read_text())
    t_start = datetime.fromisoformat(man["started_utc"]).timestamp() * 1e9
    t_end = datetime.fromisoformat(man["ended_utc"]).timestamp() * 1e9
    for s in roots.values():
        assert t_start - 5e6 < s.start_time < s.end_time < t_end + 5e6


def _report(run: Path, endpoint: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
           "OTEL_EXPORTER_OTLP_TIMEOUT": "3"}  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "rig", "report", str(run), "--otel", "--no-rollouts"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip


def test_report_exports_over_otlp_http_to_a_real_receiver(run: Path) -> None:
    from tests.support.otlp import attributes, otlp_receiver, spans_of

    with otlp_receiver() as (endpoint, requests):
        r = _report(run, endpoint)
    assert r.returncode == 0, r.stderr
    spans = spans_of(requests)
    names = sorted(s.name for s in spans)
    assert names.count("rig.rollout") == 3 and names.count("rig.response") == 3
    assert names.count("rig.model") == 3
    resource = {
        kv.key: kv.value.string_value for kv in requests[0].resource_spans[0].resource.attributes
    }
    assert resource["service.name"] == "rig" and resource["rig.run_id"] == "demo"
    resp = next(s for s in spans if s.name == "rig.response")
    a = attributes(resp)
    assert a["rig.status"] == "ok" and 500 < a["rig.latency_ms"] < 1500
    assert (
        abs((resp.end_time_unix_nano - resp.start_time_unix_nano) / 1e6 - a["rig.latency_ms"])
        < 0.01
    )
    assert f"{len(spans)} spans to {endpoint}" in r.stdout


def test_a_refusing_endpoint_is_a_one_line_error(run: Path) -> None:
    from tests.support.otlp import otlp_receiver

    with otlp_receiver(status=400) as (endpoint, requests):
        r = _report(run, endpoint)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "did not take" in r.stderr.strip().splitlines()[-1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    r = subprocess.run([sys.executable, "-m", "rig", "report", str(run), "--otel"],
                       capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert r.returncode == 2 and "needs OTEL_EXPORTER_OTLP_ENDPOINT" in r.stderr
