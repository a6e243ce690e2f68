"""The TCM placement study (ARM926EJ-S, Linux 2.6.35, 2012): kernel groups placed in a TCM in turn.

The study built one kernel per group of functions (fork, exec, schedule,
buddy, page fault, ...) with that group in a 16 KB ITCM and ran lmbench on
each. Here the experiment records perf profiles of the lmbench-class
benchmarks in an arm64 guest (the guest's kallsyms stored with them gives the
function sizes), and the section places each thesis group alone in the ARM926
model of ``examples/place/arm926-tcm.toml`` (found beside the study file),
per benchmark: the cost model's predicted change of kernel fetch cycles and
the I-cache simulator's (:mod:`kperfdiff.place.grouptable`), beside the exact
optimiser's placement.

Direction: the study found exec or schedule best (local communication -13 to
-14%, fork/exec/shell -16 to -21%) and buddy or page fault worst (mmap +25%).
The verdict reads the simulator's ranking where the model agrees with it.
Mechanism: the study's model is fetches and line fills avoided for hot code,
against far calls and lost locality; the verdict says how far the model (those
terms alone) and the simulator agree in sign and size, and whether any group
made a benchmark slower.
"""
from __future__ import annotations

import math
from pathlib import Path

from kperfdiff.core.errors import KperfdiffError
from kperfdiff.ingest.load import load_stored
from kperfdiff.ingest.profile import merge
from kperfdiff.place import grouptable
from kperfdiff.place.inputs import load_groups, load_hw, load_sizes
from kperfdiff.render.place import groups_by_benchmark
from kperfdiff.render.table import Table
from kperfdiff.studies.study import Section, Verdict, centre_text, comparison, sample, study_of

CAPACITY = 16384                    # the study's ITCM
HW_FILE = Path("place") / "arm926-tcm.toml"     # under examples/, beside studies/
LOCAL = ("ipc.pipe", "ipc.unix", "ctx.")        # the study's local-communication latency
PROC = ("proc.",)
MMAP = ("mmap.",)
BEST = {"exec", "schedule"}
WORST = {"buddy", "page_fault"}


def _is(key: str, prefixes) -> bool:
    return any(key == p or key.startswith(p) for p in prefixes)


def hw_path(exp) -> Path:
    return Path(exp.path).resolve().parent.parent / HW_FILE


def table_of(store, exp, cmp, variant: str, cores: int, events: int = 20000):
    """(GroupTable, column keys without profiles) from the stored profiles of each benchmark."""
    cols, missing, sizes = [], [], None
    side = cmp.side(variant)
    for key in exp.benchmarks:
        s = sample(cmp, variant, key, cores)
        entries = side.profiles.get((s.benchmark if s else key, cores), [])
        if not entries:
            missing.append(key)
            continue
        profs = load_stored(entries, key)
        cols.append((key, merge(profs, key) if len(profs) > 1 else profs[0]))
        if sizes is None:
            ks = next((e.kallsyms for e in entries if e.kallsyms), None)
            if ks:
                sizes = load_sizes(ks)
    if not cols:
        return None, missing, "no benchmark has stored profiles (run the experiment with profile = true)"
    if sizes is None:
        return None, missing, "no kallsyms is stored with the profiles, so function sizes are unknown"
    hw = load_hw(hw_path(exp))
    groups, ex = load_groups()
    gt = grouptable.build(cols, sizes, hw, CAPACITY, groups=groups, excludes=ex, events=events)
    return gt, missing, ""


def _scored(gt, keys, which="sim") -> list[tuple[float, str]]:
    """(mean change over ``keys``, group) of the groups with members, best first."""
    return sorted(((sum(getattr(r, which).get(k, 0.0) for k in keys) / len(keys), r.label)
                   for r in gt.groups if r.members), reverse=True)


def _best_group(gt, keys, which="sim"):
    """The group of the highest mean change over ``keys`` (None without keys)."""
    scored = _scored(gt, keys, which) if keys else []
    if not scored:
        return None, math.nan
    v, lab = scored[0]
    return lab, v


def _rank(gt, label, keys, which="sim") -> int:
    return next((i + 1 for i, (_, lab) in enumerate(_scored(gt, keys, which)) if lab == label), 0)


