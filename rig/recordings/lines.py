"""chunks.jsonl lines without a dict and a json.dumps per chunk.

Why: the writer thread encodes every chunk record of every rollout (one per frame each
way) and shares the GIL with the audio loop; `json.dumps` of the record's dict was its
largest cost in a 50-rollout profile (docs/pacing.md). A record whose fields are plain
ints, finite floats or None (every one the session makes) is formatted directly, byte
for byte what `json.dumps(rec.to_json(), separators=(",", ":"))` gives (tested against
it); anything else (extra keys, numpy scalars, a non-finite level) returns None and the
caller takes the general path, which also handles bad values.
"""

from __future__ import annotations

import math

from rig.core.records import ChunkRecord


class _NotPlain(Exception):
    """A value the fast path does not format: the caller takes the general path."""


def _j(value: object) -> str:
    """JSON for None, a plain int or a finite float (float repr, as json does)."""
    if value is None:
        return "null"
    kind = type(value)
    if kind is int:
        return str(value)
    if kind is float and math.isfinite(value):  # type: ignore[arg-type]
        return repr(value)
    raise _NotPlain


def chunk_line(rec: ChunkRecord) -> str | None:
    """The chunks.jsonl line of `rec` (newline included), or None: use the general path."""
    if rec.extra or (rec.dir != "up" and rec.dir != "down"):
        return None
    try:
        head = (
            f'{{"dir":"{rec.dir}","seq":{_j(rec.seq)},"n_samples":{_j(rec.n_samples)},'
            f'"sample_rate":{_j(rec.sample_rate)},"t_ns":{_j(rec.t_ns)},'
            f'"t_sched_ns":{_j(rec.t_sched_ns)}'
        )
        late = "" if rec.lateness_ns is None else f',"lateness_ns":{_j(rec.lateness_ns)}'
        server = f',"server_ts_ms":{_j(rec.server_ts_ms)}'
        play = "" if rec.play_ns is None else f',"play_ns":{_j(rec.play_ns)}'
        level = "" if rec.level_dbfs is None else f',"level_dbfs":{_j(rec.level_dbfs)}'
    except (_NotPlain, ValueError):  # ValueError: an int too long for str()
        return None
    return f"{head}{late}{server}{play}{level}}}\n"
