"""Comparison tables as aligned text, Markdown, CSV, JSON and JUnit XML.

Text: one table of centres (a row per benchmark and core count, a column
group per variant) and one table of changes per comparison (vs the baseline,
and vs the previous variant of a patch stack): the speed ratio as pyperf says
it ("1.12x faster"), the change in % with its interval and marks, then the
geometric means; a short legend once at the end, the method with --explain.
Each column is printed in one unit, the one its plot uses (:func:`column_unit`).
Renderers return strings and do no I/O.
"""
from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

from kperfdiff.core import modes as modemod
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
from kperfdiff.render.svgplot import AxisUnit, quantity_unit
from kperfdiff.render.table import Table, md_escape, number, percent, to_csv, to_json, to_markdown, to_text

SIG = "*"
DISTURBED = "!"
COMPARE_VERSION = 3   # of the JSON document


def _interval(c: CellChange) -> str:
    """`` [low, high]`` of a change's interval, or `` [no interval]``."""
    if math.isnan(c.low):
        return " [no interval]"
    return f" [{percent(c.low, signed=True)}, {percent(c.high, signed=True)}]"


def ratio(change: float) -> tuple[float, str]:
    """A change in % (positive = better) as pyperf says it: the speed ratio and its direction,
    (1.12, "faster") or (1.5, "slower"); (1.0, "same") when it rounds to 1.00x; NaN: (nan, "")."""
    if change is None or math.isnan(change):
        return math.nan, ""
    r = 1 + change / 100
    if r <= 0:
        return math.inf, "slower"
    if round(r, 2) == 1 and round(1 / r, 2) == 1:
        return 1.0, "same"
    return (r, "faster") if r > 1 else (1 / r, "slower")


def ratio_text(change: float) -> str:
    """``1.12x faster``, ``1.50x slower``, ``19.0x faster`` (one decimal from 10x), ``1.00x (same)``."""
    r, word = ratio(change)
    if not word:
        return "-"
    if word == "same":
        return "1.00x (same)"
    return f"{r:.1f}x {word}" if round(r, 2) >= 10 else f"{r:.2f}x {word}"


def marks(c: CellChange) -> str:
    return " ".join(m for m, on in ((SIG, c.significant), (DISTURBED, bool(c.disturbed))) if on)


def change_cell(c: CellChange | None) -> str:
    """One cell's change in a line: ``1.02x faster +2.2% [-0.5, +5.0] !``."""
    if c is None:
        return "-"
    if math.isnan(c.change):
        return "n/a" if c.note else "-"
    return f"{ratio_text(c.change)} {percent(c.change, signed=True)}%{_interval(c)}" + \
        (f" {marks(c)}" if marks(c) else "")


def side_label(cmp: Comparison, label: str) -> str:
    s = cmp.side(label)
    return label + (" (emulated)" if s.emulated else "")


def column_unit(cmp: Comparison, key: str) -> AxisUnit:
    """The one unit a column is printed in, in its tables and its plot alike (:func:`quantity_unit`):
    scaled to its smallest centre, saying what one operation is, instructions for deterministic guests."""
    smps = [smp for _, smp in cmp.samples_of(key)]
    unit = next((smp.unit for smp in smps if smp.unit), None)
    return quantity_unit(unit, [smp.centre for smp in smps], op=cmp.op(key), counted=cmp.counted(key))


def header_lines(cmp: Comparison) -> list[str]:
    """The title line, and a warning when a side was emulated."""
    out = [f"kperfdiff compare: {cmp.title}; baseline {side_label(cmp, cmp.baseline.label)}"]
    if any(s.emulated for s in cmp.sides):
        out.append("EMULATED: results marked (emulated) come from an emulated machine; their times are not "
                   "those of real hardware")
    return out


