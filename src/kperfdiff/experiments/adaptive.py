"""Adaptive repetition: after an experiment's matrix, more repetitions until every change's speed
ratio is known to the file's ``precision``, or every change could detect the file's ``detect`` percent
(or its ``max_time`` is spent)."""
from __future__ import annotations

import math

from kperfdiff.analysis import bench_compare as compare
from kperfdiff.bench import rounds
from kperfdiff.core import stats
from kperfdiff.experiments.file import Experiment
from kperfdiff.experiments.matrix import Cell


def policy(exp: Experiment) -> rounds.RepetitionPolicy:
    """The file's repetitions and its adaptive rule (``precision`` or ``detect``, ``max_time``)."""
    return rounds.RepetitionPolicy(reps=exp.reps, precision=exp.precision, max_time=exp.max_time, detect=exp.detect)


def _groups(store, exp: Experiment, eid: int, columns) -> list[tuple[str, int]]:
    """The (column, core count) groups that may get more repetitions: those not already ended (a run that
    finished, or a rerun of a complete one, measures no more)."""
    ended = store.cell_stops(eid)
    return [(key, cores) for key, _ in columns[exp.variants[0].label] for cores in exp.cores
            if (key, cores) not in ended]


def expect(store, exp: Experiment, eid: int, columns, progress) -> None:
    """Tell ``progress`` what the adaptive phase after the matrix can take at most (its estimate counts it):
    rounds of every group's cells of every variant, up to the repetition limit, none started after
    ``max_time`` from the phase's start."""
    groups = _groups(store, exp, eid, columns)
    if groups and (exp.precision or exp.detect):
        pol = policy(exp)
        progress.expect_adaptive(len(groups) * len(exp.variants), rounds=max(0, pol.max_reps - exp.reps),
                                 seconds=pol.time_limit)


def group_name(exp: Experiment, columns, key: str) -> str:
    """A column as the benchmarks its variants run: ``proc.fork``, or for a template (``gups.{pages}``) each
    variant's plain benchmark, ``gups.4k/gups.huge``; never the template's placeholders."""
    names = list(dict.fromkeys(dict(columns[v.label])[key].name for v in exp.variants))
    return "/".join(names)


def repeat_until_precise(store, exp: Experiment, eid: int, columns, measure_cells, progress, log) -> dict:
    """After the matrix: more repetitions of the (column, core count) groups whose changes are not
    yet known to +-``exp.precision`` percent of their speed ratio (:func:`kperfdiff.core.stats.ratio_half_width`
    of the 95% interval), or, with ``exp.detect``, whose changes could not yet detect that percent (the cell's
    detectable change, at 80% power, as compare states it), one round of every such group at a time, all variants
    interleaved and rotated (:func:`kperfdiff.bench.rounds.run_rounds`). Returns why each group stopped."""
    labels = [v.label for v in exp.variants]
    groups = _groups(store, exp, eid, columns)

    def cells_of(g, r: int) -> list[Cell]:
        key, cores = g
        return [Cell(label, key, dict(columns[label])[key].name, cores, r)
                for label in rounds.rotated(labels, r + groups.index(g))]

    def measure_round(order, r):
        states = store.cell_states(eid)
        batch = [c for g in order for c in cells_of(g, r) if states.get(c.id) not in ("ok", "skipped")]
        progress.adaptive_round(len(batch))
        measure_cells(batch)
        states = store.cell_states(eid)
        return {g for g in order if any(states.get(c.id) != "ok" for c in cells_of(g, r))}

    def half_widths(gs):
        cmp = compare.from_experiment(store, str(eid))
        out = {}
        for g in gs:
            hw = [stats.ratio_half_width(x.low, x.high) if exp.detect is None else x.detectable
                  for blk in cmp.blocks for k, x in blk.cells.items() if k == g]
            out[g] = max(hw) if hw and not any(math.isnan(h) for h in hw) else math.nan
        return out

    pol = policy(exp)
    progress.set_time_limit(pol.time_limit)
    why = rounds.run_rounds(groups, measure_round, half_widths, pol, first=exp.reps) if groups else {}
    progress.close()        # the bar's line cleared before the notes below
    for (key, cores), text in why.items():
        log(f"kperfdiff: {group_name(exp, columns, key)} -P {cores}: {text}")
    return why
