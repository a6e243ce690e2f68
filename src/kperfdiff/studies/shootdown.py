"""The batched TLB shootdown study (arm64, Linux 6.6, 2023).

The study's loop (``pageout.anon``: read one byte per page of 1 MiB of shared
anonymous memory, then MADV_PAGEOUT it, with zram swap) on two kernels per
architecture: the one before arm64 batched reclaim's TLB flushes and the one
after, on arm64 (the change) and on x86_64 (the control: x86 batched them
long before). Variants are labelled ``ARCH-VERSION`` (``arm64-6.1``,
``arm64-6.12``, ``x86_64-6.1``, ``x86_64-6.12``); the experiment has one
baseline, so the section makes its own comparison of each architecture's
newer kernel against its older one (:func:`kperfdiff.analysis.bench_compare.compare` over
the experiment's sides, the same nested intervals).

Direction: did the loop get faster on arm64's newer kernel (the study: 5% to
12.5% less elapsed time, none on a 4-CPU system)? Mechanism: does
``ptep_clear_flush`` (the unbatched flush of every page: TLBI and the final
DSB, inlined into it on arm64) shrink in the profiles, with the batched path
(set_tlb_ubc_flush_pending, arch_tlbbatch_add_pending, arch_tlbbatch_flush,
__flush_tlb_page_nosync, try_to_unmap_flush) in its place?
"""
from __future__ import annotations

import math
import re

from kperfdiff.analysis import bench_compare as compare
from kperfdiff.analysis.profile_diff import DiffOptions
from kperfdiff.render.flamegraph import frame_function
from kperfdiff.render.table import Table, percent
from kperfdiff.analysis.report_data import diff_stored
from kperfdiff.studies.study import Section, Verdict, centre_text, change_text, comparison, sample, study_of

LOOP = "pageout.anon"
# The unbatched flush of one page (arm64: ptep_clear_flush -> flush_tlb_page, inlined; x86 has its own)
UNBATCHED = ("ptep_clear_flush", "flush_tlb_page", "__flush_tlb_page", "flush_tlb_mm_range",
             "native_flush_tlb_one_user", "flush_tlb_one_user")
# Reclaim's deferred, batched flush (mm/rmap.c and the architecture's arch_tlbbatch_*)
BATCHED = ("set_tlb_ubc_flush_pending", "arch_tlbbatch_add_pending", "arch_tlbbatch_add_mm",
           "arch_tlbbatch_flush", "__flush_tlb_page_nosync", "try_to_unmap_flush", "try_to_unmap_flush_dirty",
           "flush_tlb_batched_pending", "native_flush_tlb_multi", "flush_tlb_multi")
# Other TLB invalidation in the loop: the mmu_gather flush of ranges (madvise's own page-table walk)
GATHER = ("tlb_flush", "flush_tlb_range", "__flush_tlb_range", "flush_tlb_mm")
TOP = 10


def parse_label(label: str) -> tuple[str, str] | None:
    """(architecture, kernel version) of a label such as arm64-6.12 or x86_64-6.1."""
    m = re.fullmatch(r"(arm64|aarch64|x86_64|amd64)[-_ ]?(?:linux-)?v?(\d+(?:\.\d+)*)", label.strip(), re.I)
    if not m:
        return None
    arch = {"aarch64": "arm64", "amd64": "x86_64"}.get(m.group(1).lower(), m.group(1).lower())
    return arch, m.group(2)


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def pairs_of(labels: list[str]) -> list[tuple[str, str, str]]:
    """Per architecture (arm64 first): (architecture, older label, newer label), oldest vs newest."""
    by_arch: dict[str, list[tuple[tuple[int, ...], str]]] = {}
    for lab in labels:
        p = parse_label(lab)
        if p:
            by_arch.setdefault(p[0], []).append((_version_key(p[1]), lab))
    out = []
    for arch in sorted(by_arch, key=lambda a: (a != "arm64", a)):
        vs = sorted(by_arch[arch])
        if len(vs) >= 2:
            out.append((arch, vs[0][1], vs[-1][1]))
    return out


def size_bytes(text: str | None) -> int | None:
    m = re.fullmatch(r"\s*(\d+)\s*([kmg]?)b?\s*", str(text or ""), re.I)
    if not m:
        return None
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]