def section(store, exp) -> Section:
    cmp = comparison(store, exp)
    sec = Section(study_of(exp), exp.name, emulated=any(s.emulated for s in cmp.sides))
    if not cmp.sides:
        sec.complete = False
        return sec
    variant = cmp.sides[0].label
    cores = cmp.cores[0] if cmp.cores else 1
    lat = Table(["benchmark", "time per operation, 95% interval"], title=f"The benchmarks in the {variant} guest")
    complete = True
    for k in exp.benchmarks:
        s = sample(cmp, variant, k, cores)
        complete &= bool(s and s.status == "ok")
        lat.rows.append([k, centre_text(s)])
    lat.notes.append("Emulated (QEMU TCG): these times are the guest's, measured; everything below is placed in a "
                     "modelled ARM926 and is the model's and the simulator's, not a measurement.")
    sec.tables.append(lat)
    sec.complete = complete
    if not hw_path(exp).exists():
        sec.complete = False
        sec.paragraphs.append(f"The hardware model {hw_path(exp)} is missing, so nothing can be placed.")
        return sec
    try:
        gt, missing, why = table_of(store, exp, cmp, variant, cores)
    except KperfdiffError as e:
        gt, missing, why = None, [], f"the profiles cannot be placed: {e}"
    if gt is None:
        sec.complete = False
        sec.paragraphs.append(f"No placement table: {why}.")
        return sec
    if missing:
        sec.complete = False
        sec.paragraphs.append(f"No stored profile of {', '.join(missing)}: those columns are missing.")
    sec.tables += groups_by_benchmark(gt)
    cols = gt.columns
    local = [k for k in cols if _is(k, LOCAL)]
    proc = [k for k in cols if _is(k, PROC)]
    mmap = [k for k in cols if _is(k, MMAP)]
    ex = gt.row(grouptable.COMBINED)
    sec.paragraphs.append(
        f"Each thesis group alone in a {CAPACITY // 1024} KB ITCM, per benchmark, as a change of the benchmark's "
        f"kernel instruction-fetch cycles (+ = faster): best group on average {gt.groups[0].label} "
        f"({gt.groups[0].mean('model'):+.1f}% model, {gt.groups[0].mean('sim'):+.1f}% simulated); the exact "
        f"placement of all benchmarks combined {ex.mean('model'):+.1f}% / {ex.mean('sim'):+.1f}%, "
        f"{ex.mean('sim') / gt.groups[0].mean('sim'):.1f}x the best group's simulated gain."
        if ex and gt.groups and gt.groups[0].mean("sim") > 0 else
        "Each thesis group alone in the ITCM, per benchmark, model and simulator.")

    # direction: which groups come out best for local communication and fork/exec/shell, worst for mmap
    parts, score, tried = [], 0, 0
    for what, keys in (("local communication", local), ("fork/exec/shell", proc)):
        if not keys:
            continue
        tried += 1
        lab, v = _best_group(gt, keys)
        mlab, _ = _best_group(gt, keys, "model")
        ranks = {g: _rank(gt, g, keys) for g in sorted(BEST)}
        ok = lab in BEST
        score += ok
        parts.append(f"{what} ({', '.join(keys)}): best {lab} ({v:+.1f}% simulated"
                     + ("" if mlab == lab else f"; the model's best is {mlab}") + "), "
                     + ", ".join(f"{g} ranks {r}" for g, r in ranks.items()) + f" of {len(gt.groups)}")
    for k in mmap:
        tried += 1
        worst = min(((r.sim.get(k, 0.0), r.label) for r in gt.groups if r.members), default=(math.nan, None))
        slower = {g: gt.row(g).sim.get(k, math.nan) for g in sorted(WORST) if gt.row(g)}
        ok = any(v < 0 for v in slower.values())
        score += ok
        parts.append(f"{k}: " + ", ".join(f"{g} {v:+.1f}%" for g, v in slower.items())
                     + f" simulated (the worst group is {worst[1]}, {worst[0]:+.1f}%)")
    if tried:
        word = "yes" if score == tried else "partly" if score else "no"
        sec.direction = Verdict(word, "; ".join(parts) + ". The study: exec or schedule best (local communication "
                                "-13 to -14%, fork/exec/shell -16 to -21% latency), buddy or page fault worst "
                                "(mmap 25% slower).")
    # mechanism: do the model's terms (fetches and fills saved, far calls paid) explain the simulator?
    cells = [(r.model[k], r.sim[k]) for r in gt.groups + gt.others for k in cols if k in r.model and k in r.sim]
    big = [(m, s) for m, s in cells if abs(s) >= 1.0]
    agree = sum((m > 0) == (s > 0) for m, s in big)
    err = sum(abs(m - s) for m, s in cells) / len(cells) if cells else math.nan
    slow = [(r.label, k, r.sim[k]) for r in gt.groups for k in cols if r.sim.get(k, 0.0) <= -1.0]
    if big:
        word = "partly" if agree >= 0.8 * len(big) else "no"
        sec.mechanism = Verdict(word, f"The model's terms (fetches and line fills saved by the placed code, the "
                                f"veneer cycles of each far call) predict the simulator's sign in {agree} of "
                                f"{len(big)} cells that moved 1% or more, {err:.1f} points apart on average. "
                                + ("Slowdowns of 1% or more in the simulator: "
                                   + ", ".join(f"{g} on {k} {v:+.1f}%" for g, k, v in slow[:6])
                                   + " (lines of the code left behind that now collide, and far calls), the "
                                   "study's mechanism of a TCM making code slower. "
                                   if slow else "No group made a benchmark 1% slower in the simulator: nothing "
                                   "here reproduces the study's slowdown mechanism (lost locality, far calls) at "
                                   "the study's size. ")
                                + "The model cannot say what the study's measurement saw beyond instruction fetch "
                                "(data-side costs, the ARM926's real veneers and TLB).")
    sec.differs.append("Groups bigger than the 16 KB ITCM are trimmed to their hottest functions (all benchmarks "
                       "combined) up to it; Linux 6.1's groups are larger than 2.6.35's, and arm64 code is not "
                       "ARM926 code, so more groups are trimmed than the study's were.")
    sec.paragraphs.append("How to read the tables: " + " ".join(gt.notes[-3:]))
    return sec
