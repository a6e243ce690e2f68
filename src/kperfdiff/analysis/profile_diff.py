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
* **Common** functions have weight on at least one side and appear on the
  stacks of both (a function whose self time is nil on one side, because that
  side calls out of line what the other inlines, is common with a share of 0
  there); they are ranked by ``|share A - share B|`` (percentage points),
  largest first. Functions found on one side only (on no stack of the other)
  are ranked by their share on that side.
* **Equivalence** (unless ``no_equivalence``): first the table's rules
  rename generic variants (syscall wrappers ``__x64_sys_clone`` and
  ``__arm64_sys_clone`` are ``sys_clone``; ``memset_erms`` and ``__memset``
  are ``memset``), and a row that merged different names shows them. Then a
  role of the equivalence table (:mod:`kperfdiff.symbols.equivalence`) whose
  members have weight on both sides and differ (between architectures: any
  difference; otherwise each side must have a member the other lacks)
  becomes one common row ``[role]`` (its members named per side); its
  members leave the other lists. Its self weight is the sum of the
  members'; its children weight counts each sample once (from the stacks;
  without stacks, the largest member's).
* **Inferred twins** (between architectures, or with ``infer="on"``;
  :mod:`kperfdiff.analysis.twins`): side-specific functions paired by their callers
  and callees, and side-specific functions the other side most likely
  inlined; with ``accept_inferred`` the accepted pairs become common rows.
* **Per operation** (``per_op``): value = share x CPU time / operations in
  nanoseconds, per profile; CPU time is ``meta['cpu_time_ns']``, else the
  profile's total weight when that is in nanoseconds (cpu-clock,
  task-clock); operations are ``meta['ops']`` (or ``--ops``). Rows are
  ranked by the absolute difference of ns/op.
* **New and gone**: a side's value under the sampling's resolution, the
  value of ``-ln(1 - confidence)`` samples (3.0 at 95%) over that side's
  samples (:func:`resolution`), cannot be told from none: a function expected
  to take that many samples goes unsampled 5% of the time. A common row with
  one side under it and the other not has no ratio B/A to speak of: it is
  ``new`` (A under) or ``gone`` (B under) (:meth:`DiffResult.new_or_gone`).
* **Significance** (both sides with at least 2 profiles; 3 or more
  recommended): per row, Welch's t interval (95%) of mean B - mean A over
  the per-profile values (:func:`kperfdiff.core.stats.welch_interval`) and its
  p-value; Benjamini-Hochberg q-values over every row of every section
  (:func:`kperfdiff.core.stats.benjamini_hochberg`). A row is significant only
  when its interval excludes 0 and q < 0.05.
