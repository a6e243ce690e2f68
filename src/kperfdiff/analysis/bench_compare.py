"""Benchmark comparison tables: variants against a baseline (and a patch stack).

:func:`from_experiment` and :func:`from_runs` read the store into
:class:`Side` objects (one per variant: per column and core count, the
interval values of every repetition); :func:`compare` is pure computation.

Method
------
* A **column** is a benchmark, or an experiment's templated entry such as
  ``gups.{pages}`` that each variant fills with its own benchmark.
* A **repetition** is one fresh set of worker processes; the intervals timed
  inside one process are not independent of each other, repetitions are.
* **Centre** of a side (the value the tables print): the geometric mean of the
  per-repetition medians (:func:`kperfdiff.core.stats.nested_centre`).
* **Change**: :func:`kperfdiff.core.stats.signed_change` of the two centres: the
  speed ratio minus one, in percent (base/new - 1 for times, new/base - 1 for
  throughputs), so **positive is better** and the scale is symmetric: +25% is
  1.25x as fast, -50% half as fast.
* **Interval and test**: :func:`kperfdiff.core.stats.nested_change`, the two-level
  random-effects interval of Kalibera and Jones (Welch's t on the logarithms of
  the per-repetition medians). With fewer than ``stats.MIN_REPS`` (3)
  repetitions on a side there is no interval, and the cell says so.
* **Separate runs** (:func:`from_runs`): each side is one run made at its own
  time, so the interval also holds the drift between runs
  (:func:`kperfdiff.core.stats.run_level_change`), estimated from every stored bench
  run of the benchmark on the same machine configuration. Runs that all belong
  to one experiment were interleaved there: they get the experiment's interval
  (no drift between runs), the same as ``--experiment`` gives its variants.
* **Significant** (``*``) only when the cell's Benjamini-Hochberg q-value over
  all the cells of its table (one variant against one reference) is at most
  ``alpha`` (0.05): on a table where nothing changed, the chance that any cell
  is marked is at most 5%. A cell without an interval, with a failed or
  missing side, is never significant.
* **Disturbed** (``!``): a repetition measured while the machine was noisy
  (steal, other runnable tasks, involuntary switches; :mod:`kperfdiff.bench.noise`)
  marks its cell, with the reason in the notes and in JSON.
* **CV**: standard deviation / mean of all intervals of the side.
* **Geometric mean** of the changes through their speed ratios (1 + change/100)
  (:func:`kperfdiff.core.stats.geometric_mean_change`), per core count over the
  columns, per column over the core counts, and over every cell.
"""
from __future__ import annotations

import functools
import json
import math
import os
import re
from dataclasses import dataclass, field


from kperfdiff.core import modes as modemod
from kperfdiff.core import monitors, stats
from kperfdiff.core.errors import InputError
from kperfdiff.core.records import StoredExperiment, StoredProfile, result_names, summarise_disturbance, unresolvable

MIN_REPS = stats.MIN_REPS
DEFAULT_SAME_WITHIN = 5.0     # percent: a change whose interval lies inside +-this is "same"
_PLACEHOLDER = re.compile(r"\.?\{[^}]*\}")


