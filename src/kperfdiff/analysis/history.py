"""A benchmark's history across runs, and the change points in it.

Series
------
A **series** is one benchmark, parameter set and copy count on one **host**: the hardware and the
target a run measured on (target, host name, architecture, CPU model, CPU count). The store's
machine row is not the host: its fingerprint also holds the kernel release, the command line and
the kernel's knobs, so it changes with each kernel booted, and a kernel's change is what a
history is read for. Results of different hosts are never mixed in one series.

A **point** is what one run measured of the series (a bench run stores one result per benchmark,
an experiment one per repetition; a run's results are joined as `show` joins them): its centre,
the geometric mean of its per-repetition medians (:func:`kperfdiff.core.stats.nested_centre`), and
the half-width of that centre's 95% interval over its repetitions
(:func:`kperfdiff.core.stats.centre_half_width`). Points are in the order their runs started.

Change points
-------------
Apache Otava's E-divisive with a t-test (the two steps of ``otava.analysis.compute_change_points``,
its ``split`` and ``merge``; Fleming et al.,
"Hunter: Using Change Point Detection to Hunt for Performance Regressions", ICPE 2023) on the
points' centres, one value per point: windows of ``window`` points are split where the means on
either side differ most (the weak change points, at a relaxed p-value), then the weak points are
merged away bottom-up until every one left has a t-test p-value at most ``max_pvalue`` and a change
of its means of more than ``min_magnitude``. Then a guard, as Otava alone flags the newest point
when it is wild (one point against all before it): a change is a level that holds, so a change
point must have at least ``min_segment`` points on each side before the next one (or the series'
end), and stay significant in the same direction when the one point that drives it most is left
out of either side (a single-point deletion check); one that does not goes (the largest p-value
first), and the merge is run again.

Incremental: Otava's split needs only the tail of a series that gained points, given the weak
change points found before (``new_data``, ``old_weak_cp``): it starts again about four windows
before the end. What a series' analysis leaves (:class:`Analysed`: the points analysed, a digest
of them, the weak change points) is kept by the store; the next analysis of that series uses it
when the points it covered are unchanged (same result ids and centres in the same order), and
analyses the series whole otherwise (a result deleted or replaced, a run imported between them).

For each change point: the points on either side up to the neighbouring change points, their
centres (the geometric mean of the points' centres) with a 95% interval, and the change between
them as compare states it (:func:`kperfdiff.core.stats.nested_change` with each point one unit:
signed percent, positive = better, Welch's interval on the logarithms).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from dataclasses import dataclass, field

from kperfdiff.core import modes, stats
from kperfdiff.core.errors import InputError
from kperfdiff.core.records import Machine, Result, Run

# The detector's settings, and why (docs/finding-the-commit.md, "Change points").
WINDOW = 50            # Otava's default window: a change needs its neighbours within 50 points to be seen
MAX_PVALUE = 0.001     # Otava's default: over hundreds of series, a false change in about 1 of 1000 tests
MIN_MAGNITUDE = 0.01   # a shift of the mean under 1% is not reported: run-to-run drift of kernel benchmarks
MIN_SEGMENT = 2        # points on each side of a change: one alone is an outlier
OUTLIER_HALF = 2       # the Hampel filter's window: the point and 2 on either side
OUTLIER_K = 5.0        # ... a point further than 5 noise standard deviations from its local level
INSTALL = ("kperfdiff changes needs Apache Otava: install it with pip install --no-deps apache-otava==0.8.0 "
           "(make setup does, from requirements-nodeps.txt)")


@dataclass(frozen=True)
class Settings:
    window: int = WINDOW
    max_pvalue: float = MAX_PVALUE
    min_magnitude: float = MIN_MAGNITUDE
    min_segment: int = MIN_SEGMENT
    outlier_half: int = OUTLIER_HALF
    outlier_k: float = OUTLIER_K

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class Point:
    """What one run measured of a series."""
    run: Run
    results: list[int]          # the ids of its results (one for a bench run)
    centre: float               # nan when a repetition's median is not positive
    half_width_pct: float       # nan with fewer than stats.MIN_REPS repetitions
    reps: int
    n: int                      # interval values
    machine: Machine
    detectable_pct: float = math.nan     # what a comparison with a run like it would see (stats.sample_detectable)
    modes: tuple = ()                    # its modes (kperfdiff.core.modes.Modes) when it has several

    @property
    def kernel(self) -> str | None:
        return self.machine.facts.get("kernel_release")

    @property
    def commit(self) -> str | None:
        return self.run.options.get("commit") or None

    @property
    def subject(self) -> str | None:
        return self.run.options.get("commit_subject") or None

    @property
    def name(self) -> str:
        return f"{self.run.id} ({self.run.label})" if self.run.label else str(self.run.id)


@dataclass
class Series:
    benchmark: str
    params: dict
    copies: int
    host: str                   # the host's name as printed (unique among the series of one answer)
    host_key: tuple
    unit: str | None
    better: str | None
    points: list[Point] = field(default_factory=list)

    @property
    def key(self) -> str:
        """The series' identity, as the change-point cache keys it."""
        return json.dumps([self.benchmark, self.params, self.copies, list(self.host_key)], sort_keys=True)

    @property
    def name(self) -> str:
        params = "".join(f" {k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.benchmark}{params} -P {self.copies} on {self.host}"


def host_key(run: Run, machine: Machine) -> tuple:
    f = machine.facts
    return (run.target, f.get("hostname"), f.get("arch"), f.get("cpu_model"), f.get("cpus"))


def _host_names(keys: list[tuple]) -> dict[tuple, str]:
    """A short name per host: its host name (with the target when not local), numbered when two
    hosts would share one."""
    base = {}
    for k in keys:
        target, hostname = k[0], k[1] or "unknown host"
        base[k] = hostname if target == "local" else f"{target} ({hostname})"
    out, seen = {}, {}
    for k in keys:
        n = sum(1 for o in keys if base[o] == base[k])
        seen[base[k]] = seen.get(base[k], 0) + 1
        out[k] = base[k] if n == 1 else f"{base[k]} #{seen[base[k]]}"
    return out


def machine_matches(text: str, run: Run, machine: Machine, host: str) -> bool:
    """Whether --machine TEXT names this run's machine: its id, a prefix of its fingerprint, its host
    name, its target or the host's name as printed."""
    t = text.strip()
    return bool(t) and ((t.isdigit() and machine.id == int(t)) or (len(t) >= 4 and bool(machine.fingerprint)
                        and machine.fingerprint.startswith(t)) or t in (machine.facts.get("hostname"), run.target, host))


def build_series(results: list[Result], runs: dict[int, Run], machines: dict[int, Machine], *,
                 machine: str | None = None) -> list[Series]:
    """The series of stored results (in their runs' order, as Store.history gives them): one per
    benchmark, parameter set, copy count and host, each point one run's results joined. ``machine``:
    only the series of the hosts --machine names (a host is named when one of its runs' machines is,
    :func:`machine_matches`; its series is kept whole)."""
    groups: dict[tuple, dict[int, list[Result]]] = {}
    keys: dict[tuple, tuple] = {}
    for r in results:
        run = runs[r.run_id]
        m = machines.get(run.machine_id) or Machine()
        hk = host_key(run, m)
        k = (r.benchmark, json.dumps(r.params, sort_keys=True), r.copies, hk)
        groups.setdefault(k, {}).setdefault(run.id, []).append(r)
        keys[k] = hk
    names = _host_names(list(dict.fromkeys(keys.values())))
    out = []
    for k, by_run in groups.items():
        first = next(iter(by_run.values()))[0]
        s = Series(first.benchmark, first.params, first.copies, names[k[3]], k[3], first.unit, first.better)
        for run_id, rs in by_run.items():
            run = runs[run_id]
            m = machines.get(run.machine_id) or Machine()
            reps = [v for r in rs for v in r.repetitions.values()]
            found = modes.find_modes_in(reps) if reps else None
            s.points.append(Point(run, [r.id for r in rs], stats.nested_centre(reps) if reps else math.nan,
                                  stats.centre_half_width(reps) if reps else math.nan, len(reps),
                                  sum(len(v) for v in reps), m,
                                  stats.sample_detectable(reps) if reps else math.nan,
                                  found if found is not None and found.several else ()))
        if machine is None or any(machine_matches(machine, p.run, p.machine, s.host) for p in s.points):
            out.append(s)
    out.sort(key=lambda s: (s.benchmark, s.copies, json.dumps(s.params, sort_keys=True), s.host))
    return out


def parse_since(text: str | None) -> float | None:
    """--since: an ISO date or date and time (local time unless it names a zone, as the listings show
    times) -> seconds since 1970."""
    if text is None:
        return None
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InputError(f"--since {text!r} is not a date like 2026-11-26 or 2026-11-26T14:00") from None
    return when.timestamp()


# -- change points -------------------------------------------------------------------------
@dataclass
class Analysed:
    """What an analysis of a series leaves for the next: the points it covered (a digest of them,
    the last one's result id) and Otava's weak change points, [index, qhat] each."""
    settings: dict
    points: int
    last_result: int
    digest: str
    weak: list

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class Side:
    """The points on one side of a change point, up to the neighbouring one."""
    first: int                  # index of its first point in the series
    points: int
    measured: int               # of them, those not set aside as outliers
    centre: float               # geometric mean of those points' centres
    half_width_pct: float       # of its 95% interval over the points (nan under stats.MIN_REPS points)


@dataclass
class ChangePoint:
    index: int                  # the first point after the change
    pvalue: float               # Otava's t-test of the two sides
    before: Side
    after: Side
    change: stats.Change        # after against before: signed percent, positive = better


@dataclass
class Detection:
    series: Series
    changes: list[ChangePoint]
    analysed: Analysed
    analysed_from: int          # the first point Otava's split looked at again (0: the whole series)
    left_out: int = 0           # points without a centre (a median not above zero)
    outliers: list[int] = field(default_factory=list)   # the points set aside (indexes among those analysed)


def digest(points: list[Point]) -> str:
    h = hashlib.sha256()
    for p in points:
        h.update(f"{','.join(map(str, p.results))}:{p.centre!r};".encode())
    return h.hexdigest()[:32]


def first_pass_pvalue(max_pvalue: float) -> float:
    """The relaxed p-value of Otava's split step (as otava.analysis.compute_change_points sets it)."""
    return max_pvalue * 10 if max_pvalue < 0.05 else (max_pvalue * 2 if max_pvalue < 0.5 else max_pvalue)


def _otava():
    try:
        from otava import analysis
        from otava.change_point_divisive.base import ChangePoint as OtavaChangePoint
    except ImportError:
        raise InputError(INSTALL) from None
    return analysis, OtavaChangePoint


def local_levels(values: list[float], half: int = OUTLIER_HALF) -> list[float]:
    """Each point's local level: the median of the ``2 * half + 1`` points around it (fewer at the ends)."""
    return [_middle(sorted(values[max(0, i - half):i + half + 1])) for i in range(len(values))]


def outliers(values: list[float], half: int = OUTLIER_HALF, k: float = OUTLIER_K) -> list[int]:
    """The points a Hampel filter sets aside: further from their local level (:func:`local_levels`)
    than ``k`` times the series' noise (a robust estimate of its standard deviation, from the
    differences between neighbours). An isolated point, or two in a row, off the level of their
    neighbours; a level held by three points (two at the series' end) is its own local level, and
    stays. Three or more in a row off their local levels are a level too, not outliers: in a short
    series the noise estimate, from a few differences, can be far under the noise (99.25 99.34
    99.36 120.39 120.39 119.24: 0.095 from its five differences, under a tenth of the 1% noise),
    which would set the whole new level aside and leave the change before it no point to measure."""
    if len(values) < 3:
        return []
    levels = local_levels(values, half)
    # the noise's standard deviation from the differences of neighbours (a step or an outlier
    # makes one or two large ones, which the median ignores): 1.4826 MAD / sqrt(2)
    spread = 1.4826 * _middle(sorted(abs(b - a) for a, b in zip(values, values[1:]))) / math.sqrt(2)
    if spread == 0:
        # most neighbours are equal: exact counts (a deterministic guest), where a point off its
        # neighbours is the kernel's work that changed, never noise
        return []
    off = [abs(v - m) > k * spread for v, m in zip(values, levels)]
    return [i for i in range(len(values)) if off[i] and not _in_run_of_three(off, i)]


def _in_run_of_three(flags: list[bool], i: int) -> bool:
    """Whether flags[i] is one of three or more true flags in a row."""
    return any(all(flags[j:j + 3]) for j in range(max(0, i - 2), min(i, len(flags) - 3) + 1))


def _middle(sorted_values: list[float]) -> float:
    n = len(sorted_values)
    return sorted_values[n // 2] if n % 2 else (sorted_values[n // 2 - 1] + sorted_values[n // 2]) / 2


def _holds(values: list[float], lo: int, at: int, hi: int, s: Settings, tester, aside: set[int]) -> bool:
    """Whether the change at ``at`` (between values[lo:at] and values[at:hi]) holds: each side has at
    least ``min_segment`` points, and the change stays significant, in the same direction, with the one
    point that drives it most left out of either side (the highest of the higher side, the lowest of
    the lower): a single point never makes a change. A side with ``min_segment`` measured points is
    tested on those alone, not with the local levels that stand in for its outliers (``aside``): a
    stand-in is the median of its neighbours and makes its side look tighter than it was measured
    (counted with them, null series of 6 points with 1% noise made a change 3.3% of the time when a
    point was set aside, 0.06% otherwise). A side with fewer keeps its stand-ins, so that the two
    newest points of a new level, the first set aside, are still a change."""
    if min(at - lo, hi - at) < s.min_segment:
        return False
    left, right = (_measured(values, a, b, aside, s.min_segment) for a, b in ((lo, at), (at, hi)))
    up = sum(right) / len(right) > sum(left) / len(left)
    for side in (left, right):
        rest = list(side)
        rest.remove((max if (side is right) == up else min)(side))
        a, b = (rest, right) if side is left else (left, rest)
        st = tester.compare(a, b)
        if not (st.pvalue <= s.max_pvalue and (st.mean_2 > st.mean_1) == up):
            return False
    return True


def _measured(values: list[float], lo: int, hi: int, aside: set[int], enough: int) -> list[float]:
    """values[lo:hi] without the stand-ins of the outliers ``aside``, if ``enough`` are left."""
    kept = [values[i] for i in range(lo, hi) if i not in aside]
    return kept if len(kept) >= enough else values[lo:hi]


def _guard(cps: list, values: list[float], s: Settings, analysis, aside: set[int]) -> list:
    """Drop the change points that do not hold (:func:`_holds`), the one of the largest p-value first,
    then merge again (its neighbours' sides have grown)."""
    tester = analysis.TTestSignificanceTester(s.max_pvalue)
    while cps:
        bounds = [0] + [int(c.index) for c in cps] + [len(values)]
        weak = [j for j in range(len(cps))
                if not _holds(values, bounds[j], bounds[j + 1], bounds[j + 2], s, tester, aside)]
        if not weak:
            return cps
        del cps[max(weak, key=lambda j: cps[j].stats.pvalue)]
        cps = analysis.merge(_restated(cps, values, tester), values, s.max_pvalue, s.min_magnitude)
    return cps


def _restated(cps: list, values: list[float], tester) -> list:
    """The change points ``cps`` (in order) with their t-tests redone between their neighbours."""
    intervals = tester.get_intervals(cps)
    return [tester.change_point(c.to_candidate(), values, intervals) for c in cps]


def _join_short(cps: list, values: list[float], s: Settings, analysis) -> list:
    """Otava's weak change points (in order) with every level shorter than ``min_segment`` points
    joined to a neighbour before the merge: a level at an end of the series to its one neighbour,
    then the others to the neighbour whose mean is nearer their own. A level that short
    is never a change's side (:func:`_holds`), but left to the merge it can take the real change
    with it: in 100.1 101.3 99.1 121.2 119.7 119.7 the split marks 3 and 4, the merge drops 3 (its
    t-test has the single point 121.2 on one side, and the larger p-value) and then 4, which alone
    is no change; 121.2 joined to its right leaves the one change, at 3."""
    tester = analysis.TTestSignificanceTester(s.max_pvalue)
    while cps:
        bounds = [0] + [int(c.index) for c in cps] + [len(values)]
        short = [j for j in range(len(bounds) - 1) if bounds[j + 1] - bounds[j] < s.min_segment]
        if not short:
            return cps
        # the level values[bounds[j]:bounds[j + 1]] (cps[j - 1] and cps[j] its ends): one at an end of the
        # series first, as it has one neighbour to join
        j = next((j for j in short if j in (0, len(cps))), short[0])
        mean = _mean(values[bounds[j]:bounds[j + 1]])
        gap = [abs(mean - _mean(values[bounds[k]:bounds[k + 1]])) if 0 <= k < len(bounds) - 1 else math.inf
               for k in (j - 1, j + 1)]
        del cps[j - 1 if gap[0] <= gap[1] else j]
        cps = _restated(cps, values, tester)
    return cps


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def detect(series: Series, previous: dict | None = None, settings: Settings = Settings()) -> Detection:
    """The change points of one series; ``previous``: what the last analysis of it left (the store's
    cache, :class:`Analysed` as a dict), used when it covered an unchanged start of these points."""
    analysis, OtavaChangePoint = _otava()
    points = [p for p in series.points if math.isfinite(p.centre) and p.centre > 0]
    centres = [float(p.centre) for p in points]
    n = len(centres)
    # Otava sees each outlier as the median around it (a list: its detector slices lists, not arrays)
    aside = outliers(centres, settings.outlier_half, settings.outlier_k)
    levels = local_levels(centres, settings.outlier_half)
    values = [levels[i] if i in aside else v for i, v in enumerate(centres)]
    old = None
    if previous and previous.get("settings") == settings.as_dict() and 0 < previous["points"] <= n \
            and points[previous["points"] - 1].results[-1] == previous["last_result"] \
            and digest(points[:previous["points"]]) == previous["digest"]:
        old = previous
    weak_before = [OtavaChangePoint(index=int(i), qhat=float(q), stats=None) for i, q in (old or {}).get("weak", [])]
    if old and old["points"] == n:          # nothing new: the weak points stand, their statistics are redone
        weak = _restated(weak_before, values, analysis.TTestSignificanceTester(settings.max_pvalue))
        start = n
    elif n >= 2:
        new = n - old["points"] if old else None
        weak = analysis.split(values, settings.window, first_pass_pvalue(settings.max_pvalue), new_points=new,
                              old_cp=weak_before if old else None)
        start = _tail_start(n, new, settings.window, weak_before) if old else 0
    else:
        weak, start = [], 0
    # compute_change_points's two steps, but merge gets a copy: it deletes from the list it is given,
    # and compute_change_points returns that same list as the weak points (otava 0.8.0)
    cps = analysis.merge(_join_short(list(weak), values, settings, analysis), values, settings.max_pvalue,
                         settings.min_magnitude)
    cps = _guard(sorted(cps, key=lambda c: c.index), values, settings, analysis, set(aside))
    analysed = Analysed(settings.as_dict(), n, points[-1].results[-1] if points else 0, digest(points),
                        [[int(c.index), float(c.qhat)] for c in weak])
    bounds = [0] + [int(c.index) for c in cps] + [n]
    changes = []
    kept = set(range(n)) - set(aside)
    for i, c in enumerate(cps):
        before = [centres[j] for j in range(bounds[i], bounds[i + 1]) if j in kept]
        after = [centres[j] for j in range(bounds[i + 1], bounds[i + 2]) if j in kept]
        changes.append(ChangePoint(int(c.index), float(c.stats.pvalue), _side(bounds[i], bounds[i + 1], before),
                                   _side(bounds[i + 1], bounds[i + 2], after),
                                   stats.nested_change([[v] for v in before], [[v] for v in after],
                                                       series.better or "lower")))
    return Detection(series, changes, analysed, start, len(series.points) - n, aside)


def _tail_start(n: int, new: int, window: int, old_weak: list) -> int:
    """Where Otava's incremental split starts again (its own rule in otava.analysis.split)."""
    max_start = n - (new / window + 4) * window
    start = 0
    for c in old_weak:
        if c.index < max_start:
            start = c.index
    for s in range(0, n, int(window / 2)):
        if start < s < max_start:
            start = s
    return start


def _side(first: int, end: int, values: list[float]) -> Side:
    """The points first..end-1, of ``values`` the centres of those not set aside as outliers."""
    reps = [[v] for v in values]
    return Side(first, end - first, len(values), stats.nested_centre(reps), stats.centre_half_width(reps))


def point_of(d: Detection, index: int) -> Point:
    """The point at ``index`` among those analysed (the points with a centre)."""
    return [p for p in d.series.points if math.isfinite(p.centre) and p.centre > 0][index]
