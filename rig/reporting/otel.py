"""OpenTelemetry traces of a finished run: each rollout a trace, each response a span.

Built from the run directory after the run (never beside the audio loop), so rig's view of
a conversation sits next to the bot's own traces (Pipecat and LiveKit export OpenTelemetry).
Per rollout: a root span `rig.rollout` (t0 to the end of its recorded audio) with status,
reason, verdicts and transport health; per response a child `rig.response` from the user's
turn end to the system's onset (the latency), with the split as attributes and, when the
rollout has one, as four consecutive child spans `rig.uplink`, `rig.model`, `rig.downlink`,
`rig.queue`. A rollout that is not ok has an ERROR span status.

Times: rig stamps on CLOCK_MONOTONIC; spans need the epoch. The manifest's `started_utc` and
`started_ns` were read together at the run's start, so a span's wall time is
`started_utc + (t_ns - started_ns)`: durations are exact, absolute times carry the
millisecond of `started_utc` plus the gap between the two reads (well under 1 ms).

Exported with the SDK's OTLP/HTTP exporter to `OTEL_EXPORTER_OTLP_ENDPOINT` (or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, headers and timeout from the standard variables).
Needs the `otel` extra.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from rig.analysis.aggregate import COMPONENTS, load_run
from rig.analysis.tables import timing_reason
from rig.core.units import NS_PER_MS, NS_PER_S
from rig.errors import RigError
from rig.version import __version__

Attr = str | bool | int | float


class ExportError(RigError):
    """The OTLP endpoint did not take the spans."""


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _attrs(d: dict[str, Any]) -> dict[str, Attr]:
    """Only values OpenTelemetry attributes can hold; None and containers are left out."""
    return {k: v for k, v in d.items() if isinstance(v, str | bool | int | float)}


def _epoch_offset_ns(manifest: dict[str, Any] | None) -> int:
    """Add to a monotonic `t_ns` to get epoch ns (see the module doc); 0 if unknown."""
    if not manifest:
        return 0
    utc, mono = manifest.get("started_utc"), manifest.get("started_ns")
    if not isinstance(utc, str) or not isinstance(mono, int):
        return 0
    try:
        start = dt.datetime.fromisoformat(utc)
    except ValueError:
        return 0
    epoch_ns = round(start.timestamp() * 1e6) * 1000
    return epoch_ns - mono


def _get(d: Any, *path: str) -> Any:
    for p in path:
        d = d.get(p) if isinstance(d, dict) else None
    return d


def build_spans(run_dir: str | Path) -> list[ReadableSpan]:
    """Every span of the run, made with the SDK into its in-memory exporter."""
    data = load_run(run_dir)
    offset = _epoch_offset_ns(data.manifest)
    run_id = str((data.manifest or {}).get("run_id", data.run_dir.name))
    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create(
            {"service.name": "rig", "service.version": __version__, "rig.run_id": run_id}
        )
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("rig.report", __version__)
    for r in data.rollouts:
        m = r.metrics
        t0 = m.get("t0_ns")
        if not isinstance(t0, int):
            continue  # never started streaming (or no metrics): no time to place it at
        audio_s = _num(_get(m, "uplink", "audio_s")) or 0.0
        end = t0 + round(audio_s * NS_PER_S)
        onsets = [x.get("onset_ns") for x in m.get("responses") or [] if isinstance(x, dict)]
        end = max([end, *(o for o in onsets if isinstance(o, int))])
        valid = m.get("timing_valid")
        root_attrs = _attrs({
            "rig.run_id": run_id, "rig.rollout_id": r.rollout_id, "rig.status": r.status,
            "rig.reason": m.get("reason") or r.problem, "rig.scenario": m.get("scenario"),
            "rig.item": m.get("item"), "rig.pass": m.get("pass"), "rig.timing_valid": valid,
            "rig.rule": _get(m, "timing", "rule"), "rig.timing_reason": timing_reason(m),
            "rig.uplink.lateness_p99_ms": _get(m, "uplink", "lateness_ms", "p99"),
            "rig.uplink.stalls": _get(m, "uplink", "stalls"),
            "rig.clock_fit.method": _get(m, "clock_fit", "method"),
            "rig.rtt_p50_ms": _get(m, "clock_fit", "rtt", "rtt_p50_ms"),
            "rig.transport": _get(m, "transport", "kind"),
        })  # fmt: skip
        root = tracer.start_span(
            "rig.rollout", context=trace.set_span_in_context(trace.INVALID_SPAN),
            start_time=t0 + offset, attributes=root_attrs,
        )  # fmt: skip
        if r.status != "ok":
            root.set_status(
                Status(StatusCode.ERROR, f"{r.status}: {root_attrs.get('rig.reason', '')}")
            )
        ctx = trace.set_span_in_context(root)
        for resp in m.get("responses") or []:
            if isinstance(resp, dict):
                _response_span(tracer, ctx, resp, offset, r.rollout_id, r.status, valid)
        root.end(end_time=end + offset)
    provider.shutdown()
    return list(memory.get_finished_spans())


def _response_span(
    tracer: trace.Tracer, ctx: Any, resp: dict[str, Any], offset: int, rid: str,
    status: str, valid: Any,
) -> None:  # fmt: skip
    start, onset = resp.get("user_end_ns"), resp.get("onset_ns")
    if not isinstance(start, int) or not isinstance(onset, int):
        return
    attrs: dict[str, Any] = {
        "rig.rollout_id": rid, "rig.turn": resp.get("turn"), "rig.status": status,
        "rig.timing_valid": valid, "rig.latency_ms": resp.get("latency_ms"),
        "rig.clock_method": resp.get("clock_method"), "rig.placement": resp.get("placement"),
        "rig.rtt_ms": resp.get("rtt_ms"),
    }  # fmt: skip
    for c in COMPONENTS:
        stem = c[: -len("_ms")]
        attrs[f"rig.{stem}_ms"] = resp.get(c)
        attrs[f"rig.{stem}_err_ms"] = resp.get(f"{stem}_err_ms")
    for k, v in resp.items():  # what other issues add (network split, errors, ...)
        attrs.setdefault(f"rig.{k}", v)
    span = tracer.start_span("rig.response", context=ctx, start_time=start + offset,
                             attributes=_attrs(attrs))  # fmt: skip
    parts = [(c[: -len("_ms")], _num(resp.get(c))) for c in COMPONENTS]
    if all(v is not None for _, v in parts):
        sub = trace.set_span_in_context(span)
        t = start
        for stem, v in parts:
            dur = round((v or 0.0) * NS_PER_MS)
            err = _num(resp.get(f"{stem}_err_ms"))
            s = tracer.start_span(
                f"rig.{stem}", context=sub, start_time=t + offset,
                attributes=_attrs({f"rig.{stem}_ms": v, f"rig.{stem}_err_ms": err}),
            )  # fmt: skip
            t += max(dur, 0)
            s.end(end_time=t + offset)
    span.end(end_time=onset + offset)


def export_run(run_dir: str | Path, exporter: SpanExporter | None = None) -> int:
    """Export the run's spans (to OTEL_EXPORTER_OTLP_ENDPOINT by default); returns how many.
    Raises ExportError when the endpoint does not take them."""
    spans = build_spans(run_dir)
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    try:
        result = exporter.export(spans) if spans else SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    if result is not SpanExportResult.SUCCESS:
        raise ExportError(
            f"the OTLP endpoint did not take {len(spans)} spans (OTEL_EXPORTER_OTLP_ENDPOINT; "
            "the exporter's log says why)"
        )
    return len(spans)
