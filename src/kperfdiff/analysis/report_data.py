"""The report's data: what `kperfdiff report` and `run --report` show, gathered from the store.

:func:`gather` collects a :class:`ReportData`: the comparison, the machine facts of every side
(with the knobs, environment and command line its runs recorded), and for each benchmark that
changed significantly the kperfdiff ranking of its profiles (one per repetition, every stored
repetition as ``kperfdiff diff RUN:BENCHMARK`` reads them, parallel copies merged). :mod:`kperfdiff.render.report` turns it into HTML or Markdown without reading
anything.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from kperfdiff.analysis.bench_compare import (
    DEFAULT_SAME_WITHIN,
    Block,
    CellChange,
    Comparison,
    from_experiment,
    from_runs,
    top_mover,
)
from kperfdiff.analysis.profile_diff import DiffOptions, DiffResult, add_folded, diff_profiles
from kperfdiff.core.errors import InputError, KperfdiffError
from kperfdiff.ingest.load import load_stored


@dataclass
class ProfileDiff:
    variant: str
    reference: str
    key: str                       # the column's plain name (gups, not the template gups.{pages})
    cores: int
    change: float
    result: DiffResult | None = None
    title: str = ""                # of its differential flame graph
    error: str = ""

    @property
    def reps(self) -> tuple[int, int]:
        """The repetitions whose profiles were diffed (reference, variant): every stored one."""
        r = self.result
        return (len(r.side_a.samples), len(r.side_b.samples)) if r is not None else (0, 0)


@dataclass
class ReportData:
    cmp: Comparison
    facts: dict[str, dict]                  # side label -> machine facts (+ knobs)
    diffs: list[ProfileDiff] = field(default_factory=list)
    generated: str = ""


def load_comparison(store, *, experiment: str | None, runs: list[str], stack: bool = False,
                    profiles: bool = True, ops: dict[str, str] | None = None,
                    same_within: float = DEFAULT_SAME_WITHIN) -> Comparison:
    """The comparison of an experiment's variants, or of runs (the first is the baseline); with
    ``profiles``, each side also lists its stored profiles (for the report's profile diffs);
    ``ops``: what one operation of each benchmark is (the catalogue's, for the units printed);
    ``same_within``: the percent inside which a change's interval makes its verdict "same"."""
    if experiment and runs:
        raise InputError("give either --experiment or RUNs, not both")
    if experiment:
        cmp = from_experiment(store, experiment, profiles=profiles, same_within=same_within)
    elif not runs:
        raise InputError("name the runs to compare (the first is the baseline) or --experiment ID|NAME")
    else:
        cmp = from_runs(store, runs, stack=stack, profiles=profiles, same_within=same_within)
    cmp.ops = dict(ops or {})
    return cmp


def side_facts(store, side) -> dict:
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


def profile_diff(cmp: Comparison, blk: Block, c: CellChange) -> ProfileDiff:
    """The kperfdiff ranking of one changed cell's profiles (reference = A)."""
    return diff_stored(cmp, blk.reference, blk.variant, c.benchmark_base, c.benchmark_new, c.cores,
                       key=c.key, change=c.change)


def diff_stored(cmp: Comparison, reference: str, variant: str, bench_ref: str, bench_var: str, cores: int, *,
                key: str = "", change: float = float("nan"), options: DiffOptions | None = None) -> ProfileDiff:
    """The kperfdiff ranking of two sides' stored profiles of a benchmark at a core count (reference = A);
    problems go to ``error``, so one unreadable profile never loses a report."""
    pd = ProfileDiff(variant, reference, cmp.name(key) if key else bench_var, cores, change)
    a = cmp.side(reference).profiles.get((bench_ref, cores), [])
    b = cmp.side(variant).profiles.get((bench_var, cores), [])
    if not a or not b:
        pd.error = "no profiles on both sides (run the experiment with profile = true)"
        return pd
    try:
        pa = load_stored(a, reference)
        pb = load_stored(b, variant)
        if not pa or not pb:
            pd.error = "the profile files are missing from the artefact folder"
            return pd
        opts = options or DiffOptions()
        opts.labels = (reference, variant)
        res = diff_profiles(pa, pb, opts)
        add_folded(res, pa, pb)
        pd.result = res
        pd.title = f"{bench_var} vs {bench_ref}, {cores} core{'s' if cores > 1 else ''}: {variant} vs {reference}"
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
    data = ReportData(cmp, {s.label: side_facts(store, s) for s in cmp.sides},
                      generated=dt.datetime.now().strftime("%Y-%m-%d %H:%M"))
    if profiles:
        data.diffs = [profile_diff(cmp, blk, c) for blk, c in changed_cells(cmp)]
    return data


@dataclass
class TopMover:
    """The cell of the first comparison that moved most, and its profile diff."""
    cell: CellChange
    block: Block
    diff: ProfileDiff
    name: str = ""                 # the column's plain name (Comparison.name)


def top_mover_diff(cmp: Comparison) -> TopMover | None:
    c = top_mover(cmp)
    if c is None:
        return None
    blk = next(b for b in cmp.blocks if b.kind == "baseline")
    return TopMover(c, blk, profile_diff(cmp, blk, c), cmp.name(c.key))
