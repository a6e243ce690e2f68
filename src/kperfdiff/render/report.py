"""The report: one self-contained HTML file (or Markdown for a mailing list).

The HTML has inline CSS, inline SVG and, when it has flame graphs, one
inline script (:data:`kperfdiff.render.flamescript.SCRIPT`, their search,
zoom and details line): no script, font, image or style sheet is fetched,
and the Content-Security-Policy allows that one script by its SHA-256 and
nothing else, so it opens offline and can be mailed. Without JavaScript the
flame graphs are static and still complete. Every name and label that comes from
data (benchmark, variant, symbol, machine fact) is HTML-escaped.

Sections, the result first: the comparison tables; plots (change bars with
intervals per benchmark, scaling curves over core counts, the improvement
table as a heat map; each says what its bars, points and whiskers are); the
kernel counters that explain changes, per variant; for each benchmark that
changed significantly and has profiles on both sides, the kperfdiff table and
the differential flame graph; last, folded in a <details> element whose
summary names the facts that differ, the machine facts of every variant side
by side (differences highlighted).
"""
from __future__ import annotations

import base64
import hashlib
import math
from html import escape
from typing import TYPE_CHECKING

from kperfdiff.render import compare as rc
from kperfdiff.render import diff as rdiff
from kperfdiff.render import flamegraph, flamescript, svgplot
from kperfdiff.render.bench import FACT_ORDER
from kperfdiff.render.compare import (
    block_cells,
    block_table,
    block_title,
    centres_table,
    column_unit,
    explain_lines,
    header_lines,
    legend_lines,
    side_label,
    verdict_lines,
)
from kperfdiff.render.table import Table, cell, md_escape, number
from kperfdiff.render.table import to_markdown as table_markdown

if TYPE_CHECKING:  # types only: the renderer reads nothing
    from kperfdiff.analysis.bench_compare import Comparison
    from kperfdiff.analysis.report_data import ProfileDiff, ReportData
# Counters that explain a change of page size, TLB or memory behaviour (per repetition, machine-wide).
EXPLAIN = [
    ("vmstat.thp_fault_alloc", "THP fault alloc"), ("vmstat.thp_fault_fallback", "THP fault fallback"),
    ("vmstat.thp_split_page", "THP split page"), ("vmstat.thp_split_pmd", "THP split pmd"),
    ("vmstat.thp_collapse_alloc", "THP collapse"), ("vmstat.pgfault", "page faults"),
    ("vmstat.pgmajfault", "major faults"), ("irq.TLB", "TLB shootdown IRQs"),
    ("vmstat.nr_tlb_remote_flush", "remote TLB flush"),
    ("vmstat.nr_tlb_remote_flush_received", "remote TLB flush received"),
    ("vmstat.pswpin", "swap in"), ("vmstat.pswpout", "swap out"),
]

# What the plots draw (plots() below hands them exactly these): the whiskers above all.
BARS_CAPTION = ("bar: change of the centre, pale when not significant; whiskers: {confidence:.0%} "
                "confidence interval of the change")
SCALING_CAPTION = ("point: centre (geometric mean of the per-repetition medians); whiskers: min-max of "
                   "the per-repetition medians")

CSS = """
body{font-family:sans-serif;margin:1.5em auto;max-width:1250px;color:#222;line-height:1.35}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:2em}h3{font-size:1.02em}
table{border-collapse:collapse;margin:.6em 0;font-size:.86em}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:right;vertical-align:top}
th{background:#f2f2f2}td.l,th.l{text-align:left}
tr.differs td{background:#fff4c2}tr.differs td.l{font-weight:bold}
td.sig{font-weight:bold}td.better{background:#e3f4e3}td.worse{background:#fbe3e3}
.note{color:#555;font-size:.85em}.plots{display:flex;flex-wrap:wrap;gap:10px}
.flame{overflow-x:auto;border:1px solid #ddd;margin:.5em 0}
figure{margin:0}.emulated{color:#a00;font-weight:bold}code{background:#f5f5f5;padding:0 .2em}
details.machines>summary,details.method>summary{cursor:pointer;color:#333}p.verdict{font-size:1.05em;margin:.3em 0}
"""


