"""The floor client's recorder (bench/floorclient.py): every frame, both directions, one JSON
line and its PCM, written by a thread so the event loop never waits on disk (as a recording
client must), and its CPU still counted in the client's (RUSAGE_SELF covers every thread).
"""

from __future__ import annotations

import array
import os
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from floorserver import HEADER

#: a record: direction, stream, seq, t_ns, deadline_ns (None: read it from the frame), PCM
Record = tuple[str, int, int, int, int | None, bytes]


class Recorder:
    """The loop hands each frame over as a tuple; a thread formats and writes it (one JSON
    line in frames.jsonl, the PCM appended to {up,down}-{stream}.pcm) and keeps lateness."""

    def __init__(self, out_dir: str, streams: int) -> None:
        self.out_dir = out_dir
        self.streams = streams
        self.q: queue.SimpleQueue[Record | None] = queue.SimpleQueue()
        self.late_ns = {"up": array.array("q"), "down": array.array("q")}
        self.thread = threading.Thread(target=self._run, name="floor-writer", daemon=True)
        self.thread.start()
        self.put = self.q.put

    def _run(self) -> None:
        pcm = {
            (d, k): open(os.path.join(self.out_dir, f"{d}-{k}.pcm"), "wb")
            for d in ("up", "down")
            for k in range(self.streams)
        }
        with open(os.path.join(self.out_dir, "frames.jsonl"), "w", encoding="ascii") as lines:
            while True:
                batch = [self.q.get()]
                with _suppress_empty():
                    while True:
                        batch.append(self.q.get_nowait())
                out = []
                for rec in batch:
                    if rec is None:
                        lines.write("".join(out))
                        for f in pcm.values():
                            f.close()
                        return
                    d, k, seq, t_ns, due_ns, data = rec
                    if due_ns is None:
                        due_ns = HEADER.unpack_from(data)[1]
                    late = t_ns - due_ns
                    self.late_ns[d].append(late)
                    out.append(
                        f'{{"dir":"{d}","stream":{k},"seq":{seq},"t_ns":{t_ns},'
                        f'"deadline_ns":{due_ns},"lateness_ns":{late}}}\n'
                    )
                    pcm[d, k].write(data)
                lines.write("".join(out))

    def close(self) -> None:
        self.q.put(None)
        self.thread.join()


@contextmanager
def _suppress_empty() -> Iterator[None]:
    try:
        yield
    except queue.Empty:
        pass
