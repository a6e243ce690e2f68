"""Comparison tables as text (the study's layout), Markdown, CSV and JSON.

Text: benchmarks as columns and core counts as rows, one block of medians
per variant and one block of changes per comparison (vs the baseline, and
vs the previous variant of a patch stack), each with a geometric-mean row.
Renderers return strings and do no I/O.
"""
from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

from kperfdiff.core import stats
from kperfdiff.analysis.bench_compare import (
    FAIL,
    SKIP,
    UNJUDGED,
    Block,
    CellChange,
    Comparison,
    Gate,
    Verdict,
    method_text,
)
from kperfdiff.analysis.bench_compare import gate as cm_gate
from kperfdiff.render.table import Table, md_escape, number, percent, to_csv, to_json, to_markdown, to_text

SIG = "*"
DISTURBED = "!"
COMPARE_VERSION = 2   # of the JSON document


def _interval(c: CellChange) -> str:
    """`` [low, high]`` of a change's interval, or `` [no interval]``."""
    if math.isnan(c.low):
        return " [no interval]"
    return f" [{percent(c.low, signed=True)}, {percent(c.high, signed=True)}]"


def change_cell(c: CellChange | None) -> str:
    if c is None:
        return "-"
    if math.isnan(c.change):
        return "n/a" if c.note else "-"
    ci = _interval(c)
    return (f"{percent(c.change, signed=True)}%{ci}{' ' + SIG if c.significant else ''}"
            f"{' ' + DISTURBED if c.disturbed else ''}")


def side_label(cmp: Comparison, label: str) -> str:
    s = cmp.side(label)
    return label + (" (emulated)" if s.emulated else "")


def header_lines(cmp: Comparison) -> list[str]:
    out = [f"kperfdiff compare: {cmp.title}; baseline {side_label(cmp, cmp.baseline.label)}"]
    out.append("change = speed ratio of the centres - 1, in %: base/new - 1 for times, new/base - 1 for "
               "throughputs, so POSITIVE = BETTER (+25% = 1.25x as fast, -50% = half as fast); "
               f"[low, high] = {cmp.confidence:.0%} confidence interval of the cell alone; {SIG} = significant after "
               f"Benjamini-Hochberg over the cells of its table (q <= {cmp.alpha:g}), no mark = not significant; "
               f"{DISTURBED} = measured while the machine was disturbed (reasons below the table)")
    out.append("interval method: " + method_text(cmp.confidence, cmp.alpha) + "; centre = geometric mean of the "
               "per-repetition medians; CV = stdev/mean of all intervals")
    runs = [x.runs for b in cmp.blocks for x in b.cells.values() if x.method == "runs"]
    if runs:
        out.append(f"separate runs: each interval also holds the drift between runs, from {min(runs)}-"
                   f"{max(runs)} stored runs of each benchmark on its machine: " + stats.RUN_LEVEL_METHOD.format(
                       c=cmp.confidence))
    if any(s.emulated for s in cmp.sides):
        out.append("EMULATED: results marked (emulated) come from an emulated machine; their times are not "
                   "those of real hardware")
    for k, per in cmp.templates.items():
        out.append(f"column {k}: " + ", ".join(f"{lab} runs {b}" for lab, b in per.items()))
    return out


def _col(cmp: Comparison, key: str) -> str:
    unit = next((s.samples[(key, c)].unit for s in cmp.sides for c in cmp.cores
                 if (key, c) in s.samples and s.samples[(key, c)].unit), None)
    return f"{key} ({unit})" if unit else key


def medians_table(cmp: Comparison, label: str) -> Table:
    side = cmp.side(label)
    what = "baseline" if label == cmp.baseline.label else "variant"
    t = Table(["P"] + [_col(cmp, k) for k in cmp.keys], title=f"centres: {side_label(cmp, label)} ({what})",
              align=["r"] * (len(cmp.keys) + 1))
    for c in cmp.cores:
        row: list = [c]
        for k in cmp.keys:
            s = side.samples.get((k, c))
            if s is None:
                row.append("-")
            elif s.status != "ok":
                row.append(s.status)
            else:
                cv = s.cv
                row.append(f"{number(s.centre)}{' ' + DISTURBED if s.disturbed else ''} (cv {'-' if math.isnan(cv) else f'{cv * 100:.1f}%'}, "
                           f"{len(s.reps)} reps)")
        t.rows.append(row)
    return t