"""
from __future__ import annotations

import math
from pathlib import PurePath as Path
from dataclasses import dataclass, field

from kperfdiff.core import stats
from kperfdiff.analysis import twins as twinning
from kperfdiff.core.errors import InputError
from kperfdiff.ingest.profile import Profile
from kperfdiff.symbols.equivalence import RoleTable, load_roles
from kperfdiff.symbols.normalise import normalise

DEFAULT_TOP = 10                 # as every --top of the command line (commands.parsing.TOP)
SCOPES = ("kernel", "user", "all")
_NS_EVENTS = {"cpu-clock", "task-clock"}


@dataclass
class DiffOptions:
    top: int = DEFAULT_TOP           # rows per section when rendering; 0 = all
    sort: str = "sym"                # what the rows are (--sort): functions, DSOs ("dso") or processes ("comm")
    scope: str = "kernel"
    labels: tuple[str, str] | None = None
    children: bool = False
    per_op: bool = False
    equivalence: bool = True         # rules and roles of the equivalence table
    maps: tuple = ()
    normalise: bool = True
    confidence: float = stats.DEFAULT_CONFIDENCE
    alpha: float = 0.05
    ops: tuple = (None, None)        # operation counts for sides without meta['ops']
    # How common rows are scored and ranked: "absdiff" (the study's |B - A|),
    # or perf diff's "delta" (B - A), "ratio" (B / A) and "wdiff" (w_b*B - w_a*A).
    compute: str = "absdiff"
    wdiff_weights: tuple = (1.0, 1.0)
    # Inferred twins (kperfdiff.analysis.twins): "auto" between architectures, "on", "off"; accepted
    # pairs join the common list as one row each only with accept_inferred.
    infer: str = "auto"
    accept_inferred: bool = False


@dataclass
class Row:
    symbol: str                       # display name (function, or "[role]")
    value_a: float                    # mean share (%) or ns/op on side A
    value_b: float
    values_a: list[float]             # per profile
    values_b: list[float]
    role: str | None = None
    members_a: list[str] = field(default_factory=list)   # a role's functions on each side (original names)
    members_b: list[str] = field(default_factory=list)
    # A role's members with their own values, per side, in the row's unit (self or children share, or
    # ns/op): (name, mean value), largest first; every member on that side's stacks, 0 where it has no
    # weight. In self mode a side's member values sum to its value; with children each member's value is
    # its own inclusive share, and the role's counts a sample once, so they may sum to more.
    member_values_a: list[tuple[str, float]] = field(default_factory=list)
    member_values_b: list[tuple[str, float]] = field(default_factory=list)
    # The original names a row merged, per side, when they differ (a rule renamed them:
    # __x64_sys_clone and __arm64_sys_clone are the row sys_clone), and the rules used.
    names_a: list[str] = field(default_factory=list)
    names_b: list[str] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)
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

    @property
    def ratio(self) -> float | None:
        """B / A, or None where A is 0."""
        return self.value_b / self.value_a if self.value_a else None


@dataclass
class SideInfo:
    label: str
    sources: list[str]
    events: list[str]
    samples: list[int]
    total_weight: list[float]
    weight_unit: list[str]
    arch: str | None
    # exact (kernel, user) instructions per operation of each profile, where the worker counted them
    instructions_per_op: list[tuple[float, float]] = field(default_factory=list)
    # per profile: the share of its weight in kernel code, and the kernel symbol source it was read
    # with and how that was matched to the recording (ingest.symcheck; None for text inputs)
    kernel_share: list[float] = field(default_factory=list)
    symbols: list[dict | None] = field(default_factory=list)
    # perf report's filters the side was read with (``--comm dd``...) and the samples they kept of
    # how many, over its profiles (ingest.filters; empty and 0 when unfiltered)
    filters: list[str] = field(default_factory=list)
    kept_of: tuple[int, int] = (0, 0)
    # the value, in the rows' unit, under which a row of this side cannot be told from none (resolution)
    resolution: float = 0.0

    @property
    def kernel_fraction(self) -> float | None:
        """The side's kernel share over all its profiles (weighted by their total weights), 0-1."""
        weight = sum(self.total_weight)
        if not weight or len(self.kernel_share) != len(self.total_weight):
            return None
        return sum(k * w for k, w in zip(self.kernel_share, self.total_weight)) / weight


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
    # Inferred twins, with display names: accepted pairs first, then ambiguous ones.
    twins: list[twinning.Twin] = field(default_factory=list)
    # Side-specific functions the other side most likely inlined into a shared caller.
    inlined: list[twinning.Inlined] = field(default_factory=list)
    inferred: bool = False           # inference ran
    # original (compiler-normalised) name -> the frame name flame graphs show: "[role]" for the
    # members of a role row, the row's name for names a rule merged, "" for a dispatch frame to skip
    frame_names: dict[str, str] = field(default_factory=dict)
    # A sentence when the ranked scope holds too little of both sides' samples to explain a
    # difference between them (see scope_note), else "".
    scope_note: str = ""

    def new_or_gone(self, a: float, b: float) -> str | None:
        """``new`` when the value ``a`` of side A is under A's resolution and ``b`` is not, ``gone``
        the other way round, else None (the ratio B/A says it)."""
        under_a, under_b = a < self.side_a.resolution, b < self.side_b.resolution
        return "new" if under_a and not under_b else "gone" if under_b and not under_a else None


# -- per-profile measurement ---------------------------------------------------

def original_name(name: str, opts: DiffOptions) -> str:
    """A symbol's name as rows show it: compiler suffixes folded (unless ``--no-normalise``)."""
    return normalise(name) if opts.normalise else name