def legend_lines(cmp: Comparison, more: str = "--explain for the method") -> list[str]:
    """What the columns and marks mean, short, printed once after the tables; ``more`` says where the
    method is (``--explain``)."""
    out = [f"{cmp.name(k)}: " + ", ".join(f"{lab} runs {b}" for lab, b in per.items())
           for k, per in cmp.templates.items()]
    out.append("change: speed ratio of the centres (x faster / x slower) and in % (positive = better); "
               f"[low, high]: its {cmp.confidence:.0%} interval in %; {SIG} significant (Benjamini-Hochberg "
               f"q <= {cmp.alpha:g} over its table); {DISTURBED} measured while the machine was disturbed")
    out.append(f"detectable: the smallest change the cell could have seen ({stats.POWER:.0%} power); verdict: "
               f"different (significant), same (interval inside ±{cmp.same_within:g}%), unknown (neither; about "
               f"how many repetitions per side would decide it)")
    if any(x.method == "paired" for b in cmp.blocks for x in b.cells.values()):
        out.append("paired: the variants' repetitions of each round are compared with each other (a level shift "
                   "of the machine falls on both)")
    if any(x.modes_base or x.modes_new for b in cmp.blocks for x in b.cells.values()):
        out.append("modes: a benchmark whose intervals fall into separate clusters is compared within each "
                   "cluster, never by the mix of clusters")
    if any(x.method == "runs" for b in cmp.blocks for x in b.cells.values()):
        out.append("separate runs: each interval also holds the drift between runs of the benchmark on its machine")
    if more:
        out[-1] += f"; {more}"
    return out


def explain_lines(cmp: Comparison) -> list[str]:
    """The method in full (``--explain``)."""
    out = ["change = speed ratio of the centres - 1, in %: base/new - 1 for times, new/base - 1 for "
           "throughputs, so POSITIVE = BETTER (+25% = 1.25x faster, -50% = 2.00x slower); "
           f"[low, high] = {cmp.confidence:.0%} confidence interval of the cell alone; {SIG} = significant after "
           f"Benjamini-Hochberg over the cells of its table (q <= {cmp.alpha:g}), no mark = not significant; "
           f"{DISTURBED} = measured while the machine was disturbed (reasons below the table)",
           "interval method: " + method_text(cmp.confidence, cmp.alpha, cmp.same_within) + "; centre = geometric "
           "mean of the per-repetition medians; CV = stdev/mean of all intervals"]
    runs = [x.runs for b in cmp.blocks for x in b.cells.values() if x.method == "runs"]
    if runs:
        out.append(f"separate runs: each interval also holds the drift between runs, from {min(runs)}-"
                   f"{max(runs)} stored runs of each benchmark on its machine: " + stats.RUN_LEVEL_METHOD.format(
                       c=cmp.confidence))
    if any(cmp.counted(k) for k in cmp.keys):
        out.append("instructions: a deterministic guest (QEMU -icount shift=0) counts one virtual ns per guest "
                   "instruction, so its times are instructions")
    return out


def centres_table(cmp: Comparison) -> Table:
    """Every side's centre per column and core count, with its CV and repetitions, in the column's unit."""
    cols = ["benchmark", "P", "unit"]
    for s in cmp.sides:
        what = " (baseline)" if s is cmp.baseline else ""
        cols += [side_label(cmp, s.label) + what, "cv", "reps"]
    t = Table(cols, title="centres (geometric mean of the per-repetition medians)",
              align=["l", "r", "l"] + ["r"] * (3 * len(cmp.sides)))
    for k in cmp.keys:
        ax = column_unit(cmp, k)
        for c in cmp.cores:
            if not any((k, c) in s.samples for s in cmp.sides):
                continue
            row: list = [cmp.name(k), c, ax.title]
            for side in cmp.sides:
                smp = side.samples.get((k, c))
                if smp is None:
                    row += ["-", "", ""]
                elif smp.status != "ok":
                    row += [smp.status, "", ""]
                else:
                    cv = smp.cv
                    row += [f"{number(smp.centre * ax.factor)} {DISTURBED if smp.disturbed else ' '}",
                            "-" if math.isnan(cv) else f"{cv * 100:.1f}%", len(smp.reps)]
            t.rows.append(row)
    t.notes = mode_notes(cmp)
    return t


def mode_notes(cmp: Comparison) -> list[str]:
    """A line per sample whose intervals have several modes, naming them in the column's unit."""
    out = []
    for k in cmp.keys:
        ax = column_unit(cmp, k)
        for c in cmp.cores:
            for side in cmp.sides:
                smp = side.samples.get((k, c))
                if smp is not None and smp.status == "ok" and smp.modes.several:
                    words = modemod.describe(smp.modes, ax.value)
                    out.append(f"  {cmp.name(k)} -P {c} {side_label(cmp, side.label)}: {words}")
    return out


