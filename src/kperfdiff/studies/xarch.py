"""The cross-architecture profiling study (ARM Cortex-A9 vs Intel i7, Linux 2.6.36, 2011).

The section gives the study's improvement-table layout (benchmark x core
count, here arm64 against x86_64), the kperfdiff ranking of each benchmark
in the study's own text layout, and each benchmark's top ARM-specific
memory-management costs: the memory-management functions (and roles) where
the arm64 kernel spends a larger share than the x86_64 one, or that only
arm64 runs.

Direction: the study found the ARM kernel spending more of these benchmarks
in memory management than the x86 one. Mechanism: its four costs were cache
maintenance that x86 never does (a clean after every PTE write, a flush after
every copy-on-write copy, a clean of every new page table) and a barrier in
a page's bit unlock; the section looks for their arm64 descendants (cache
maintenance, set pte, barriers) among the ranked costs.
"""
from __future__ import annotations

import re

from kperfdiff.analysis.profile_diff import DiffOptions
from kperfdiff.render.table import Table
from kperfdiff.analysis.report_data import diff_stored
from kperfdiff.studies.study import Section, Verdict, cell, centre_text, change_text, comparison, sample, study_of

# Words that make a kernel function (or role) part of memory management, as tokens of its name.
MM_TOKENS = {"pte", "ptep", "ptes", "pmd", "pud", "p4d", "pgd", "tlb", "tlbi", "page", "pages", "folio", "folios",
             "fault", "vma", "vmas", "mm", "mmap", "munmap", "mprotect", "cache", "caches", "dcache", "icache",
             "flush", "clear", "pgtable", "lru", "anon", "zap", "unmap", "rmap", "dabt", "abort", "highpage",
             "pfn", "memcg", "swap", "mapping", "remap", "filemap", "vm", "brk", "pgtables", "hugepage"}
# The study's four costs, as what they are on arm64: cache maintenance and page-table entry writes
# (roles of symbols/equivalence.toml), and barriers.
STUDY_COSTS = {"[cache maintenance]": "cache maintenance (the study's cleans and flushes)",
               "[set pte]": "page-table entry writes (the study's clean after every PTE write)",
               "[TLB flush]": "TLB invalidation (the study's ranged vs full flush in unmap_vmas)"}
STUDY_COST_NAMES = {"caches_clean_inval_pou", "__sync_icache_dcache", "sync_icache_aliases", "dcache_clean_pou",
                    "flush_dcache_page", "flush_dcache_folio", "set_pte_at", "__set_pte_at", "set_ptes",
                    "unlock_page", "folio_unlock", "__flush_tlb_range", "flush_tlb_mm"}
TOP = 5


def is_mm(name: str) -> bool:
    """A memory-management function or role, by the words of its name."""
    return bool(set(re.split(r"[^a-z0-9]+", name.lower())) & MM_TOKENS)


def arm_mm_costs(result, arm_is_a: bool, top: int = TOP) -> list[tuple[str, float, float, str]]:
    """(symbol, arm %, x86 %, where) of the memory-management rows with a larger arm64 share, largest
    difference first: common rows (arm > x86) and arm64-only rows."""
    out = []
    for r in result.common:
        arm, x86 = (r.value_a, r.value_b) if arm_is_a else (r.value_b, r.value_a)
        if arm > x86 and is_mm(r.symbol):
            out.append((r.symbol, arm, x86, "common"))
    for r in result.only_a if arm_is_a else result.only_b:
        arm = r.value_a if arm_is_a else r.value_b
        if is_mm(r.symbol):
            out.append((r.symbol, arm, 0.0, "arm64 only"))
    out.sort(key=lambda t: -(t[1] - t[2]))
    return out[:top]


def mm_share(result, side_a: bool) -> float:
    """The summed self-time share (%) of the memory-management rows of one side."""
    rows = list(result.common) + list(result.only_a if side_a else result.only_b)
    return sum((r.value_a if side_a else r.value_b) for r in rows if is_mm(r.symbol))


