"""The kperfdiff ranking: where does kernel A spend more time than kernel B.

:func:`diff_profiles` is pure computation (profiles in, :class:`DiffResult`
out); the ``diff`` command (:mod:`kperfdiff.commands.diff`) loads the inputs, calls
it and writes the rendered result and any flame graph or folded files.

Method
------
* A function's **share** on one profile is its weight (self, or children
  with ``--children``) divided by the profile's total weight, in percent.
  The denominator is every sample of the profile, kernel and user alike,
  as ``perf report`` does by default, so a kernel function's share here is
  the same number perf prints and the shares of both sides are comparable
  even when one side spends more of its time in user space.
* Names are normalised first (``.isra.N``, ``.constprop.N``, ``.cold``,
  ``__pfx_``...; :mod:`kperfdiff.symbols.normalise`): one function is one
  row. When normalisation merges several symbols of one profile, their
  children weight is recounted from the stacks so a sample counts once.
* A side of several profiles (repeated runs) has the mean of the
  per-profile shares as its share.
* **Common** functions appear (weight > 0) on both sides and are ranked by
  ``|share A - share B|`` (percentage points), largest first; functions
  found on one side only are ranked by their share on that side.
* **Equivalence** (unless ``no_equivalence``): a role of the equivalence
  table (:mod:`kperfdiff.symbols.equivalence`) whose members appear on both
  sides, each side having a member the other lacks, becomes one common row
  ``[role]`` (its members named per side); its members leave the other
  lists. Its self weight is the sum of the members'; its children weight
  counts each sample once (from the stacks; without stacks, the largest
  member's).
* **Per operation** (``per_op``): value = share x CPU time / operations in
  nanoseconds, per profile; CPU time is ``meta['cpu_time_ns']``, else the
  profile's total weight when that is in nanoseconds (cpu-clock,
  task-clock); operations are ``meta['ops']`` (or ``--ops``). Rows are
  ranked by the absolute difference of ns/op.
* **Significance** (both sides with at least 2 profiles; 3 or more
  recommended): per row, Welch's t interval (95%) of mean B - mean A over
  the per-profile values (:func:`kperfdiff.stats.welch_interval`) and its
  p-value; Benjamini-Hochberg q-values over every row of every section
  (:func:`kperfdiff.stats.benjamini_hochberg`). A row is significant only
  when its interval excludes 0 and q < 0.05.
"""
from __future__ import annotations

import math
from pathlib import PurePath as Path
from dataclasses import dataclass, field

from . import stats
from .errors import InputError
from .ingest.profile import Profile
from .symbols.equivalence import load_roles
from .symbols.normalise import normalise

DEFAULT_TOP = 5
SCOPES = ("kernel", "user", "all")
_NS_EVENTS = {"cpu-clock", "task-clock"}


@dataclass
class DiffOptions:
    top: int = DEFAULT_TOP           # rows per section when rendering; 0 = all
    scope: str = "kernel"
    labels: tuple[str, str] | None = None
    children: bool = False
    per_op: bool = False
    equivalence: bool = True
    maps: tuple = ()
    normalise: bool = True
    confidence: float = stats.DEFAULT_CONFIDENCE
    alpha: float = 0.05
    ops: tuple = (None, None)        # operation counts for sides without meta['ops']
    # How common rows are scored and ranked: "absdiff" (the study's |B - A|),
    # or perf diff's "delta" (B - A), "ratio" (B / A) and "wdiff" (w_b*B - w_a*A).
    compute: str = "absdiff"
    wdiff_weights: tuple = (1.0, 1.0)


@dataclass
class Row:
    symbol: str                       # display name (function, or "[role]")
    value_a: float                    # mean share (%) or ns/op on side A
    value_b: float
    values_a: list[float]             # per profile
    values_b: list[float]
    role: str | None = None
    members_a: list[str] = field(default_factory=list)
    members_b: list[str] = field(default_factory=list)
    kernel: bool = True
    shares_a: list[float] = field(default_factory=list)  # per-profile shares (%) even in per-op mode
    shares_b: list[float] = field(default_factory=list)
    ci: tuple[float, float] | None = None                 # of B - A
    p: float | None = None
    q: float | None = None
    significant: bool | None = None

    score: float = math.nan          # the --compute value the common list is ranked by

    @property
    def delta(self) -> float:
        """Signed change B - A."""
        return self.value_b - self.value_a

    @property
    def diff(self) -> float:
        return abs(self.value_b - self.value_a)


