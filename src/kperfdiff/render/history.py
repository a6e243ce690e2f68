"""A benchmark's history (`kperfdiff history`) as text, JSON and a self-contained HTML page with
its plot, and the change points of stored series (`kperfdiff changes`) as text and JSON."""
from __future__ import annotations

import datetime as dt
import json
import math

from typing import TYPE_CHECKING

from kperfdiff.analysis.history import Detection, Point, Series, point_of
from kperfdiff.core import modes
from kperfdiff.render import svgplot
from kperfdiff.render.diff import side_lines, tables
from kperfdiff.render.diff import to_json_text as diff_json_text
from kperfdiff.render.report import esc, html_page, table_html
from kperfdiff.render.table import Table, number, percent, to_csv, to_json, to_markdown, to_text

if TYPE_CHECKING:  # types only: a renderer reads no profile
    from kperfdiff.analysis.profile_diff import DiffResult

JSON_VERSION = 1
HISTORY_CAPTION = ("point: a run's centre (geometric mean of its per-repetition medians); whiskers: its 95% "
                   "interval; hollow: an outlier, set aside; orange line: the level between change points; "
                   "dashed line: a change point")


def _when(t: float) -> str:
    return dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")


def _commit(p: Point) -> str:
    if not p.commit:
        return "-"
    return p.commit[:12] + (f" {p.subject[:40]}" if p.subject else "")


def _ends(centre: float, hw: float) -> tuple[float, float]:
    if not (math.isfinite(centre) and math.isfinite(hw)):
        return math.nan, math.nan
    return centre / (1 + hw / 100), centre * (1 + hw / 100)


def _point_json(p: Point) -> dict:
    return {"time": p.run.started_at, "run": p.run.id, "label": p.run.label, "variant": p.run.variant,
            "target": p.run.target, "machine": p.machine.id, "fingerprint": p.machine.fingerprint,
            "kernel": p.kernel, "commit": p.commit, "commit_subject": p.subject, "results": p.results,
            "centre": p.centre, "half_width_pct": p.half_width_pct, "reps": p.reps, "n": p.n,
            "detectable_pct": p.detectable_pct, "modes": p.modes.as_list() if p.modes else []}


def _series_json(s: Series) -> dict:
    return {"benchmark": s.benchmark, "params": s.params, "copies": s.copies, "host": s.host,
            "unit": s.unit, "better": s.better}


def _several_hosts(series: list[Series]) -> str:
    hosts = sorted({s.host for s in series})
    if len(hosts) < 2:
        return ""
    return (f"The results come from {len(hosts)} machines ({', '.join(hosts)}): each has its own series, "
            f"never mixed; --machine picks one.")


def series_unit(s: Series, ops: dict[str, str] | None = None) -> svgplot.AxisUnit:
    """The one unit a series is shown in, in its table and its plot (:func:`svgplot.quantity_unit`)."""
    return svgplot.quantity_unit(s.unit, [p.centre for p in s.points], op=(ops or {}).get(s.benchmark, ""))


def history_table(s: Series, ops: dict[str, str] | None = None) -> Table:
    ax = series_unit(s, ops)
    t = Table(["time", "run", "label", "variant", "machine", "kernel", "commit", "centre", "unit", "+-95%",
               "detect", "reps", "n"], align=["l", "r", "l", "l", "l", "l", "l", "r", "l", "r", "r", "r", "r"],
              title=f"{s.name}: {len(s.points)} result{'s' if len(s.points) != 1 else ''}"
                    + (", higher is better" if s.better == "higher" else ""))
    for p in s.points:
        t.rows.append([_when(p.run.started_at), p.run.id, p.run.label or "-", p.run.variant or "-",
                       (p.machine.fingerprint or "-")[:8], p.kernel or "-", _commit(p), number(p.centre * ax.factor),
                       ax.title,
                       percent(p.half_width_pct, mark=True), percent(p.detectable_pct, mark=True), p.reps, p.n])
    t.notes = [f"  run {p.run.id}: {modes.describe(p.modes, ax.value)}" for p in s.points if p.modes]
    return t


