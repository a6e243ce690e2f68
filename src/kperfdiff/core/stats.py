"""Every statistic kperfdiff reports, as pure functions.

Each function names its method, so a table can say how a number was made.
Nothing here does I/O or printing.

Student's t comes from ``scipy.special`` (``stdtrit``, ``stdtr``: the functions
``scipy.stats.t.ppf`` and ``t.sf`` evaluate), and Welch's test and Benjamini-Hochberg
are written out here, checked against ``scipy.stats.ttest_ind`` and
``false_discovery_control`` by the tests: importing ``scipy.stats`` takes about 0.7 s,
most of the time of a `show` or `compare`, and ``scipy.special`` about 0.1 s. numpy, too, is
imported by the functions that use it, so a command that only lists (`kperfdiff runs`,
`bench --list`) starts without it.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

DEFAULT_CONFIDENCE = 0.95


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
    import numpy as np
    x = np.asarray(list(values), dtype=np.float64)
    if x.size == 0:
        raise ValueError("no values to summarize")
    if not np.all(np.isfinite(x)):
        raise ValueError("values must be finite")
    q1, med, q3 = np.percentile(x, [25, 50, 75])
    mean, sd, cv = _spread(x)
    return Summary(int(x.size), float(med), float(x.min()), float(x.max()), float(q1), float(q3),
                   mean, sd, cv)


def coefficient_of_variation(values) -> float:
    """stdev / mean of finite values, as :func:`summarize` gives it (without the quartiles)."""
    import numpy as np
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError("no values, or values that are not finite")
    return _spread(x)[2]


def _spread(x: np.ndarray) -> tuple[float, float, float]:
    """Mean, sample stdev (ddof=1) and CV (nan when n < 2 or mean == 0)."""
    mean = float(x.mean())
    sd = float(x.std(ddof=1)) if x.size > 1 else math.nan
    cv = sd / abs(mean) if x.size > 1 and mean != 0 else math.nan
    return mean, sd, cv


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


MIN_REPS = 3        # repetitions per side below which no interval is given
DEFAULT_ALPHA = 0.05


@dataclass(frozen=True)
class Change:
    """A change between two nested samples, stated the way a reader needs it."""

    base: float          # centre of the baseline (geometric mean of its per-repetition medians)
    new: float           # centre of the variant
    change: float        # signed percent, positive = better
    low: float           # confidence interval of change, percent (nan: no interval)
    high: float
    confidence: float
    p: float             # two-sided p-value of "no change" (nan: no test)
    significant: bool    # set by the caller after false-discovery control (see fdr_significant)
    method: str
    reason: str = ""     # why there is no interval, when there is none
    runs: int = 0        # stored runs the drift between runs was estimated from (run_level_change)
    se: float = math.nan     # standard error of the log ratio the interval was made from
    df: float = math.nan     # its degrees of freedom
    pairs: int = 0           # paired rounds (paired_change), 0 for the unpaired methods

    @property
    def detectable(self) -> float:
        """The smallest change this comparison could have detected (:func:`detectable_change`)."""
        return detectable_change(self.se, self.df, confidence=self.confidence)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


NESTED_METHOD = ("two-level random-effects interval (Kalibera & Jones, ISMM 2013): each repetition (a fresh "
                 "process) is summarised by the median of its intervals; the change is the ratio of the geometric "
                 "means of those per-repetition medians, and its {c:.0%} interval and p-value come from Welch's "
                 "t-test on their logarithms (unequal variances, as scipy.stats.ttest_ind), whose spread between "
                 "repetitions already carries the spread inside them; at least {m} repetitions per side")


def nested_method_text(confidence: float = DEFAULT_CONFIDENCE) -> str:
    return NESTED_METHOD.format(c=confidence, m=MIN_REPS)


def repetition_medians(reps) -> np.ndarray:
    """The median of each repetition's interval values (empty repetitions left out)."""
    import numpy as np
    return np.asarray([_median(r) for r in reps if len(r)], dtype=np.float64)


