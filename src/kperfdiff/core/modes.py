"""Modes: a benchmark whose intervals fall into separate clusters, and comparisons made within them.

A benchmark can be multimodal on a host (an interval lands near 700 ns or near 1,200 ns, as a
cache or a sibling thread falls one way or the other). The share of intervals in each mode then
moves from one repetition to the next by chance, and a repetition's median follows that mix
rather than the kernel: two variants can differ by 10% through the mix alone while each mode
moved the other way. So modes are found per side (:func:`find_modes`), named on every output,
and a comparison of two sides with the same modes is made within each mode and combined
(:func:`within_modes_change`); a comparison whose modes do not line up gives no percentage.

The test (:func:`find_modes`), on the logarithms of the values:

1. a Gaussian kernel density estimate on a grid of 512 points, by binning and convolution, with
   Silverman's robust bandwidth 0.9 * min(sd, IQR / 1.34) * n^(-1/5);
2. its local maxima are candidate modes; two neighbours are one mode while the density at the
   valley between them is above ``VALLEY`` (0.6) of the lower peak;
3. a mode must hold at least ``MIN_SHARE`` (10%) of the values and ``MIN_COUNT`` (10) of them,
   and lie at least ``SEPARATION`` (4) robust standard deviations (MAD * 1.4826) of the wider of the
   two from its neighbour (a scattered tail of disturbed intervals is not a mode); otherwise it is merged with the neighbour across
   its shallower valley, and the checks are made again;
4. for a sample of repetitions (:func:`find_modes_in`), at least half of the repetitions must hold
   intervals in more than one mode: a level that shifts between repetitions is not a mode.

Its false-detection rate on unimodal data is measured by ``tests/core/test_modes.py`` (normal,
log-normal, Student's t with 3 degrees of freedom, gamma and a normal with 5% outliers, at 30 to
2,000 values: 0 detections in 2,000 samples when this was written; the test holds it under 1%),
and its power on two modes by the same test.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from kperfdiff.core import stats

VALLEY = 0.6          # two peaks are one mode while the valley between them is above this share of the lower
MIN_SHARE = 0.10      # of the values, in every mode
MIN_COUNT = 10        # values, in every mode
SEPARATION = 4.0      # robust standard deviations of the wider mode between neighbouring mode centres
GRID = 512

METHOD = ("modes: per side, clusters the intervals of one process fall into (at least half of the "
          "repetitions hold intervals in more than one): peaks of a kernel density estimate of the log intervals (Silverman's robust "
          "bandwidth) separated by a valley below {v:.0%} of the lower peak, each with at least {s:.0%} and "
          "{c} of the values and {k:g} robust sd of the wider mode from its neighbour; two sides with the same modes "
          "are compared within each mode (each repetition's median of its intervals in that mode) and the "
          "per-mode changes combined with DerSimonian-Laird random-effects weights").format(v=VALLEY, s=MIN_SHARE, c=MIN_COUNT,
                                                                          k=SEPARATION)


@dataclass(frozen=True)
class Modes:
    """The modes of one sample: their centres (the median of each mode's values), ascending; the share
    of the values in each; and the values that separate neighbouring modes."""

    centres: tuple[float, ...]
    shares: tuple[float, ...]
    cuts: tuple[float, ...] = ()

    @property
    def several(self) -> bool:
        return len(self.centres) > 1

    def index(self, value: float) -> int:
        """The mode a value falls in."""
        return bisect.bisect_right(self.cuts, value)

    def split(self, reps) -> list[list[list[float]]]:
        """Per mode, each repetition's values in that mode (an empty list where it has none)."""
        out = [[[] for _ in reps] for _ in self.centres]
        for i, values in enumerate(reps):
            for v in values:
                out[self.index(float(v))][i].append(float(v))
        return out

    def as_list(self) -> list[dict]:
        return [{"centre": c, "share": s} for c, s in zip(self.centres, self.shares)]

    @classmethod
    def from_list(cls, items: list[dict]) -> "Modes":
        """The modes :meth:`as_list` wrote (their cuts are not kept)."""
        return cls(tuple(m["centre"] for m in items), tuple(m["share"] for m in items))


def single(values) -> Modes:
    import numpy as np
    v = np.asarray(values, dtype=np.float64)
    return Modes((float(np.median(v)) if v.size else math.nan,), (1.0,))


def find_modes(values) -> Modes:
    """The modes of a sample's values (see the module's docstring for the test). Values that are not
    positive and finite are left out; a sample of fewer than 2 * MIN_COUNT values has one mode."""
    import numpy as np
    v = np.asarray([float(x) for x in values], dtype=np.float64)
    v = v[np.isfinite(v) & (v > 0)]
    if v.size < 2 * MIN_COUNT:
        return single(v)
    x = np.sort(np.log(v))
    sd = float(x.std(ddof=1))
    q1, q3 = np.percentile(x, [25, 75])
    spread = min(sd, (q3 - q1) / 1.34) or sd
    h = 0.9 * spread * x.size ** -0.2
    if not h > 1e-9 * max(1.0, abs(x[0]), abs(x[-1])):      # (nearly) equal values: one mode
        return single(v)
    lo, hi = x[0] - 3 * h, x[-1] + 3 * h
    step = (hi - lo) / (GRID - 1)
    counts, _ = np.histogram(x, bins=GRID, range=(lo - step / 2, hi + step / 2))
    half = int(math.ceil(4 * h / step))
    kernel = np.exp(-0.5 * (np.arange(-half, half + 1) * step / h) ** 2)
    density = np.convolve(counts, kernel, mode="same") if half < GRID else counts.astype(float)
    grid = lo + step * np.arange(GRID)
    peaks = [i for i in range(1, GRID - 1) if density[i] > density[i - 1] and density[i] >= density[i + 1]]
    if len(peaks) < 2:
        return single(v)
    peaks = _merge_shallow(peaks, density)
    cuts = [_valley_middle(grid, density, a, b) for a, b in zip(peaks, peaks[1:])]
    cuts = _merge_small_or_close(x, cuts, density, grid)
    if not cuts:
        return single(v)
    parts = np.split(x, np.searchsorted(x, cuts))
    return Modes(tuple(float(np.exp(np.median(p))) for p in parts), tuple(p.size / x.size for p in parts),
                 tuple(float(np.exp(c)) for c in cuts))


MIXED_REPS = 0.5      # of the repetitions must hold intervals in more than one mode


def find_modes_in(reps) -> Modes:
    """The modes of a nested sample (a list of repetitions' interval values): :func:`find_modes` on all
    its intervals, kept only when at least MIXED_REPS of the repetitions hold intervals in more than one
    mode. Modes are clusters the intervals of one process fall into; a machine whose level shifts
    between repetitions (each one wholly at one level) has no modes: the repetitions' own spread, and
    pairing by round, deal with that."""
    m = find_modes([v for r in reps for v in r])
    if not m.several:
        return m
    filled = [r for r in reps if len(r)]
    mixed = sum(1 for r in filled if len({m.index(float(v)) for v in r}) > 1)
    return m if filled and mixed >= MIXED_REPS * len(filled) else single([v for r in reps for v in r])


def _valley_middle(grid, density, a: int, b: int) -> float:
    """Where to cut between the peaks at grid points a and b: the middle of the valley's floor (the points
    within 1% of the lower peak of its lowest density), so that a wide empty gap is cut half-way and a
    side shifted by a few percent stays on its side of the cut."""
    import numpy as np
    seg = density[a:b + 1]
    floor = np.flatnonzero(seg <= seg.min() + 0.01 * min(density[a], density[b]))
    return float(grid[a + (floor[0] + floor[-1]) // 2])


def _merge_shallow(peaks: list[int], density) -> list[int]:
    """Peaks of the density, neighbours merged (the lower one dropped) while the valley between them is
    above VALLEY of the lower peak."""
    peaks = list(peaks)
    changed = True
    while changed and len(peaks) > 1:
        changed = False
        for j in range(len(peaks) - 1):
            a, b = peaks[j], peaks[j + 1]
            valley = float(density[a:b + 1].min())
            if valley > VALLEY * min(density[a], density[b]):
                peaks.pop(j if density[a] < density[b] else j + 1)
                changed = True
                break
    return peaks


def _merge_small_or_close(x, cuts: list[float], density, grid) -> list[float]:
    """The cuts left once every mode holds MIN_SHARE and MIN_COUNT of the values and lies SEPARATION
    within-mode robust sds from its neighbours: the offending mode is joined to its neighbour across
    the shallower (higher) of its valleys, one at a time."""
    import numpy as np

    def depth(c):
        return float(np.interp(c, grid, density))

    cuts = list(cuts)
    while cuts:
        parts = np.split(x, np.searchsorted(x, cuts))
        sizes = [p.size for p in parts]
        meds = [float(np.median(p)) if p.size else math.nan for p in parts]
        mads = [float(np.median(np.abs(p - m))) * 1.4826 if p.size > 1 else 0.0 for p, m in zip(parts, meds)]
        bad = None
        for i, n in enumerate(sizes):
            if n < MIN_COUNT or n < MIN_SHARE * x.size:
                bad = ("mode", i)
                break
        if bad is None:
            for i in range(len(parts) - 1):
                if meds[i + 1] - meds[i] < SEPARATION * max(mads[i], mads[i + 1]):
                    bad = ("cut", i)
                    break
        if bad is None:
            return cuts
        kind, i = bad
        if kind == "cut":
            cuts.pop(i)
        else:      # mode i: drop the cut on its side with the higher density (the shallower valley)
            left, right = (i - 1 if i > 0 else None), (i if i < len(cuts) else None)
            if left is None or (right is not None and depth(cuts[right]) >= depth(cuts[left])):
                cuts.pop(right)
            else:
                cuts.pop(left)
    return cuts


def describe(m: Modes, fmt=lambda v: f"{v:.4g}") -> str:
    """``2 modes: 702 (45%), 1210 (55%)``; empty for one mode."""
    if not m.several:
        return ""
    return f"{len(m.centres)} modes: " + ", ".join(f"{fmt(c)} ({s:.0%})" for c, s in zip(m.centres, m.shares))


@dataclass(frozen=True)
class ModalChange:
    """A comparison made within modes: the combined change (a :class:`stats.Change`, or None when no
    percentage can be given), the change within each mode, and why there is no percentage."""

    change: stats.Change | None
    per_mode: tuple[stats.Change | None, ...]
    shares_a: tuple[float, ...]
    shares_b: tuple[float, ...]
    reason: str = ""


def within_modes_change(modes_a: Modes, modes_b: Modes, base_reps, new_reps, better: str, *,
                        base_rounds=None, new_rounds=None, confidence: float = stats.DEFAULT_CONFIDENCE,
                        min_reps: int = stats.MIN_REPS) -> ModalChange:
    """Compare two samples like with like: when both sides have the same number of modes, the k-th mode
    of one is compared with the k-th of the other (each side cut at its own valleys); when they have not,
    both sides are cut at the valleys of the side with more modes (a mode that holds too few of the
    other side's values to be found there is still where they fall). Each repetition
    summarised by the median of its intervals in that mode, paired by round when rounds are given
    (:func:`stats.paired_change`) else unpaired (:func:`stats.nested_change`). The per-mode changes of
    log ratio d_k and standard error se_k are combined by DerSimonian and Laird's random-effects
    weights 1 / (se_k^2 + tau^2), tau^2 the spread between the modes' shifts beyond their standard
    errors (a kernel change is expected to move each mode alike; where they differ, the interval
    widens); degrees of freedom the smallest of the modes'. There is no combined change, and the reason
    says what differs, when one mode moved significantly one way and another the other way, when a mode
    holding MIN_SHARE of one side's values cannot be compared and the share of intervals in it differs
    between the sides (the change would be the mix's), or when no mode has a test."""
    import numpy as np
    if len(modes_a.centres) != len(modes_b.centres):      # compare within the richer side's modes
        cut = modes_a if len(modes_a.centres) > len(modes_b.centres) else modes_b
        split_a, split_b = cut.split(base_reps), cut.split(new_reps)
    else:                                                   # each side cut at its own valleys
        split_a, split_b = modes_a.split(base_reps), modes_b.split(new_reps)
    shares_a, shares_b = _shares(split_a), _shares(split_b)
    per: list[stats.Change | None] = []
    for ra, rb in zip(split_a, split_b):
        ch = stats.change_in_rounds(ra, rb, better, base_rounds=base_rounds, new_rounds=new_rounds,
                                    confidence=confidence, min_reps=min_reps)
        per.append(ch if ch is not None and not math.isnan(ch.p) else None)
    missing = [i for i, c in enumerate(per) if c is None and max(shares_a[i], shares_b[i]) >= MIN_SHARE]
    moved = [i for i in missing if _shares_differ(split_a[i], split_b[i], base_reps, new_reps, confidence)]
    if moved:
        i = moved[0]
        return ModalChange(None, tuple(per), shares_a, shares_b,
                           f"the modes' proportions differ (mode {i + 1} holds {shares_a[i]:.0%} of the baseline's "
                           f"intervals and {shares_b[i]:.0%} of the variant's) and mode {i + 1} was not measured on "
                           f"both sides in {min_reps} repetitions, so like cannot be compared with like")
    tested = [c for c in per if c is not None]
    if not tested:
        return ModalChange(None, tuple(per), shares_a, shares_b,
                           f"no mode has {min_reps} repetitions with intervals in it on both sides")
    sign = -1.0 if better == "lower" else 1.0
    ups = [c for c in tested if c.p < 1 - confidence and c.change > 0]
    downs = [c for c in tested if c.p < 1 - confidence and c.change < 0]
    if ups and downs:
        return ModalChange(None, tuple(per), shares_a, shares_b,
                           "the modes moved in opposite directions (" + ", ".join(
                               f"mode {i + 1}: {c.change:+.1f}%" for i, c in enumerate(per) if c is not None)
                           + "), so no one change describes them")
    d = np.asarray([sign * math.log(1 + c.change / 100) for c in tested])     # log(new/base)
    se = np.asarray([c.se for c in tested])
    df = min(c.df for c in tested)
    if np.any(se == 0):
        dd, s = float(d[se == 0].mean()), 0.0
    else:
        w = 1 / se ** 2
        fixed = float((w * d).sum() / w.sum())
        q = float((w * (d - fixed) ** 2).sum())
        tau2 = max(0.0, (q - (len(d) - 1)) / (w.sum() - (w ** 2).sum() / w.sum())) if len(d) > 1 else 0.0
        w = 1 / (se ** 2 + tau2)
        dd = float((w * d).sum() / w.sum())
        s = float(math.sqrt(1 / w.sum()))
    lo, hi, p = stats.t_interval(dd, s, df, confidence)
    combined = stats.Change(stats.nested_centre(base_reps), stats.nested_centre(new_reps),
                            (math.exp(sign * dd) - 1) * 100, *stats.percent_ends(lo, hi, better), confidence, p,
                            False, METHOD,
                            se=s, df=float(df), pairs=min((c.pairs for c in tested), default=0))
    return ModalChange(combined, tuple(per), shares_a, shares_b)


def _shares(split) -> tuple[float, ...]:
    """The share of all the values in each mode of a split (:meth:`Modes.split`)."""
    counts = [sum(len(r) for r in mode) for mode in split]
    total = sum(counts) or 1
    return tuple(c / total for c in counts)


def _shares_differ(mode_a, mode_b, reps_a, reps_b, confidence: float) -> bool:
    """Whether the share of each repetition's intervals that fall in one mode differs between the sides
    (Welch's t on the per-repetition shares, two-sided at 1 - confidence; a share of 0 on one side
    against shares above 0 on every repetition of the other, when Welch has no spread to work with)."""
    sa = [len(m) / len(r) for m, r in zip(mode_a, reps_a) if len(r)]
    sb = [len(m) / len(r) for m, r in zip(mode_b, reps_b) if len(r)]
    if len(sa) < 2 or len(sb) < 2:
        return True
    _d, _lo, _hi, p = stats.welch_interval(sa, sb, confidence=confidence)
    return p < 1 - confidence