class _Measured:
    """One profile's weights per row key, in the diff's scope. A key is (kernel, name), the
    name after compiler normalisation and the table's rules (when equivalence is on)."""

    def __init__(self, prof: Profile, opts: DiffOptions, table: RoleTable | None):
        self.prof = prof
        self.key_of: dict[int, tuple[bool, str]] = {}
        members: dict[tuple[bool, str], list[int]] = {}
        scope = opts.scope
        # plain floats (the same doubles as the arrays', read faster one by one)
        w = (prof.children_weight if opts.children else prof.self_weight).tolist()
        # key -> {original name: weight}: which names a key merged, heaviest first when shown
        self.origins: dict[tuple[bool, str], dict[str, float]] = {}
        canonical = table.canonical if table else None
        for i, s in enumerate(prof.symbols):
            if scope == "kernel" and not s.kernel or scope == "user" and s.kernel:
                continue
            orig = original_name(s.name, opts)
            k = (bool(s.kernel), canonical(orig) if canonical else orig)
            self.key_of[i] = k
            members.setdefault(k, []).append(i)
            o = self.origins.setdefault(k, {})
            o[orig] = o.get(orig, 0.0) + w[i]
        self.members = members
        self.table = table
        self.weight: dict[tuple[bool, str], float] = {}
        merged = {k: set(ix) for k, ix in members.items() if len(ix) > 1}
        exact = {}
        if opts.children and merged and prof.has_stacks:
            exact = _union_weights(prof, merged)
        for k, ix in members.items():
            if k in exact:
                v = exact[k]
            else:
                v = float(sum(w[i] for i in ix))
            if v > 0:
                self.weight[k] = v
        # Keys on the profile's stacks at all (children weight), with or without weight of their own:
        # a function the other side runs too is common even when its self time there is nil.
        cw = prof.children_weight.tolist()
        self.present = set(self.weight) | {k for k, ix in members.items() if any(cw[i] > 0 for i in ix)}
        self.total = float(prof.total_weight)

    def rules_of(self, name: str) -> tuple[str, ...]:
        """The rules that renamed an original name."""
        return self.table.rename(name)[1] if self.table else ()

    def share(self, key) -> float:
        return self.weight.get(key, 0.0) / self.total * 100.0 if self.total > 0 else 0.0


def _union_weights(prof: Profile, groups: dict) -> dict:
    """Weight of the samples whose stack holds any symbol of each group (once per sample)."""
    if prof.stack_table is not None:    # a perf.data's: from its arrays, without the stack dicts
        return prof.stack_table.union_weights(groups)
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


def counted_per_op(prof: Profile) -> tuple[float, float] | None:
    """Exact (kernel, user) instructions per operation the worker counted (``meta['instructions']``)."""
    c = prof.meta.get("instructions")
    try:
        ops = float(c["ops"])
        return (float(c["kernel"]) / ops, float(c["user"]) / ops) if ops > 0 else None
    except (KeyError, TypeError, ValueError):
        return None


def _in_instructions(profs: list[Profile]) -> bool:
    """Are these profiles' weights emulated instructions (a deterministic guest, QEMU -icount)?"""
    return bool(profs) and all(str(p.meta.get("time_unit") or "").startswith("instructions") for p in profs)


def _per_op_factor(prof: Profile, ops_override, counted: bool = False) -> float:
    if counted:
        return sum(counted_per_op(prof)) / 100.0    # share (%) -> instructions/op, from the exact counts
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
    counted = [counted_per_op(p) for p in profs]
    return SideInfo(label=label, sources=[p.source for p in profs], events=[p.event for p in profs],
                    samples=[int(p.samples) for p in profs], total_weight=[float(p.total_weight) for p in profs],
                    weight_unit=[p.weight_unit for p in profs],
                    arch=next(iter(arches)) if len(arches) == 1 else None,
                    instructions_per_op=[c for c in counted if c is not None] if all(counted) else [],
                    kernel_share=[kernel_share(p) for p in profs], symbols=[p.meta.get("symbols") for p in profs],
                    filters=next((p.meta["filtered"]["filters"] for p in profs if p.meta.get("filtered")), []),
                    kept_of=(sum(p.meta.get("filtered", {}).get("kept", 0) for p in profs),
                             sum(p.meta.get("filtered", {}).get("of", 0) for p in profs)))


