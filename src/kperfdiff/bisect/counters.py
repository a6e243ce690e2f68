"""The kernel counters of culprit against parent, for a bisection's explanation: each counter per
operation (the results' monitors, system-wide deltas summed over the verification's runs, over the
operations those runs did), the ones that moved most, and the ones left out because they moved only
with the operation count.

A counter whose count per repetition is the same on both sides did not change with the kernel; per
operation it still moves when the number of operations in a repetition does. In a deterministic
guest (``--metric instructions``, QEMU's -icount) a repetition lasts the same virtual time, so a
culprit that costs more instructions per operation does fewer operations in it: every counter that
follows time (timer interrupts, the guest's own housekeeping) then shows the same change per
operation, the inverse of the change in operations (+2.08% for 2.04% fewer operations). Such a
counter says nothing about the culprit; it is left out of the table and named in a note. It is one
when its change per operation, at the precision the table shows it (hundredths of a percent), is
the one that the change in operations per repetition alone makes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

# counters worth a line in the explanation: per operation, the ones that moved most
SHOWN = 8
# a counter moved when its count per operation changed by this much (a fraction) or more
LEAST = 0.02


@dataclass
class Totals:
    """One side's counters summed over its runs' results of the benchmark, and what they count over."""
    ops: int = 0
    reps: int = 0
    counts: dict[str, float] = field(default_factory=dict)


@dataclass
class Changes:
    moved: list[tuple[str, float, float]]     # (name, parent, culprit) per operation, most moved first, SHOWN at most
    only_ops: list[str]                       # counters left out: the same count per repetition on both sides
    ops_ratio: float                          # the culprit's operations per repetition over the parent's (nan: unknown)


def side_totals(store, run_ids: list[int], bench: str, cores: int) -> Totals:
    """The counters of ``bench`` at ``cores`` copies in the runs ``run_ids``, summed: events counted
    over each result (vmstat's nr_* are levels, not events), its operations and its repetitions."""
    t = Totals()
    for run_id in run_ids:
        for r in store.results(run_id, with_raw=False):
            if r.benchmark == bench and r.copies == cores and r.ops:
                t.ops += r.ops
                t.reps += len({i.get("rep") for i in r.info if isinstance(i, dict)}) or 1
                for k, v in r.monitors.items():
                    if isinstance(v, (int, float)) and not k.startswith(("_", "vmstat.nr_")):
                        t.counts[k] = t.counts.get(k, 0) + v
    return t


def compare(parent: Totals, culprit: Totals, shown: int = SHOWN) -> Changes:
    """Parent against culprit, per operation: the counters that moved by ``LEAST`` or more, less those
    that moved only with the operations per repetition (:data:`Changes.only_ops`, every one named)."""
    if not (parent.ops and culprit.ops):
        return Changes([], [], math.nan)
    ops_ratio = (culprit.ops / culprit.reps) / (parent.ops / parent.reps)
    moved, only_ops = [], []
    for k in sorted(set(parent.counts) & set(culprit.counts)):
        a, b = parent.counts[k] / parent.ops, culprit.counts[k] / culprit.ops
        if not (a > 0 and b > 0 and abs(b / a - 1) >= LEAST):
            continue
        if shown_pct(b / a) == shown_pct(1 / ops_ratio):
            only_ops.append(k)
        else:
            moved.append((abs(b / a - 1), k, a, b))
    moved.sort(reverse=True)
    return Changes([(k, a, b) for _, k, a, b in moved[:shown]], only_ops, ops_ratio)


def against_parent(store, parent_runs: list[int], culprit_runs: list[int], bench: str, cores: int) -> Changes:
    """The counters of the culprit's runs against its parent's (:func:`compare` of their :func:`side_totals`)."""
    return compare(side_totals(store, parent_runs, bench, cores), side_totals(store, culprit_runs, bench, cores))


def shown_pct(ratio: float) -> float:
    """A ratio's change in percent, as the counter table shows it (two decimals)."""
    return round((ratio - 1) * 100, 2)
