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
import errno
import os
import struct
from typing import BinaryIO

import numpy as np
import soundfile as sf

from rig.audio.pcm import Pcm16
from rig.errors import AudioInputError

HEADER_BYTES = 44
_LE_I2 = np.dtype("<i2")


def write_all(f: BinaryIO, data: bytes) -> None:
    """An unbuffered file may take part of `data`: write the rest (or raise)."""
    view = memoryview(data)
    while view:
        n = f.write(view)
        if not n:
            raise OSError(errno.EIO, "short write", getattr(f, "name", None))
        view = view[n:]


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
        # unbuffered: appends are gathered here and written once per flush
        self._f: BinaryIO = open(path, "wb", buffering=0)  # noqa: SIM115 - owned for its life
        write_all(self._f, _header(sample_rate, 0))
        self._pending: list[memoryview] = []  # appended, not yet written
        self.data_bytes = 0  # appended (written or pending)
        self._dirty = True

    @property
    def n_samples(self) -> int:
        return self.data_bytes // 2

    def append(self, pcm: Pcm16) -> None:
        """Keep `pcm` (the caller's copy: not changed afterwards) for the next flush."""
        if pcm.dtype != _LE_I2 or not pcm.flags.c_contiguous:
            pcm = np.ascontiguousarray(pcm, dtype=_LE_I2)
        self._pending.append(pcm.data)
        self.data_bytes += pcm.nbytes
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
        if self._pending:
            data, self._pending = b"".join(self._pending), []
            write_all(self._f, data)
        if not header:
            return
        # one positioned write of the whole header: no seeks, the append position stays
        # (the file is not O_APPEND, where Linux would append a pwrite instead)
        os.pwrite(self._f.fileno(), _header(self.sample_rate, self.data_bytes), 0)
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
