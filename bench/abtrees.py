"""Two versions of rig side by side: the capacity bench's rig step from each source tree,
alternated, against one `rig sim`, so that the VM's drift (±15 % minutes apart here) falls on
both alike and the per-pair ratio says what a change did.

    git worktree add /tmp/rig-base <commit>
    python bench/abtrees.py --trees base=/tmp/rig-base new=. --n 100 --seconds 10 --rounds 4

Each step runs in a child process that imports rig from its tree (the editable install's
finder is taken out of `sys.meta_path`), with bench/capacity.py's `rig_step` from the same
tree: N recorded rollouts of a tone turn on uvloop. Printed per step: the rig's CPU per
uplink frame over the steady window and the whole run, the sim's, pooled lateness p99,
stalls, rollouts `timing_valid`; then per tree the sorted figures and the per-pair ratios
to the first tree, with the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
KEYS = ("rig_steady_us_per_frame", "rig_us_per_frame", "sim_us_per_frame", "p99_ms", "stalls",
        "timing_valid")  # fmt: skip


def child(tree: str, url: str, sim_pid: int, n: int, seconds: float) -> None:
    """One rig step with rig imported from `tree`; prints its row as one JSON line."""
    tree = os.path.abspath(tree)
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]
    sys.path[:0] = [tree, os.path.join(tree, "bench")]
    import rig

    assert os.path.abspath(rig.__file__).startswith(tree), rig.__file__
    from capacity import rig_step, run_on

    with tempfile.TemporaryDirectory() as out:
        row = run_on("uvloop", rig_step(url, sim_pid, n, seconds, out, 3))
    print("ROW " + json.dumps(row), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trees", nargs="+", required=True, help="name=path, the first the base")
    ap.add_argument("--n", type=int, default=100, help="rollouts per step")
    ap.add_argument("--seconds", type=float, default=10.0, help="user turn per rollout")
    ap.add_argument("--rounds", type=int, default=3)
    child_args = ("TREE", "URL", "SIM_PID", "N")
    ap.add_argument("--child", nargs=4, metavar=child_args, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        tree, url, pid, n = args.child
        child(tree, url, int(pid), int(n), args.seconds)
        return
    sys.path.insert(0, HERE)
    from capacity import start_proc

    trees = [t.split("=", 1) for t in args.trees]
    print(f"load average before {os.getloadavg()}", flush=True)
    sim, url = start_proc([sys.executable, "-m", "rig", "sim", "--port", "0", "--reply-s", "2"])
    rows: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    try:
        for _ in range(args.rounds):
            for name, path in trees:
                cmd = [sys.executable, __file__, "--seconds", str(args.seconds), "--trees", "x",
                       "--child", path, url, str(sim.pid), str(args.n)]  # fmt: skip
                p = subprocess.run(cmd, capture_output=True, text=True, check=False)
                got = [line[4:] for line in p.stdout.splitlines() if line.startswith("ROW ")]
                if not got:
                    print(f"{name}: failed\n{p.stderr[-2000:]}", flush=True)
                    continue
                row = json.loads(got[0])
                rows[name].append(row)
                shown = {k: row.get(k) for k in KEYS}
                print(f"{name} {shown} load {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        sim.terminate()
        sim.wait(10)
    base = trees[0][0]
    for name, got in rows.items():
        steady = [r["rig_steady_us_per_frame"] for r in got]
        print(f"{name}: steady {sorted(steady)} whole {sorted(r['rig_us_per_frame'] for r in got)}")
        if name != base and len(got) == len(rows[base]):
            pairs = zip(got, rows[base], strict=True)
            ratios = [round(a["rig_steady_us_per_frame"] / b["rig_steady_us_per_frame"], 3)
                      for a, b in pairs]  # fmt: skip
            print(f"  {name} / {base} per pair (steady): {ratios}")
    print(f"load average after {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
