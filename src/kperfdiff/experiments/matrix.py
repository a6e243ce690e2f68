"""The matrix of an experiment: variants x benchmarks x core counts x repetitions, as cells in the
order they are run (:func:`matrix`), and the plan ``run --dry-run`` shows (:func:`plan`).

* **Cells.** A cell is one variant x benchmark x core count x repetition,
  measured by one fresh set of worker processes and stored at once as its own
  result row with a unique key in the experiment. A benchmark name with
  ``{var}`` placeholders is one *column*: each variant runs the benchmark its
  ``vars`` name (``gups.{pages}`` is gups.4k in one variant and gups.huge in
  another), so they are compared with each other.
* **Order.** Repetition is the outermost loop; inside it every benchmark and
  core count is measured for every variant back to back, and the order of the
  variants is rotated from one cell to the next (A B, B A, A B ...), so slow
  drift of the machine (heat, memory fragmentation, background work) hits
  every variant alike and no variant always goes first. A variant on a guest
  or board measures all its cells of one repetition in one job (one boot of
  the guest), still alternating with the other variants repetition by
  repetition; its machine facts come from the target after the first job.
  The jobs of variants on LAVA targets (one per variant and repetition) are
  submitted together and run in parallel on the lab's devices
  (:mod:`kperfdiff.experiments.lava`).
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from kperfdiff.bench import catalogue
from kperfdiff.core import limits
from kperfdiff.core.errors import KperfdiffError
from kperfdiff.experiments.file import Experiment, Variant, field_error, placeholders
from kperfdiff.measure.session import parse_param_overrides
from kperfdiff.targets.boot import ALL_BOOT_BENCHMARKS


@dataclass(frozen=True)
class Cell:
    variant: str
    key: str          # column: the benchmark entry (a name, or a template like gups.{pages})
    benchmark: str    # the benchmark this variant runs for that column
    cores: int
    rep: int

    @property
    def id(self) -> str:
        return f"{self.variant}|{self.key}|P{self.cores}|r{self.rep}"


def resolve(exp: Experiment) -> dict[str, list[tuple[str, object]]]:
    """variant label -> [(column key, Benchmark)], in the file's order.

    A plain entry (name, pattern or family) gives one column per benchmark it
    matches; an entry with ``{placeholders}`` is one column whose benchmark
    each variant names through its ``vars`` (it must name exactly one).
    """
    out: dict[str, list[tuple[str, object]]] = {}
    for v in exp.variants:
        cols: list[tuple[str, object]] = []
        for entry in exp.benchmarks:
            templated = bool(placeholders(entry))
            name = entry.format(**v.vars) if templated else entry
            try:
                hits = catalogue.select("full", name)
            except KperfdiffError:
                hits = _boot_benchmarks(exp, name, v)    # boot.*: a guest's boot, at the target's mem=
                if not hits:
                    raise field_error(exp.path, "benchmarks", f"entry {entry!r} ({name!r} for variant {v.label!r}) matches "
                                                       f"no benchmark; see kperfdiff bench --list") from None
            if templated:
                if len(hits) != 1:
                    raise field_error(exp.path, "benchmarks", f"entry {entry!r} must name exactly one benchmark per "
                                                       f"variant, but {name!r} matches {len(hits)}")
                cols.append((entry, hits[0]))
            else:
                cols.extend((h.name, h) for h in hits)
        keys = [k for k, _ in cols]
        dup = next((k for k in keys if keys.count(k) > 1), None)
        if dup:
            raise field_error(exp.path, "benchmarks", f"name {dup} twice (two entries match it)")
        out[v.label] = cols
    first = [k for k, _ in out[exp.variants[0].label]]
    for v in exp.variants[1:]:
        if [k for k, _ in out[v.label]] != first:
            raise field_error(exp.path, "benchmarks", f"resolve to different columns for variant {v.label!r}")
    return out


def _boot_benchmarks(exp: Experiment, name: str, v: Variant) -> list:
    """The boot.* benchmarks (targets/boot.py) a name or pattern matches; they run on guest targets only,
    one boot per memory size (the variant's target says mem=)."""
    hits = [b for b in ALL_BOOT_BENCHMARKS if fnmatch.fnmatchcase(b.name, name) or b.family == name]
    if hits and not v.target.startswith("qemu:"):
        raise field_error(exp.path, f"variant {v.label!r}.target",
                   f"must be a qemu guest for the boot benchmarks ({name}), not {v.target!r}")
    return hits


def cells(exp: Experiment, columns: dict[str, list[tuple[str, object]]]) -> list[Cell]:
    """Every cell in run order: repetition outermost, variants interleaved and rotated."""
    labels = [v.label for v in exp.variants]
    n = len(labels) * len(columns[labels[0]]) * len(exp.cores) * exp.reps
    if n > limits.MAX_CELLS:
        raise field_error(exp.path, "reps", f"x variants x benchmarks x cores make {n} cells, more than the "
                                     f"{limits.MAX_CELLS} one experiment may have")
    out = []
    slot = 0
    for rep in range(exp.reps):
        for i, (key, _) in enumerate(columns[labels[0]]):
            for cores in exp.cores:
                k = slot % len(labels)
                for label in labels[k:] + labels[:k]:
                    bench = dict(columns[label])[key]
                    out.append(Cell(label, key, bench.name, cores, rep))
                slot += 1
    return out


def variant_params(exp: Experiment, v: Variant, benches: list) -> dict[str, dict[str, str]]:
    """Per-benchmark parameter overrides of one variant: the experiment's, then the variant's own.

    An override that applies to none of this variant's benchmarks (it names
    another variant's benchmark) is left out here; :func:`check_params`
    rejects one that applies to no benchmark of the experiment at all.
    """
    out: dict[str, dict[str, str]] = {}
    for table in (exp.params, v.params):
        for k, val in table.items():
            try:
                ov = parse_param_overrides([f"{k}={val}"], benches)
            except KperfdiffError:
                continue
            for b, kv in ov.items():
                out.setdefault(b, {}).update(kv)
    return out


def benchmarks_by_name(columns) -> dict:
    """Every benchmark of the experiment's columns (any variant), by name."""
    return {b.name: b for cols in columns.values() for _, b in cols}


def check_params(exp: Experiment, columns) -> dict[str, dict[str, dict[str, str]]]:
    """variant -> benchmark -> overrides; an override that applies to no benchmark of the experiment is an error."""
    allb = benchmarks_by_name(columns)
    for where, table in [("params", exp.params)] + [(f"variant {v.label!r}.params", v.params)
                                                     for v in exp.variants]:
        for k, val in table.items():
            try:
                parse_param_overrides([f"{k}={val}"], list(allb.values()))
            except KperfdiffError:
                raise field_error(exp.path, f"{where} key {k!r}", "applies to no benchmark of the experiment "
                                                          "(or that benchmark has no such parameter)") from None
    return {v.label: variant_params(exp, v, [b for _, b in columns[v.label]]) for v in exp.variants}


@dataclass
class Matrix:
    """An experiment's matrix, resolved and checked (:func:`matrix`)."""

    columns: dict[str, list[tuple[str, object]]]        # variant -> its benchmark columns (:func:`resolve`)
    overrides: dict[str, dict[str, dict[str, str]]]     # variant -> benchmark -> parameters (:func:`check_params`)
    cells: list[Cell]                                   # every cell (:func:`cells`)
    bench_by_name: dict                                 # every benchmark of the columns, by name


def matrix(exp: Experiment) -> Matrix:
    """What running ``exp`` measures: its columns and cells, its parameter overrides checked."""
    columns = resolve(exp)
    overrides = check_params(exp, columns)
    return Matrix(columns, overrides, cells(exp, columns), benchmarks_by_name(columns))


def plan(exp: Experiment) -> dict:
    """What ``run`` would do, without touching the machine: columns and cells."""
    m = matrix(exp)
    return {"name": exp.name, "hash": exp.file_hash(), "variants": [v.label for v in exp.variants],
            "baseline": exp.baseline, "stack": exp.stack,
            "columns": {label: [(k, b.name) for k, b in cols] for label, cols in m.columns.items()},
            "cores": exp.cores, "reps": exp.reps, "cells": len(m.cells), "comparisons": exp.comparisons()}


def describe_plan(pl: dict) -> str:
    out = [f"experiment {pl['name']} (hash {pl['hash']}): {pl['cells']} cells = {len(pl['variants'])} variants x "
           f"{len(next(iter(pl['columns'].values())))} benchmarks x {len(pl['cores'])} core counts x "
           f"{pl['reps']} reps", f"baseline: {pl['baseline']}"]
    if pl["stack"]:
        out.append("patch stack: " + " -> ".join(pl["stack"]))
    for label, cols in pl["columns"].items():
        out.append(f"variant {label}: " + ", ".join(n if k == n else f"{k}={n}" for k, n in cols))
    out.append("comparisons: " + "; ".join(f"{a} vs {b}" for a, b, _ in pl["comparisons"]))
    return "\n".join(out) + "\n"
