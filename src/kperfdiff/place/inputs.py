"""Inputs of the placement planner: function sizes, the hardware model,
exclusions and named groups.

Function sizes
    * ``vmlinux`` (any ELF32/ELF64, either byte order): ``STT_FUNC`` symbols of
      ``.symtab`` with their ``st_size`` -- exact.
    * ``System.map`` and ``/proc/kallsyms`` (``addr type name [module]``):
      the size of a text symbol is the gap to the next higher symbol address.
      That is **approximate**: it includes alignment padding and any
      unnamed code or literal pools after the function, and aliases at one
      address share one size. ``SizeTable.approximate`` says so and every
      report repeats it.
    Static functions that share a name are summed: a profile cannot tell them
    apart, and ``*(.text.NAME)`` in a linker script places all of them.
    Both formats are parsed by the native core (``kperfdiff.native``:
    ``elf_functions`` and ``symbol_map``), kperfdiff's one reader of each.

Hardware model
    A TOML file (see ``examples/place/*.toml``) read into :class:`HwModel`.

Exclusions and groups
    ``groups.toml`` beside this module ships the thesis's groups (fork, exec,
    exit, schedule, context switch, thread, tlb, vmalloc, buddy, slub, page
    fault, page reclamation, irq, ramfs, timer) as shell patterns of Linux
    function names, and default exclusion patterns (entry code, code patched
    at run time). ``__init``, ``noinstr``, entry and kprobes text are also
    excluded by address, between the linker's marker symbols
    (``_sinittext``/``_einittext``, ``__noinstr_text_start``/``_end``, ...)
    when the size file has them, and by ELF section name for a vmlinux.
"""
from __future__ import annotations

import bisect
import fnmatch
import functools
import math
import re

from dataclasses import dataclass, field
from pathlib import Path

from kperfdiff.core.errors import InputError
from kperfdiff.core.files import check_input_file, read_toml
from kperfdiff.core.nativecore import core

GROUPS_FILE = Path(__file__).with_name("groups.toml")

# A text-symbol gap larger than this is not a function (end of a section).
MAX_GAP = 1 << 20

# Marker symbols delimiting text that must not move, and why.
EXCLUDED_RANGES = [
    ("_sinittext", "_einittext", "__init"),
    ("__noinstr_text_start", "__noinstr_text_end", "noinstr"),
    ("__cpuidle_text_start", "__cpuidle_text_end", "noinstr"),
    ("__entry_text_start", "__entry_text_end", "entry"),
    ("__irqentry_text_start", "__irqentry_text_end", "entry"),
    ("__softirqentry_text_start", "__softirqentry_text_end", "entry"),
    ("__exception_text_start", "__exception_text_end", "entry"),
    ("__kprobes_text_start", "__kprobes_text_end", "kprobes"),
    ("__idmap_text_start", "__idmap_text_end", "idmap"),
    ("__hyp_text_start", "__hyp_text_end", "hyp"),
]
# ELF output sections whose code must stay where it is.
EXCLUDED_SECTIONS = {
    ".init.text": "__init", ".exit.text": "__init", ".head.text": "entry", ".entry.text": "entry",
    ".noinstr.text": "noinstr", ".vectors": "entry", ".stubs": "entry", ".idmap.text": "idmap",
    ".hyp.text": "hyp", ".tcm.text": "already in TCM",
}


# -- sizes ----------------------------------------------------------------------

@dataclass
class SizeTable:
    """Function name -> size in bytes (and lowest address), from one file."""
    path: str
    kind: str                       # "vmlinux", "System.map", "kallsyms"
    sizes: dict[str, int]
    addrs: dict[str, int]
    approximate: bool
    # name -> reason, for functions inside excluded text (by address or section)
    excluded: dict[str, str] = field(default_factory=dict)

    def note(self) -> str:
        name = Path(self.path).name
        src = self.kind if name == self.kind else f"{self.kind} {name}"
        if self.approximate:
            return f"sizes from {src} are approximate (gaps between symbol addresses, padding included)"
        return f"sizes from {src} (ELF symbol sizes)"


def _regular(path: Path, what: str) -> None:
    """A FIFO or a device named as an input is refused before it is read (it would block or never end)."""
    if path.exists() and not path.is_dir():
        check_input_file(path, what)