def esc(s) -> str:
    """Text from data (names, labels, symbols, file text) made safe inside HTML."""
    return escape("" if s is None else str(s), quote=True)


# -- HTML pieces ------------------------------------------------------------------

def table_html(t: Table, *, cls_for=None) -> str:
    aligns = t.aligns()
    out = ["<table>"]
    if t.title:
        out.append(f"<caption>{esc(t.title)}</caption>")
    out.append("<tr>" + "".join(f'<th class="{"l" if a == "l" else ""}">{esc(c)}</th>'
                                for c, a in zip(t.columns, aligns)) + "</tr>")
    for i, r in enumerate(t.rows):
        tds = []
        for j, (v, a) in enumerate(zip(r, aligns)):
            cls = ["l"] if a == "l" else []
            if cls_for:
                cls += cls_for(i, j)
            tds.append(f'<td class="{" ".join(cls)}">{esc(cell(v))}</td>')
        out.append("<tr>" + "".join(tds) + "</tr>")
    out.append("</table>")
    for n in t.notes:
        out.append(f'<p class="note">{esc(n.strip())}</p>')
    return "\n".join(out)


def fact_rows(data: ReportData) -> list[tuple[str, list, bool]]:
    """(fact, value per side, whether the sides differ) for every fact some side has."""
    labels = [s.label for s in data.cmp.sides]
    keys = ["target", "runs"] + FACT_ORDER + ["perf events", "knobs", "cmdline", "env", "cpus", "vars"]
    rows = []
    for k in dict.fromkeys(keys):
        if any(k in data.facts[lab] for lab in labels):
            vals = [data.facts[lab].get(k, "") for lab in labels]
            rows.append((k, vals, k != "runs" and len({str(v) for v in vals}) > 1))
    return rows


def facts_html(data: ReportData) -> str:
    labels = [s.label for s in data.cmp.sides]
    out = ["<table><tr><th class=\"l\">fact</th>" + "".join(f"<th>{esc(side_label(data.cmp, lab))}</th>"
                                                           for lab in labels) + "</tr>"]
    for k, vals, differs in fact_rows(data):
        out.append(f'<tr class="{"differs" if differs else ""}"><td class="l">{esc(k)}</td>'
                   + "".join(f'<td class="l">{esc(v)}</td>' for v in vals) + "</tr>")
    out.append("</table><p class=\"note\">Highlighted rows differ between variants.</p>")
    return "\n".join(out)


def machines_html(data: ReportData) -> str:
    """The machine facts, folded: the summary line names the facts that differ between variants."""
    rows = fact_rows(data)
    differ = [k for k, _, d in rows if d]
    said = (f"{len(differ)} of {len(rows)} differ between variants: {', '.join(differ)}" if differ else
            f"{len(rows)} facts, the same for every variant" if len(data.cmp.sides) > 1 else f"{len(rows)} facts")
    return (f'<details class="machines"><summary>CPU, memory, kernel, knobs and the rest of each machine '
            f"({esc(said)})</summary>\n{facts_html(data)}\n</details>")


def _change_classes(blk, cmp):
    cells = [x for _, _, x in block_cells(cmp, blk)]

    def f(i, j):
        if i >= len(cells) or j < 2:
            return []
        x = cells[i]
        if math.isnan(x.change) or not x.significant:
            return []
        return ["better" if x.change > 0 else "worse", "sig"]
    return f


def comparison_html(cmp: Comparison) -> str:
    out = [f'<p class="emulated">{esc(h)}</p>' for h in header_lines(cmp)[1:]]
    out.append(table_html(centres_table(cmp)))
    for blk in cmp.blocks:
        out.append(table_html(block_table(cmp, blk), cls_for=_change_classes(blk, cmp)))
    out += [f'<p class="note">{esc(h)}</p>' for h in legend_lines(cmp, "the method below")]
    out.append('<details class="method"><summary>How the changes are computed</summary>'
               + "".join(f'<p class="note">{esc(h)}</p>' for h in explain_lines(cmp)) + "</details>")
    return "\n".join(out)


