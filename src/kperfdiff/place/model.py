"""The cost model: the thesis's equations, and the whole-profile predictor.

The thesis's equations
----------------------
With x instruction fetches from the fast memory (TCM), y from cache-backed
memory and b line fills from main memory::

    T_no_tcm = y*t_c + b*t_m          T_tcm = x*t_t + y*t_c + b*t_m,   x <= TCM size

:func:`thesis_run` evaluates one function run R times and reproduces the
four worked examples (TCM and I-cache of 8 instructions, t_t = t_c = 1,
t_m = 25, R = 10) under these assumptions:

* the line is 8 instructions, so the 8-instruction I-cache is **one line**;
* code is straight-line and each contiguous block of code starts on a line
  boundary, so a block of n instructions touches ceil(n/8) lines;
* "callees contiguous" means the code left in main memory is one block;
  "callees scattered" means each callee is its own block on its own line
  (the 9 instructions left outside the TCM in example 4 are four callees,
  3+2+2+2, on four lines);
* the cache is LRU: if one run touches no more lines than the cache holds,
  the lines are filled once (cold misses) and hit in the other runs;
  otherwise a cyclic sweep longer than an LRU cache misses on every line
  of every run, so b = lines per run x R;
* the TCM is filled at boot: its fetches never fill lines; the TCM takes
  the first min(n, TCM) instructions (the caller).

Example  n   no TCM                       TCM
1         6  60 + 1 fill x 25  =   85    60 (all in TCM)              =   60
2        16  160 + 2x10 fills  =  660    80 + 80 + 1 fill             =  185
3        17  170 + 3x10 fills  =  920    80 + 90 + 2x10 fills         =  670
4        17  170 + 3x10 fills  =  920    80 + 90 + 4x10 fills         = 1170

The whole-profile predictor
---------------------------
For a set P of functions placed in fast memory, the predicted saving is::

    gain(P) = sum_{i in P} a_i  -  v * calls crossing the boundary
                                +  s * calls with both ends in P

with a_i, v, s and the calls from one of two fill models (``fills=``;
``kperfdiff place --fills``, default ``measured``).

Measured fills (the default of ``kperfdiff place``)
    The thesis's b, counted per function instead of assumed uniform. The
    profile's trace (:func:`.simulate.reconstruct`, the one definition of
    which stacks ran and how often) is simulated once with no placement
    (:func:`measure`), and for each function i the simulator reports the
    instructions n_i it fetched from main memory, the line fills b_i on its
    own lines, and the fills r_i of *other* functions that i's absence would
    have avoided (:class:`.simulate.AttributingICache`: a miss on a line still
    p deep in its set's LRU stack, p >= ways, is avoided if p - ways + 1 of
    the lines touched since were never fetched; each function that owns that
    many shares the miss equally, its Shapley value). Then, in simulated
    cycles scaled to the profile by k = kernel self cycles / simulated
    cycles::

        a_i = k * (n_i * (t_cache - t_fast) + (b_i + r_i) * t_fill)
        v   = veneer_cycles                    s = 0
        calls = k * the trace's calls per (caller, callee)

    Placing i saves exactly the fetches and fills it made itself; a call
    costs only its veneer, since the fills around a call are already some
    function's b. What it leaves out is second order: misses only several
    placed functions together avoid (so it tends to under-estimate), misses
    credited to both a placed victim and a placed competitor, and the new set
    mapping after relinking. Why not the uniform model below: with one f for
    every instruction, a tiny hot function whose line never leaves the cache
    (clear_page_erms, 16 bytes, 14% of forkexec.folded's kernel time) is
    credited f fills per instruction it never makes, and the exact optimiser
    spends the memory on such functions; on forkexec.folded at 8K the uniform
    model ranked exact above greedy (18.7% vs 10.5%) while the simulator
    ranked them the other way (14.8% vs 16.8%), and taking f from the
    simulator (``--calibrate``) only inflated the error. Fitting the per-call
    factors to probe simulations was not chosen: it fits the symptoms of a
    wrong b, per profile, with no reason for the fitted values to carry over.
    Crediting r_i for every miss within twice the ways (each competing line
    1/p of it) was tried too: closer on some runs, but it over-predicted large
    placements by 3-4 points on the synthetic profile and needs a chosen
    depth; the rule above has no free parameter (a function shorter than one
    way's span owns at most one line of a set, so in practice only misses at
    p = ways are credited and the stack depth does not matter).

Uniform fills (the thesis's assumption; ``--fills uniform``)
* a_i = C_i * (1 - t_fast / cpi_cached): C_i is function i's self time in
  cycles (profile weight x cycles per weight unit), cpi_cached = t_cache +
  f * t_fill is the fetch cost per instruction in cache-backed memory with
  f line fills per instruction (``fills_per_kinstr``/1000; ``--calibrate``
  takes f from the simulator's no-placement run). Fast memory fetches at
  t_fast and never fills.
* v = veneer_cycles + split_fills * p * t_fill per crossing call: the far
  call through a veneer, plus the extra fills of code left in main memory
  that no longer shares lines with its placed neighbour (example 4: 2 extra
  fills per run over 4 crossing calls gives split_fills = 0.5).
* s = call_fills * p * t_fill per call with both ends placed: the line fills
  of the call and return that no longer happen.
* p = min(1, f * instructions per line) is the chance a line fetched from
  main memory misses: the per-call fills above are counted as if every line
  missed (as in the thesis's thrashing examples, p = 1) and scaled by p, so
  a hot, tiny callee whose lines stay cached is not credited with fills it
  never made.
* Calls are estimated from the sampled stacks with the simulator's
  reconstruction (:func:`.simulate.executions`): each execution of a leaf
  function's body is one call from its parent, and a stack's samples stand
  for C_stack / (n_leaf * cpi_cached) executions of the leaf's n_leaf
  instructions. Without stacks, an edge's weight times the callee's
  self/children ratio stands in for the leaf-level stack weight.

Calls to functions that cannot move (user code, excluded, unsized) are
crossing calls whenever the caller is placed.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from kperfdiff.core.errors import InputError
from kperfdiff.ingest.profile import Profile
from kperfdiff.place.inputs import Group, HwModel, SizeTable, match_any, resolve_group
from kperfdiff.place.simulate import executions, reconstruct, simulate_placements

# -- the thesis's equations -------------------------------------------------------


def t_no_tcm(y: float, b: float, t_c: float, t_m: float) -> float:
    """T_no_tcm = y*t_c + b*t_m (y cache-backed fetches, b line fills)."""
    return y * t_c + b * t_m


def t_tcm(x: float, y: float, b: float, t_t: float, t_c: float, t_m: float) -> float:
    """T_tcm = x*t_t + y*t_c + b*t_m (x fetches from the TCM)."""
    return x * t_t + y * t_c + b * t_m


def line_fills(blocks: list[int], line: int, cache_lines: int, runs: int) -> int:
    """Line fills of ``runs`` straight-line passes over line-aligned blocks
    (sizes in instructions) through an LRU cache of ``cache_lines`` lines."""
    per_run = sum(-(-n // line) for n in blocks if n > 0)
    if per_run <= cache_lines:
        return per_run                  # cold misses only
    return per_run * runs               # a cyclic sweep longer than LRU: every line misses


@dataclass
class RunCost:
    x: int          # fetches from TCM (all runs)
    y: int          # fetches from cache-backed memory (all runs)
    b: int          # line fills
    cycles: float


def thesis_run(n: int, *, tcm: int, cache: int, line: int, runs: int, t_t: float = 1, t_c: float = 1,
               t_m: float = 25, callees: list[int] | None = None) -> tuple[RunCost, RunCost]:
    """(without TCM, with TCM) for a function of ``n`` instructions run ``runs``
    times; sizes in instructions. ``callees`` gives the blocks the code left
    outside the TCM falls into when scattered (default: one contiguous block)."""
    if n <= 0 or tcm < 0 or cache <= 0 or line <= 0 or runs <= 0:
        raise InputError("instruction counts, cache, line and runs must be positive")
    cache_lines = max(1, cache // line)
    b0 = line_fills([n], line, cache_lines, runs)
    base = RunCost(0, n * runs, b0, t_no_tcm(n * runs, b0, t_c, t_m))
    x = min(n, tcm)
    rest = n - x
    blocks = callees if callees is not None else [rest]
    if sum(blocks) != rest:
        raise InputError(f"the scattered blocks add up to {sum(blocks)} instructions, not the {rest} left outside the TCM")
    b1 = line_fills(blocks, line, cache_lines, runs)
    with_tcm = RunCost(x * runs, rest * runs, b1, t_tcm(x * runs, rest * runs, b1, t_t, t_c, t_m))
    return base, with_tcm


# -- the whole-profile predictor ------------------------------------------------------

_CYCLE_EVENTS = {"cycles", "cpu-cycles", "cpu_cycles", "cycles:k", "cycles:u", "cycles:ku", "cycles:p",
                 "cycles:pp", "cycles:ppp", "cpu_core/cycles/", "cpu-cycles:k"}


def cycles_per_weight(profile: Profile, hw: HwModel, override: float | None = None) -> tuple[float, str]:
    """How many CPU cycles one unit of profile weight stands for, and why."""
    if override:
        return float(override), "given on the command line"
    unit = profile.weight_unit
    if unit == "ns":
        return hw.clock_mhz / 1000.0, f"weight in ns at {hw.clock_mhz:g} MHz"
    if unit == "period" and (profile.event or "").lower() in _CYCLE_EVENTS:
        return 1.0, "weight is the cycles event's period"
    return hw.clock_mhz * 1e6 / hw.sample_hz, f"one sample = {hw.clock_mhz:g} MHz / {hw.sample_hz:g} Hz"


@dataclass
class Problem:
    """Everything the optimisers and the evaluator need, in arrays."""
    names: list[str]                # candidate functions
    size: np.ndarray                # bytes, aligned
    self_cycles: np.ndarray         # C_i
    node_gain: np.ndarray           # a_i
    pair_i: np.ndarray              # candidate-candidate call pairs (i < j, both directions merged)
    pair_j: np.ndarray
    pair_calls: np.ndarray
    out_calls: np.ndarray           # calls between i and code that cannot move
    cross_cost: float               # v, cycles per crossing call
    both_saving: float              # s, cycles per call with both ends placed
    total_cycles: float             # the whole profile, in cycles
    kernel_cycles: float            # self cycles of every sized kernel function
    groups: dict[str, list[int]] = field(default_factory=dict)     # group -> candidate indices
    group_missing: dict[str, list[str]] = field(default_factory=dict)   # group -> excluded members
    excluded: dict[str, str] = field(default_factory=dict)          # name -> reason
    notes: list[str] = field(default_factory=list)
    hw: HwModel | None = None
    sizes: SizeTable | None = None
    cps: float = 1.0
    # caller -> callee call estimates among all sized kernel functions (for emit/simulate)
    calls: dict[tuple[str, str], float] = field(default_factory=dict)

    def __post_init__(self):
        self.index = {n: k for k, n in enumerate(self.names)}

    @property
    def n(self) -> int:
        return len(self.names)

    def mask(self, placed) -> np.ndarray:
        m = np.zeros(self.n, dtype=bool)
        for name in placed:
            k = self.index.get(name)
            if k is not None:
                m[k] = True
        return m


@dataclass
class Prediction:
    placed: list[str]
    bytes: int
    fetch_saved: float              # sum of a_i
    crossing_calls: float
    crossing_cost: float
    both_calls: float
    both_saved: float
    gain: float                     # cycles over the profile
    gain_pct: float                 # of the kernel's (sized) self time

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("bytes", "fetch_saved", "crossing_calls", "crossing_cost",
                                              "both_calls", "both_saved", "gain", "gain_pct")} | \
               {"functions": len(self.placed)}


def evaluate(problem: Problem, mask: np.ndarray) -> Prediction:
    """The predicted gain of placing the candidates where ``mask`` is true."""
    mask = np.asarray(mask, dtype=bool)
    xi, xj = mask[problem.pair_i], mask[problem.pair_j]
    cross = float(problem.pair_calls[xi ^ xj].sum() + problem.out_calls[mask].sum())
    both = float(problem.pair_calls[xi & xj].sum())
    fetch = float(problem.node_gain[mask].sum())
    gain = fetch - problem.cross_cost * cross + problem.both_saving * both
    denom = problem.kernel_cycles or 1.0
    placed = [problem.names[k] for k in np.flatnonzero(mask)]
    return Prediction(placed, int(problem.size[mask].sum()), fetch, cross, problem.cross_cost * cross,
                      both, problem.both_saving * both, gain, 100.0 * gain / denom)


def build_problem(profile: Profile, sizes: SizeTable, hw: HwModel, *, groups: dict[str, Group] | None = None,
                  excludes: list[str] | None = None, atomic: list[str] | None = None,
                  cycles_per_unit: float | None = None, min_coverage: float = 0.5, fills: str = "uniform",
                  events: int = 20000, seed: int = 1) -> Problem:
    """Join a profile with function sizes and a hardware model into a Problem.
    ``fills``: "uniform" (f fills per instruction everywhere, per-call fill
    factors from the hardware model) or "measured" (each function's own fills
    and the calls per edge, from the no-placement simulation of the profile's
    trace of ``events`` executions, ``seed``); see the module docstring."""
    if fills not in ("uniform", "measured"):
        raise InputError(f"unknown fill model {fills!r}; use measured or uniform")
    cps, why = cycles_per_weight(profile, hw, cycles_per_unit)
    names = [s.name for s in profile.symbols]
    kernel_flags = np.array([s.kernel for s in profile.symbols], dtype=bool)
    if not kernel_flags.any():
        kernel_flags[:] = True
    selfw = profile.self_weight
    # coverage: how much of the kernel's self weight the size file can size
    sized_idx = np.array([k for k, nm in enumerate(names) if nm in sizes.sizes], dtype=int)
    kern_w = float(selfw[kernel_flags].sum())
    sized_w = float(selfw[sized_idx].sum()) if len(sized_idx) else 0.0
    if kern_w <= 0:
        raise InputError(f"the profile {profile.source} has no kernel samples to place")
    cover = sized_w / kern_w
    if cover < min_coverage:
        n_k = int(((selfw > 0) & kernel_flags).sum())
        n_s = int(((selfw[sized_idx] > 0)).sum()) if len(sized_idx) else 0
        raise InputError(f"the size file {sizes.path} sizes only {100 * cover:.0f}% of the kernel samples in "
                         f"{profile.source} ({n_s} of {n_k} sampled kernel functions); is it the System.map "
                         f"or vmlinux of the profiled kernel?")
    notes = [sizes.note(), f"cycles per profile weight unit: {cps:g} ({why})"]
    if cover < 0.999:
        notes.append(f"{100 * (1 - cover):.1f}% of kernel samples fall in functions the size file does not "
                     f"size; they stay in main memory")

    # self cycles per function name (names can repeat across DSOs)
    self_c: dict[str, float] = defaultdict(float)
    for k in sized_idx:
        self_c[names[k]] += float(selfw[k]) * cps
    cpi = hw.cpi_cached
    kernel_cycles = float(sum(self_c.values()))
    measured = None
    if fills == "measured":
        measured = measure(profile, sizes, hw, kernel_cycles, events=events, seed=seed)
    if measured is not None:
        calls = measured.calls
        notes.append(measured.note)
    else:
        if fills == "measured":
            notes.append("no kernel stack could be simulated: fills assumed uniform (profile.fills_per_kinstr)")
        calls = estimate_calls(profile, sizes, hw, cps)
    involved = set(self_c) | {a for a, _ in calls} | {b for _, b in calls}

    # candidates: sized, not excluded
    excluded: dict[str, str] = {}
    pats = list(excludes or [])
    cands = []
    for nm in sorted(involved):
        if nm not in sizes.sizes:
            continue
        if nm in sizes.excluded:
            excluded[nm] = sizes.excluded[nm]
        elif pats and match_any(nm, pats):
            excluded[nm] = "excluded by pattern"
        else:
            cands.append(nm)
    index = {nm: k for k, nm in enumerate(cands)}
    size = np.array([hw.aligned(sizes.sizes[nm]) for nm in cands], dtype=np.int64)
    sc = np.array([self_c.get(nm, 0.0) for nm in cands])
    if measured is not None:
        node_gain = np.array([measured.saving.get(nm, 0.0) for nm in cands])
    else:
        node_gain = sc * (1.0 - hw.t_fast / cpi)
    pi, pj, pc, out_calls = call_pairs(calls, index)

    # groups, resolved against every sized name; excluded members dropped
    gidx: dict[str, list[int]] = {}
    gmiss: dict[str, list[str]] = {}
    all_names = list(sizes.sizes)
    for gname, g in (groups or {}).items():
        members = resolve_group(g, all_names)
        gidx[gname] = [index[m] for m in members if m in index]
        gmiss[gname] = [m for m in members if m in excluded]
    for a in atomic or []:
        if a not in gidx:
            raise InputError(f"--atomic names the group {a!r}, which is not among the groups "
                             f"({', '.join(sorted(gidx)) or 'none'})")
    if measured is not None:
        # a function's fills are its own: placing it saves exactly them, and a call costs only its veneer
        cross, both = hw.veneer_cycles, 0.0
    else:
        # per-call fills happen only when the line would miss: scale by the chance a line misses
        p_miss = min(1.0, hw.fills_per_kinstr / 1000.0 * hw.line_instr)
        cross = hw.veneer_cycles + hw.split_fills * hw.t_fill * p_miss
        both = hw.call_fills * hw.t_fill * p_miss
    prob = Problem(cands, size, sc, node_gain, pi, pj, pc, out_calls, cross, both,
                   float(profile.total_weight) * cps, kernel_cycles, gidx, gmiss, excluded, notes, hw, sizes, cps,
                   calls)
    prob.atomic = list(atomic or [])
    return prob


def call_pairs(calls: dict[tuple[str, str], float], index: dict[str, int]):
    """(i, j, calls) of each pair of candidates i < j that call each other (both directions
    added up), and each candidate's calls to or from code that cannot move."""
    n = len(index)
    c = np.fromiter(calls.values(), dtype=float, count=len(calls))
    ia = np.fromiter((index.get(a, -1) for a, _ in calls), dtype=np.int64, count=len(calls))
    ib = np.fromiter((index.get(b, -1) for _, b in calls), dtype=np.int64, count=len(calls))
    both = (ia >= 0) & (ib >= 0)
    out = np.bincount(ia[(ia >= 0) & ~both], c[(ia >= 0) & ~both], n) + \
        np.bincount(ib[(ib >= 0) & ~both], c[(ib >= 0) & ~both], n)
    two = both & (ia != ib)
    key, inv = np.unique(np.minimum(ia, ib)[two] * n + np.maximum(ia, ib)[two], return_inverse=True)
    return key // max(n, 1), key % max(n, 1), np.bincount(inv, c[two], len(key)), out