@dataclass
class Sample:
    """One side of one column at one core count."""

    benchmark: str
    unit: str | None
    better: str | None
    reps: list[list[float]] = field(default_factory=list)   # interval values per repetition
    rounds: list[int] = field(default_factory=list)           # the round each repetition was measured in
    status: str = "ok"             # ok, skipped, failed, missing
    reason: str | None = None
    monitors: dict = field(default_factory=dict)              # summed over repetitions
    n_results: int = 0
    noise: list[dict] = field(default_factory=list)           # per repetition (kperfdiff.bench.noise), renumbered
    history: list[list[list[float]]] | None = None            # separate runs: every stored run of it here
    params: dict = field(default_factory=dict)
    machine_id: int | None = None

    @property
    def disturbed(self) -> str | None:
        """How many repetitions were disturbed, and why (None: none was)."""
        return summarise_disturbance(self.noise, len(self.reps))
    stop: str | None = None                                   # why the repetitions stopped (--precision)

    @property
    def pooled(self) -> list[float]:
        return [x for r in self.reps for x in r]

    @property
    def rep_medians(self) -> list[float]:
        return [float(x) for x in stats.repetition_medians(self.reps)]

    @property
    def centre(self) -> float:
        """The value tables print: the geometric mean of the per-repetition medians."""
        if self.status != "ok" or not self.pooled:
            return math.nan
        return stats.nested_centre(self.reps)

    @property
    def cv(self) -> float:
        v = self.pooled
        return stats.coefficient_of_variation(v) if len(v) > 1 else math.nan

    @functools.cached_property
    def modes(self) -> modemod.Modes:
        """The modes of its intervals (:func:`kperfdiff.core.modes.find_modes_in`), found once."""
        return modemod.find_modes_in(self.reps) if self.status == "ok" else modemod.single([])


@dataclass
class Side:
    label: str
    run_ids: list[int]
    facts: dict
    emulated: bool = False
    samples: dict[tuple[str, int], Sample] = field(default_factory=dict)
    profiles: dict[tuple[str, int], list[StoredProfile]] = field(default_factory=dict)   # actual benchmark, copies


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
    method: str                  # "nested" or "" when no interval was computed
    cv_base: float
    cv_new: float
    reps_base: int
    reps_new: int
    note: str = ""
    p: float = math.nan          # two-sided p-value of the cell alone
    q: float = math.nan          # Benjamini-Hochberg q-value over the cell's table
    disturbed: list[str] = field(default_factory=list)   # noise reasons of either side
    runs: int = 0                # stored runs the drift between runs was estimated from (separate runs)
    detectable: float = math.nan     # smallest change the cell could have detected (80% power), percent
    verdict: str = ""            # different, same or unknown (decide_verdicts); "" without a change
    more_reps: int = 0           # unknown: about how many repetitions per side would decide it
    pairs: int = 0               # paired rounds (method "paired")
    modes_base: list[dict] = field(default_factory=list)   # [{centre, share}] when a side has several modes
    modes_new: list[dict] = field(default_factory=list)
    per_mode: list[float | None] = field(default_factory=list)   # the change within each mode, percent

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
    tests: int = 0               # cells with a test, over which false discoveries are controlled


@dataclass
class Comparison:
    title: str
    sides: list[Side]            # first is the baseline
    keys: list[str]
    cores: list[int]
    blocks: list[Block]
    experiment: StoredExperiment | None = None
    confidence: float = stats.DEFAULT_CONFIDENCE
    templates: dict[str, dict[str, str]] = field(default_factory=dict)  # key -> variant -> benchmark
    alpha: float = stats.DEFAULT_ALPHA
    ops: dict[str, str] = field(default_factory=dict)   # benchmark -> what one operation is (the catalogue's op)
    same_within: float = DEFAULT_SAME_WITHIN            # percent: the "same" verdict's bound

    @property
    def baseline(self) -> Side:
        return self.sides[0]

    def samples_of(self, key: str) -> list[tuple[Side, Sample]]:
        return [(s, smp) for s in self.sides for c in self.cores if (smp := s.samples.get((key, c))) is not None]

    def name(self, key: str) -> str:
        """A column's plain name: a template's placeholders left out (``gups.{pages}`` -> ``gups``),
        unless that would give two columns one name."""
        plain = _PLACEHOLDER.sub("", key) or key
        return key if any(k != key and (_PLACEHOLDER.sub("", k) or k) == plain for k in self.keys) else plain

    def op(self, key: str) -> str:
        """What one operation of the column's unit is ("4 KB page"), when every benchmark in it agrees."""
        ops = {self.ops.get(smp.benchmark, "") for _, smp in self.samples_of(key)}
        return ops.pop() if len(ops) == 1 else ""

    def counted(self, key: str) -> bool:
        """Whether the column was measured in deterministic guests only (virtual ns: one per instruction)."""
        sides = [s for s, _ in self.samples_of(key)]
        return bool(sides) and all(s.facts.get("deterministic") for s in sides)

    def side(self, label: str) -> Side:
        return next(s for s in self.sides if s.label == label)


