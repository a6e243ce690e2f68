"""Benchmark results as text (aligned columns), JSON, and the catalogue."""
from __future__ import annotations

import datetime as dt
import json
import math
import statistics
from typing import TYPE_CHECKING

from kperfdiff.core import modes, monitors, stats
from kperfdiff.core.records import (
    Result,
    ResultGroup,
    Run,
    group_results,
    instruction_counts,
    shown_rep,
    summarise_disturbance,
)
from kperfdiff.render.svgplot import AxisUnit, quantity_unit
from kperfdiff.render.table import Table, md_escape, number, percent, to_csv, to_json, to_markdown, to_text

if TYPE_CHECKING:  # types only: the renderer reads no catalogue
    from kperfdiff.bench.catalogue import Benchmark

JSON_VERSION = 1
DISTURBED = "!"


def catalogue(benches: tuple[Benchmark, ...] | list[Benchmark], fmt: str = "text") -> str:
    if fmt == "json":
        return to_json({"version": JSON_VERSION, "benchmarks": [
            {"name": b.name, "family": b.family, "exercises": b.exercises, "unit": b.unit, "op": b.op,
             "unit_label": b.unit_label, "better": b.better,
             "suites": list(b.suites), "params": b.params, "options": {k: list(v) for k, v in b.options.items()},
             "requires": list(b.requires), "lmbench": b.lmbench,
             "differences": b.differences} for b in benches]})
    t = Table(["benchmark", "unit", "better", "suite", "exercises"], align=["l", "l", "l", "l", "l"])
    for b in benches:
        suite = "quick" if "quick" in b.suites else "full"
        req = f" (needs {', '.join(b.requires)})" if b.requires else ""
        t.rows.append([b.name, b.unit_label, b.better, suite, b.exercises + req])
    return (to_markdown if fmt == "markdown" else to_text)(t)


def _result_json(r: Result) -> dict:
    reps = list(r.repetitions.values())
    return {"id": r.id, "benchmark": r.benchmark, "params": r.params, "copies": r.copies, "status": r.status,
            "reason": r.reason, "unit": r.unit, "better": r.better,
            "summary": {k: getattr(r, k) for k in ("n", "median", "min", "max", "q1", "q3", "mean", "stdev", "cv")},
            "overhead": r.overhead, "ops": r.ops, "cpu_ns": r.cpu_ns, "wall_s": r.wall_s,
            "monitors": r.monitors, "info": _shown_reps(r.info), "reps": len(reps),
            "centre": stats.nested_centre(reps) if r.raw else None,
            "half_width_pct": _none_nan(stats.centre_half_width(reps)) if r.raw else None,
            "detectable_pct": _none_nan(stats.sample_detectable(reps)) if r.raw else None,
            "stop": r.stop, "noise": _shown_reps(r.noise), "disturbed": r.disturbed,
            "intervals": [{"rep": shown_rep(x[0]), "copy": x[1], "value": x[3], "ops": x[4], "ns": x[5]} for x in r.raw]}


def _shown_reps(entries: list[dict]) -> list[dict]:
    """Stored entries (info, noise) with their repetition numbered as shown (from 1)."""
    return [{**e, "rep": shown_rep(e["rep"])} if isinstance(e.get("rep"), int) else e for e in entries or []]


def _none_nan(v: float) -> float | None:
    return None if math.isnan(v) else v


def _run_json(run: Run) -> dict:
    return {"id": run.id, "label": run.label, "variant": run.variant, "target": run.target, "state": run.state,
            "started_at": run.started_at, "ended_at": run.ended_at, "tool_version": run.tool_version,
            "command": run.command, "artefact_dir": run.artefact_dir}