def detectable_text(c: CellChange) -> str:
    """``+-4.1%``: the smallest change the cell could have seen; ``-`` without a test."""
    return "-" if math.isnan(c.detectable) else f"±{c.detectable:.1f}%" if c.detectable < 1000 else ">±999%"


def verdict_text(c: CellChange) -> str:
    """``different``, ``same``, ``unknown (~24 reps)``."""
    if c.verdict == "unknown" and c.more_reps:
        return f"unknown (~{c.more_reps} reps)"
    return c.verdict


def block_title(cmp: Comparison, blk: Block) -> str:
    ref = "baseline" if blk.kind == "baseline" else "previous"
    return f"change: {side_label(cmp, blk.variant)} vs {side_label(cmp, blk.reference)} ({ref})"


CHANGE_COLUMNS = ["benchmark", "P", "change", "%", "interval", "detectable", "verdict", "mark"]


def block_cells(cmp: Comparison, blk: Block) -> list[tuple[str, int, CellChange]]:
    """The cells of a block in the order its table lists them."""
    return [(k, c, blk.cells[(k, c)]) for k in cmp.keys for c in cmp.cores if (k, c) in blk.cells]


def block_table(cmp: Comparison, blk: Block) -> Table:
    """One variant against its reference: a row per column and core count (the speed ratio, the change
    in % and its interval, the marks), then the geometric means; the notes under it."""
    t = Table(list(CHANGE_COLUMNS), title=block_title(cmp, blk), align=["l", "r", "r", "r", "l", "r", "l", "l"])
    for k, c, x in block_cells(cmp, blk):
        if math.isnan(x.change):
            t.rows.append([cmp.name(k), c, "n/a" if x.note else "-", "", "", "", verdict_text(x), ""])
            continue
        t.rows.append([cmp.name(k), c, ratio_text(x.change), percent(x.change, signed=True) + "%",
                       _interval(x).strip(), detectable_text(x), verdict_text(x), marks(x)])

    def mean(label, cores, g):
        if not math.isnan(g):
            t.rows.append([label, cores, ratio_text(g), percent(g, signed=True) + "%", "", "", "", ""])
    if len(cmp.cores) > 1 and len(cmp.keys) > 1:
        for c in cmp.cores:
            mean("geomean", c, blk.geomean_by_cores.get(c, math.nan))
    if len(cmp.cores) > 1:
        for k in cmp.keys:
            mean(f"geomean {cmp.name(k)}", "all", blk.geomean_by_key.get(k, math.nan))
    if len(blk.cells) > 1:
        mean("geomean", "all", blk.geomean)
    notes = sorted({f"  {cmp.name(k)} -P {c}: {x.note}" for (k, c), x in blk.cells.items() if x.note})
    notes += [f"  {cmp.name(k)} -P {c}: compared within {len(x.per_mode)} modes: " + ", ".join(
        f"mode {i + 1} {'-' if v is None else percent(v, signed=True) + '%'}" for i, v in enumerate(x.per_mode))
        for (k, c), x in blk.cells.items() if x.per_mode and not math.isnan(x.change)]
    notes += sorted({f"  {cmp.name(k)} -P {c} {DISTURBED} {r}" for (k, c), x in blk.cells.items() for r in x.disturbed})
    stops = {}
    for (k, c), x in blk.cells.items():
        for who in (cmp.side(blk.reference), cmp.side(blk.variant)):
            smp = who.samples.get((k, c))
            if smp is not None and smp.stop and not smp.stop.endswith("(fixed count)"):
                stops[(k, c)] = smp.stop
    notes += [f"  {cmp.name(k)} -P {c}: {text}" for (k, c), text in stops.items()]
    if blk.tests:
        sig = sum(1 for x in blk.cells.values() if x.significant)
        notes.append(f"  {sig} of {blk.tests} cells significant, false discoveries controlled over the "
                     f"{blk.tests} (Benjamini-Hochberg, q <= {cmp.alpha:g})")
    t.notes = notes
    return t


