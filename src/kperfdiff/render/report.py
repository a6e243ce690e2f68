"""The report: one self-contained HTML file (or Markdown for a mailing list).

The HTML has inline CSS and inline SVG only: no script, font, image or
style sheet is fetched (a Content-Security-Policy says so to the browser),
so it opens offline and can be mailed. Every name and label that comes from
data (benchmark, variant, symbol, machine fact) is HTML-escaped.

Sections: machine facts of every variant side by side (differences
highlighted); the comparison tables; plots (change bars with intervals per
benchmark, scaling curves over core counts, the improvement table as a heat
map); for each benchmark that changed significantly and has profiles on both
sides, the kperfdiff table and the differential flame graph; the kernel
counters that explain changes, per variant.
"""
from __future__ import annotations

import datetime as dt
import math
import sys
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from ..compare import Comparison
from ..errors import InputError, KperfdiffError
from . import svgplot
from .bench import FACT_ORDER, _num
from .compare import block_title, header_lines, medians_table, side_label
from .table import Table, cell

MAX_PROFILES_PER_SIDE = 6
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
"""


def _e(s) -> str:
    return escape("" if s is None else str(s), quote=True)


@dataclass
class ProfileDiff:
    variant: str
    reference: str
    key: str
    cores: int
    change: float
    result: object = None          # kperfdiff.diff.DiffResult
    svg: str = ""
    error: str = ""


@dataclass
class ReportData:
    cmp: Comparison
    facts: dict[str, dict]                  # side label -> machine facts (+ knobs)
    diffs: list[ProfileDiff] = field(default_factory=list)
    generated: str = ""


# -- gathering ---------------------------------------------------------------------

def _side_facts(store, side) -> dict:
    f = dict(side.facts)
    if side.run_ids:
        run = store.get_run(side.run_ids[0])
        o = run.options or {}
        for k in ("knobs", "env", "cpus", "vars", "cmdline"):
            if o.get(k):
                v = o[k]
                f[k] = ", ".join(f"{a}={b}" for a, b in v.items()) if isinstance(v, dict) else v
        f["runs"] = ", ".join(str(i) for i in side.run_ids)
        f["target"] = run.target
    ev = f.get("perf_events") or {}
    if isinstance(ev, dict) and ev:
        f["perf events"] = ", ".join(e for e, ok in ev.items() if ok) or "none"
    return f


def load_profiles(entries: list[dict], label: str) -> list:
    """One profile per repetition (its parallel copies merged), at most MAX_PROFILES_PER_SIDE;
    a missing file is an error naming it, never a silently smaller side."""
    from ..errors import InputError
    from ..ingest.load import load
    from ..ingest.profile import merge
    by_rep: dict = {}
    for p in entries:
        by_rep.setdefault((p.get("run_id") or 0, p.get("rep") or 0), []).append(p)
    out = []
    for rep in sorted(by_rep)[:MAX_PROFILES_PER_SIDE]:
        copies = []
        for p in by_rep[rep]:
            if not Path(p["path"]).exists():
                raise InputError(f"the profile {p['path']} is missing from the store's artefact folder")
            prof = load(p["path"], kallsyms=p.get("kallsyms"), label=label)
            for k in ("ops", "cpu_time_ns"):
                if p.get(k):
                    prof.meta[k] = p[k]
            copies.append(prof)
        prof = merge(copies, by_rep[rep][0]["path"])
        prof.label = label
        out.append(prof)
    return out


def profile_diff(cmp: Comparison, blk, c) -> ProfileDiff:
    """The kperfdiff ranking and differential flame graph of one changed cell (reference = A)."""
    pd = ProfileDiff(blk.variant, blk.reference, c.key, c.cores, c.change)
    a = cmp.side(blk.reference).profiles.get((c.benchmark_base, c.cores), [])
    b = cmp.side(blk.variant).profiles.get((c.benchmark_new, c.cores), [])
    if not a or not b:
        pd.error = "no profiles on both sides (run the experiment with profile = true)"
        return pd
    try:
        from ..diff import DiffOptions, add_folded, diff_profiles
        from . import flamegraph
    except ImportError as e:   # the diff stage is not installed in this build
        pd.error = f"profile diff unavailable in this kperfdiff ({e})"
        return pd
    try:
        pa = load_profiles(a, blk.reference)
        pb = load_profiles(b, blk.variant)
        if not pa or not pb:
            pd.error = "the profile files are missing from the artefact folder"
            return pd
        res = diff_profiles(pa, pb, DiffOptions(labels=(blk.reference, blk.variant)))
        add_folded(res, pa, pb)
        pd.result = res
        title = f"{c.benchmark_new} vs {c.benchmark_base}, {c.cores} core{'s' if c.cores > 1 else ''}: " \
                f"{blk.variant} vs {blk.reference}"
        svg = flamegraph.differential_svg(res, title=title)
        pd.svg = svg[svg.find("<svg"):] if "<svg" in svg else svg
    except KperfdiffError as e:
        pd.error = f"cannot diff the profiles: {e}"
    except Exception as e:  # a report must not be lost to one unreadable profile
        pd.error = f"cannot diff the profiles ({type(e).__name__}: {e})"
    return pd


def changed_cells(cmp: Comparison):
    """Per comparison vs the baseline and per column: the core count that changed most, if significant."""
    for blk in cmp.blocks:
        if blk.kind != "baseline":
            continue
        for k in cmp.keys:
            best = None
            for c in cmp.cores:
                x = blk.cells.get((k, c))
                if x is not None and x.significant and (best is None or abs(x.change) > abs(best.change)):
                    best = x
            if best is not None:
                yield blk, best


def gather(store, cmp: Comparison, *, profiles: bool = True) -> ReportData:
    data = ReportData(cmp, {s.label: _side_facts(store, s) for s in cmp.sides},
                      generated=dt.datetime.now().strftime("%Y-%m-%d %H:%M"))
    if profiles:
        data.diffs = [profile_diff(cmp, blk, c) for blk, c in changed_cells(cmp)]
    return data


# -- HTML pieces ------------------------------------------------------------------

def table_html(t: Table, *, cls_for=None) -> str:
    aligns = t.aligns()
    out = ["<table>"]
    if t.title:
        out.append(f"<caption>{_e(t.title)}</caption>")
    out.append("<tr>" + "".join(f'<th class="{"l" if a == "l" else ""}">{_e(c)}</th>'
                                for c, a in zip(t.columns, aligns)) + "</tr>")
    for i, r in enumerate(t.rows):
        tds = []
        for j, (v, a) in enumerate(zip(r, aligns)):
            cls = ["l"] if a == "l" else []
            if cls_for:
                cls += cls_for(i, j)
            tds.append(f'<td class="{" ".join(cls)}">{_e(cell(v))}</td>')
        out.append("<tr>" + "".join(tds) + "</tr>")
    out.append("</table>")
    for n in t.notes:
        out.append(f'<p class="note">{_e(n.strip())}</p>')
    return "\n".join(out)


def facts_html(data: ReportData) -> str:
    labels = [s.label for s in data.cmp.sides]
    keys = ["target", "runs"] + FACT_ORDER + ["perf events", "knobs", "cmdline", "env", "cpus", "vars"]
    seen = []
    for k in keys:
        if k not in seen and any(k in data.facts[lab] for lab in labels):
            seen.append(k)
    out = ["<table><tr><th class=\"l\">fact</th>" + "".join(f"<th>{_e(side_label(data.cmp, lab))}</th>"
                                                           for lab in labels) + "</tr>"]
    for k in seen:
        vals = [data.facts[lab].get(k, "") for lab in labels]
        differs = k != "runs" and len({str(v) for v in vals}) > 1
        out.append(f'<tr class="{"differs" if differs else ""}"><td class="l">{_e(k)}</td>'
                   + "".join(f'<td class="l">{_e(v)}</td>' for v in vals) + "</tr>")
    out.append("</table><p class=\"note\">Highlighted rows differ between variants.</p>")
    return "\n".join(out)


def _change_classes(blk, cmp):
    def f(i, j):
        if i >= len(cmp.cores) or j == 0 or j > len(cmp.keys):
            return []
        x = blk.cells.get((cmp.keys[j - 1], cmp.cores[i]))
        if x is None or math.isnan(x.change):
            return []
        cls = ["better" if x.change > 0 else "worse"] if x.significant else []
        return cls + (["sig"] if x.significant else [])
    return f


def comparison_html(cmp: Comparison) -> str:
    out = [f'<p class="note">{_e(h)}</p>' for h in header_lines(cmp)[1:]]
    for s in cmp.sides:
        out.append(table_html(medians_table(cmp, s.label)))
    for blk in cmp.blocks:
        from .compare import block_table
        out.append(table_html(block_table(cmp, blk), cls_for=_change_classes(blk, cmp)))
    return "\n".join(out)


def plots(cmp: Comparison) -> dict[str, str]:
    """name -> SVG: change bars and scaling curve per column, a heat map per comparison."""
    out: dict[str, str] = {}
    base_blocks = [b for b in cmp.blocks if b.kind == "baseline"]
    for n, k in enumerate(cmp.keys):
        if base_blocks:
            vals = {}
            for blk in base_blocks:
                for c in cmp.cores:
                    x = blk.cells.get((k, c))
                    if x is not None:
                        vals[(f"P={c}", blk.variant)] = (x.change, x.low, x.high, x.significant)
            out[f"bars-{n}"] = svgplot.change_bars(f"{k}: change vs {cmp.baseline.label} (positive = better)",
                                                   [f"P={c}" for c in cmp.cores],
                                                   [b.variant for b in base_blocks], vals)
        series = {}
        unit = ""
        for s in cmp.sides:
            pts = []
            for c in cmp.cores:
                smp = s.samples.get((k, c))
                if smp is None or smp.status != "ok":
                    continue
                unit = smp.unit or unit
                rm = smp.rep_medians
                pts.append((c, smp.centre, min(rm) if rm else math.nan, max(rm) if rm else math.nan))
            series[s.label] = pts
        out[f"scaling-{n}"] = svgplot.scaling(f"{k}: centre over core counts", unit, cmp.cores, series)
    for m, blk in enumerate(cmp.blocks):
        vals = {(c, k): (x.change, x.significant) for (k, c), x in blk.cells.items()}
        out[f"heatmap-{m}"] = svgplot.heatmap(block_title(cmp, blk), cmp.cores, cmp.keys, vals)
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
                              + [_num(smp.monitors.get(mk, 0) / reps) for mk, _ in moved])
    return t


def diff_tables_html(pd: ProfileDiff) -> str:
    from . import diff as rdiff
    out = "\n".join(table_html(t) for t in rdiff.tables(pd.result, mark=True))
    if not pd.result.significance:
        return out
    return out + f'\n<p class="note">{escape(rdiff.legend(pd.result))}</p>'


def to_html(data: ReportData) -> str:
    cmp = data.cmp
    title = f"kperfdiff report: {cmp.title}"
    body = [f"<h1>{_e(title)}</h1>",
            f'<p class="note">generated {_e(data.generated)}; baseline {_e(side_label(cmp, cmp.baseline.label))}; '
            f'variants {_e(", ".join(side_label(cmp, s.label) for s in cmp.sides[1:]))}</p>']
    if any(s.emulated for s in cmp.sides):
        body.append('<p class="emulated">Some results come from an EMULATED machine (marked emulated): '
                    'their times are not those of real hardware.</p>')
    body += ["<h2 id=\"machines\">Machines</h2>", facts_html(data),
             "<h2 id=\"tables\">Comparison</h2>", comparison_html(cmp),
             "<h2 id=\"plots\">Plots</h2>", '<div class="plots">']
    for name, svg in plots(cmp).items():
        body.append(f'<figure id="{_e(name)}">{svg}</figure>')
    body.append("</div>")
    mt = monitors_table(cmp)
    body.append("<h2 id=\"counters\">Kernel counters</h2>")
    body.append(table_html(mt) if mt else "<p class=\"note\">No counter of interest moved.</p>")
    body.append("<h2 id=\"profiles\">Profiles of the benchmarks that changed significantly</h2>")
    if not data.diffs:
        body.append("<p class=\"note\">No benchmark changed significantly, or profiles were not requested.</p>")
    for pd in data.diffs:
        body.append(f"<h3>{_e(pd.key)}, {pd.cores} core{'s' if pd.cores > 1 else ''}: {_e(pd.variant)} vs "
                    f"{_e(pd.reference)} ({pd.change:+.1f}%)</h3>")
        if pd.error:
            body.append(f'<p class="note">{_e(pd.error)}</p>')
            continue
        body.append(diff_tables_html(pd))
        body.append(f'<div class="flame">{pd.svg}</div>')
    csp = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e(title)}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def to_markdown(data: ReportData, files_dir: str) -> tuple[str, dict[str, str]]:
    """Markdown for a mailing-list post, and the SVG files (name -> content) it links to."""
    from ..render import compare as rc
    from .table import _md_escape
    cmp = data.cmp
    files: dict[str, str] = {}
    out = [f"## kperfdiff report: {_md_escape(cmp.title)}", "", rc.to_markdown_all(cmp)]
    mt = monitors_table(cmp)
    if mt:
        from .table import to_markdown as tmd
        out.append(tmd(mt))
    ps = plots(cmp)
    out.append("### Plots\n")
    for name, svg in ps.items():
        fn = f"{name}.svg"
        files[fn] = svg
        out.append(f"- [{name}]({files_dir}/{fn})")
    out.append("")
    for i, pd in enumerate(data.diffs):
        out.append(f"### {_md_escape(pd.key)}, P={pd.cores}: {_md_escape(pd.variant)} vs "
                   f"{_md_escape(pd.reference)} ({pd.change:+.1f}%)\n")
        if pd.error:
            out.append(_md_escape(pd.error) + "\n")
            continue
        from . import diff as rdiff
        out.append(rdiff.to_markdown_text(pd.result))
        fn = f"flame-{i}.svg"
        files[fn] = pd.svg
        out.append(f"Differential flame graph: [{fn}]({files_dir}/{fn})\n")
    return "\n".join(out) + "\n", files


# -- command line ------------------------------------------------------------------

def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror}") from None


def write(store, cmp: Comparison, output: str | Path, fmt: str = "html", *, profiles: bool = True) -> Path:
    data = gather(store, cmp, profiles=profiles)
    out = Path(output)
    if fmt == "html":
        _write_text(out, to_html(data))
    else:
        files_dir = out.stem + ".files"
        md, files = to_markdown(data, files_dir)
        for name, svg in files.items():
            _write_text(out.parent / files_dir / name, svg)
        _write_text(out, md)
    return out


def load_comparison(store, args) -> Comparison:
    from .. import compare as cm
    if args.experiment and args.runs:
        raise InputError("give either --experiment or RUNs, not both")
    if args.experiment:
        return cm.from_experiment(store, args.experiment)
    if not args.runs:
        raise InputError("name the runs to compare (the first is the baseline) or --experiment ID|NAME")
    return cm.from_runs(store, args.runs, stack=args.stack)


def run_cli(args) -> int:
    from ..store import Store
    store = Store.open(args.store, create=False)
    cmp = load_comparison(store, args)
    out = write(store, cmp, args.output, args.format, profiles=not args.no_profiles)
    print(f"kperfdiff: report written to {out}", file=sys.stderr)
    print(str(out))
    return 0


def top_mover_text(store, cmp: Comparison) -> str:
    """The kperfdiff table (study layout) of the benchmark that moved most, or a sentence why there is none."""
    from ..compare import top_mover
    c = top_mover(cmp)
    if c is None:
        return "kperfdiff: no benchmark has a change to profile\n"
    blk = next(b for b in cmp.blocks if b.kind == "baseline")
    pd = profile_diff(cmp, blk, c)
    head = (f">> benchmark that moved most: {c.key} -P {c.cores}, {blk.variant} vs {blk.reference}: "
            f"{c.change:+.1f}%{' (significant)' if c.significant else ' (not significant)'}\n")
    if pd.error:
        return head + f"kperfdiff: {pd.error}\n"
    from . import diff as rdiff
    return head + rdiff.render(pd.result, "text")
