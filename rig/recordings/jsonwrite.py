"""JSON files of a run: one strict line per record, and whole files replaced atomically.

Why apart from the writer thread: the run's other files (metrics.json, manifests, merged
shards) are written the same way, and a value strict JSON cannot carry (a NaN somewhere in a
metrics dict) must never cost a row or a file: it is written null and named in `invalid`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
from typing import Any

import numpy as np


def _json_line(obj: dict[str, Any]) -> str:
    """One strict JSON line. A row holding a non-finite number (or anything else strict JSON
    cannot carry) is still written: the bad values become null and `invalid` names them, so
    a row is never lost (decoders refuse such numbers; this is the last line of defence)."""
    try:
        return _LINE.encode(obj) + "\n"
    except (ValueError, TypeError, RecursionError):
        invalid: dict[str, str] = {}
        clean = {k: _clean(v, k, invalid) for k, v in obj.items()}
        clean["invalid"] = invalid
        return json.dumps(clean, separators=(",", ":"), allow_nan=False, default=str) + "\n"


def _default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


#: one encoder for every line (json.dumps with options builds a new one per call)
_LINE = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=_default)


def _clean(value: Any, path: str, invalid: dict[str, str], depth: int = 0) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        invalid[path] = f"not a finite number ({value!r})"
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 10_000:
        invalid[path] = "integer too large to write"
        return None
    if isinstance(value, dict | list | tuple):
        if depth >= 32:
            invalid[path] = "nested too deeply to write"
            return None
        if isinstance(value, dict):
            return {str(k): _clean(v, f"{path}.{k}", invalid, depth + 1) for k, v in value.items()}
        return [_clean(v, f"{path}[{i}]", invalid, depth + 1) for i, v in enumerate(value)]
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, np.ndarray):
        return _clean(value.tolist(), path, invalid, depth)
    invalid[path] = f"not JSON data ({type(value).__name__})"
    return repr(value)[:200]


def write_json_atomic(path: str, obj: Any) -> None:
    """Write JSON to a temp file and rename it over `path`: readers see old or new, never half.
    On an I/O error the temp file is removed and the error raised (the old file stays). A
    dict holding values strict JSON cannot carry (NaN) is written with them null, named in
    `invalid`."""
    tmp = f"{path}.tmp.{os.getpid()}.{threading.get_ident()}"
    try:
        text = json.dumps(obj, indent=2, default=_default, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        if not isinstance(obj, dict):
            raise
        # a NaN somewhere in a metrics dict: the file is still written, the value null and
        # named in `invalid` (a rollout must not lose its status to one bad number)
        invalid: dict[str, str] = {}
        clean = {k: _clean(v, k, invalid) for k, v in obj.items()}
        clean["invalid"] = {**(clean.get("invalid") or {}), **invalid}
        text = json.dumps(clean, indent=2, allow_nan=False, default=str)
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = path  # name the file the caller knows, not the temp file
        raise


def describe_os_error(exc: BaseException, path: str | None = None) -> str:
    """`OSError: [Errno 28] No space left on device: '.../user.wav'` (the file always named)."""
    if isinstance(exc, OSError):
        name = exc.filename if exc.filename is not None else path
        where = f": {name!r}" if name is not None else ""
        return f"{type(exc).__name__}: [Errno {exc.errno}] {exc.strerror}{where}"
    return f"{type(exc).__name__}: {exc}" + (f" ({path})" if path else "")
