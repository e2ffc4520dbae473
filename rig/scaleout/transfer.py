"""A shard's run directory sent back in pieces, for clusters without a shared file system.

How this works (`--results object-store`, docs/scale-out.md): the shard runs into a staging
directory on its node, seeded by the driver with what a resume needs (`seed`: the shard's
manifest and the metrics.json of every rollout already done there). `Outbox.poll()` finds
each rollout that has ended since (its metrics.json is written last, after the writer closed
its files: rig.runs.runner) and packs it as a tar, cut into `Piece`s of at most `CHUNK_BYTES`
(each travels as one object; big rollouts never sit whole in memory); the manifest and the
other files at the top follow as they appear and once more at the end.

On the driver, `Inbox.take(piece)` appends a rollout's pieces to `.incoming/<id>.tar.part`
beside the shard's `rollouts/`, and only when the last piece is in does it unpack them
(tarfile's "data" filter: regular files and directories inside the target, nothing else)
into `.incoming/` and rename the whole directory into `rollouts/<id>`: a transfer cut short
never leaves a half rollout that looks done. An attempt already there that did not end
(marked lost) is moved aside as `<id>.failed-N` first, as a shared-disk rerun does; one that
finished is kept and the copy counted as a duplicate. Top-level files are written through a
temporary file and a rename. A new `Inbox` clears what an earlier cut transfer left.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field

from rig.errors import ConfigError, DataFileError
from rig.ids import check_id
from rig.recordings.rundir import move_aside, rollout_done

CHUNK_BYTES = 8 << 20
INCOMING = ".incoming"


@dataclass(frozen=True, slots=True)
class Piece:
    """One object on its way to the driver: part `part` of rollout `name`'s tar (kind
    "rollout"), or a whole top-level file (kind "file")."""

    kind: str
    name: str
    data: bytes
    part: int = 0
    last: bool = True


def seed(shard_dir: str) -> dict[str, bytes]:
    """What a shard needs of the driver's copy to resume: manifest and finished metrics."""
    out: dict[str, bytes] = {}
    manifest = os.path.join(shard_dir, "manifest.json")
    if os.path.isfile(manifest):
        with open(manifest, "rb") as f:
            out["manifest.json"] = f.read()
    base = os.path.join(shard_dir, "rollouts")
    for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        d = os.path.join(base, name)
        if rollout_done(d):
            with open(os.path.join(d, "metrics.json"), "rb") as f:
                out[f"rollouts/{name}/metrics.json"] = f.read()
    return out


def plant(shard_dir: str, files: dict[str, bytes]) -> set[str]:
    """Write a `seed` into a fresh staging shard directory; the rollout ids it holds."""
    ids: set[str] = set()
    for rel, data in files.items():
        parts = rel.split("/")
        if parts == ["manifest.json"]:
            pass
        elif len(parts) == 3 and parts[0] == "rollouts" and parts[2] == "metrics.json":
            ids.add(check_id(parts[1], "rollout id"))
        else:
            raise ConfigError(f"not a seed file: {rel!r}")
        path = os.path.join(shard_dir, *parts)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return ids


@dataclass
class Outbox:
    """The node's side: what of `shard_dir` has not been sent yet (`seeded` never is)."""

    shard_dir: str
    seeded: set[str] = field(default_factory=set)
    sent: set[str] = field(default_factory=set)
    _top: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (mtime_ns, size)

    def poll(self, final: bool = False) -> Iterator[Piece]:
        """Pieces of every rollout that ended since the last poll, then changed top files."""
        base = os.path.join(self.shard_dir, "rollouts")
        for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
            d = os.path.join(base, name)
            if name in self.sent or name in self.seeded or not os.path.isdir(d):
                continue
            if not os.path.isfile(os.path.join(d, "metrics.json")):
                continue  # still streaming (or killed mid-stream: the driver marks it)
            self.sent.add(name)
            yield from pack(d, name)
        for name in sorted(os.listdir(self.shard_dir)) if os.path.isdir(self.shard_dir) else []:
            path = os.path.join(self.shard_dir, name)
            if name.startswith(".") or ".tmp." in name:  # an atomic write's temp file
                continue
            try:
                st = os.stat(path)
                if not os.path.isfile(path):
                    continue
                if self._top.get(name) == (st.st_mtime_ns, st.st_size) and not final:
                    continue
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:  # replaced or removed while we looked: the next poll
                continue
            self._top[name] = (st.st_mtime_ns, st.st_size)
            yield Piece("file", name, data)