def load_sizes(path: str | Path) -> SizeTable:
    """Read function sizes from a vmlinux, System.map or kallsyms file."""
    path = Path(path)
    _regular(path, "size")
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise InputError(f"{path} is a directory; give a System.map, kallsyms or vmlinux file") from None
    except OSError as e:
        raise InputError(f"cannot read the size file {path}: {e.strerror}") from None
    if not data:
        raise InputError(f"the size file {path} is empty")
    if data[:4] == b"\x7fELF":
        return _load_elf(path, data)
    if b"\0" in data[:4096]:
        raise InputError(f"{path} is neither an ELF vmlinux nor a System.map/kallsyms text file")
    return _load_map(path, data)


def _exclude_marked(markers: dict[str, int], addrs: dict[str, int], excluded: dict[str, str]) -> None:
    """Functions between a pair of EXCLUDED_RANGES marker symbols are excluded."""
    for lo, hi, why in EXCLUDED_RANGES:
        if lo in markers and hi in markers and markers[lo] < markers[hi]:
            for name, a in addrs.items():
                if markers[lo] <= a < markers[hi]:
                    excluded.setdefault(name, why)


def _load_map(path: Path, data: bytes) -> SizeTable:
    # lines of `address type name [module]` (4 to 16 hex digits, one type letter
    # or '?'), parsed by the native core; blank lines are skipped, others counted
    try:
        m = core().symbol_map(data)
    except ValueError as e:
        raise InputError(f"{path} cannot be read as a System.map or kallsyms file ({e})") from None
    entries = list(zip(m["addrs"], m["types"], m["names"]))
    if not entries or m["bad"] > len(entries):
        raise InputError(f"{path} is not a System.map or kallsyms file (lines of 'address type name')")
    if all(a == 0 for a, _, _ in entries):
        raise InputError(f"{path} has only zero addresses (kptr_restrict hid them); "
                         f"read /proc/kallsyms as root or use the kernel's System.map")
    kind = "kallsyms" if (m["modules"] or "kallsyms" in path.name) else "System.map"
    addrs_sorted = sorted(set(m["addrs"]))
    markers = {name: a for a, _, name in entries}
    sizes: dict[str, int] = {}
    addrs: dict[str, int] = {}
    for a, t, name in entries:
        if t not in "tTwW":
            continue
        k = bisect.bisect_right(addrs_sorted, a)
        if k >= len(addrs_sorted):
            continue
        gap = addrs_sorted[k] - a
        if gap <= 0 or gap > MAX_GAP:
            continue
        sizes[name] = sizes.get(name, 0) + gap
        addrs[name] = min(a, addrs.get(name, a))
    if not sizes:
        raise InputError(f"{path} names no text symbols (type t or T) whose size can be told")
    excluded: dict[str, str] = {}
    _exclude_marked(markers, addrs, excluded)
    return SizeTable(str(path), kind, sizes, addrs, True, excluded)


def _load_elf(path: Path, data: bytes) -> SizeTable:
    # STT_FUNC symbols of .symtab with a size, read by the native core
    try:
        f = core().elf_functions(data)
    except ValueError as e:
        if str(e) == "no symbol table (stripped)":
            raise InputError(f"{path} has no symbol table (stripped); use an unstripped vmlinux or System.map") from None
        raise InputError(f"{path} is a damaged ELF file ({e})") from None
    sizes: dict[str, int] = {}
    addrs: dict[str, int] = {}
    excluded: dict[str, str] = {}
    for name, value, size, section in zip(f["names"], f["values"], f["sizes"], f["sections"]):
        sizes[name] = sizes.get(name, 0) + size
        addrs[name] = min(value, addrs.get(name, value))
        if section in EXCLUDED_SECTIONS:
            excluded.setdefault(name, EXCLUDED_SECTIONS[section])
    if not sizes:
        raise InputError(f"{path} has no function symbols with sizes")
    _exclude_marked(f["markers"], addrs, excluded)
    return SizeTable(str(path), "vmlinux", sizes, addrs, False, excluded)


# -- byte counts -------------------------------------------------------------------

_BYTES = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmM]i?[bB]?|[bB])?\s*$")


def parse_bytes(text) -> int:
    """'16K', '16KiB', '32768', '1M' -> bytes."""
    if isinstance(text, int):
        return text
    m = _BYTES.match(str(text))
    if not m:
        raise InputError(f"{text!r} is not a size in bytes like 16K, 32768 or 1M")
    v = float(m.group(1))
    unit = (m.group(2) or "").lower()[:1]
    return int(v * {"k": 1024, "m": 1 << 20}.get(unit, 1))


# -- hardware model --------------------------------------------------------------