@dataclass
class SideInfo:
    label: str
    sources: list[str]
    events: list[str]
    samples: list[int]
    total_weight: list[float]
    weight_unit: list[str]
    arch: str | None


@dataclass
class DiffResult:
    options: DiffOptions
    labels: tuple[str, str]
    side_a: SideInfo
    side_b: SideInfo
    common: list[Row]
    only_a: list[Row]
    only_b: list[Row]
    unit: str                       # "%" or "ns/op"
    significance: bool              # tested
    warnings: list[str] = field(default_factory=list)
    method: str = ""
    # Folded stacks per side after normalisation, roles and scope:
    # stack string (root first, ";"-joined, kernel frames suffixed _[k]) -> weight,
    # and per side the sum of the profiles' total weights (the share denominators).
    folded_a: dict[str, float] = field(default_factory=dict)
    folded_b: dict[str, float] = field(default_factory=dict)
    total_a: float = 0.0
    total_b: float = 0.0
    # member name -> "[role]" (or "" for a dispatch frame to skip), for flame graphs
    active_roles: dict[str, str] = field(default_factory=dict)


# -- per-profile measurement ---------------------------------------------------

class _Measured:
    """One profile's weights per row key, in the diff's scope."""

    def __init__(self, prof: Profile, opts: DiffOptions):
        self.prof = prof
        self.key_of: dict[int, tuple[bool, str]] = {}
        members: dict[tuple[bool, str], list[int]] = {}
        scope = opts.scope
        for i, s in enumerate(prof.symbols):
            if scope == "kernel" and not s.kernel or scope == "user" and s.kernel:
                continue
            k = (bool(s.kernel), normalise(s.name) if opts.normalise else s.name)
            self.key_of[i] = k
            members.setdefault(k, []).append(i)
        self.members = members
        w = prof.children_weight if opts.children else prof.self_weight
        self.weight: dict[tuple[bool, str], float] = {}
        merged = {k: set(ix) for k, ix in members.items() if len(ix) > 1}
        exact = {}
        if opts.children and merged and prof.stacks:
            exact = _union_weights(prof, merged)
        for k, ix in members.items():
            if k in exact:
                v = exact[k]
            else:
                v = float(sum(w[i] for i in ix))
            if v > 0:
                self.weight[k] = v
        self.total = float(prof.total_weight)

    def share(self, key) -> float:
        return self.weight.get(key, 0.0) / self.total * 100.0 if self.total > 0 else 0.0


def _union_weights(prof: Profile, groups: dict) -> dict:
    """Weight of the samples whose stack holds any symbol of each group (once per sample)."""
    gof: dict[int, list] = {}
    for g, ix in groups.items():
        for i in ix:
            gof.setdefault(i, []).append(g)
    out = {g: 0.0 for g in groups}
    wanted = frozenset(gof)
    for stack, w in prof.stacks.items():
        if wanted.isdisjoint(stack):
            continue
        hit = set()
        for i in stack:
            gs = gof.get(i)
            if gs:
                hit.update(gs)
        for g in hit:
            out[g] += w
    return out


def _cpu_time_ns(prof: Profile) -> float | None:
    v = prof.meta.get("cpu_time_ns")
    if v:
        return float(v)
    if prof.weight_unit == "ns" or (prof.weight_unit == "period" and prof.event.split(":")[0] in _NS_EVENTS):
        return float(prof.total_weight)
    return None


def _per_op_factor(prof: Profile, ops_override) -> float:
    ops = prof.meta.get("ops") or ops_override
    if not ops:
        raise InputError(f"--per-op needs the number of benchmark operations of {prof.source}; "
                         f"profile a stored benchmark run or give --ops")
    cpu = _cpu_time_ns(prof)
    if cpu is None:
        raise InputError(f"--per-op needs the CPU time of {prof.source}, which neither records it nor "
                         f"weighs samples in nanoseconds (cpu-clock or task-clock with periods)")
    return cpu / float(ops) / 100.0   # share (%) -> ns/op


# -- labels ------------------------------------------------------------------

def _stem(source: str) -> str:
    name = Path(source).name
    for ext in (".perf.data", ".data", ".script", ".folded", ".report", ".txt"):
        if name.endswith(ext) and len(name) > len(ext):
            return name[:-len(ext)]
    return Path(source).stem or name