def pack(rollout_dir: str, name: str, chunk_bytes: int = CHUNK_BYTES) -> Iterator[Piece]:
    """A rollout directory as tar pieces (spooled to disk past one chunk)."""
    with tempfile.SpooledTemporaryFile(max_size=chunk_bytes) as buf:
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(rollout_dir, arcname=name, recursive=True)
        size = buf.tell()
        buf.seek(0)
        part = 0
        while True:
            data = buf.read(chunk_bytes)
            last = buf.tell() >= size
            yield Piece("rollout", name, data, part, last)
            part += 1
            if last:
                return


@dataclass
class InboxStats:
    rollouts: int = 0
    files: int = 0
    bytes: int = 0
    duplicates: list[str] = field(default_factory=list)
    moved_aside: list[str] = field(default_factory=list)


class Inbox:
    """The driver's side: pieces in, whole rollouts renamed into `shard_dir/rollouts`."""

    def __init__(self, shard_dir: str) -> None:
        self.shard_dir = shard_dir
        self.incoming = os.path.join(shard_dir, INCOMING)
        self.stats = InboxStats()
        self._next_part: dict[str, int] = {}
        shutil.rmtree(self.incoming, ignore_errors=True)  # what a cut transfer left
        os.makedirs(os.path.join(shard_dir, "rollouts"), exist_ok=True)
        os.makedirs(self.incoming)

    def take(self, piece: Piece) -> str | None:
        """Store one piece; the rollout id once its last piece is in and it is in place."""
        self.stats.bytes += len(piece.data)
        if piece.kind == "file":
            self._file(piece)
            return None
        if piece.kind != "rollout":
            raise DataFileError(self.shard_dir, f"unknown transfer piece {piece.kind!r}")
        rid = check_id(piece.name, "rollout id")
        part_path = os.path.join(self.incoming, f"{rid}.tar.part")
        expected = self._next_part.get(rid, 0)
        if piece.part != expected:
            raise DataFileError(part_path, f"piece {piece.part} of {rid} where {expected} was due")
        with open(part_path, "ab" if expected else "wb") as f:
            f.write(piece.data)
        self._next_part[rid] = expected + 1
        if not piece.last:
            return None
        del self._next_part[rid]
        return self._install(rid, part_path)

    def _install(self, rid: str, part_path: str) -> str:
        unpacked = tempfile.mkdtemp(prefix=f"{rid}.", dir=self.incoming)
        try:
            with tarfile.open(part_path, mode="r:") as tar:
                names = {m.name.split("/", 1)[0] for m in tar.getmembers()}
                if names != {rid}:
                    raise DataFileError(part_path, f"a tar of {sorted(names)}, not of {rid}")
                tar.extractall(unpacked, filter="data")
            dst = os.path.join(self.shard_dir, "rollouts", rid)
            if rollout_done(dst):
                self.stats.duplicates.append(rid)  # the driver's copy stays
                return rid
            if os.path.isdir(dst):
                move_aside(dst)
                self.stats.moved_aside.append(rid)
            os.rename(os.path.join(unpacked, rid), dst)
            self.stats.rollouts += 1
            return rid
        except tarfile.TarError as exc:
            raise DataFileError(part_path, f"not a rollout's tar: {exc}") from exc
        finally:
            shutil.rmtree(unpacked, ignore_errors=True)
            os.unlink(part_path)

    def _file(self, piece: Piece) -> None:
        name = piece.name
        if "/" in name or name.startswith(".") or name in ("", "rollouts"):
            raise DataFileError(self.shard_dir, f"not a top-level file name: {name!r}")
        tmp = os.path.join(self.incoming, f"{name}.tmp")
        with open(tmp, "wb") as f:
            f.write(piece.data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(self.shard_dir, name))
        self.stats.files += 1

    def close(self) -> None:
        shutil.rmtree(self.incoming, ignore_errors=True)
