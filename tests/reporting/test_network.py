"""`rig report`'s network tables and the split on the plot's timeline, from metrics dicts."""

from __future__ import annotations

import io

from rich.console import Console

from rig.analysis.rollout import responses_from_metrics
from rig.reporting.network import rtt_table, split_table

SPLIT = {
    "turn": 0,
    "user_end_ns": 2_000_000_000,
    "onset_ns": 2_700_000_000,
    "latency_ms": 700.0,
    "uplink_ms": 40.0,
    "uplink_err_ms": 44.0,
    "model_ms": 580.0,
    "model_err_ms": 3.5,
    "downlink_ms": 40.0,
    "downlink_err_ms": 44.0,
    "queue_ms": 40.0,
    "queue_err_ms": 0.0,
    "clock_method": "rtt_half",
    "rtt_source": "ws_ping",
    "rtt_ms": 80.0,
}
FIT = {
    "method": "none",
    "rtt": {"source": "ws_ping", "count": 9, "rtt_min_ms": 79.1, "rtt_p50_ms": 80.2},
    "rtt_by_source": {
        "ws_ping": {
            "source": "ws_ping",
            "count": 9,
            "rtt_min_ms": 79.1,
            "rtt_p50_ms": 80.2,
            "rtt_p95_ms": 84.0,
        },
        "tcp_info": {
            "source": "tcp_info",
            "count": 9,
            "rtt_min_ms": 0.03,
            "rtt_p50_ms": 18.0,
            "rtt_p95_ms": 19.9,
        },
    },
    "pings_lost": 1,
    "send_backlog": {"n": 9, "max_bytes": 1280, "max_t_ns": 5},
}


def _text(table: object) -> str:
    console = Console(file=io.StringIO(), width=200, color_system=None, record=True)
    console.print(table)
    return console.export_text()


def test_rtt_table_has_every_source_with_min_p50_p95() -> None:
    text = _text(rtt_table([{"rollout_id": "r0", "clock_fit": FIT}]))
    assert "ws_ping" in text and "tcp_info" in text
    assert "79.10" in text and "80.20" in text and "84.00" in text and "1280" in text
    assert rtt_table([{"rollout_id": "r0", "clock_fit": {"method": "none"}}]) is None


def test_split_table_names_the_method_and_errors() -> None:
    text = _text(split_table([{"rollout_id": "r0", "responses": [SPLIT, {"turn": 1}]}]))
    assert "580.0 ±3.5" in text and "40.0 ±44.0" in text
    assert "rtt_half (ws_ping, RTT 80.0)" in text
    assert split_table([{"rollout_id": "r0", "responses": [{"turn": 0}]}]) is None


def test_plot_view_carries_the_split_of_each_response() -> None:
    (r,) = responses_from_metrics({"responses": [SPLIT]}, 1_000_000_000)
    assert r.parts_ms == (40.0, 580.0, 40.0, 40.0) and r.method == "rtt_half"
    assert sum(r.parts_ms) == r.latency_ms
    bare = dict(SPLIT, model_ms=None)
    (r,) = responses_from_metrics({"responses": [bare]}, 1_000_000_000)
    assert r.parts_ms == ()  # not split: no bar, only the latency arrow