def kernel_share(prof: Profile) -> float:
    """The share of a profile's weight whose leaf frame is kernel code (0 for an empty profile)."""
    return prof.kernel_weight / prof.total_weight if prof.total_weight else 0.0


def _display(key, opts: DiffOptions) -> str:
    """A row's name: with --scope all, a function is marked [k] (kernel) or [.] (user), as perf
    report marks them; DSOs and process names (--sort dso|comm) are shown as they are."""
    kernel, name = key
    if opts.scope == "all" and opts.sort == "sym":
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
    table = load_roles(opts.maps) if opts.equivalence else None
    ma = [_Measured(p, opts, table) for p in side_a]
    mb = [_Measured(p, opts, table) for p in side_b]
    counted = opts.per_op and all(counted_per_op(p) for p in side_a + side_b)
    if opts.per_op:
        fa = [_per_op_factor(p, opts.ops[0], counted) for p in side_a]
        fb = [_per_op_factor(p, opts.ops[1], counted) for p in side_b]
    else:
        fa, fb = [1.0] * len(ma), [1.0] * len(mb)
    keys_a = set().union(*(m.weight for m in ma))
    keys_b = set().union(*(m.weight for m in mb))
    cross_arch = _cross_arch(side_a, side_b)
    present = (set().union(*(m.present for m in ma)), set().union(*(m.present for m in mb)))
    roles = _match_roles(present, keys_a | keys_b, table, cross_arch) if table else _RoleMatch()
    inferred = opts.infer == "on" or opts.accept_inferred or opts.infer == "auto" and cross_arch
    twins, inlined = _infer(ma, mb, keys_a, keys_b, present, roles, opts) if inferred else ([], [])
    common, only_a, only_b = _rows(ma, mb, fa, fb, keys_a | keys_b, present, roles, opts)

    tested = len(ma) >= 2 and len(mb) >= 2
    if not tested and (len(ma) > 1 or len(mb) > 1):
        warnings.append("significance needs at least 2 profiles on each side (3 or more recommended); "
                        "rows are not tested")
    if tested:
        _significance(common + only_a + only_b, opts)
    instructions = _in_instructions(side_a + side_b)
    unit = ("instructions/op" if instructions or counted else "ns/op") if opts.per_op else "%"
    method = ("share = weight / all samples of the profile (as perf report); "
              + ("children (inclusive) weights; " if opts.children else "self weights; ")
              + (("instructions/op = share x exact instructions per operation (the worker's counters); "
                  if counted else "instructions/op = share x CPU time in emulated instructions / operations; "
                  if instructions else "ns/op = share x CPU time / operations; ") if opts.per_op else "")
              + ("Welch 95% interval of B - A over profiles, Benjamini-Hochberg q over all rows" if tested else ""))
    res = DiffResult(options=opts, labels=labels, side_a=_side_info(side_a, labels[0]),
                     side_b=_side_info(side_b, labels[1]), common=common, only_a=only_a, only_b=only_b,
                     unit=unit, significance=tested, warnings=warnings, method=method.rstrip("; "))
    res.frame_names = _frame_names(ma + mb, roles, table)
    if instructions:
        res.warnings.append("emulated guest (QEMU -icount): profiles count guest instructions, one per virtual "
                            "nanosecond; emulated instructions and cycles are not real time")
    res.inferred = inferred
    res.twins = [_display_twin(t, ma, mb, opts) for t in twins]
    res.inlined = [_display_inlined(i, ma, mb, opts) for i in inlined]
    res.total_a = float(sum(p.total_weight for p in side_a))
    res.total_b = float(sum(p.total_weight for p in side_b))
    res.scope_note = scope_note(res.side_a, res.side_b, opts.scope)
    res.side_a.resolution = resolution(side_a, fa, opts.confidence)
    res.side_b.resolution = resolution(side_b, fb, opts.confidence)
    return res


