"""Every statistic kperfdiff reports, as pure functions.

Each function names its method, so a table can say how a number was made.
Nothing here does I/O or printing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DEFAULT_CONFIDENCE = 0.95
DEFAULT_BOOTSTRAP = 4000
DEFAULT_SEED = 20130527  # fixed, so a table is the same every time it is made


@dataclass(frozen=True)
class Summary:
    """Distribution of one benchmark's intervals."""

    n: int
    median: float
    min: float
    max: float
    q1: float
    q3: float
    mean: float
    stdev: float
    cv: float  # stdev / mean; nan when n < 2 or mean == 0

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def summarize(values) -> Summary:
    """Median, min, max, quartiles, mean, sample stdev (ddof=1) and CV.

    Quartiles use linear interpolation between order statistics (Hyndman and
    Fan type 7, numpy's default), so q1/q3 of [1, 2, 3, 4] are 1.75 and 3.25.
    """
    x = np.asarray(list(values), dtype=np.float64)
    if x.size == 0:
        raise ValueError("no values to summarize")
    if not np.all(np.isfinite(x)):
        raise ValueError("values must be finite")
    q1, med, q3 = np.percentile(x, [25, 50, 75])
    mean = float(x.mean())
    sd = float(x.std(ddof=1)) if x.size > 1 else math.nan
    cv = sd / abs(mean) if x.size > 1 and mean != 0 else math.nan
    return Summary(int(x.size), float(med), float(x.min()), float(x.max()), float(q1), float(q3),
                   mean, sd, cv)


def speed_ratio(base, new, better: str):
    """How many times better ``new`` is than ``base``: base/new for lower-is-better
    units (times), new/base for higher-is-better units (throughputs). Works on
    numbers and numpy arrays alike."""
    if better == "lower":
        return base / new
    if better == "higher":
        return new / base
    raise ValueError(f"better must be 'lower' or 'higher', not {better!r}")


def signed_change(base: float, new: float, better: str) -> float:
    """Change of ``new`` against ``base`` in percent: (speed ratio - 1) * 100.

    Positive is better in either direction and the scale is symmetric: a
    latency going from 100 to 80 is +25.0 (1.25x as fast), from 100 to 200
    is -50.0 (half as fast); a throughput going from 2 to 4 is +100.0. The
    value never falls to -100 or below, so every change has a ratio and a
    geometric mean (:func:`geometric_mean_change`).
    """
    if base <= 0 or new <= 0:
        if better not in ("lower", "higher"):
            raise ValueError(f"better must be 'lower' or 'higher', not {better!r}")
        return math.nan
    return (speed_ratio(base, new, better) - 1.0) * 100.0


@dataclass(frozen=True)
class Change:
    """A change between two samples, stated the way a reader needs it."""

    base: float          # the statistic of the baseline (median)
    new: float           # the statistic of the variant (median)
    change: float        # signed percent, positive = better
    low: float           # confidence interval of change, percent
    high: float
    confidence: float
    significant: bool    # the interval excludes zero
    method: str

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def bootstrap_median_change(base, new, better: str, *, confidence: float = DEFAULT_CONFIDENCE,
                            n_boot: int = DEFAULT_BOOTSTRAP, seed: int = DEFAULT_SEED) -> Change:
    """Signed percent change of medians (:func:`signed_change`) with a percentile bootstrap interval.

    Method: resample each side with replacement ``n_boot`` times, take the
    signed change of the resampled medians, and report the (1-c)/2 and
    (1+c)/2 percentiles. Significant only when the interval excludes zero.
    With fewer than 2 values on a side there is no interval (nan, not
    significant).
    """
    a = np.asarray(list(base), dtype=np.float64)
    b = np.asarray(list(new), dtype=np.float64)
    if a.size == 0 or b.size == 0:
        raise ValueError("both sides need values")
    ma, mb = float(np.median(a)), float(np.median(b))
    point = signed_change(ma, mb, better)
    method = f"bootstrap of medians, {n_boot} resamples, {confidence:.0%} percentile interval"
    if a.size < 2 or b.size < 2 or math.isnan(point):
        return Change(ma, mb, point, math.nan, math.nan, confidence, False, method)
    rng = np.random.default_rng(seed)
    ra = np.median(a[rng.integers(0, a.size, size=(n_boot, a.size))], axis=1)
    rb = np.median(b[rng.integers(0, b.size, size=(n_boot, b.size))], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ch = (speed_ratio(ra, rb, better) - 1.0) * 100.0
    ch = ch[np.isfinite(ch) & (ra > 0) & (rb > 0)]
    if ch.size == 0:
        return Change(ma, mb, point, math.nan, math.nan, confidence, False, method)
    lo, hi = np.percentile(ch, [(1 - confidence) / 2 * 100, (1 + confidence) / 2 * 100])
    sig = bool(lo > 0 or hi < 0)
    return Change(ma, mb, point, float(lo), float(hi), confidence, sig, method)


def welch_interval(a, b, *, confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float, float, float]:
    """Welch's t interval for mean(b) - mean(a).

    Returns (difference, low, high, two-sided p-value). Unequal variances,
    Welch-Satterthwaite degrees of freedom. With a zero standard error the
    interval collapses to the difference and p is 0 if it is non-zero, else 1.
    """
    from scipy import stats as sst

    x = np.asarray(list(a), dtype=np.float64)
    y = np.asarray(list(b), dtype=np.float64)
    if x.size < 2 or y.size < 2:
        raise ValueError("Welch's interval needs at least 2 values per side")
    d = float(y.mean() - x.mean())
    va, vb = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    se = math.sqrt(va + vb)
    if se == 0:
        return d, d, d, (0.0 if d != 0 else 1.0)
    df = (va + vb) ** 2 / ((va ** 2 / (x.size - 1) if va else 0) + (vb ** 2 / (y.size - 1) if vb else 0))
    t = sst.t.ppf((1 + confidence) / 2, df)
    p = float(2 * sst.t.sf(abs(d / se), df))
    return d, d - t * se, d + t * se, p


def benjamini_hochberg(pvalues) -> np.ndarray:
    """Benjamini-Hochberg q-values (false discovery rate adjusted p-values).

    q_(i) = min over j >= i of p_(j) * m / j, capped at 1, returned in the
    input order. NaN p-values stay NaN and do not count in m.
    """
    p = np.asarray(list(pvalues), dtype=np.float64)
    q = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    m = int(ok.sum())
    if m == 0:
        return q
    pv = p[ok]
    order = np.argsort(pv, kind="mergesort")
    ranked = pv[order] * m / np.arange(1, m + 1)
    ranked = np.minimum.accumulate(ranked[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(ranked, 1.0)
    q[ok] = out
    return q


def geometric_mean_change(changes_percent) -> float:
    """Geometric mean of signed percent changes, via their speed ratios (1 + c/100).

    Every change made by :func:`signed_change` is above -100%, so every one
    has a ratio; nan values are left out, and nan is returned if none remain.
    """
    r = [1 + c / 100.0 for c in changes_percent if c is not None and not math.isnan(c) and c > -100]
    if not r:
        return math.nan
    return (math.exp(sum(math.log(x) for x in r) / len(r)) - 1) * 100.0