def repetition_quantiles(reps, q: float) -> np.ndarray:
    """The ``q`` quantile (0 to 1, linear between order statistics, as numpy's default) of each
    repetition's interval values (empty repetitions left out): ``q = 0.1`` is the low decile that a
    bisection uses, which follows what the code costs rather than how much of the repetition was
    disturbed (interference only adds time)."""
    import numpy as np
    if not 0 <= q <= 1:
        raise ValueError(f"a quantile lies between 0 and 1, not {q}")
    out = []
    for r in reps:
        if not len(r):
            continue
        v = sorted(map(float, r))
        if any(map(math.isnan, v)):
            out.append(math.nan)
            continue
        h = q * (len(v) - 1)
        lo = math.floor(h)
        out.append(v[lo] if lo == h else v[lo] + (h - lo) * (v[lo + 1] - v[lo]))
    return np.asarray(out, dtype=np.float64)


def _median(values) -> float:
    """numpy's median of a short list (the middle value, or the mean of the two middle ones; nan if
    any value is nan), without numpy's per-call cost: a comparison takes thousands of them."""
    v = sorted(map(float, values))
    if any(map(math.isnan, v)):
        return math.nan
    h = len(v) // 2
    return v[h] if len(v) % 2 else (v[h - 1] + v[h]) / 2


def t_quantile(q: float, df: float) -> float:
    """The q quantile of Student's t with df degrees of freedom (scipy.special.stdtrit)."""
    from scipy import special
    return float(special.stdtrit(df, q))


def t_two_sided_p(t: float, df: float) -> float:
    """Two-sided p-value of a t statistic: 2 * P(T > |t|) (scipy.special.stdtr)."""
    from scipy import special
    return float(2 * special.stdtr(df, -abs(t)))


def nested_centre(reps) -> float:
    """Centre of a nested sample: the geometric mean of its per-repetition medians
    (with one repetition, that repetition's median). nan when a median is not positive."""
    import numpy as np
    m = repetition_medians(reps)
    if m.size == 0 or np.any(m <= 0):
        return math.nan
    if m.size == 1 or np.all(m == m[0]):
        return float(m[0])
    return float(np.exp(np.mean(np.log(m))))


def nested_change(base_reps, new_reps, better: str, *, confidence: float = DEFAULT_CONFIDENCE,
                  min_reps: int = MIN_REPS) -> Change:
    """Signed percent change (:func:`signed_change`) of ``new`` against ``base``, each a list of
    repetitions (lists of interval values), with a two-level interval.

    Method (Kalibera and Jones, "Rigorous benchmarking in reasonable time", ISMM 2013, the
    random-effects model): repetitions are the independent units (fresh processes) and the
    intervals inside one are not independent of each other, so each repetition is reduced to
    the median of its intervals. The logarithms of those medians have a variance that is the
    between-repetition variance plus the within-repetition variance over the intervals per
    repetition, so a t interval over them accounts for both levels. Welch's t-test on the
    logarithms (:func:`welch_interval`, as ``scipy.stats.ttest_ind(equal_var=False)``) gives the interval of the log ratio
    of geometric means and a two-sided p-value; the interval is mapped back through exp to a
    speed ratio and then to percent. With fewer than ``min_reps`` repetitions on a side there
    is no interval and no test: the reason says so. ``significant`` is left False: the caller
    decides it over a whole table with :func:`fdr_significant`.
    """
    import numpy as np
    if better not in ("lower", "higher"):
        raise ValueError(f"better must be 'lower' or 'higher', not {better!r}")
    ma, mb = repetition_medians(base_reps), repetition_medians(new_reps)
    if ma.size == 0 or mb.size == 0:
        raise ValueError("both sides need values")
    ca, cb = nested_centre(base_reps), nested_centre(new_reps)
    method = nested_method_text(confidence)
    point = signed_change(ca, cb, better) if not (math.isnan(ca) or math.isnan(cb)) else math.nan

    def none(reason: str) -> Change:
        return Change(ca, cb, point, math.nan, math.nan, confidence, math.nan, False, method, reason)

    if math.isnan(point):
        return none("a median is zero or negative, so there is no ratio")
    if ma.size < min_reps or mb.size < min_reps:
        return none(f"too few repetitions for an interval ({ma.size} and {mb.size}; {min_reps} per side "
                    f"are needed)")
    la, lb = np.log(ma), np.log(mb)
    d = float(lb.mean() - la.mean())           # log(new/base) of the geometric means
    if _constant(la) and _constant(lb):       # exact counts (deterministic guests) repeat to the last digit
        lo = hi = d
        p = 0.0 if abs(d) > 1e-12 else 1.0
        se, df = 0.0, float(la.size + lb.size - 2)
    else:
        _d, lo, hi, p = welch_interval(la, lb, confidence=confidence)
        se, df = welch_se_df(la, lb)
    return Change(ca, cb, point, *percent_ends(lo, hi, better), confidence, p, False, method, se=se, df=df)