def tables(cmp: Comparison) -> list[Table]:
    return [centres_table(cmp)] + [block_table(cmp, b) for b in cmp.blocks]


def to_text_all(cmp: Comparison, explain: bool = False) -> str:
    parts = ["\n".join(header_lines(cmp)) + "\n"]
    parts += [to_text(t) for t in tables(cmp)]
    parts.append("\n".join(legend_lines(cmp) + (explain_lines(cmp) if explain else [])) + "\n")
    return "\n".join(parts)


def to_markdown_all(cmp: Comparison, explain: bool = False) -> str:
    parts = ["\n\n".join(md_escape(h) for h in header_lines(cmp)) + "\n"]
    for t in tables(cmp):        # the text's padding (a centre's room for its mark) is no use in a cell
        t.rows = [[v.strip() if isinstance(v, str) else v for v in row] for row in t.rows]
        parts.append(to_markdown(t))
    parts.append("\n\n".join(md_escape(h) for h in legend_lines(cmp) + (explain_lines(cmp) if explain else []))
                 + "\n")
    return "\n".join(parts)


def _cell_sentence(cmp: Comparison, blk: Block, x: CellChange, where: str) -> str:
    """One headline cell as a sentence: what changed, by how much, how sure."""
    interval = "" if math.isnan(x.low) else \
        f", {cmp.confidence:.0%} interval [{percent(x.low, signed=True)}%, {percent(x.high, signed=True)}%]"
    dist = ", measured while the machine was disturbed" if x.disturbed else ""
    r, word = ratio(x.change)
    how = "about as fast as" if word == "same" else f"{ratio_text(x.change)} than"
    return (f"{blk.variant} is {how} {blk.reference} on {where}: {percent(x.change, signed=True)}%{interval}, "
            f"significant after Benjamini-Hochberg (q = {x.q:.2g}){dist}.")


def verdict_lines(cmp: Comparison, most: int = 4) -> list[str]:
    """The verdict a report leads with: per variant against the baseline, each benchmark that changed
    significantly (its core count that changed most) as a sentence, the ``most`` largest first, then
    the benchmarks with no significant change in one sentence, with their change and interval."""
    out = []
    several = len(cmp.cores) > 1
    for blk in (b for b in cmp.blocks if b.kind == "baseline"):
        sig, flat, unmeasured = [], [], []
        for k in cmp.keys:
            cells = [blk.cells[(k, c)] for c in cmp.cores if (k, c) in blk.cells]
            real = [x for x in cells if not math.isnan(x.change)]
            if not real:
                unmeasured.append(cmp.name(k))
                continue
            hits = [x for x in real if x.significant]
            if hits:
                x = max(hits, key=lambda x: abs(x.change))
                where = f"{cmp.name(k)} ({column_unit(cmp, k).title}" + (f", P={x.cores})" if several else ")")
                sig.append((abs(math.log(1 + x.change / 100)) if x.change > -100 else math.inf, where, x))
            else:
                x = max(real, key=lambda x: abs(x.change))
                figures = f"{percent(x.change, signed=True)}%" + (_interval(x) if not math.isnan(x.low) else
                                                                    ", no interval")
                if not math.isnan(x.detectable):
                    figures += f", could have seen {detectable_text(x)}, {verdict_text(x)}"
                flat.append(f"{cmp.name(k)}{f' P={x.cores}' if several else ''}: no significant change ({figures}"
                            + (", disturbed)" if x.disturbed else ")"))
        sig.sort(key=lambda t: -t[0])
        out += [_cell_sentence(cmp, blk, x, where) for _, where, x in sig[:most]]
        if len(sig) > most:
            out.append(f"{len(sig) - most} more benchmark{'s' if len(sig) - most > 1 else ''} changed "
                       f"significantly ({', '.join(w.split(' (')[0] for _, w, _ in sig[most:])}).")
        if flat:
            out.append(f"{blk.variant} vs {blk.reference}: {'; '.join(flat)}.")
        if unmeasured:
            out.append(f"{blk.variant} vs {blk.reference}: no change computed for {', '.join(unmeasured)}.")
    return out or ["No variant to compare with the baseline."]