def block_title(cmp: Comparison, blk: Block) -> str:
    ref = "baseline" if blk.kind == "baseline" else "previous"
    return (f"change: {side_label(cmp, blk.variant)} vs {side_label(cmp, blk.reference)} ({ref}), % "
            f"(positive = better)")


def block_table(cmp: Comparison, blk: Block) -> Table:
    t = Table(["P"] + list(cmp.keys) + ["geomean"], title=block_title(cmp, blk),
              align=["r"] * (len(cmp.keys) + 2))
    for c in cmp.cores:
        t.rows.append([c] + [change_cell(blk.cells.get((k, c))) for k in cmp.keys]
                      + [percent(blk.geomean_by_cores.get(c, math.nan), signed=True) + "%"])
    t.rows.append(["geomean"]
                  + [percent(blk.geomean_by_key.get(k, math.nan), signed=True) + "%" for k in cmp.keys]
                  + [percent(blk.geomean, signed=True) + "%"])
    notes = sorted({f"  {k} -P {c}: {x.note}" for (k, c), x in blk.cells.items() if x.note})
    notes += sorted({f"  {k} -P {c} {DISTURBED} {r}" for (k, c), x in blk.cells.items() for r in x.disturbed})
    stops = {}
    for (k, c), x in blk.cells.items():
        for who in (cmp.side(blk.reference), cmp.side(blk.variant)):
            smp = who.samples.get((k, c))
            if smp is not None and smp.stop and not smp.stop.endswith("(fixed count)"):
                stops[(k, c)] = smp.stop
    notes += [f"  {k} -P {c}: {text}" for (k, c), text in stops.items()]
    if blk.tests:
        sig = sum(1 for x in blk.cells.values() if x.significant)
        notes.append(f"  {sig} of {blk.tests} cells significant, false discoveries controlled over the "
                     f"{blk.tests} (Benjamini-Hochberg, q <= {cmp.alpha:g})")
    t.notes = notes
    return t


def tables(cmp: Comparison) -> list[Table]:
    return [medians_table(cmp, s.label) for s in cmp.sides] + [block_table(cmp, b) for b in cmp.blocks]


def to_text_all(cmp: Comparison) -> str:
    parts = ["\n".join(header_lines(cmp)) + "\n"]
    parts += [to_text(t, "study") for t in tables(cmp)]
    return "\n".join(parts)


def to_markdown_all(cmp: Comparison) -> str:
    parts = ["\n\n".join(md_escape(h) for h in header_lines(cmp)) + "\n"]
    parts += [to_markdown(t) for t in tables(cmp)]
    return "\n".join(parts)


def long_rows(cmp: Comparison) -> list[dict]:
    rows = []
    for blk in cmp.blocks:
        for (k, c), x in blk.cells.items():
            rows.append({"variant": blk.variant, "reference": blk.reference, "kind": blk.kind, "column": k,
                         "cores": c, "benchmark_reference": x.benchmark_base, "benchmark_variant": x.benchmark_new,
                         "unit": x.unit, "better": x.better, "median_reference": x.base, "median_variant": x.new,
                         "change_pct": x.change, "ci_low_pct": x.low, "ci_high_pct": x.high,
                         "significant": x.significant, "p": x.p, "q": x.q, "interval_method": x.method,
                         "disturbed": "; ".join(x.disturbed), "cv_reference": x.cv_base,
                         "cv_variant": x.cv_new, "reps_reference": x.reps_base, "reps_variant": x.reps_new,
                         "emulated": cmp.side(blk.variant).emulated or cmp.side(blk.reference).emulated,
                         "note": x.note})
    return rows


def to_csv_all(cmp: Comparison) -> str:
    rows = long_rows(cmp)
    cols = list(rows[0]) if rows else ["variant", "reference", "column", "cores", "change_pct"]
    t = Table(cols)
    for r in rows:
        t.rows.append([r[c] for c in cols])
    return to_csv(t)


