"""The simulator against fills counted by hand, and the profile's trace."""
from kperfdiff.place.inputs import HwModel
from kperfdiff.place.simulate import ICache, layout, reconstruct, run, simulate_placements

from support.placement import profile_from_folded, sizes_table


def _hw(**kw):
    d = dict(instruction_bytes=4, function_align=4, icache_size=64, line_size=16, ways=2,
             t_fast=1, t_cache=1, t_fill=10, veneer_cycles=2)
    d.update(kw)
    return HwModel(**d)


def test_lru_two_way_by_hand():
    # 2 sets x 2 ways, 16-byte lines. Lines 0,2,4 all map to set 0.
    c = ICache(64, 16, 2)
    seq = [0, 2, 0, 4, 2, 0, 1, 1]
    got = [c.access(x) for x in seq]
    # 0 miss, 2 miss, 0 hit, 4 miss (evicts 2), 2 miss (evicts 0), 0 miss (evicts 4), 1 miss, 1 hit
    assert got == [False, False, True, False, False, False, False, True]
    assert c.fills == 6


def test_tiny_trace_by_hand():
    hw = _hw()
    # f: 8 instructions (32 bytes) at 0 -> lines 0,1; g: 3 instructions at 32 -> line 2; h: 4 at 64 -> line 4
    sizes = {"f": 32, "g": 12, "h": 16}
    addr = {"f": 0, "g": 32, "h": 64}
    trace = [("body", "f", 0, 8), ("call", "f", "g"), ("body", "g", 0, 3), ("body", "f", 6, 1),
             ("call", "f", "h"), ("body", "h", 0, 4), ("body", "f", 0, 8)]
    r = run(trace, sizes, addr, set(), hw)
    # lines: 0 1 | 2 | 1 | 4 (set 0: 0,2 -> evict 0) | 0 (miss, evicts 2) 1 (hit)
    assert r.fills == 5
    assert r.cached_instr == 8 + 3 + 1 + 4 + 8
    assert r.cycles == 24 * 1 + 5 * 10
    # g in fast memory: no fills for it, one crossing call each way it is called
    r2 = run(trace, sizes, {"f": 0, "h": 64}, {"g"}, hw)
    # lines: 0 1 | (g fast) | 1 | 4 | 0 hit 1 hit   (set 0 holds 0 and 4)
    assert r2.fills == 3
    assert r2.crossing_calls == 1
    assert r2.cycles == 21 * 1 + 3 * 1 + 3 * 10 + 1 * 2


def test_layout_relinks_without_placed_functions():
    hw = _hw()
    sizes = {"a": 20, "b": 12, "c": 8}
    addrs = {"a": 0x100, "b": 0x114, "c": 0x120}
    assert layout(["a", "b", "c"], sizes, addrs, {"b"}, hw) == {"a": 0x100, "c": 0x114}
    assert layout(["a", "b", "c"], sizes, addrs, {"b"}, hw, relink=False) == {"a": 0x100, "c": 0x120}


def test_reconstructed_trace_follows_self_weights():
    prof = profile_from_folded({"sys;a": 100, "sys;b": 300, "sys": 50})
    st = sizes_table({"sys": 64, "a": 32, "b": 32})
    hw = _hw()
    tr = reconstruct(prof, st, hw, events=450)
    bodies = [s for s in tr.steps if s[0] == "body" and s[3] > 1]
    n_a = sum(1 for s in bodies if s[1] == "a")
    n_b = sum(1 for s in bodies if s[1] == "b")
    assert n_b == 3 * n_a
    assert sum(1 for s in tr.steps if s[0] == "call") == n_a + n_b
    res = simulate_placements(tr, st, hw, [("b", {"b"})])
    assert res[1].fills < res[0].fills and res[1].crossing_calls == n_b