def _side_label(profs: list[Profile]) -> str:
    # A run label names a side better than the architecture both sides share.
    labels = [p.label if p.label and p.label not in (p.arch, Path(p.source).stem) else _stem(p.source)
              for p in profs]
    if len(set(labels)) == 1:
        return labels[0]
    return f"{labels[0]}+{len(labels) - 1}"


def _default_labels(a: list[Profile], b: list[Profile]) -> tuple[str, str]:
    arch_a = {p.arch for p in a}
    arch_b = {p.arch for p in b}
    if len(arch_a) == 1 and len(arch_b) == 1 and None not in arch_a | arch_b and arch_a != arch_b:
        la, lb = next(iter(arch_a)), next(iter(arch_b))
    else:
        la, lb = _side_label(a), _side_label(b)
    if la == lb:
        la, lb = f"{la} (A)", f"{lb} (B)"
    return la, lb


def _side_info(profs: list[Profile], label: str) -> SideInfo:
    arches = {p.arch for p in profs}
    return SideInfo(label=label, sources=[p.source for p in profs], events=[p.event for p in profs],
                    samples=[int(p.samples) for p in profs], total_weight=[float(p.total_weight) for p in profs],
                    weight_unit=[p.weight_unit for p in profs],
                    arch=next(iter(arches)) if len(arches) == 1 else None)


def _display(key, scope: str) -> str:
    kernel, name = key
    if scope == "all":
        return f"[{'k' if kernel else '.'}] {name}"
    return name


# -- the diff ------------------------------------------------------------------

def diff_profiles(side_a: list[Profile], side_b: list[Profile], options: DiffOptions | None = None) -> DiffResult:
    """Rank the functions whose share differs between two sets of profiles (see the module text)."""
    opts = options or DiffOptions()
    warnings = _check_sides(side_a, side_b, opts)
    labels = tuple(opts.labels) if opts.labels else _default_labels(side_a, side_b)
    if labels[0] == labels[1]:
        labels = (f"{labels[0]} (A)", f"{labels[1]} (B)")
    ma = [_Measured(p, opts) for p in side_a]
    mb = [_Measured(p, opts) for p in side_b]
    if opts.per_op:
        fa = [_per_op_factor(p, opts.ops[0]) for p in side_a]
        fb = [_per_op_factor(p, opts.ops[1]) for p in side_b]
    else:
        fa, fb = [1.0] * len(ma), [1.0] * len(mb)
    keys_a = set().union(*(m.weight for m in ma))
    keys_b = set().union(*(m.weight for m in mb))
    roles = _match_roles(keys_a, keys_b, opts) if opts.equivalence else _RoleMatch()
    common, only_a, only_b = _rows(ma, mb, fa, fb, keys_a, keys_b, roles, opts)

    tested = len(ma) >= 2 and len(mb) >= 2
    if not tested and (len(ma) > 1 or len(mb) > 1):
        warnings.append("significance needs at least 2 profiles on each side (3 or more recommended); "
                        "rows are not tested")
    if tested:
        _significance(common + only_a + only_b, opts)
    unit = "ns/op" if opts.per_op else "%"
    method = ("share = weight / all samples of the profile (as perf report); "
              + ("children (inclusive) weights; " if opts.children else "self weights; ")
              + ("ns/op = share x CPU time / operations; " if opts.per_op else "")
              + ("Welch 95% interval of B - A over profiles, Benjamini-Hochberg q over all rows" if tested else ""))
    res = DiffResult(options=opts, labels=labels, side_a=_side_info(side_a, labels[0]),
                     side_b=_side_info(side_b, labels[1]), common=common, only_a=only_a, only_b=only_b,
                     unit=unit, significance=tested, warnings=warnings, method=method.rstrip("; "))
    res.active_roles = roles.active
    res.total_a = float(sum(p.total_weight for p in side_a))
    res.total_b = float(sum(p.total_weight for p in side_b))
    return res