def resolution(profs: list[Profile], factors: list[float], confidence: float) -> float:
    """The value, in the rows' unit, under which a side's row cannot be told from none: that of
    ``-ln(1 - confidence)`` samples (3.0 at 95%), as a function expected to take that many samples
    goes unsampled with probability 1 - confidence (Poisson). One sample of profile p is worth
    100 / samples_p percent (times p's per-op factor), and a row's value is the mean of its k
    profiles' values: one sample's worth on the side is the mean of those worths, divided by k."""
    k = len(profs)
    one = sum(100.0 * f / p.samples for p, f in zip(profs, factors) if p.samples) / (k * k) if k else 0.0
    return -math.log(1 - confidence) * one


# Below this fraction of the samples on BOTH sides, the ranked scope (kernel or user code) cannot
# explain a difference between the sides: the rest of the samples can, and a diff says so.
SMALL_SCOPE = 0.10


def scope_note(a: SideInfo, b: SideInfo, scope: str) -> str:
    """A sentence when the scope ranked (kernel or user functions) holds less than SMALL_SCOPE of
    the samples on both sides, pointing at ``--scope all``; "" otherwise (and for scope all)."""
    ka, kb = a.kernel_fraction, b.kernel_fraction
    if scope == "all" or ka is None or kb is None:
        return ""
    here = (ka, kb) if scope == "kernel" else (1 - ka, 1 - kb)
    if max(here) >= SMALL_SCOPE:
        return ""
    other = "user" if scope == "kernel" else "kernel"
    return (f"the {scope} holds {here[0]:.0%} of A's samples and {here[1]:.0%} of B's (under "
            f"{SMALL_SCOPE:.0%} on both sides), {other} code {1 - here[0]:.0%} and {1 - here[1]:.0%}: "
            f"the ranked {scope} functions cannot explain much of a difference between the sides; "
            f"--scope all ranks {other} functions too")


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


def _cross_arch(side_a: list[Profile], side_b: list[Profile]) -> bool:
    arch_a = {p.arch for p in side_a}
    arch_b = {p.arch for p in side_b}
    return None not in arch_a | arch_b and arch_a.isdisjoint(arch_b)


@dataclass
class _RoleMatch:
    rows: list[tuple[str, set, set]] = field(default_factory=list)  # (role, member keys in A, in B)
    roles: set = field(default_factory=set)                       # the roles of those rows
    inferred: dict[str, str] = field(default_factory=dict)        # row name of an accepted twin -> its symbol
    claimed: set = field(default_factory=set)                     # keys that became part of a role row
    dispatch: set = field(default_factory=set)                    # frames flame graphs skip


def _match_roles(present: tuple[set, set], weighted: set, table: RoleTable, cross_arch: bool) -> _RoleMatch:
    """Roles of the equivalence table with members on the stacks of both sides, weight on at least
    one, and different members: between architectures, any difference (one side inlines what the
    other calls); otherwise each side must have a member the other lacks (a rename). Members of
    other roles compare one by one."""
    out = _RoleMatch()
    by_role_a: dict[str, set] = {}
    by_role_b: dict[str, set] = {}
    for keys, by_role in ((present[0], by_role_a), (present[1], by_role_b)):
        for k in keys:
            r = table.role_of(k[1])
            if r:
                by_role.setdefault(r, set()).add(k)
    for r in sorted(set(by_role_a) & set(by_role_b)):
        sa, sb = by_role_a[r], by_role_b[r]
        if sa == sb or not cross_arch and (not (sa - sb) or not (sb - sa)) or not (sa | sb) & weighted:
            continue
        out.rows.append((r, sa, sb))
        out.roles.add(r)
        out.claimed |= sa | sb
    if out.rows:
        # Skipped in flame graphs (see [dispatch] in equivalence.toml).
        out.dispatch = set(table.dispatch)
    return out


