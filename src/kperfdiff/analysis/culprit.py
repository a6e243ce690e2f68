"""A culprit explained: the ranking of culprit against parent (``kperfdiff diff`` of their runs' profiles,
per operation: the functions whose cost moved), with the kernel counters that moved, as ``kperfdiff
bisect`` prints it and ``kperfdiff watch`` keeps it with a change point.

The profiles come through ``lookup_for(event)``, a function from a run reference (``RUN:BENCH``) to its
repetitions' profiles (:meth:`kperfdiff.store.Store.profile_lookup`); the counters are the caller's
(:func:`kperfdiff.bisect.counters.against_parent`). :func:`top_functions` is the ranking's head as plain
data, for a store or a feed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from kperfdiff.analysis.profile_diff import DiffOptions, DiffResult, add_folded, diff_profiles
from kperfdiff.core.errors import KperfdiffError
from kperfdiff.ingest.load import load_sides


@dataclass
class Explanation:
    """Culprit against parent: the ranking (a DiffResult), the kernel counters that moved, and why
    there is none when there is none."""

    diff: DiffResult | None = None
    command: str = ""
    counters: list[tuple[str, float, float]] = field(default_factory=list)   # (name, parent, culprit) per op
    # counters left out of ``counters``: the same count per repetition in parent and culprit, so per
    # operation they moved only with the operations per repetition (culprit's over parent's: ops_ratio)
    counters_left_out: list[str] = field(default_factory=list)
    ops_ratio: float = math.nan
    unit: str = ""
    error: str = ""


def run_refs(runs: list[int], bench: str, cores: int) -> str:
    """``R1:BENCH[@CORES],R2:...``: the runs' profiles of the benchmark, as ``kperfdiff diff`` takes them."""
    at = f"@{cores}" if cores > 1 else ""
    return ",".join(f"{rid}:{bench}{at}" for rid in runs)


def explain(lookup_for, parent_runs: list[int], culprit_runs: list[int], bench: str, cores: int, metric: str,
            top: int, moved=None, unprofiled: str = "") -> Explanation:
    """The ranking of the culprit's runs against its parent's (exact instruction counts' profiles with
    ``metric`` instructions, else the sampled ones), ``top`` rows a section; ``moved``: the counters'
    :class:`kperfdiff.bisect.counters.Changes`; ``unprofiled``: why no profile was taken, if none was."""
    a, b = run_refs(parent_runs, bench, cores), run_refs(culprit_runs, bench, cores)
    event = "instructions" if metric == "instructions" else None
    ex = Explanation(command=f"kperfdiff diff {a} {b} --per-op" + (" --event instructions" if event else "")
                     + f" --top {top}  (parent against culprit)")
    if moved is not None:
        ex.counters, ex.counters_left_out, ex.ops_ratio = moved.moved, moved.only_ops, moved.ops_ratio
    if unprofiled:
        ex.error = unprofiled
        return ex
    try:
        side_a, side_b = load_sides([a, b], lookup_for(event), kallsyms=[None, None], symfs=[None, None],
                                    event=event)
        ex.diff = diff_profiles(side_a, side_b, DiffOptions(top=top, per_op=True, labels=("parent", "culprit")))
        add_folded(ex.diff, side_a, side_b)
    except KperfdiffError as e:
        ex.error = f"no ranking: {e}"
    return ex


def top_functions(ex: Explanation) -> dict:
    """The explanation as plain data: the ranking's head (each function's cost per operation in parent
    and culprit, common functions first in the ranking's order, then those of one side only), the
    counters that moved, and the command that shows the whole ranking."""
    rows = []
    if ex.diff is not None:
        n = ex.diff.options.top or None
        for section, found in (("common", ex.diff.common), ("culprit only", ex.diff.only_b),
                               ("parent only", ex.diff.only_a)):
            rows += [{"symbol": r.symbol, "section": section, "parent": _finite(r.value_a),
                      "culprit": _finite(r.value_b), "change": _finite(r.delta)} for r in found[:n]]
    return {"command": ex.command.split("  (")[0], "error": ex.error or None,
            "unit": ex.diff.unit if ex.diff is not None else None, "functions": rows,
            "counters": [{"name": k, "parent": _finite(a), "culprit": _finite(b)} for k, a, b in ex.counters]}


def _finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None