def plots(cmp: Comparison) -> dict[str, str]:
    """name -> SVG: change bars and scaling curve per column, a heat map per comparison; a scaling
    curve only over two core counts or more, a heat map only of two cells or more
    (:func:`skipped_plots` says which were left out)."""
    out: dict[str, str] = {}
    base_blocks = [b for b in cmp.blocks if b.kind == "baseline"]
    for n, k in enumerate(cmp.keys):
        ax = column_unit(cmp, k)
        if base_blocks:
            vals = {}
            for blk in base_blocks:
                for c in cmp.cores:
                    x = blk.cells.get((k, c))
                    if x is not None:
                        vals[(f"P={c}", blk.variant)] = (x.change, x.low, x.high, x.significant)
            out[f"bars-{n}"] = svgplot.change_bars(f"{cmp.name(k)}: change vs {cmp.baseline.label} (positive = "
                                                   f"better)", [f"P={c}" for c in cmp.cores],
                                                   [b.variant for b in base_blocks], vals, caption=BARS_CAPTION
                                                   .format(confidence=cmp.confidence))
        if len(cmp.cores) < 2:
            continue
        series = {}
        for s in cmp.sides:
            pts = []
            for c in cmp.cores:
                smp = s.samples.get((k, c))
                if smp is None or smp.status != "ok":
                    continue
                rm = smp.rep_medians
                pts.append((c, smp.centre, min(rm) if rm else math.nan, max(rm) if rm else math.nan))
            series[s.label] = pts
        out[f"scaling-{n}"] = svgplot.scaling(f"{cmp.name(k)}: centre over core counts ({ax.title})", ax.title,
                                              cmp.cores, series, caption=SCALING_CAPTION, ax=ax)
    for m, blk in enumerate(cmp.blocks):
        if len(blk.cells) < 2:
            continue
        vals = {(c, cmp.name(k)): (x.change, x.significant) for (k, c), x in blk.cells.items()}
        out[f"heatmap-{m}"] = svgplot.heatmap(block_title(cmp, blk), cmp.cores, [cmp.name(k) for k in cmp.keys], vals)
    return out


def skipped_plots(cmp: Comparison) -> list[str]:
    """Why plots with a single point were left out ("" for none)."""
    out = []
    if len(cmp.cores) < 2:
        out.append(f"No centre-over-core-counts plot: every benchmark ran at one core count (P={cmp.cores[0]})."
                   if cmp.cores else "No centre-over-core-counts plot: nothing was measured.")
    if any(len(b.cells) < 2 for b in cmp.blocks):
        out.append("No heat map of a comparison with a single cell: its table above says it all.")
    return out


def monitors_table(cmp: Comparison) -> Table | None:
    moved = [(k, name) for k, name in EXPLAIN
             if any(smp.monitors.get(k) for s in cmp.sides for smp in s.samples.values())]
    if not moved:
        return None
    t = Table(["benchmark", "P", "variant"] + [name for _, name in moved],
              title="kernel counters per repetition (machine-wide delta around the benchmark processes)",
              align=["l", "r", "l"] + ["r"] * len(moved))
    for k in cmp.keys:
        for c in cmp.cores:
            for s in cmp.sides:
                smp = s.samples.get((k, c))
                if smp is None or smp.status != "ok":
                    continue
                reps = max(smp.monitors.get("_reps", 1), 1)
                t.rows.append([smp.benchmark, c, s.label]
                              + [number(smp.monitors.get(mk, 0) / reps) for mk, _ in moved])
    return t


def flame_svg(pd: ProfileDiff, n: int = 0, *, script: bool = False) -> str:
    """The ``n``-th differential flame graph of a page, as an ``<svg>`` element (ids prefixed
    ``fN-``); ``script``: with its interactive script (a file of its own), else the page carries it."""
    svg = flamegraph.differential_svg(pd.result, title=pd.title, script=script, id_prefix=f"f{n}-")
    return svg[svg.find("<svg"):] if "<svg" in svg else svg