def method_text(confidence: float = stats.DEFAULT_CONFIDENCE, alpha: float = stats.DEFAULT_ALPHA,
                same_within: float = DEFAULT_SAME_WITHIN) -> str:
    return (stats.PAIRED_METHOD.format(c=confidence, m=MIN_REPS) + "; variants measured in separate rounds: "
            + stats.nested_method_text(confidence) + "; " + modemod.METHOD
            + f"; significant = Benjamini-Hochberg q <= {alpha:g} over the "
            f"cells of each table, so on a table where nothing changed any cell is marked with probability "
            f"at most {alpha:.0%}; " + stats.DETECTABLE_METHOD.format(pw=stats.POWER, a=1 - confidence)
            + f"; verdict: different (significant), same (the interval lies inside +-{same_within:g}%), "
            f"unknown (neither: more repetitions needed)")


def compare_cell(key: str, cores: int, a: Sample | None, b: Sample | None, *,
                 confidence: float = stats.DEFAULT_CONFIDENCE, paired: bool = False) -> CellChange:
    """The change of one column at one core count, B against A (significance is decided per table).

    ``paired``: the two sides were measured in the same rounds (an experiment's variants), so their
    repetitions are paired by round (:func:`kperfdiff.core.stats.paired_change`) when at least MIN_REPS
    rounds are on both sides. When either side has several modes, the two are compared within their
    modes (:func:`kperfdiff.core.modes.within_modes_change`), or not at all when the modes do not line
    up; separate runs (a stored history) are compared with the drift between runs, or, with several
    modes, not at all (no drift estimate is made within modes)."""
    nan = math.nan
    ba = a.benchmark if a else ""
    bb = b.benchmark if b else ""
    disturbed = [f"{who}: {s.disturbed}" for s, who in ((a, "baseline"), (b, "variant")) if s and s.disturbed]

    def cell(base, new, ch, lo, hi, method, note="", p=nan):
        first = a or b
        return CellChange(key, cores, ba, bb, first.unit if first else None, first.better if first else None,
                          base, new, ch, lo, hi, False, method,
                          a.cv if a and a.status == "ok" else nan, b.cv if b and b.status == "ok" else nan,
                          len(a.reps) if a else 0, len(b.reps) if b else 0, note, p, nan, disturbed)

    for s, who in ((a, "baseline"), (b, "variant")):
        if s is None or s.status == "missing":
            return cell(_med(a), _med(b), nan, nan, nan, "", f"{who} not measured")
        if s.status != "ok" or not s.pooled:
            return cell(_med(a), _med(b), nan, nan, nan, "", f"{who} {s.status}" + (f": {s.reason}" if s.reason else ""))
    if a.unit != b.unit or a.better != b.better:
        return cell(_med(a), _med(b), nan, nan, nan, "", f"units differ ({a.unit} vs {b.unit})")
    ma, mb = a.modes, b.modes
    modal = ma.several or mb.several
    per_mode: list = []
    if a.history is not None and b.history is not None:
        if modal:
            out = cell(_med(a), _med(b), nan, nan, nan, "", "separate runs with several modes "
                       f"({_modes_words(ma, mb)}) are compared within their modes only inside one experiment "
                       "(kperfdiff run), where the rounds are interleaved: no percentage")
            return _with_modes(out, ma, mb, [])
        ch = stats.run_level_change(a.reps, b.reps, a.better, [a.history, b.history] if a.history is not b.history
                                    else [a.history], confidence=confidence)
        kind = "runs"
    elif modal:
        mc = modemod.within_modes_change(ma, mb, a.reps, b.reps, a.better,
                                         base_rounds=a.rounds if paired else None,
                                         new_rounds=b.rounds if paired else None, confidence=confidence)
        per_mode = [c.change if c is not None else None for c in mc.per_mode]
        if mc.change is None:
            out = cell(_med(a), _med(b), nan, nan, nan, "", f"{mc.reason}; {_share_words(ma, mb)}: no percentage")
            return _with_modes(out, ma, mb, per_mode)
        ch, kind = mc.change, "modes"
    else:
        ch = stats.change_in_rounds(a.reps, b.reps, a.better, base_rounds=a.rounds if paired else None,
                                    new_rounds=b.rounds if paired else None, confidence=confidence)
        kind = "paired" if ch.pairs else "nested"
    out = cell(ch.base, ch.new, ch.change, ch.low, ch.high, "" if math.isnan(ch.low) else kind, ch.reason, ch.p)
    out.runs, out.pairs = ch.runs, ch.pairs
    out.detectable = ch.detectable
    return _with_modes(out, ma, mb, per_mode)


