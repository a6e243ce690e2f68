"""Harness (not a test): the exact placement optimiser at kernel scale.

50,000 candidate functions and 500,000 call edges by default (the issue's
size; --functions 5000 --edges 50000 is the earlier one), synthetic and seeded:
Zipf-like self weights (a few hot functions, a long tail), log-normal sizes
(median ~250 bytes), callers chosen with a preference for hot functions
(preferential attachment) and edge weights that follow the callee's heat.
Prints the time of each phase (profile, build_problem with its no-placement
simulation, greedy, groups, exact with a time limit, evaluating and simulating
the exact placement), the exact method's status, gap and reductions, its gain
against greedy and the group method, and the peak resident memory. The
greedy method's time is the reference: the other methods' times are also
given as multiples of it, measured in the same run, so they can be compared
across machines and noisy runs.

    .venv/bin/python benchmarks/bench_place.py [--functions 50000] [--edges 500000]
        [--capacity 32K] [--time-limit 60] [--seed 1] [--fills measured|uniform] [--no-simulate]
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kperfdiff.place import optimise  # noqa: E402
from kperfdiff.place.inputs import Group, SizeTable, load_hw, parse_bytes  # noqa: E402
from kperfdiff.place.model import build_problem, evaluate  # noqa: E402
from kperfdiff.place.simulate import layout, reconstruct, run  # noqa: E402
from kperfdiff.ingest.profile import Profile, Symbol  # noqa: E402


def synthetic(n: int, m: int, seed: int):
    rng = np.random.default_rng(seed)
    names = [f"fn_{k:05d}" for k in range(n)]
    heat = 1.0 / np.arange(1, n + 1) ** 1.1          # Zipf-like
    rng.shuffle(heat)
    sizes = np.clip(rng.lognormal(np.log(250), 0.9, n), 16, 16384).astype(int) // 4 * 4
    # edges: callee by heat, caller by heat (preferential), distinct pairs
    p = heat / heat.sum()
    pairs = set()
    while len(pairs) < m:
        k = m - len(pairs)
        callee = rng.choice(n, size=2 * k, p=p)
        caller = rng.choice(n, size=2 * k, p=np.sqrt(p) / np.sqrt(p).sum())
        for a, b in zip(caller.tolist(), callee.tolist()):
            if a != b:
                pairs.add((a, b))
                if len(pairs) >= m:
                    break
    total = 1_000_000.0
    stacks = {}
    selfw = np.zeros(n)
    # each function's self weight split between running alone and under its callers
    callers_of: dict[int, list[int]] = {}
    for a, b in pairs:
        callers_of.setdefault(b, []).append(a)
    for b in range(n):
        w = heat[b] / heat.sum() * total
        cs = callers_of.get(b, [])
        if not cs:
            stacks[(b,)] = w
        else:
            share = rng.dirichlet(np.ones(len(cs)) * 0.5) * w
            for a, s in zip(cs, share):
                stacks[(a, b)] = stacks.get((a, b), 0.0) + float(s)
        selfw[b] = w
    childw = selfw.copy()
    edges = {}
    for (st, w) in stacks.items():
        if len(st) == 2:
            childw[st[0]] += w
            edges[st] = w
    prof = Profile("synthetic", "cpu-clock", [Symbol(x, "[kernel.kallsyms]", True) for x in names], selfw, childw,
                   total, int(total), stacks, edges, "samples")
    addrs = {nm: 0x1000 + 4096 * k for k, nm in enumerate(names)}
    st = SizeTable("synthetic", "vmlinux", {nm: int(s) for nm, s in zip(names, sizes)}, addrs, False)
    # fifteen named groups of 40 functions each, drawn with a bias to hot ones (like the thesis's groups)
    groups = {f"g{g}": Group(f"g{g}", [names[k] for k in rng.choice(n, 40, replace=False, p=np.sqrt(p) / np.sqrt(p).sum())],
                             source="shipped") for g in range(15)}
    return prof, st, groups


def peak_mb() -> float:
    """This process's peak resident set so far, in MB (Linux reports KB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--functions", type=int, default=50000)
    ap.add_argument("--edges", type=int, default=500000)
    ap.add_argument("--capacity", default="32K")
    ap.add_argument("--time-limit", type=float, default=60.0,
                    help="the exact method's time limit in seconds (default 60, as kperfdiff place)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fills", choices=["measured", "uniform"], default="measured",
                    help="the cost model's fill model, as kperfdiff place --fills (default measured: "
                         "the build includes the no-placement simulation)")
    ap.add_argument("--no-simulate", action="store_true",
                    help="skip simulating the exact placement's trace (reconstruction and one cache run)")
    ap.add_argument("--hw", default=str(Path(__file__).resolve().parents[1] / "examples/place/arm926-tcm.toml"))
    a = ap.parse_args()
    cap = parse_bytes(a.capacity)
    t0 = time.perf_counter()
    prof, st, groups = synthetic(a.functions, a.edges, a.seed)
    hw = load_hw(a.hw)
    t1 = time.perf_counter()
    prob = build_problem(prof, st, hw, groups=groups, fills=a.fills)
    t2 = time.perf_counter()
    print(f"problem: {prob.n} candidates, {len(prob.pair_calls)} call pairs, capacity {cap} bytes, fills {a.fills}")
    print(f"synthetic profile {t1 - t0:6.1f} s   build_problem {t2 - t1:6.1f} s   peak RSS {peak_mb():.0f} MB")
    gd = optimise.greedy(prob, cap)
    gp = optimise.by_groups(prob, cap)
    ex = optimise.exact(prob, cap, time_limit=a.time_limit, fallback=gd)
    t3 = time.perf_counter()
    pred = evaluate(prob, ex.mask)
    t_eval = time.perf_counter() - t3
    base = max(gd.seconds, 1e-6)
    print(f"exact : {ex.seconds:6.2f} s ({ex.seconds / base:5.1f} x greedy)  status {ex.status}  gap "
          f"{'-' if ex.gap is None else f'{100 * ex.gap:.4f}%'}  gain {ex.prediction.gain_pct:.3f}% of kernel  "
          f"{len(ex.prediction.placed)} functions, {ex.prediction.bytes} bytes")
    print(f"        {ex.detail}")
    print(f"greedy: {gd.seconds:6.2f} s (the ratios' baseline)  gain {gd.prediction.gain_pct:.3f}%  "
          f"{len(gd.prediction.placed)} functions, {gd.prediction.bytes} bytes")
    print(f"groups: {gp.seconds:6.2f} s ({gp.seconds / base:5.1f} x greedy)  gain {gp.prediction.gain_pct:.3f}%  "
          f"({gp.label})")
    for name, other in (("greedy", gd), ("groups", gp)):
        if other.prediction.gain > 0:
            print(f"exact vs {name}: {100 * (ex.prediction.gain / other.prediction.gain - 1):+.1f}% more predicted gain")
    print(f"evaluate one placement: {1000 * t_eval:.1f} ms (gain {pred.gain_pct:.3f}%)")
    if not a.no_simulate:
        t4 = time.perf_counter()
        tr = reconstruct(prof, st, hw)
        t5 = time.perf_counter()
        fast = set(ex.prediction.placed)
        addr = layout(tr.names, tr.sizes, st.addrs, fast, hw)
        res = run(tr.steps, tr.sizes, addr, fast, hw, "exact")
        t6 = time.perf_counter()
        print(f"simulate the exact placement: trace {t5 - t4:.1f} s ({tr.executions} executions, "
              f"{len(tr.steps)} steps), cache run {t6 - t5:.1f} s ({res.fills} fills)")
    print(f"peak RSS {peak_mb():.0f} MB; ratios measured in one run")
    within = ex.seconds <= a.time_limit + 1.0
    print(f"result: {'within' if within else 'OVER'} the time limit ({ex.seconds:.1f} of {a.time_limit:g} s), "
          f"gap {'stated' if ex.gap is not None else 'MISSING'}, peak RSS {'under' if peak_mb() < 2048 else 'OVER'} 2 GB")
    return 0 if within and ex.gap is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
