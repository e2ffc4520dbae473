"""Socket reads into one buffer per thread, not a fresh 256 KiB bytes object per read.

Why: asyncio's socket transport reads with `sock.recv(256 KiB)` when its protocol is a
plain `asyncio.Protocol` (websockets' connections are). CPython allocates the full 256 KiB
for the result and shrinks it to what came; glibc serves an allocation that large with
`mmap`, and the shrink and the free cost an `mremap` and a `munmap`: three system calls and
a page fault for every read of a 20 ms frame. strace of `rig sim` at 100 streams: 9 338
reads in 3 s, each with its mmap, mremap and munmap (issue #32, docs/pacing.md).

How this works: a connection class that also is an `asyncio.BufferedProtocol` is read with
`sock.recv_into` (asyncio's selector loop and its SSL layer check for it; uvloop reads any
`asyncio.Protocol` into its own loop buffer already, and never calls these). What
came is copied out as bytes (a frame's few hundred bytes) and handed to the connection's own
`data_received`, so the library sees exactly what it saw before. The buffer is only filled
and emptied within one read callback, so one per thread serves every connection of that
thread's loop (256 KiB per thread, not per connection: 200 streams would hold 50 MB).
`asyncio.BufferedProtocol` goes last among a class's bases, so its no-op `eof_received`
never shadows the connection's own (tests/transports check).
"""

from __future__ import annotations

import threading

#: what asyncio's selector transport asks the socket for per read (`max_size`)
READ_BYTES = 256 * 1024


class BufferedReads:
    """Mixin for a websockets connection: `get_buffer` / `buffer_updated` over one buffer,
    forwarded to `data_received`. Combine with `asyncio.BufferedProtocol` as the last base."""

    _read_view: memoryview | None = None

    def get_buffer(self, sizehint: int) -> memoryview:
        view = getattr(_THREAD, "view", None)
        if view is None or len(view) < sizehint:  # the SSL layer passes its read size
            view = _THREAD.view = memoryview(bytearray(max(READ_BYTES, sizehint)))
        self._read_view = view  # what this read fills, whatever another thread does
        return view

    def buffer_updated(self, nbytes: int) -> None:
        view = self._read_view
        assert view is not None
        self.data_received(bytes(view[:nbytes]))  # type: ignore[attr-defined]


_THREAD = threading.local()  # the read buffer of this thread's loop
