"""A JACK "room" between the rig and a device under test, every delay and gain exact.

    python -m tests.support.jackroom [--rig NAME] [--dut NAME] [--d1 N --d2 N] \
        [--own-gain-db G --d3 N] [--dut-self-gain-db G --d4 N] [--noise NAME --d5 N]

Delays are in samples. On the JACK server CI already runs (scripts/ci/audio-up.sh), this
client takes over the ports of the JACK clients it is told about (a PortAudio stream connects
itself to a device's ports; the room disconnects those and connects the client to the room
instead; `portaudio_client_name()` says what this process's PortAudio client is called, and
`python -m tests.support.jackroom run ARGV...` runs `rig ARGV` after printing it), then in its
process callback
mixes, per period, with integer sample delays from ring buffers (no resampling, no rounding
but float32's):

    to the DUT's input   the rig's output, d1 later  (+ the DUT's own output, gain, d4 later)
    to the rig's input   the DUT's output, d2 later  +  the rig's own output, gain g, d3 later
    noise                a noise output (`--noise-port`: the rig's noise stream) d5 later,
                         at unit gain, to the DUT's input (or `--noise-to rig`)

The graph is a loop (rig -> room -> rig), so JACK runs one side of it from the previous
period: each path through the room takes its delay plus one period (the room connects a
client's output to it first, then itself to the client's input, so it is always the room's
output that arrives a period late). The test measures that with `rig calibrate` through the
room and compares.

Prints `room ready rate=R period=P` once active and `wired ROLE CLIENT` whenever it took over
a client; a line `ROLE NAME` on stdin adds a client (one started after the room); ends on
SIGTERM/SIGINT or when stdin closes.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

import jack
import numpy as np

KEEP = 1 << 17  # ring length in samples (2.7 s at 48 kHz): beyond any delay used here


class Ring:
    """The last KEEP samples of one input, read back `delay` samples late."""

    def __init__(self) -> None:
        self.buf = np.zeros(KEEP, np.float32)
        self.end = 0  # samples written so far

    def write(self, x: np.ndarray[Any, Any]) -> None:
        idx = (self.end + np.arange(x.size)) % KEEP
        self.buf[idx] = x
        self.end += x.size

    def read(self, n: int, delay: int) -> np.ndarray[Any, Any]:
        start = self.end - n - delay
        out = self.buf[(start + np.arange(n)) % KEEP].copy()
        if start < 0:
            out[: min(n, -start)] = 0.0
        return out


def _gain(db: float | None) -> float:
    return 0.0 if db is None else float(10 ** (db / 20))


def portaudio_client_name() -> str:
    """This process's PortAudio JACK client (PortAudio initialised by importing sounddevice)."""
    import ctypes

    import sounddevice

    lib = ctypes.CDLL(sounddevice._libname)
    get = lib.PaJack_GetClientName
    get.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
    get.restype = ctypes.c_int
    name = ctypes.c_char_p()
    if get(ctypes.byref(name)) != 0 or name.value is None:
        raise RuntimeError("PortAudio has no JACK client (is jackd running?)")
    return name.value.decode()