def group_summary(g: ResultGroup) -> dict:
    """One benchmark, parameter set and copy count of a run over all its repetitions: the centre
    (geometric mean of the per-repetition medians, as compare prints it), the half-width of its 95%
    interval over the repetitions (:func:`kperfdiff.core.stats.centre_half_width`; none, and why, with
    fewer than ``stats.MIN_REPS``), the CV and spread of every interval, and each repetition."""
    ok = [r for r in g.results if r.status == "ok"]
    first = (ok or g.results)[0]
    unresolved = g.unresolved
    reps = [] if unresolved else g.reps      # no number from the repetitions that resolved
    failed = unresolved or first
    pooled = [v for rep in reps for v in rep]
    hw = stats.centre_half_width(reps) if reps else math.nan
    why = ""
    if unresolved:
        why = "a repetition is not resolvable"
    elif not reps:
        why = f"no repetition measured ({first.status})"
    elif len(reps) < stats.MIN_REPS:
        why = f"{len(reps)} repetition{'s' if len(reps) > 1 else ''}; an interval needs {stats.MIN_REPS} or more"
    elif math.isnan(hw):
        why = "a repetition's median is zero or negative"
    stops = list(dict.fromkeys(r.stop for r in g.results if r.stop))
    return {"benchmark": first.benchmark, "name": g.name, "params": first.params, "copies": first.copies,
            "status": "ok" if reps else failed.status, "reason": None if reps else failed.reason,
            "unit": first.unit, "better": first.better,
            "centre": stats.nested_centre(reps) if reps else math.nan, "half_width_pct": hw, "no_interval": why or None,
            "detectable_pct": stats.sample_detectable(reps) if reps else math.nan,
            "modes": modes.find_modes_in(reps).as_list() if reps else [],
            "reps": len(reps), "cv": stats.coefficient_of_variation(pooled) if len(pooled) > 1 else math.nan,
            "n": len(pooled), "min": min(pooled) if pooled else math.nan, "max": max(pooled) if pooled else math.nan,
            "unmeasured": [{"result": r.id, "status": r.status, "reason": r.reason} for r in g.results
                           if r.status != "ok"] if reps else [],
            "disturbed": summarise_disturbance(g.noise, len(reps) or None), "stop": "; ".join(stops) or None,
            "results": [r.id for r in g.results],
            "repetitions": [{"rep": shown_rep(x.number), "result": x.result.id, "median": stats.repetition_medians([x.values])[0],
                             "min": min(x.values), "max": max(x.values), "n": len(x.values),
                             "cv": stats.coefficient_of_variation(x.values) if len(x.values) > 1 else math.nan,
                             "disturbed": list(x.noise.get("disturbed") or [])} for x in g.repetitions]}


def _info(g: ResultGroup) -> list[dict]:
    return [i for r in g.results if r.status == "ok" for i in r.info]


def _group_note(g: ResultGroup, s: dict) -> str:
    thp = sorted({i["anon_huge_kb"] for i in _info(g) if i.get("anon_huge_kb") is not None})
    unmeasured = s["unmeasured"]
    return "; ".join(x for x in (
        "higher is better" if s["better"] == "higher" else "",
        (f"AnonHugePages {thp[0]} kB" if len(thp) == 1 else f"AnonHugePages {thp[0]}-{thp[-1]} kB") if thp else "",
        f"{DISTURBED} disturbed" if s["disturbed"] else "",
        f"{len(unmeasured)} repetition{'s' if len(unmeasured) > 1 else ''} {unmeasured[0]['status']}: "
        f"{unmeasured[0]['reason']}" if unmeasured else "",
        lava_note(_info(g))) if x)


def results_table(results: list[Result], ops: dict[str, str] | None = None, counted: bool = False) -> Table:
    """One row per benchmark, parameter set and copy count: the centre over its repetitions, their
    number, the 95% interval's half-width and the CV; each note (disturbance, why the repetitions
    stopped, counted instructions, why there is no interval) once, under the table. The unit says
    what one operation is when ``ops`` (benchmark -> the catalogue's op) knows; ``counted``: a
    deterministic guest's, whose virtual ns are instructions."""
    t = Table(["benchmark", "P", "centre", "unit", "+-95%", "detect", "reps", "CV", "min", "max", "n", "note"],
              align=["l", "r", "r", "l", "r", "r", "r", "r", "r", "r", "r", "l"])
    notes: list[str] = []
    short: list[str] = []
    for g in group_results(results):
        s = group_summary(g)
        ax = group_unit(s, ops, counted)
        s["unit"] = ax.title if s["unit"] else s["unit"]
        label = f"{g.name} -P {s['copies']}"
        if s["status"] != "ok":
            more = f" (all {len(g.results)} repetitions)" if len(g.results) > 1 and not g.unresolved else ""
            t.rows.append([g.name, s["copies"], "-", s["unit"] or "", "-", "-", 0, "-", "-", "-", "-",
                           f"{s['status']}: {s['reason']}{more}"])
            continue
        t.rows.append([g.name, s["copies"], number(s["centre"] * ax.factor), s["unit"],
                       percent(s["half_width_pct"], mark=True), percent(s["detectable_pct"], mark=True), s["reps"],
                       percent(s["cv"], fraction=True, mark=True),
                       number(s["min"] * ax.factor), number(s["max"] * ax.factor),
                       s["n"], _group_note(g, s)])
        if len(s["modes"]) > 1:
            notes.append(f"  {label}: " + modes.describe(modes.Modes.from_list(s["modes"]), ax.value))
        if s["disturbed"]:
            notes.append(f"  {label}: {DISTURBED} {s['disturbed']}")
        if s["stop"] and not s["stop"].endswith("(fixed count)"):
            notes.append(f"  {label}: {s['stop']}")
        if line := counted_note(_info(g)):
            notes.append(f"  {label}: {line}")
        if s["no_interval"]:
            short.append(f"{label} ({s['no_interval']})")
    if any(row[2] != "-" for row in t.rows):
        notes.append("  centre: geometric mean of the per-repetition medians; +-95%: half-width of its 95% "
                     "interval over the repetitions; detect: the smallest change a comparison with a run like it "
                     "would see (80% power); CV: of every interval")
    if short:
        notes.append("  no +-95% for " + ", ".join(short) + "; more repetitions: bench --reps N, or reps = N in "
                     "an experiment")
    t.notes = notes
    return t


