"""Benchmark comparison tables: variants against a baseline (and a patch stack).

:func:`from_experiment` and :func:`from_runs` read the store into
:class:`Side` objects (one per variant: per column and core count, the
interval values of every repetition); :func:`compare` is pure computation.

Method
------
* A **column** is a benchmark, or an experiment's templated entry such as
  ``gups.{pages}`` that each variant fills with its own benchmark.
* **Median** of a side: with at least ``MIN_REPS`` (3) repetitions on both
  sides, the median of the per-repetition medians; otherwise the median of all
  intervals pooled.
* **Change**: :func:`kperfdiff.stats.signed_change` of the two medians: the
  speed ratio minus one, in percent (base/new - 1 for times, new/base - 1 for
  throughputs), so **positive is better** and the scale is symmetric: +25% is
  1.25x as fast, -50% half as fast.
* **Interval**: :func:`kperfdiff.stats.bootstrap_median_change` (percentile
  bootstrap, 4000 resamples, 95%, fixed seed) over the per-repetition medians
  when both sides have >= 3 repetitions (repetitions are the independent
  units: each is a fresh process), else over the pooled intervals (which
  understates the variation between processes; the output says which).
* **Significant** (``*``) only when the interval excludes 0; a cell without
  an interval, or with a failed or missing side, is never significant. No
  correction for multiple comparisons is applied (the table says so).
* **CV**: standard deviation / mean of all intervals of the side.
* **Geometric mean** of the changes through their speed ratios (1 + change/100)
  (:func:`kperfdiff.stats.geometric_mean_change`), per core count over the
  columns, per column over the core counts, and over every cell.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import stats
from .errors import InputError

COMPARE_VERSION = 1
MIN_REPS = 3


@dataclass
class Sample:
    """One side of one column at one core count."""

    benchmark: str
    unit: str | None
    better: str | None
    reps: list[list[float]] = field(default_factory=list)   # interval values per repetition
    status: str = "ok"             # ok, skipped, failed, missing
    reason: str | None = None
    monitors: dict = field(default_factory=dict)              # summed over repetitions
    n_results: int = 0

    @property
    def pooled(self) -> list[float]:
        return [x for r in self.reps for x in r]

    @property
    def rep_medians(self) -> list[float]:
        return [float(np.median(r)) for r in self.reps if r]

    @property
    def cv(self) -> float:
        v = self.pooled
        return stats.summarize(v).cv if len(v) > 1 else math.nan


@dataclass
class Side:
    label: str
    run_ids: list[int]
    facts: dict
    emulated: bool = False
    samples: dict[tuple[str, int], Sample] = field(default_factory=dict)
    profiles: dict[tuple[str, int], list[dict]] = field(default_factory=dict)   # actual benchmark, copies


@dataclass
class CellChange:
    key: str
    cores: int
    benchmark_base: str
    benchmark_new: str
    unit: str | None
    better: str | None
    base: float
    new: float
    change: float
    low: float
    high: float
    significant: bool
    method: str                  # "per-rep" or "pooled" or "" when not computed
    cv_base: float
    cv_new: float
    reps_base: int
    reps_new: int
    note: str = ""

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class Block:
    """One variant against one reference: the study's improvement table."""

    variant: str
    reference: str
    kind: str                    # "baseline" or "previous"
    cells: dict[tuple[str, int], CellChange]
    geomean_by_cores: dict[int, float]
    geomean_by_key: dict[str, float]
    geomean: float


@dataclass
class Comparison:
    title: str
    sides: list[Side]            # first is the baseline
    keys: list[str]
    cores: list[int]
    blocks: list[Block]
    experiment: dict | None = None
    confidence: float = stats.DEFAULT_CONFIDENCE
    templates: dict[str, dict[str, str]] = field(default_factory=dict)  # key -> variant -> benchmark

    @property
    def baseline(self) -> Side:
        return self.sides[0]

    def side(self, label: str) -> Side:
        return next(s for s in self.sides if s.label == label)


METHOD_TEXT = ("bootstrap of medians ({n} resamples, {c:.0%} percentile interval) over the per-repetition medians "
               "when both sides have >= {m} repetitions, else over all intervals pooled")


def method_text(confidence: float = stats.DEFAULT_CONFIDENCE) -> str:
    return METHOD_TEXT.format(n=stats.DEFAULT_BOOTSTRAP, c=confidence, m=MIN_REPS)


