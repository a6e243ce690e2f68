"""Study 4: the linear map at boot (arm64, 2024).

The study timed map_mem() (151 ms on a 16 GB VM to 17.4 s on 512 GB) and cut it by 49-85% with fewer
TLB invalidations. Its experiment file has one variant per kernel x memory size, each a qemu:arm64
target with ``kernel=`` and ``mem=``, running the boot.* benchmarks (targets/boot.py): the mapping
phase (paging_init with map_mem and all it calls) counted by the emulator's plugin in deterministic
boots (instructions, TLBI, DSB, host time under emulation) and the host-clock boot.kernel.

The section: a table memory size x kernel, the growth per GB (a least-squares line over the sizes),
the newer kernel against the older at each size, and verdicts on the direction (does the phase grow
with memory, is the newer kernel lower) and the mechanism (fewer TLB invalidations).
"""
from __future__ import annotations

import math
import warnings

from kperfdiff.analysis import bench_compare as cmpmod
from kperfdiff.core import stats
from kperfdiff.core.errors import KperfdiffError
from kperfdiff.render.table import Table, percent
from kperfdiff.targets.qemu import mem_mb, parse_spec
from kperfdiff.studies.study import Section, Verdict, study_of

INSNS, TLBI, DSB, HOST, KERNEL, TO_INIT = ("boot.map_insns", "boot.map_tlbi", "boot.map_dsb", "boot.map_host",
                                           "boot.kernel", "boot.to_init_insns")


def layout(exp) -> tuple[list[str], list[str], dict[tuple[str, str], str]]:
    """(kernels in file order, memory sizes smallest first, (kernel, mem) -> variant label)."""
    kernels: list[str] = []
    mems: list[str] = []
    by: dict[tuple[str, str], str] = {}
    for v in exp.variants:
        try:
            qs = parse_spec(v.target)
        except KperfdiffError:
            continue
        k = qs.kernel or "default"
        if k not in kernels:
            kernels.append(k)
        if qs.mem not in mems:
            mems.append(qs.mem)
        by[(k, qs.mem)] = v.label
    return kernels, sorted(mems, key=mem_mb), by