def section(store, exp) -> Section:
    cmp = comparison(store, exp)
    sec = Section(study_of(exp), exp.name, emulated=any(s.emulated for s in cmp.sides))
    labels = [s.label for s in cmp.sides]
    arm = next((lab for lab in labels if "arm" in lab), None)
    x86 = next((lab for lab in labels if "x86" in lab), None)
    if not arm or not x86:
        sec.complete = False
        sec.paragraphs.append("The experiment needs an arm64 and an x86_64 variant (labels with arm and x86).")
        return sec
    keys, cores = cmp.keys, cmp.cores
    imp = Table(["benchmark"] + [f"{c} core{'s' if c > 1 else ''}" for c in cores],
                title=f"{arm} against {x86}, % (positive = {arm} faster), 95% interval",
                align=["l"] + ["r"] * len(cores))
    abs_t = Table(["benchmark", "cores", x86, arm], title="Time per operation: centre [95% interval]")
    complete = True
    for k in keys:
        imp.rows.append([k] + [change_text(cell(cmp, arm, k, c)) for c in cores])
        for c in cores:
            sa, sb = sample(cmp, x86, k, c), sample(cmp, arm, k, c)
            complete &= bool(sa and sb and sa.status == "ok" and sb.status == "ok")
            abs_t.rows.append([k, c, centre_text(sa), centre_text(sb)])
    imp.notes.append("Both sides are emulated (QEMU TCG on one x86 host): the times compare emulation costs of "
                     "two architectures, not their hardware. The profiles below are the evidence.")
    sec.tables += [imp, abs_t]
    sec.complete = complete
    changes = [cell(cmp, arm, k, c) for k in keys for c in cores]
    sig = [c for c in changes if c is not None and c.significant]
    sec.paragraphs.append(f"{arm} against {x86}: {len(sig)} of {len(changes)} cells differ significantly"
                          + (" (" + ", ".join(f"{c.key} at {c.cores} core{'s' if c.cores > 1 else ''} "
                                              f"{c.change:+.0f}%" for c in sig) + ")" if sig else "")
                          + ". The times of two emulated architectures compare emulation costs; the profiles "
                          "say where each kernel's work goes.")
    sec.paragraphs.append(f"At the end of this section, each benchmark's kperfdiff ranking ({arm} = A, {x86} = B, "
                          f"self time, {cores[0]} core{'s' if cores[0] > 1 else ''}) in the study's layout, with "
                          "equivalent functions matched by the rules, roles and inferred twins of `kperfdiff diff`.")

    mm = Table(["benchmark", "function or role", f"{arm} %", f"{x86} %", "where"],
               title=f"Top ARM-specific memory-management costs (1 core): larger share on {arm}, or {arm} only",
               align=["l", "l", "r", "r", "l"])
    more_mm, found_costs, ranked = [], set(), 0
    for k in keys:
        s_arm, s_x86 = sample(cmp, arm, k, cores[0]), sample(cmp, x86, k, cores[0])
        pd = diff_stored(cmp, arm, x86, s_arm.benchmark if s_arm else k, s_x86.benchmark if s_x86 else k,
                         cores[0], key=k, options=DiffOptions(top=TOP))
        sec.diffs.append(pd)
        if pd.result is None:
            continue
        ranked += 1
        for sym, a, b, where in arm_mm_costs(pd.result, arm_is_a=True):
            mm.rows.append([k, sym, round(a, 2), round(b, 2), where])
            if sym in STUDY_COSTS or sym in STUDY_COST_NAMES:
                found_costs.add(STUDY_COSTS.get(sym, sym))
        more_mm.append((k, mm_share(pd.result, True), mm_share(pd.result, False)))
    mm.notes.append("Memory management: functions and roles named by words such as pte, pmd, tlb, page, folio, "
                    "fault, vma, mm, cache, flush, clear, unmap, dabt. Shares are of each side's kernel samples.")
    sec.tables.append(mm)
    if more_mm:
        sec.tables.append(Table(["benchmark", f"{arm} %", f"{x86} %"],
                                [[k, round(a, 1), round(b, 1)] for k, a, b in more_mm],
                                title="Share of kernel time in memory-management functions (1 core)"))
    if not ranked:
        sec.direction = Verdict("unknown", "No benchmark has profiles on both sides yet.")
        return sec
    heavier = [k for k, a, b in more_mm if a > b]
    word = "yes" if len(heavier) == len(more_mm) else "partly" if heavier else "no"
    sec.direction = Verdict(word, f"The arm64 kernel spends a larger share of its time in memory management than "
                                  f"the x86_64 one in {len(heavier)} of {len(more_mm)} benchmarks ("
                                  + ", ".join(f"{k} {a:.0f}% vs {b:.0f}%" for k, a, b in more_mm) + "), as the "
                                  "study found of ARMv7 against x86.")
    if found_costs:
        sec.mechanism = Verdict("partly", "Among the top ARM-specific memory-management costs kperfdiff ranks "
                                          + "; ".join(sorted(found_costs)) + ": the arm64 forms of the study's "
                                          "costs. The study's four ARMv7 costs themselves do not exist in arm64 "
                                          "6.1, and under emulation a cache or TLB maintenance instruction does "
                                          "not cost what it does on hardware.")
    else:
        sec.mechanism = Verdict("no", "None of the study's cost classes (cache maintenance, page-table entry "
                                      "writes, TLB invalidation) is among the top ARM-specific costs here.")
    return sec