def _infer(ma: list[_Measured], mb: list[_Measured], keys_a: set, keys_b: set, present: tuple[set, set],
           roles: _RoleMatch, opts: DiffOptions) -> tuple[list[twinning.Twin], list[twinning.Inlined]]:
    """Inferred twins among the one-side-only functions (kperfdiff.analysis.twins), and those the other side
    inlined; with ``accept_inferred`` the accepted pairs become common rows (added to ``roles``)."""
    role_of_key = {k: f"[{r}]" for r, sa, sb in roles.rows for k in sa | sb}
    dispatch = roles.dispatch

    def side(ms: list[_Measured]) -> list[twinning.SideStacks]:
        out = []
        for m in ms:
            frame = {}
            for i, k in m.key_of.items():
                if original_name(m.prof.symbols[i].name, opts) in dispatch:
                    continue
                frame[i] = role_of_key.get(k, k)
            out.append(twinning.SideStacks(stacks=m.prof.stacks, frame=frame, total=m.total,
                                           samples=int(m.prof.samples)))
        return out
    def self_shares(ms: list[_Measured]) -> dict:
        out: dict = {}
        for m in ms:
            if m.total <= 0:
                continue
            for i, k in m.key_of.items():
                c = role_of_key.get(k, k)
                out[c] = out.get(c, 0.0) + float(m.prof.self_weight[i]) / m.total * 100.0 / len(ms)
        return out
    claimed = roles.claimed
    cand_a = {k for k in keys_a if k not in claimed and k not in present[1]}
    cand_b = {k for k in keys_b if k not in claimed and k not in present[0]}
    if not cand_a and not cand_b:
        return [], []
    anchors = {role_of_key.get(k, k) for k in present[0] & present[1]}
    sa, sb = side(ma), side(mb)
    ca, cb = twinning.contexts(sa, cand_a, anchors), twinning.contexts(sb, cand_b, anchors)
    found = twinning.pair_twins(ca, cb) if cand_a and cand_b else []
    paired = {k for t in found if t.accepted for k in t.a + t.b}
    self_a, self_b = self_shares(ma), self_shares(mb)
    inlined = (twinning.find_inlined(ca, sb, cand_b, self_a, self_b, which="a", exclude=paired)
               + twinning.find_inlined(cb, sa, cand_a, self_b, self_a, which="b", exclude=paired))
    if opts.accept_inferred:
        for t in found:
            if t.accepted:
                name = f"inferred {len(roles.inferred) + 1}"
                roles.rows.append((name, set(t.a), set(t.b)))
                roles.claimed |= set(t.a) | set(t.b)
                shown = _display_twin(t, ma, mb, opts)
                roles.inferred[name] = f"{shown.a} \u2248 {shown.b}"
    return found, inlined


def _context_name(c, ms: list[_Measured], opts: DiffOptions) -> str:
    """The display name of an inference context id: a row key as its original name, a role or
    ENTRY as it is, a group of functions as its call chain (``el0_svc > do_el0_svc``)."""
    if isinstance(c, tuple) and c and isinstance(c[0], tuple):
        return " > ".join(_context_name(k, ms, opts) for k in c)
    if isinstance(c, tuple):
        names = _origin_names([c], ms)
        return _display((c[0], names[0] if names else c[1]), opts)
    return str(c)


def _display_twin(t: twinning.Twin, ma: list[_Measured], mb: list[_Measured], opts: DiffOptions) -> twinning.Twin:
    """A Twin with display names instead of row keys (:func:`_context_name`)."""
    ev = [twinning.Evidence(e.relation, _context_name(e.context, ma, opts), e.fraction_a, e.fraction_b)
          for e in t.evidence]
    runner = None
    if t.runner_up:
        which, other, score = t.runner_up
        runner = (which, _context_name(other, ma if which == "a" else mb, opts), score)
    return twinning.Twin(a=_context_name(t.a, ma, opts), b=_context_name(t.b, mb, opts), share_a=t.share_a,
                         share_b=t.share_b, score=t.score, caller_score=t.caller_score,
                         callee_score=t.callee_score, evidence=ev, accepted=t.accepted, runner_up=runner)


def _weighted_first(keys: set, ms: list[_Measured]) -> set:
    """The members of a role row a side shows: those with weight there, else those on its stacks."""
    return {k for k in keys if any(k in m.weight for m in ms)} or keys