def pages_per_op(smp, facts: dict) -> int | None:
    """Pages one loop touches and pages out: the size parameter over the page size."""
    size = size_bytes((smp.params or {}).get("size")) if smp is not None else None
    page = facts.get("page_size") or 4096
    return size // page if size else None


def per_page_text(smp, pages: int | None) -> str:
    """A side's centre per page, with its 95% interval (the interval of the loop, divided)."""
    if not pages:
        return centre_text(smp)
    return centre_text(smp, per=pages, unit="ns/page")


def elapsed_change(c) -> float:
    """The change of elapsed time per loop in percent (negative = faster), from a speed change."""
    if c is None or math.isnan(c.change):
        return math.nan
    return (1 / (1 + c.change / 100) - 1) * 100


def elapsed_text(c) -> str:
    """``-8.1% [-12.0, -4.0], significant`` of elapsed time (the study's way of saying it)."""
    if c is None or math.isnan(c.change):
        return change_text(c)
    lo = (1 / (1 + c.high / 100) - 1) * 100 if not math.isnan(c.high) else math.nan
    hi = (1 / (1 + c.low / 100) - 1) * 100 if not math.isnan(c.low) else math.nan
    ci = "" if math.isnan(lo) else f" [{lo:+.1f}, {hi:+.1f}]"
    return f"{elapsed_change(c):+.1f}%{ci}" + (", significant" if c.significant else ", not significant")


def shares(folded: dict[str, float], total: float, names: tuple[str, ...]) -> tuple[float, float]:
    """(self %, inclusive %) of the functions ``names`` in folded stacks: samples whose leaf is one of
    them, and samples with any of them on the stack (counted once)."""
    if not total:
        return math.nan, math.nan
    want = set(names)
    own = incl = 0.0
    for stack, w in folded.items():
        frames = [frame_function(f) for f in stack.split(";")]
        if frames and frames[-1] in want:
            own += w
        if want.intersection(frames):
            incl += w
    return 100 * own / total, 100 * incl / total


def _rank(result, name: str) -> str:
    """Where a function stands in the kperfdiff ranking: ``#3 of 120 common`` or ``6.1 only #2``."""
    for i, r in enumerate(result.common):
        if r.symbol == name or name in r.names_a or name in r.names_b:
            return f"#{i + 1} of {len(result.common)} common"
    for side, rows in ((result.labels[0], result.only_a), (result.labels[1], result.only_b)):
        for i, r in enumerate(rows):
            if r.symbol == name:
                return f"{side} only, #{i + 1}"
    return "not sampled"