@dataclass
class HwModel:
    name: str = "unnamed"
    instruction_bytes: int = 4
    function_align: int = 4
    # fast memory (TCM, or a locked/huge-page-backed hot region)
    fast_name: str = "ITCM"
    fast_section: str = ".text_itcm"
    fast_sizes: list[int] = field(default_factory=lambda: [16384])
    fast_reserve: int = 0
    t_fast: float = 1.0             # cycles per instruction fetched from fast memory
    # instruction cache in front of main memory
    icache_size: int = 16384
    line_size: int = 32
    ways: int = 4
    t_cache: float = 1.0            # cycles per instruction fetched from the cache (hit)
    t_fill: float = 25.0            # cycles per line fill from main memory
    # calls between the two memories
    veneer_cycles: float = 3.0      # extra cycles of a far call through a veneer
    split_fills: float = 0.5        # extra line fills per call that crosses the boundary
    call_fills: float = 0.25        # line fills per call+return saved when both ends are fast
    # turning profile weight into cycles and time into fills
    clock_mhz: float = 200.0
    sample_hz: float = 4000.0
    fills_per_kinstr: float = 20.0  # baseline I-cache line fills per 1000 instructions
    path: str = ""

    @property
    def fast_size(self) -> int:
        return self.fast_sizes[0]

    @property
    def cpi_cached(self) -> float:
        """Cycles per instruction fetched from cache-backed memory, fills included."""
        return self.t_cache + self.fills_per_kinstr / 1000.0 * self.t_fill

    @property
    def line_instr(self) -> int:
        return max(1, self.line_size // self.instruction_bytes)

    def aligned(self, size: int) -> int:
        a = self.function_align
        return -(-size // a) * a


# (toml table, key) -> (attribute, kind); kind: "int" > 0, "num" >= 0, "pos" > 0, "str", "sizes"
_HW_KEYS = {
    ("", "name"): ("name", "str"),
    ("", "instruction_bytes"): ("instruction_bytes", "int"),
    ("", "function_align"): ("function_align", "int"),
    ("fast_memory", "name"): ("fast_name", "str"),
    ("fast_memory", "section"): ("fast_section", "str"),
    ("fast_memory", "sizes"): ("fast_sizes", "sizes"),
    ("fast_memory", "size"): ("fast_sizes", "sizes"),
    ("fast_memory", "reserve"): ("fast_reserve", "bytes0"),
    ("fast_memory", "fetch_cycles"): ("t_fast", "num"),
    ("icache", "size"): ("icache_size", "bytes"),
    ("icache", "line"): ("line_size", "bytes"),
    ("icache", "ways"): ("ways", "int"),
    ("icache", "fetch_cycles"): ("t_cache", "num"),
    ("main_memory", "line_fill_cycles"): ("t_fill", "num"),
    ("calls", "veneer_cycles"): ("veneer_cycles", "num"),
    ("calls", "split_fills"): ("split_fills", "num"),
    ("calls", "call_fills"): ("call_fills", "num"),
    ("profile", "clock_mhz"): ("clock_mhz", "pos"),
    ("profile", "sample_hz"): ("sample_hz", "pos"),
    ("profile", "fills_per_kinstr"): ("fills_per_kinstr", "num"),
}


def load_hw(path: str | Path) -> HwModel:
    """Read a hardware model TOML file; every problem is one sentence."""
    path = Path(path)
    return hw_from_dict(read_toml(path, "hardware model"), str(path))


def hw_from_dict(doc: dict, where: str = "hardware model") -> HwModel:
    hw = HwModel(path=where)
    for table, body in doc.items():
        items = body.items() if isinstance(body, dict) else [(None, None)]
        for key, val in items:
            tkey = ("", table) if key is None else (table, key)
            if tkey not in _HW_KEYS:
                shown = table if key is None else f"{table}.{key}"
                raise InputError(f"{where}: unknown key {shown!r} (see examples/place/arm926-tcm.toml)")
            attr, kind = _HW_KEYS[tkey]
            val = body if key is None else val
            setattr(hw, attr, _hw_value(where, ".".join(k for k in tkey if k), val, kind))
    if hw.line_size % hw.instruction_bytes or hw.line_size < hw.instruction_bytes:
        raise InputError(f"{where}: icache.line ({hw.line_size}) must be a multiple of "
                         f"instruction_bytes ({hw.instruction_bytes})")
    if hw.icache_size % (hw.line_size * hw.ways):
        raise InputError(f"{where}: icache.size ({hw.icache_size}) must be a multiple of line x ways "
                         f"({hw.line_size} x {hw.ways})")
    return hw


def _hw_value(where: str, key: str, val, kind: str):
    def fail(want: str):
        return InputError(f"{where}: {key} = {val!r} is not {want}")
    if kind == "str":
        if not isinstance(val, str) or not val:
            raise fail("a non-empty string")
        return val
    if kind == "sizes":
        vals = val if isinstance(val, list) else [val]
        out = []
        for v in vals:
            try:
                b = parse_bytes(v)
            except InputError:
                raise fail("a size like 16K or a list of sizes") from None
            if b <= 0:
                raise fail("a size above zero")
            out.append(b)
        if not out:
            raise fail("a non-empty list of sizes")
        return out
    if kind in ("bytes", "bytes0"):
        try:
            b = parse_bytes(val)
        except InputError:
            raise fail("a size like 16K") from None
        if b < 0 or (kind == "bytes" and b == 0):
            raise fail("a size above zero")
        return b
    if isinstance(val, bool) or not isinstance(val, (int, float)) or not math.isfinite(val):
        raise fail("a number")
    if kind == "int":
        if not isinstance(val, int) or val < 1:
            raise fail("a whole number of 1 or more")
        return val
    if kind == "pos" and val <= 0:
        raise fail("a number above zero")
    if val < 0:
        raise fail("a number of zero or more")
    return float(val)


# -- groups and exclusions -----------------------------------------------------------

@dataclass
class Group:
    name: str
    patterns: list[str]
    description: str = ""
    source: str = "shipped"         # "shipped" or the user's file


def load_groups(extra: list[str | Path] | None = None, *, shipped: bool = True) -> tuple[dict[str, Group], list[str]]:
    """The shipped groups plus the user's (``--groups FILE``) and the default
    exclusion patterns. A user's group replaces a shipped one of the same name."""
    groups: dict[str, Group] = {}
    excludes: list[str] = []
    files = ([GROUPS_FILE] if shipped else []) + [Path(p) for p in (extra or [])]
    for f in files:
        src = "shipped" if f == GROUPS_FILE else str(f)
        doc = read_toml(f, "group file")
        for key in doc:
            if key not in ("groups", "exclude"):
                raise InputError(f"{f}: unknown table [{key}]; a group file has [groups.NAME] and [exclude] tables")
        ex = doc.get("exclude", {})
        if ex:
            pats = ex.get("patterns", []) if isinstance(ex, dict) else None
            if not isinstance(pats, list) or not all(isinstance(p, str) for p in pats):
                raise InputError(f"{f}: [exclude] patterns must be a list of strings")
            excludes.extend(pats)
        gs = doc.get("groups", {})
        if not isinstance(gs, dict):
            raise InputError(f"{f}: 'groups' must be a table of [groups.NAME] tables")
        for name, body in gs.items():
            if not isinstance(body, dict):
                raise InputError(f"{f}: group {name!r} must be a table with a 'functions' list")
            pats = body.get("functions")
            if not isinstance(pats, list) or not pats or not all(isinstance(p, str) and p for p in pats):
                raise InputError(f"{f}: group {name!r} needs a non-empty 'functions' list of names or patterns")
            groups[name] = Group(name, pats, str(body.get("description", "")), src)
    return groups, excludes


def _is_pattern(p: str) -> bool:
    return any(c in p for c in "*?[")


def resolve_group(group: Group, names) -> list[str]:
    """The function names a group's patterns match. A user's group that names
    a function (no wildcard) the size file does not know is an error."""
    names = list(names)
    nameset = set(names)
    out: list[str] = []
    seen = set()
    for p in group.patterns:
        if _is_pattern(p):
            hits = fnmatch.filter(names, p)
        else:
            if p not in nameset:
                if group.source != "shipped":
                    raise InputError(f"group {group.name!r} in {group.source} names {p!r}, "
                                     f"which is not a function in the size file")
                continue
            hits = [p]
        for h in hits:
            if h not in seen:
                seen.add(h)
                out.append(h)
    return out


def match_any(name: str, patterns: list[str]) -> bool:
    """Whether a shell pattern matches the name (case counts), as fnmatchcase."""
    return bool(patterns) and patterns_regex(tuple(patterns))(name) is not None


@functools.lru_cache(maxsize=32)
def patterns_regex(patterns: tuple[str, ...]):
    """One compiled regex for all the patterns: 50,000 names x 50 patterns take a few ms."""
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns)).match


def read_placement(path: str | Path) -> list[str]:
    """A hand-written placement: one function per line; '#' comments; blank lines."""
    path = Path(path)
    _regular(path, "placement")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot read the placement file {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(f"the placement file {path} is not UTF-8 text") from None
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line.split()[0])
    if not out:
        raise InputError(f"the placement file {path} lists no functions (one name per line)")
    return out
