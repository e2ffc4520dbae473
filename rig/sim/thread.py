"""The reference system on its own event loop in a background thread (`rig demo`, tests).

Apart from rig.sim.server so the server module holds the protocol only.
"""

from __future__ import annotations

import asyncio
import threading

from rig.sim.server import SimServer


class SimThread:
    """The reference system on its own event loop in a background thread (`rig demo`)."""

    def __init__(self, server: SimServer, host: str = "127.0.0.1", port: int = 0) -> None:
        self.server = server
        self.host = host
        self.port = port
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="rig-sim", daemon=True)
        self._error: BaseException | None = None

    def start(self, timeout_s: float = 10.0) -> str:
        self._thread.start()
        if not self._ready.wait(timeout_s) or self._error:
            raise RuntimeError(f"reference system did not start: {self._error}")
        return self.url

    def _run(self) -> None:
        async def main() -> None:
            self._stop = asyncio.Event()
            try:
                self.url = await self.server.start(self.host, self.port)
            except BaseException as exc:
                self._error = exc
                self._ready.set()
                raise
            self._ready.set()
            await self._stop.wait()
            await self.server.stop()

        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(main())
        finally:
            self._loop.close()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)
