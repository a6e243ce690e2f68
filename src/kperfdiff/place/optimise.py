"""Optimisers: choose the functions to place in a fast memory of a given size.

All four maximise the same predicted gain (:func:`.model.evaluate`):

* :func:`by_groups` -- the thesis's method: each named group placed alone
  (its candidates that can move), ranked by predicted gain; a group larger
  than the memory is trimmed to its densest members and marked so. Pairs of
  groups that fit together are tried too (the thesis also measured
  combinations); the best single or pair is the method's answer.
* :func:`greedy` -- functions by density (self samples per byte), each taken
  if it fits and its marginal predicted gain (edges included) is positive.
  Groups named ``atomic`` move as one unit of their combined density.
* :func:`exact` -- a mixed-integer program solved by HiGHS through
  ``scipy.optimize.milp``. Binary x_i places function i; for each pair of
  candidates that call each other, a continuous y_ij in [0,1] with
  y_ij <= x_i and y_ij <= x_j stands for x_i*x_j (its objective
  coefficient is positive, so at the optimum y_ij = min(x_i, x_j) = x_i*x_j).
  With [x_i != x_j] = x_i + x_j - 2*y_ij the objective is linear:

      max  sum_i (a_i - v*(out_i + sum_j c_ij)) x_i + sum_ij c_ij*(2v + s) y_ij
      s.t. sum_i size_i x_i <= capacity,   x_i = x_g for members of an atomic group g.

  Above ``REDUCE_ABOVE`` variables the MILP is first reduced exactly
  (:mod:`.bound`): dominated functions dropped, the LP bound of the whole
  problem found by column generation, and the MILP solved over the functions
  whose bound could still beat the best placement found, in rounds until the
  functions left out provably cannot. The time limit covers the whole method
  and returns the best placement found; the gap is always against an upper
  bound of the whole problem (HiGHS's dual bound combined with the bounds of
  the functions left out, or the LP bound). The greedy placement is one of
  the candidates, so the answer is never worse than greedy's, and the status
  says when it is the one kept.
* :func:`sweep` -- each method over a list of capacities.
"""
from __future__ import annotations

import contextlib
import ctypes
import itertools
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

from kperfdiff.core.errors import InputError
from kperfdiff.place import bound as bd
from kperfdiff.place.model import Prediction, Problem, evaluate


@dataclass
class Solution:
    method: str
    mask: np.ndarray
    prediction: Prediction
    seconds: float = 0.0
    gap: float | None = None        # relative optimality gap (exact only)
    status: str = "ok"
    label: str = ""                 # e.g. the groups chosen
    details: list = field(default_factory=list)   # per-group rows for the group method
    bound: float | None = None      # exact: an upper bound on the gain of any placement
    detail: str = ""                # exact: how the MILP was reduced and solved


def check_capacity(capacity: int) -> int:
    if capacity is None or capacity <= 0:
        raise InputError(f"the fast-memory capacity must be above zero bytes, not {capacity}")
    return int(capacity)


def usable_capacity(problem: Problem, capacity: int) -> int:
    """The bytes placements may take: the capacity less the model's reserve (veneers, literal pools)."""
    reserve = problem.hw.fast_reserve if problem.hw else 0
    return max(0, capacity - reserve)


def hottest_fitting(problem: Problem, members: list[int], cap: int) -> np.ndarray:
    """A group too big for the memory, trimmed: its members of most self cycles per byte, in that
    order, while they fit ``cap`` bytes (a member that does not fit is skipped, not the end)."""
    mask = np.zeros(problem.n, dtype=bool)
    used = 0
    for k in sorted(members, key=lambda k: -problem.self_cycles[k] / max(1, problem.size[k])):
        if used + problem.size[k] <= cap:
            mask[k] = True
            used += int(problem.size[k])
    return mask


def _adjacency(problem: Problem):
    adj: list[list[tuple[int, float]]] = [[] for _ in range(problem.n)]
    for i, j, c in zip(problem.pair_i.tolist(), problem.pair_j.tolist(), problem.pair_calls.tolist()):
        adj[i].append((j, c))
        adj[j].append((i, c))
    return adj


