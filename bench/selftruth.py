"""One rollout's actual timing error, against `rig sim`'s truth log, and the flag's confusion
matrix (bench/selfcheck.py runs the fleets; this module is pure and reads files only).

The rollout is found in the truth log by its first uplink frame (`recv_chunk` seq 0 carries
the rig's send stamp as `client_ts_ms`). Then, per rollout:

  pacing     every uplink frame's lateness, the rig's send stamp (taken just before the
             write) minus its deadline: p99 and max. Checked against the sim: its receive
             stamp (`t_wire_ns`, by seq) never precedes the rig's send stamp
             (`sent_to_sim_min_ms` >= 0). The sim's receive stamps themselves are not the
             truth of the send: its reader task takes them when its loop gets there, so with
             100 connections they trail the send by up to 40 ms while the rig's stamps were
             within 12 ms of the deadlines
  onsets     every reply onset the rig found: the rig's arrival stamp of the onset's chunk
             minus the sim's send stamp of the same chunk (the k-th downlink audio message
             of a connection is the k-th `reply_chunk` of it: TCP keeps order)
  latencies  each answered turn: the rig's (arrival) latency minus the latency an ideal rig
             would have measured (stamps exact, every frame on its deadline): the true send
             time of the onset chunk, less how late the rig sent the frame whose arrival made
             the sim detect the end of speech (a late frame there delays the reply; the sim's
             own lag in reading it is the system's time), minus the *scheduled* time of the
             user's end sample
  detect     the same for `detect_ms` (the sim's detection instead of the onset)
  generation `generation_ms` against the sim's own interval (detection to first reply chunk due)

A rollout is *actually bad* when any figure is off by more than the rig's stated tolerance
(`--timing-tolerance-ms`, 5 ms: onsets, latencies, detect, generation; pacing p99), or a frame
went out more than one frame late (a stall), or any received chunk's arrival stamp is off by
more than one frame (`--loop-lag-max-ms`).
"""

from __future__ import annotations

import bisect
import json
import os
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

FRAME_MS = 20.0