@dataclass
class Measured:
    """Per-function costs from the no-placement simulation, in profile cycles."""
    saving: dict[str, float]                    # cycles saved by placing the function alone, veneers aside
    calls: dict[tuple[str, str], float]         # calls per (caller, callee) over the profile
    fills_per_kinstr: float
    scale: float                                # profile cycles per simulated cycle
    note: str


def measure(profile: Profile, sizes: SizeTable, hw: HwModel, kernel_cycles: float, *, events: int = 20000,
            seed: int = 1) -> Measured | None:
    """Simulate the profile's trace with no placement and read off each
    function's fills and instructions and each edge's calls (module docstring)."""
    tr = reconstruct(profile, sizes, hw, events=events, seed=seed)
    if not tr.steps:
        return None
    base = simulate_placements(tr, sizes, hw, [], attribute=True)[0]
    if base.cycles <= 0:
        return None
    k = kernel_cycles / base.cycles
    save = {fn: k * (n * (hw.t_cache - hw.t_fast) + (base.fn_fills.get(fn, 0) + base.fn_relief.get(fn, 0.0))
                     * hw.t_fill) for fn, n in base.fn_instr.items()}
    calls = {e: k * c for e, c in base.edge_calls.items() if e[0] != e[1]}
    f = 1000.0 * base.fills / max(1, base.cached_instr)
    return Measured(save, calls, f, k, f"fills measured per function by simulating the profile's trace with no "
                    f"placement ({base.fills} fills, {f:.1f} per 1000 instructions; {tr.executions} executions, "
                    f"seed {seed})")