def to_json_all(cmp: Comparison) -> str:
    exp = cmp.experiment
    return to_json({
        "version": COMPARE_VERSION,
        "title": cmp.title,
        "sign": "positive change = better",
        "confidence": cmp.confidence,
        "method": method_text(cmp.confidence, cmp.alpha),
        "alpha": cmp.alpha,
        "fdr": "benjamini-hochberg per comparison",
        "experiment": {k: getattr(exp, k) for k in ("id", "name", "state", "file_hash", "path")} if exp else None,
        "baseline": cmp.baseline.label,
        "variants": [{"label": s.label, "runs": s.run_ids, "emulated": s.emulated,
                      "medians": [{"column": k, "cores": c, "benchmark": smp.benchmark, "unit": smp.unit,
                                   "better": smp.better, "status": smp.status, "reason": smp.reason,
                                   "centre": smp.centre, "disturbed": smp.disturbed,
                                   "reps": [list(r) for r in smp.reps]}
                                  for (k, c), smp in s.samples.items()]} for s in cmp.sides],
        "columns": cmp.keys, "cores": cmp.cores,
        "comparisons": [{"variant": b.variant, "reference": b.reference, "kind": b.kind,
                         "geomean_pct": b.geomean, "geomean_by_cores": b.geomean_by_cores, "tests": b.tests,
                         "geomean_by_column": b.geomean_by_key,
                         "cells": [x.as_dict() for x in b.cells.values()]} for b in cmp.blocks],
    })


def cell_name(v: Verdict) -> str:
    """A gated cell named for people and CI: column, parameters, core count, variant vs reference."""
    params = ",".join(f"{k}={val}" for k, val in sorted(v.params.items()))
    return (f"{v.cell.key}" + (f" [{params}]" if params else "") + f" -P {v.cell.cores}: {v.variant} vs "
            f"{v.reference}" + (" (previous)" if v.kind == "previous" else ""))


def cell_figures(c: CellChange) -> str:
    """The change of a cell with its interval, p and q: ``-12.0% [-15.1, -8.8], p = 0.0012, q = 0.0024``."""
    if math.isnan(c.change):
        return "no change computed"
    ci = _interval(c)
    tests = f", p = {c.p:.3g}, q = {c.q:.3g}" if not math.isnan(c.p) else ""
    return f"{percent(c.change, signed=True)}%{ci}{tests}"


def gate_verdict(gate: Gate) -> str:
    """The gate's verdict in one line: FAILED and why, or passed. It fails closed: cells it could
    not judge fail it unless --allow-unjudged, and a gate that judged no cell never passes."""
    fails, unjudged, aside = gate.with_outcome(FAIL), gate.with_outcome(UNJUDGED), gate.with_outcome(SKIP)
    why = [f"{len(fails)} of {gate.judged} judged cells tripped it"] if fails else []
    if unjudged and not gate.allow_unjudged:
        why.append(f"{len(unjudged)} of {len(gate.verdicts)} cells could not be judged (below; "
                   f"--allow-unjudged lets them pass)")
    if not gate.judged and not why:
        why.append("it judged no cell, so it checked nothing")
    out = (f"regression gate (significant slowdown beyond {gate.threshold:g}%): "
           + (f"FAILED: {'; '.join(why)}" if why else f"passed: none of {gate.judged} judged cells tripped it"))
    if unjudged and gate.allow_unjudged:
        out += f"; {len(unjudged)} not judged, allowed by --allow-unjudged (below)"
    if aside:
        out += f"; {len(aside)} set aside by --skip-disturbed (below)"
    return out


def gate_text(gate: Gate) -> str:
    """The gate's verdict for stderr: the cells that tripped it with their figures, and the cells
    it could not judge or set aside, and why."""
    out = [gate_verdict(gate)]
    for v in gate.with_outcome(FAIL):
        b = v.cell
        bench = b.benchmark_new if b.benchmark_new == b.benchmark_base else f"{b.benchmark_new} vs {b.benchmark_base}"
        out.append(f"  REGRESSION {cell_name(v)}: {cell_figures(v.cell)} ({bench}, {b.unit}, "
                   f"{'lower' if b.better == 'lower' else 'higher'} is better)"
                   + (f"; ! measured while the machine was disturbed: {'; '.join(b.disturbed)}" if b.disturbed else ""))
    out += [f"  not judged: {cell_name(v)}: {v.reason}" for v in gate.with_outcome(UNJUDGED)]
    out += [f"  set aside: {cell_name(v)}: {v.reason}" for v in gate.with_outcome(SKIP)]
    return "\n".join(out) + "\n"


# Characters XML 1.0 cannot hold, even escaped.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _x(text) -> str:
    return _NOT_XML.sub("\ufffd", str(text))


def junit_mark(gate: Gate, v: Verdict) -> tuple[str, str, str] | None:
    """A cell's JUnit mark (element, its type, message), or None for a pass: ``failure`` for a cell
    that tripped the gate, ``error`` for one it could not judge (``skipped`` with --allow-unjudged),
    ``skipped`` for one set aside by --skip-disturbed."""
    if v.outcome == FAIL:
        return "failure", "regression", f"{v.reason}: {cell_figures(v.cell)}"
    if v.outcome == UNJUDGED and not gate.allow_unjudged:
        return "error", "unjudged", f"could not be judged: {v.reason}"
    if v.outcome == UNJUDGED:
        return "skipped", "", f"not judged, allowed by --allow-unjudged: {v.reason}"
    if v.outcome == SKIP:
        return "skipped", "", v.reason
    return None