def group_unit(s: dict, ops: dict[str, str] | None, counted: bool) -> AxisUnit:
    """The unit a benchmark's figures print in (a :func:`group_summary`), as compare prints them:
    scaled to its smallest figure, saying what one operation is (:func:`kperfdiff.render.svgplot.quantity_unit`)."""
    return quantity_unit(s["unit"], [s["centre"], s["min"]], op=(ops or {}).get(s["benchmark"], ""), counted=counted)


def reps_table(results: list[Result], ops: dict[str, str] | None = None, counted: bool = False) -> Table:
    """Every repetition of every benchmark, one row each, numbered from 1 in the order measured
    (as the notes count them; `show --format csv` numbers the same repetitions from 0)."""
    t = Table(["benchmark", "P", "rep", "median", "unit", "min", "max", "CV", "n", "result", "note"],
              align=["l", "r", "r", "r", "l", "r", "r", "r", "r", "r", "l"])
    for g in group_results(results):
        s = group_summary(g)
        ax = group_unit(s, ops, counted)
        for x in s["repetitions"]:
            t.rows.append([g.name, s["copies"], x["rep"], number(x["median"] * ax.factor), ax.title,
                           number(x["min"] * ax.factor), number(x["max"] * ax.factor),
                           percent(x["cv"], fraction=True, mark=True), x["n"], x["result"],
                           f"{DISTURBED} " + "; ".join(x["disturbed"]) if x["disturbed"] else ""])
        for r in g.results:
            if r.status != "ok":
                t.rows.append([g.name, s["copies"], "-", "-", s["unit"] or "", "-", "-", "-", "-", r.id,
                               f"{r.status}: {r.reason}"])
    return t


def lava_note(info: list[dict]) -> str:
    """Which LAVA jobs and devices measured a result ("LAVA job 12 on rpi4-03"), or ""."""
    jobs = sorted({str(i["lava_job"]) for i in info if i.get("lava_job") is not None}, key=lambda j: (len(j), j))
    devices = sorted({str(i["lava_device"]) for i in info if i.get("lava_device")})
    if not jobs:
        return ""
    return f"LAVA job{'s' if len(jobs) > 1 else ''} {', '.join(jobs)}" + (f" on {', '.join(devices)}" if devices else "")


def counted_note(info: list[dict]) -> str:
    """The instructions per operation the workers counted (kpd --count), over every repetition and copy,
    or why they could not count; "" when they were not asked to."""
    per_op = [(c["kernel"] / c["ops"], c["user"] / c["ops"]) for c in map(instruction_counts, info) if c]
    if per_op:
        k = [x for x, _ in per_op]
        u = [y for _, y in per_op]
        spread = (max(k) - min(k)) / min(k) * 100 if len(k) > 1 and min(k) > 0 else None
        return (f"instructions per operation, counted in the timed intervals: kernel {statistics.median(k):,.0f}, "
                f"user {statistics.median(u):,.0f}" + (f" (kernel spread {spread:.2f}% over {len(k)} processes)"
                                                        if spread is not None else ""))
    errors = {i["count_error"] for i in info if i.get("count_error")}
    return f"instructions not counted: {sorted(errors)[0]}" if errors else ""


