"""Exact reductions and upper bounds for the placement MILP (:func:`.optimise.exact`).

The MILP maximises, over binary x (1 = placed)::

    gain(x) = sum_i lin_i x_i + sum_e q_e x_i(e) x_j(e),   sum_i size_i x_i <= cap

with lin_i = a_i - v*(out_i + sum of i's calls to candidates) and q_e = c_e*(2v + s) >= 0
for each pair e of candidates that call each other (see :mod:`.optimise`).

The bound (a Lagrangian relaxation, the dual of the MILP's LP relaxation)
    Split every q_e into a share alpha_e for one end and q_e - alpha_e for the
    other (0 <= alpha_e <= q_e). A pair with both ends placed is then paid for
    by its two ends' shares, so gain(x) <= sum_i w_i x_i with
    w_i = lin_i + i's shares. With a price lambda >= 0 per byte,
    sum_i w_i x_i <= lambda*cap + sum_i (w_i - lambda*size_i) x_i, so for
    r_i = w_i - lambda*size_i::

        gain(x) <= B = lambda*cap + sum_i max(0, r_i)        for every placement x

    B holds for *any* split and price, so it is computed from the arrays
    whatever produced them: the LP's duals are only a good guess. The best
    split and price give the LP relaxation's optimum; they are found by
    column generation (:func:`lp_bound`): the LP over a few thousand
    promising functions, its duals extended to all, the functions whose
    r_i > 0 added, until none is left.

Reductions that keep every better placement (so gaps stay relative to the whole problem)
    * a function larger than the memory is never placed;
    * dominance (:func:`dominated`): if placing i cannot help even with all its
      partners placed (lin_i + sum of its q_e <= 0), removing i from any
      placement loses nothing; repeated, as removed partners turn calls into
      crossing calls;
    * reduced-cost fixing (:func:`fixings`): with x_i = 1 forced, the bound
      becomes B + min(0, r_i); with x_i = 0 forced, B - max(0, r_i). If that
      is below a placement already found, every better placement has x_i = 0
      (or 1). The MILP is then solved over the functions left; the bound of
      the whole problem is the larger of its bound and the fixings' bounds.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from kperfdiff.place.model import Problem


@dataclass
class Objective:
    """The MILP's objective in arrays: per-function lin, per-pair q (both ends candidates)."""
    lin: np.ndarray
    ei: np.ndarray
    ej: np.ndarray
    q: np.ndarray
    size: np.ndarray
    ub: np.ndarray                      # 0 where a function can never be placed
    atomic: list[np.ndarray]            # members of each all-or-none group

    @property
    def n(self) -> int:
        return len(self.lin)


def objective(problem: Problem, cap: int) -> Objective:
    v, s = problem.cross_cost, problem.both_saving
    n = problem.n
    pc = problem.pair_calls
    deg = np.bincount(problem.pair_i, pc, n) + np.bincount(problem.pair_j, pc, n)
    lin = problem.node_gain - v * (problem.out_calls + deg)
    q = pc * (2 * v + s)
    keep = q > 0
    ub = (problem.size <= cap).astype(float)
    atomic = [np.asarray(problem.groups.get(g, []), dtype=np.int64) for g in getattr(problem, "atomic", [])]
    atomic = [a for a in atomic if len(a) > 1]
    for a in atomic:                    # a group too big for the memory is never placed, nor its members
        if problem.size[a].sum() > cap:
            ub[a] = 0
    return Objective(lin, problem.pair_i[keep], problem.pair_j[keep], q[keep], problem.size.astype(float), ub,
                     atomic)


def in_atomic(obj: Objective) -> np.ndarray:
    m = np.zeros(obj.n, dtype=bool)
    for a in obj.atomic:
        m[a] = True
    return m


def dominated(obj: Objective) -> np.ndarray:
    """Functions no placement needs (module docstring): never placeable, or whose
    best marginal gain, every partner placed, is not positive. Members of
    all-or-none groups are only removed when the group cannot be placed."""
    out = obj.ub == 0
    movable = ~in_atomic(obj)
    while True:
        live = ~out[obj.ei] & ~out[obj.ej]
        best = obj.lin + np.bincount(obj.ei[live], obj.q[live], obj.n) + np.bincount(obj.ej[live], obj.q[live], obj.n)
        new = out | (movable & (best <= 0))
        if (new == out).all():
            return out
        out = new