def _units(problem: Problem) -> list[list[int]]:
    """Movable units: each atomic group as one, every other candidate alone."""
    taken = set()
    units = []
    for g in getattr(problem, "atomic", []):
        members = [k for k in problem.groups.get(g, []) if k not in taken]
        if members:
            units.append(members)
            taken.update(members)
    units.extend([k] for k in range(problem.n) if k not in taken)
    return units


def greedy(problem: Problem, capacity: int) -> Solution:
    t0 = time.perf_counter()
    cap = usable_capacity(problem, check_capacity(capacity))
    adj = _adjacency(problem)
    v, s = problem.cross_cost, problem.both_saving
    units = _units(problem)
    dens = [problem.self_cycles[u].sum() / max(1, problem.size[u].sum()) for u in units]
    order = sorted(range(len(units)), key=lambda k: -dens[k])
    mask = np.zeros(problem.n, dtype=bool)
    used = 0
    for k in order:
        u = units[k]
        sz = int(problem.size[u].sum())
        if used + sz > cap or problem.self_cycles[u].sum() <= 0:
            continue
        inside = set(u)
        marg = float(problem.node_gain[u].sum() - v * problem.out_calls[u].sum())
        for i in u:
            for j, c in adj[i]:
                if j in inside:
                    if i < j:
                        marg += s * c
                elif mask[j]:
                    marg += (v + s) * c
                else:
                    marg -= v * c
        if marg > 0:
            mask[u] = True
            used += sz
    return Solution("greedy", mask, evaluate(problem, mask), time.perf_counter() - t0)


def by_groups(problem: Problem, capacity: int, *, pairs: bool = True) -> Solution:
    """The thesis's method: every group alone, then pairs that fit; best wins."""
    t0 = time.perf_counter()
    cap = usable_capacity(problem, check_capacity(capacity))
    rows = []
    masks = {}
    fits_whole = []
    for name, members in problem.groups.items():
        members = [k for k in members]
        mask = np.zeros(problem.n, dtype=bool)
        total = int(problem.size[members].sum()) if members else 0
        trimmed = False
        if total <= cap:
            mask[members] = True
            if members:
                fits_whole.append(name)
        else:
            trimmed = True
            mask = hottest_fitting(problem, members, cap)
        pred = evaluate(problem, mask)
        masks[name] = mask
        rows.append({"group": name, "members": len(members), "group_bytes": total, "trimmed": trimmed,
                     "excluded_members": len(problem.group_missing.get(name, [])), "prediction": pred})
    rows.sort(key=lambda r: -r["prediction"].gain)
    best_name, best_mask = "(none)", np.zeros(problem.n, dtype=bool)
    best = evaluate(problem, best_mask)
    for r in rows:
        if r["members"] and r["prediction"].gain > best.gain:
            best_name, best_mask, best = r["group"], masks[r["group"]], r["prediction"]
    if pairs:
        for a, b in itertools.combinations(fits_whole, 2):
            m = masks[a] | masks[b]
            if problem.size[m].sum() > cap:
                continue
            p = evaluate(problem, m)
            if p.gain > best.gain:
                best_name, best_mask, best = f"{a}+{b}", m, p
    return Solution("groups", best_mask, best, time.perf_counter() - t0, label=best_name, details=rows)


