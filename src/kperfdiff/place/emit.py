"""What a kernel build needs from a placement, and the gain report.

* :func:`linker_fragment` -- an output-section description for the fast
  memory (the ARM kernel's ``.text_itcm``) that pulls each placed function's
  ``.text.<function>`` input section (the kernel must be built with
  ``-ffunction-sections``) ahead of the ``.tcm.text`` code already marked in
  the source, with an ``ASSERT`` on the region's size. It is refused here
  when the placed functions do not fit.
* :func:`annotations` -- ``__tcmfunc`` for each placed function, or
  ``__tcmlocalfunc`` (no long call) when every caller seen in the profile is
  placed too. The profile only shows sampled callers: check the source for
  others before using ``__tcmlocalfunc``.
* :func:`ordering` -- a ``--symbol-ordering-file`` for the functions left in
  main memory, by call-graph clustering: functions in decreasing self time
  each join the cluster of their heaviest caller when the merged cluster
  stays within ``cluster_limit`` bytes (a page by default), then clusters
  are ordered by density (self cycles per byte).
* :func:`report` -- the gain report as text, JSON or Markdown.
"""
from __future__ import annotations

import re
from collections import defaultdict

from kperfdiff.core.errors import InputError
from kperfdiff.place.inputs import HwModel

FRAGMENT_VERSION = 1


def linker_fragment(functions: list[str], sizes: dict[str, int], hw: HwModel, capacity: int) -> str:
    total = sum(hw.aligned(sizes[f]) for f in functions)
    if total > capacity:
        raise InputError(f"the placement needs {total} bytes but {hw.fast_name} holds {capacity}; "
                         f"it cannot be emitted")
    sec = hw.fast_section
    itcm = sec == ".text_itcm"
    lo, hi = ("__sitcm_text", "__eitcm_text") if itcm else ("__kpd_fast_start", "__kpd_fast_end")
    head = f"{sec} ITCM_OFFSET : AT(__itcm_start - LOAD_OFFSET)" if itcm else f"{sec} : ALIGN({hw.line_size})"
    out = [
        f"/* kperfdiff place: {len(functions)} functions, {total} of {capacity} bytes of {hw.fast_name}",
        f" * (format {FRAGMENT_VERSION}). Build with -ffunction-sections; "
        + (f"replace the {sec} output section of arch/arm/kernel/vmlinux.lds.S with this one. */" if itcm else
           "put this output section first in the kernel's text. */"),
        head,
        "{",
        f"\t{lo} = .;",
    ]
    for f in functions:
        out.append(f"\t*(.text.{f})\t/* {hw.aligned(sizes[f])} bytes */")
    if itcm:
        out += ["\t*(.tcm.text)", "\t*(.tcm.rodata)"]
    out += [
        "\t. = ALIGN(4);",
        f"\t{hi} = .;",
        "}",
        f'ASSERT({hi} - {lo} <= {capacity}, "kperfdiff: {sec} overflows the {capacity}-byte {hw.fast_name}")',
        "",
    ]
    return "\n".join(out)


_FRAG_FN = re.compile(r"^\s*\*\(\.text\.(\S+?)\)")
_FRAG_ASSERT = re.compile(r"ASSERT\(\S+ - \S+ <= (\d+),")
_FRAG_SEC = re.compile(r"^(\.\S+)\s+(?:ITCM_OFFSET|:)")


def parse_linker_fragment(text: str) -> dict:
    """Read a fragment back: section name, functions in order, region size."""
    fns, cap, sec = [], None, None
    for line in text.splitlines():
        m = _FRAG_FN.match(line)
        if m:
            fns.append(m.group(1))
            continue
        m = _FRAG_ASSERT.search(line)
        if m:
            cap = int(m.group(1))
        m = _FRAG_SEC.match(line)
        if m:
            sec = m.group(1)
    if cap is None or sec is None:
        raise InputError("the text is not a kperfdiff linker fragment (no section header or size ASSERT)")
    return {"section": sec, "functions": fns, "capacity": cap}


def annotations(placed: list[str], calls: dict[tuple[str, str], float]) -> list[tuple[str, str]]:
    """(function, "__tcmfunc" | "__tcmlocalfunc") for every placed function."""
    ps = set(placed)
    callers = defaultdict(set)
    for (a, b), c in calls.items():
        if c > 0 and a != b:
            callers[b].add(a)
    out = []
    for f in placed:
        cs = callers.get(f, set())
        local = bool(cs) and cs <= ps
        out.append((f, "__tcmlocalfunc" if local else "__tcmfunc"))
    return out


def annotations_text(ann: list[tuple[str, str]]) -> str:
    lines = ["# kperfdiff place: mark these functions in the kernel source.",
             "# __tcmlocalfunc only where every caller is also in the TCM (callers seen in the profile;",
             "# check the source for others), __tcmfunc (a long call) everywhere else."]
    lines += [f"{tag}\t{f}" for f, tag in ann]
    return "\n".join(lines) + "\n"


def ordering(functions: list[str], self_cycles: dict[str, float], sizes: dict[str, int],
             calls: dict[tuple[str, str], float], *, exclude: set[str] = frozenset(),
             cluster_limit: int = 4096) -> list[str]:
    """Call-graph clustering order (C3/hfsort idea) of the functions not placed."""
    fs = [f for f in functions if f not in exclude and f in sizes]
    fset = set(fs)
    cluster = {f: [f] for f in fs}             # leader -> members in order
    leader = {f: f for f in fs}
    csize = {f: sizes[f] for f in fs}
    cweight = {f: self_cycles.get(f, 0.0) for f in fs}
    best_caller: dict[str, tuple[float, str]] = {}
    for (a, b), c in calls.items():
        if a in fset and b in fset and a != b:
            if c > best_caller.get(b, (0.0, ""))[0]:
                best_caller[b] = (c, a)
    for f in sorted(fs, key=lambda f: (-self_cycles.get(f, 0.0), f)):
        if f not in best_caller:
            continue
        caller = best_caller[f][1]
        lc, lf = leader[caller], leader[f]
        if lc == lf or csize[lc] + csize[lf] > cluster_limit:
            continue
        cluster[lc].extend(cluster[lf])         # the callee's cluster follows its caller's
        for g in cluster[lf]:
            leader[g] = lc
        csize[lc] += csize.pop(lf)
        cweight[lc] += cweight.pop(lf)
        del cluster[lf]
    order = sorted(cluster, key=lambda l: (-cweight[l] / max(1, csize[l]), l))
    out = []
    for l in order:
        if cweight[l] <= 0:
            continue
        out.extend(cluster[l])
    return out


def ordering_text(order: list[str]) -> str:
    return "".join(f + "\n" for f in order)


# -- reports ----------------------------------------------------------------------------