def _with_modes(cell: CellChange, ma: modemod.Modes, mb: modemod.Modes, per_mode: list) -> CellChange:
    if ma.several or mb.several:
        cell.modes_base, cell.modes_new, cell.per_mode = ma.as_list(), mb.as_list(), per_mode
    return cell


def _modes_words(ma: modemod.Modes, mb: modemod.Modes) -> str:
    return f"baseline {modemod.describe(ma) or '1 mode'}; variant {modemod.describe(mb) or '1 mode'}"


def _share_words(ma: modemod.Modes, mb: modemod.Modes) -> str:
    """How the modes' proportions compare: the share of the first (fastest or lowest) mode per side."""
    if len(ma.centres) == len(mb.centres):
        return f"share of the lowest mode {ma.shares[0]:.0%} in the baseline, {mb.shares[0]:.0%} in the variant"
    return _modes_words(ma, mb)


def decide_verdicts(cells, same_within: float = DEFAULT_SAME_WITHIN) -> None:
    """Each tested cell's verdict, once its significance is known: *different* when significant,
    *same* when its interval lies inside +-``same_within`` percent, else *unknown*, with about how many
    repetitions per side would decide it: the interval's half-width shrinks as 1/sqrt(n), and it must
    come down to the larger of |change| (to be significant) and same_within - |change| (to be same)."""
    for c in cells:
        if math.isnan(c.change) or math.isnan(c.p):
            c.verdict = "unknown" if c.modes_base or c.modes_new else ""
            continue
        if c.significant:
            c.verdict = "different"
        elif c.low > -same_within and c.high < same_within:
            c.verdict = "same"
        else:
            c.verdict = "unknown"
            hw = stats.ratio_half_width(c.low, c.high)
            target = max(abs(c.change), same_within - abs(c.change))
            n = min(c.reps_base, c.reps_new)
            if hw > 0 and target > 0 and n:
                c.more_reps = max(n + 1, math.ceil(n * (hw / target) ** 2))


def _med(s: Sample | None) -> float:
    return s.centre if s is not None else math.nan


def control_false_discoveries(cells, alpha: float = stats.DEFAULT_ALPHA) -> int:
    """Mark the significant cells of one table (Benjamini-Hochberg over the cells with a test);
    returns how many cells were tested."""
    cells = list(cells)
    q, sig = stats.fdr_significant([c.p for c in cells], alpha=alpha)
    for c, qv, sg in zip(cells, q, sig):
        c.q = float(qv)
        c.significant = bool(sg)
    return int(sum(1 for c in cells if not math.isnan(c.p)))


