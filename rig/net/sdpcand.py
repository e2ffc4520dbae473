"""ICE candidates in SDP text, sans-I/O: read them, and point a description through a relay.

Why: `--impair` on WebRTC puts a UDP relay on the media path by editing the two descriptions
the rig carries between its peer and the far end (docs/network.md). The far end is told that
the rig's only candidate is the relay's far-facing socket; the rig's peer is told that the far
end's only candidate is the relay's rig-facing socket. ICE, DTLS and SRTP then run end to end
through the relay, unchanged (credentials and fingerprints are not touched), and every media
datagram crosses it. Only a BUNDLEd, rtcp-muxed session fits one relay flow (every browser,
aiortc and hosted stack does both); anything else is refused with that reason.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from rig.errors import ConfigError, ProtocolError


@dataclass(frozen=True, slots=True)
class Candidate:
    """One `a=candidate:` line (RFC 8839 section 5.1), the fields the relay needs."""

    foundation: str
    component: int
    transport: str  # "udp" | "tcp" (lower case)
    priority: int
    host: str
    port: int
    kind: str  # host | srflx | prflx | relay
    mid_index: int  # which m-section (0 = the first)


def _parse(line: str, mid_index: int) -> Candidate | None:
    parts = line[len("a=candidate:") :].split()
    try:
        typ = parts[parts.index("typ") + 1]
        comp, prio, port = int(parts[1]), int(parts[3]), int(parts[5])
        return Candidate(parts[0], comp, parts[2].lower(), prio, parts[4], port, typ, mid_index)
    except (ValueError, IndexError):
        return None  # a malformed or unknown-shape line: not a candidate we can use


def _sections(sdp: str) -> tuple[list[str], list[list[str]]]:
    """(session lines, [lines of each m-section]) without line ends."""
    lines = sdp.replace("\r\n", "\n").split("\n")
    while lines and not lines[-1]:
        lines.pop()
    head: list[str] = []
    media: list[list[str]] = []
    for ln in lines:
        if ln.startswith("m="):
            media.append([ln])
        elif media:
            media[-1].append(ln)
        else:
            head.append(ln)
    return head, media


def candidates(sdp: str) -> list[Candidate]:
    """Every parseable candidate of every m-section, in order."""
    _, media = _sections(sdp)
    out = []
    for i, sec in enumerate(media):
        for ln in sec:
            if ln.startswith("a=candidate:"):
                c = _parse(ln, i)
                if c is not None:
                    out.append(c)
    return out


def check_bundled(sdp: str, who: str) -> None:
    """ProtocolError unless the description BUNDLEs its m-sections and muxes RTCP."""
    head, media = _sections(sdp)
    if len(media) > 1 and not any(ln.startswith("a=group:BUNDLE") for ln in head):
        raise ProtocolError(f"{who} does not BUNDLE its media: one relay flow cannot carry it")
    for sec in media:
        if sec[0].startswith("m=audio") and "a=rtcp-mux" not in sec:
            raise ProtocolError(f"{who} does not multiplex RTCP (rtcp-mux): not relayable")


def pick_far(cands: list[Candidate], prefer_host: str | None) -> tuple[str, int]:
    """The far end's candidate the relay forwards to: UDP, component 1, IPv4, on the first
    m-section (the BUNDLE transport); the one on the target's own address if there is one,
    else the highest priority."""
    usable = [
        c
        for c in cands
        if c.transport == "udp" and c.component == 1 and c.mid_index == 0 and _ipv4(c.host)
    ]
    if not usable:
        raise ProtocolError(
            "the far end offered no IPv4 UDP candidate on its first media section: "
            "the impairment relay has nothing to forward to"
        )
    same = [c for c in usable if prefer_host is not None and c.host == prefer_host]
    best = max(same or usable, key=lambda c: c.priority)
    return best.host, best.port


def _ipv4(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).version == 4
    except ValueError:
        return False  # mDNS names (*.local) and IPv6 stay out


def route_through(sdp: str, host: str, port: int) -> str:
    """`sdp` with every m-section's candidates replaced by one UDP host candidate at
    host:port (the relay), and its connection line and m-line port to match."""
    if not _ipv4(host):
        raise ConfigError(f"relay address {host!r} is not an IPv4 address")
    head, media = _sections(sdp)
    out = list(head)
    for sec in media:
        had = any(ln.startswith("a=candidate:") for ln in sec)
        first = sec[0].split(" ")
        if had and len(first) > 1:
            first[1] = str(port)
        out.append(" ".join(first))
        placed = False
        for ln in sec[1:]:
            if ln.startswith("a=candidate:"):
                if not placed:
                    out.append(f"a=candidate:rigrelay 1 udp 2130706431 {host} {port} typ host")
                    placed = True
                continue
            if had and ln.startswith("c=IN IP4 "):
                out.append(f"c=IN IP4 {host}")
                continue
            out.append(ln)
    return "\r\n".join(out) + "\r\n"


__all__ = ["Candidate", "candidates", "check_bundled", "pick_far", "route_through"]