def t_interval(d: float, se: float, df: float, confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float, float]:
    """(low, high, two-sided p) of a t interval around ``d`` with standard error ``se`` and ``df`` degrees
    of freedom; with a zero se the interval collapses to ``d`` and p is 0 if it is non-zero, else 1."""
    if se <= 1e-12 * max(1.0, abs(d)):
        return d, d, (0.0 if abs(d) > 1e-12 else 1.0)
    t = t_quantile((1 + confidence) / 2, df)
    return d - t * se, d + t * se, t_two_sided_p(d / se, df)


def mean_interval(xs, confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float, float, float, float, int]:
    """Student's t interval of the mean of ``xs`` (2 values or more), as scipy.stats.ttest_1samp states it
    against 0: (mean, low, high, two-sided p, se, degrees of freedom n - 1); the se is 0 when the values do
    not spread (:func:`t_interval` then collapses the interval). The paired tests of rounds (compare's
    and the bisection's) are this on per-round differences."""
    x = [float(v) for v in xs]
    n = len(x)
    if n < 2:
        raise ValueError("a t interval of a mean needs 2 values or more")
    m = sum(x) / n
    se = math.sqrt(sum((v - m) ** 2 for v in x) / (n - 1) / n)
    lo, hi, p = t_interval(m, se, n - 1, confidence)
    return m, lo, hi, p, (0.0 if lo == hi else se), n - 1


TRIM = 0.2     # the share of values a trimmed mean cuts from each end


def trimmed_mean_interval(xs, confidence: float = DEFAULT_CONFIDENCE, trim: float = TRIM
                          ) -> tuple[float, float, float, float, float, int]:
    """The interval of the ``trim``-trimmed mean of ``xs`` (Tukey & McLaughlin 1963; Yuen 1974; Wilcox's
    trimci), returned as :func:`mean_interval` returns Student's: g = floor(trim * n) values are cut from
    each end, the mean of the h = n - 2g left is the estimate, its squared standard error is the sum of
    squared deviations of the winsorized values (the g cut values of each end replaced by the nearest kept
    one) over h (h - 1), as Yuen's paired test has it (a little wider than trimci's, which rejects 6-7% of
    normal null samples of 5 to 11 values at 5%; this one 5-6%, and under 5% with heavy tails), and Student's
    t with h - 1 degrees of freedom gives the interval and the two-sided p against 0. With under
    1 / trim values nothing is cut and it is Student's interval of the mean. A value far out (one round of a
    bisection whose process ran on a CPU it shared for the whole repetition) moves a mean by its size and
    widens Student's interval by it; here it is one of the cut values, and moves the estimate not at all."""
    x = sorted(float(v) for v in xs)
    n = len(x)
    g = int(math.floor(trim * n))
    if g == 0:
        return mean_interval(x, confidence)
    h = n - 2 * g
    m = sum(x[g:n - g]) / h
    w = [x[g]] * g + x[g:n - g] + [x[n - g - 1]] * g
    mw = sum(w) / n
    se = math.sqrt(sum((v - mw) ** 2 for v in w) / (h * (h - 1)))
    lo, hi, p = t_interval(m, se, h - 1, confidence)
    return m, lo, hi, p, (0.0 if lo == hi else se), h - 1


INTERIM_ALPHA = 0.001   # a look before the last stops a sequential test only beyond this (Haybittle-Peto)


