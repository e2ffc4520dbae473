"""A pseudo-terminal of a real size for tests: a child gets it as its terminal, the test
reads what is drawn on it and types into it."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pty
import re
import struct
import termios
from collections.abc import Iterator

ANSI = re.compile(rb"\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07]*\x07|[()][0-9A-Za-z]|[=>78])")


class Pty:
    """A pseudo-terminal of a real size; `as_stdio()` lends it to a child as fds 0-2."""

    def __init__(self, cols: int = 140, rows: int = 45) -> None:
        self.master, self.slave = pty.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.set_blocking(self.master, False)
        self.output = b""

    @contextlib.contextmanager
    def as_stdio(self) -> Iterator[None]:
        saved = [os.dup(fd) for fd in (0, 1, 2)]
        try:
            for fd in (0, 1, 2):
                os.dup2(self.slave, fd)
            yield
        finally:
            for fd, s in zip((0, 1, 2), saved, strict=True):
                os.dup2(s, fd)
                os.close(s)

    def read(self) -> str:
        """Everything drawn so far, escape sequences (colours, cursor moves) removed."""
        with contextlib.suppress(BlockingIOError, OSError):
            while data := os.read(self.master, 65536):
                self.output += data
        return ANSI.sub(b"", self.output).decode(errors="replace")

    async def wait_for(self, text: str, timeout_s: float = 10.0) -> str:
        loop = asyncio.get_running_loop()
        got = asyncio.Event()
        loop.add_reader(self.master, lambda: got.set())
        try:
            async with asyncio.timeout(timeout_s):
                while text not in self.read():
                    got.clear()
                    await got.wait()
        finally:
            loop.remove_reader(self.master)
        return self.read()

    def close(self) -> None:
        os.close(self.slave)
        os.close(self.master)
