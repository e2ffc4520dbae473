"""Secrets never reach a recording: URLs are kept without credentials or query strings.

Used wherever a URL is written down (the manifest, transport descriptions, log lines).
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def redact_url(url: str) -> str:
    """The URL without credentials or query string (tokens often travel there)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    query = "<redacted>" if parts.query else ""
    return urlunsplit((parts.scheme, host, parts.path, query, ""))
