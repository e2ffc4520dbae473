"""Headless Chromium for page tests: the DOM after load, a screenshot, console messages and
every network request the page makes.

Chromium runs with a fresh profile and an HTTP proxy on loopback that answers 404 to
everything and records what was asked: a page that fetches anything shows up there (the
browser's own background requests to its vendor's service hosts are set apart). Console
messages come from `--enable-logging=stderr` (`CONSOLE` lines).
"""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass

import pytest

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--enable-logging=stderr", "--v=0",
)  # fmt: skip
#: hosts Chromium itself talks to (time, updates, accounts), never the page under test
BROWSER_OWN = ("google.com", "googleapis.com", "gvt1.com", "gstatic.com")


def chromium_path() -> str:
    """The browser, or skip (fail under CI=true: scripts/setup --test installs it)."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (scripts/setup --test installs it)")
        pytest.skip("chromium is not installed (Debian package `chromium`)")
    return path


@dataclass
class PageLoad:
    stdout: str
    console: list[str]
    requests: list[str]


class _Tripwire(http.server.BaseHTTPRequestHandler):
    seen: list[str]

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.seen.append(self.path)
        self.send_response(404)
        self.end_headers()

    def do_CONNECT(self) -> None:  # noqa: N802
        self.seen.append(f"CONNECT {self.path}")
        self.send_response(502)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return


def load(url: str, *extra: str, timeout_s: float = 90.0) -> PageLoad:
    """Open `url` once with `extra` flags (--dump-dom, --screenshot=...)."""
    seen: list[str] = []
    handler = type("Tripwire", (_Tripwire,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    profile = tempfile.mkdtemp(prefix="rig-chromium-")
    try:
        proc = subprocess.run(
            [chromium_path(), *FLAGS, f"--user-data-dir={profile}",
             f"--proxy-server=http://127.0.0.1:{server.server_port}",
             "--proxy-bypass-list=<-loopback>", *extra, url],
            capture_output=True, text=True, timeout=timeout_s,
        )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
        shutil.rmtree(profile, ignore_errors=True)
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    own = [r for r in seen if any(h in r for h in BROWSER_OWN)]
    return PageLoad(proc.stdout, console, [r for r in seen if r not in own])