def profiles_line(pd: ProfileDiff) -> str:
    """Which profiles the diff below it ranks: every stored repetition of each side."""
    return (f"profiles of every stored repetition, parallel copies merged: {pd.reps[0]} of {pd.reference}, "
            f"{pd.reps[1]} of {pd.variant} (as kperfdiff diff reads them)")


def sides_html(result) -> str:
    """A diff's line per side (file, event, samples, kernel share, kernel symbols and how they matched)."""
    return "\n".join(f'<p class="note side">{escape(line)}</p>' for line in rdiff.side_lines(result))


def members_html(row, ncols: int, result) -> str:
    """A role row's members with their own values on each side, as an expandable table row."""
    trs = "".join(f'<tr><td class="l">{esc(name)}</td><td>{cell(a)}</td><td>{cell(b)}</td>'
                  f'<td>{rdiff.signed(b - a)}</td><td>{rdiff.ratio_cell(result, a, b)}</td></tr>'
                  for name, a, b in rdiff.member_rows(row))
    return (f'<tr class="members"><td colspan="{ncols}" class="l"><details><summary>members of '
            f'{esc(row.symbol)}</summary><table><tr><th class="l">member</th><th>A</th><th>B</th><th>delta</th>'
            f'<th>B/A</th></tr>{trs}</table></details></td></tr>')


def diff_tables_html(pd: ProfileDiff) -> str:
    """A diff's side lines, where-the-time-is note, tables (a role row's members expandable under it)
    and legends."""
    result = pd.result
    parts = [sides_html(result)]
    if result.scope_note:
        parts.append(f'<p class="note">Note: {esc(result.scope_note)}.</p>')
    for k, t in enumerate(rdiff.tables(result, mark=True, members=None)):
        html = table_html(t)
        if k == 0:
            lines = html.split("\n")
            head = 2 + bool(t.title)     # <table>, the caption, the header row
            for i in reversed(range(len(t.rows))):
                r = result.common[i]
                if r.role and r.role != "inferred" and rdiff.member_rows(r):
                    lines.insert(head + i + 1, members_html(r, len(t.columns), result))
            html = "\n".join(lines)
        parts.append(html)
    parts.append(f'<p class="note">{esc(rdiff.columns_legend(result))}</p>')
    if result.significance:
        parts.append(f'<p class="note">{escape(rdiff.legend(result))}</p>')
    return "\n".join(parts)


def to_html(data: ReportData) -> str:
    cmp = data.cmp
    title = f"kperfdiff report: {cmp.title}"
    body = [f"<h1>{esc(title)}</h1>"] + [f'<p class="verdict">{esc(v)}</p>' for v in verdict_lines(cmp)] + [
            f'<p class="note">generated {esc(data.generated)}; baseline {esc(side_label(cmp, cmp.baseline.label))}; '
            f'variants {esc(", ".join(side_label(cmp, s.label) for s in cmp.sides[1:]))}</p>']
    if any(s.emulated for s in cmp.sides):
        body.append('<p class="emulated">Some results come from an EMULATED machine (marked emulated): '
                    'their times are not those of real hardware.</p>')
    body += ["<h2 id=\"tables\">Comparison</h2>", comparison_html(cmp),
             "<h2 id=\"plots\">Plots</h2>", '<div class="plots">']
    for name, svg in plots(cmp).items():
        body.append(f'<figure id="{esc(name)}">{svg}</figure>')
    body.append("</div>")
    body += [f'<p class="note">{esc(n)}</p>' for n in skipped_plots(cmp)]
    mt = monitors_table(cmp)
    body.append("<h2 id=\"counters\">Kernel counters</h2>")
    body.append(table_html(mt) if mt else "<p class=\"note\">No counter of interest moved.</p>")
    body.append("<h2 id=\"profiles\">Profiles of the benchmarks that changed significantly</h2>")
    if not data.diffs:
        body.append("<p class=\"note\">No benchmark changed significantly, or profiles were not requested.</p>")
    flames = 0
    for pd in data.diffs:
        body.append(f"<h3>{esc(pd.key)}, {pd.cores} core{'s' if pd.cores > 1 else ''}: {esc(pd.variant)} vs "
                    f"{esc(pd.reference)} ({pd.change:+.1f}%)</h3>")
        if pd.error:
            body.append(f'<p class="note">{esc(pd.error)}</p>')
            continue
        body.append(f'<p class="note">{esc(profiles_line(pd))}</p>')
        body.append(diff_tables_html(pd))
        body.append(f'<div class="flame">{flame_svg(pd, flames)}</div>')
        flames += 1
    if flames:
        body.append('<noscript><p class="note">With JavaScript on, the flame graphs offer search (the matched '
                    'share of each side), click-to-zoom and a details line; without it they are static, and '
                    'each frame\'s tooltip gives both shares.</p></noscript>')
    body += ["<h2 id=\"machines\">Machines</h2>", machines_html(data)]
    return html_page(title, body, scripts=(flamescript.SCRIPT,) if flames else ())