def _check_sides(side_a: list[Profile], side_b: list[Profile], opts: DiffOptions) -> list[str]:
    """Refuse what cannot be diffed; the warnings of what can (the profiles' own, differing events)."""
    if opts.scope not in SCOPES:
        raise InputError(f"scope {opts.scope!r} is not one of {', '.join(SCOPES)}")
    if not side_a or not side_b:
        raise InputError("a diff needs at least one profile on each side")
    warnings: list[str] = []
    for p in side_a + side_b:
        if p.total_weight <= 0:
            raise InputError(f"{p.source} holds no samples")
        warnings.extend(p.meta.get("warnings", []))
        if opts.children and p.meta.get("has_children") is False:
            raise InputError(f"{p.source} is a perf report without a Children column, so --children cannot "
                             f"be computed from it; make it with `perf report --children` or give the perf.data")
    ev_a = {p.event for p in side_a}
    ev_b = {p.event for p in side_b}
    if ev_a != ev_b and "unknown" not in ev_a | ev_b:
        warnings.append(f"the sides sample different events ({', '.join(sorted(ev_a))} vs "
                        f"{', '.join(sorted(ev_b))}); shares are compared as they are")
    return warnings


@dataclass
class _RoleMatch:
    rows: list[tuple[str, set, set]] = field(default_factory=list)  # (role, member keys in A, in B)
    claimed: set = field(default_factory=set)                     # keys that became part of a role row
    active: dict[str, str] = field(default_factory=dict)          # member name -> "[role]" (for flame graphs)


def _match_roles(keys_a: set, keys_b: set, opts: DiffOptions) -> _RoleMatch:
    """Roles of the equivalence table with members on both sides, each side having a member the
    other lacks (different names for one job); otherwise members compare one by one as usual."""
    table = load_roles(opts.maps)
    out = _RoleMatch()
    by_role_a: dict[str, set] = {}
    by_role_b: dict[str, set] = {}
    for keys, by_role in ((keys_a, by_role_a), (keys_b, by_role_b)):
        for k in keys:
            r = table.role_of(k[1])
            if r:
                by_role.setdefault(r, set()).add(k)
    for r in sorted(set(by_role_a) & set(by_role_b)):
        sa, sb = by_role_a[r], by_role_b[r]
        if not (sa - sb) or not (sb - sa):
            continue
        out.rows.append((r, sa, sb))
        out.claimed |= sa | sb
        for name in table.roles[r]:
            out.active[name] = f"[{r}]"
    if out.active:
        # Skipped in flame graphs (see [dispatch] in equivalence.toml).
        for name in table.dispatch:
            out.active.setdefault(name, "")
    return out


def _group_value(m: _Measured, keys: set, opts: DiffOptions) -> float:
    """The share of a role (several member keys) on one profile, each sample counted once."""
    present = [k for k in keys if k in m.weight]
    if not present:
        return 0.0
    if len(present) == 1 or not opts.children:
        return sum(m.weight[k] for k in present) / m.total * 100.0
    if m.prof.stacks:
        idx = set()
        for k in present:
            idx.update(m.members[k])
        return _union_weights(m.prof, {0: idx})[0] / m.total * 100.0
    return max(m.weight[k] for k in present) / m.total * 100.0


def _rows(ma, mb, fa, fb, keys_a: set, keys_b: set, roles: _RoleMatch,
          opts: DiffOptions) -> tuple[list[Row], list[Row], list[Row]]:
    """The common, A-only and B-only rows, scored and ranked."""
    def make_row(name, values_a_sh, values_b_sh, **kw) -> Row:
        va = [s * f for s, f in zip(values_a_sh, fa)]
        vb = [s * f for s, f in zip(values_b_sh, fb)]
        return Row(symbol=name, value_a=sum(va) / len(va), value_b=sum(vb) / len(vb), values_a=va, values_b=vb,
                   shares_a=list(values_a_sh), shares_b=list(values_b_sh), **kw)

    def order(keys, ms):
        return [k[1] for k in sorted(keys, key=lambda k: (-sum(m.weight.get(k, 0) / m.total for m in ms), k[1]))]

    common: list[Row] = []
    only_a: list[Row] = []
    only_b: list[Row] = []
    for r, sa, sb in roles.rows:
        allk = sa | sb
        va = [_group_value(m, allk, opts) for m in ma]
        vb = [_group_value(m, allk, opts) for m in mb]
        common.append(make_row(f"[{r}]", va, vb, role=r, members_a=order(sa, ma), members_b=order(sb, mb),
                               kernel=all(k[0] for k in allk)))
    for k in keys_a | keys_b:
        if k in roles.claimed:
            continue
        row = make_row(_display(k, opts.scope), [m.share(k) for m in ma], [m.share(k) for m in mb], kernel=k[0])
        if k in keys_a and k in keys_b:
            common.append(row)
        elif k in keys_a:
            only_a.append(row)
        else:
            only_b.append(row)
    for r in common:
        r.score = compute_score(r.value_a, r.value_b, opts)
    common.sort(key=lambda r: (-rank_key(r.score, opts), r.symbol))
    only_a.sort(key=lambda r: (-r.value_a, r.symbol))
    only_b.sort(key=lambda r: (-r.value_b, r.symbol))
    return common, only_a, only_b


