"""The reference system's ground-truth log: JSONL written by a thread, never by the loop."""

from __future__ import annotations

import json
import queue
import threading
from typing import Any, TextIO

_STOP = object()
#: one encoder for every line: json.dumps with separators builds a new one per call
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode


class TruthLog:
    """Lines of `{"event", "t_ns", ...}` on the true shared clock, flushed every batch."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        if path:
            self._f: TextIO = open(path, "a", encoding="utf-8")  # noqa: SIM115
            self._thread = threading.Thread(target=self._run, name="sim-truth", daemon=True)
            self._thread.start()

    @property
    def enabled(self) -> bool:
        """Whether lines are written (a caller may skip building one that is not)."""
        return self._thread is not None

    def write(self, event: str, t_ns: int, **fields: Any) -> None:
        if self._thread is not None:
            self._q.put({"event": event, "t_ns": t_ns, **fields})

    def _run(self) -> None:
        while True:
            item = self._q.get()
            batch = [item]
            while True:
                try:
                    batch.append(self._q.get_nowait())
                except queue.Empty:
                    break
            stop = False
            for it in batch:
                if it is _STOP:
                    stop = True
                else:
                    self._f.write(_ENCODE(it) + "\n")
            self._f.flush()
            if stop:
                self._f.close()
                return

    def close(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._q.put(_STOP)
            self._thread.join(5)


def read_truth(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