@dataclass
class Dual:
    """A split of every pair (share of q_e to its first end) and a price per byte."""
    share_i: np.ndarray
    lam: float
    nu: np.ndarray | None = None        # per-function terms of the group equalities' multipliers


def reduced_profits(obj: Objective, dual: Dual, out: np.ndarray) -> np.ndarray:
    """Every function's r_i = w_i - lambda*size_i; functions in ``out`` (never placed)
    take the whole q_e of their pairs and get r_i = -inf."""
    share_i = dual.share_i.copy()
    oi, oj = out[obj.ei], out[obj.ej]
    share_i[oi] = obj.q[oi]             # a pair with an end never placed is never paid: the out end takes it
    share_i[oj & ~oi] = 0.0
    w = obj.lin + np.bincount(obj.ei, share_i, obj.n) + np.bincount(obj.ej, obj.q - share_i, obj.n)
    if dual.nu is not None:
        w = w + dual.nu
    r = w - dual.lam * obj.size
    r[out] = -np.inf
    return r


def bound_value(obj: Objective, dual: Dual, out: np.ndarray, cap: int) -> tuple[float, np.ndarray]:
    """(B, r) of the module docstring."""
    r = reduced_profits(obj, dual, out)
    return dual.lam * cap + float(np.maximum(r, 0).sum()), r


def knapsack_dual(obj: Objective, out: np.ndarray, cap: int) -> Dual:
    """Each pair split in half and the fractional knapsack's critical price: the
    quick bound of the greedy densities, a start for :func:`lp_bound`."""
    share = 0.5 * obj.q
    w = obj.lin + np.bincount(obj.ei, share, obj.n) + np.bincount(obj.ej, share, obj.n)
    ok = ~out & (w > 0)
    idx = np.flatnonzero(ok)
    dens = w[idx] / np.maximum(obj.size[idx], 1)
    order = idx[np.argsort(-dens, kind="stable")]
    filled = np.cumsum(obj.size[order])
    k = int(np.searchsorted(filled, cap, side="right"))
    lam = float(w[order[k]] / max(obj.size[order[k]], 1)) if k < len(order) else 0.0
    return Dual(share, lam)