def compare(sides: list[Side], pairs: list[tuple[str, str, str]], *, title: str = "",
            experiment: StoredExperiment | None = None, confidence: float = stats.DEFAULT_CONFIDENCE,
            templates: dict | None = None, alpha: float = stats.DEFAULT_ALPHA, paired: bool = False,
            same_within: float = DEFAULT_SAME_WITHIN) -> Comparison:
    """Compare sides: ``pairs`` are (variant, reference, kind) labels; ``paired``: the sides were
    measured in the same rounds (one experiment), so each cell pairs them by round."""
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
        cells = {(k, c): compare_cell(k, c, a.samples.get((k, c)), b.samples.get((k, c)), confidence=confidence,
                                      paired=paired)
                 for k in keys for c in cores
                 if (k, c) in a.samples or (k, c) in b.samples}
        tests = control_false_discoveries(cells.values(), alpha)
        decide_verdicts(cells.values(), same_within)
        gc = {c: stats.geometric_mean_change([x.change for (k, cc), x in cells.items() if cc == c]) for c in cores}
        gk = {k: stats.geometric_mean_change([x.change for (kk, c), x in cells.items() if kk == k]) for k in keys}
        g = stats.geometric_mean_change([x.change for x in cells.values()])
        blocks.append(Block(var, ref, kind, cells, gc, gk, g, tests))
    return Comparison(title=title, sides=sides, keys=keys, cores=cores, blocks=blocks, experiment=experiment,
                      confidence=confidence, templates=templates or {}, alpha=alpha, same_within=same_within)


# -- reading the store --------------------------------------------------------------

def _add_result(side: Side, r, key: str) -> None:
    k = (key, r.copies)
    s = side.samples.get(k)
    if s is None:
        s = side.samples[k] = Sample(benchmark=r.benchmark, unit=r.unit, better=r.better, status="missing")
    s.n_results += 1
    if unresolvable(s.reason) or (r.status != "ok" and unresolvable(r.reason)):
        # a repetition (an experiment's cell) whose latency could not be told from zero: the
        # others alone would give a number biased upwards, so the sample has none
        s.status, s.reason = "failed", s.reason if unresolvable(s.reason) else r.reason
        return
    if r.status == "ok":
        by_rep = r.repetitions
        s.reps.extend(by_rep.values())
        s.rounds.extend(by_rep)      # an experiment's cell holds one repetition, numbered by its round
        s.status = "ok"
        s.reason = None
        s.unit, s.better, s.params = r.unit, r.better, r.params
        monitors.add(s.monitors, r.monitors or {})
        s.monitors["_reps"] = s.monitors.get("_reps", 0) + len(by_rep)
        first = len(s.reps) - len(by_rep)       # repetitions are numbered across results
        order = {rep: i for i, rep in enumerate(by_rep)}
        s.noise.extend({**n, "rep": first + order.get(n.get("rep"), 0)} for n in r.noise)
        if r.stop:
            s.stop = r.stop
    elif s.status != "ok":
        s.status = r.status
        s.reason = r.reason


def _side_from_runs(store, label: str, runs, profiles: bool = True) -> Side:
    """One side from its runs: their results, and with ``profiles`` their stored profiles (a
    report diffs them; a comparison table has no use for them)."""
    facts = store.machine(runs[0].machine_id).facts if runs else {}
    side = Side(label=label, run_ids=[r.id for r in runs], facts=facts,
                emulated=any(store.machine(r.machine_id).emulated for r in runs))
    for run in runs:
        results = store.results(run.id)
        for name, r in zip(result_names(results), results):
            _add_result(side, r, r.bench_key or name)
        for p in store.primary_profiles(run.id) if profiles else []:
            copies = p.meta.get("copies", 1)
            side.profiles.setdefault((p.benchmark, copies), []).append(p)
    return side


