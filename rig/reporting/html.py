"""`rig report RUN --html FILE`: one self-contained page a person can open.

Run summary, gates, the per-item table, latency CDFs (total and split), the split of every
response, timing validity, and per rollout its timeline (inline SVG) with audio players for
user.wav and system.wav. Nothing is fetched: styles inline, pictures inline SVG, audio as
`data:` URIs while the run's WAVs total at most `max_embed_mb` (default 25 MB); past that,
or with `audio="link"`, the players point at the WAVs by path relative to the HTML file
(the page then works beside the run directory); `audio="none"` leaves them out. Every text
from files or peers passes through `html.escape`.
"""

from __future__ import annotations

import base64
import os
from html import escape
from pathlib import Path
from typing import Any

from rig.analysis.aggregate import COMPONENTS
from rig.analysis.gates import GateResult, gate_values
from rig.analysis.rollout import RolloutView, load_rollout, read_track
from rig.analysis.tables import timing_reason
from rig.analysis.verdicts import FAIL, NA, PASS, verdict_of
from rig.errors import RigError
from rig.reporting.svg import SPLIT_COLORS, cdf_svg, split_bar_svg, timeline_svg
from rig.reporting.voicehtml import voice_section

MARK_COLORS = {
    "turn.start": "#2ca02c",
    "turn.end": "#2ca02c",
    "inject": "#9467bd",
    "ref.eot": "#8c564b",
    "ref.pause": "#bcbd22",
    "ref.negative": "#d62728",
}
AUDIO_MODES = ("embed", "link", "none")

CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:3px 7px;
text-align:right;font-size:13px}th{background:#f3f3f3}td.l,th.l{text-align:left}
.bad{color:#b00020;font-weight:600}.good{color:#1b5e20}.muted{color:#777}
section.rollout{border-top:2px solid #ddd;margin-top:20px;padding-top:8px}
audio{width:420px;display:block}.legend span{margin-right:12px}
figure.track{display:inline-block;margin:4px 16px 8px 0}figure.track figcaption{font-size:13px;
color:#555;margin-bottom:2px}
"""


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _obj(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _fmt(x: Any, nd: int = 1) -> str:
    v = _num(x)
    return "–" if v is None else f"{v:.{nd}f}"


def _cls_status(status: str) -> str:
    return "good" if status == "ok" else "bad"


def _td(x: Any, left: bool = False, cls: str = "") -> str:
    c = " ".join(k for k in ("l" if left else "", cls) if k)
    return f'<td class="{c}">{escape(str(x))}</td>' if c else f"<td>{escape(str(x))}</td>"


def _summary(report: dict[str, Any], gates: list[GateResult], manifest: dict[str, Any]) -> str:
    v = gate_values(report)
    counts = ", ".join(f"{k} {n}" for k, n in sorted(report["status_counts"].items()))
    raw_targets = manifest.get("targets")
    targets: list[Any] = raw_targets if isinstance(raw_targets, list) else []
    rows = [
        ("run", report["run_id"]),
        ("started (UTC)", manifest.get("started_utc", "–")),
        ("rig / git", f"{manifest.get('rig_version', '–')} / {manifest.get('git_sha', '–')}"),
        ("targets", "; ".join(str(t.get("url", t)) for t in targets if isinstance(t, dict))),
        ("rollouts", f"{report['n_rollouts']} ({counts})"),
        ("responses", f"{v['n_responses']:.0f}"),
        (
            "latency p50 / p90 / p95 / p99 ms",
            " / ".join(_fmt(v[f"latency_{q}_ms"], 0) for q in ("p50", "p90", "p95", "p99")),
        ),
        (
            "timing rule pass rate",
            _fmt(v["pass_rate"], 3)
            + (f" (n/a {v['n_na']:.0f}: cannot tell, left out)" if v["n_na"] else ""),
        ),
        ("timing valid (rig's own timing held)", _fmt(v["timing_valid_rate"], 3)),
    ]
    out = ["<table>"]
    out += [f"<tr>{_td(k, True)}{_td(val, True)}</tr>" for k, val in rows]
    out.append("</table>")
    if gates:
        out.append("<h3>Gates</h3><table><tr><th class='l'>gate</th><th>value</th><th>"
                   "verdict</th></tr>")  # fmt: skip
        for g in gates:
            out.append(
                f"<tr>{_td(g.gate.describe(), True)}{_td(_fmt(g.value, 3))}"
                f"{_td('ok' if g.passed else 'FAILED', cls='good' if g.passed else 'bad')}</tr>"
            )
        out.append("</table>")
    return "".join(out)


def _items(report: dict[str, Any]) -> str:
    head = ("scenario", "item", "n", "statuses", "p50 ms", "p95 ms", "IQR ms", "CI of p50 ms",
            "pass")  # fmt: skip
    out = ["<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for g in report["items"]:
        lat = g["latency_ms"]
        ci = f"{_fmt(lat.get('ci_low'), 0)}–{_fmt(lat.get('ci_high'), 0)}"
        p = g["pass"]
        statuses = " ".join(f"{k}={n}" for k, n in sorted(g["status_counts"].items()))
        out.append(
            "<tr>" + _td(g["scenario"], True) + _td(g["item"], True) + _td(g["n"])
            + _td(statuses, True) + _td(_fmt(lat.get("median"), 0))
            + _td(_fmt(lat.get("p95"), 0)) + _td(_fmt(lat.get("iqr"), 0)) + _td(ci)
            + _td((f"{p['passed']}/{p['evaluated']}" if p["evaluated"] else "–")
                  + (f" n/a {p['n_a']}" if p.get("n_a") else "")) + "</tr>"
        )  # fmt: skip
    out.append("</table>")
    return "".join(out)


def _counted(m: dict[str, Any], exclude_invalid: bool) -> bool:
    """Is this rollout in the aggregates (as the summary's counts): ok, and its own timing
    held unless invalid timing is counted too?"""
    return m.get("status") == "ok" and not (exclude_invalid and m.get("timing_valid") is False)


def _responses(
    rollouts: list[dict[str, Any]], exclude_invalid: bool = True
) -> tuple[str, dict[str, list[float]]]:
    series: dict[str, list[float]] = {"latency": []}
    series.update({c[:-3]: [] for c in COMPONENTS})
    head = ["rollout", "turn", "latency ms", *(f"{c[:-3]} ms ±err" for c in COMPONENTS),
            "split"]  # fmt: skip
    out = ["<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for m in rollouts:
        for r in m.get("responses") or []:
            if not isinstance(r, dict) or _num(r.get("latency_ms")) is None:
                continue
            lat = float(r["latency_ms"])
            counted = _counted(m, exclude_invalid)
            if counted:
                series["latency"].append(lat)
            cells = [_td(m.get("rollout_id"), True), _td(r.get("turn", "")), _td(_fmt(lat))]
            parts: dict[str, float | None] = {}
            for c in COMPONENTS:
                stem = c[:-3]
                val, err = _num(r.get(c)), _num(r.get(f"{stem}_err_ms"))
                parts[stem] = val
                if val is not None and counted:
                    series[stem].append(val)
                cells.append(_td("–" if val is None else f"{val:.1f} ±{_fmt(err)}"))
            bar = split_bar_svg(parts, lat) if any(parts.values()) else ""
            out.append("<tr>" + "".join(cells) + f"<td>{bar}</td></tr>")
    out.append("</table>")
    legend = "".join(
        f'<span style="color:{c}">■ {escape(n)}</span>' for n, c in SPLIT_COLORS.items()
    )
    return f'<p class="legend">{legend}</p>' + "".join(out), series


def _validity(rollouts: list[dict[str, Any]]) -> str:
    head = ("rollout", "status", "reason", "timing rule", "timing valid", "send late p99 ms",
            "stalls", "clock fit", "offset ±ms")  # fmt: skip
    out = ["<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for m in rollouts:
        up = _obj(m.get("uplink"))
        late = _obj(up.get("lateness_ms"))
        fit = _obj(m.get("clock_fit"))
        status = str(m.get("status", "?"))
        shown: dict[str, bool | str] = {PASS: True, FAIL: False, NA: "n/a"}
        passed = shown.get(verdict_of(m) or "")
        valid = m.get("timing_valid")
        valid = valid if isinstance(valid, bool) else None
        verdict = {True: ("pass", "good"), False: ("FAIL", "bad"), None: ("–", "muted"),
                   "n/a": ("n/a (cannot tell)", "muted")}  # fmt: skip
        validity = {True: ("yes", "good"), False: ("NO", "bad"), None: ("not recorded", "muted")}
        out.append(
            "<tr>" + _td(m.get("rollout_id"), True) + _td(status, True, _cls_status(status))
            + _td(str(m.get("reason") or "")[:200], True)
            + _td(verdict[passed][0], cls=verdict[passed][1])
            + _td(validity[valid][0] + (f" ({timing_reason(m)})" if valid is False else ""),
                  cls=validity[valid][1])
            + _td(_fmt(late.get("p99"), 2)) + _td(up.get("stalls", "–"))
            + _td(fit.get("method", "–"), True) + _td(_fmt(fit.get("offset_err_ms"), 2))
            + "</tr>"
        )  # fmt: skip
    out.append("</table>")
    return "".join(out)


def _audio_src(wav: Path, mode: str, html_dir: Path) -> str | None:
    if mode == "none" or not wav.exists():
        return None
    if mode == "embed":
        return "data:audio/wav;base64," + base64.b64encode(wav.read_bytes()).decode("ascii")
    return Path(os.path.relpath(wav, html_dir)).as_posix()


def _rollout_section(m: dict[str, Any], rollout_dir: Path, mode: str, html_dir: Path) -> str:
    rid = str(m.get("rollout_id"))
    status = str(m.get("status", "?"))
    out = [
        f'<section class="rollout" id="r-{escape(rid)}"><h3>{escape(rid)} '
        f'<span class="{_cls_status(status)}">{escape(status)}</span></h3>'
    ]
    rule = _obj(m.get("timing")).get("rule")
    if rule:
        out.append(f"<p>{escape(str(rule))}</p>")
    tags = _obj(m.get("tags"))
    if tags or m.get("censored"):
        bits = [f"{escape(str(k))}={escape(str(v))}" for k, v in sorted(tags.items())]
        if m.get("censored"):
            bits.append("<b>censored</b> (cut while the system was talking)")
        out.append(f'<p class="tags">tags: {" · ".join(bits)}</p>')
    try:
        view = load_rollout(rollout_dir)
        out.append(_timeline(view, rollout_dir))
    except (RigError, OSError) as exc:
        out.append(f'<p class="muted">no timeline: {escape(str(exc))}</p>')
    for track in ("user", "system"):
        src = _audio_src(rollout_dir / f"{track}.wav", mode, html_dir)
        if src is not None:
            # each name directly above its own player (a figure of two blocks)
            out.append(
                f'<figure class="track"><figcaption>{track}.wav</figcaption><audio controls '
                f'preload="none" src="{escape(src)}"></audio></figure>'
            )
    out.append("</section>")
    return "".join(out)


def _timeline(view: RolloutView, rollout_dir: Path) -> str:
    rates = {}
    for name in ("user", "system"):
        wav = rollout_dir / f"{name}.wav"
        rates[name] = read_track(wav)[1] if wav.exists() else view.sample_rate or 16_000
    act = _obj(_obj(view.metrics.get("timing")).get("activity"))

    def segs(key: str) -> list[tuple[float, float]]:
        out = []
        for s in act.get(key) or []:
            if isinstance(s, list | tuple) and len(s) == 2 and all(_num(x) is not None for x in s):
                out.append((float(s[0]), float(s[1])))
        return out

    return timeline_svg(
        view.user, rates["user"], view.system, rates["system"],
        user_speech=segs("user"), system_speech=segs("system"),
        marks=[(mk.t_s, mk.label or mk.kind, MARK_COLORS.get(mk.kind, "#999"))
               for mk in view.marks],
        responses=[(r.user_end_s, r.onset_s, r.latency_ms) for r in view.responses],
    )  # fmt: skip


def audio_mode(run_dir: Path, requested: str, max_embed_mb: float) -> tuple[str, str]:
    """(mode, note): embed falls back to links past the size cap, and says so."""
    if requested != "embed":
        return requested, ""
    total = sum(p.stat().st_size for p in (run_dir / "rollouts").glob("*/*.wav"))
    if total > max_embed_mb * 1e6:
        return "link", (
            f"audio linked, not embedded: the run's WAVs total {total / 1e6:.1f} MB, over "
            f"the {max_embed_mb:g} MB cap (--html-embed-max-mb); keep this file beside the run"
        )
    return "embed", ""


def build_html(
    run_dir: str | Path,
    report: dict[str, Any],
    rollouts: list[dict[str, Any]],
    gates: list[GateResult] | None = None,
    *,
    manifest: dict[str, Any] | None = None,
    html_path: str | Path = "report.html",
    audio: str = "embed",
    max_embed_mb: float = 25.0,
    extra_html: str = "",
) -> str:
    """The page; `extra_html` (already escaped: the scores section of rig.scoring.render)
    goes after the per-item table."""
    root = Path(run_dir)
    html_dir = Path(html_path).resolve().parent
    mode, note = audio_mode(root, audio, max_embed_mb)
    responses_html, series = _responses(rollouts, bool(report.get("timing_invalid_excluded")))
    title = f"rig run {report['run_id']}"
    body = [
        f"<h1>{escape(title)}</h1>",
        "<h2>Summary</h2>",
        _summary(report, gates or [], manifest or {}),
        "<h2>Per item</h2>",
        _items(report),
        extra_html,
        "<h2>Latency CDFs</h2>",
        "<p class='muted'>response latency on the playback clock and its split (the "
        "responses of the summary: ok rollouts whose own timing held; every value one step)"
        "</p>",
        cdf_svg({k: v for k, v in series.items() if v}),
        "<h2>Latency split per response</h2>",
        responses_html,
        *voice_section(report),
        "<h2>Timing validity</h2>",
        _validity(rollouts),
        "<h2>Rollouts</h2>",
        f'<p class="muted">{escape(note)}</p>' if note else "",
    ]
    for m in rollouts:
        body.append(_rollout_section(m, root / "rollouts" / str(m.get("rollout_id")), mode,
                                     html_dir))  # fmt: skip
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        + "".join(body)
        + "</body></html>\n"
    )


def write_html(path: str | Path, text: str) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
