"""The superpages study (FreeBSD on ARMv7, 2013): GUPS with 4 KB pages vs huge pages.

The section gives each variant's GUP/s with its interval, the speed-up with
its interval beside the study's 1.5x, and the kernel's huge-page counters
per repetition (promotions, demotions, failures), which say whether the
huge-page variant really ran on huge pages and the 4 KB one did not.
"""
from __future__ import annotations

import math

from kperfdiff.render.table import Table
from kperfdiff.studies.study import Section, Verdict, centre_text, change_text, cell, comparison, sample, study_of

STUDY_SPEEDUP = 0.00553 / 0.00369        # 1.499
COUNTERS = [("vmstat.thp_fault_alloc", "promotions at fault (thp_fault_alloc)"),
            ("vmstat.thp_collapse_alloc", "promotions by khugepaged (thp_collapse_alloc)"),
            ("vmstat.thp_split_page", "demotions (thp_split_page)"),
            ("vmstat.thp_split_pmd", "demotions of mappings (thp_split_pmd)"),
            ("vmstat.thp_fault_fallback", "promotion failures (thp_fault_fallback)")]


def section(store, exp) -> Section:
    cmp = comparison(store, exp)
    sec = Section(study_of(exp), exp.name, emulated=any(s.emulated for s in cmp.sides))
    key, cores = exp.benchmarks[0], cmp.cores[0] if cmp.cores else 1
    base, new = cmp.sides[0].label, cmp.sides[1].label if len(cmp.sides) > 1 else None
    if new is None:
        sec.complete = False
        return sec
    sa, sb = sample(cmp, base, key, cores), sample(cmp, new, key, cores)
    c = cell(cmp, new, key, cores)
    rows = [[lab, s.benchmark if s else key, centre_text(s)] for lab, s in ((base, sa), (new, sb))]
    sec.tables.append(Table(["variant", "benchmark", "GUP/s, 95% interval"], rows,
                            title="GUPS over a 2^27-word (1 GB) table"))
    ctr = Table(["counter (per repetition)", base, new], title="Huge-page counters around each repetition")
    reps = {lab: max(1, len(s.reps)) if s else 1 for lab, s in ((base, sa), (new, sb))}
    for name, text in COUNTERS:
        va = sa.monitors.get(name) if sa else None
        vb = sb.monitors.get(name) if sb else None
        ctr.rows.append([text, _per(va, reps[base]), _per(vb, reps[new])])
    ctr.notes.append("Machine-wide /proc/vmstat deltas around each benchmark process, averaged over the "
                     "repetitions. A 1 GB table is 512 huge pages of 2 MB.")
    sec.tables.append(ctr)
    sec.complete = bool(sa and sb and sa.status == "ok" and sb.status == "ok")
    if any(s.facts.get("virtualisation") not in (None, "", "none") for s in cmp.sides):
        sec.differs.append("This machine is a virtual machine: a TLB miss walks the guest's page tables and the "
                           "host's (nested paging), and the guest cannot know whether the host backs its memory "
                           "with huge pages, so a guest huge page removes only part of the walk.")
    if c is None or math.isnan(c.change):
        sec.paragraphs.append(f"No comparison yet: {change_text(c)}.")
        return sec
    speedup = c.new / c.base if c.base else math.nan
    lo, hi = 1 + c.low / 100, 1 + c.high / 100
    sec.paragraphs.append(
        f"{new} vs {base}: {change_text(c)} in GUP/s, a speed-up of {speedup:.2f}x "
        f"(95% interval {lo:.2f}x to {hi:.2f}x); the study found {STUDY_SPEEDUP:.2f}x.")
    if c.significant and c.change > 0:
        agrees = "yes" if lo <= STUDY_SPEEDUP * 1.25 and hi >= STUDY_SPEEDUP / 1.25 else "partly"
        sec.direction = Verdict(agrees, f"Huge pages are faster, {speedup:.2f}x against the study's "
                                        f"{STUDY_SPEEDUP:.2f}x" + ("." if agrees == "yes" else
                                        "; the size of the gain differs (another CPU, TLB and page size)."))
    else:
        sec.direction = Verdict("no", f"Huge pages are not significantly faster here ({change_text(c)}); the "
                                      f"study found {STUDY_SPEEDUP:.2f}x.")
    promo_b = sum(_num(sb.monitors.get(n)) for n in ("vmstat.thp_fault_alloc", "vmstat.thp_collapse_alloc")) if sb else 0
    promo_a = sum(_num(sa.monitors.get(n)) for n in ("vmstat.thp_fault_alloc", "vmstat.thp_collapse_alloc")) if sa else 0
    fail_b = _num(sb.monitors.get("vmstat.thp_fault_fallback")) if sb else 0
    per_b = promo_b / reps[new]
    if per_b >= 256 and fail_b / reps[new] < per_b / 10:
        sec.mechanism = Verdict("yes", f"The huge-page runs were promoted: {per_b:,.0f} huge pages per repetition "
                                       f"(the table needs 512), {fail_b / reps[new]:,.0f} failures; the 4 KB runs "
                                       f"{promo_a / reps[base]:,.0f}. Fewer TLB misses and page walks is the "
                                       "study's explanation, and the only difference between the variants.")
    else:
        sec.mechanism = Verdict("partly" if per_b > 0 else "no",
                                f"Only {per_b:,.0f} huge pages per repetition were allocated (the table needs 512) "
                                f"and {fail_b / reps[new]:,.0f} promotions failed.")
    return sec


def _num(v) -> float:
    return float(v) if isinstance(v, (int, float)) and not math.isnan(v) else 0.0


def _per(v, reps: int):
    return f"{_num(v) / reps:,.1f}"      # a counter that did not move is not stored: 0