def from_experiment(store, ref: str, *, profiles: bool = True, same_within: float = DEFAULT_SAME_WITHIN
                    ) -> Comparison:
    exp = store.find_experiment(ref)
    spec = exp.spec
    runs = store.experiment_runs(exp.id)
    by_variant = {}
    for r in runs:
        by_variant.setdefault(r.variant, []).append(r)
    labels = [v["label"] for v in spec.get("variants", [])]
    if not any(by_variant.get(lab) for lab in labels):
        raise InputError(f"experiment {exp.name} (id {exp.id}) has no results yet; run it with "
                         f"kperfdiff run {exp.path or 'FILE'}")
    base = spec.get("baseline", labels[0])
    order = [base] + [lab for lab in labels if lab != base]
    sides = [_side_from_runs(store, lab, by_variant.get(lab, []), profiles) for lab in order]
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
    state = exp.state
    if state == "running" and not store.experiment_owner_alive(exp) and exp.pid != os.getpid():
        state = "interrupted"
    title = f"experiment {exp.name} (id {exp.id}, {state})"
    return compare(sides, pairs, title=title, experiment=exp, templates=templates, paired=True,
                   same_within=same_within)


def _attach_run_history(store, sides: list[Side]) -> None:
    """Separate runs: give every sample the stored runs of its benchmark on its machine (one list
    per machine, shared by the samples of that machine), for the run-level interval: only the runs
    of MIN_REPS repetitions or more, the ones it counts. A sample of fewer than MIN_REPS repetitions
    gets none: its cell has no interval, so the history would go unread. Every history is read in
    one go (not one query per cell: to a PostgreSQL server on the network, each is a round trip)."""
    wanted: dict[tuple, list] = {}
    for side in sides:
        for (_key, copies), smp in side.samples.items():
            if smp.status != "ok" or len(smp.reps) < MIN_REPS:
                continue
            k = (smp.machine_id, smp.benchmark, json.dumps(smp.params, sort_keys=True), copies)
            wanted.setdefault(k, []).append(smp)
    for k, history in store.run_histories(list(wanted), min_reps=MIN_REPS).items():
        for smp in wanted[k]:
            smp.history = history


def from_runs(store, refs: list[str], *, stack: bool = False, profiles: bool = True,
              same_within: float = DEFAULT_SAME_WITHIN) -> Comparison:
    """Runs compared side by side (the first is the baseline). Runs that each stand alone are judged
    with the drift between runs; runs that all belong to one experiment were interleaved there, so
    they get the experiment's own interval, the same as ``compare --experiment`` gives its variants."""
    if len(refs) < 2:
        raise InputError("compare needs at least two runs (the first is the baseline), or --experiment")
    runs = [store.find_run(r) for r in refs]
    exp_ids = {store.run_experiment_id(r.id) for r in runs}
    exp = store.get_experiment(exp_ids.pop()) if len(exp_ids) == 1 and None not in exp_ids else None
    seen: dict[str, int] = {}
    sides = []
    for run in runs:
        label = run.label or run.variant or f"run {run.id}"
        if label in seen or any(s.label == label for s in sides):
            label = f"{label} (run {run.id})"
        seen[label] = run.id
        sides.append(_side_from_runs(store, label, [run], profiles))
        for smp in sides[-1].samples.values():
            smp.machine_id = run.machine_id
    if exp is None:
        _attach_run_history(store, sides)
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
    if exp is not None:
        title += f" (interleaved in experiment {exp.name}, id {exp.id}: its interval, no drift between runs)"
    return compare(sides, pairs, title=title, experiment=exp, templates=templates, paired=exp is not None,
                   same_within=same_within)


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


# -- the regression gate (kperfdiff compare --fail-on-regression) ----------------------

FAIL, PASS, SKIP, UNJUDGED = "fail", "pass", "skip", "unjudged"


@dataclass
class Verdict:
    """What the gate made of one cell of one table (variant against reference)."""

    variant: str
    reference: str
    kind: str                    # "baseline" or "previous"
    cell: CellChange
    params: dict
    outcome: str                 # FAIL, PASS, UNJUDGED (could not be judged) or SKIP (set aside: --skip-disturbed)
    reason: str