def to_junit(cmp: Comparison, gate: Gate) -> str:
    """JUnit XML: a <testsuite> per table (variant against reference), a <testcase> per cell
    (classname the column, name with parameters, core count and variant); its figures in
    <system-out>; its mark from :func:`junit_mark` (only when a threshold was given: without one,
    ``gate`` judges nothing and every cell passes). A gate that judged no cell, and has no cell in
    error either (--allow-unjudged, --skip-disturbed, no cells), adds a suite of one testcase in
    error, "regression gate", so that the XML fails as the exit status does."""
    root = ET.Element("testsuites", name=_x(f"kperfdiff compare: {cmp.title}"))
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    by_table: dict[tuple[str, str, str], list[Verdict]] = {}
    for v in gate.verdicts:
        by_table.setdefault((v.variant, v.reference, v.kind), []).append(v)
    for (variant, reference, kind), verdicts in by_table.items():
        marks = [junit_mark(gate, v) for v in verdicts]
        counts = {"tests": len(verdicts), "failures": sum(bool(m and m[0] == "failure") for m in marks),
                  "errors": sum(bool(m and m[0] == "error") for m in marks),
                  "skipped": sum(bool(m and m[0] == "skipped") for m in marks)}
        suite = ET.SubElement(root, "testsuite", name=_x(f"{variant} vs {reference} ({kind})"),
                              **{k: str(n) for k, n in counts.items()})
        props = ET.SubElement(suite, "properties")
        for k, val in (("variant", variant), ("reference", reference), ("kind", kind),
                       ("threshold_pct", "none" if gate.threshold is None else f"{gate.threshold:g}"),
                       ("allow_unjudged", "yes" if gate.allow_unjudged else "no"),
                       ("sign", "positive change = better"), ("method", method_text(cmp.confidence, cmp.alpha))):
            ET.SubElement(props, "property", name=k, value=_x(val))
        for v, mark in zip(verdicts, marks):
            c = v.cell
            case = ET.SubElement(suite, "testcase", classname=_x(c.key), name=_x(cell_name(v)))
            if mark:
                el, kind_, message = mark
                attrs = {"message": _x(message)} | ({"type": kind_} if kind_ else {})
                ET.SubElement(case, el, **attrs).text = _x(cell_figures(c)) if el == "failure" else None
            figures = [f"change: {cell_figures(c)} (positive = better)",
                       f"baseline {c.benchmark_base}: {number(c.base)} {c.unit or ''} ({c.reps_base} reps)",
                       f"variant {c.benchmark_new}: {number(c.new)} {c.unit or ''} ({c.reps_new} reps)",
                       f"significant: {'yes' if c.significant else 'no'}; gate: {v.outcome}, {v.reason}"]
            figures += [f"note: {c.note}"] * bool(c.note) + [f"disturbed: {d}" for d in c.disturbed]
            ET.SubElement(case, "system-out").text = _x("\n".join(figures))
        for k in totals:
            totals[k] += counts[k]
    if gate.threshold is not None and not gate.judged and not totals["failures"] + totals["errors"]:
        suite = ET.SubElement(root, "testsuite", name="regression gate", tests="1", failures="0", errors="1",
                              skipped="0")
        case = ET.SubElement(suite, "testcase", classname="kperfdiff", name="regression gate")
        ET.SubElement(case, "error", type="nothing-judged", message=_x(gate_verdict(gate)))
        totals["tests"] += 1
        totals["errors"] += 1
    for k, n in totals.items():
        root.set(k, str(n))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def render(cmp: Comparison, fmt: str = "text", gate: Gate | None = None) -> str:
    """The comparison in ``fmt``; JUnit carries ``gate``'s verdicts (every cell passes without one)."""
    if fmt == "junit":
        return to_junit(cmp, gate or cm_gate(cmp, None))
    if fmt == "text":
        return to_text_all(cmp)
    if fmt == "markdown":
        return to_markdown_all(cmp)
    if fmt == "csv":
        return to_csv_all(cmp)
    if fmt == "json":
        return to_json_all(cmp)
    raise ValueError(f"unknown format {fmt!r}")
