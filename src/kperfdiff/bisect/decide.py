"""The verdicts of a bisection, from measured values alone (no I/O): do GOOD and BAD differ, is a
probe like GOOD or like BAD or not yet decided, and does the culprit stand against its parent.

A commit's sample is one value per repetition: the median of the repetition's timed intervals
(``--metric time``), or its exact kernel instructions per operation (``--metric instructions``,
deterministic guests, where a repetition repeats to the last digit). Statistics are on the
logarithms, so a change is a ratio whatever the unit.

A probe is decided against the midpoint between GOOD's and BAD's means (in logs): like-BAD when
its whole confidence interval lies on BAD's side of the midpoint, like-GOOD when it lies on
GOOD's side, undecided otherwise (more repetitions, up to the probe's budget). When GOOD, the
probe and BAD were measured in rounds, one value of each in turn (:func:`classify_in_rounds`), each
round is judged against its own GOOD and BAD, so a level shift of the machine cancels; otherwise
(exact counts, old stored bisections) by the pooled interval below. The noise of one
benchmark on one target is the same for every commit, so the interval of a probe's mean uses the
standard deviation pooled over GOOD, BAD and the probe (the degrees of freedom of all three):
three repetitions of a probe then decide as well as the many of the end points allow, which a
t interval of three values alone (t = 4.3) would not.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from kperfdiff.core import stats

GOOD, BAD, UNDECIDED = "good", "bad", "undecided"
CONFIDENCE = stats.DEFAULT_CONFIDENCE
ALPHA = stats.DEFAULT_ALPHA
# GOOD against BAD, over all its looks: a bisection blames a commit, so two equal end points go on to
# one at most 2% of the time (stats.sequential_levels spends it over the looks)
REFERENCE_ALPHA = 0.02


@dataclass(frozen=True)
class Sample:
    """One commit's values (one per repetition); ``exact``: counts that repeat exactly."""

    values: tuple[float, ...]
    exact: bool = False

    @property
    def n(self) -> int:
        return len(self.values)

    def logs(self) -> list[float]:
        if any(not v > 0 for v in self.values):
            raise ValueError("a value at or below zero has no logarithm")
        return [math.log(v) for v in self.values]

    def centre(self) -> float:
        """The geometric mean of the values (the nested centre of one value per repetition)."""
        lg = self.logs()
        return math.exp(sum(lg) / len(lg))


@dataclass(frozen=True)
class Difference:
    """BAD (or the culprit) against GOOD (or the parent): ratio of centres and its interval."""

    ratio: float          # centre(new) / centre(base)
    low: float            # interval of the ratio (equal to it for exact counts)
    high: float
    p: float
    significant: bool
    reason: str = ""      # why there is no test, when there is none
    se: float = math.nan  # standard error of the log ratio, and its degrees of freedom
    df: float = math.nan

    @property
    def percent(self) -> float:
        return (self.ratio - 1) * 100

    @property
    def detectable(self) -> float:
        """The smallest change, in percent, this test would have found at 80% power
        (:func:`kperfdiff.core.stats.detectable_change`); 0 for exact counts."""
        return stats.detectable_change(self.se, self.df)


def _mean(xs):
    return sum(xs) / len(xs)


def _ss(xs):
    m = _mean(xs)
    return sum((x - m) ** 2 for x in xs)


def _exactly_equal(a: Sample, b: Sample) -> bool:
    return max(a.values + b.values) - min(a.values + b.values) <= 1e-9 * max(a.values + b.values)


def difference(base: Sample, new: Sample, *, alpha: float = ALPHA, min_reps: int = stats.MIN_REPS,
               paired: bool = False) -> Difference:
    """Is ``new`` different from ``base``? Exact counts differ when they are not equal (one value
    each is enough); measured values by Welch's t-test on the logarithms, with at least
    ``min_reps`` repetitions per side, or, with ``paired`` (the i-th values of the two were measured
    one after the other, in turn) and as many values on each side, by the 20%-trimmed mean of the
    differences of their logarithms (:func:`kperfdiff.core.stats.trimmed_mean_interval`; Student's
    t under 5 pairs): a level shift of the machine that lasts a round then falls on both values of
    the pair and cancels, and a round where one side's whole process was slowed is cut, not averaged."""
    ratio = new.centre() / base.centre()
    if base.exact and new.exact:
        same = _exactly_equal(base, new)
        return Difference(ratio, ratio, ratio, 1.0 if same else 0.0, not same, se=0.0, df=1.0)
    if base.n < min_reps or new.n < min_reps:
        return Difference(ratio, math.nan, math.nan, math.nan, False,
                          f"too few repetitions for a test ({base.n} and {new.n}; {min_reps} per side are needed)")
    if paired and base.n == new.n:
        d, lo, hi, p, se, df = stats.trimmed_mean_interval([y - x for x, y in zip(base.logs(), new.logs())],
                                                           1 - alpha)
        return Difference(math.exp(d), math.exp(lo), math.exp(hi), p, p < alpha, se=se, df=df)
    d, lo, hi, p = stats.welch_interval(base.logs(), new.logs(), confidence=1 - alpha)
    se, df = stats.welch_se_df(base.logs(), new.logs())
    return Difference(math.exp(d), math.exp(lo), math.exp(hi), p, p < alpha, se=se, df=df)