def sequential_levels(ns: tuple[int, ...], alpha: float, interim: float = INTERIM_ALPHA) -> tuple[float, float]:
    """The two-sided p-value levels of a test made at each of the sample sizes ``ns`` (its looks, in
    order), which stops at the first look where p falls below that look's level: every look but the
    last at ``interim``, the last at the level returned, so that a sample with no difference is called
    different with probability ``alpha`` in all (Haybittle 1971, Peto 1976; the final level from the
    joint law of the looks' z statistics, z_k = W(n_k) / sqrt(n_k) for a Brownian motion W, by a seeded
    simulation of 200,000 paths). Returns (interim, final). Bonferroni's alpha / looks gives the last
    look, where a small change is found if at all, a fraction of alpha; here it keeps most of it, and a
    large change still stops at the first look that shows it beyond doubt. A test that stops early for
    another reason (the spread it could see, never the change) makes that look its last, at the final
    level: a stopping rule on the spread alone leaves a t test's level as it was."""
    ns = tuple(int(n) for n in ns)
    if not ns or any(b <= a for a, b in zip(ns, ns[1:])) or ns[0] < 1 or not 0 < interim < alpha < 1:
        raise ValueError("looks must be increasing sample sizes, and 0 < interim < alpha < 1")
    if len(ns) == 1:
        return interim, alpha
    return interim, _final_level(ns, alpha, interim)


@functools.lru_cache(maxsize=None)
def _final_level(ns: tuple[int, ...], alpha: float, interim: float) -> float:
    import numpy as np
    from scipy.special import ndtr, ndtri
    rng = np.random.default_rng(20241128)
    steps = np.sqrt(np.diff((0,) + ns)).astype(np.float64)
    w = np.cumsum(rng.standard_normal((200_000, len(ns))) * steps, axis=1)
    z = np.abs(w / np.sqrt(np.asarray(ns, dtype=np.float64)))
    crossed = (z[:, :-1] > float(ndtri(1 - interim / 2))).any(axis=1)
    left = alpha - crossed.mean()          # what the last look may spend, on the paths still going
    last = np.sort(z[~crossed, -1])[::-1]
    k = max(1, int(round(left * len(z))))
    c = last[min(k, len(last)) - 1]
    return float(2 * (1 - ndtr(c)))


def percent_ends(lo: float, hi: float, better: str) -> tuple[float, float]:
    """The ends of an interval of log(new/base) as signed percent changes (:func:`signed_change`), low first."""
    sign = -1.0 if better == "lower" else 1.0    # speed ratio = exp(sign * d)
    a, b = sorted(((math.exp(sign * lo) - 1) * 100, (math.exp(sign * hi) - 1) * 100))
    return a, b


def welch_se_df(a, b) -> tuple[float, float]:
    """Welch's standard error of mean(b) - mean(a) and its Welch-Satterthwaite degrees of freedom
    (the se and df :func:`welch_interval` uses; df is the pooled n - 2 when the se is zero)."""
    import numpy as np
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    va, vb = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    if va + vb == 0:
        return 0.0, float(x.size + y.size - 2)
    df = (va + vb) ** 2 / ((va ** 2 / (x.size - 1) if va else 0) + (vb ** 2 / (y.size - 1) if vb else 0))
    return math.sqrt(va + vb), float(df)


POWER = 0.80     # the power every detectable change is stated at

DETECTABLE_METHOD = ("detectable = the smallest change the cell's test would call significant with {pw:.0%} "
                     "probability at its noise and repetitions: exp((t(1 - alpha/2) + t({pw:.2f})) * se) - 1 with "
                     "alpha = {a:g} and se, degrees of freedom those of its interval")


def detectable_change(se: float, df: float, *, confidence: float = DEFAULT_CONFIDENCE,
                      power: float = POWER) -> float:
    """The smallest change, in percent of the speed ratio, that a two-sided t test at level
    1 - ``confidence`` with standard error ``se`` of a log ratio and ``df`` degrees of freedom
    detects with probability ``power``: (exp((t_{1-alpha/2} + t_power) * se) - 1) * 100, the
    textbook sample-size relation (the shift at which the test statistic's distribution puts
    ``power`` of its mass beyond the critical value, t quantiles for the estimated se). 0 when the
    se is 0 (exact counts); nan without a test."""
    if not (math.isfinite(se) and math.isfinite(df)) or df <= 0 or se < 0:
        return math.nan
    if se == 0:
        return 0.0
    k = t_quantile((1 + confidence) / 2, df) + t_quantile(power, df)
    return (math.exp(k * se) - 1) * 100