def _model(problem: Problem, keep: np.ndarray, cap: int):
    """The MILP over the candidates in ``keep`` (others fixed out of fast memory)."""
    from scipy.sparse import coo_matrix, csr_matrix, vstack
    idx = np.flatnonzero(keep)
    pos = np.full(problem.n, -1)
    pos[idx] = np.arange(len(idx))
    n = len(idx)
    v, s = problem.cross_cost, problem.both_saving
    pi, pj, pc = problem.pair_i, problem.pair_j, problem.pair_calls
    inside = keep[pi] & keep[pj]
    out = problem.out_calls.copy()
    # a call to a function held out of fast memory crosses whenever the kept end is placed
    np.add.at(out, pi[~inside], pc[~inside])
    np.add.at(out, pj[~inside], pc[~inside])
    si, sj, sc = pos[pi[inside]], pos[pj[inside]], pc[inside]
    m = len(sc)
    lin = problem.node_gain[idx] - v * out[idx]
    np.subtract.at(lin, si, v * sc)
    np.subtract.at(lin, sj, v * sc)
    quad = sc * (2 * v + s)
    scale = max(1.0, float(np.abs(lin).max(initial=0)), float(quad.max(initial=0)))
    c = -np.concatenate([lin, quad]) / scale
    rows = [csr_matrix((problem.size[idx].astype(float), (np.zeros(n, dtype=int), np.arange(n))), shape=(1, n + m))]
    lo, hi = [[-np.inf]], [[float(cap)]]
    if m:
        r = np.arange(m)
        rows.append(coo_matrix((np.concatenate([np.ones(m), -np.ones(m), np.ones(m), -np.ones(m)]),
                                (np.concatenate([r, r, m + r, m + r]), np.concatenate([n + r, si, n + r, sj]))),
                               shape=(2 * m, n + m)).tocsr())
        lo.append(np.full(2 * m, -np.inf))
        hi.append(np.zeros(2 * m))
    eq_r, eq_c, eq_d = [], [], []
    k = 0
    for g in getattr(problem, "atomic", []):
        mem = [pos[a] for a in problem.groups.get(g, []) if pos[a] >= 0]
        for a in mem[1:]:
            eq_r += [k, k]
            eq_c += [mem[0], a]
            eq_d += [1.0, -1.0]
            k += 1
    if k:
        rows.append(coo_matrix((eq_d, (eq_r, eq_c)), shape=(k, n + m)).tocsr())
        lo.append(np.zeros(k))
        hi.append(np.zeros(k))
    ub = np.ones(n + m)
    ub[:n][problem.size[idx] > cap] = 0          # too big for the memory: never placed
    return dict(c=c, A=vstack(rows).tocsr(), lo=np.concatenate(lo), hi=np.concatenate(hi), ub=ub, n=n, m=m,
                idx=idx, scale=scale)


@contextlib.contextmanager
def solver_output_captured():
    """Route what native code prints on file descriptor 1 (HiGHS writes debug lines such as
    ``HighsMipSolverData::transformNewIntegerFeasibleSolution`` with printf, even with
    disp off) into a temporary file, so stdout carries only kperfdiff's own output (a
    ``--format json`` document must parse). The captured lines are dropped."""
    sys.stdout.flush()
    libc = ctypes.CDLL(None)
    saved = os.dup(1)
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 1)
            try:
                yield
            finally:
                libc.fflush(None)          # C stdio's buffer still holds the solver's lines
                os.dup2(saved, 1)
    finally:
        os.close(saved)


def _solve(mod, *, integer: bool, time_limit: float | None, rel_gap: float, lb: np.ndarray | None = None):
    from scipy.optimize import Bounds, LinearConstraint, milp
    n, m = mod["n"], mod["m"]
    opts = {"disp": False}
    if integer:
        opts["mip_rel_gap"] = rel_gap
    if time_limit is not None:
        opts["time_limit"] = max(0.5, float(time_limit))
    integrality = np.concatenate([np.ones(n), np.zeros(m)]) if integer else np.zeros(n + m)
    with solver_output_captured():
        return milp(mod["c"], constraints=LinearConstraint(mod["A"], mod["lo"], mod["hi"]),
                    integrality=integrality, bounds=Bounds(np.zeros(n + m) if lb is None else lb, mod["ub"]),
                    options=opts)


_STATUS = {0: "optimal", 1: "time limit", 2: "infeasible", 3: "unbounded", 4: "solver error"}

# the whole MILP up to this many variables (functions + call pairs); above, the reduced one
REDUCE_ABOVE = 2000
# the reduced MILP's first set of functions: the best reduced profits, at least FIRST_SET of them
# and FIRST_PER_LP_ONE times as many as the LP places whole ...
FIRST_SET = 400
FIRST_PER_LP_ONE = 4
# ... and at most this many in any round (the rest stay out, their bound stated in the gap)
LARGEST_SET = 3000


def _milp(problem: Problem, keep: np.ndarray, cap: int, fixed_in: np.ndarray, left: float | None,
          rel_gap: float):
    """The MILP over ``keep`` (others held out of fast memory, ``fixed_in`` held in):
    (placement or None, an upper bound on its gain or None, HiGHS's status)."""
    mod = _model(problem, keep, cap)
    lb = np.zeros(mod["n"] + mod["m"])
    lb[:mod["n"]] = fixed_in[mod["idx"]]
    res = _solve(mod, integer=True, time_limit=left, rel_gap=rel_gap, lb=lb)
    mask = None
    if res.x is not None:
        mask = np.zeros(problem.n, dtype=bool)
        mask[mod["idx"][res.x[:mod["n"]] > 0.5]] = True
    db = getattr(res, "mip_dual_bound", None)
    up = -db * mod["scale"] if db is not None and math.isfinite(db) else None
    if up is None and res.status == 0 and res.x is not None:
        up = -res.fun * mod["scale"]
    if res.status == 2:            # nothing placeable with these fixings is feasible: no better placement
        up = -math.inf
    return mask, up, _STATUS.get(res.status, str(res.status))


