"""chunks.jsonl lines without a dict and a json.dumps per chunk.

Why: the writer thread encodes every chunk record of every rollout (one per frame each
way) and shares the GIL with the audio loop; `json.dumps` of the record's dict was its
largest cost in a 50-rollout profile (docs/pacing.md). A record whose fields (and extra
fields: WebRTC's rtp_ts, jb_ms...) are plain ints, bools, finite floats or None is
formatted directly, byte for byte what `json.dumps(rec.to_json(), separators=(",", ":"))`
gives (tested against it); anything else (numpy scalars, a non-finite level, a string or
an odd key in `extra`) returns None and the caller takes the general path, which also
handles bad values.
"""

from __future__ import annotations

import math

from rig.core.records import ChunkRecord

#: the line of an uplink frame handed over as one tuple (RecordingWriter's "up" items): the
#: bytes `chunk_line` writes for an "up" ChunkRecord of plain ints with a lateness, no
#: server stamp, no play time, a level (a float: %r is its repr, as json writes it) and no
#: extra fields (tested against it)
UP_LINE = (
    '{"dir":"up","seq":%d,"n_samples":%d,"sample_rate":%d,"t_ns":%d,"t_sched_ns":%d,'
    '"lateness_ns":%d,"server_ts_ms":null,"level_dbfs":%r}\n'
)


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
    if rec.dir != "up" and rec.dir != "down":
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
        lv = rec.level
        level = "" if lv is None else f',"level_dbfs":{_j(lv)}'
        tail = _extra(rec.extra) if rec.extra else ""
    except (_NotPlain, ValueError):  # ValueError: an int too long for str()
        return None
    return f"{head}{late}{server}{play}{level}{tail}}}\n"


#: keys `to_json` writes itself: an extra key among them would replace a value in place
_BASE_KEYS = frozenset(
    "dir seq n_samples sample_rate t_ns t_sched_ns lateness_ns server_ts_ms play_ns "
    "level_dbfs".split()
)


def _extra(extra: dict[str, object]) -> str:
    """`,"key":value` for each extra field (WebRTC's rtp_ts, jb_ms...): plain identifier
    keys, values None, bool, int or finite float; anything else is _NotPlain."""
    out = []
    for key, value in extra.items():
        if type(key) is not str or not key.isidentifier() or not key.isascii():
            raise _NotPlain
        if key in _BASE_KEYS:
            raise _NotPlain
        if value is True or value is False:
            out.append(f',"{key}":{"true" if value else "false"}')
        else:
            out.append(f',"{key}":{_j(value)}')
    return "".join(out)
