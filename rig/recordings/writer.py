"""The recordings writer: one thread that owns every file of a run.

How this works: the audio event loop never touches the disk. Session code calls the
`RolloutRecorder` methods, which only put a tuple on a thread-safe queue (no lock, no I/O,
O(1); a frame's records together are one item: `RolloutSink.put_all`). The writer thread
wakes for an item, lets `batch_window_s` (10 ms) of items gather, drains them as one batch
and appends them to each rollout's buffers. A rollout's files are flushed `flush_every_s`
(100 ms) after their first unwritten record, and at once before a barrier, its metrics and
its close: one write per file per flush, whole JSON lines, so a SIGKILL loses at most the
last ~0.1 s of records and never leaves a broken line. WAV headers are rewritten at every
`header_every`-th flush (1) and at the end, one `pwrite` each (a crash leaves a header that
under-counts by at most one flush; readers trust the file size, `rig report --repair-wav`
fixes it). Why: per-chunk flushes cost ~10 syscalls each and the GIL the loop needs; at 50
rollouts the writer thread was the largest CPU user of the rig (py-spy, docs/pacing.md), and
at 100-200 rollouts half of its time was the write syscalls of a flush every 10 ms batch
(perf; side by side in `bench/capacity.py --writer`, docs/pacing.md).

The queue is unbounded on purpose: a slow disk must never stall the audio loop, and a run
must never drop what it heard. The backlog (items queued, not yet written) is measured; the
high-water mark and any time above `warn_backlog` are reported as events and in metrics.

A failing disk (ENOSPC, EFBIG, EACCES, EIO...) never kills the thread: the first `OSError` of
a rollout is recorded against that rollout (`rollout_error(dir)`, naming the file and the
errno), its files are closed and its later items are dropped (counted), and everything else
goes on: other rollouts, barriers, the run. The runner marks such a rollout `write_error`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from rig.audio.pcm import Pcm16, level_dbfs
from rig.clock.base import MonotonicClock
from rig.core.records import ChunkRecord, EventRecord
from rig.recordings.jsonwrite import _json_line, describe_os_error, write_json_atomic
from rig.recordings.levels import FrameLevels
from rig.recordings.lines import UP_LINE, chunk_line
from rig.recordings.wav import WavAppender, write_all
from rig.redact import redact_urls

_STOP = object()


@dataclass
class _RolloutFiles:
    dir: str
    chunks: BinaryIO
    events: BinaryIO
    chunk_lines: list[str]
    event_lines: list[str]
    user: WavAppender
    system: WavAppender | None
    flushes: int = 0
    received: WavAppender | None = None
    clean: WavAppender | None = None  # user_clean.wav: the user track before frame hooks
    #: derived tracks by name (`<name>.wav`: TrackAudio records, e.g. echo.wav)
    tracks: dict[str, WavAppender] = field(default_factory=dict)


#: errnos that mean the whole file system is out of room: the runner stops starting rollouts
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


class RecordingWriter:
    """The writer thread of a run. Start once; `close()` drains and joins."""

    def __init__(
        self,
        warn_backlog: int = 5_000,
        write_delay_s: float = 0.0,
        batch_window_s: float = 0.01,
        flush_every_s: float = 0.1,
        header_every: int = 1,
    ) -> None:
        self.batch_window_s = batch_window_s
        self.flush_every_s = flush_every_s
        self._clock = MonotonicClock()  # when a rollout's oldest unwritten record came
        self.header_every = max(1, header_every)
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._files: dict[str, _RolloutFiles] = {}
        self._thread = threading.Thread(target=self._run, name="rig-writer", daemon=True)
        # the backlog without a lock on the hot path: hand-offs counted by the putting side
        # (`next()` on a count is atomic under the GIL), items written by the writer alone
        self._puts = itertools.count(1)
        self._put_n = 0
        self._done = 0
        self.high_water = 0
        self.warn_backlog = warn_backlog
        self.write_delay_s = write_delay_s  # test hook: simulate a slow disk
        self.errors: list[str] = []
        #: rollout dir -> the first write error there (str), and its errno (for disk-full)
        self._rollout_errors: dict[str, str] = {}
        self._rollout_errnos: dict[str, int | None] = {}
        self.dropped_after_error = 0  # items of failed rollouts that were not written
        self._started = False
        self.frame_levels = FrameLevels()  # plain frames' levels from their tracks' tables

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._thread.start()

    @property
    def backlog(self) -> int:
        """Hand-offs queued and not yet written (one per `put`: a frame's records are one)."""
        return max(0, self._put_n - self._done)

    def put(self, item: tuple[Any, ...]) -> None:
        n = self._put_n = next(self._puts)
        self._q.put(item)
        pending = n - self._done
        if pending > self.high_water:
            self.high_water = pending

    def rollout(self, rollout_dir: str, user_rate: int) -> RolloutRecorder:
        """Open a rollout's files. system.wav is created at the first downlink audio's rate."""
        os.makedirs(rollout_dir, exist_ok=True)
        rec = RolloutRecorder(self, rollout_dir)
        self.put(("open", rollout_dir, user_rate))
        return rec

    def rollout_error(self, rollout_dir: str) -> str | None:
        """The first write error of a rollout's files (None: everything was written)."""
        return self._rollout_errors.get(str(rollout_dir))

    def disk_full(self, rollout_dir: str) -> bool:
        """Was that rollout's write error a full (or read-only) file system?"""
        return self._rollout_errnos.get(str(rollout_dir)) in DISK_FULL_ERRNOS

    def barrier(self, callback: Callable[[], object]) -> None:
        """Call `callback` in the writer thread once everything queued before it is written
        (a rollout's `close` included). Keep it tiny: e.g. `loop.call_soon_threadsafe(...)`."""
        self.put(("barrier", "", callback))

    async def written(self, timeout_s: float) -> None:
        """Return once everything queued so far is written (`barrier`, awaited on the loop);
        TimeoutError after `timeout_s`. A rollout's files are complete before analysis."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self.barrier(lambda: loop.call_soon_threadsafe(_resolve, done))
        async with asyncio.timeout(timeout_s):
            await done

    def close(self, timeout_s: float | None = None) -> None:
        if self._started and self._thread.is_alive():
            self._q.put(_STOP)
            self._thread.join(timeout_s)

    # --- the thread -------------------------------------------------------------------

    def _run(self) -> None:
        stop = False
        # rollouts with unwritten records -> when the first of them came (oldest first)
        dirty: dict[str, float] = {}
        while not stop:
            try:
                if dirty:
                    oldest = next(iter(dirty.values()))
                    wait_s = oldest + self.flush_every_s - self._now_s()
                    item = self._q.get(timeout=max(0.0, wait_s))
                else:
                    item = self._q.get()
            except queue.Empty:
                item = None  # nothing came: only the flushes that are due
            batch = []
            if item is not None:
                if self.batch_window_s > 0 and item is not _STOP:
                    time.sleep(self.batch_window_s)  # let a batch gather
                batch.append(item)
                while len(batch) < 65_536:
                    try:
                        batch.append(self._q.get_nowait())
                    except queue.Empty:
                        break
            touched: set[str] = set()
            for it in batch:
                if it is _STOP:
                    stop = True
                elif it[0] == "many":  # one hand-off of several records (RolloutRecorder.gather)
                    for sub in it[2]:
                        self._apply_one(sub, touched)
                elif it[0] == "barrier":  # everything before it on disk first
                    self._flush_all(dirty, touched)
                    self._apply_one(it, touched)
                else:
                    self._apply_one(it, touched)
            self._done += len(batch)
            now = self._now_s()
            for key in touched:
                if key not in dirty:
                    dirty[key] = now
            due = []
            for key, since in dirty.items():
                if now - since < self.flush_every_s:
                    break
                due.append(key)
            for key in due:
                del dirty[key]
                self._flush_key(key)
        for key, files in list(self._files.items()):
            try:
                self._close_files(files)
            except Exception as exc:  # noqa: BLE001 - recorded against the rollout
                self._fail(key, exc, close=False)
        self._files.clear()

    def _now_s(self) -> float:
        return self._clock.now_ns() / 1e9

    def _flush_all(self, dirty: dict[str, float], touched: set[str]) -> None:
        for key in dict.fromkeys((*dirty, *touched)):  # each once, oldest first
            self._flush_key(key)
        dirty.clear()
        touched.clear()

    def _flush_key(self, key: str) -> None:
        files = self._files.get(key)
        if files is not None:
            try:
                files.flushes += 1
                self._flush(files, header=files.flushes % self.header_every == 0)
            except Exception as exc:  # noqa: BLE001 - recorded against the rollout
                self._fail(key, exc)

    def _apply_one(self, item: tuple[Any, ...], touched: set[str]) -> None:
        try:
            key = self._apply(item)
            if key:
                touched.add(key)
        except OSError as exc:
            self._fail(str(item[1]), exc)
        except Exception as exc:  # noqa: BLE001 - a bad record must not kill the writer
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def _fail(self, key: str, exc: BaseException, *, close: bool = True) -> None:
        """The first write error of a rollout: record it, close its files, drop the rest."""
        text = describe_os_error(exc, key)
        self.errors.append(text)
        if key and key not in self._rollout_errors:
            self._rollout_errors[key] = text
            self._rollout_errnos[key] = exc.errno if isinstance(exc, OSError) else None
        files = self._files.pop(key, None)
        if files is not None and close:
            _close_quietly(files)

    def _apply(self, item: tuple[Any, ...]) -> str | None:
        op, key = item[0], item[1]
        if self.write_delay_s and op in ("chunk", "user", "system", "received", "up"):
            time.sleep(self.write_delay_s * (2 if op == "up" else 1))  # "up": audio + line
        if op == "barrier":
            item[2]()
            return None
        if op == "open":
            _, d, user_rate = item
            self._files[d] = self._open(d, user_rate)
            return str(d)
        files = self._files.get(key)
        if files is None:
            if key in self._rollout_errors:
                self.dropped_after_error += 1
            return None
        if op == "up":  # an uplink frame: its line (as chunk_line writes it) and its audio
            _, _, pcm, clean, rate, seq, t_ns, t_sched, late, src = item
            level = (
                level_dbfs(pcm) if src is None else self.frame_levels.at(src[0], src[1], pcm.size)
            )
            files.chunk_lines.append(UP_LINE % (seq, pcm.size, rate, t_ns, t_sched, late, level))
            files.user.append(pcm)
            if clean is not None:
                self._clean(files).append(clean)
        elif op == "chunk":
            rec = item[2]
            files.chunk_lines.append(chunk_line(rec) or _json_line(rec.to_json()))
        elif op == "event":  # events carry free text (reasons, server messages): no URL secrets
            files.event_lines.append(_json_line(redact_urls(item[2].to_json())))
        elif op == "user":
            files.user.append(item[2])
            if item[3] is not None:  # the frame before the uplink's hooks (conditions, echo)
                self._clean(files).append(item[3])
        elif op == "system":
            rate, start, pcm = item[2], item[3], item[4]
            system = self._system(files, rate)
            have = system.n_samples
            if start > have:
                system.pad_to(start)
            elif start < have:  # rounding overlap: never move what is already written
                pcm = pcm[have - start :]
            if len(pcm):
                system.append(pcm)
        elif op == "received":
            if files.received is None:
                files.received = WavAppender(os.path.join(files.dir, "received.wav"), item[2])
            files.received.append(item[3])
        elif op == "track":
            name, rate, pcm = item[2], item[3], item[4]
            if name not in files.tracks:
                files.tracks[name] = WavAppender(os.path.join(files.dir, f"{name}.wav"), rate)
            files.tracks[name].append(pcm)
        elif op == "system_pad":
            self._system(files, item[2]).pad_to(item[3])
        elif op == "metrics":
            self._flush(files)  # a write error surfaces before metrics.json could say ok
            write_json_atomic(os.path.join(files.dir, "metrics.json"), item[2])
        elif op == "close":
            self._close_files(files)
            del self._files[key]
            return None
        return str(key)

    @staticmethod
    def _open(d: str, user_rate: int) -> _RolloutFiles:
        opened: list[BinaryIO | WavAppender] = []
        try:
            chunks = open(os.path.join(d, "chunks.jsonl"), "ab", buffering=0)  # noqa: SIM115
            opened.append(chunks)
            events = open(os.path.join(d, "events.jsonl"), "ab", buffering=0)  # noqa: SIM115
            opened.append(events)
            user = WavAppender(os.path.join(d, "user.wav"), user_rate)
        except BaseException:
            for f in opened:
                with contextlib.suppress(Exception):
                    f.close()
            raise
        return _RolloutFiles(d, chunks, events, [], [], user, None)

    @staticmethod
    def _clean(files: _RolloutFiles) -> WavAppender:
        if files.clean is None:
            path = os.path.join(files.dir, "user_clean.wav")
            files.clean = WavAppender(path, files.user.sample_rate)
        return files.clean

    def _system(self, files: _RolloutFiles, rate: int) -> WavAppender:
        if files.system is None:
            files.system = WavAppender(os.path.join(files.dir, "system.wav"), rate)
        return files.system

    def _flush(self, files: _RolloutFiles, header: bool = True) -> None:
        # One unbuffered write per file per batch: whole lines reach the OS together, so a
        # killed process leaves complete JSON lines behind.
        for lines, f in ((files.chunk_lines, files.chunks), (files.event_lines, files.events)):
            if lines:
                data = "".join(lines).encode("utf-8")
                lines.clear()
                try:
                    write_all(f, data)
                except OSError as exc:
                    exc.filename = exc.filename or getattr(f, "name", None)
                    raise
        for wav in (files.user, files.system, files.received, files.clean, *files.tracks.values()):
            if wav is None:
                continue
            try:
                wav.flush(header)
            except OSError as exc:
                exc.filename = exc.filename or wav.path
                raise

    def _close_files(self, files: _RolloutFiles) -> None:
        self._flush(files)
        for f in (files.chunks, files.events):
            if not f.closed:
                os.fsync(f.fileno())
                f.close()
        files.user.close()
        if files.system is None:  # no downlink audio at all: an empty track, same rate
            files.system = WavAppender(
                os.path.join(files.dir, "system.wav"), files.user.sample_rate
            )
        files.system.close()
        if files.received is not None:
            files.received.close()
        if files.clean is not None:
            files.clean.close()
        for wav in files.tracks.values():
            wav.close()


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _close_quietly(files: _RolloutFiles) -> None:
    """Close a failed rollout's files without writing more (errors are already recorded)."""
    for f in (files.chunks, files.events):
        with contextlib.suppress(Exception):
            f.close()
    for wav in (files.user, files.system, files.received, files.clean, *files.tracks.values()):
        if wav is not None:
            with contextlib.suppress(Exception):
                wav.abandon()


class RolloutRecorder:
    """What a session holds: non-blocking hand-offs to the writer thread."""

    def __init__(self, writer: RecordingWriter, rollout_dir: str) -> None:
        self.writer = writer
        self.dir = rollout_dir
        self.closed = False
        self._many: list[tuple[Any, ...]] | None = None  # gathering: one hand-off at the end
        self._depth = 0

    def _put(self, item: tuple[Any, ...]) -> None:
        if self._many is not None:
            self._many.append(item)
        else:
            self.writer.put(item)

    def gather(self) -> None:
        """From here to the matching `hand_off`, records go to the writer as one hand-off,
        in order (a frame's user audio and chunk line: one queue item, not two). Nests."""
        self._depth += 1
        if self._many is None:
            self._many = []

    def hand_off(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            items, self._many = self._many or [], None
            if len(items) == 1:
                self.writer.put(items[0])
            elif items:
                self.writer.put(("many", self.dir, items))

    def chunk(self, record: ChunkRecord) -> None:
        self._put(("chunk", self.dir, record))  # serialised by the writer thread

    def up_frame(
        self,
        pcm: Pcm16,
        clean: Pcm16 | None,
        rate: int,
        seq: int,
        t_ns: int,
        t_sched_ns: int,
        lateness_ns: int,
        src: tuple[Pcm16, int] | None = None,
    ) -> None:
        """An uplink frame's audio and chunk line in one tuple (rig.recordings.sink
        `up_frame`): the arrays are the frame's own, not copied. `src`: (the track audio,
        the position) `pcm` is a view of, unchanged: its level comes from the track's table
        (rig.recordings.levels); None: measured from `pcm`."""
        item = ("up", self.dir, pcm, clean, rate, seq, t_ns, t_sched_ns, lateness_ns, src)
        self._put(item)

    def event(self, record: EventRecord) -> None:
        self._put(("event", self.dir, record))

    def user_audio(self, pcm: Pcm16, clean: Pcm16 | None = None) -> None:
        self._put(("user", self.dir, pcm.copy(), None if clean is None else clean.copy()))

    def system_audio(self, sample_rate: int, start_sample: int, pcm: Pcm16) -> None:
        self._put(("system", self.dir, sample_rate, start_sample, pcm.copy()))

    def received_audio(self, sample_rate: int, pcm: Pcm16) -> None:
        self._put(("received", self.dir, sample_rate, pcm.copy()))

    def track_audio(self, name: str, sample_rate: int, pcm: Pcm16) -> None:
        self._put(("track", self.dir, name, sample_rate, pcm.copy()))

    def system_pad(self, sample_rate: int, n_samples: int) -> None:
        self._put(("system_pad", self.dir, sample_rate, n_samples))

    def metrics(self, metrics: dict[str, Any]) -> None:
        self._put(("metrics", self.dir, metrics))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._put(("close", self.dir))
