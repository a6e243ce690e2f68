"""``kperfdiff place``: plan, sweep, model and simulate placements (thin layer)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kperfdiff.core.errors import InputError, UsageError
from kperfdiff.ingest.load import load_side, resolve_side
from kperfdiff.ingest.profile import merge
from kperfdiff.place import emit, grouptable
from kperfdiff.place import simulate as sim
from kperfdiff.place.inputs import load_groups, load_hw, load_sizes, parse_bytes, read_placement
from kperfdiff.place.model import build_problem, evaluate, placement_from_names
from kperfdiff.place.optimise import by_groups, methods_for, solve, sweep
from kperfdiff.render.place import group_table, groups_by_benchmark, kb, method_table, placement_table, render
from kperfdiff.render.table import Table
from kperfdiff.commands.common import write_file, write_output
from kperfdiff.commands.diff import store_lookup
from kperfdiff.commands.parsing import Parser, add_format, add_output, add_top

EPILOG = """\
sub-commands:
  plan      choose functions for the fast memory and write what the build needs
  sweep     predicted gain of each method over fast-memory sizes (4K..64K)
  model     evaluate a placement written by hand (--placement FILE, one function a line)
  simulate  run the profile's reconstructed trace through an I-cache + fast-memory
            simulator and set the simulation beside the model's prediction
  groups    the TCM study's table: each thesis group placed alone, one column per
            benchmark profile, the model's and the simulator's change in each cell,
            beside the exact optimiser's placement

