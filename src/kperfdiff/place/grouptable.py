"""The TCM study's group-by-group table: each thesis group placed alone, on every benchmark.

The study built one kernel per group (fork, exec, schedule, buddy, page
fault, ...), with that group in the TCM, and ran lmbench on each: rows are
groups, columns benchmarks, cells the change. Here a column is one
benchmark's profile, and a cell is the change of that benchmark's kernel
instruction-fetch cycles when the row's functions are in fast memory, twice:
predicted by the cost model (:mod:`.model`, the benchmark's own Problem) and
simulated (:mod:`.simulate`, the benchmark's own reconstructed trace).

One placement per row, the same in every column (one kernel build per
group, as in the study):

* a group's placeable members are the functions its patterns match in the
  size file, less excluded code (entry, ``__init``, run-time patched);
* a group whose members fit the capacity (less the model's reserve) is
  placed whole, functions no benchmark ran included (they take room and
  change nothing);
* a group bigger than the capacity is **trimmed**: its hottest members (self
  cycles per byte over all benchmarks combined) up to the capacity, as the
  group method of ``place plan`` does; the row says how many of how many;
* the group method's best single group or pair of whole groups (the study's
  "combinations"), chosen on the combined profile;
* the exact optimiser's placement from all benchmarks combined (one kernel
  for every benchmark, each benchmark's kernel time weighing equally), and,
  as the bound of what placement can do, each benchmark's own exact placement
  (a different kernel per column).

Group rows are ranked by their mean simulated gain over the benchmarks (the
study ranked groups by their measured lmbench change; the simulator is the
nearest thing to a measurement here).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from kperfdiff.core.errors import InputError
from kperfdiff.ingest.profile import Profile, merge
from kperfdiff.place.inputs import Group, HwModel, SizeTable, match_any, resolve_group
from kperfdiff.place.model import Problem, build_problem, evaluate
from kperfdiff.place.optimise import by_groups, check_capacity, exact, hottest_fitting, usable_capacity
from kperfdiff.place.simulate import reconstruct, simulate_placements

COMBINED = "exact (all benchmarks)"
OWN = "exact (each benchmark its own)"
BEST = "best group or pair"


@dataclass
class Row:
    label: str
    kind: str                       # "group", "best", "exact", "own"
    placed: list[str]               # the functions in fast memory (kind "own": the first column's)
    placed_bytes: int
    members: int = 0                # a group's placeable members
    group_bytes: int = 0            # ... and their bytes
    trimmed: bool = False
    model: dict[str, float] = field(default_factory=dict)     # column -> predicted gain %
    sim: dict[str, float] = field(default_factory=dict)       # column -> simulated gain %
    note: str = ""

    def mean(self, which: str) -> float:
        vals = list(getattr(self, which).values())
        return float(np.mean(vals)) if vals else math.nan

    def as_dict(self) -> dict:
        return {"label": self.label, "kind": self.kind, "members": self.members, "group_bytes": self.group_bytes,
                "placed_bytes": self.placed_bytes, "trimmed": self.trimmed, "note": self.note,
                "functions": len(self.placed), "model_gain_pct": dict(self.model), "sim_gain_pct": dict(self.sim),
                "mean_model_gain_pct": self.mean("model"), "mean_sim_gain_pct": self.mean("sim")}


@dataclass
class GroupTable:
    columns: list[str]
    capacity: int
    usable: int
    hw_name: str
    fast_name: str
    groups: list[Row]               # ranked
    others: list[Row]               # best group/pair, exact combined, exact per benchmark
    notes: list[str] = field(default_factory=list)

    def row(self, label: str) -> Row | None:
        return next((r for r in self.groups + self.others if r.label == label), None)

    def as_dict(self) -> dict:
        return {"columns": self.columns, "capacity": self.capacity, "usable_bytes": self.usable,
                "hw_name": self.hw_name, "groups": [r.as_dict() for r in self.groups],
                "others": [r.as_dict() for r in self.others], "notes": list(self.notes)}


def scaled(profile: Profile, factor: float) -> Profile:
    """A copy of a profile with every weight multiplied by ``factor``."""
    return Profile(profile.source, profile.event, list(profile.symbols), profile.self_weight * factor,
                   profile.children_weight * factor, profile.total_weight * factor, profile.samples,
                   {k: w * factor for k, w in profile.stacks.items()},
                   {k: w * factor for k, w in profile.edges.items()}, profile.weight_unit, profile.label,
                   profile.arch, dict(profile.meta))


def combine(profiles: list[Profile]) -> Profile:
    """One profile of several benchmarks, each weighing equally: every profile's kernel
    self weight is scaled to the mean of theirs before they are added up."""
    if len(profiles) == 1:
        return profiles[0]
    kern = [p.kernel_weight for p in profiles]
    if any(k <= 0 for k in kern):
        bad = profiles[kern.index(min(kern))]
        raise InputError(f"{bad.source} holds no kernel samples, so it cannot be placed")
    mean = sum(kern) / len(kern)
    return merge([scaled(p, mean / k) for p, k in zip(profiles, kern)], "all benchmarks combined")


def group_members(group: Group, sizes: SizeTable, excludes: list[str]) -> list[str]:
    """The functions of a group that can be placed: in the size file, not excluded."""
    return [m for m in resolve_group(group, sizes.sizes)
            if m not in sizes.excluded and not (excludes and match_any(m, excludes))]


def group_placement(group: Group, sizes: SizeTable, hw: HwModel, excludes: list[str], combined: Problem,
                    cap: int) -> tuple[list[str], int, int, bool]:
    """(placed functions, members, their bytes, trimmed): the whole group when it fits the usable
    capacity ``cap``, else its hottest members on the combined profile up to it."""
    members = group_members(group, sizes, excludes)
    total = sum(hw.aligned(sizes.sizes[m]) for m in members)
    if total <= cap:
        return members, len(members), total, False
    ks = [combined.index[m] for m in members if m in combined.index]
    mask = hottest_fitting(combined, ks, cap)
    return [combined.names[k] for k in np.flatnonzero(mask)], len(members), total, True


def build(profiles: list[tuple[str, Profile]], sizes: SizeTable, hw: HwModel, capacity: int, *,
          groups: dict[str, Group], excludes: list[str] | None = None, fills: str = "measured",
          events: int = 20000, seed: int = 1, time_limit: float | None = 20.0, own: bool = True,
          atomic: list[str] | None = None, cycles_per_unit: float | None = None) -> GroupTable:
    """The group-by-group table of ``profiles`` (column label, profile) at ``capacity`` bytes."""
    if not profiles:
        raise InputError("the group table needs at least one profile")
    labels = [lab for lab, _ in profiles]
    if len(set(labels)) != len(labels):
        dup = next(lab for lab in labels if labels.count(lab) > 1)
        raise InputError(f"two profiles are both labelled {dup!r}; give each benchmark one profile")
    check_capacity(capacity)
    excludes = list(excludes or [])
    kw = dict(groups=groups, excludes=excludes, fills=fills, events=events, seed=seed, atomic=atomic,
              cycles_per_unit=cycles_per_unit)
    problems = {lab: build_problem(p, sizes, hw, **kw) for lab, p in profiles}
    combined = problems[labels[0]] if len(profiles) == 1 else \
        build_problem(combine([p for _, p in profiles]), sizes, hw, **kw)
    cap = usable_capacity(combined, capacity)

    rows: list[Row] = []
    for name, g in groups.items():
        placed, n, total, trimmed = group_placement(g, sizes, hw, excludes, combined, cap)
        note = "no member in this kernel" if not n else (
            f"trimmed: hottest {len(placed)} of {n} members" if trimmed else "")
        rows.append(Row(name, "group", placed, sum(hw.aligned(sizes.sizes[f]) for f in placed), n, total,
                        trimmed, note=note))
    others: list[Row] = []
    best = by_groups(combined, capacity)
    if best.label != "(none)":
        others.append(Row(BEST, "best", best.prediction.placed, best.prediction.bytes, note=best.label))
    ex = exact(combined, capacity, time_limit=time_limit)
    others.append(Row(COMBINED, "exact", ex.prediction.placed, ex.prediction.bytes,
                      note=f"gap {100 * ex.gap:.2f}%" if ex.gap is not None else ex.status))
    own_row = Row(OWN, "own", [], 0) if own and len(profiles) > 1 else None

    for lab, p in profiles:
        prob = problems[lab]
        trace = reconstruct(p, sizes, hw, events=events, seed=seed)
        configs = [(r, set(r.placed)) for r in rows + others if r.kind != "group" or r.members]
        if own_row is not None:
            mine = exact(prob, capacity, time_limit=time_limit)
            own_row.placed_bytes = max(own_row.placed_bytes, mine.prediction.bytes)
            if not own_row.placed:
                own_row.placed = mine.prediction.placed
            configs.append((own_row, set(mine.prediction.placed), mine.prediction.gain_pct))
        sims = simulate_placements(trace, sizes, hw, [(r.label, s) for r, s, *_ in configs]) if trace.steps else None
        base = sims[0].cycles if sims else 0.0
        for k, (r, s, *given) in enumerate(configs):
            r.model[lab] = given[0] if given else evaluate(prob, prob.mask(s)).gain_pct
            if base:
                r.sim[lab] = 100.0 * (base - sims[k + 1].cycles) / base
    if own_row is not None:
        own_row.note = "a different placement per column: the bound of placement"
        others.append(own_row)

    def key(r: Row):
        m = r.mean("sim")
        return (not r.members, -(m if not math.isnan(m) else r.mean("model")))
    rows.sort(key=key)
    notes = [combined.notes[0]] + [n for n in combined.notes[1:2]]
    notes.append(f"{hw.fast_name} of {capacity} bytes, {cap} usable ({hw.fast_reserve} kept for veneers)")
    notes.append("a cell is the change of the benchmark's kernel instruction-fetch cycles with the row's functions "
                 "in fast memory, in % (+ = fewer cycles): the cost model's prediction / the simulator's")
    notes.append("groups bigger than the fast memory are trimmed to their hottest functions (self cycles per "
                 "byte, all benchmarks combined) up to the capacity; groups ranked by mean simulated gain")
    return GroupTable(labels, capacity, cap, hw.name, hw.fast_name, rows, others, notes)