def history(series: list[Series], fmt: str = "text", detections: list[Detection] | None = None,
            ops: dict[str, str] | None = None) -> str:
    """The series of a benchmark, one table each (text), one document (json) or one page with a plot
    per series, its change points marked when ``detections`` has them (html); table and plot in one
    unit, saying what one operation is when ``ops`` (benchmark -> the catalogue's op) knows."""
    note = _several_hosts(series)
    if fmt == "json":
        return to_json({"version": JSON_VERSION, "series": [
            {**_series_json(s), "points": [_point_json(p) for p in s.points]} for s in series]})
    if fmt == "html":
        return history_html(series, detections or [], note, ops)
    if fmt == "csv":    # one table: every series' rows, the series named in the first column
        tables = [history_table(s, ops) for s in series]
        out = Table(["series", *tables[0].columns])
        out.rows = [[s.name, *r] for s, t in zip(series, tables) for r in t.rows]
        return to_csv(out)
    table = to_markdown if fmt == "markdown" else to_text
    return "\n".join(table(history_table(s, ops)) for s in series) + (f"\n{note}\n" if note else "")


def history_plot(s: Series, d: Detection | None, ops: dict[str, str] | None = None) -> str:
    pts = [(f"run {p.run.id}" + (f" ({p.run.label})" if p.run.label else ""), p.centre,
            *_ends(p.centre, p.half_width_pct)) for p in s.points]
    changes, levels, outliers = [], [], []
    if d is not None:
        analysed = [i for i, p in enumerate(s.points) if math.isfinite(p.centre) and p.centre > 0]
        # change points index the analysed points: map them to the plotted ones
        changes = [analysed[c.index] for c in d.changes]
        outliers = [analysed[i] for i in d.outliers]
        bounds = [0] + changes + [len(s.points)]
        sides = [c.before for c in d.changes] + ([d.changes[-1].after] if d.changes else [])
        levels = [(bounds[i], bounds[i + 1], side.centre) for i, side in enumerate(sides)]
    return svgplot.history(s.name, s.unit or "", pts, changes, levels, outliers=tuple(outliers),
                           caption=HISTORY_CAPTION, ax=series_unit(s, ops))


def history_html(series: list[Series], detections: list[Detection], note: str = "",
                 ops: dict[str, str] | None = None) -> str:
    found = {d.series.key: d for d in detections}
    title = f"kperfdiff history: {', '.join(dict.fromkeys(s.benchmark for s in series))}"
    body = [f"<h1>{esc(title)}</h1>"]
    if note:
        body.append(f'<p class="note">{esc(note)}</p>')
    for s in series:
        d = found.get(s.key)
        body.append(f"<h2>{esc(s.name)}</h2>")
        body.append(f"<figure>{history_plot(s, d, ops)}</figure>")
        if d is not None:
            body.append(f'<p class="note">{esc(detection_line(d))}</p>')
        body.append(table_html(history_table(s, ops)))
    return html_page(title, body)


# -- change points -----------------------------------------------------------------------
def detection_line(d: Detection) -> str:
    n = len(d.series.points) - d.left_out
    if not d.changes:
        return f"no change point in {n} points"
    where = ", ".join(f"before run {point_of(d, c.index).run.id}" for c in d.changes)
    return f"{len(d.changes)} change point{'s' if len(d.changes) > 1 else ''} in {n} points: {where}"


def _side_text(d: Detection, side) -> str:
    first, last = point_of(d, side.first), point_of(d, side.first + side.points - 1)
    runs = first.name if side.points == 1 else f"{first.name} .. {last.name}"
    hw = percent(side.half_width_pct, mark=True)
    aside = f", {side.points - side.measured} outlier{'s' if side.points - side.measured > 1 else ''} set aside" \
        if side.measured < side.points else ""
    return f"{number(side.centre)} {d.series.unit or ''} +-{hw} over {side.points} runs ({runs}{aside})"