def _display_inlined(i: twinning.Inlined, ma: list[_Measured], mb: list[_Measured],
                     opts: DiffOptions) -> twinning.Inlined:
    here, there = (ma, mb) if i.side == "a" else (mb, ma)
    callee = _context_name(i.callee, there, opts) if i.callee is not None else None
    return twinning.Inlined(function=_context_name(i.function, here, opts), side=i.side, share=i.share,
                            caller=_context_name(i.caller, there, opts), caller_fraction=i.caller_fraction,
                            callee=callee, caller_self=i.caller_self)


def _origin_names(keys, ms: list[_Measured]) -> list[str]:
    """The original names of ``keys`` on one side, heaviest first."""
    w: dict[str, float] = {}
    for m in ms:
        for k in keys:
            for name, v in m.origins.get(k, {}).items():
                w[name] = w.get(name, 0.0) + v / m.total if m.total > 0 else 0.0
    return [n for n, _ in sorted(w.items(), key=lambda kv: (-kv[1], kv[0]))]


def _frame_names(ms: list[_Measured], roles: _RoleMatch, table: RoleTable | None) -> dict[str, str]:
    """Original name -> frame name in flame graphs (see DiffResult.frame_names): every frame of a
    role with a row (with or without weight of its own) becomes the role; a renamed frame its row."""
    out: dict[str, str] = {}
    twin_of = {k: roles.inferred[r] for r, sa, sb in roles.rows if r in roles.inferred for k in sa | sb}
    for m in ms:
        for k, origins in m.origins.items():
            role = table.role_of(k[1]) if table and roles.roles else None
            for name in origins:
                if k in twin_of:
                    out[name] = twin_of[k]
                elif role in roles.roles:
                    out[name] = f"[{role}]"
                elif name != k[1]:
                    out[name] = k[1]
    for name in roles.dispatch:
        out[name] = ""
    return out


def _group_value(m: _Measured, keys: set, opts: DiffOptions) -> float:
    """The share of a role (several member keys) on one profile, each sample counted once."""
    present = [k for k in keys if k in m.weight]
    if not present:
        return 0.0
    if len(present) == 1 or not opts.children:
        return sum(m.weight[k] for k in present) / m.total * 100.0
    if m.prof.has_stacks:
        idx = set()
        for k in present:
            idx.update(m.members[k])
        return _union_weights(m.prof, {0: idx})[0] / m.total * 100.0
    return max(m.weight[k] for k in present) / m.total * 100.0


def _rows(ma, mb, fa, fb, keys: set, present: tuple[set, set], roles: _RoleMatch,
          opts: DiffOptions) -> tuple[list[Row], list[Row], list[Row]]:
    """The common, A-only and B-only rows, scored and ranked. ``keys`` have weight on a side;
    a key is common when it is ``present`` (on the stacks) on both sides."""
    def make_row(symbol, values_a_sh, values_b_sh, **kw) -> Row:
        va = [s * f for s, f in zip(values_a_sh, fa)]
        vb = [s * f for s, f in zip(values_b_sh, fb)]
        return Row(symbol=symbol, value_a=sum(va) / len(va), value_b=sum(vb) / len(vb), values_a=va, values_b=vb,
                   shares_a=list(values_a_sh), shares_b=list(values_b_sh), **kw)

    def renamed(k) -> dict:
        # the first test below on the names alone (most rows: one name, unrenamed), before ranking them
        in_a = {n for m in ma for n in m.origins.get(k, ())}
        in_b = {n for m in mb for n in m.origins.get(k, ())}
        if in_a | in_b == {k[1]} or len(in_a | in_b) == 1 and not (in_a and in_b):
            return {"symbol": _display((k[0], next(iter(in_a | in_b))), opts)}
        na, nb = _origin_names([k], ma), _origin_names([k], mb)
        if set(na) | set(nb) == {k[1]} or len(set(na) | set(nb)) == 1 and not (na and nb):
            return {"symbol": _display((k[0], (na or nb or [k[1]])[0]), opts)}
        rules = sorted({r for m in ma + mb for n in m.origins.get(k, {}) for r in m.rules_of(n)})
        return {"symbol": _display(k, opts), "names_a": na, "names_b": nb, "rules": rules}

    def member_values(keys: set, ms: list[_Measured], f: list[float]) -> list[tuple[str, float]]:
        out = []
        for k in keys:
            names = _origin_names([k], ms)
            if not names:
                continue
            v = sum(m.share(k) * x for m, x in zip(ms, f)) / len(ms)
            out.append((", ".join(names), v))
        return sorted(out, key=lambda nv: (-nv[1], nv[0]))

    common: list[Row] = []
    only_a: list[Row] = []
    only_b: list[Row] = []
    for r, sa, sb in roles.rows:
        allk = sa | sb
        va = [_group_value(m, allk, opts) for m in ma]
        vb = [_group_value(m, allk, opts) for m in mb]
        common.append(make_row(roles.inferred.get(r, f"[{r}]"), va, vb, role="inferred" if r in roles.inferred else r,
                               members_a=_origin_names(_weighted_first(sa, ma), ma),
                               members_b=_origin_names(_weighted_first(sb, mb), mb), kernel=all(k[0] for k in allk),
                               member_values_a=member_values(sa, ma, fa), member_values_b=member_values(sb, mb, fb)))
    for k in keys:
        if k in roles.claimed:
            continue
        row = make_row(values_a_sh=[m.share(k) for m in ma], values_b_sh=[m.share(k) for m in mb], kernel=k[0],
                       **renamed(k))
        if k in present[0] and k in present[1]:
            common.append(row)
        elif k in present[0]:
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
    result.folded_a, result.total_a = _side_folded(side_a, result.options, result.frame_names)
    result.folded_b, result.total_b = _side_folded(side_b, result.options, result.frame_names)
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