def _densest(obj: bd.Objective, out: np.ndarray, cap: int, room: int) -> np.ndarray:
    """The functions of best half-split value per byte, up to ``room`` x the capacity in bytes."""
    w = obj.lin + np.bincount(obj.ei, 0.5 * obj.q, obj.n) + np.bincount(obj.ej, 0.5 * obj.q, obj.n)
    ok = np.flatnonzero(~out & (w > 0))
    order = ok[np.argsort(-w[ok] / np.maximum(obj.size[ok], 1), kind="stable")]
    mask = np.zeros(obj.n, dtype=bool)
    mask[order[:int(np.searchsorted(np.cumsum(obj.size[order]), room * cap)) + 1]] = True
    return mask


def _whole_groups(obj: bd.Objective, mask: np.ndarray, out: np.ndarray) -> np.ndarray:
    for a in obj.atomic:
        if mask[a].any():
            mask[a] = ~out[a]
    return mask


def _exact_reduced(problem: Problem, cap: int, fallback: Solution, t0: float, time_limit: float | None,
                   rel_gap: float):
    """The reduced MILP (see :mod:`.bound`): (candidate placements, upper bound, solver status, what was done)."""
    def left():
        return None if time_limit is None else time_limit - (time.perf_counter() - t0)
    obj = bd.objective(problem, cap)
    out = bd.dominated(obj)
    start = fallback.mask | _densest(obj, out, cap, 4)
    lp_deadline = None if time_limit is None else t0 + 0.5 * time_limit
    bnd, _, r, x, rounds = bd.lp_bound(obj, out, cap, start & ~out, lp_deadline)
    upper = bnd
    live = ~out & np.isfinite(r)
    lp_ones = live & (x > 1 - 1e-6)
    cands = [(fallback.mask, "greedy"), (lp_ones, "LP rounded down")]
    best = max(evaluate(problem, m).gain for m, _ in cands if problem.size[m].sum() <= cap)
    n_first = min(int(live.sum()), max(FIRST_SET, FIRST_PER_LP_ONE * int(lp_ones.sum())))
    keep = np.zeros(problem.n, dtype=bool)
    keep[np.argsort(-r, kind="stable")[:n_first]] = True
    keep = _whole_groups(obj, (keep | fallback.mask | lp_ones) & live, out)
    status, sizes = ("no time left for the MILP", []) if keep.any() else ("optimal: no function can add gain", [])
    while keep.any() and (left() is None or left() > 0):
        fixed_in = keep & live & (bnd - r < best)
        if problem.size[fixed_in].sum() > cap:
            fixed_in[:] = False
        mask, up, status = _milp(problem, keep, cap, fixed_in, left(), rel_gap)
        sizes.append(int(keep.sum()))
        if mask is not None:
            cands.append((mask, "solver"))
            best = max(best, evaluate(problem, mask).gain)
        # every placement either keeps to this round's set and fixings (bounded by the MILP) or
        # places a function left out (at most bnd + r_i) or leaves out one held in (bnd - r_i)
        outside = float((bnd + r[live & ~keep]).max(initial=-np.inf))
        held = float((bnd - r[fixed_in]).max(initial=-np.inf))
        if up is not None:
            upper = min(upper, max(up, outside, held))
        if status != "optimal" or outside <= max(best, -np.inf if up is None else up):
            break
        grown = _whole_groups(obj, keep | (live & (r >= -(bnd - best))), out)
        if grown.sum() > LARGEST_SET:
            extra = np.flatnonzero(grown & ~keep)
            grown[extra[np.argsort(-r[extra], kind="stable")[LARGEST_SET - int(keep.sum()):]]] = False
            grown = _whole_groups(obj, grown, out)
        if (grown == keep).all():
            break
        keep = grown
    done = (f"LP bound by column generation ({rounds} LP{'s' if rounds != 1 else ''}); " if rounds else
            "fractional-knapsack bound (no LP solved); ") + (
            f"{int(out.sum())} of {problem.n} functions dominated; MILP over "
            f"{' then '.join(str(k) for k in sizes) or 'no'} functions")
    return cands, upper, status, done


