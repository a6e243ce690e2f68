"""Kernel symbol sources checked against the recording they are to name.

A kallsyms (or System.map) names a perf.data's kernel addresses only if it comes from the kernel
build, and for modules the boot, that was recorded; one of another build names them with whatever
function lies at the same address, silently. So before a read's kernel symbols are used, the
symbol source is checked against what the perf.data holds, in this order:

1. the kernel's build id (HEADER_BUILD_ID) against the source's: a vmlinux's own
   (``.note.gnu.build-id``), a kallsyms's ``.buildid`` file beside it (``kperfdiff record`` writes
   one from /sys/kernel/notes), or perf's build-id cache folder it was found in;
2. else the recorded kernel map (the ``[kernel.kallsyms]_text`` MMAP: start and length, which perf
   takes from ``_text``/``_stext`` to ``_etext``) against the source's ``_stext``/``_text`` ..
   ``_etext``/``_end`` (after the KASLR shift the reader applies); a map perf recorded to the end
   of memory (arm64) tells nothing;
3. then the share of kernel samples whose address lands in a symbol: under half is refused.

A loaded module's recorded map must hold that module's symbols in the source (a module loaded
again lies elsewhere). A mismatch is an InputError naming both sides; ``kallsyms_unchecked`` skips
the checks, and the result says so. :func:`check` returns what a diff prints per side
(``Profile.meta["symbols"]``).
"""
from __future__ import annotations

import re
from pathlib import Path

from kperfdiff.core.errors import InputError

MIN_KERNEL_SAMPLES = 20     # fewer kernel samples than this: their share in a symbol tells too little
MIN_IN_SYMBOL = 0.5         # below this share of kernel samples in a symbol, the source is refused
TOP = (1 << 64) - 1
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_NOT_KERNEL_DSOS = {"[guest.kernel]", "[hypervisor]"}
# how every refusal ends
_REMEDY = "give the symbols of that kernel (--kallsyms), or --kallsyms-unchecked to use this one anyway"


def _hex(s) -> int | None:
    try:
        return int(str(s), 16)
    except ValueError:
        return None


def source_build_id(ks: Path) -> str | None:
    """The kernel build id a symbol source is known to belong to: a ``.buildid`` file beside it
    (``kallsyms.buildid`` for ``kallsyms`` or ``kallsyms.gz``), or the build-id folder of perf's
    cache it lies in (``~/.debug/[kernel.kallsyms]/<build id>/kallsyms``); None when unknown."""
    name = ks.name[:-3] if ks.name.endswith(".gz") else ks.name
    for side in (ks.with_name(ks.name + ".buildid"), ks.with_name(name + ".buildid")):
        try:
            text = side.read_text().strip().lower()
        except (OSError, UnicodeDecodeError):
            continue
        if re.fullmatch(r"[0-9a-f]{2,80}", text):
            return text
    if ks.parent.parent.name == "[kernel.kallsyms]" and _HEX40.match(ks.parent.name):
        return ks.parent.name
    return None


def kernel_samples(raw: dict) -> tuple[int, int]:
    """(kernel samples, those of them whose address landed in a symbol), over the file's events."""
    import numpy as np
    names = raw["sym_names"]
    kernel = np.frombuffer(raw["sym_kernel"], dtype=np.uint8).astype(bool)
    dsos = np.frombuffer(raw["sym_dso"], dtype=np.uint32)
    dso_names = raw["dso_names"]
    if len(kernel) != len(names) or len(dsos) != len(names):
        return 0, 0
    host = np.array([d < len(dso_names) and dso_names[d] not in _NOT_KERNEL_DSOS for d in dsos.tolist()], dtype=bool)
    known = np.array([n != "[unknown]" for n in names], dtype=bool)
    total = found = 0
    for ev in raw["events"]:
        c = np.frombuffer(ev["self_count"], dtype=np.uint64)
        if len(c) != len(names):
            continue
        total += int(c[kernel & host].sum())
        found += int(c[kernel & host & known].sum())
    return total, found


def _short(bid: str | None) -> str:
    return bid[:12] if bid else "none recorded"


def _kernel_build_id(h: dict) -> str | None:
    """The kernel build id the recording holds (HEADER_BUILD_ID), None when it has none."""
    return dict(h.get("build_ids") or []).get("[kernel.kallsyms]")


def _recorded(path: Path, h: dict) -> str:
    bid = _kernel_build_id(h)
    rel = h.get("os_release") or "unknown release"
    return f"{path.name} (kernel {rel}, build id {_short(bid)})"


def _span(marks: dict, lo_names, hi_names) -> tuple[str, int, str, int] | None:
    lo = next(((n, marks[n]) for n in lo_names if n in marks), None)
    hi = next(((n, marks[n]) for n in hi_names if n in marks), None)
    return (lo[0], lo[1], hi[0], hi[1]) if lo and hi and lo[1] < hi[1] else None