@dataclass(frozen=True)
class Verdict:
    """A probe's verdict and the interval it was judged by (ratios to GOOD's centre)."""

    verdict: str          # GOOD, BAD or UNDECIDED
    ratio: float          # the probe's centre over GOOD's
    low: float
    high: float
    midpoint: float       # the ratio half way between GOOD and BAD (in logs)


def classify(probe: Sample, good: Sample, bad: Sample, *, confidence: float = CONFIDENCE,
             noise: list[Sample] = ()) -> Verdict:
    """Like GOOD, like BAD, or undecided (see the module docstring). ``noise``: more samples whose
    spread (each around its own mean) joins the pooled standard deviation; then GOOD and BAD may be
    a few values measured around the probe (its brackets), and the uncertainty of their midpoint
    counts too."""
    lg, lb, lp = good.logs(), bad.logs(), probe.logs()
    if not (lg and lb and lp):
        return Verdict(UNDECIDED, math.nan, math.nan, math.nan, math.nan)
    mg, mb, mp = _mean(lg), _mean(lb), _mean(lp)
    mid = (mg + mb) / 2
    up = mb > mg                      # BAD's values are the larger ones
    ratio = math.exp(mp - mg)
    midpoint = math.exp(mid - mg)
    if probe.exact and good.exact and bad.exact:
        lo = hi = mp
    else:
        extra = [x.logs() for x in noise]
        df = len(lg) + len(lb) + len(lp) - 3 + sum(len(x) - 1 for x in extra)
        if df < 1:
            return Verdict(UNDECIDED, ratio, math.nan, math.nan, midpoint)
        s = math.sqrt((_ss(lg) + _ss(lb) + _ss(lp) + sum(_ss(x) for x in extra)) / df)
        spread = 1 / len(lp) + ((1 / len(lg) + 1 / len(lb)) / 4 if noise else 0.0)
        h = stats.t_quantile((1 + confidence) / 2, df) * s * math.sqrt(spread)
        lo, hi = mp - h, mp + h
    if (lo > mid) if up else (hi < mid):
        v = BAD
    elif (hi < mid) if up else (lo > mid):
        v = GOOD
    else:
        v = UNDECIDED
    return Verdict(v, ratio, math.exp(lo - mg), math.exp(hi - mg), midpoint)


def classify_in_rounds(probe: Sample, good: Sample, bad: Sample, *, confidence: float = CONFIDENCE) -> Verdict:
    """Like GOOD, like BAD, or undecided, from rounds: the i-th values of GOOD, the probe and BAD were
    measured one after the other (GOOD just before the probe, BAD just after), so a level shift of the
    machine that lasts a round moves all three. Each round gives the probe's position against the
    midpoint of its own GOOD and BAD, z = log(probe) - (log(GOOD) + log(BAD)) / 2; the interval of the
    20%-trimmed mean z (:func:`kperfdiff.core.stats.trimmed_mean_interval`, so a round with one value
    far out is cut) decides: wholly on BAD's side of 0, like-BAD; wholly on
    GOOD's side, like-GOOD; else undecided. Needs as many values on each side, 2 or more."""
    lg, lb, lp = good.logs(), bad.logs(), probe.logs()
    n = len(lp)
    if not (n >= 2 and len(lg) == len(lb) == n):
        raise ValueError("rounds need as many values of GOOD, BAD and the probe, 2 or more")
    half_gap = _mean([b - g for g, b in zip(lg, lb)]) / 2
    mz, lo, hi, _p, _se, _df = stats.trimmed_mean_interval([p - (g + b) / 2 for g, b, p in zip(lg, lb, lp)],
                                                           confidence)
    if probe.exact and good.exact and bad.exact:
        lo = hi = mz
    up = half_gap > 0
    if (lo > 0) if up else (hi < 0):
        v = BAD
    elif (hi < 0) if up else (lo > 0):
        v = GOOD
    else:
        v = UNDECIDED
    return Verdict(v, math.exp(mz + half_gap), math.exp(lo + half_gap), math.exp(hi + half_gap),
                   math.exp(half_gap))


def same_direction(reference: Difference, found: Difference) -> bool:
    """Does ``found`` move the way GOOD -> BAD moved (both up or both down)?"""
    return (reference.ratio > 1) == (found.ratio > 1)
