"""bench/loopstretch.py: a burst of work on an event loop shows as one stretch naming the
function that did it, idle waits split stretches, and short bursts stay under the bound.
The loop and the sampler run for real, for a fraction of a second."""

import asyncio
import sys
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import loopstretch  # noqa: E402

MS = 1_000_000


def _sampler_with(samples: list[tuple[int, str]]) -> loopstretch.Sampler:
    s = loopstretch.Sampler(0, 0.001)
    for t_ns, stack in samples:
        s.samples.append((t_ns, s.stacks.setdefault(stack, len(s.stacks))))
    return s


def test_idle_samples_split_stretches_and_short_ones_are_left_out() -> None:
    idle = "runners.py:run;base_events.py:_run_once;selectors.py:select"
    work = "runners.py:run;events.py:_run;director.py:_start_play"
    other = "runners.py:run;events.py:_run;session.py:tick"
    s = _sampler_with(
        [(0, idle), (1 * MS, work), (3 * MS, work), (5 * MS, other), (6 * MS, idle)]
        + [(7 * MS, other), (8 * MS, idle)]  # 0 ms: one sample
        + [(9 * MS, work), (20 * MS, work)]  # open at the end: closed by it
    )
    found = loopstretch.stretches(s, min_ms=3.0, top=5)
    assert [(f["t0_ns"], f["ms"]) for f in found] == [(1 * MS, 4.0), (9 * MS, 11.0)]
    assert found[0]["stacks"] == [[work, 2], [other, 1]]


def _busy_for(ms: float) -> None:
    end = time.monotonic() + ms / 1000
    while time.monotonic() < end:
        pass


def test_a_real_burst_on_a_loop_is_found_with_its_function() -> None:
    ready = threading.Event()
    ident: list[int] = []

    def run_loop() -> None:
        async def main() -> None:
            ident.append(threading.get_ident())
            ready.set()
            await asyncio.sleep(0.05)
            _busy_for(25)  # the burst
            await asyncio.sleep(0.05)
            for _ in range(10):  # many short ones: each under the bound
                _busy_for(0.2)
                await asyncio.sleep(0.005)

        asyncio.run(main())

    t = threading.Thread(target=run_loop)
    t.start()
    assert ready.wait(5)
    sampler = loopstretch.Sampler(ident[0], 0.0005)
    sampler.start()
    t.join()
    sampler.stop()
    found = loopstretch.stretches(sampler, min_ms=10.0, top=3)
    assert len(found) == 1, found
    assert 10.0 <= found[0]["ms"] <= 200.0
    assert "_busy_for" in found[0]["stacks"][0][0].rsplit(";", 1)[-1]