def _map_check(path: Path, ks: Path, h: dict) -> str | None:
    """The kernel map against the source's text span: a description when they agree, None when
    the map tells nothing; raises when they differ."""
    km = h.get("kernel_map")
    marks = {n: _hex(a) for n, a in h.get("kallsyms_landmarks") or []}
    marks = {n: a for n, a in marks.items() if a is not None}
    ref = str(h.get("kernel_ref_symbol") or "").split("=")[0]
    if not km or len(km) != 3 or ref not in ("_text", "_stext") or not marks:
        return None
    start, length, pgoff = (_hex(x) for x in km)
    if start is None or length is None or pgoff is None:
        return None
    ref_addr = marks.get(ref, marks.get("_stext" if ref == "_text" else "_text"))
    if ref_addr is None:
        return None
    shift = pgoff - ref_addr
    end = start + length
    if end >= TOP or length == 0:
        return None                      # recorded to the end of memory: no length to compare
    for lo_names, hi_names in ((("_text", "_stext"), ("_etext",)), (("_stext", "_text"), ("_etext",)),
                               (("_text", "_stext"), ("_end",))):
        s = _span(marks, lo_names, hi_names)
        if s and (s[1] + shift, s[3] + shift) == (start, end):
            return f"kernel map = {s[0]}..{s[2]}"
    s = _span(marks, ("_text", "_stext"), ("_etext", "_end"))
    if s is None:
        return None
    modules = {(_hex(v.split()[0]) if v.split() else None) for _, v in h.get("module_maps") or []}
    if end in modules:
        return None                      # an older perf ends the map at the next module
    raise InputError(
        f"{ks} is not the kernel {_recorded(path, h)} was recorded on: the recording's kernel map is "
        f"{start:#x}..{end:#x} ({length:#x} bytes) but {ks.name}'s {s[0]}..{s[2]} is {s[1] + shift:#x}.."
        f"{s[3] + shift:#x} ({s[3] - s[1]:#x} bytes); {_REMEDY}")


def _hex_pairs(items) -> list[tuple[str, tuple[int, int]]]:
    """A header's ``(name, "HEX HEX")`` pairs as numbers, those that do not parse left out."""
    out = []
    for name, v in items or []:
        parts = [_hex(x) for x in str(v).split()]
        if len(parts) == 2 and None not in parts:
            out.append((name, (parts[0], parts[1])))
    return out


def _module_check(path: Path, ks: Path, h: dict) -> int:
    """Each recorded module map against the source's symbols of that module; the number checked."""
    spans = dict(_hex_pairs(h.get("kallsyms_modules")))
    checked = 0
    for name, (start, length) in _hex_pairs(h.get("module_maps")):
        if name not in spans:
            continue
        lo, hi = spans[name]
        if not (start <= lo and hi < start + length):
            raise InputError(
                f"{ks} does not match {_recorded(path, h)}: module {name} was loaded at "
                f"{start:#x}..{start + length:#x} when recorded but {ks.name} has its symbols at {lo:#x}..{hi:#x} "
                f"(loaded again, or another boot); {_REMEDY}")
        checked += 1
    return checked


def check(path: Path, ks: Path | None, raw: dict, *, found: str, unchecked: bool = False) -> dict:
    """Check the symbol source ``ks`` a read of ``path`` used (``raw``: the native reader's
    output) against the recording; raise InputError on a mismatch. Returns what to report: the
    source, how it was found (``found``) and matched, the kernel samples and those in a symbol, and
    ``how``, the words a diff's side line shows."""
    h = raw["header"]
    total, in_sym = kernel_samples(raw)
    out = {"source": str(ks) if ks is not None else None, "found": found if ks is not None else None,
           "matched": "none", "kernel_samples": total, "in_symbol": in_sym}
    share = f"{in_sym / total:.0%} of kernel samples in a symbol" if total else "no kernel samples"
    if ks is None:
        out["how"] = "none, kernel addresses unresolved" if total else "none"
        return out
    if unchecked:
        out["matched"] = "unchecked"
        out["how"] = f"unchecked: --kallsyms-unchecked, {share}"
        return out
    rec_bid = _kernel_build_id(h)
    src_bid = h.get("kallsyms_build_id") or source_build_id(ks)
    if rec_bid and src_bid:
        if rec_bid.lower().rstrip("0") != src_bid.rstrip("0"):
            raise InputError(
                f"{ks} is not the kernel {_recorded(path, h)} was recorded on: its build id is {_short(src_bid)}; "
                f"{_REMEDY}")
        modules = _module_check(path, ks, h)
        out["matched"] = "build id"
        out["how"] = ", ".join([f"build id {_short(rec_bid)} match"] + ([f"{modules} module maps"] if modules else [])
                               + [share])
        return out
    how = _map_check(path, ks, h)
    modules = _module_check(path, ks, h)
    if total >= MIN_KERNEL_SAMPLES and in_sym < MIN_IN_SYMBOL * total:
        raise InputError(
            f"{ks} is probably not the kernel {_recorded(path, h)} was recorded on: only {in_sym} of the "
            f"{total} kernel samples land in one of its symbols; {_REMEDY}")
    out["matched"] = "kernel map" if how else "symbols"
    parts = [how or "no kernel map length to compare"]
    if modules:
        parts.append(f"{modules} module maps")
    out["how"] = ", ".join(parts + [share])
    return out