def csp_hash(script: str) -> str:
    """The Content-Security-Policy source that allows an inline script of exactly this text."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii") + "'"


def html_page(title: str, body: list[str], css: str = CSS, scripts: tuple[str, ...] = ()) -> str:
    """A self-contained page: inline CSS and SVG, the given inline ``scripts`` at the end of the
    body, and a Content-Security-Policy that fetches nothing and runs those scripts only (by hash)."""
    csp = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    if scripts:
        csp += "; script-src " + " ".join(csp_hash(s) for s in scripts)
    body = body + [f"<script>{s}</script>" for s in scripts]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{css}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def to_markdown(data: ReportData, files_dir: str) -> tuple[str, dict[str, str]]:
    """Markdown for a mailing-list post, and the SVG files (name -> content) it links to."""
    cmp = data.cmp
    files: dict[str, str] = {}
    out = [f"## kperfdiff report: {md_escape(cmp.title)}", ""] + [md_escape(v) + "\n" for v in verdict_lines(cmp)] \
        + [rc.to_markdown_all(cmp)]
    mt = monitors_table(cmp)
    if mt:
        out.append(table_markdown(mt))
    ps = plots(cmp)
    out.append("### Plots\n")
    for name, svg in ps.items():
        fn = f"{name}.svg"
        files[fn] = svg
        out.append(f"- [{name}]({files_dir}/{fn})")
    out += [""] + [md_escape(n) + "\n" for n in skipped_plots(cmp)]
    for i, pd in enumerate(data.diffs):
        out.append(f"### {md_escape(pd.key)}, P={pd.cores}: {md_escape(pd.variant)} vs "
                   f"{md_escape(pd.reference)} ({pd.change:+.1f}%)\n")
        if pd.error:
            out.append(md_escape(pd.error) + "\n")
            continue
        out.append(md_escape(profiles_line(pd)) + "\n")
        out.append(rdiff.to_markdown_text(pd.result))
        fn = f"flame-{i}.svg"
        files[fn] = flame_svg(pd, i, script=True)
        out.append(f"Differential flame graph: [{fn}]({files_dir}/{fn})\n")
    return "\n".join(out) + "\n", files


def top_mover_text(top) -> str:
    """The kperfdiff table of the benchmark that moved most (a
    :class:`kperfdiff.analysis.report_data.TopMover`), or a sentence why there is none."""
    if top is None:
        return "kperfdiff: no benchmark has a change to profile\n"
    c, blk, pd = top.cell, top.block, top.diff
    head = (f"benchmark that moved most: {top.name or c.key} -P {c.cores}, {blk.variant} vs {blk.reference}: "
            f"{rc.ratio_text(c.change)} ({c.change:+.1f}%){' (significant)' if c.significant else ' (not significant)'}"
            "\n")
    if pd.error:
        return head + f"kperfdiff: {pd.error}\n"
    return head + rdiff.render(pd.result, "text")