def run_rig(argv: list[str]) -> int:
    """`rig ARGV` in this process, after printing `jack client NAME` (its PortAudio client)."""
    from rig.cli import main as rig_main

    print(f"jack client {portaudio_client_name()}", flush=True)
    return rig_main(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:
        return run_rig(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", default="rigroom")
    p.add_argument("--rig", help="the rig's JACK client")
    p.add_argument("--dut", help="the device under test's JACK client")
    p.add_argument("--noise", help="a noise player's JACK client")
    p.add_argument(
        "--noise-port",
        help="ports of the rig's client first seen connected to a port starting with this "
        "(e.g. loopback:) are its noise output (rig run --noise-device)",
    )
    p.add_argument("--noise-to", choices=("rig", "dut"), default="dut", help="who hears it")
    p.add_argument("--d1", type=int, default=0, help="rig output -> DUT input, samples")
    p.add_argument("--d2", type=int, default=0, help="DUT output -> rig input, samples")
    p.add_argument("--own-gain-db", type=float, help="rig output -> rig input gain (off)")
    p.add_argument("--d3", type=int, default=0, help="rig output -> rig input, samples")
    p.add_argument("--dut-self-gain-db", type=float, help="DUT output -> DUT input gain (off)")
    p.add_argument("--d4", type=int, default=0, help="DUT output -> DUT input, samples")
    p.add_argument("--d5", type=int, default=0, help="noise output -> rig input, samples")
    a = p.parse_args(argv)
    for d in (a.d1, a.d2, a.d3, a.d4, a.d5):
        if not 0 <= d < KEEP // 2:
            p.error(f"delays must be 0..{KEEP // 2 - 1} samples")

    client = jack.Client(a.name, no_start_server=True)
    from_rig = client.inports.register("from_rig")
    from_dut = client.inports.register("from_dut")
    from_noise = client.inports.register("from_noise")
    to_rig = client.outports.register("to_rig")
    to_dut = client.outports.register("to_dut")
    rig_ring, dut_ring, noise_ring = Ring(), Ring(), Ring()
    g3, g4 = _gain(a.own_gain_db), _gain(a.dut_self_gain_db)

    @client.set_process_callback  # type: ignore[misc]
    def process(frames: int) -> None:
        rig_ring.write(from_rig.get_array())
        dut_ring.write(from_dut.get_array())
        noise_ring.write(from_noise.get_array())
        into_dut = rig_ring.read(frames, a.d1)
        if g4:
            into_dut += g4 * dut_ring.read(frames, a.d4)
        into_rig = dut_ring.read(frames, a.d2)
        noise = noise_ring.read(frames, a.d5)
        if a.noise_to == "rig":
            into_rig += noise
        else:
            into_dut += noise
        if g3:
            into_rig += g3 * rig_ring.read(frames, a.d3)
        to_dut.get_array()[:] = into_dut
        to_rig.get_array()[:] = into_rig

    stop = threading.Event()
    changed = threading.Event()

    @client.set_port_connect_callback  # type: ignore[misc]
    def on_connect(x: jack.Port, y: jack.Port, connect: bool) -> None:
        changed.set()  # no server calls in a callback: the wiring thread does the work

    @client.set_port_registration_callback  # type: ignore[misc]
    def on_register(port: jack.Port, register: bool) -> None:
        changed.set()

    roles = {n: r for n, r in ((a.rig, "rig"), (a.dut, "dut"), (a.noise, "noise")) if n}
    plug = {  # role -> (room input its output feeds, room output its input hears)
        "rig": (from_rig, to_rig),
        "dut": (from_dut, to_dut),
        "noise": (from_noise, None),
    }
    wired: dict[str, str] = {}
    port_role: dict[str, str] = {}  # the role of each port, fixed when first seen

    def rewire() -> None:
        for port in client.get_ports(is_audio=True):
            owner = port.name.split(":", 1)[0]
            role = roles.get(owner)
            if role is None:
                continue
            if port.name not in port_role:
                first = [q.name for q in client.get_all_connections(port)]
                if not first:
                    continue  # PortAudio connects a stream's ports as it starts: wait for it
                noisy = a.noise_port and any(q.startswith(a.noise_port) for q in first)
                port_role[port.name] = "noise" if role == "rig" and noisy else role
            role = port_role[port.name]
            room_in, room_out = plug[role]
            if port.is_output:
                want = {room_in.name}
            elif room_out is not None:
                want = {room_out.name}
            else:
                want = set()
            have = {q.name for q in client.get_all_connections(port)}
            # the client's output into the room first, then the room into its input
            for q in sorted(have - want):
                client.disconnect(port.name, q) if port.is_output else client.disconnect(
                    q, port.name
                )
            for q in sorted(want - have):
                client.connect(port.name, q) if port.is_output else client.connect(q, port.name)
            if have != want and wired.get(role) != owner:
                wired[role] = owner
                print(f"wired {role} {port.name}", flush=True)

    def wiring() -> None:
        while not stop.is_set():
            changed.wait(0.05)
            changed.clear()
            try:
                rewire()
            except jack.JackError as exc:  # a client left while we looked: look again
                print(f"rewire: {exc}", file=sys.stderr, flush=True)

    def commands() -> None:
        """`ROLE NAME` lines on stdin add a client (rig, dut, noise); EOF ends the room."""
        for line in sys.stdin:
            role, _, name = line.strip().partition(" ")
            if role in plug and name:
                roles[name] = role
                changed.set()
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with client:
        print(f"room ready rate={client.samplerate} period={client.blocksize}", flush=True)
        t = threading.Thread(target=wiring, daemon=True)
        t.start()
        threading.Thread(target=commands, daemon=True).start()
        stop.wait()
        t.join(1.0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