def results(run: Run, results: list[Result], fmt: str = "text", machine: dict | None = None,
            ops: dict[str, str] | None = None) -> str:
    if fmt == "json":
        return to_json(_document(run, machine or {}, results))
    table = results_table(results, ops, bool((machine or {}).get("deterministic")))
    if fmt == "markdown":
        return f"{md_escape(run_heading(run, machine or {}))}\n\n{to_markdown(table)}"
    return run_heading(run, machine or {}) + "\n" + to_text(table)


def _document(run: Run, machine: dict, results: list[Result]) -> dict:
    """The JSON document of a run (schemas/results.schema.json): every stored result, and the
    summary the text table prints (one entry per benchmark, parameter set and copy count)."""
    return {"version": JSON_VERSION, "run": _run_json(run), "machine": machine,
            "results": [_result_json(r) for r in results],
            "summary": [group_summary(g) for g in group_results(results)]}


def run_heading(run: Run, facts: dict) -> str:
    """`run 4 (label) on qemu:arm64: complete`, saying when the results are emulated."""
    head = f"run {run.id}" + (f" ({run.label})" if run.label else "")
    if run.target and run.target != "local":
        head += f" on {run.target}"
    head += f": {run.state}"
    if facts.get("emulated"):
        head += (f" -- EMULATED ({facts.get('virtualisation', 'emulated')} guest, {facts.get('arch', '?')}): "
                 f"times are not those of real hardware")
    return head


def run_list(runs: list[Run], fmt: str = "text", *, total: int | None = None, offset: int = 0) -> str:
    """A list of runs (one page of them: ``total`` runs in the store, the newest ``offset`` left out)
    as text, Markdown, CSV (the same table) or JSON (every field, and the page)."""
    if fmt == "json":
        return to_json({"version": JSON_VERSION, "runs": [_run_json(r) for r in runs],
                        "total": len(runs) if total is None else total, "offset": offset})
    t = Table(["run", "label", "state", "target", "started", "command"], align=["r", "l", "l", "l", "l", "l"])
    for r in runs:
        when = dt.datetime.fromtimestamp(r.started_at).strftime("%Y-%m-%d %H:%M")
        t.rows.append([r.id, r.label or "-", r.state, r.target, when, r.command])
    return {"markdown": to_markdown, "csv": to_csv}.get(fmt, to_text)(t)


def runs_left_out(shown: int, total: int, offset: int) -> str:
    """What a page of `kperfdiff runs` left out and how to see it ("" when it lists every run)."""
    older = total - offset - shown
    if older <= 0 and offset == 0:
        return ""
    if shown == 0:
        return f"--offset {offset} leaves out every run (the store has {total}); give a smaller one"
    span = f"{offset + 1}" if shown == 1 else f"{offset + 1}-{offset + shown}"
    which = f"the newest {shown} of {total} runs" if offset == 0 else \
        f"run{'s' if shown > 1 else ''} {span} of {total}, counted from the newest"
    out = " and ".join(x for x in (f"{older} older" if older > 0 else "", f"{offset} newer" if offset else "") if x)
    more = f"the next {shown} with --offset {offset + shown}, " if older > 0 else ""
    return f"listed {which} ({out} not listed); {more}more at once with --limit N, every run with --all"


def machine_facts(facts: dict) -> str:
    """The facts of a machine or target, one per line, and which perf events work."""
    out = ["machine:"]
    for k in FACT_ORDER:
        if k in facts:
            out.append(f"  {k:15} {facts[k]}")
    ev = facts.get("perf_events") or {}
    if ev:
        ok = [e for e, v in ev.items() if v]
        no = [e for e, v in ev.items() if not v]
        out.append(f"  {'perf events':15} {', '.join(ok) or 'none'}" + (f" (not supported: {', '.join(no)})"
                                                                        if no else ""))
    return "\n".join(out) + "\n"


FACT_ORDER = ["arch", "cpu_model", "cpus", "kernel_release", "cmdline", "page_size", "mem_total_kb", "thp_enabled",
              "thp_defrag", "clocksource", "virtualisation", "emulated", "swap_active", "hostname", "target",
              "kernel_source", "qemu_cpu", "deterministic", "time_unit", "profile_sampling", "lava_server",
              "lava_device_type", "lava_device", "tuned", "boot_retries"]