PAIRED_METHOD = ("paired rounds: each repetition (a fresh process) is summarised by the median of its intervals, "
                 "and the two sides' repetitions measured in the same round (back to back, their order alternating "
                 "from round to round) are paired; the change is the mean of the per-round differences of the "
                 "logarithms, and its {c:.0%} interval and p-value come from Student's t on those differences "
                 "(as scipy.stats.ttest_rel), so a level shift of the machine that lasts a round falls on both "
                 "sides and cancels; at least {m} paired rounds")


def paired_change(base_reps, new_reps, base_rounds, new_rounds, better: str, *,
                  confidence: float = DEFAULT_CONFIDENCE, min_reps: int = MIN_REPS) -> Change | None:
    """:func:`nested_change` for two sides measured in the same rounds (an experiment's variants):
    ``base_rounds``/``new_rounds`` give each repetition's round. The repetitions of one round are
    paired, and the interval is Student's t on the per-round differences of the log medians
    (n - 1 degrees of freedom). The centres are those of every repetition, as the tables print them.
    None when fewer than ``min_reps`` rounds are on both sides (the caller then compares unpaired)."""
    if better not in ("lower", "higher"):
        raise ValueError(f"better must be 'lower' or 'higher', not {better!r}")
    a, b = _by_round(base_reps, base_rounds), _by_round(new_reps, new_rounds)
    common = sorted(set(a) & set(b))
    if len(common) < min_reps:
        return None
    d, lo, hi, p, se, df = mean_interval([math.log(b[r]) - math.log(a[r]) for r in common], confidence)
    sign = -1.0 if better == "lower" else 1.0
    ca, cb = nested_centre(base_reps), nested_centre(new_reps)
    return Change(ca, cb, (math.exp(sign * d) - 1) * 100, *percent_ends(lo, hi, better), confidence, p, False,
                  PAIRED_METHOD.format(c=confidence, m=min_reps), se=se, df=float(df), pairs=len(common))


def change_in_rounds(base_reps, new_reps, better: str, *, base_rounds=None, new_rounds=None,
                     confidence: float = DEFAULT_CONFIDENCE, min_reps: int = MIN_REPS) -> Change | None:
    """Two nested samples compared as their design allows: paired by round (:func:`paired_change`) when
    rounds are given and at least ``min_reps`` are on both sides, else unpaired (:func:`nested_change`,
    whose ``pairs`` is 0). Repetitions without values are left out; None when a side has none."""
    if base_rounds is not None and new_rounds is not None:
        ch = paired_change(base_reps, new_reps, base_rounds, new_rounds, better, confidence=confidence,
                           min_reps=min_reps)
        if ch is not None:
            return ch
    ka, kb = [r for r in base_reps if len(r)], [r for r in new_reps if len(r)]
    if not (ka and kb):
        return None
    return nested_change(ka, kb, better, confidence=confidence, min_reps=min_reps)


def _by_round(reps, rounds) -> dict:
    """round -> the median of its repetition (the geometric mean of their medians, should a round hold
    several); repetitions without values, or whose median is not positive, left out."""
    groups: dict = {}
    for r, values in zip(rounds, reps):
        if len(values):
            m = _median(values)
            if m > 0:
                groups.setdefault(r, []).append(m)
    return {r: (ms[0] if len(ms) == 1 else math.exp(sum(map(math.log, ms)) / len(ms))) for r, ms in groups.items()}


def _constant(logs: np.ndarray) -> bool:
    """All equal but for float rounding (the logarithms of equal counts)."""
    import numpy as np
    return float(np.ptp(logs)) <= 1e-12 * max(1.0, float(np.abs(logs).max()))


RUN_LEVEL_METHOD = ("three-level random-effects interval (Kalibera & Jones, ISMM 2013, with runs as the top "
                    "level): as the two-level one, plus the drift between runs of the benchmark on the same "
                    "machine, estimated from every stored bench run of it there (the compared runs included) "
                    "as the variance of the run centres beyond what their repetitions explain; Welch-"
                    "Satterthwaite degrees of freedom; {c:.0%} interval")


