"""Secrets out of everything the rig writes or prints (sans-I/O).

Tokens travel in URLs (`?key=`, `user:pass@`, `#token=`), in argv (`--api-key K`,
`--target=wss://...?key=`) and in credential-looking fields. One module decides what is
secret, so the manifest, metrics reasons, progress lines, events, telemetry and the proxy all
redact the same way:
  URLs      keep scheme, host, port and path; userinfo is dropped, a query or fragment becomes
            `<redacted>`. A string that does not parse as a URL (bad port, broken IPv6) keeps
            only its scheme and `<redacted>`; one with no scheme loses everything after `?`,
            `#` and before `@`.
  text      every `scheme://...` run inside free text (error messages) is redacted as a URL,
            and so is the value of every `api_key=...`-like pair
  objects   keys that look like credentials (`api_key`, `token`, `password`...) lose their
            value; strings are redacted as text
  argv      values after secret-looking flags are dropped; `--flag=URL` and bare URLs are
            redacted as URLs
  headers   `is_credential_header` names the handshake headers that carry credentials, so a
            redirect to another origin never carries them
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

SECRET_KEY = re.compile(r"(key|token|secret|passw|auth|credential|bearer|cookie)", re.I)
URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.I)
URL_IN_TEXT = re.compile(r"[a-z][a-z0-9+.-]*://[^\s'\"<>`]+", re.I)
REDACTED = "<redacted>"
SECRET_PAIR = re.compile(
    r"([\w.-]*(?:key|token|secret|passw|auth|credential|bearer|cookie)[\w.-]*)=(?!<redacted>)[^\s&#'\"<>]+",
    re.I,
)
CREDENTIAL_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "x-api-key", "x-goog-api-key", "api-key"}
)


def redact_url(url: str) -> str:
    """The URL without userinfo; a query or fragment becomes `<redacted>`. Never raises."""
    if not URL.match(url):
        return _redact_schemeless(url)
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if ":" in host:  # an IPv6 literal
            host = f"[{host}]"
        port = parts.port
    except ValueError:  # a port out of range, a broken IPv6 literal...
        scheme = url.split("://", 1)[0]
        return f"{scheme}://{REDACTED}"
    if port:
        host = f"{host}:{port}"
    query = REDACTED if parts.query else ""
    out = urlunsplit((parts.scheme, host, parts.path, query, ""))
    return out + (f"#{REDACTED}" if parts.fragment else "")


def _redact_schemeless(text: str) -> str:
    """`host:port/path` kept; `user:pass@` and anything after `?` or `#` dropped."""
    cut = min((i for i in (text.find("?"), text.find("#")) if i >= 0), default=len(text))
    head, tail = text[:cut], text[cut:]
    if "@" in head:
        head = head.rsplit("@", 1)[1]
    return head + (REDACTED if tail else "")


def redact_text(text: str) -> str:
    """Free text (an error message) with every URL in it redacted, and the value of every
    `name=value` whose name looks like a credential (`api_key=...` outside a URL)."""
    if "://" in text:
        text = URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
    if "=" in text:
        text = SECRET_PAIR.sub(lambda m: f"{m.group(1)}={REDACTED}", text)
    return text


def redact(obj: Any) -> Any:
    """A copy of a JSON-like object with credential-looking keys and URL secrets removed."""
    if isinstance(obj, dict):
        return {
            k: (REDACTED if isinstance(k, str) and SECRET_KEY.search(k) and v else redact(v))
            for k, v in obj.items()
        }
    if isinstance(obj, list | tuple):
        return [redact(v) for v in obj]
    if isinstance(obj, str):
        return redact_url(obj) if URL.match(obj) else redact_text(obj)
    return obj


def redact_urls(obj: Any) -> Any:
    """A copy with URL secrets removed from every string (keys untouched: for recorded
    events, where a key like `input_tokens` is data, not a credential)."""
    if isinstance(obj, dict):
        return {k: redact_urls(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [redact_urls(v) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


def redact_argv(argv: Sequence[str]) -> list[str]:
    """argv for the manifest: secret flags' values dropped, URLs redacted in every form."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, eq, value = arg.partition("=")
        if flag.startswith("-") and SECRET_KEY.search(flag):
            out.append(f"{flag}={REDACTED}" if eq else flag)
            hide_next = not eq
            continue
        if flag.startswith("-") and eq:
            out.append(f"{flag}={_redact_value(value)}")
            continue
        out.append(_redact_value(arg))
    return out


def _redact_value(value: str) -> str:
    """An argv value: a URL, or `name=URL` (dialect options), or text holding URLs."""
    if URL.match(value):
        return redact_url(value)
    name, eq, rest = value.partition("=")
    if eq and SECRET_KEY.search(name):
        return f"{name}={REDACTED}"
    if eq and URL.match(rest):
        return f"{name}={redact_url(rest)}"
    return redact_text(value)


def is_credential_header(name: str) -> bool:
    """Does this HTTP header carry a credential (never sent to another origin)?"""
    low = name.lower()
    return low in CREDENTIAL_HEADERS or bool(SECRET_KEY.search(low))