@dataclass
class Gate:
    """The verdicts of :func:`gate` over every cell of every table of a comparison. It fails closed:
    a cell it could not judge fails it unless ``allow_unjudged``, and a gate that judged no cell
    never passes."""

    threshold: float | None      # percent: a slowdown must be worse than -threshold to trip; None: no gate
    skip_disturbed: bool
    verdicts: list[Verdict]
    allow_unjudged: bool = False

    def with_outcome(self, outcome: str) -> list[Verdict]:
        return [v for v in self.verdicts if v.outcome == outcome]

    @property
    def judged(self) -> int:
        """How many cells were judged (tripped it or passed)."""
        return len(self.with_outcome(FAIL)) + len(self.with_outcome(PASS))

    @property
    def exit_status(self) -> int:
        if self.with_outcome(FAIL) or not self.judged:
            return 1
        return 1 if self.with_outcome(UNJUDGED) and not self.allow_unjudged else 0


def judge(cell: CellChange, threshold: float, *, skip_disturbed: bool = False) -> tuple[str, str]:
    """The gate's verdict on one cell, and why. A cell trips it (FAIL) only when it is marked
    significant (the table's Benjamini-Hochberg test, as the comparison marks it) and its change is
    a slowdown beyond ``threshold`` percent (the change is signed so that negative is worse, for
    times and for throughputs alike). A cell with no test (a side missing or failed, too few
    repetitions, no drift estimate, modes that do not line up) could not be judged (UNJUDGED), and
    neither could a cell not significant whose detectable change is above ``threshold``: it would
    have passed a slowdown of ``threshold`` percent unseen (a threshold of 0 asks for significance alone:
    no test can see a change of 0%). A cell measured while the machine
    was disturbed trips it like any other, its reason saying so (its interval already holds the noise
    it saw); with ``skip_disturbed`` it is set aside instead (SKIP), for shops that would rather rerun."""
    if math.isnan(cell.change):
        return UNJUDGED, cell.note or "not measured on both sides"
    if math.isnan(cell.p):
        return UNJUDGED, cell.note or "no interval, so no test"
    if not cell.significant and threshold > 0 and cell.detectable > threshold:
        return UNJUDGED, (f"could not have seen a {threshold:g}% slowdown: the smallest change it could detect is "
                          f"{cell.detectable:.1f}% ({stats.POWER:.0%} power)"
                          + (f"; about {cell.more_reps} repetitions per side would decide it" if cell.more_reps
                             else ""))
    if cell.change >= 0:
        return PASS, "no slowdown"
    if not cell.significant:
        return PASS, f"slowdown not significant (q = {cell.q:.3g} > the table's alpha)"
    if cell.change >= -threshold:
        return PASS, f"significant slowdown within the {threshold:g}% allowed"
    if cell.disturbed and skip_disturbed:
        return SKIP, (f"significant slowdown beyond {threshold:g}%, but measured while the machine was disturbed "
                      f"({'; '.join(cell.disturbed)}) and --skip-disturbed was given")
    if cell.disturbed:
        return FAIL, (f"significant slowdown beyond {threshold:g}%, measured while the machine was disturbed "
                      f"({'; '.join(cell.disturbed)})")
    return FAIL, f"significant slowdown beyond {threshold:g}%"


def gate(cmp: Comparison, threshold: float | None, *, skip_disturbed: bool = False,
         allow_unjudged: bool = False) -> Gate:
    """Judge every cell of every table of ``cmp`` (each variant against the baseline, and against
    the previous variant of a patch stack). With no ``threshold`` nothing is judged: every cell
    passes (what JUnit output says when no gate was asked for)."""
    verdicts = []
    for blk in cmp.blocks:
        ref = cmp.side(blk.reference)
        for (key, cores), cell in blk.cells.items():
            smp = ref.samples.get((key, cores)) or cmp.side(blk.variant).samples.get((key, cores))
            outcome, reason = judge(cell, threshold, skip_disturbed=skip_disturbed) if threshold is not None \
                else (PASS, "no threshold given (--fail-on-regression), so not judged")
            verdicts.append(Verdict(blk.variant, blk.reference, blk.kind, cell, dict(smp.params) if smp else {},
                                    outcome, reason))
    return Gate(threshold, skip_disturbed, verdicts, allow_unjudged)
