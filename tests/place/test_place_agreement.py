"""The cost model against its own simulator on the test profile.

Bound on |predicted - simulated| for the exact placement: 3 points of kernel
time. The measured model counts each placed function's own fills, its fetch
cycles and every crossing call exactly as the simulator does on the same
trace; what it leaves out are misses only a combination of placed functions
avoids (an under-estimate) and the new set mapping after relinking (either
sign). On forkexec.folded at 8K the simulator's own gain for one placement
moves by about 2.5 points between trace seeds 1..5 (16.2..18.7%), so a model
cannot be held closer than that to one seed; 3 points is that spread plus a
margin, and well inside the 3.9 points (seed 1) by which the uniform model
missed.
"""
import json

import numpy as np
import pytest

import support
from support import ROOT, run_cli
from kperfdiff.place import optimise
from kperfdiff.place import simulate as sim
from kperfdiff.place.inputs import load_groups, load_hw, load_sizes
from kperfdiff.place.model import build_problem
from kperfdiff.ingest.load import load

DATA = support.DATA / "place"
PROF, MAP, HW = DATA / "forkexec.folded", DATA / "System.map", ROOT / "examples/place/arm926-tcm.toml"
BOUND = 3.0


def test_plan_ranks_methods_as_the_simulator_does():
    p = run_cli("place", "plan", PROF, "--sizes", MAP, "--hw", HW, "--capacity", "8K", "--simulate",
                "--format", "json", check=0)
    doc = json.loads(p.stdout)
    rows = {r["label"]: r for r in doc["simulation"][1:]}
    pred = {m: rows[m]["model_gain_pct"] for m in ("exact", "greedy", "groups")}
    simg = {m: rows[m]["sim_gain_pct"] for m in pred}
    top = max(pred, key=pred.get)
    assert simg[top] >= max(simg.values()) - 1.0
    assert abs(pred["exact"] - simg["exact"]) < BOUND


@pytest.mark.parametrize("seed", [2, 3])
def test_exact_prediction_holds_on_another_trace(seed):
    hw, st, prof = load_hw(HW), load_sizes(MAP), load(PROF)
    groups, ex = load_groups([])
    prob = build_problem(prof, st, hw, groups=groups, excludes=ex, fills="measured", seed=1)
    sols = {m: optimise.solve(prob, m, 8192) for m in ("exact", "greedy", "groups")}
    tr = sim.reconstruct(prof, st, hw, seed=seed)
    res = sim.simulate_placements(tr, st, hw, [(m, set(s.prediction.placed)) for m, s in sols.items()])
    simg = {r.label: 100 * (res[0].cycles - r.cycles) / res[0].cycles for r in res[1:]}
    top = max(sols, key=lambda m: sols[m].prediction.gain)
    assert simg[top] >= max(simg.values()) - 1.0
    assert abs(sols["exact"].prediction.gain_pct - simg["exact"]) < BOUND


def test_attributing_cache_counts_the_same_fills():
    rng = np.random.default_rng(0)
    seq = rng.integers(0, 40, 3000).tolist()
    plain, attr = sim.ICache(256, 16, 2), sim.AttributingICache(256, 16, 2)
    for ln in seq:
        assert plain.access(ln) == attr.touch(ln, f"f{ln % 5}")
    assert plain.fills == attr.fills


def test_relief_by_hand():
    # one set of 2 ways: a's line 0, then b's lines 1 and 2 push it out; a misses again.
    # Leaving b in fast memory would have kept line 0 (2 - 2 + 1 = 1 line of b needed): b gets the miss.
    c = sim.AttributingICache(32, 16, 2)
    for ln, fn in [(0, "a"), (1, "b"), (2, "b"), (0, "a")]:
        c.touch(ln, fn)
    assert c.fills == 4 and dict(c.relief) == {"b": 1.0}
    # lines of two functions in between, one each: either alone avoids it, half each
    c = sim.AttributingICache(32, 16, 2)
    for ln, fn in [(0, "a"), (1, "b"), (2, "c"), (0, "a")]:
        c.touch(ln, fn)
    assert dict(c.relief) == {"b": 0.5, "c": 0.5}