inputs common to all: PROFILE (perf.data, perf script, perf report or folded
stacks, or a store reference RUN:BENCHMARK[@CORES], its repetitions added up),
--sizes (System.map, kallsyms or vmlinux, or a store reference whose kallsyms to
use; map and kallsyms sizes are address gaps, approximate; default: the kallsyms
stored with a store-referenced profile), --hw (hardware model TOML, see
examples/place/arm926-tcm.toml), --fills (measured per function by a
no-placement simulation, the default, or the thesis's uniform f). Groups: the shipped thesis groups plus
--groups FILE; --atomic GROUP makes a group all-or-none.
"""


def _common(p, *, capacity=True, method=True, many=False):
    if many:
        p.add_argument("profiles", nargs="+", metavar="PROFILE",
                       help="one profile per benchmark (a column each): files or store references RUN:BENCHMARK")
    else:
        p.add_argument("profile", help="profile: perf.data, perf script, perf report --stdio, folded stacks, or a "
                                       "store reference RUN:BENCHMARK[@CORES]")
    p.add_argument("--sizes", metavar="FILE",
                   help="function sizes: vmlinux (exact ELF sizes), System.map or kallsyms (address gaps, "
                        "approximate), or a store reference RUN:BENCHMARK whose stored kallsyms to use "
                        "(default: the kallsyms stored with a store-referenced profile)")
    p.add_argument("--hw", required=True, metavar="MODEL.toml", help="hardware model (examples/place/*.toml)")
    if capacity:
        p.add_argument("--capacity", metavar="BYTES", default=None,
                       help="fast-memory size, e.g. 16K (default: the model's fast_memory.size)")
    if method:
        p.add_argument("--method", choices=["exact", "greedy", "groups", "all"], default="all",
                       help="optimiser (default: all three)")
    p.add_argument("--exclude", nargs="+", action="extend", default=[], metavar="PATTERN",
                   help="more functions that must not move (shell patterns)")
    p.add_argument("--no-default-excludes", action="store_true",
                   help="do not apply the shipped exclusion patterns (address-range exclusions still apply)")
    p.add_argument("--groups", action="append", default=[], metavar="FILE",
                   help="a TOML file of more named groups ([groups.NAME] functions = [...])")
    p.add_argument("--atomic", action="append", default=[], metavar="GROUP",
                   help="place this group all or none (exact and greedy)")
    p.add_argument("--time-limit", type=float, default=60.0, metavar="S",
                   help="stop the exact method after S seconds with its best placement and the gap to a bound "
                        "(default 60; 0 keeps the greedy placement and states its gap)")
    p.add_argument("--cycles-per-unit", type=float, default=None, metavar="C",
                   help="cycles one unit of profile weight stands for (default: from the event and the model)")
    p.add_argument("--fills", choices=["measured", "uniform"], default="measured",
                   help="measured (default): each function's own line fills, the fills its absence would spare "
                        "others, and each edge's calls, from a simulation of the profile's trace with no "
                        "placement; uniform: the thesis's f fills per "
                        "instruction everywhere and the model's per-call fill factors")
    p.add_argument("--calibrate", action="store_true",
                   help="with --fills uniform: take f from a simulation of the profile with no placement")
    add_format(p, "text", "markdown", "json")
    add_output(p, what="the tables")


def add_place(pl: Parser) -> None:
    pl.description = ("Choose kernel functions for a small fast memory (a TCM, or a hot-text region) "
                      "from a profile, predict the gain with the TCM study's cost model, check it "
                      "with a cache simulator, and write a linker-script fragment, annotations and "
                      "a symbol ordering file.")
    pl.epilog, pl.formatter_class = EPILOG, argparse.RawDescriptionHelpFormatter
    ps = pl.add_subparsers(dest="place_command", metavar="SUBCOMMAND", parser_class=type(pl))

    p = ps.add_parser("plan", help="choose the functions and write what the build needs")
    _common(p)
    p.add_argument("--linker-script", metavar="OUT", help="write the .text_itcm linker-script fragment here")
    p.add_argument("--annotations", metavar="OUT", help="write the __tcmfunc/__tcmlocalfunc list here")
    p.add_argument("--ordering", metavar="OUT",
                   help="write a --symbol-ordering-file for the functions left in main memory")
    p.add_argument("--simulate", action="store_true", help="add the simulator's figures beside the prediction")
    add_top(p, "placed functions to list")

    p = ps.add_parser("sweep", help="predicted gain per method over fast-memory sizes")
    _common(p, capacity=False)
    p.add_argument("--capacities", default="4K,8K,16K,32K,64K", metavar="LIST",
                   help="comma-separated sizes (default 4K,8K,16K,32K,64K)")

    p = ps.add_parser("model", help="evaluate a hand-written placement")
    _common(p, method=False)
    p.add_argument("--placement", required=True, metavar="FILE", help="functions to place, one a line ('#' comments)")

    p = ps.add_parser("simulate", help="simulate placements and compare with the model")
    _common(p)
    p.add_argument("--placement", metavar="FILE", help="also simulate this hand-written placement")
    p.add_argument("--events", type=int, default=20000, help="body executions in the reconstructed trace (default 20000)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-relink", action="store_true",
                   help="leave main-memory functions at their old addresses instead of packing them again")
    p.add_argument("--no-groups", action="store_true", help="do not simulate each thesis group")

    p = ps.add_parser("groups", help="each thesis group placed alone, per benchmark: model and simulator")
    _common(p, method=False, many=True)
    p.add_argument("--events", type=int, default=20000, help="body executions in each reconstructed trace (default 20000)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-own", action="store_true",
                   help="leave out each benchmark's own exact placement (one MILP per profile)")


class _Ctx:
    pass


def _profile(spec: str, lookup) -> tuple[str, object, dict]:
    """(column label, profile, what the store knows) of a file or a store reference; a reference's
    repetitions (and parallel copies) are added up into one profile."""
    refs = resolve_side(spec, lookup)
    meta = next((m for _, m in refs if m), {})
    profs = load_side(spec, lookup)
    prof = merge(profs, spec)
    label = meta.get("benchmark") or Path(spec).stem
    return label, prof, meta


def _sizes(args, metas: list[dict], lookup):
    """--sizes as a file, as a store reference (its stored kallsyms), or the kallsyms stored with a profile."""
    spec = args.sizes
    if spec and (Path(spec).exists() or ":" not in spec and not spec.isdigit()):
        return load_sizes(spec)
    if spec:
        metas = [m for _, m in lookup(spec)]
    ks = next((m["kallsyms"] for m in metas if m.get("kallsyms")), None)
    if ks:
        return load_sizes(ks)
    if spec:
        raise InputError(f"--sizes {spec}: the store holds no kallsyms with that run's profiles; "
                         f"give a System.map, kallsyms or vmlinux file")
    raise InputError("--sizes is needed (a System.map, kallsyms or vmlinux file) unless a profile is a store "
                     "reference recorded with its kallsyms")


def _load(args) -> _Ctx:
    c = _Ctx()
    c.hw = load_hw(args.hw)
    lookup = store_lookup(getattr(args, "store", None))
    _, c.profile, meta = _profile(args.profile, lookup)
    c.sizes = _sizes(args, [meta], lookup)
    groups, ex = load_groups(args.groups)
    c.groups = groups
    c.excludes = ([] if args.no_default_excludes else ex) + list(args.exclude)
    cap = getattr(args, "capacity", None)
    c.capacity = parse_bytes(cap) if cap is not None else c.hw.fast_size
    if c.capacity <= 0:
        raise InputError(f"the fast-memory capacity must be above zero bytes, not {cap}")
    c.problem = build_problem(c.profile, c.sizes, c.hw, groups=groups, excludes=c.excludes, atomic=args.atomic,
                              cycles_per_unit=args.cycles_per_unit, fills=args.fills,
                              events=getattr(args, "events", 20000), seed=getattr(args, "seed", 1))
    if args.calibrate and args.fills != "uniform":
        c.problem.notes.append("--calibrate changes nothing with --fills measured: fills are already measured "
                               "per function")
    if args.calibrate and args.fills == "uniform":
        tr = sim.reconstruct(c.profile, c.sizes, c.hw, events=getattr(args, "events", 20000))
        base = sim.simulate_placements(tr, c.sizes, c.hw, [])[0]
        if base.cached_instr:
            c.hw.fills_per_kinstr = 1000.0 * base.fills / base.cached_instr
            c.problem = build_problem(c.profile, c.sizes, c.hw, groups=groups, excludes=c.excludes,
                                      atomic=args.atomic, cycles_per_unit=args.cycles_per_unit, fills="uniform")
            c.problem.notes.append(f"calibrated: {c.hw.fills_per_kinstr:.2f} line fills per 1000 instructions "
                                   f"(simulation with no placement)")
    return c


def _write(path: str, text: str) -> None:
    write_file(path, text)
    print(f"kperfdiff: wrote {path}", file=sys.stderr)


def _sim_rows(c, configs, events=20000, seed=1, relink=True):
    """configs: list of (label, mask or names, model Prediction)."""
    tr = sim.reconstruct(c.profile, c.sizes, c.hw, events=events, seed=seed)
    res = sim.simulate_placements(tr, c.sizes, c.hw, [(lab, set(names)) for lab, names, _ in configs], relink=relink)
    base = res[0]
    t = Table(["configuration", "placed bytes", "model gain %", "sim fills", "sim cycles", "sim gain %",
               "model - sim (points)"], title=">> Model prediction and simulation side by side")
    rows = []
    preds = [None] + [p for _, _, p in configs]
    for r, p in zip(res, preds):
        sg = 100 * (base.cycles - r.cycles) / base.cycles if base.cycles else 0.0
        mg = 0.0 if p is None else p.gain_pct
        t.rows.append([r.label, r.placed_bytes, mg, r.fills, int(round(r.cycles)), sg, mg - sg])
        rows.append(r.as_dict() | {"model_gain_pct": mg, "sim_gain_pct": sg})
    t.notes += tr.notes + ["sim gain % is of the simulated kernel cycles with no placement; model gain % of the "
                           "kernel's sampled self time"]
    return t, rows


def _doc(c, kind: str) -> dict:
    return {"version": 1, "kind": kind, "profile": c.profile.source, "sizes": c.sizes.path,
            "sizes_approximate": c.sizes.approximate, "hw": c.hw.path, "hw_name": c.hw.name,
            "capacity": c.capacity, "candidates": c.problem.n, "notes": list(c.problem.notes)}


def _sol_doc(s) -> dict:
    doc = {"method": s.method, "seconds": s.seconds, "gap": s.gap, "status": s.status, "label": s.label,
           "prediction": s.prediction.as_dict(), "placed": s.prediction.placed}
    if s.method == "exact":
        doc |= {"bound": s.bound, "solved": s.detail}
    return doc


def _cmd_plan(args) -> int:
    c = _load(args)
    sols = [solve(c.problem, m, c.capacity, time_limit=args.time_limit) for m in methods_for(args.method)]
    # the build outputs follow the exact placement when it was computed, else the single method asked for
    chosen = next((s for s in sols if s.method == "exact"), sols[0])
    placed = chosen.prediction.placed
    ann = emit.annotations(placed, c.problem.calls)
    tables = [method_table(c, sols), placement_table(c, chosen, args.top or len(placed), dict(ann))]
    doc = _doc(c, "place-plan") | {"methods": {s.method: _sol_doc(s) for s in sols}, "chosen": chosen.method,
                                   "annotations": [{"function": f, "annotation": a} for f, a in ann]}
    gsol = next((s for s in sols if s.method == "groups"), None)
    if gsol:
        tables.append(group_table(gsol))
        doc["groups"] = [{"group": r["group"], "candidates": r["members"], "bytes": r["group_bytes"],
                          "trimmed": r["trimmed"], "prediction": r["prediction"].as_dict()} for r in gsol.details]
    if args.simulate:
        t, rows = _sim_rows(c, [(s.method, s.prediction.placed, s.prediction) for s in sols])
        tables.append(t)
        doc["simulation"] = rows
    tables[0].notes += c.problem.notes
    sizes = {n: c.sizes.sizes[n] for n in placed}
    if args.linker_script:
        _write(args.linker_script, emit.linker_fragment(placed, sizes, c.hw, c.capacity))
    if args.annotations:
        _write(args.annotations, emit.annotations_text(ann))
    if args.ordering:
        pr = c.problem
        selfc = {n: float(pr.self_cycles[k]) for k, n in enumerate(pr.names)}
        order = emit.ordering(pr.names, selfc, c.sizes.sizes, pr.calls, exclude=set(placed))
        _write(args.ordering, emit.ordering_text(order))
    write_output(args.output, render(tables, doc, args.format))
    return 0


def _cmd_sweep(args) -> int:
    caps = [parse_bytes(x) for x in args.capacities.split(",") if x.strip()]
    if not caps:
        raise InputError("--capacities lists no sizes")
    for cap in caps:
        if cap <= 0:
            raise InputError(f"the fast-memory capacity must be above zero bytes, not {cap}")
    args.capacity = str(max(caps))
    c = _load(args)
    methods = methods_for(args.method)
    res = sweep(c.problem, caps, methods, time_limit=args.time_limit)
    t = Table(["capacity"] + [f"{m} gain %" for m in methods] + (["exact gap %"] if "exact" in methods else []),
              title=f">> Predicted gain by fast-memory size ({c.hw.name})")
    doc = _doc(c, "place-sweep") | {"points": []}
    for cap, row in res:
        r = [kb(cap)] + [row[m].prediction.gain_pct for m in methods]
        if "exact" in methods:
            g = row["exact"].gap
            r.append(None if g is None else 100 * g)
        t.rows.append(r)
        doc["points"].append({"capacity": cap, "methods": {m: _sol_doc(s) for m, s in row.items()}})
    t.notes += c.problem.notes
    write_output(args.output, render([t], doc, args.format))
    return 0


def _cmd_model(args) -> int:
    c = _load(args)
    names = read_placement(args.placement)
    mask = placement_from_names(c.problem, names, args.placement)
    pred = evaluate(c.problem, mask)
    unsampled = [n for n in names if n not in c.problem.index]
    extra = sum(c.hw.aligned(c.sizes.sizes[n]) for n in unsampled)
    total = pred.bytes + extra
    t = Table(["quantity", "value"], title=f">> Model of {args.placement} in {c.hw.fast_name} of {c.capacity} bytes",
              align=["l", "r"])
    t.rows += [["functions", len(names)], ["bytes", total], ["fits", "yes" if total <= c.capacity else "NO"],
               ["fetch saving (cycles)", int(round(pred.fetch_saved))],
               ["crossing calls", int(round(pred.crossing_calls))],
               ["crossing cost (cycles)", int(round(pred.crossing_cost))],
               ["calls inside fast memory", int(round(pred.both_calls))],
               ["their fill saving (cycles)", int(round(pred.both_saved))],
               ["predicted gain (cycles)", int(round(pred.gain))], ["predicted gain % of kernel", pred.gain_pct]]
    if unsampled:
        t.notes.append(f"{len(unsampled)} listed functions were never sampled nor called; they take {extra} bytes "
                       f"and change nothing in the model")
    if total > c.capacity:
        t.notes.append(f"the placement needs {total} bytes, more than the {c.capacity} the fast memory holds")
    t.notes += c.problem.notes
    doc = _doc(c, "place-model") | {"placement": names, "bytes": total, "fits": total <= c.capacity,
                                    "prediction": pred.as_dict()}
    write_output(args.output, render([t], doc, args.format))
    return 0


def _cmd_simulate(args) -> int:
    c = _load(args)
    configs = []
    for m in methods_for(args.method):
        s = solve(c.problem, m, c.capacity, time_limit=args.time_limit)
        configs.append((m + (f" ({s.label})" if s.label else ""), s.prediction.placed, s.prediction))
    if args.placement:
        names = read_placement(args.placement)
        p = evaluate(c.problem, placement_from_names(c.problem, names, args.placement))
        configs.append((f"file {Path(args.placement).name}", names, p))
    if not args.no_groups:
        g = by_groups(c.problem, c.capacity, pairs=False)
        for r in g.details:
            if r["members"]:
                configs.append((f"group {r['group']}" + (" (trimmed)" if r["trimmed"] else ""),
                                r["prediction"].placed, r["prediction"]))
    t, rows = _sim_rows(c, configs, args.events, args.seed, not args.no_relink)
    t.notes += c.problem.notes
    doc = _doc(c, "place-simulate") | {"simulation": rows}
    write_output(args.output, render([t], doc, args.format))
    return 0


def _cmd_groups(args) -> int:
    hw = load_hw(args.hw)
    lookup = store_lookup(getattr(args, "store", None))
    cols = [_profile(spec, lookup) for spec in args.profiles]
    sizes = _sizes(args, [m for _, _, m in cols], lookup)
    groups, ex = load_groups(args.groups)
    excludes = ([] if args.no_default_excludes else ex) + list(args.exclude)
    capacity = parse_bytes(args.capacity) if args.capacity is not None else hw.fast_size
    if capacity <= 0:
        raise InputError(f"the fast-memory capacity must be above zero bytes, not {args.capacity}")
    if args.events < 1:
        raise InputError(f"--events must be 1 or more, not {args.events}")
    if args.calibrate:
        raise InputError("--calibrate is for plan, sweep, model and simulate with --fills uniform; place groups "
                         "measures fills per benchmark")
    gt = grouptable.build([(lab, p) for lab, p, _ in cols], sizes, hw, capacity, groups=groups, excludes=excludes,
                          fills=args.fills, events=args.events, seed=args.seed, time_limit=args.time_limit,
                          own=not args.no_own, atomic=args.atomic, cycles_per_unit=args.cycles_per_unit)
    doc = {"version": 1, "kind": "place-groups", "profiles": list(args.profiles), "sizes": sizes.path,
           "sizes_approximate": sizes.approximate, "hw": hw.path} | gt.as_dict()
    write_output(args.output, render(groups_by_benchmark(gt), doc, args.format))
    return 0


def run(args) -> int:
    cmd = getattr(args, "place_command", None)
    if not cmd:
        raise UsageError("needs a sub-command: plan, sweep, model, simulate or groups (see kperfdiff place --help)", prog="kperfdiff place")
    if getattr(args, "time_limit", 0) < 0:
        raise InputError(f"--time-limit must be zero or more seconds, not {args.time_limit:g}")
    return {"plan": _cmd_plan, "sweep": _cmd_sweep, "model": _cmd_model, "simulate": _cmd_simulate,
            "groups": _cmd_groups}[cmd](args)


# the commands this module defines: name -> (fill in its parser, run it)
DEFINES = {"place": (add_place, run)}