def add_folded(result: DiffResult, side_a: list[Profile], side_b: list[Profile]) -> DiffResult:
    """Fill ``result.folded_a``/``folded_b`` (for flame graphs and folded output) from the same profiles."""
    result.folded_a, result.total_a = _side_folded(side_a, result.options, result.active_roles)
    result.folded_b, result.total_b = _side_folded(side_b, result.options, result.active_roles)
    return result


def compute_score(a: float, b: float, opts: DiffOptions) -> float:
    """The common-list score of values ``a`` and ``b`` (shares in %, or ns/op).

    absdiff: |b - a| (the study's %diff); delta: b - a (perf diff's Delta);
    ratio: b / a; wdiff: w_b*b - w_a*a. perf diff computes ratio and wdiff on
    raw periods; kperfdiff uses the shares (or ns/op), so the sides' totals
    are normalised out.
    """
    c = opts.compute
    if c == "absdiff":
        return abs(b - a)
    if c == "delta":
        return b - a
    if c == "ratio":
        return b / a if a else math.inf
    if c == "wdiff":
        wa, wb = opts.wdiff_weights
        return wb * b - wa * a
    raise InputError(f"compute mode {c!r} is not one of absdiff, delta, ratio, wdiff:WA,WB")


def rank_key(score: float, opts: DiffOptions) -> float:
    """Larger is ranked first: |score|, or for ratios the size of the change |log ratio|."""
    if opts.compute == "ratio":
        if score <= 0 or math.isinf(score):
            return math.inf
        return abs(math.log(score))
    return abs(score)


def _significance(rows: list[Row], opts: DiffOptions) -> None:
    pvals = []
    for r in rows:
        d, lo, hi, p = stats.welch_interval(r.values_a, r.values_b, confidence=opts.confidence)
        r.ci = (lo, hi)
        r.p = p
        pvals.append(p)
    q = stats.benjamini_hochberg(pvals)
    for r, qv in zip(rows, q):
        r.q = float(qv)
        lo, hi = r.ci
        r.significant = bool(qv < opts.alpha and (lo > 0 or hi < 0))


# -- folded stacks for flame graphs -------------------------------------------------

def _side_folded(profs: list[Profile], opts: DiffOptions, roles: dict[str, str]) -> tuple[dict, float]:
    """Stacks of one side, summed over its profiles, with names normalised,
    role members renamed to their role (consecutive repeats merged), arm64
    exception dispatch frames skipped when roles are in use, and cut
    to the scope's frames (kernel: the kernel frames of each stack; user: the
    user frames; all: whole stacks). Kernel frames carry the ``_[k]`` suffix."""
    out: dict[str, float] = {}
    total = 0.0
    for p in profs:
        total += float(p.total_weight)
        names = []
        for s in p.symbols:
            n = normalise(s.name) if opts.normalise else s.name
            n = roles.get(n, n)
            if n == "":
                names.append((None, s.kernel))     # a dispatch frame: skipped
                continue
            names.append((n + "_[k]" if s.kernel else n, s.kernel))
        stacks = p.stacks
        if not stacks:
            # Flat profiles: one-frame stacks of self weight.
            stacks = {(i,): float(w) for i, w in enumerate(p.self_weight) if w > 0}
        for stack, w in stacks.items():
            frames = []
            for i in stack:
                n, k = names[i]
                if opts.scope == "kernel" and not k or opts.scope == "user" and k:
                    continue
                if n is None:
                    continue
                if frames and frames[-1] == n and n.startswith("["):
                    continue
                frames.append(n)
            if not frames:
                continue
            key = ";".join(frames)
            out[key] = out.get(key, 0.0) + w
    return out, total
