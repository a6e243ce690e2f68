"""The TCM study's four worked examples, by the equations and by the simulator."""
import pytest

from kperfdiff.core.errors import InputError
from kperfdiff.place import model
from kperfdiff.place.inputs import HwModel
from kperfdiff.place.simulate import run

# TCM and I-cache of 8 instructions each, 1 cycle per instruction, 25 cycles per line fill, 10 runs.
EX = dict(tcm=8, cache=8, line=8, runs=10, t_t=1, t_c=1, t_m=25)


def test_equations():
    assert model.t_no_tcm(y=60, b=1, t_c=1, t_m=25) == 85
    assert model.t_tcm(x=80, y=80, b=1, t_t=1, t_c=1, t_m=25) == 185


@pytest.mark.parametrize("n, callees, no_tcm, tcm", [
    (6, None, 85, 60),
    (16, None, 660, 185),
    (17, None, 920, 670),             # the 9 instructions left outside the TCM are contiguous
    (17, [3, 2, 2, 2], 920, 1170),    # ... or four callees, each on its own line: TCM is slower
])
def test_worked_examples(n, callees, no_tcm, tcm):
    base, with_tcm = model.thesis_run(n, callees=callees, **EX)
    assert (base.cycles, with_tcm.cycles) == (no_tcm, tcm)


def test_worked_example_fill_counts():
    base, with_tcm = model.thesis_run(17, callees=[3, 2, 2, 2], **EX)
    assert (base.b, with_tcm.b) == (30, 40)
    assert (with_tcm.x, with_tcm.y) == (80, 90)


def test_scattered_blocks_must_add_up():
    with pytest.raises(InputError):
        model.thesis_run(17, callees=[3, 3], **EX)


def _tiny_hw():
    # one 8-instruction line is the whole cache; no veneer in the study's examples
    return HwModel(instruction_bytes=4, function_align=4, icache_size=32, line_size=32, ways=1,
                   t_fast=1, t_cache=1, t_fill=25, veneer_cycles=0)


def _sim(blocks, fast, runs=10):
    """blocks: (name, address in bytes, instructions) executed in order, each run."""
    hw = _tiny_hw()
    sizes = {n: k * 4 for n, _, k in blocks}
    addr = {n: a for n, a, _ in blocks if n not in fast}
    trace = [("body", n, 0, k) for n, _, k in blocks] * runs
    return run(trace, sizes, addr, set(fast), hw).cycles


def test_worked_examples_in_the_simulator():
    # 1: six instructions
    assert _sim([("f", 0, 6)], []) == 85
    assert _sim([("f", 0, 6)], ["f"]) == 60
    # 2: sixteen; the first 8 go to the TCM
    assert _sim([("f", 0, 16)], []) == 660
    assert _sim([("f_head", 0, 8), ("f_tail", 0, 8)], ["f_head"]) == 185
    # 3 and 4: an 8-instruction caller and callees of 3+2+2+2 instructions
    contiguous = [("caller", 0, 8), ("c1", 32, 3), ("c2", 44, 2), ("c3", 52, 2), ("c4", 60, 2)]
    assert _sim(contiguous, []) == 920
    packed = [("caller", 0, 8), ("c1", 0, 3), ("c2", 12, 2), ("c3", 20, 2), ("c4", 28, 2)]
    assert _sim(packed, ["caller"]) == 670
    scattered = [("caller", 0, 8), ("c1", 0, 3), ("c2", 32, 2), ("c3", 64, 2), ("c4", 96, 2)]
    assert _sim(scattered, ["caller"]) == 1170


def test_line_fills_rule():
    assert model.line_fills([6], 8, 1, 10) == 1          # fits: cold miss only
    assert model.line_fills([16], 8, 1, 10) == 20        # cyclic sweep longer than LRU: every line misses
    assert model.line_fills([16], 8, 2, 10) == 2
