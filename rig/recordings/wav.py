"""Append-only mono PCM16 WAV files that stay valid while they grow.

How this works: the 44-byte header is written first with the sizes of what is on disk, and
rewritten (two 4-byte fields) when the writer asks (`flush(header=True)`: every few batches
and at the end; docs/run-directory.md). A crash between a data write and the header update
leaves a header that under-counts by what came after it: every player opens the
file and plays what the header counts; `read_wav` repairs the count from the file size so
nothing appended is lost.
"""

from __future__ import annotations

import contextlib
import os
import struct
from typing import BinaryIO

import numpy as np
import soundfile as sf

from rig.audio.pcm import Pcm16
from rig.errors import AudioInputError

HEADER_BYTES = 44


def _header(sample_rate: int, data_bytes: int) -> bytes:
    return (
        b"RIFF"
        + struct.pack("<I", 36 + data_bytes)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
        + b"data"
        + struct.pack("<I", data_bytes)
    )


class WavAppender:
    """A growing mono PCM16 WAV file. Not thread-safe: owned by the writer thread."""

    def __init__(self, path: str, sample_rate: int) -> None:
        self.path = path
        self.sample_rate = sample_rate
        self._f: BinaryIO = open(path, "wb")  # noqa: SIM115 - owned for the file's life
        self._f.write(_header(sample_rate, 0))
        self.data_bytes = 0
        self._dirty = True

    @property
    def n_samples(self) -> int:
        return self.data_bytes // 2

    def append(self, pcm: Pcm16) -> None:
        data = np.asarray(pcm, dtype="<i2").tobytes()
        self._f.write(data)
        self.data_bytes += len(data)
        self._dirty = True

    def pad_to(self, n_samples: int) -> None:
        """Append silence up to `n_samples` (no-op when already that long)."""
        missing = n_samples - self.n_samples
        if missing > 0:
            self.append(np.zeros(missing, dtype=np.int16))

    def flush(self, header: bool = True) -> None:
        """Data first, then (with `header`) the header that counts it."""
        if not self._dirty:
            return
        self._f.flush()
        if not header:
            return
        self._f.seek(4)
        self._f.write(struct.pack("<I", 36 + self.data_bytes))
        self._f.seek(40)
        self._f.write(struct.pack("<I", self.data_bytes))
        self._f.seek(0, os.SEEK_END)
        self._f.flush()
        self._dirty = False

    def abandon(self) -> None:
        """Close after a write error: no more writes (the header counts what was flushed)."""
        if not self._f.closed:
            with contextlib.suppress(OSError):
                self._f.close()

    def close(self) -> None:
        if not self._f.closed:
            self.flush()
            os.fsync(self._f.fileno())
            self._f.close()


def read_wav(path: str) -> tuple[Pcm16, int]:
    """Read a rig WAV (mono PCM16), trusting the file size over a stale header. Anything
    that is not a usable WAV is an AudioInputError naming the file."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER_BYTES)
            if len(head) < HEADER_BYTES or head[:4] != b"RIFF" or head[36:40] != b"data":
                try:
                    data, rate = sf.read(path, dtype="int16", always_2d=True)
                except Exception as exc:  # noqa: BLE001 - soundfile raises its own types
                    raise AudioInputError(path, f"unsupported or broken WAV: {exc}") from None
                if not data.shape[1] or rate <= 0:
                    raise AudioInputError(path, "no channels or no sample rate")
                return np.ascontiguousarray(data[:, 0]), int(rate)
            sample_rate = struct.unpack("<I", head[24:28])[0]
            body = f.read()
    except OSError as exc:
        raise AudioInputError(path, f"cannot read: {exc.strerror}") from exc
    if sample_rate <= 0:
        raise AudioInputError(path, "header says 0 Hz")
    usable = len(body) - (len(body) % 2)
    return np.frombuffer(body[:usable], dtype="<i2").astype(np.int16), sample_rate


def stale_header(path: str) -> tuple[int, int] | None:
    """(bytes the header counts, bytes the file holds) when a crash left the header behind
    the data; None when it is current or the file is not a rig WAV. Read-only."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(HEADER_BYTES)
    except OSError:
        return None
    if len(head) < HEADER_BYTES or head[:4] != b"RIFF" or head[36:40] != b"data":
        return None
    counted = struct.unpack("<I", head[40:44])[0]
    held = size - HEADER_BYTES
    held -= held % 2
    return (counted, held) if counted != held else None


def repair_header(path: str) -> bool:
    """Rewrite a stale header in place from the file size (for tools that trust headers).

    Only for files whose rollout is over (a crashed run); returns True if it changed anything.
    """
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        head = f.read(HEADER_BYTES)
        if len(head) < HEADER_BYTES or head[36:40] != b"data":
            return False
        data_bytes = size - HEADER_BYTES
        data_bytes -= data_bytes % 2
        if struct.unpack("<I", head[40:44])[0] == data_bytes:
            return False
        f.seek(4)
        f.write(struct.pack("<I", 36 + data_bytes))
        f.seek(40)
        f.write(struct.pack("<I", data_bytes))
    return True