def compare_cell(key: str, cores: int, a: Sample | None, b: Sample | None, *,
                 confidence: float = stats.DEFAULT_CONFIDENCE) -> CellChange:
    """The change of one column at one core count, B against A."""
    nan = math.nan
    ba = a.benchmark if a else ""
    bb = b.benchmark if b else ""

    def empty(note):
        return CellChange(key, cores, ba, bb, (a or b).unit if (a or b) else None,
                          (a or b).better if (a or b) else None, _med(a), _med(b), nan, nan, nan, False, "",
                          a.cv if a and a.status == "ok" else nan, b.cv if b and b.status == "ok" else nan,
                          len(a.reps) if a else 0, len(b.reps) if b else 0, note)
    for s, who in ((a, "baseline"), (b, "variant")):
        if s is None or s.status == "missing":
            return empty(f"{who} not measured")
        if s.status != "ok" or not s.pooled:
            return empty(f"{who} {s.status}" + (f": {s.reason}" if s.reason else ""))
    if a.unit != b.unit or a.better != b.better:
        return empty(f"units differ ({a.unit} vs {b.unit})")
    per_rep = len(a.rep_medians) >= MIN_REPS and len(b.rep_medians) >= MIN_REPS
    xa, xb = (a.rep_medians, b.rep_medians) if per_rep else (a.pooled, b.pooled)
    ch = stats.bootstrap_median_change(xa, xb, a.better, confidence=confidence)
    return CellChange(key, cores, ba, bb, a.unit, a.better, ch.base, ch.new, ch.change, ch.low, ch.high,
                      ch.significant, "per-rep" if per_rep else "pooled", a.cv, b.cv, len(a.reps), len(b.reps))


def _med(s: Sample | None) -> float:
    if s is None or s.status != "ok" or not s.pooled:
        return math.nan
    rm = s.rep_medians
    return float(np.median(rm)) if len(rm) >= MIN_REPS else float(np.median(s.pooled))


def compare(sides: list[Side], pairs: list[tuple[str, str, str]], *, title: str = "",
            experiment: dict | None = None, confidence: float = stats.DEFAULT_CONFIDENCE,
            templates: dict | None = None) -> Comparison:
    """Compare sides: ``pairs`` are (variant, reference, kind) labels."""
    keys: list[str] = []
    cores: list[int] = []
    for s in sides:
        for k, c in s.samples:
            if k not in keys:
                keys.append(k)
            if c not in cores:
                cores.append(c)
    cores.sort()
    blocks = []
    by_label = {s.label: s for s in sides}
    for var, ref, kind in pairs:
        a, b = by_label[ref], by_label[var]
        cells = {(k, c): compare_cell(k, c, a.samples.get((k, c)), b.samples.get((k, c)), confidence=confidence)
                 for k in keys for c in cores
                 if (k, c) in a.samples or (k, c) in b.samples}
        gc = {c: stats.geometric_mean_change([x.change for (k, cc), x in cells.items() if cc == c]) for c in cores}
        gk = {k: stats.geometric_mean_change([x.change for (kk, c), x in cells.items() if kk == k]) for k in keys}
        g = stats.geometric_mean_change([x.change for x in cells.values()])
        blocks.append(Block(var, ref, kind, cells, gc, gk, g))
    return Comparison(title=title, sides=sides, keys=keys, cores=cores, blocks=blocks, experiment=experiment,
                      confidence=confidence, templates=templates or {})


# -- reading the store --------------------------------------------------------------

def _add_result(side: Side, r, key: str) -> None:
    k = (key, r.copies)
    s = side.samples.get(k)
    if s is None:
        s = side.samples[k] = Sample(benchmark=r.benchmark, unit=r.unit, better=r.better, status="missing")
    s.n_results += 1
    if r.status == "ok":
        by_rep: dict[int, list[float]] = {}
        for rep, _copy, _seq, value, _ops, _ns in r.raw:
            by_rep.setdefault(rep, []).append(value)
        s.reps.extend(by_rep[i] for i in sorted(by_rep))
        s.status = "ok"
        s.reason = None
        s.unit, s.better = r.unit, r.better
        for mk, mv in (r.monitors or {}).items():
            s.monitors[mk] = s.monitors.get(mk, 0) + mv
        s.monitors["_reps"] = s.monitors.get("_reps", 0) + len(by_rep)
    elif s.status != "ok":
        s.status = r.status
        s.reason = r.reason