def section(store, exp) -> Section:
    cmp = comparison(store, exp)
    sec = Section(study_of(exp), exp.name, emulated=any(s.emulated for s in cmp.sides))
    pairs = pairs_of([s.label for s in cmp.sides])
    if not any(a == "arm64" for a, _, _ in pairs):
        sec.complete = False
        sec.paragraphs.append("The experiment needs two arm64 variants labelled with their kernel versions "
                              "(arm64-6.1 and arm64-6.12), and optionally the x86_64 pair as the control.")
        return sec
    # each architecture's newer kernel against its older one: the experiment has one baseline
    own = compare.compare(cmp.sides, [(new, old, "baseline") for _, old, new in pairs], title=cmp.title)
    change = {(b.variant, k): c for b in own.blocks for (k, _c), c in b.cells.items()}
    cores = cmp.cores[0]
    keys = [k for k in cmp.keys if k == LOOP] + [k for k in cmp.keys if k != LOOP]

    t = Table(["benchmark"] + [s.label for s in cmp.sides],
              title="Time per page of the loop (read every page, then MADV_PAGEOUT): centre [95% interval]",
              align=["l"] + ["r"] * len(cmp.sides))
    complete = True
    for k in keys:
        row = [k]
        for s in cmp.sides:
            smp = sample(cmp, s.label, k, cores)
            complete &= bool(smp and smp.status == "ok")
            row.append(per_page_text(smp, pages_per_op(smp, s.facts)))
        t.rows.append(row)
    t.notes.append("One loop reads one byte of every page of the mapping (size parameter, 1 MiB = 256 pages of "
                   "4 KB) and pages all of it out (pageout.anon to zram swap; pageout.file drops the clean pages of a file on the guest's ext4 disk); its time divided by its pages. Centre: geometric "
                   "mean of the repetitions' medians.")
    sec.tables.append(t)
    sec.complete = complete

    ch = Table(["benchmark"] + [f"{arch}: {new} vs {old}" for arch, old, new in pairs],
               title="Change of elapsed time per loop, newer kernel vs older (negative = faster), 95% interval",
               align=["l"] + ["r"] * len(pairs))
    for k in keys:
        ch.rows.append([k] + [elapsed_text(change.get((new, k))) for _, old, new in pairs])
    ch.notes.append("Each architecture's pair is compared on its own (the experiment's baseline is one variant): "
                    "nested 95% intervals over the repetitions, Benjamini-Hochberg over each pair's cells.")
    sec.tables.append(ch)

    # -- mechanism: the flush functions' shares, and the kperfdiff ranking of the arm64 pair --
    mech = Table(["variant", "ptep_clear_flush self %", "ptep_clear_flush incl. %", "unbatched flush incl. %",
                  "batched flush incl. %", "largest batched function", "all TLB flushing incl. %",
                  "ptep_clear_flush in the pair's ranking"],
                 title=f"{LOOP}: shares of the TLB flush functions in each variant's kernel profile "
                       f"({cores} core{'s' if cores > 1 else ''})",
                 align=["l", "r", "r", "r", "r", "l", "r", "l"])
    found: dict[str, dict] = {}
    for arch, old, new in pairs:
        s_old, s_new = sample(cmp, old, LOOP, cores), sample(cmp, new, LOOP, cores)
        if s_old is None or s_new is None:
            continue
        # function names as the kernels have them (no roles), self and inclusive from the folded stacks
        raw = diff_stored(cmp, old, new, s_old.benchmark, s_new.benchmark, cores, key=LOOP,
                          options=DiffOptions(top=0, equivalence=False, infer="off"))
        if raw.result is None:
            sec.differs.append(f"{arch}: {raw.error}")
            continue
        res = raw.result
        for label, folded, total in ((old, res.folded_a, res.total_a), (new, res.folded_b, res.total_b)):
            pself, pincl = shares(folded, total, ("ptep_clear_flush",))
            _, unb = shares(folded, total, UNBATCHED)
            _, bat = shares(folded, total, BATCHED)
            _, every = shares(folded, total, UNBATCHED + BATCHED + GATHER)
            top_b = max(((shares(folded, total, (n,))[0], n) for n in BATCHED), default=(0.0, ""))
            found[label] = {"self": pself, "incl": pincl, "unbatched": unb, "batched": bat, "all": every,
                            "top_batched": top_b, "rank": _rank(res, "ptep_clear_flush")}
            mech.rows.append([label, percent(pself, 2), percent(pincl, 2), percent(unb, 2), percent(bat, 2),
                              f"{top_b[1]} {percent(top_b[0], 2)}" if top_b[0] > 0 else "-", percent(every, 2),
                              found[label]["rank"]])
        if arch == "arm64":
            pd = diff_stored(cmp, old, new, s_old.benchmark, s_new.benchmark, cores, key=LOOP,
                             change=change.get((new, LOOP)).change if change.get((new, LOOP)) else math.nan,
                             options=DiffOptions(top=TOP))
            sec.diffs.append(pd)
    mech.notes.append("Shares of each side's kernel samples (perf record -g, cpu-clock). Self: samples in the "
                      "function itself (on arm64 flush_tlb_page, its TLBI and the final DSB are inlined into "
                      "ptep_clear_flush); inclusive: samples with it on the stack. Unbatched flush: "
                      + ", ".join(UNBATCHED) + ". Batched flush: " + ", ".join(BATCHED) + ". All TLB flushing: "
                      "those and the mmu_gather flush (" + ", ".join(GATHER) + "). The profile "
                      "resolves functions, not instructions, so the study's '95% in the final barrier' is not "
                      "checked here.")
    sec.tables.append(mech)
    _paragraphs(sec, pairs, change, found)
    _verdicts(sec, pairs, change, found)
    return sec


