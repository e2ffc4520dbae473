"""Reading a small /proc file from the audio loop's thread without letting go of the GIL.

Why: `open()` and `read()` each release the GIL around their syscalls; on the loop's thread
that hands the GIL to a helper thread that wants it (the recordings writer) and the loop then
waits to get it back (docs/pacing.md, tenth pass). A /proc read never blocks on I/O, so it is
made through libc's `pread` loaded with ctypes.PyDLL (which keeps the GIL), on a descriptor
opened once; /proc regenerates the file's text at offset 0 on every read.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from typing import Any


@functools.cache
def gil_keeping_libc() -> ctypes.CDLL | None:
    """libc loaded with ctypes.PyDLL: its calls keep the GIL, for the never-blocking syscalls
    made on the loop's thread (pread here, SIOCOUTQ in rig.net.tcpinfo, timerfd_settime in
    rig.clock.timer); None: not Linux, or no libc found."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.PyDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def _load_pread() -> Any:
    libc = gil_keeping_libc()
    try:
        fn = libc.pread if libc is not None else None
    except AttributeError:
        return None
    if fn is not None:
        fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long]
        fn.restype = ctypes.c_ssize_t
    return fn


_PREAD = _load_pread()


class ProcFile:
    """The first `size` bytes of one /proc file, read again on every `read()`."""

    def __init__(self, path: str, size: int = 512) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._buf = ctypes.create_string_buffer(size)

    def read(self) -> bytes:
        """The file's text from its start (at most `size` bytes); OSError if unreadable."""
        if self._fd < 0:
            raise OSError(f"{self.path}: closed")
        if _PREAD is None:
            return os.pread(self._fd, len(self._buf), 0)
        n = _PREAD(self._fd, self._buf, len(self._buf), 0)
        if n < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), self.path)
        return self._buf.raw[:n]

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass
