"""rig.mallocs: after `tune()`, asyncio-sized socket reads no longer fault fresh pages in.

Counted, not timed: minor page faults of 2 000 `recv(256 KiB)` of a 660-byte message in a
fresh interpreter, with and without `tune()` (each read allocates a 256 KiB bytes object
and shrinks it: glibc's mmap for it faults at least one page per read)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rig import mallocs

READS = """
import resource, socket, sys
if sys.argv[1] == "tune":
    from rig import mallocs
    assert mallocs.tune()["tuned"]
a, b = socket.socketpair()
msg = b"x" * 660
for _ in range(50):  # warm up: whatever the first reads set up
    a.send(msg); b.recv(262144)
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(2000):
    a.send(msg)
    b.recv(262144)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


def _faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", READS, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_tuned_reads_stay_in_the_heap() -> None:
    if not mallocs.tune()["tuned"]:
        pytest.skip(f"not tuned here: {mallocs.tune()['reason']}")
    before, after = _faults("plain"), _faults("tune")
    assert before >= 2000  # the cost being removed: a fault per read at least
    assert after < 100


def test_tune_is_once_per_process_and_says_what_it_did() -> None:
    first = mallocs.tune()
    assert mallocs.tune() == first
    assert isinstance(first["tuned"], bool)
    if first["tuned"]:
        assert first["mmap_threshold_bytes"] > 262144  # above asyncio's read size
    else:
        assert first["reason"]