def long_rows(cmp: Comparison) -> list[dict]:
    rows = []
    for blk in cmp.blocks:
        for (k, c), x in blk.cells.items():
            rows.append({"variant": blk.variant, "reference": blk.reference, "kind": blk.kind, "column": k,
                         "cores": c, "benchmark_reference": x.benchmark_base, "benchmark_variant": x.benchmark_new,
                         "unit": x.unit, "better": x.better, "median_reference": x.base, "median_variant": x.new,
                         "change_pct": x.change, "speed_ratio": ratio(x.change)[0],
                         "direction": ratio(x.change)[1], "ci_low_pct": x.low, "ci_high_pct": x.high,
                         "significant": x.significant, "p": x.p, "q": x.q, "interval_method": x.method,
                         "detectable_pct": x.detectable, "verdict": x.verdict, "more_reps": x.more_reps,
                         "pairs": x.pairs, "modes_reference": len(x.modes_base) or 1,
                         "modes_variant": len(x.modes_new) or 1,
                         "disturbed": "; ".join(x.disturbed), "cv_reference": x.cv_base,
                         "cv_variant": x.cv_new, "reps_reference": x.reps_base, "reps_variant": x.reps_new,
                         "emulated": cmp.side(blk.variant).emulated or cmp.side(blk.reference).emulated,
                         "note": x.note, "name": cmp.name(k), "unit_label": column_unit(cmp, k).title})
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
        "method": method_text(cmp.confidence, cmp.alpha, cmp.same_within),
        "alpha": cmp.alpha,
        "same_within": cmp.same_within,
        "power": stats.POWER,
        "fdr": "benjamini-hochberg per comparison",
        "experiment": {k: getattr(exp, k) for k in ("id", "name", "state", "file_hash", "path")} if exp else None,
        "baseline": cmp.baseline.label,
        "variants": [{"label": s.label, "runs": s.run_ids, "emulated": s.emulated,
                      "medians": [{"column": k, "cores": c, "benchmark": smp.benchmark, "unit": smp.unit,
                                   "better": smp.better, "status": smp.status, "reason": smp.reason,
                                   "centre": smp.centre, "disturbed": smp.disturbed,
                                   "modes": smp.modes.as_list() if smp.status == "ok" else [],
                                   "rounds": list(smp.rounds),
                                   "reps": [list(r) for r in smp.reps]}
                                  for (k, c), smp in s.samples.items()]} for s in cmp.sides],
        "columns": cmp.keys, "cores": cmp.cores,
        "comparisons": [{"variant": b.variant, "reference": b.reference, "kind": b.kind,
                         "geomean_pct": b.geomean, "geomean_by_cores": b.geomean_by_cores, "tests": b.tests,
                         "geomean_by_column": b.geomean_by_key,
                         "geomean_speed_ratio": ratio(b.geomean)[0], "geomean_direction": ratio(b.geomean)[1],
                         "cells": [x.as_dict() | {"speed_ratio": ratio(x.change)[0], "direction": ratio(x.change)[1]}
                                   for x in b.cells.values()]} for b in cmp.blocks],
        "column_names": {k: cmp.name(k) for k in cmp.keys},
        "units": {k: column_unit(cmp, k).title for k in cmp.keys},
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
    seen = f", detectable {detectable_text(c)}" if not math.isnan(c.detectable) else ""
    return f"{percent(c.change, signed=True)}%{ci}{tests}{seen}"


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


def render(cmp: Comparison, fmt: str = "text", gate: Gate | None = None, *, explain: bool = False) -> str:
    """The comparison in ``fmt``; JUnit carries ``gate``'s verdicts (every cell passes without one);
    ``explain``: text and Markdown end with the method in full."""
    if fmt == "junit":
        return to_junit(cmp, gate or cm_gate(cmp, None))
    if fmt == "text":
        return to_text_all(cmp, explain)
    if fmt == "markdown":
        return to_markdown_all(cmp, explain)
    if fmt == "csv":
        return to_csv_all(cmp)
    if fmt == "json":
        return to_json_all(cmp)
    raise ValueError(f"unknown format {fmt!r}")
