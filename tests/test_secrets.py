"""No secret in any output file or on stdout/stderr, for every URL form (issue #15 row 4).

Every form a user might type (`--target URL`, `--target=URL`, a key in the query, user:pass
in the authority, a token in the fragment, URLs websockets refuses, an MQTT password) goes
through `rig run`, then `rig report`; a grep over every file of the run directory and
everything printed finds no secret. A cross-origin redirect never carries a credential
header to the new origin.
"""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from websockets.asyncio.server import serve
from websockets.datastructures import Headers
from websockets.http11 import Response

from rig.cli import main
from rig.clock.base import MonotonicClock
from rig.dialects.gemini import GeminiDialect
from rig.errors import TransportError
from rig.recordings.manifest import redact_argv
from rig.redact import redact_text, redact_url
from rig.transports.websocket import WebSocketTransport
from tests.support.broker import MOSQUITTO, Broker
from tests.support.simproc import start_sim, stop_sim

SECRET = "S3CR3T"


@pytest.mark.parametrize(
    "url",
    [
        f"wss://h.example/v1?key={SECRET}a",
        f"wss://u:{SECRET}b@h.example:443/x",
        f"ws://h.example/#token={SECRET}c",
        f"ws://h.example:99999/?key={SECRET}d",  # a port urlsplit refuses
        f"ws://[::1/?key={SECRET}e",  # a broken IPv6 literal
        f"HTTPS://{SECRET}f@h.example?x=1",
        f"h.example:80/?key={SECRET}g",  # no scheme at all
        f"mqtts://u:{SECRET}h@broker:8883",
    ],
)
def test_redact_url_every_form(url: str) -> None:
    out = redact_url(url)
    assert SECRET not in out
    assert SECRET not in redact_text(f"error: could not connect to {url} (refused)")


def test_redact_argv_every_form() -> None:
    argv = [
        "rig",
        "run",
        "x.wav",
        "--target",
        f"wss://h/?key={SECRET}1",
        f"--target=wss://h/?key={SECRET}2",
        f"--mqtt=mqtts://u:{SECRET}3@h",
        "--api-key",
        f"{SECRET}4",
        f"--token={SECRET}5",
        "--dialect-opt",
        f"url=wss://h/?k={SECRET}6",
    ]
    out = redact_argv(argv)
    assert not any(SECRET in a for a in out), out
    assert out[:4] == ["rig", "run", "x.wav", "--target"]
    assert out[5].startswith("--target=wss://h/")


def _grep_tree(root: Path) -> list[str]:
    hits = []
    for p in root.rglob("*"):
        if p.is_file() and SECRET.encode() in p.read_bytes():
            hits.append(str(p.relative_to(root)))
    return hits


def _rig(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rig", *args],
        capture_output=True,
        text=True,
        timeout=90,
    )


@pytest.mark.realtime
@pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto binary not installed")
def test_no_secret_in_any_output_file_or_stdout(tmp_path) -> None:
    sim, url = start_sim("--latency-ms", "100", "--endpoint-silence-ms", "300", "--reply-s", "0.3")
    host_port = url.removeprefix("ws://")
    broker = Broker(tmp_path)
    broker.start()
    out = tmp_path / "out"
    forms: list[list[str]] = [
        # a working target with a key in the query, user:pass and a fragment token
        ["--target", f"ws://user:{SECRET}1@{host_port}/v1?key={SECRET}2#t={SECRET}3"],
        # --flag=URL forms, refused by websockets (wrong scheme) and by the kernel
        [f"--target=https://{host_port}/?key={SECRET}4"],
        [f"--target=wss://127.0.0.1:1/?key={SECRET}5"],
        ["--target", f"ws://127.0.0.1:99999/?api_key={SECRET}6"],
        ["--target", f"ws://[::1/?key={SECRET}7"],
        # the MQTT password in the URL, in the --flag=URL form
        ["--target", url, f"--mqtt=mqtt://rig:{SECRET}8@127.0.0.1:{broker.port}"],
    ]
    # an https:// target, port 99999 and a URL that does not parse: refused before anything
    # is written
    REFUSED = {1, 3, 4}
    printed = []
    try:
        for i, form in enumerate(forms):
            r = _rig(
                "run",
                "rig/data/turn_what.wav",
                *form,
                "--out",
                str(out),
                "--run-id",
                f"r{i}",
                "--headless",
                "--rt-priority",
                "0",
                "--max-s",
                "6",
            )
            assert "Traceback" not in r.stderr, r.stderr
            printed += [r.stdout, r.stderr]
            if i in REFUSED:  # a usage error (rig.cli.inputs), in one redacted line
                assert r.returncode == 2 and "--target" in r.stderr, r.stderr
                assert not (out / f"r{i}").exists()
                continue
            for report in (
                ["report", str(out / f"r{i}")],
                ["report", str(out / f"r{i}"), "--json"],
            ):
                buf, err = io.StringIO(), io.StringIO()
                with redirect_stdout(buf), redirect_stderr(err):
                    assert main(report) == 0
                printed += [buf.getvalue(), err.getvalue()]
    finally:
        broker.stop()
        stop_sim(sim)
    assert (out / "r0" / "rollouts" / "turn_what" / "metrics.json").exists()
    for i in set(range(len(forms))) - REFUSED:
        assert (out / f"r{i}" / "manifest.json").exists()
    leaks = [p for p in printed if SECRET in p]
    assert not leaks, leaks[0][:2000]
    assert _grep_tree(out) == []


def test_invalid_uri_is_a_transport_error_with_a_redacted_url() -> None:
    async def main() -> None:
        t = WebSocketTransport(
            f"https://h.example/?key={SECRET}", GeminiDialect(), MonotonicClock(), retries=0
        )
        with pytest.raises(TransportError) as info:
            await t.open()
        assert SECRET not in str(info.value)
        assert "h.example" in str(info.value)

    asyncio.run(main())


async def test_cross_origin_redirect_forwards_no_credential_header(monkeypatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", f"{SECRET}-gemini")
    seen: list[Headers] = []

    def record(connection, request):  # type: ignore[no-untyped-def]
        seen.append(request.headers)
        return Response(403, "Forbidden", Headers(), b"")

    async with serve(lambda ws: ws.wait_closed(), "127.0.0.1", 0, process_request=record) as other:
        other_port = other.sockets[0].getsockname()[1]

        def redirect(connection, request):  # type: ignore[no-untyped-def]
            h = Headers({"Location": f"ws://127.0.0.1:{other_port}/elsewhere"})
            return Response(302, "Found", h, b"")

        async with serve(
            lambda ws: ws.wait_closed(), "127.0.0.1", 0, process_request=redirect
        ) as first:
            port = first.sockets[0].getsockname()[1]
            t = WebSocketTransport(
                f"ws://127.0.0.1:{port}/", GeminiDialect(), MonotonicClock(), retries=0
            )
            with pytest.raises(TransportError) as info:
                await t.open()
    assert seen, "the redirect was not followed"
    for headers in seen:
        assert "x-goog-api-key" not in headers
        assert not any(SECRET in v for _, v in headers.raw_items())
    assert SECRET not in str(info.value)