def _exact_whole(problem: Problem, cap: int, fallback: Solution, t0: float, time_limit: float | None,
                 rel_gap: float):
    """The MILP over every candidate: (candidate placements, upper bound, solver status, what was done)."""
    left = None if time_limit is None else time_limit - (time.perf_counter() - t0)
    cands = [(fallback.mask, "greedy")]
    upper = None
    status = "no time left for the MILP"
    if left is None or left > 0:
        mask, upper, status = _milp(problem, np.ones(problem.n, dtype=bool), cap, np.zeros(problem.n, dtype=bool),
                                    left, rel_gap)
        if mask is not None:
            cands.append((mask, "solver"))
    if upper is None:
        obj = bd.objective(problem, cap)
        out = obj.ub == 0
        upper = bd.bound_value(obj, bd.knapsack_dual(obj, out, cap), out, cap)[0]
        status += "; gap against the fractional-knapsack bound"
    return cands, upper, status, f"MILP over all {problem.n} functions"


def exact(problem: Problem, capacity: int, *, time_limit: float | None = 60.0, rel_gap: float = 1e-4,
          fallback: Solution | None = None, reduce: bool | None = None) -> Solution:
    """The MILP. Above ``REDUCE_ABOVE`` variables (or with ``reduce``) it is first
    reduced exactly (:mod:`.bound`): the LP bound by column generation, dominated
    functions and functions whose bound cannot beat the best placement found
    dropped, the MILP solved over the rest. The gap is always against an upper
    bound of the whole problem. ``time_limit`` (seconds, for the whole method)
    stops it with the best placement found; the greedy placement (``fallback``)
    is one of the candidates, so the answer is never worse than greedy's."""
    t0 = time.perf_counter()
    cap = usable_capacity(problem, check_capacity(capacity))
    if time_limit is not None and not time_limit >= 0:
        raise InputError(f"the time limit must be zero or more seconds, not {time_limit}")
    if fallback is None:
        fallback = greedy(problem, capacity)
    if problem.n == 0:
        return Solution("exact", np.zeros(0, dtype=bool), evaluate(problem, np.zeros(0, dtype=bool)), 0.0, 0.0)
    if reduce is None:
        reduce = problem.n + len(problem.pair_calls) > REDUCE_ABOVE
    how_solved = _exact_reduced if reduce else _exact_whole
    cands, upper, status, done = how_solved(problem, cap, fallback, t0, time_limit, rel_gap)
    best = None
    for mask, how in cands:
        if problem.size[mask].sum() > cap:
            continue
        pred = evaluate(problem, mask)
        if best is None or pred.gain > best[1].gain + 1e-9 * max(1.0, abs(pred.gain)):
            best = (mask, pred, how)
    mask, pred, how = best
    gap = max(0.0, (upper - pred.gain) / max(abs(upper), 1e-12))
    if gap <= rel_gap and status.startswith("optimal"):
        status = "optimal"
    elif how != "solver":
        status += f" ({how} placement kept: the best found)"
    sol = Solution("exact", mask, pred, time.perf_counter() - t0, gap, status)
    sol.bound, sol.detail = upper, done
    return sol


def solve(problem: Problem, method: str, capacity: int, *, time_limit: float | None = 60.0) -> Solution:
    if method == "greedy":
        return greedy(problem, capacity)
    if method == "groups":
        return by_groups(problem, capacity)
    if method == "exact":
        return exact(problem, capacity, time_limit=time_limit)
    raise InputError(f"unknown placement method {method!r}; use exact, greedy or groups")


def methods_for(choice: str) -> list[str]:
    return ["exact", "greedy", "groups"] if choice == "all" else [choice]


def sweep(problem: Problem, capacities: list[int], methods: list[str], *, time_limit: float | None = 20.0):
    """Predicted gain of each method at each capacity: list of (capacity, {method: Solution})."""
    out = []
    for cap in capacities:
        check_capacity(cap)
        row = {}
        for meth in methods:
            row[meth] = solve(problem, meth, cap, time_limit=time_limit)
        out.append((cap, row))
    return out
