"""What a study is, and the pieces its kinds write their sections with: the [study] table of a
study file, the verdicts, a report section, and the texts of centres and changes."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from kperfdiff.analysis.bench_compare import from_experiment
from kperfdiff.bench.catalogue import operations
from kperfdiff.core import stats
from kperfdiff.core.errors import InputError
from kperfdiff.experiments import file as exp_file
from kperfdiff.render.svgplot import unit_title
from kperfdiff.render.table import Table

STUDY_KEYS = {"kind", "title", "source", "measured", "found", "differs"}
VERDICTS = ("yes", "partly", "no", "unknown")


@dataclass
class Study:
    """The [study] table of a study file."""
    kind: str
    title: str
    source: str = ""
    measured: str = ""
    found: str = ""
    differs: list[str] = field(default_factory=list)


@dataclass
class Verdict:
    """Does kperfdiff's result agree with the study's? ``agrees`` is one of VERDICTS."""
    agrees: str
    text: str

    def __post_init__(self):
        if self.agrees not in VERDICTS:
            raise ValueError(f"a verdict is one of {', '.join(VERDICTS)}, not {self.agrees!r}")


@dataclass
class Section:
    """One study's part of the report."""
    study: Study
    experiment: str                       # the experiment's name in the store
    paragraphs: list[str] = field(default_factory=list)    # what kperfdiff measured here
    tables: list[Table] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)       # inline SVG
    diffs: list = field(default_factory=list)              # report.ProfileDiff: kperfdiff rankings shown
    direction: Verdict = field(default_factory=lambda: Verdict("unknown", "not measured yet"))
    mechanism: Verdict = field(default_factory=lambda: Verdict("unknown", "not measured yet"))
    differs: list[str] = field(default_factory=list)       # found at run time, after the study's own
    emulated: bool = False
    complete: bool = True                 # False while cells are missing or failed
    file: str = ""


def study_of(exp: exp_file.Experiment, kinds=None) -> Study:
    """The checked [study] table of an experiment; one sentence when it is missing or wrong.
    ``kinds``: the kind names accepted (the package's table of kinds); None when the caller is
    a kind's own module, which the package chose by that kind."""
    raw = exp.study
    if not raw:
        raise InputError(f"{exp.path}: has no [study] table, so it is an experiment file and not a study")
    unknown = sorted(set(raw) - STUDY_KEYS)
    if unknown:
        raise InputError(f"{exp.path}: study.{unknown[0]} is not a study field (known: {', '.join(sorted(STUDY_KEYS))})")
    kind = raw.get("kind")
    if kinds is not None and kind not in kinds:
        raise InputError(f"{exp.path}: study.kind must be one of {', '.join(kinds)}, not {kind!r}")
    for k in ("title", "source", "measured", "found", "kind"):
        if isinstance(raw.get(k, ""), list):
            raise InputError(f"{exp.path}: study.{k} must be a string, not a list")
    differs = raw.get("differs", [])
    if isinstance(differs, str):
        differs = [differs]
    return Study(kind=kind, title=raw.get("title") or exp.name, source=raw.get("source", ""),
                 measured=raw.get("measured", ""), found=raw.get("found", ""), differs=list(differs))


# -- helpers the kinds share --------------------------------------------------------

def comparison(store, exp: exp_file.Experiment):
    """The comparison of the study's experiment (every variant vs its baseline, and its stack)."""
    return from_experiment(store, exp.name)


def centre_text(sample, digits: int = 3, *, per: float = 1.0, unit: str | None = None) -> str:
    """A side's centre (geometric mean of the repetitions' medians) with its 95% interval, which is
    symmetric in logarithms: ``0.00553 [0.00541, 0.00565] GUP/s (5 reps)``; ``per`` divides the
    centre and its interval (ns per page of a loop), ``unit`` then names what they are."""
    if sample is None or sample.status != "ok" or not sample.pooled:
        return "not measured" if sample is None else f"{sample.status}" + (f": {sample.reason}" if sample.reason else "")
    c = sample.centre / per
    hw = stats.centre_half_width(sample.reps)
    unit = unit or unit_title(sample.unit, operations().get(sample.benchmark, ""))
    f = 1 + hw / 100
    body = _sig(c, digits) + ("" if math.isnan(hw) else f" [{_sig(c / f, digits)}, {_sig(c * f, digits)}]")
    return f"{body}{f' {unit}' if unit else ''} ({len(sample.reps)} reps)"


def change_text(c) -> str:
    """A cell change: ``+49.8% [+47.1, +52.6], significant`` (positive = better)."""
    if c is None or math.isnan(c.change):
        return "no comparison" + (f" ({c.note})" if c is not None and c.note else "")
    ci = "" if math.isnan(c.low) else f" [{c.low:+.1f}, {c.high:+.1f}]"
    return f"{c.change:+.1f}%{ci}" + (", significant" if c.significant else ", not significant")


def _sig(v: float, digits: int) -> str:
    if v == 0 or math.isnan(v) or math.isinf(v):
        return str(v)
    mag = math.floor(math.log10(abs(v)))
    dec = max(0, digits - 1 - mag)
    return f"{v:,.{dec}f}"


def cell(cmp, variant: str, key: str, cores: int):
    """The CellChange of ``variant`` against its reference for a column, or None."""
    for blk in cmp.blocks:
        if blk.variant == variant:
            return blk.cells.get((key, cores))
    return None


def sample(cmp, variant: str, key: str, cores: int):
    """A side's Sample of a column (its ``benchmark`` is the one that variant ran for it), or None."""
    return cmp.side(variant).samples.get((key, cores))