def read_jsonl(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class Truth:
    """The truth log, indexed by connection."""

    def __init__(self, path: str) -> None:
        self.by_conn: dict[int, list[dict[str, Any]]] = defaultdict(list)
        self.first_up: list[tuple[float, int]] = []  # (client_ts_ms of seq 0, conn)
        for e in read_jsonl(path):
            conn = e.get("conn")
            if conn is None:
                continue
            self.by_conn[conn].append(e)
            if e["event"] == "recv_chunk" and e["seq"] == 0:
                self.first_up.append((float(e["client_ts_ms"]), conn))
        self.first_up.sort()

    def conn_of(self, first_send_ns: int) -> int | None:
        """The connection whose first frame the rig stamped at `first_send_ns`."""
        ms = first_send_ns / 1e6
        keys = [k for k, _ in self.first_up]
        i = bisect.bisect_left(keys, ms)
        best = None
        for j in (i - 1, i):
            if 0 <= j < len(keys) and abs(keys[j] - ms) < 0.01:
                if best is None or abs(keys[j] - ms) < abs(keys[best] - ms):
                    best = j
        return None if best is None else self.first_up[best][1]


def rollout_row(rollout_dir: str, truth: Truth) -> dict[str, Any]:
    """The rig's verdict and figures for one rollout beside its actual errors."""
    m = json.load(open(os.path.join(rollout_dir, "metrics.json"), encoding="utf-8"))
    chunks = read_jsonl(os.path.join(rollout_dir, "chunks.jsonl"))
    up = sorted((c for c in chunks if c["dir"] == "up"), key=lambda c: c["seq"])
    down = sorted((c for c in chunks if c["dir"] == "down"), key=lambda c: c["seq"])
    rt = m.get("rig_timing") or {}
    loop = rt.get("loop") or {}
    row: dict[str, Any] = {
        "rollout": m.get("rollout_id"),
        "item": m.get("item"),
        "status": m.get("status"),
        "timing_valid": m.get("timing_valid"),
        "reasons": rt.get("reasons"),
        "rig": {
            "lateness_p99_ms": (m.get("uplink") or {}).get("lateness_ms", {}).get("p99"),
            "lateness_max_ms": (m.get("uplink") or {}).get("lateness_ms", {}).get("max"),
            "stalls": (m.get("uplink") or {}).get("stalls"),
            "lag_p99_ms": loop.get("lag_p99_ms"),
            "lag_max_ms": loop.get("lag_max_ms"),
            "run_delay_share": loop.get("run_delay_share"),
            "backlog_max": loop.get("backlog_max"),
            "figures": rt.get("figures"),
        },
    }
    conn = truth.conn_of(up[0]["t_ns"]) if up else None
    row["conn"] = conn
    if conn is None:
        row["truth"] = None
        return row
    row["truth"] = actual_errors(m, up, down, truth.by_conn[conn])
    return row


def actual_errors(
    m: dict[str, Any],
    up: list[dict[str, Any]],
    down: list[dict[str, Any]],
    events: list[dict[str, Any]],
) -> dict[str, Any]:
    """Every figure's error against the truth events of the rollout's connection."""
    recv = {e["seq"]: e for e in events if e["event"] == "recv_chunk"}
    sent = [e for e in events if e["event"] == "reply_chunk"]
    sched = {c["seq"]: c["t_sched_ns"] for c in up}
    late = {c["seq"]: c["t_ns"] - c["t_sched_ns"] for c in up}
    # pacing: the rig's send stamps (taken just before the write), checked against the sim:
    # its receive stamp never precedes one; the sim's own receive stamps carry its loop's lag
    pace_ms = np.asarray(list(late.values()), dtype=np.float64) / 1e6
    pace = list(late.values())
    wire = [recv[c["seq"]]["t_wire_ns"] - c["t_ns"] for c in up if c["seq"] in recv]
    sim_late = np.asarray(
        [recv[q]["t_wire_ns"] - sched[q] for q in sched if q in recv], dtype=np.float64
    )
    # frames by the sim's receive time, to find the one that completed the endpointing
    recv_at = defaultdict(list)
    for e in recv.values():
        recv_at[e["t_ns"]].append(e["seq"])
    ends = [e for e in events if e["event"] == "speech_end"]
    starts = {e["response"]: e for e in events if e["event"] == "reply_start"}
    sched_by = {e["response"]: e for e in events if e["event"] == "reply_scheduled"}
    chunk_err = [d["t_ns"] - s["t_ns"] for d, s in zip(down, sent, strict=False)]  # by order
    out: dict[str, Any] = {
        "frames": len(pace),
        "pace_p99_ms": round(float(np.percentile(pace_ms, 99)), 3) if pace else None,
        "pace_max_ms": round(float(pace_ms.max()), 3) if pace else None,
        "frames_at_sim": len(wire),
        "sent_to_sim_min_ms": _ms(min(wire)) if wire else None,  # < 0: a stamp after the send
        "sent_to_sim_max_ms": _ms(max(wire)) if wire else None,
        "sim_pace_p99_ms": round(float(np.percentile(sim_late, 99)) / 1e6, 3) if wire else None,
        "down_matched": min(len(down), len(sent)),
        "down_rig": len(down),
        "down_truth": len(sent),
        "chunk_err_max_ms": _ms(max(map(abs, chunk_err), default=0)),
    }
    onsets = []
    for f in ((m.get("rig_timing") or {}).get("figures") or {}).get("onsets") or []:
        k = f["seq"]
        if k < len(chunk_err):
            onsets.append({"seq": k, "bound_ms": f["stamp_ms"], "err_ms": _ms(chunk_err[k])})
    out["onsets"] = onsets
    send = [c["t_ns"] for c in up]
    lats = []
    for r in m.get("responses") or []:
        k = r.get("onset_chunk_seq")
        if k is None or k >= len(sent) or r.get("latency_arrival_ms") is None:
            continue
        resp = sent[k]["response"]
        sch = sched_by.get(resp)
        end = next((e for e in ends if sch is not None and e["t_ns"] == sch["t_ns"]), None)
        if end is None:
            continue
        f = bisect.bisect_right(send, r["user_end_ns"]) - 1  # the frame of the end sample
        if f < 0:
            continue
        end_sched = up[f]["t_sched_ns"] + (r["user_end_ns"] - send[f])
        det = max(recv_at.get(end["t_ns"], [-1]))  # the frame that completed the endpointing
        det_late = late.get(det, 0)  # the rig's part of its delay (the sim's lag is the system's)
        off = r["onset_arrival_ns"] - down[k]["t_ns"]  # the onset's sample in its chunk
        ideal_onset = sent[k]["t_ns"] + off - det_late
        ideal_lat = (ideal_onset - end_sched) / 1e6
        row = {
            "turn": r.get("turn"),
            "onset_seq": k,
            "latency_err_ms": round(r["latency_arrival_ms"] - ideal_lat, 3),
            "detect_frame_late_ms": _ms(det_late),
            # what the rig knows: how late it sent the frame holding the user's end
            "end_frame_late_ms": _ms(send[f] - up[f]["t_sched_ns"]),
        }
        if r.get("detect_ms") is not None:
            ideal_det = (end["t_ns"] - det_late - end_sched) / 1e6
            row["detect_err_ms"] = round(r["detect_ms"] - ideal_det, 3)
        if r.get("generation_ms") is not None and resp in starts:
            true_gen = (starts[resp]["t_ns"] - end["t_ns"]) / 1e6
            row["generation_err_ms"] = round(r["generation_ms"] - true_gen, 3)
        lats.append(row)
    out["responses"] = lats
    return out


def _ms(ns: float) -> float:
    return round(ns / 1e6, 3)


def worst(truth: dict[str, Any], key: str, rows: str) -> float:
    return max((abs(x[key]) for x in truth[rows] if x.get(key) is not None), default=0.0)


def actually_bad(row: dict[str, Any], tol_ms: float = 5.0, frame_ms: float = FRAME_MS) -> list[str]:
    """Which figures of the rollout are off by more than the tolerance (empty: none)."""
    t = row["truth"]
    bad = []
    if (t["pace_p99_ms"] or 0) > tol_ms:
        bad.append("pacing p99")
    if (t["pace_max_ms"] or 0) > frame_ms:
        bad.append("pacing stall")
    if (t["chunk_err_max_ms"] or 0) > frame_ms:
        bad.append("chunk stamp")  # any received chunk (`--loop-lag-max-ms`, one frame)
    for key, rows, name in (
        ("err_ms", "onsets", "onset"),
        ("latency_err_ms", "responses", "latency"),
        ("detect_err_ms", "responses", "detect"),
        ("generation_err_ms", "responses", "generation"),
    ):
        if worst(t, key, rows) > tol_ms:
            bad.append(name)
    return bad


def old_flag(row: dict[str, Any]) -> bool:
    """The verdict before this change (defaults), from what the rollout recorded."""
    r = row["rig"]
    return bool(
        (r["lateness_p99_ms"] or 0) > 5.0
        or (r["stalls"] or 0) > 0
        or (r["lag_p99_ms"] or 0) > 5.0
        or (r["lag_max_ms"] or 0) > 20.0
        or (r["run_delay_share"] or 0) > 0.05
        or (r["backlog_max"] or 0) > 5000
    )


def onset_bound(o: dict[str, Any], window: tuple[float, float] | None) -> float:
    """An onset's stamp bound, as recorded, or from the late wake-ups recorded around it
    within (before, after) ms of the stamp."""
    if window is None or "near" not in o:
        return float(o["stamp_ms"])
    lo, hi = -window[0], window[1]
    overdue = [lag for dt, lag in o["near"] if dt >= 0 and dt - lag <= 0]  # due before, ran after
    return max([1.0, *overdue, *(lag for dt, lag in o["near"] if lo <= dt <= hi)])


def new_flag(
    row: dict[str, Any],
    figure_ms: float = 5.0,
    p99_ms: float = 5.0,
    lag_max_ms: float = 20.0,
    window: tuple[float, float] | None = (2.5, 5.0),
    decision: bool = True,
) -> bool:
    """The new verdict's checks (rig.core.selfcheck.judge), recomputed from what the rollout
    recorded (each onset's stamp bound and the lags around it, the lateness of each user's
    end frame and of its decision's frames) at any thresholds. `window`: (before, after) ms
    of the stamp whose wake-ups count (the default is TimingTolerance's; None: the bound the
    rollout recorded)."""
    r = row["rig"]
    fig = r["figures"] or {}
    onsets = {o["seq"]: onset_bound(o, window) for o in fig.get("onsets") or []}
    parts = {x["turn"]: x for x in fig.get("latencies") or []}
    latency = []
    for x in (row["truth"] or {}).get("responses") or []:
        got = parts.get(x["turn"]) or {}
        dec = (got.get("decision_late_ms") or 0.0) if decision else 0.0
        end = got.get("end_late_ms", x["end_frame_late_ms"])
        latency.append(onsets.get(x["onset_seq"], 0.0) + max(0.0, end) + dec)
    return bool(
        (r["lateness_p99_ms"] or 0) > p99_ms
        or (r["stalls"] or 0) > 0
        or (fig.get("chunk_max_ms") or 0) > lag_max_ms
        or any(b > figure_ms for b in onsets.values())
        or any(b > figure_ms for b in latency)
    )


def recorded_flag(row: dict[str, Any]) -> bool:
    return row["timing_valid"] is False


def matrix(
    rows: Iterable[dict[str, Any]], flag: Callable[[dict[str, Any]], bool], tol_ms: float = 5.0
) -> dict[str, Any]:
    """Confusion of `flag` against "actually bad"; rates: false alarms among actually good
    rollouts, misses among actually bad ones."""
    tp = fp = fn = tn = 0
    for row in rows:
        if row.get("truth") is None or row.get("status") != "ok":
            continue
        bad, flagged = bool(actually_bad(row, tol_ms)), flag(row)
        tp += bad and flagged
        fn += bad and not flagged
        fp += flagged and not bad
        tn += not bad and not flagged
    good, badn = fp + tn, tp + fn
    return {
        "flagged_bad": tp,
        "missed_bad": fn,
        "false_alarm": fp,
        "passed_good": tn,
        "false_alarm_rate": round(fp / good, 4) if good else None,
        "miss_rate": round(fn / badn, 4) if badn else None,
    }


def onset_matrix(rows: Iterable[dict[str, Any]], tol_ms: float = 5.0) -> dict[str, Any]:
    """Figure level: every reply onset's stamp bound (> tol: flagged) against its actual
    stamp error (|err| > tol: off)."""
    tp = fp = fn = tn = 0
    worst_gap = 0.0  # the largest error above its bound (a bound that did not hold)
    for row in rows:
        if row.get("truth") is None or row.get("status") != "ok":
            continue
        for o in row["truth"]["onsets"]:
            off, flagged = abs(o["err_ms"]) > tol_ms, o["bound_ms"] > tol_ms
            tp += off and flagged
            fn += off and not flagged
            fp += flagged and not off
            tn += not off and not flagged
            worst_gap = max(worst_gap, abs(o["err_ms"]) - o["bound_ms"])
    return {
        "flagged_off": tp,
        "missed_off": fn,
        "false_alarm": fp,
        "passed_good": tn,
        "false_alarm_rate": round(fp / (fp + tn), 4) if fp + tn else None,
        "miss_rate": round(fn / (tp + fn), 4) if tp + fn else None,
        "worst_error_above_bound_ms": round(worst_gap, 3),
    }
