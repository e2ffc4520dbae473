"""Minimal Ogg pages for an Opus stream (RFC 3533 framing, RFC 7845 Opus mapping), sans-I/O.

How this works: `OggWriter.page(packets, granule)` lays whole packets into one page (lacing
values of 255 plus a remainder per packet) with the page CRC; the first call to `headers()`
gives the two mandatory pages (OpusHead with the beginning-of-stream flag, then OpusTags).
`OggReader.feed(data)` accepts any byte split, keeps partial pages and packets continued
across pages, and returns complete packets with the granule of the page that ended them.
Moshi streams Opus in Ogg pages over its WebSocket; this is the whole container it needs.
"""

from __future__ import annotations

import struct

from rig.errors import ProtocolError

_CAPTURE = b"OggS"
_HEADER = struct.Struct("<4sBBqIIIB")  # capture, version, flags, granule, serial, seq, crc, nseg


def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        r = i << 24
        for _ in range(8):
            r = ((r << 1) ^ 0x04C11DB7) if r & 0x80000000 else (r << 1)
        table.append(r & 0xFFFFFFFF)
    return table


_TABLE = _crc_table()


def crc32(data: bytes) -> int:
    """Ogg's CRC-32 (polynomial 0x04C11DB7, not reflected, init 0, no final xor)."""
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFFFFFF) ^ _TABLE[(crc >> 24) ^ byte]
    return crc


def opus_head(channels: int = 1, pre_skip: int = 312, input_rate: int = 24_000) -> bytes:
    return b"OpusHead" + struct.pack("<BBHIhB", 1, channels, pre_skip, input_rate, 0, 0)


def opus_tags(vendor: str = "rig") -> bytes:
    v = vendor.encode()
    return b"OpusTags" + struct.pack("<I", len(v)) + v + struct.pack("<I", 0)


class OggWriter:
    def __init__(self, serial: int) -> None:
        self.serial = serial & 0xFFFFFFFF
        self.seq = 0

    def page(self, packets: list[bytes], granule: int, *, bos: bool = False) -> bytes:
        lacing = bytearray()
        for p in packets:
            lacing += b"\xff" * (len(p) // 255) + bytes([len(p) % 255])
        if len(lacing) > 255:
            raise ValueError("too many packets for one Ogg page")
        flags = 0x02 if bos else 0x00
        head = _HEADER.pack(_CAPTURE, 0, flags, granule, self.serial, self.seq, 0, len(lacing))
        body = bytes(lacing) + b"".join(packets)
        crc = crc32(head + body)
        self.seq += 1
        return head[:22] + struct.pack("<I", crc) + head[26:] + body

    def headers(self, pre_skip: int = 312, input_rate: int = 24_000) -> bytes:
        return self.page([opus_head(1, pre_skip, input_rate)], 0, bos=True) + self.page(
            [opus_tags()], 0
        )


class OggReader:
    """Packets out of a byte stream of Ogg pages, checked against their CRC."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._partial = bytearray()
        self.pages = 0

    def feed(self, data: bytes) -> list[tuple[bytes, int]]:
        self._buf += data
        out: list[tuple[bytes, int]] = []
        while len(self._buf) >= _HEADER.size:
            if self._buf[:4] != _CAPTURE:
                raise ProtocolError("Ogg stream out of sync (no 'OggS' capture pattern)")
            _, version, _flags, granule, _serial, _seq, crc, nseg = _HEADER.unpack_from(self._buf)
            if version != 0:
                raise ProtocolError(f"unknown Ogg version {version}")
            if len(self._buf) < _HEADER.size + nseg:
                break
            lacing = self._buf[_HEADER.size : _HEADER.size + nseg]
            total = _HEADER.size + nseg + sum(lacing)
            if len(self._buf) < total:
                break
            page = bytes(self._buf[:total])
            del self._buf[:total]
            if crc32(page[:22] + b"\0\0\0\0" + page[26:]) != crc:
                raise ProtocolError("Ogg page CRC mismatch")
            self.pages += 1
            pos = _HEADER.size + nseg
            for lace in lacing:
                self._partial += page[pos : pos + lace]
                pos += lace
                if lace < 255:
                    out.append((bytes(self._partial), granule))
                    self._partial.clear()
        return out
