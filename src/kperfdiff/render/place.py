"""Placement results as tables (text, Markdown) or one JSON document."""
from __future__ import annotations

from dataclasses import replace

from kperfdiff.core.errors import InputError
from kperfdiff.render.table import Table, percent, to_json, to_markdown, to_text


def kb(b: int) -> str:
    return f"{b / 1024:.1f}K" if b % 1024 else f"{b // 1024}K"


def method_table(c, sols) -> Table:
    t = Table(["method", "functions", "bytes", "predicted gain (cycles)", "gain % of kernel", "crossing calls",
               "solve s", "gap %", "note"],
              title=f"Predicted gain, {c.hw.fast_name} of {c.capacity} bytes ({c.hw.name})")
    for s in sols:
        p = s.prediction
        t.rows.append([s.method, len(p.placed), p.bytes, int(round(p.gain)), p.gain_pct, int(round(p.crossing_calls)),
                       round(s.seconds, 2), None if s.gap is None else 100 * s.gap,
                       s.label or ("" if s.status in ("ok", "optimal") else s.status)])
    return t


def placement_table(c, sol, top: int, ann: dict) -> Table:
    pr = c.problem
    t = Table(["function", "bytes", "self % of kernel", "fetch saving (cycles)", "annotation"],
              title=f"Placement chosen by {sol.method}" + (f" ({sol.label})" if sol.label else ""))
    ks = sorted((pr.index[n] for n in sol.prediction.placed), key=lambda k: -pr.self_cycles[k])
    for k in ks[:top]:
        t.rows.append([pr.names[k], int(pr.size[k]), 100 * pr.self_cycles[k] / (pr.kernel_cycles or 1),
                       int(round(pr.node_gain[k])), ann.get(pr.names[k], "")])
    if len(ks) > top:
        t.notes.append(f"... and {len(ks) - top} more (--top N, or --format json for all)")
    return t


def group_table(sol) -> Table:
    t = Table(["group", "candidates", "bytes", "fits", "predicted gain % of kernel", "excluded members"],
              title="Thesis groups, each placed alone (ranked)")
    for r in sol.details:
        t.rows.append([r["group"], r["members"], r["group_bytes"], "trimmed" if r["trimmed"] else "yes",
                       r["prediction"].gain_pct, r["excluded_members"]])
    t.notes.append(f"best of the group method (singles and pairs that fit): {sol.label}")
    return t


def render(tables: list[Table], doc: dict, fmt: str) -> str:
    if fmt == "json":
        return to_json(doc)
    if fmt == "markdown":
        return "\n".join(to_markdown(t) for t in tables)
    if fmt == "text":       # the terminal's section marker; Markdown and HTML have headings
        return "\n".join(to_text(replace(t, title=f">> {t.title}" if t.title else "")) for t in tables)
    raise InputError(f"unknown format {fmt!r}; use text, json or markdown")


def _pair(model, sim) -> str:
    return f"{percent(model, signed=True)} / {percent(sim, signed=True)}"


def groups_by_benchmark(gt) -> list[Table]:
    """The TCM study's table (place.grouptable.GroupTable): each group placed alone, per benchmark,
    the model's change / the simulator's; then the best group or pair and the exact placements."""
    cols = ["group", "bytes", "fits"] + list(gt.columns) + ["mean"]
    t = Table(cols, title=f"Each thesis group alone in {gt.fast_name} of {kb(gt.capacity)} ({gt.hw_name}): "
                          f"change of kernel fetch cycles, % model / simulated (+ = faster)",
              align=["l", "r", "l"] + ["r"] * (len(gt.columns) + 1))
    for r in gt.groups:
        fits = "no member" if not r.members else (f"trimmed to {kb(r.placed_bytes)}" if r.trimmed else "yes")
        t.rows.append([r.label, r.group_bytes, fits] + [_pair(r.model.get(c), r.sim.get(c)) for c in gt.columns]
                      + [_pair(r.mean("model"), r.mean("sim"))])
    t.notes += gt.notes
    o = Table(["placement", "bytes", "note"] + list(gt.columns) + ["mean"],
              title="Beside it: the group method's best and the exact optimiser's placements",
              align=["l", "r", "l"] + ["r"] * (len(gt.columns) + 1))
    for r in gt.others:
        o.rows.append([r.label, r.placed_bytes, r.note] + [_pair(r.model.get(c), r.sim.get(c)) for c in gt.columns]
                      + [_pair(r.mean("model"), r.mean("sim"))])
    o.notes.append("exact (all benchmarks): one placement from every benchmark's profile combined, each benchmark's "
                   "kernel time weighing equally (one kernel for all, as the study built one kernel per group)")
    return [t, o]