def _side_from_runs(store, label: str, runs) -> Side:
    facts = store.machine(runs[0].machine_id) if runs else {}
    side = Side(label=label, run_ids=[r.id for r in runs], facts=facts,
                emulated=any(bool(store.machine(r.machine_id).get("emulated")) for r in runs))
    from .store import result_names
    for run in runs:
        results = store.results(run.id)
        for name, r in zip(result_names(results), results):
            _add_result(side, r, r.bench_key or name)
        for p in store.profiles(run.id):
            copies = (p.get("meta") or {}).get("copies", 1)
            side.profiles.setdefault((p["benchmark"], copies), []).append(p)
    return side


def from_experiment(store, ref: str) -> Comparison:
    exp = store.find_experiment(ref)
    spec = exp["spec"]
    runs = store.experiment_runs(exp["id"])
    by_variant = {}
    for r in runs:
        by_variant.setdefault(r.variant, []).append(r)
    labels = [v["label"] for v in spec.get("variants", [])]
    if not any(by_variant.get(lab) for lab in labels):
        raise InputError(f"experiment {exp['name']} (id {exp['id']}) has no results yet; run it with "
                         f"kperfdiff run {exp['path'] or 'FILE'}")
    base = spec.get("baseline", labels[0])
    order = [base] + [lab for lab in labels if lab != base]
    sides = [_side_from_runs(store, lab, by_variant.get(lab, [])) for lab in order]
    pairs = [(v, base, "baseline") for v in order[1:]]
    prev = None
    for lab in spec.get("stack", []):
        if prev is not None and prev != base and lab != base:
            pairs.append((lab, prev, "previous"))
        prev = lab
    templates: dict[str, dict[str, str]] = {}
    for s in sides:
        for (k, _c), smp in s.samples.items():
            if k != smp.benchmark:
                templates.setdefault(k, {})[s.label] = smp.benchmark
    # keep the file's column order
    state = exp["state"]
    if state == "running" and not store.experiment_owner_alive(exp) and exp.get("pid") != __import__("os").getpid():
        state = "interrupted"
    title = f"experiment {exp['name']} (id {exp['id']}, {state})"
    cmp = compare(sides, pairs, title=title, experiment=exp, templates=templates)
    return cmp


def from_runs(store, refs: list[str], *, stack: bool = False) -> Comparison:
    if len(refs) < 2:
        raise InputError("compare needs at least two runs (the first is the baseline), or --experiment")
    runs = [store.find_run(r) for r in refs]
    seen: dict[str, int] = {}
    sides = []
    for run in runs:
        label = run.label or run.variant or f"run {run.id}"
        if label in seen or any(s.label == label for s in sides):
            label = f"{label} (run {run.id})"
        seen[label] = run.id
        sides.append(_side_from_runs(store, label, [run]))
    labels = [s.label for s in sides]
    pairs = [(lab, labels[0], "baseline") for lab in labels[1:]]
    if stack:
        pairs += [(labels[i], labels[i - 1], "previous") for i in range(2, len(labels))]
    templates: dict[str, dict[str, str]] = {}
    for s in sides:
        for (k, _c), smp in s.samples.items():
            if k != smp.benchmark:
                templates.setdefault(k, {})[s.label] = smp.benchmark
    title = "runs " + ", ".join(str(r.id) for r in runs)
    return compare(sides, pairs, title=title, templates=templates)


def top_mover(cmp: Comparison) -> CellChange | None:
    """The cell of the first block vs the baseline that moved most: significant first, then by |change|."""
    best = None
    for blk in cmp.blocks:
        if blk.kind != "baseline":
            continue
        for c in blk.cells.values():
            if math.isnan(c.change):
                continue
            score = (c.significant, abs(c.change))
            if best is None or score > best[0]:
                best = (score, c, blk)
        break
    return best[1] if best else None


def run_cli(args) -> int:
    """`kperfdiff compare RUN_A RUN_B ...` or `kperfdiff compare --experiment ID|NAME`."""
    import sys

    from .render import compare as render
    from .render.report import load_comparison
    from .store import Store
    store = Store.open(args.store)
    cmp = load_comparison(store, args)
    sys.stdout.write(render.render(cmp, args.format))
    return 0
