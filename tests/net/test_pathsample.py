"""Round trips with no help from the server: TCP_INFO parsing, the syscalls on a real
loopback socket, and ping/pong + TCP_INFO through whole rollouts at the dialect fakes."""

from __future__ import annotations

import asyncio
import io
import socket
import struct

import pytest

from rig.net.tcpinfo import parse_tcp_info, read_tcp_info, send_queue_bytes
from tests.fakes.gemini_server import FakeGeminiServer
from tests.fakes.harness import run_rollouts, tone_plan
from tests.fakes.openai_server import FakeRealtimeServer
from tests.fakes.pipecat_server import FakePipecatServer


def test_parse_tcp_info_reads_linux_offsets() -> None:
    raw = bytearray(232)
    raw[0] = 1  # ESTABLISHED
    raw[2] = 3
    struct.pack_into("=I", raw, 68, 12_345)  # srtt µs
    struct.pack_into("=I", raw, 72, 678)  # rttvar
    struct.pack_into("=I", raw, 100, 9)  # total_retrans
    struct.pack_into("=I", raw, 144, 4_096)  # notsent
    struct.pack_into("=I", raw, 148, 11_000)  # min_rtt
    struct.pack_into("=Q", raw, 160, 250_000)  # delivery rate
    info = parse_tcp_info(bytes(raw))
    assert (info.state, info.retransmits, info.rtt_us, info.rttvar_us) == (1, 3, 12_345, 678)
    assert (info.total_retrans, info.notsent_bytes, info.min_rtt_us) == (9, 4_096, 11_000)
    assert info.delivery_rate_bps == 250_000
    old = parse_tcp_info(bytes(raw[:104]))  # an old kernel's shorter struct
    assert old.rtt_us == 12_345 and old.notsent_bytes is None and old.min_rtt_us is None
    with pytest.raises(ValueError, match="too short"):
        parse_tcp_info(bytes(raw[:60]))


def test_tcp_info_and_send_queue_on_a_real_loopback_connection() -> None:
    with socket.create_server(("127.0.0.1", 0)) as srv:
        cli = socket.create_connection(srv.getsockname())
        peer, _ = srv.accept()
        with cli, peer:
            for _ in range(20):
                cli.sendall(b"x" * 1000)
                peer.recv(65536)
            info = read_tcp_info(cli)
            assert info is not None and info.state == 1  # TCP_ESTABLISHED
            assert 0 < info.rtt_us < 50_000  # loopback
            assert info.min_rtt_us is not None and 0 < info.min_rtt_us <= info.rtt_us + 1
            assert send_queue_bytes(cli) == 0  # everything acked
            # the peer stops reading: the send queue fills and SIOCOUTQ sees it
            cli.setblocking(False)
            queued = 0
            try:
                while queued < 50_000_000:
                    queued += cli.send(b"y" * 65536)
            except BlockingIOError:
                pass
            outq = send_queue_bytes(cli)
            assert outq is not None and outq > 0
            # the GIL-keeping ioctl reads what fcntl's reads (the peer reads nothing: stable)
            import fcntl
            import struct

            from rig.net.tcpinfo import SIOCOUTQ

            raw = fcntl.ioctl(cli.fileno(), SIOCOUTQ, b"\0\0\0\0")
            assert struct.unpack("=i", raw)[0] == outq
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with udp:
        assert read_tcp_info(udp) is None


def _parts_add_up(r: dict) -> None:
    total = r["uplink_ms"] + r["model_ms"] + r["downlink_ms"] + r["queue_ms"]
    assert total == pytest.approx(r["latency_ms"], abs=0.01), r


@pytest.mark.realtime
async def test_rtt_and_split_in_every_rollout_at_the_dialect_fakes(tmp_path) -> None:
    async with (
        FakeRealtimeServer(reply_s=0.6) as oai,
        FakeGeminiServer(reply_s=0.6) as gem,
        FakePipecatServer(stop_secs=0.3, reply_s=0.6) as pc,
    ):
        rs = await run_rollouts(
            str(tmp_path),
            [
                ("openai", oai.url, "openai", {}, tone_plan(24_000, gap_s=2.0)),
                ("gemini", gem.url, "gemini", {}, tone_plan(16_000, gap_s=2.0)),
                ("pipecat", pc.url, "pipecat", {}, tone_plan(16_000, gap_s=2.0)),
            ],
        )
    for rid, r in rs.items():
        m = r.metrics
        assert m["status"] == "ok", (rid, m)
        pings = [e for e in r.find("net.rtt") if not e.get("lost")]
        ids = [e["id"] for e in pings]
        assert len(ids) >= 2 and len(set(ids)) == len(ids), (rid, ids)  # each its own id
        for e in pings:  # stamped at send and at pong arrival, on the one clock
            assert e["t_ns"] - e["t_send_ns"] == pytest.approx(e["rtt_ms"] * 1e6, abs=1e3)
            assert 0 < e["rtt_ms"] < 50, (rid, e)  # loopback
        tcp = r.find("net.tcp")
        assert len(tcp) >= 2 and all(0 < e["srtt_ms"] < 50 for e in tcp), (rid, tcp)
        assert all(e["backlog_bytes"] >= 0 for e in tcp)
        fit = m["clock_fit"]
        assert fit["rtt"]["source"] == "ws_ping" and fit["rtt"]["count"] == len(pings), rid
        assert set(fit["rtt_by_source"]) >= {"ws_ping", "tcp_info"}, rid
        assert fit["pings_lost"] == 0
        answered = [x for x in m["responses"] if x.get("latency_ms") is not None]
        assert answered, (rid, m["responses"])
        for x in answered:
            assert x["clock_method"] == "rtt_half" and x["rtt_source"] == "ws_ping", (rid, x)
            assert "symmetric" in x["split_assumption"]
            assert x["uplink_ms"] == pytest.approx(x["rtt_ms"] / 2, abs=0.01)
            assert x["model_err_ms"] is not None and x["uplink_err_ms"] >= x["rtt_ms"] / 2
            assert x["server_clock_reason"]  # why the stronger split could not be used
            _parts_add_up(x)