def slope_per_gb(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of value over GB; nan with fewer than two sizes."""
    if len(points) < 2:
        return math.nan
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else math.nan


def _centre(smp) -> float:
    if smp is None or smp.status != "ok" or not smp.pooled:
        return math.nan
    return smp.centre


def _num(v: float, digits: int = 0) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.{digits}f}"


def _growth(new: float, old: float) -> float:
    """``new / old - 1``; NaN when either is NaN or ``old`` is 0."""
    if math.isnan(new) or math.isnan(old) or old == 0:
        return math.nan
    return new / old - 1


def _timed(smp) -> str:
    """A host-clock centre with its 95% interval half-width."""
    c = _centre(smp)
    if math.isnan(c):
        return "-"
    hw = stats.centre_half_width(smp.reps)
    return f"{c:,.1f}" + ("" if math.isnan(hw) else f" \u00b1{hw:.0f}%")


def _time_ratio(a, b) -> tuple[float, float, float]:
    """new/old host time with its 95% interval (from the Welch interval of compare_cell)."""
    if a is None or b is None:
        return math.nan, math.nan, math.nan
    c = cmpmod.compare_cell("t", 1, a, b)
    inv = (lambda x: 1 / (1 + x / 100) if not math.isnan(x) else math.nan)
    return inv(c.change), inv(c.high), inv(c.low)


def _top_info(store, exp_name: str, label: str, mem: str, key: str) -> str:
    """A per-function breakdown the boot.map_* results keep in their info (top_tlbi, top_dsb ...)."""
    try:
        e = store.find_experiment(exp_name)
    except KperfdiffError:
        return ""
    for r in store.experiment_runs(e.id):
        if r.variant != label:
            continue
        for res in store.results(r.id, with_raw=False):
            if res.benchmark == INSNS and res.status == "ok":
                for inf in res.info or []:
                    if inf.get(key):
                        return inf[key]
    return ""


def section(store, exp) -> Section:
    st = study_of(exp)
    sec = Section(st, exp.name, emulated=True, differs=[])
    kernels, mems, by = layout(exp)
    with warnings.catch_warnings():     # the exact counts repeat: scipy warns on identical samples
        warnings.simplefilter("ignore", RuntimeWarning)
        cmp = cmpmod.from_experiment(store, exp.name)

    def smp(k, m, key):
        lab = by.get((k, m))
        if lab is None:
            return None
        try:
            return cmp.side(lab).samples.get((key, 1))
        except KperfdiffError:
            return None

    val = {(k, m, key): _centre(smp(k, m, key)) for k in kernels for m in mems
           for key in (INSNS, TLBI, DSB, HOST, KERNEL, TO_INIT)}
    sec.complete = not any(math.isnan(v) for (k, m, key), v in val.items() if key != TO_INIT)

    cols = ["memory"]
    for k in kernels:
        cols += [f"{k} instructions", f"{k} TLBI", f"{k} DSB", f"{k} host ms (emulated)", f"{k} boot.kernel ms"]
    t = Table(cols, title="The mapping phase (paging_init with map_mem and all it calls) per memory size: "
                          "instructions and TLB maintenance counted by the emulator (exact, deterministic); "
                          "host time of the phase under emulation and the kernel's boot to /init (host clock, "
                          "centre \u00b1 95% interval)")
    for m in mems:
        row = [m]
        for k in kernels:
            row += [_num(val[(k, m, INSNS)]), _num(val[(k, m, TLBI)]), _num(val[(k, m, DSB)]),
                    _timed(smp(k, m, HOST)), _timed(smp(k, m, KERNEL))]
        t.rows.append(row)
    grow = {}
    for k in kernels:
        grow[k] = {key: slope_per_gb([(mem_mb(m) / 1024, val[(k, m, key)]) for m in mems
                                      if not math.isnan(val[(k, m, key)])]) for key in (INSNS, TLBI, DSB, HOST)}
    t.rows.append(["growth per GB"] + [x for k in kernels for x in (
        _num(grow[k][INSNS]), _num(grow[k][TLBI]), _num(grow[k][DSB]), _num(grow[k][HOST], 1), "")])
    sec.tables.append(t)

    old, new = (kernels[0], kernels[-1]) if len(kernels) > 1 else (None, None)
    if old and new:
        c = Table(["memory", "instructions", "TLBI", "DSB", "host time new/old [95% interval]"],
                  title=f"Linux {new} against {old} at each size (change of the count; host time as a ratio)")
        for m in mems:
            r, lo, hi = _time_ratio(smp(old, m, HOST), smp(new, m, HOST))
            ratio = "-" if math.isnan(r) else (f"{r:.2f}" + ("" if math.isnan(lo) else f" [{lo:.2f}, {hi:.2f}]"))
            c.rows.append([m] + [percent(_growth(val[(new, m, key)], val[(old, m, key)]), 0, signed=True,
                                         fraction=True, mark=True) for key in (INSNS, TLBI, DSB)] + [ratio])
        sec.tables.append(c)

    # what was measured, in sentences
    for k in kernels:
        g = grow[k]
        if math.isnan(g[INSNS]):
            continue
        per_page = g[INSNS] / (1 << 18)     # 4 KB pages per GB
        sec.paragraphs.append(
            f"Linux {k}: the mapping phase executes {_num(g[INSNS])} more instructions, {_num(g[TLBI])} more TLBIs "
            f"and {_num(g[DSB])} more DSBs per GB of guest RAM ({per_page:.1f} instructions per 4 KB page: the "
            f"linear map is built page by page, as rodata=full (CONFIG_RODATA_FULL_DEFAULT_ENABLED, on in both "
            f"Debian kernels) makes can_set_direct_map() true); under emulation it takes {_num(g[HOST], 1)} ms more "
            f"of host time per GB.")
    if old and new:
        big = mems[-1]
        tl = _top_info(store, exp.name, by.get((old, big), ""), big, "top_tlbi")
        tn = _top_info(store, exp.name, by.get((new, big), ""), big, "top_tlbi")
        if tl or tn:
            sec.paragraphs.append(f"Where the TLBIs of the phase are executed at {big}: Linux {old}: {tl or '-'}; "
                                  f"Linux {new}: {tn or '-'}.")
        dl = _top_info(store, exp.name, by.get((old, big), ""), big, "top_dsb")
        if dl:
            sec.paragraphs.append(f"Where the DSBs are executed at {big} in Linux {old}: {dl}.")

    # verdicts
    if old and new and sec.complete:
        grows = all(val[(k, mems[-1], INSNS)] > val[(k, mems[0], INSNS)] * 1.5 for k in kernels) and len(mems) > 1
        lower = [m for m in mems if val[(new, m, INSNS)] < val[(old, m, INSNS)]]
        cuts = [1 - val[(new, m, INSNS)] / val[(old, m, INSNS)] for m in mems]
        hcuts = [1 - val[(new, m, HOST)] / val[(old, m, HOST)] for m in mems]
        agrees = "yes" if grows and len(lower) == len(mems) else ("partly" if grows or lower else "no")
        sec.direction = Verdict(agrees, (
            f"The mapping phase grows with memory in both kernels ({mems[0]} to {mems[-1]}: "
            f"{_num(val[(old, mems[0], INSNS)])} to {_num(val[(old, mems[-1], INSNS)])} instructions in {old}, "
            f"{_num(val[(new, mems[0], INSNS)])} to {_num(val[(new, mems[-1], INSNS)])} in {new})"
            if grows else "The mapping phase does not grow clearly with memory") +
            f"; {new} executes {_span(cuts, 0)}% fewer instructions than {old} "
            f"at {len(lower)} of {len(mems)} sizes, and its host time under emulation is "
            f"{_span(hcuts, 0)}% lower (the study: 49-85% less time).")
        tcut = [1 - val[(new, m, TLBI)] / val[(old, m, TLBI)] for m in mems if val[(old, m, TLBI)]]
        dcut = [1 - val[(new, m, DSB)] / val[(old, m, DSB)] for m in mems if val[(old, m, DSB)]]
        fewer = tcut and min(tcut) > 0
        sec.mechanism = Verdict("yes" if fewer and dcut and min(dcut) > 0 else ("partly" if fewer else "no"), (
            f"{new} executes {_span(tcut, 1)}% fewer TLBIs and "
            f"{_span(dcut, 1)}% fewer DSBs in the phase: {old} invalidates the fixmap "
            f"slot through which it writes each new page-table page, once per 64 KB contiguous block "
            f"({grow[old][TLBI] / 512:.1f} TLBIs per 2 MB PTE table, {grow[new][TLBI] / 512:.1f} in {new}), "
            f"and issues a DSB and ISB after every valid kernel PTE it writes (set_pte): the two costs the 2024 "
            f"patches removed (no remapping per block, barriers batched per table)." if tcut and dcut else
            "no TLBI counts to compare"))
    elif not sec.complete:
        sec.paragraphs.append("Some cells are not measured yet; run the study again to complete it.")

    sec.differs = [
        "A TLBI under TCG flushes QEMU's software TLB (for a by-address TLBI, the matching entries on every "
        "vCPU), which is not what it costs on hardware, where broadcast invalidations and the barriers around "
        "them are what the patches saved; so the counts carry the mechanism and the host time under emulation "
        "is QEMU's cost.",
    ]
    if mems and mem_mb(mems[-1]) < 512 * 1024:
        sec.differs.append(f"The largest guest here has {mems[-1]} of RAM; the study went to 512 GB, where the "
                           f"per-GB growth above is what scales.")
    return sec


def _span(fractions, digits: int) -> str:
    """``58-59`` (percent) for a range of fractions, ``97.0`` when they round alike."""
    lo, hi = percent(min(fractions), digits, fraction=True), percent(max(fractions), digits, fraction=True)
    return lo if lo == hi else f"{lo}-{hi}"