def run_level_change(base_reps, new_reps, better: str, histories, *, confidence: float = DEFAULT_CONFIDENCE,
                     min_reps: int = MIN_REPS) -> Change:
    """:func:`nested_change` for two separate runs (each side one run): the interval also holds
    the drift between runs, which the repetitions of one run cannot see.

    Method (a third, top level in Kalibera and Jones's random-effects model): ``histories`` is a
    list of groups, one per machine configuration, each the repetitions of every stored run of
    this benchmark there (including the two compared). Each run's centre is the mean of the
    logarithms of its per-repetition medians, with within-run variance s^2/n. The run-level
    variance is the pooled variance of the run centres around their machine's mean, less the
    mean within-run variance (method of moments, floored at 0), with degrees of freedom the
    number of runs less the number of machines. The difference of the two log centres then
    has variance se_a^2 + se_b^2 + 2 * run variance, degrees of freedom by Welch-Satterthwaite,
    and a t interval and two-sided p-value. With no degree of freedom for the run level (one
    run per side, no other runs stored) there is no interval, and the reason says why.
    """
    import numpy as np
    base = nested_change(base_reps, new_reps, better, confidence=confidence, min_reps=min_reps)
    method = RUN_LEVEL_METHOD.format(c=confidence)
    if math.isnan(base.p):
        return Change(base.base, base.new, base.change, math.nan, math.nan, confidence, math.nan, False, method,
                      base.reason)
    la, lb = np.log(repetition_medians(base_reps)), np.log(repetition_medians(new_reps))
    sa, sb = float(la.var(ddof=1) / la.size), float(lb.var(ddof=1) / lb.size)
    dev2 = within = 0.0
    runs = groups = 0
    for group in histories:
        cs, ws = [], []
        for reps in group:
            m = repetition_medians(reps)
            if m.size < min_reps or np.any(m <= 0):
                continue
            lg = np.log(m)
            cs.append(float(lg.mean()))
            ws.append(float(lg.var(ddof=1) / lg.size))
        if len(cs) >= 1:
            c = np.asarray(cs)
            dev2 += float(((c - c.mean()) ** 2).sum())
            within += sum(ws)
            runs += len(cs)
            groups += 1
    df_run = runs - groups
    if df_run < 1:
        return Change(base.base, base.new, base.change, math.nan, math.nan, confidence, math.nan, False, method,
                      "one run per side and no other stored runs of this benchmark on these machines, so the "
                      "drift between runs cannot be estimated; repeat the runs, or compare the variants "
                      "inside one experiment (kperfdiff run), where they are interleaved")
    run_var = max(0.0, dev2 / df_run - within / runs)
    d = float(lb.mean() - la.mean())
    total = sa + sb + 2 * run_var
    if total == 0:
        lo = hi = d
        p = 0.0 if d != 0 else 1.0
        se, df = 0.0, float(la.size + lb.size - 2)
    else:
        parts = [(sa, la.size - 1), (sb, lb.size - 1), (2 * run_var, df_run)]
        df = total ** 2 / sum(v ** 2 / k for v, k in parts if v > 0 and k > 0)
        se = math.sqrt(total)
        lo, hi, p = t_interval(d, se, df, confidence)
    return Change(base.base, base.new, base.change, *percent_ends(lo, hi, better), confidence, p, False, method,
                  "", runs, se=se, df=df)


def unresolved_difference(values, overhead: float, unit: str = "") -> str | None:
    """Why latencies made by subtracting a measured ``overhead`` from timings (ctx's pipe cost,
    signal.prot's catch) cannot be reported, or None: when any of them is at or below zero, that
    timing was no longer than the overhead, so the difference is within the noise of the two
    timings and no latency, nor an interval made from it, can be given."""
    v = [float(x) for x in values]
    low = [x for x in v if not x > 0]
    if not low:
        return None
    u = f" {unit}" if unit else ""
    return (f"{len(low)} of {len(v)} intervals at or below zero after subtracting the overhead of "
            f"{overhead:.4g}{u} (lowest {min(v):.4g}{u}): the difference is within the noise of the two timings")


def centre_half_width(reps, *, confidence: float = DEFAULT_CONFIDENCE, min_reps: int = MIN_REPS) -> float:
    """Half-width, in percent of the centre, of the t interval of one nested sample's centre
    (the geometric mean of its per-repetition medians): (exp(t * se) - 1) * 100 with se the
    standard error of the log medians. nan with fewer than ``min_reps`` repetitions."""
    import numpy as np
    m = repetition_medians(reps)
    if m.size < min_reps or np.any(m <= 0):
        return math.nan
    lg = np.log(m)
    se = float(lg.std(ddof=1) / math.sqrt(lg.size))
    return (math.exp(t_quantile((1 + confidence) / 2, lg.size - 1) * se) - 1) * 100