def _paragraphs(sec: Section, pairs, change, found) -> None:
    for arch, old, new in pairs:
        c = change.get((new, LOOP))
        sec.paragraphs.append(f"{arch}: the loop's elapsed time on {new} against {old}: {elapsed_text(c)}.")
    for arch, old, new in pairs:
        if old in found and new in found:
            a, b = found[old], found[new]
            sec.paragraphs.append(
                f"{arch}: ptep_clear_flush holds {percent(a['incl'], 2)}% of the kernel samples on {old} and "
                f"{percent(b['incl'], 2)}% on {new} (inclusive; self {percent(a['self'], 2)}% and "
                f"{percent(b['self'], 2)}%); the batched flush path {percent(a['batched'], 2)}% and "
                f"{percent(b['batched'], 2)}%.")
    if sec.diffs:
        sec.paragraphs.append(f"At the end of this section, the kperfdiff ranking of the arm64 pair ({LOOP}, "
                              f"older kernel = A, newer = B, self time, top {TOP}).")


def _verdicts(sec: Section, pairs, change, found) -> None:
    arm = next((p for p in pairs if p[0] == "arm64"), None)
    ctl = next((p for p in pairs if p[0] != "arm64"), None)
    emu = ("Under QEMU TCG a TLBI broadcast flushes the other vCPUs' software TLBs (so the TLBI itself is what "
           "costs) and a DSB is cheap, so neither costs what it does on hardware, where the final barrier waits "
           "for every CPU." if sec.emulated else "")
    c = change.get((arm[2], LOOP)) if arm else None
    e = elapsed_change(c)
    if c is None or math.isnan(e):
        sec.direction = Verdict("unknown", f"{LOOP} is not measured on both arm64 kernels yet.")
    else:
        ctl_c = change.get((ctl[2], LOOP)) if ctl else None
        ctl_txt = (f" The x86_64 control ({ctl[2]} vs {ctl[1]}, batched on both): {elapsed_text(ctl_c)}."
                   if ctl else "")
        if c.significant and e < 0:
            word = "yes" if e <= -3 else "partly"      # a gain of the study's size, or a small one
            text = (f"The loop is {-e:.1f}% faster on {arm[2]} than on {arm[1]} (the study: 5% to 12.5% "
                    f"less elapsed time).")
        elif c.significant:
            word = "no"
            text = f"The loop is {e:.1f}% slower on {arm[2]} than on {arm[1]}, against the study's 5-12.5% gain."
        else:
            word = "no"
            text = (f"No significant change on arm64 ({elapsed_text(c)}), as the study found on a 4-CPU "
                    f"system but not on its phone or server.")
        sec.direction = Verdict(word, (text + ctl_txt + " The two kernels differ in much more than the "
                                       "batching (reclaim, zram and its default compressor), so elapsed time mixes "
                                       "all of it. " + emu).strip())
    if arm and arm[1] in found and arm[2] in found:
        a, b = found[arm[1]], found[arm[2]]
        shrinks = b["incl"] < 0.5 * a["incl"] if a["incl"] > 0 else False
        batched = b["batched"] > a["batched"]
        if shrinks and batched:
            where = b["top_batched"][1]
            word, text = "yes", (f"ptep_clear_flush shrinks from {percent(a['incl'], 2)}% to "
                                 f"{percent(b['incl'], 2)}% of the kernel samples on arm64 and the batched path "
                                 f"grows from {percent(a['batched'], 2)}% to {percent(b['batched'], 2)}%, mostly in "
                                 f"{where} (where arm64 still issues each page's TLBI, __flush_tlb_page_nosync "
                                 f"inlined; only the final DSB waits for arch_tlbbatch_flush, once per batch); all "
                                 f"TLB flushing goes from "
                                 f"{percent(a['all'], 2)}% to {percent(b['all'], 2)}%.")
        elif shrinks:
            word, text = "partly", (f"ptep_clear_flush shrinks from {percent(a['incl'], 2)}% to "
                                    f"{percent(b['incl'], 2)}% on arm64, but the batched path is not seen growing "
                                    f"({percent(a['batched'], 2)}% to {percent(b['batched'], 2)}%).")
        elif a["incl"] <= 0:
            word, text = "unknown", "ptep_clear_flush has no samples on arm64's older kernel here."
        else:
            word, text = "no", (f"ptep_clear_flush does not shrink on arm64: {percent(a['incl'], 2)}% on "
                                f"{arm[1]}, {percent(b['incl'], 2)}% on {arm[2]}.")
        sec.mechanism = Verdict(word, (text + f" The study put it at 5.4% (17% on 128 cores); here it holds "
                                       f"{percent(a['incl'], 2)}% on {arm[1]}. " + emu).strip())
    else:
        sec.mechanism = Verdict("unknown", "No profiles of the arm64 pair yet (the experiment needs profile = true).")