def folded_sides(result: DiffResult, side_a: list[Profile], side_b: list[Profile], *, unit: str = "weight",
                 processes: bool = False) -> tuple[tuple[dict, float], tuple[dict, float]]:
    """Both sides' folded stacks and totals as :func:`add_folded` makes them, counted in ``unit``
    (``weight``: the profiles' weights; ``samples``: samples), and with ``processes`` each stack
    under its process name where the profile knows it."""
    return tuple(_side_folded(side, result.options, result.frame_names, unit=unit, processes=processes)
                 for side in (side_a, side_b))


def _side_folded(profs: list[Profile], opts: DiffOptions, frame_names: dict[str, str], *, unit: str = "weight",
                 processes: bool = False) -> tuple[dict, float]:
    """Stacks of one side, summed over its profiles, with names normalised,
    role members renamed to their role and twins a rule merged to their row's name
    (consecutive repeats merged), arm64
    exception dispatch frames skipped when roles are in use, and cut
    to the scope's frames (kernel: the kernel frames of each stack; user: the
    user frames; all: whole stacks). Kernel frames carry the ``_[k]`` suffix.
    ``unit`` "samples" counts samples instead of weights; ``processes`` puts each stack under
    its process name (a root frame) where the profile knows it."""
    out: dict[str, float] = {}
    total = 0.0
    merged = {v + "_[k]" for v in frame_names.values()} | set(frame_names.values())
    for p in profs:
        total += float(p.samples if unit == "samples" else p.total_weight)
        names = []
        for s in p.symbols:
            n = original_name(s.name, opts)
            n = frame_names.get(n, n)
            if n == "":
                names.append((None, s.kernel))     # a dispatch frame: skipped
                continue
            names.append((n + "_[k]" if s.kernel else n, s.kernel))
        # stack_rows: per process where the profile knows it (rows of one stack add up to it when
        # processes are not asked for); a flat profile's rows are one-frame stacks of self weight
        rows = [(comm if processes else "", st, float(n) if unit == "samples" else w)
                for comm, st, w, n in p.stack_rows()]
        for comm, stack, w in rows:
            frames = []
            for i in stack:
                n, k = names[i]
                if opts.scope == "kernel" and not k or opts.scope == "user" and k:
                    continue
                if n is None:
                    continue
                if frames and frames[-1] == n and n in merged:
                    continue
                frames.append(n)
            if not frames:
                continue
            key = ";".join([comm] + frames if comm else frames)
            out[key] = out.get(key, 0.0) + w
    return out, total