RAW_COLUMNS = ["run", "label", "result", "benchmark", "params", "copies", "rep", "copy", "seq", "value", "unit",
               "better", "ops", "ns", "disturbed"]


def raw_rows(run: Run, results: list[Result]) -> list[list]:
    """Every raw interval of a run, one row each (RAW_COLUMNS): ``rep`` numbers the repetitions
    (fresh processes) of one benchmark, parameter set and copy count from 1 across its results (an
    experiment stores one result per repetition; :func:`kperfdiff.core.records.group_results`), ``copy``
    the parallel copy, ``seq`` the interval in its process; ``params`` is JSON; ``disturbed`` the
    reasons its repetition was disturbed, or empty."""
    number_of = {(id(x.result), x.rep): x for g in group_results(results) for x in g.repetitions}
    rows: list[list] = []
    for r in results:
        params = json.dumps(r.params, sort_keys=True)
        for rep, copy, seq, value, ops, ns in r.raw:
            x = number_of[id(r), rep]
            rows.append([run.id, run.label, r.id, r.benchmark, params, r.copies, shown_rep(x.number), copy, seq, value,
                         r.unit, r.better, ops, ns, "; ".join(x.noise.get("disturbed") or [])])
    return rows


def show(run: Run, facts: dict, results: list[Result], fmt: str = "text", raw: bool = False,
         reps: bool = False, kernel_insns: dict[int, float] | None = None, ops: dict[str, str] | None = None) -> str:
    """One run: text or Markdown (facts, one row per benchmark and copy count over its repetitions,
    counters; ``reps`` adds a row per repetition, ``raw`` the intervals), JSON (all of it, the summary
    included) or CSV (every raw interval, one row each). ``kernel_insns``: the exact kernel instructions
    per operation of the results that have them (deterministic guests; result id -> value), in the text;
    ``ops``: what one operation of each benchmark is, for the units (:func:`results_table`)."""
    counted = bool(facts.get("deterministic"))
    if fmt == "csv":
        return to_csv(Table(list(RAW_COLUMNS), raw_rows(run, results)))
    if fmt == "json":
        return to_json(_document(run, facts, results))
    if fmt == "markdown":
        out = [f"**{md_escape(run_heading(run, facts))}**", "",
               to_markdown(results_table(results, ops, counted)).rstrip("\n")]
        if reps:
            out += ["", to_markdown(reps_table(results, ops, counted)).rstrip("\n")]
        return "\n".join(out) + "\n"
    out = [run_heading(run, facts) + f", kperfdiff {run.tool_version}", f"command: {run.command}", ""]
    out.append(machine_facts(facts).rstrip("\n") if facts else "machine: (unknown)")
    out.append("")
    out.append(to_text(results_table(results, ops, counted)).rstrip("\n"))
    if reps:
        out += ["", "repetitions, in the order measured:", to_text(reps_table(results, ops, counted)).rstrip("\n")]
    groups = group_results(results)
    mon = []
    for g in groups:
        summed: dict = {}
        for r in g.results:
            if r.status == "ok":
                monitors.add(summed, r.monitors or {})
        mon.append((g, len(g.repetitions), monitors.relevant(summed)))
    if any(m for *_, m in mon):
        out += ["", "kernel counters (delta over the benchmark, all processes, summed over its repetitions):"]
        for g, n, m in mon:
            if m:
                items = ", ".join(f"{k.split('.', 1)[1]}{' (' + monitors.IRQ_NAMES[k] + ')' if k in monitors.IRQ_NAMES else ''}"
                                  f" {v}" for k, v in m)
                out.append(f"  {g.name} -P {g.results[0].copies} ({n} rep{'s' if n != 1 else ''}): {items}")
    counted = [(g, [kernel_insns[r.id] for r in g.results if r.id in kernel_insns])
               for g in groups] if kernel_insns else []
    if any(v for _, v in counted):
        out += ["", "kernel instructions per operation (exact: the QEMU counting plugin, kernel functions "
                    "in the counted intervals):"]
        for g, vals in counted:
            if vals:
                out.append(f"  {g.name} -P {g.results[0].copies}: " + ", ".join(f"{v:,.1f}" for v in vals))
    if raw:
        out += ["", "raw intervals:"]
        for g in groups:
            for x in g.repetitions:
                out.append(f"  {g.name} -P {x.result.copies} rep {x.number + 1} ({x.result.unit}): "
                           + " ".join(number(v) for v in x.values))
    return "\n".join(out) + "\n"
