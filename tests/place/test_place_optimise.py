"""Optimisers against exhaustive search on a small call graph."""
import itertools

import numpy as np
import pytest

from kperfdiff.core.errors import InputError
from kperfdiff.place import optimise
from kperfdiff.place.inputs import Group, HwModel
from kperfdiff.place.model import build_problem, evaluate

from support.placement import profile_from_folded, sizes_table

# Two hot paths. "sched" has a heavy caller whose callees are not in its group,
# so the group alone pays crossing calls; the best placement mixes functions of
# both groups, which the thesis's one-group-at-a-time method cannot find.
FOLDED = {
    "sys;sched_a": 50, "sys;sched_a;sched_b": 120, "sys;sched_a;helper1": 150,
    "sys;fault_a": 40, "sys;fault_a;fault_b": 200, "sys;fault_a;helper2": 60,
    "sys;cold_a": 10, "sys;cold_a;cold_b": 15, "sys": 30,
}
SIZES = {"sys": 512, "sched_a": 256, "sched_b": 128, "helper1": 96, "fault_a": 384, "fault_b": 192,
         "helper2": 160, "cold_a": 640, "cold_b": 320}
GROUPS = {"sched": Group("sched", ["sched_*"], source="shipped"),
          "fault": Group("fault", ["fault_*"], source="shipped"),
          "cold": Group("cold", ["cold_*"], source="shipped")}


def _hw():
    return HwModel(instruction_bytes=4, function_align=4, icache_size=1024, line_size=32, ways=2,
                   t_fast=1, t_cache=1, t_fill=25, veneer_cycles=3, split_fills=0.5, call_fills=0.25,
                   clock_mhz=100, sample_hz=1000, fills_per_kinstr=40, fast_reserve=0)


def _problem():
    return build_problem(profile_from_folded(FOLDED), sizes_table(SIZES), _hw(), groups=GROUPS)


def _brute(problem, cap):
    best, best_mask = -np.inf, None
    for bits in itertools.product([False, True], repeat=problem.n):
        m = np.array(bits)
        if problem.size[m].sum() <= cap:
            g = evaluate(problem, m).gain
            if g > best + 1e-6:
                best, best_mask = g, m
    return best, best_mask


@pytest.mark.parametrize("cap", [256, 512, 768, 1024, 1536])
def test_exact_matches_exhaustive_search_and_beats_groups(cap):
    p = _problem()
    best, mask = _brute(p, cap)
    ex = optimise.exact(p, cap, time_limit=30)
    assert ex.prediction.gain == pytest.approx(best, rel=1e-9, abs=1e-6)
    assert ex.prediction.bytes <= cap
    assert sorted(ex.prediction.placed) == sorted(np.array(p.names)[mask].tolist())
    assert ex.gap is not None and ex.gap <= 1e-3
    gr = optimise.by_groups(p, cap)
    assert gr.prediction.gain <= ex.prediction.gain + 1e-6
    gd = optimise.greedy(p, cap)
    assert gd.prediction.gain <= ex.prediction.gain + 1e-6
    assert gd.prediction.bytes <= cap


def test_group_method_strictly_worse_here_and_a_group_can_lose():
    p = _problem()
    ex = optimise.exact(p, 1024)
    gr = optimise.by_groups(p, 1024)
    assert gr.prediction.gain < ex.prediction.gain
    # the caller alone in fast memory, callees left behind: predicted slower
    alone = evaluate(p, p.mask(["sched_a"]))
    assert alone.gain < 0


def test_atomic_group_is_all_or_none():
    prof = profile_from_folded(FOLDED)
    p = build_problem(prof, sizes_table(SIZES), _hw(), groups=GROUPS, atomic=["cold"])
    for cap in (512, 1024, 2048):
        for sol in (optimise.exact(p, cap), optimise.greedy(p, cap)):
            placed = set(sol.prediction.placed)
            assert len(placed & {"cold_a", "cold_b"}) in (0, 2)


def test_zero_capacity_is_refused():
    with pytest.raises(InputError, match="capacity"):
        optimise.exact(_problem(), 0)
    with pytest.raises(InputError, match="capacity"):
        optimise.greedy(_problem(), 0)


def test_sweep_is_monotone_for_exact():
    p = _problem()
    res = optimise.sweep(p, [256, 512, 1024, 2048], ["exact", "greedy", "groups"])
    gains = [row["exact"].prediction.gain for _, row in res]
    assert gains == sorted(gains)
    for _, row in res:
        assert row["exact"].prediction.gain >= max(row["greedy"].prediction.gain, row["groups"].prediction.gain) - 1e-6