def _ranking_text(r: DiffResult | str | None) -> list[str]:
    if r is None:
        return ["  ranking: the runs on either side do not both have profiles of this benchmark"]
    if isinstance(r, str):
        return [f"  ranking: {r}"]
    out = ["  ranking of the profiles, run before (A) vs run after (B):"] + [f"    {ln}" for ln in side_lines(r)]
    for t in tables(r):
        if t.rows:
            out += [f"    {ln}" for ln in to_text(t).rstrip("\n").split("\n")]
    return out


def changes(detections: list[Detection], fmt: str = "text",
            rankings: dict[tuple[str, int], DiffResult | str] | None = None) -> str:
    """Each series' change points: the runs either side, their centres with an interval, the change
    (positive = better) with its interval, Otava's p-value, and the ranking of the two runs' profiles
    when ``rankings`` has it (series key, change index) -> the diff, or why there is none."""
    rankings = rankings or {}
    if fmt == "json":
        return to_json({"version": JSON_VERSION, "series": [_detection_json(d, rankings) for d in detections]})
    out = []
    for d in detections:
        notes = [f"{d.left_out} without a centre left out" if d.left_out else "",
                 "outliers set aside: run " + ", ".join(str(point_of(d, i).run.id) for i in d.outliers)
                 if d.outliers else ""]
        notes = [n for n in notes if n]
        out.append(f"{d.series.name}: {detection_line(d)}" + (f" ({'; '.join(notes)})" if notes else ""))
        for c in d.changes:
            before, after = point_of(d, c.index - 1), point_of(d, c.index)
            ch = c.change
            word = "better" if ch.change > 0 else "worse"
            out.append(f"  change between run {before.name} and run {after.name}: {percent(ch.change, signed=True)}% "
                       f"({word}), 95% interval [{percent(ch.low, signed=True)}, {percent(ch.high, signed=True)}]%, "
                       f"p {'= ' + format(c.pvalue, '.2g') if c.pvalue > 0 else '< 1e-300'}")
            for k in (before, after):
                if k.commit or k.kernel:
                    out.append(f"    run {k.name}: kernel {k.kernel or '-'}" + (f", commit {_commit(k)}" if k.commit else ""))
            out.append(f"    before: {_side_text(d, c.before)}")
            out.append(f"    after:  {_side_text(d, c.after)}")
            out += _ranking_text(rankings.get((d.series.key, c.index)))
    hosts = _several_hosts([d.series for d in detections])
    if hosts:
        out.append(hosts)
    return "\n".join(out) + "\n"


def _detection_json(d: Detection, rankings: dict) -> dict:
    def side(sd) -> dict:
        return {"points": sd.points, "measured": sd.measured, "centre": sd.centre, "half_width_pct": sd.half_width_pct,
                "runs": [point_of(d, i).run.id for i in range(sd.first, sd.first + sd.points)]}
    cps = []
    for c in d.changes:
        r = rankings.get((d.series.key, c.index))
        cps.append({"index": c.index, "run_before": _point_json(point_of(d, c.index - 1)),
                    "run_after": _point_json(point_of(d, c.index)), "before": side(c.before), "after": side(c.after),
                    "change_pct": c.change.change, "low_pct": c.change.low, "high_pct": c.change.high,
                    "pvalue": c.pvalue,
                    "ranking": json.loads(diff_json_text(r)) if r is not None and not isinstance(r, str) else None,
                    "no_ranking": r if isinstance(r, str) else (None if r is not None else
                                                                "no profiles on both sides")})
    return {**_series_json(d.series), "points": len(d.series.points) - d.left_out, "left_out": d.left_out,
            "outliers": [point_of(d, i).run.id for i in d.outliers], "analysed_from": d.analysed_from,
            "changes": cps}