def estimate_calls(profile: Profile, sizes: SizeTable, hw: HwModel, cps: float) -> dict[tuple[str, str], float]:
    """Calls caller -> callee over the profile, as the simulator's trace makes them:
    one call per execution of the leaf's body (see the module docstring)."""
    names = [s.name for s in profile.symbols]
    cpi = hw.cpi_cached
    sized = sizes.sizes
    med = int(np.median(list(sized.values()))) if sized else 64
    calls: dict[tuple[str, str], float] = defaultdict(float)

    def n_of(nm):
        return max(1, sized.get(nm, med) // hw.instruction_bytes)
    if profile.has_callchains:
        for stack, execs in zip(*executions(profile, sizes, hw)):
            if len(stack) >= 2 and stack[-2] != stack[-1]:
                calls[(stack[-2], stack[-1])] += execs * cps / cpi
    else:
        selfw, childw = profile.self_weight, profile.children_weight
        for (ia, ib), w in profile.edges.items():
            a, b = names[ia], names[ib]
            if a == b or b not in sized or w <= 0:
                continue
            ratio = float(selfw[ib] / childw[ib]) if childw[ib] > 0 else 1.0
            calls[(a, b)] += w * min(1.0, ratio) * cps / (n_of(b) * cpi)
    return dict(calls)


def placement_from_names(problem: Problem, names: list[str], where: str = "the placement") -> np.ndarray:
    """A mask from a user's list; names the problem cannot place are an error."""
    bad = []
    for nm in names:
        if nm not in problem.index:
            if nm in problem.excluded:
                bad.append(f"{nm} (excluded: {problem.excluded[nm]})")
            elif problem.sizes is not None and nm not in problem.sizes.sizes:
                bad.append(f"{nm} (not in the size file)")
            else:
                bad.append(f"{nm} (never sampled nor called in the profile)")
    unknown = [b for b in bad if "never sampled" not in b]
    if unknown:
        more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
        raise InputError(f"{where} names functions that cannot be placed: {', '.join(unknown[:3])}{more}")
    return problem.mask(names)
