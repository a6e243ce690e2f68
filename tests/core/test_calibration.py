"""Calibration of kperfdiff's significance, on synthetic nested data from known distributions.

Each synthetic cell is what a benchmark gives: repetitions (fresh processes) with
a process-level effect, each with 11 interval values around it. A table is 8
cells compared with stats.nested_change and marked with Benjamini-Hochberg, the
way `compare` does. Claims checked:

* A/A (nothing changed): at most 5% of tables have any significant cell. The
  check allows the Monte Carlo error of the estimate: the rate must not be
  significantly above 5% (one-sided binomial, 1%), and the negative control (the
  old way: intervals pooled as if independent) must fail the same check, so the
  test can fail.
* Known change of 10% (speed ratio 1.1): the 95% interval covers it in at least
  90% of cells.
"""
import math

import numpy as np
import pytest
from scipy import stats as sst

from kperfdiff.core import stats

N_INTERVALS = 11
CELLS = 8


def cell(rng, kind: str, reps: int, scale: float = 1.0) -> list[list[float]]:
    """One side of one cell: ``reps`` lists of interval values around 1000 * scale."""
    out = []
    for _ in range(reps):
        if kind == "normal":          # additive noise between and within processes
            v = 1 + rng.normal(0, 0.03) + rng.normal(0, 0.05, N_INTERVALS)
        elif kind == "lognormal":     # multiplicative, wide
            v = np.exp(rng.normal(0, 0.1) + rng.normal(0, 0.2, N_INTERVALS))
        elif kind == "heavy":         # Student t (2 degrees of freedom) spikes at both levels
            v = 1 + 0.02 * np.abs(rng.standard_t(2)) + 0.05 * np.abs(rng.standard_t(2, N_INTERVALS))
        elif kind == "bimodal":       # a process lands in a slow mode (cross-CPU wake-ups) 30% of the time
            v = (1.8 if rng.random() < 0.3 else 1.0) * (1 + rng.normal(0, 0.02) + rng.normal(0, 0.03, N_INTERVALS))
        elif kind == "spiky":         # 10% of intervals hit by a 3x disturbance
            v = (1 + rng.normal(0, 0.02)) * (1 + rng.normal(0, 0.02, N_INTERVALS)) * \
                np.where(rng.random(N_INTERVALS) < 0.1, 3.0, 1.0)
        else:
            raise ValueError(kind)
        out.append(list(1000.0 * scale * np.maximum(v, 1e-3)))
    return out


def aa_rate(kind: str, reps: int, tables: int, seed: int, method=None) -> float:
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(tables):
        ps = []
        for _c in range(CELLS):
            a, b = cell(rng, kind, reps), cell(rng, kind, reps)
            ps.append(method(a, b) if method else stats.nested_change(a, b, "lower").p)
        _q, sig = stats.fdr_significant(ps)
        hits += bool(sig.any())
    return hits / tables


def not_above(rate: float, n: int, target: float = 0.05, alpha: float = 0.01) -> bool:
    """The observed rate is not significantly above ``target`` (one-sided exact binomial test)."""
    return sst.binomtest(round(rate * n), n, target, alternative="greater").pvalue > alpha


def pooled_welch_p(a, b) -> float:
    """The negative control: every interval treated as an independent sample (the old mistake)."""
    return float(sst.ttest_ind(np.log([x for r in b for x in r]), np.log([x for r in a for x in r]),
                               equal_var=False).pvalue)


TABLES = 250


@pytest.mark.parametrize("kind", ["normal", "lognormal", "heavy", "bimodal", "spiky"])
def test_aa_false_positive_rate_per_table(kind):
    rate = aa_rate(kind, 5, TABLES, seed=11)
    assert not_above(rate, TABLES), f"{kind}: {rate:.1%} of A/A tables had a significant cell"
    assert rate <= 0.08


def test_aa_three_repetitions_unimodal():
    for kind in ("normal", "lognormal", "heavy"):
        assert not_above(aa_rate(kind, 3, TABLES, seed=12), TABLES), kind


def test_negative_control_fails_the_same_check():
    """Pooling the intervals of all processes as independent values: far above 5%."""
    rate = aa_rate("normal", 5, 60, seed=13, method=pooled_welch_p)
    assert rate > 0.5 and not not_above(rate, 60)


@pytest.mark.parametrize("kind", ["normal", "lognormal", "heavy", "spiky"])
def test_coverage_of_a_known_change(kind):
    """B is 1.1x as fast as A (times divided by 1.1): the change is +10%."""
    rng = np.random.default_rng(21)
    n = 300
    covered = 0
    for _ in range(n):
        ch = stats.nested_change(cell(rng, kind, 5), cell(rng, kind, 5, scale=1 / 1.1), "lower")
        covered += ch.low <= 10.0 <= ch.high
    assert covered / n >= 0.90, f"{kind}: the 95% interval covered +10% in {covered / n:.1%} of cells"


def test_known_change_is_found():
    """A 10% change in normal data with 5 repetitions: most tables find it, after BH."""
    rng = np.random.default_rng(31)
    found = 0
    for _ in range(100):
        ps = [stats.nested_change(cell(rng, "normal", 5), cell(rng, "normal", 5, scale=1 / 1.1), "lower").p]
        ps += [stats.nested_change(cell(rng, "normal", 5), cell(rng, "normal", 5), "lower").p
               for _c in range(CELLS - 1)]
        _q, sig = stats.fdr_significant(ps)
        found += bool(sig[0])
    assert found >= 60


def test_too_few_repetitions_give_no_interval():
    rng = np.random.default_rng(41)
    ch = stats.nested_change(cell(rng, "normal", 2), cell(rng, "normal", 5), "lower")
    assert math.isnan(ch.low) and math.isnan(ch.p) and "too few repetitions" in ch.reason
    assert not math.isnan(ch.change)