@pytest.mark.realtime
async def test_sampling_off_records_no_pings(tmp_path) -> None:
    from rig.runs.runner import RolloutSpec, Runner, RunnerSettings
    from rig.runs.specs import ws_factory
    from rig.session import SessionConfig

    async with FakePipecatServer(stop_secs=0.3, reply_s=0.3) as pc:
        plan = tone_plan(16_000, gap_s=1.0)
        spec = RolloutSpec(
            "off",
            plan,
            ws_factory(pc.url, "pipecat", 16_000, {}),
            {},
            {},
            SessionConfig(drain_quiet_s=0.5, max_s=10, path_interval_s=0.0),
        )
        runner = Runner(str(tmp_path), RunnerSettings(run_id="run", concurrency=1))
        await runner.run([spec])
        await asyncio.sleep(0)
    m = runner.results["off"]
    assert m["status"] == "ok"
    assert m["clock_fit"]["rtt"]["count"] == 0 and m["clock_fit"]["rtt_by_source"] == {}


def test_each_round_trip_is_published_live_with_its_method() -> None:
    from rig.core.records import EventRecord
    from rig.recordings.sink import RolloutSink

    class Disk:  # stands in for the writer thread: the records it was handed
        def __init__(self) -> None:
            self.events: list[EventRecord] = []

        def event(self, record: EventRecord) -> None:
            self.events.append(record)

    from rig.core.live import fields_of

    published: list[tuple[str, dict]] = []
    disk = Disk()
    sink = RolloutSink(disk, lambda e: published.append((e.kind, fields_of(e))))  # type: ignore[arg-type]
    sink.put(EventRecord("net.rtt", 5, {"source": "ws_ping", "id": 0, "rtt_ms": 12.5}, "rig"))
    sink.put(EventRecord("net.rtt", 6, {"source": "ws_ping", "id": 1, "lost": True}, "rig"))
    sink.put(EventRecord("server.rtcp.rr", 7, {"rtt_ms": 30.0, "fraction_lost": 0}, "server"))
    rtts = [d for k, d in published if k == "rtt"]
    assert rtts == [
        {"rtt_ms": 12.5, "method": "ws_ping", "t_ns": 5},
        {"rtt_ms": 30.0, "method": "rtcp", "t_ns": 7},
    ]
    assert len(disk.events) == 3  # every sample is in events.jsonl, lost pings included


@pytest.mark.realtime
async def test_live_view_gets_rtt_over_time_for_a_serverless_target(tmp_path) -> None:
    from rich.console import Console

    from rig.clock.base import MonotonicClock
    from rig.dashboard.render import detail_panel
    from rig.runs.runner import RolloutSpec, RunHooks, Runner, RunnerSettings
    from rig.runs.specs import ws_factory
    from rig.session import SessionConfig
    from rig.telemetry.bus import EventBus
    from rig.telemetry.session_bridge import session_publisher
    from rig.telemetry.snapshot import Reducer

    clock = MonotonicClock()
    bus = EventBus()
    sub = bus.subscribe()
    async with FakePipecatServer(stop_secs=0.3, reply_s=0.3) as pc:
        spec = RolloutSpec(
            "live",
            tone_plan(16_000, gap_s=1.5),
            ws_factory(pc.url, "pipecat", 16_000, {}),
            {},
            {},
            SessionConfig(drain_quiet_s=0.5, max_s=10, path_interval_s=0.2),
        )
        runner = Runner(
            str(tmp_path),
            RunnerSettings(run_id="run"),
            clock=clock,
            hooks=RunHooks(publish_factory=session_publisher(bus, "run", clock)),
        )
        await runner.run([spec])
    reducer = Reducer()
    for event in sub.drain():
        reducer.apply(event)
    (r,) = reducer.snapshot(clock.now_ns()).rollouts
    assert r.rtt_ms is not None and len(r.rtt_history_ms) >= 5, r
    assert all(0 < x < 50 for x in r.rtt_history_ms)  # loopback, every ping
    console = Console(file=io.StringIO(), width=120, color_system=None, record=True)
    console.print(detail_panel(r, 30 * 10**9))
    text = console.export_text()
    assert "RTT" in text and "ws_ping" in text and "last" in text, text
