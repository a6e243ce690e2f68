"""The reduced exact optimiser (place/bound.py) against exhaustive search and the whole MILP.

Instances are random Problems built directly: sizes, fetch savings (some
negative), calls between candidates and to code that cannot move, both fill
models' per-call costs, and sometimes an all-or-none group.
"""
import itertools

import numpy as np
import pytest

from kperfdiff.core.errors import InputError
from kperfdiff.ingest.load import load
from kperfdiff.place import bound as bd
from kperfdiff.place import optimise
from kperfdiff.place.inputs import load_groups, load_hw, load_sizes
from kperfdiff.place.model import Problem, build_problem, evaluate
from support import ROOT


def random_problem(n: int, m: int, seed: int, *, both: float = 0.0, atomic: bool = False) -> Problem:
    rng = np.random.default_rng(seed)
    size = (rng.integers(4, 100, n) * 4).astype(np.int64)
    heat = rng.pareto(1.2, n) * 1000
    gain = heat * rng.uniform(0.5, 1.5, n) - rng.uniform(0, 200, n)
    pairs = {}
    while len(pairs) < min(m, n * (n - 1) // 2):
        a, b = sorted(rng.choice(n, 2, replace=False).tolist())
        pairs[(a, b)] = float(rng.pareto(1.0) * 50)
    pi = np.array([a for a, _ in pairs], dtype=np.int64)
    pj = np.array([b for _, b in pairs], dtype=np.int64)
    pc = np.array(list(pairs.values()))
    out = np.where(rng.random(n) < 0.3, rng.pareto(1.0, n) * 20, 0.0)
    names = [f"f{k}" for k in range(n)]
    p = Problem(names, size, heat, gain, pi, pj, pc, out, 3.0, both, 1e6, 1e6,
                groups={"g": [0, 1, 2]} if atomic else {})
    p.atomic = ["g"] if atomic else []
    return p


def brute(p: Problem, cap: int) -> float:
    best = -np.inf
    g = set(p.groups.get("g", [])) if p.atomic else set()
    for bits in itertools.product([False, True], repeat=p.n):
        m = np.array(bits)
        if g and len({bool(m[k]) for k in g}) > 1:
            continue
        if p.size[m].sum() <= cap:
            best = max(best, evaluate(p, m).gain)
    return best


CASES = [(seed, both, atomic) for seed in range(12) for both, atomic in [(0.0, False), (6.25, False), (0.0, True)]]


@pytest.mark.parametrize("seed, both, atomic", CASES)
def test_reduced_and_whole_milp_find_the_exhaustive_optimum(seed, both, atomic):
    p = random_problem(11, 18, seed, both=both, atomic=atomic)
    cap = int(p.size.sum() * (0.15 + 0.05 * (seed % 5)))
    best = brute(p, cap)
    for reduce in (True, False):
        ex = optimise.exact(p, cap, time_limit=20, rel_gap=1e-9, reduce=reduce)
        assert ex.prediction.bytes <= cap
        assert ex.prediction.gain == pytest.approx(best, rel=1e-7, abs=1e-6), reduce
        assert ex.bound >= best - 1e-6 * abs(best)          # the stated bound holds
        assert ex.gap == pytest.approx(0, abs=1e-6)
        if atomic:
            assert len({k in ex.prediction.placed for k in ("f0", "f1", "f2")}) == 1


@pytest.mark.parametrize("seed", range(6))
def test_lagrangian_bound_holds_for_any_split_and_price(seed):
    p = random_problem(10, 20, seed, both=6.25)
    cap = int(p.size.sum() * 0.3)
    best = brute(p, cap)
    obj = bd.objective(p, cap)
    out = obj.ub == 0
    rng = np.random.default_rng(seed)
    for _ in range(20):
        dual = bd.Dual(obj.q * rng.random(len(obj.q)), float(rng.uniform(0, 50)))
        assert bd.bound_value(obj, dual, out, cap)[0] >= best - 1e-6 * abs(best)


@pytest.mark.parametrize("seed", range(4))
def test_column_generation_reaches_the_whole_lp_bound(seed):
    """The LP over a few functions, its duals extended and violators added, ends at the
    LP relaxation of the whole problem (solved here directly)."""
    p = random_problem(300, 2000, seed)
    cap = int(np.median(p.size) * 12)
    obj = bd.objective(p, cap)
    out = bd.dominated(obj)
    start = np.zeros(p.n, dtype=bool)
    start[np.argsort(-p.node_gain)[:20]] = True
    b, _, _, _, rounds = bd.lp_bound(obj, out, cap, start & ~out, None, batch=10)
    assert rounds > 1                       # the first set was not enough
    whole = optimise._model(p, np.ones(p.n, dtype=bool), cap)
    lp = optimise._solve(whole, integer=False, time_limit=None, rel_gap=1e-9)
    assert b == pytest.approx(-lp.fun * whole["scale"], rel=1e-6)


def test_dominated_functions_are_in_no_optimum():
    p = random_problem(12, 10, 3)
    p.node_gain[:4] = -50.0                 # no saving and ...
    keep = ~np.isin(p.pair_i, [0, 1, 2, 3]) & ~np.isin(p.pair_j, [0, 1, 2, 3])
    p.pair_i, p.pair_j, p.pair_calls = p.pair_i[keep], p.pair_j[keep], p.pair_calls[keep]   # ... no calls
    cap = int(p.size.sum() * 0.4)
    out = bd.dominated(bd.objective(p, cap))
    assert out[:4].all()
    ex = optimise.exact(p, cap, rel_gap=1e-9, reduce=True)
    assert ex.prediction.gain == pytest.approx(brute(p, cap), rel=1e-7)
    assert not set(ex.prediction.placed) & {"f0", "f1", "f2", "f3"}


def test_reduced_matches_whole_milp_on_a_larger_instance():
    p = random_problem(400, 3000, 7, both=6.25)
    cap = int(np.median(p.size) * 15)
    red = optimise.exact(p, cap, time_limit=30, rel_gap=1e-7, reduce=True)
    whole = optimise.exact(p, cap, time_limit=30, rel_gap=1e-7, reduce=False)
    assert red.status == whole.status == "optimal"
    assert red.prediction.gain == pytest.approx(whole.prediction.gain, rel=1e-6)
    assert red.gap <= 1e-6 and red.bound >= whole.prediction.gain * (1 - 1e-6)
    assert "MILP over" in red.detail and f"of {p.n} functions" in red.detail


def test_no_time_keeps_greedy_and_states_a_valid_gap():
    p = random_problem(400, 3000, 8)
    cap = int(np.median(p.size) * 15)
    gd = optimise.greedy(p, cap)
    best = optimise.exact(p, cap, rel_gap=1e-7)
    for reduce in (True, False):
        ex = optimise.exact(p, cap, time_limit=0, reduce=reduce, fallback=gd)
        assert "greedy placement kept" in ex.status
        assert ex.prediction.bytes <= cap and ex.prediction.gain == gd.prediction.gain
        assert ex.gap is not None and ex.gap > 0
        assert ex.bound >= best.prediction.gain
        assert ex.gap == pytest.approx((ex.bound - ex.prediction.gain) / ex.bound)


def test_short_time_limit_still_gives_a_placement_within_capacity_and_a_gap():
    p = random_problem(3000, 30000, 9)
    cap = int(np.median(p.size) * 40)
    ex = optimise.exact(p, cap, time_limit=0.5)
    assert ex.prediction.bytes <= cap
    assert ex.gap is not None and 0 <= ex.gap < 1
    assert ex.prediction.gain >= optimise.greedy(p, cap).prediction.gain - 1e-6
    assert ex.bound >= ex.prediction.gain


def test_negative_time_limit_is_refused():
    with pytest.raises(InputError, match="time limit"):
        optimise.exact(random_problem(5, 4, 0), 100, time_limit=-1)


@pytest.mark.parametrize("seed", range(3))
def test_a_first_set_too_small_grows_until_the_left_out_cannot_help(seed, monkeypatch):
    monkeypatch.setattr(optimise, "FIRST_SET", 3)
    monkeypatch.setattr(optimise, "FIRST_PER_LP_ONE", 0)
    p = random_problem(300, 2500, 20 + seed, both=6.25 * (seed % 2))
    cap = int(np.median(p.size) * 12)
    whole = optimise.exact(p, cap, time_limit=30, rel_gap=1e-8, reduce=False)
    red = optimise.exact(p, cap, time_limit=30, rel_gap=1e-8, reduce=True)
    assert " then " in red.detail                       # a second MILP over a larger set
    assert red.prediction.gain == pytest.approx(whole.prediction.gain, rel=1e-6)
    assert red.bound >= whole.prediction.gain * (1 - 1e-9)


@pytest.mark.parametrize("cap", [2048, 4096, 8192, 16384])
def test_reduced_and_whole_agree_on_the_recorded_profile(cap):
    root = ROOT
    groups, ex = load_groups([])
    p = build_problem(load(root / "tests/data/place/forkexec.folded"), load_sizes(root / "tests/data/place/System.map"),
                      load_hw(root / "examples/place/arm926-tcm.toml"), groups=groups, excludes=ex)
    red = optimise.exact(p, cap, rel_gap=1e-9, reduce=True)
    whole = optimise.exact(p, cap, rel_gap=1e-9, reduce=False)
    assert red.prediction.gain == pytest.approx(whole.prediction.gain, rel=1e-9)
    assert red.bound >= whole.prediction.gain * (1 - 1e-9) and red.status == "optimal"


def test_nothing_worth_placing_or_nothing_fits():
    p = random_problem(40, 80, 1)
    p.node_gain[:] = -10.0                  # only calls could pay, and they do not
    for reduce in (True, False):
        ex = optimise.exact(p, 2000, reduce=reduce)
        assert ex.status == "optimal" and ex.prediction.placed == [] and ex.gap == 0
    p = random_problem(40, 80, 2)
    for reduce in (True, False):            # every function larger than the memory
        ex = optimise.exact(p, 12, reduce=reduce)
        assert ex.status == "optimal" and ex.prediction.placed == [] and ex.gap == 0