def sample_detectable(reps, *, confidence: float = DEFAULT_CONFIDENCE, min_reps: int = MIN_REPS) -> float:
    """The smallest change, in percent, an unpaired comparison of this nested sample with another like it
    (as many repetitions, the same spread) would detect at 80% power (:func:`detectable_change`): se =
    sqrt(2) * the standard error of its log per-repetition medians, 2(n - 1) degrees of freedom. What a
    `bench` run or a stored result could tell apart from a run like it; nan under ``min_reps``."""
    import numpy as np
    m = repetition_medians(reps)
    if m.size < min_reps or np.any(m <= 0):
        return math.nan
    lg = np.log(m)
    se = float(lg.std(ddof=1) / math.sqrt(lg.size)) * math.sqrt(2)
    return detectable_change(0.0 if _constant(lg) else se, 2.0 * (lg.size - 1), confidence=confidence)


def ratio_half_width(low_pct: float, high_pct: float) -> float:
    """Relative half-width, in percent, of an interval of a change given as signed percents
    (speed ratio - 1): (sqrt(high ratio / low ratio) - 1) * 100, the half-width on the log
    scale the interval is made on. A change of +700% [+600, +800] is known to +-6.9%; nan
    when either end is missing or not above -100%."""
    if math.isnan(low_pct) or math.isnan(high_pct) or low_pct <= -100 or high_pct <= -100:
        return math.nan
    return (math.sqrt((1 + high_pct / 100) / (1 + low_pct / 100)) - 1) * 100


def fdr_significant(pvalues, *, alpha: float = DEFAULT_ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """Benjamini-Hochberg over one table: (q-values, significant flags) in input order.

    A cell is significant when its q-value is at most ``alpha``, which controls the expected
    share of false discoveries among the table's significant cells at ``alpha``; when nothing
    changed at all (an A/A table) it bounds the chance that ANY cell is called significant by
    ``alpha``. NaN p-values (cells without a test) are never significant and do not count.
    """
    import numpy as np
    q = benjamini_hochberg(pvalues)
    return q, np.asarray([bool(v <= alpha) if not math.isnan(v) else False for v in q], dtype=bool)


def welch_interval(a, b, *, confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float, float, float]:
    """Welch's t interval for mean(b) - mean(a).

    Returns (difference, low, high, two-sided p-value). Unequal variances,
    Welch-Satterthwaite degrees of freedom: the interval and p-value of
    ``scipy.stats.ttest_ind(b, a, equal_var=False)``. With a zero standard error the
    interval collapses to the difference and p is 0 if it is non-zero, else 1.
    The t quantile and tail come from ``scipy.special`` (``stdtrit``, ``stdtr``: what
    ``scipy.stats.t.ppf`` and ``t.sf`` compute, without their per-call overhead and import).
    """
    import numpy as np
    x = np.asarray(list(a), dtype=np.float64)
    y = np.asarray(list(b), dtype=np.float64)
    if x.size < 2 or y.size < 2:
        raise ValueError("Welch's interval needs at least 2 values per side")
    d = float(y.mean() - x.mean())
    se, df = welch_se_df(x, y)
    if se == 0:
        return d, d, d, (0.0 if d != 0 else 1.0)
    t = t_quantile((1 + confidence) / 2, df)
    return d, d - t * se, d + t * se, t_two_sided_p(d / se, df)


def benjamini_hochberg(pvalues) -> np.ndarray:
    """Benjamini-Hochberg q-values (false discovery rate adjusted p-values), in the input
    order: the k-th smallest of m p-values becomes the least of p_(j) * m / j over j >= k,
    at most 1 (what ``scipy.stats.false_discovery_control(method="bh")`` computes; the
    tests hold it to that). NaN p-values stay NaN and do not count in the number of tests."""
    import numpy as np
    p = np.asarray(list(pvalues), dtype=np.float64)
    q = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        v = np.clip(p[ok], 0.0, 1.0)
        m = v.size
        order = np.argsort(v, kind="stable")
        scaled = v[order] * m / np.arange(1, m + 1)
        adjusted = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)
        out = np.empty(m)
        out[order] = adjusted
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