def restricted_lp(obj: Objective, keep: np.ndarray, cap: int, time_limit: float | None):
    """The LP relaxation with only the functions in ``keep`` placeable: (its value, its
    duals as a :class:`Dual` over the whole problem, its x over the whole problem), or
    None when HiGHS gives no optimum. A pair with one end outside ``keep`` goes wholly
    to that end (:func:`absorb` moves what it can); one with both outside is split in half."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix
    idx = np.flatnonzero(keep)
    pos = np.full(obj.n, -1)
    pos[idx] = np.arange(len(idx))
    n = len(idx)
    inner = np.flatnonzero(keep[obj.ei] & keep[obj.ej])
    si, sj, q = pos[obj.ei[inner]], pos[obj.ej[inner]], obj.q[inner]
    m = len(q)
    scale = max(1.0, float(np.abs(obj.lin[idx]).max(initial=0)), float(q.max(initial=0)))
    c = -np.concatenate([obj.lin[idx], q]) / scale
    r = np.arange(m)
    rows = np.concatenate([np.zeros(n, dtype=np.int64), 1 + r, 1 + r, 1 + m + r, 1 + m + r])
    cols = np.concatenate([np.arange(n), n + r, si, n + r, sj])
    vals = np.concatenate([obj.size[idx], np.ones(m), -np.ones(m), np.ones(m), -np.ones(m)])
    a_ub = coo_matrix((vals, (rows, cols)), shape=(1 + 2 * m, n + m)).tocsr()
    b_ub = np.concatenate([[float(cap)], np.zeros(2 * m)])
    eq_rows, eq_cols, eq_vals = [], [], []
    k = 0
    for a in obj.atomic:
        mem = pos[a]
        if (mem < 0).any():
            continue
        for b in mem[1:]:
            eq_rows += [k, k]
            eq_cols += [mem[0], b]
            eq_vals += [1.0, -1.0]
            k += 1
    a_eq = coo_matrix((eq_vals, (eq_rows, eq_cols)), shape=(k, n + m)).tocsr() if k else None
    opts = {"presolve": True}
    if time_limit is not None:
        opts["time_limit"] = max(0.5, float(time_limit))
    bounds = np.stack([np.zeros(n + m), np.concatenate([obj.ub[idx], np.ones(m)])], axis=1)
    res = linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.zeros(k) if k else None, bounds=bounds,
                  method="highs", options=opts)
    if res.status != 0:
        return None
    marg = -res.ineqlin.marginals * scale          # d(max)/d(b): >= 0
    lam = max(0.0, float(marg[0]))
    share_i = 0.5 * obj.q
    mu_i = np.clip(marg[1:1 + m], 0, None)
    share_i[inner] = np.minimum(mu_i, q)
    cross = keep[obj.ei] != keep[obj.ej]
    share_i[cross & ~keep[obj.ei]] = obj.q[cross & ~keep[obj.ei]]
    share_i[cross & keep[obj.ei]] = 0.0
    nu = None
    if k:
        nu_rows = -res.eqlin.marginals * scale
        nu = np.zeros(obj.n)
        np.add.at(nu, idx[np.asarray(eq_cols[0::2])], -nu_rows)
        np.add.at(nu, idx[np.asarray(eq_cols[1::2])], nu_rows)
    x = np.zeros(obj.n)
    x[idx] = res.x[:n]
    return -res.fun * scale, Dual(share_i, lam, nu), x


def absorb(obj: Objective, dual: Dual, keep: np.ndarray, out: np.ndarray) -> Dual:
    """Move the share of each pair between ``keep`` and the rest onto the kept end as far
    as that end's negative r_i allows (which leaves B unchanged), the rest to the other end."""
    r = reduced_profits(obj, dual, out)
    share = dual.share_i.copy()
    for first in (True, False):
        kept_end = obj.ei if first else obj.ej
        other = obj.ej if first else obj.ei
        e = np.flatnonzero(keep[kept_end] & ~keep[other] & ~out[kept_end] & ~out[other])
        if not len(e):
            continue
        owner = kept_end[e]
        order = np.lexsort((-obj.q[e], owner))
        e, owner = e[order], owner[order]
        room = np.where(np.isfinite(r[owner]), np.maximum(-r[owner], 0), 0)
        cum = np.cumsum(obj.q[e])
        first_of = np.r_[True, owner[1:] != owner[:-1]]
        base = np.maximum.accumulate(np.where(first_of, cum - obj.q[e], 0))
        start = cum - obj.q[e] - base
        give = np.clip(room - start, 0, obj.q[e])
        share[e] = give if first else obj.q[e] - give
        taken = np.bincount(owner, give, obj.n)
        r = r + taken
    return Dual(share, dual.lam, dual.nu)


def lp_bound(obj: Objective, out: np.ndarray, cap: int, start: np.ndarray, deadline: float | None,
             batch: int = 2000) -> tuple[float, Dual, np.ndarray, np.ndarray, int]:
    """Column generation (module docstring). Returns (B, its dual, r, the LP's x, rounds);
    B is a valid bound of the whole problem even when time runs out first."""
    dual = knapsack_dual(obj, out, cap)
    best, r = bound_value(obj, dual, out, cap)
    best_dual = dual
    keep = start & ~out
    if not keep.any():                  # nothing to start from: the best reduced profits of the split in half
        keep[np.argsort(-r, kind="stable")[:batch]] = True
        keep &= ~out
    x = np.zeros(obj.n)
    rounds = 0
    while keep.any():
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and left <= 0:
            break
        got = restricted_lp(obj, keep, cap, left)
        if got is None:
            break
        rounds += 1
        _, dual, x = got
        dual = absorb(obj, dual, keep, out)
        b, r_new = bound_value(obj, dual, out, cap)
        if b < best:
            best, best_dual, r = b, dual, r_new
        add = np.flatnonzero(~keep & ~out & (r_new > 1e-9 * max(1.0, abs(b))))
        if not len(add):
            break
        add = add[np.argsort(-r_new[add], kind="stable")[:batch]]
        keep[add] = True
        for a in obj.atomic:
            if keep[a].any():
                keep[a] = True
    best, r = bound_value(obj, best_dual, out, cap)
    return best, best_dual, r, x, rounds
